//! Deployment: `intake --version`, `intake check`, configuration from `INTAKE_*` variables,
//! the systemd readiness notification, the unit file (`systemd-analyze verify`, skipped when
//! systemd is not installed) and `packaging/install.sh` into a DESTDIR.

use crate::common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

const CLI_TIMEOUT: Duration = Duration::from_secs(30);

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs `intake` with `args` and extra environment variables.
fn intake(args: &[&str], envs: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = intake_cmd();
    cmd.args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    run_cli(&mut cmd, CLI_TIMEOUT)
}

fn write(dir: &Path, name: &str, body: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    path.display().to_string()
}

#[test]
fn version_names_the_commit_and_the_build() {
    let out = intake(&["--version"], &[]);
    assert!(out.status.success());
    let line = text(&out.stdout);
    let expected = format!("intake {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(line.starts_with(&expected), "{line}");
    let commit = line[expected.len()..].split(';').next().unwrap();
    let git = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match git {
        Ok(git) if git.status.success() => assert_eq!(commit, text(&git.stdout).trim()),
        _ => assert_eq!(commit, "unknown"),
    }
    assert!(
        line.contains("x86_64") || line.contains("aarch64"),
        "{line}"
    );
    assert!(line.contains("tls=rustls+ring"), "{line}");
    assert!(
        line.contains("static") || line.contains("dynamic"),
        "{line}"
    );
}

#[test]
fn check_prints_the_effective_config_with_secrets_masked() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "intake.toml",
        "listen = \"127.0.0.1:9000\"\n\
         [storage]\ncache_mb = 16\n\
         [operations]\nmetrics_token = \"metrics-s3cret\"\n\
         [smtp]\nhost = \"smtp.example.com\"\nfrom = \"intake@example.com\"\n\
         username = \"mailer\"\npassword = \"hunter2-smtp\"\n",
    );
    let out = intake(&["check", "--config", &config], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    for secret in ["metrics-s3cret", "hunter2-smtp"] {
        assert!(!printed.contains(secret), "{printed}");
    }
    assert!(printed.contains("metrics_token = \"***\""), "{printed}");
    assert!(printed.contains("password = \"***\""), "{printed}");
    assert!(printed.contains("username = \"mailer\""), "{printed}");
    assert!(printed.contains("cache_mb = 16"), "{printed}");
    assert!(printed.contains("listen = \"127.0.0.1:9000\""), "{printed}");
    // Defaults are shown too, in the config's own syntax.
    assert!(printed.contains("session_ttl = \"1d\""), "{printed}");
    assert!(printed.contains("[backup]\nkeep = 7"), "{printed}");
    // What it prints is itself a valid config.
    let again = write(dir.path(), "printed.toml", &printed);
    let out = intake(&["check", "--config", &again], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn check_shows_the_database_hosts_with_only_the_password_masked() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "intake.toml",
        "[storage]\nbackend = \"postgres\"\n\
         [storage.postgres]\n\
         url = \"postgresql://intake:pg-s3cret@db1:5432,db2:5433/intake?target_session_attrs=read-write\"\n",
    );
    let out = intake(&["check", "--config", &config], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    assert!(!printed.contains("pg-s3cret"), "{printed}");
    assert!(
        printed.contains(
            "url = \"postgresql://intake:***@db1:5432,db2:5433/intake?target_session_attrs=read-write\""
        ),
        "{printed}"
    );
    assert!(printed.contains("request_timeout = \"2s\""), "{printed}");
    // The key/value form, from the environment.
    let out = intake(
        &["check", "--config", &config],
        &[(
            "INTAKE_STORAGE__POSTGRES__URL",
            "host=db1,db2 port=5432,5433 user=intake password=pg-s3cret dbname=intake",
        )],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    assert!(!printed.contains("pg-s3cret"), "{printed}");
    assert!(
        printed.contains(
            "url = \"host=db1,db2 port=5432,5433 user=intake password=*** dbname=intake\""
        ),
        "{printed}"
    );
}

#[test]
fn check_refuses_bad_configs_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (body, key) in [
        ("lisen = \"127.0.0.1:1\"\n", "lisen"),
        ("[webhooks]\nworkers = 0\n", "webhooks.workers"),
        ("[backup]\nkeep = 0\n", "backup.keep"),
        ("[backup]\nkept = 3\n", "kept"),
        ("[storage]\ncache_mb = \"lots\"\n", "cache_mb"),
    ] {
        let config = write(dir.path(), "bad.toml", body);
        let out = intake(&["check", "--config", &config], &[]);
        assert!(!out.status.success(), "{body}");
        let err = text(&out.stderr);
        assert!(err.contains(key), "{body}: {err}");
        assert!(out.stdout.is_empty(), "{body}");
    }
    let out = intake(&["check", "--config", "/nonexistent/intake.toml"], &[]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("/nonexistent/intake.toml"));
}

#[test]
fn environment_overrides_the_file_and_flags_override_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "intake.toml",
        "listen = \"127.0.0.1:9000\"\ndata_dir = \"/from/file\"\n[storage]\ncache_mb = 16\n",
    );
    let out = intake(
        &["check", "--config", &config, "--data-dir", "/from/flag"],
        &[
            ("INTAKE_LISTEN", "127.0.0.1:9100"),
            ("INTAKE_DATA_DIR", "/from/env"),
            ("INTAKE_STORAGE__CACHE_MB", "32"),
            ("INTAKE_WEBHOOKS__ALLOW_PRIVATE_TARGETS", "true"),
            ("INTAKE_WEBHOOKS__ALLOWED_CIDRS", "[\"10.0.0.0/8\"]"),
            ("INTAKE_SMTP__HOST", "smtp.example.com"),
            ("INTAKE_SMTP__FROM", "Intake <intake@example.com>"),
            ("INTAKE_SMTP__USERNAME", "mailer"),
            // Quoted: a string that looks like a number.
            ("INTAKE_SMTP__PASSWORD", "\"123456\""),
            (
                "INTAKE_TOKEN",
                "used by `intake endpoint`, not a config key",
            ),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let printed = text(&out.stdout);
    for expected in [
        "listen = \"127.0.0.1:9100\"",
        "data_dir = \"/from/flag\"",
        "cache_mb = 32",
        "allow_private_targets = true",
        "allowed_cidrs = [\"10.0.0.0/8\"]",
        "host = \"smtp.example.com\"",
        "password = \"***\"",
    ] {
        assert!(printed.contains(expected), "{expected}\n{printed}");
    }
    assert!(!printed.contains("123456"), "{printed}");

    for (variable, value, says) in [
        ("INTAKE_LISEN", "127.0.0.1:1", "names no config key"),
        ("INTAKE_SMTP__HOSTNAME", "x", "names no config key"),
        ("INTAKE_STORAGE__CACHE__MB", "1", "names no config key"),
        ("INTAKE_STORAGE__CACHE_MB", "lots", "cache_mb"),
    ] {
        let out = intake(&["check", "--config", &config], &[(variable, value)]);
        assert!(!out.status.success(), "{variable}");
        let err = text(&out.stderr);
        assert!(err.contains(says), "{variable}: {err}");
        if says == "names no config key" {
            assert!(err.contains(variable), "{variable}: {err}");
        }
    }
}

#[test]
fn serve_reads_the_environment_and_refuses_unknown_variables() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_env = data.display().to_string();
    let log = LogBuffer::default();
    let mut proc = spawn_serve(
        &[],
        &[
            ("INTAKE_LISTEN", "127.0.0.1:0"),
            ("INTAKE_DATA_DIR", &data_env),
        ],
        &log,
    );
    // The data dir the environment named is the one in use (on either backend its key is
    // there; on redb its store too).
    assert!(data.join("master.key").exists());
    if !on_postgres() {
        assert!(data.join("intake.redb").exists());
    }
    assert_eq!(healthz(proc.addr), 200);
    sigterm(proc.pid());
    wait_with_deadline(&mut proc.child, Duration::from_secs(30));

    let out = intake(
        &["serve", "--data-dir", &data_env, "--listen", "127.0.0.1:0"],
        &[("INTAKE_DATADIR", "/elsewhere")],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("INTAKE_DATADIR"),
        "{}",
        text(&out.stderr)
    );
}

