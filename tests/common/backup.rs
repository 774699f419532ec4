//! `intake backup` / `intake restore` from the command line, and a server on the restored
//! data dir (tests/backup.rs, tests/payload_fidelity.rs).

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use super::{
    LogBuffer, Resp, ServeProcess, TestServer, intake_cmd, new_agent, run_cli, serve_args, sigterm,
    spawn_serve, try_send, wait_with_deadline,
};

pub const CLI_TIMEOUT: Duration = Duration::from_secs(120);

/// `intake backup --to TO` of the running `server`, with the owner's token.
pub fn backup(server: &TestServer, to: &Path) -> Output {
    run_cli(
        intake_cmd().args(["backup", "--to"]).arg(to).args([
            "--server",
            &server.base_url(),
            "--token",
            &server.owner_token,
        ]),
        CLI_TIMEOUT,
    )
}

/// `intake restore --from FROM --data-dir DATA_DIR`, with `--force` if asked.
pub fn restore(from: &Path, data_dir: &Path, force: bool) -> Output {
    let mut cmd = intake_cmd();
    cmd.args(["restore", "--from"])
        .arg(from)
        .arg("--data-dir")
        .arg(data_dir);
    if force {
        cmd.arg("--force");
    }
    run_cli(&mut cmd, CLI_TIMEOUT)
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[track_caller]
pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        stderr(out)
    );
}

/// A server on an existing data dir (no `init`), for the restored data.
pub struct Restored {
    proc: ServeProcess,
    log: LogBuffer,
    agent: ureq::Agent,
}

impl Restored {
    pub fn start(dir: &Path) -> Restored {
        let log = LogBuffer::default();
        let proc = spawn_serve(&serve_args(dir), &[], &log);
        Restored {
            proc,
            log,
            agent: new_agent(Duration::from_secs(30)),
        }
    }

    pub fn get(&self, path: &str, key: &str) -> Resp {
        let url = format!("http://{}{path}", self.proc.addr);
        let auth = format!("Bearer {key}");
        try_send(&self.agent, &url, "GET", &[("Authorization", &auth)], None)
            .unwrap_or_else(|e| panic!("GET {path}: {e}\n{}", self.log.text()))
    }

    pub fn stop(mut self) {
        sigterm(self.proc.pid());
        wait_with_deadline(&mut self.proc.child, Duration::from_secs(30));
    }
}