/// Binds a datagram socket (at a path, or abstract when `name` starts with `@`) and returns
/// it with the `NOTIFY_SOCKET` value that reaches it.
fn notify_socket(dir: &Path, abstract_name: bool) -> (UnixDatagram, String) {
    if abstract_name {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("intake-test-notify-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        (UnixDatagram::bind_addr(&addr).unwrap(), format!("@{name}"))
    } else {
        let path = dir.join("notify.sock");
        (
            UnixDatagram::bind(&path).unwrap(),
            path.display().to_string(),
        )
    }
}

fn receive(socket: &UnixDatagram) -> String {
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut buf = [0u8; 512];
    let n = socket.recv(&mut buf).expect("a notification within 30 s");
    text(&buf[..n])
}

#[test]
fn systemd_is_notified_when_listening_reloading_and_stopping() {
    for abstract_name in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let (socket, address) = notify_socket(dir.path(), abstract_name);
        let log = LogBuffer::default();
        let mut proc = spawn_serve(&serve_args(&data), &[("NOTIFY_SOCKET", &address)], &log);
        assert_eq!(receive(&socket), "READY=1", "{address}");
        // Ready means serving: the listen line came first and requests are answered.
        assert!(log.text().contains("listening on http://"));
        assert_eq!(healthz(proc.addr), 200);
        let st = Command::new("kill")
            .args(["-HUP", &proc.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        assert_eq!(receive(&socket), "RELOADING=1");
        assert_eq!(receive(&socket), "READY=1");
        sigterm(proc.pid());
        assert_eq!(receive(&socket), "STOPPING=1");
        assert!(wait_with_deadline(&mut proc.child, Duration::from_secs(30)).success());
    }
}

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[test]
fn the_unit_file_verifies() {
    let has_systemd = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_systemd {
        eprintln!("systemd-analyze is not installed: unit not verified (.ci/run installs it)");
        return;
    }
    // `verify` checks that ExecStart's binary exists: point it at the one under test.
    let unit = std::fs::read_to_string(repo("packaging/systemd/intake.service")).unwrap();
    assert!(unit.contains("Type=notify"));
    assert!(unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    // Exit 1 (invalid config, damaged data file) is not restarted in a loop.
    assert!(unit.contains("\nRestartPreventExitStatus=1\n"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("intake.service");
    std::fs::write(&path, unit.replace("/usr/bin/intake", bin())).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn install_sh_fills_a_destdir_and_keeps_an_existing_config() {
    let root = tempfile::tempdir().unwrap();
    let run = || {
        Command::new("sh")
            .arg(repo("packaging/install.sh"))
            .arg(bin())
            .env("DESTDIR", root.path())
            .env("PREFIX", "/usr/local")
            .output()
            .unwrap()
    };
    let out = run();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Next steps"));
    let at = |p: &str| root.path().join(p);
    for file in [
        "usr/local/bin/intake",
        "etc/intake/intake.toml",
        "etc/systemd/system/intake.service",
        "etc/sysusers.d/intake.conf",
        "etc/tmpfiles.d/intake.conf",
    ] {
        assert!(at(file).is_file(), "{file}");
    }
    assert!(at("var/lib/intake").is_dir());
    let unit = std::fs::read_to_string(at("etc/systemd/system/intake.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/local/bin/intake serve --config /etc/intake/intake.toml")
    );
    // The installed config is valid as shipped.
    let config = at("etc/intake/intake.toml").display().to_string();
    let out = intake(&["check", "--config", &config], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("data_dir = \"/var/lib/intake\""));

    std::fs::write(at("etc/intake/intake.toml"), "listen = \"127.0.0.1:1\"\n").unwrap();
    let out = run();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Kept the existing"));
    assert_eq!(
        std::fs::read_to_string(at("etc/intake/intake.toml")).unwrap(),
        "listen = \"127.0.0.1:1\"\n"
    );
}

/// Status of `GET /healthz` on a server spawned by the test.
fn healthz(addr: std::net::SocketAddr) -> u16 {
    let agent = new_agent(Duration::from_secs(10));
    try_send(&agent, &format!("http://{addr}/healthz"), "GET", &[], None)
        .expect("GET /healthz")
        .status
}
