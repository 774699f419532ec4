//! Command line: `init`, `serve` (config file, hints, logging, SIGTERM) and
//! the `endpoint create/list` client commands, and `account reset-password`.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

const CLI_TIMEOUT: Duration = Duration::from_secs(30);

fn write_config(dir: &Path, body: &str) -> std::path::PathBuf {
    let p = dir.join("intake-test.toml");
    std::fs::write(&p, body).unwrap();
    p
}

/// Runs `serve` expecting it to refuse to start; returns its stderr.
fn serve_expect_refusal(args: &[&std::ffi::OsStr]) -> String {
    let out = run_cli(intake_cmd().arg("serve").args(args), CLI_TIMEOUT);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "serve should fail, exited {:?}; stderr: {stderr}",
        out.status
    );
    stderr
}

fn token_works(base: &str, token: &str) -> u16 {
    let agent = new_agent(Duration::from_secs(10));
    let auth = format!("Bearer {token}");
    try_send(
        &agent,
        &format!("{base}/api/v1/manage/endpoints"),
        "GET",
        &[("Authorization", &auth)],
        None,
    )
    .expect("request")
    .status
}

/// Whether `line` has a duration like `1.234ms`, `850us`, `850µs` or `0.01s`.
fn has_latency(line: &str) -> bool {
    let b: Vec<char> = line.chars().collect();
    (1..b.len()).any(|i| {
        b[i - 1].is_ascii_digit() && {
            let rest: String = b[i..].iter().take(3).collect();
            let unit_end = |n: usize| b.get(i + n).is_none_or(|c| !c.is_alphanumeric());
            (rest.starts_with("ms") && unit_end(2))
                || ((rest.starts_with("us") || rest.starts_with("µs")) && unit_end(2))
                || (rest.starts_with('s') && unit_end(1))
        }
    })
}

#[test]
fn init_json_prints_one_object_with_owner_email_password_and_token() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_cli(
        intake_cmd()
            .args([
                "init",
                "--owner-email",
                "someone@example.org",
                "--json",
                "--data-dir",
            ])
            .arg(dir.path()),
        CLI_TIMEOUT,
    );
    assert!(
        out.status.success(),
        "{:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not exactly one JSON value ({e}): {stdout:?}"));
    let obj = v.as_object().expect("a JSON object");
    assert_eq!(obj["owner_email"], "someone@example.org");
    for k in ["password", "token"] {
        let s = obj[k]
            .as_str()
            .unwrap_or_else(|| panic!("{k} is not a string: {v}"));
        assert!(s.len() >= 8, "{k} too short: {s:?}");
    }
    assert_ne!(obj["password"], obj["token"]);

    // The printed token authenticates against a server on that data dir.
    let log = LogBuffer::default();
    let mut p = spawn_serve(&serve_args(dir.path()), &[], &log);
    let base = format!("http://{}", p.addr);
    assert_eq!(token_works(&base, obj["token"].as_str().unwrap()), 200);
    assert_eq!(token_works(&base, obj["password"].as_str().unwrap()), 401);
    let _ = p.child.kill();
    let _ = p.child.wait();
}

#[test]
fn init_twice_is_refused_and_the_first_token_still_works() {
    let dir = tempfile::tempdir().unwrap();
    let first = init_data_dir(dir.path(), OWNER_EMAIL);
    let out = run_cli(
        intake_cmd()
            .args([
                "init",
                "--owner-email",
                "other@example.com",
                "--json",
                "--data-dir",
            ])
            .arg(dir.path()),
        CLI_TIMEOUT,
    );
    assert!(!out.status.success(), "second init must fail");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.trim().is_empty(),
        "second init must explain on stderr"
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();

    let log = LogBuffer::default();
    let mut p = spawn_serve(&serve_args(dir.path()), &[], &log);
    let base = format!("http://{}", p.addr);
    assert_eq!(
        token_works(&base, &first.token),
        200,
        "first token must still work"
    );
    // If the failed run printed anything token-like, it must not work.
    if let Ok(v) = serde_json::from_str::<Value>(stdout.trim()) {
        if let Some(t) = v["token"].as_str() {
            assert_eq!(
                token_works(&base, t),
                401,
                "second init minted a working token"
            );
        }
    }
    let _ = p.child.kill();
    let _ = p.child.wait();
}

#[test]
fn serve_without_owner_starts_and_logs_the_init_hint() {
    let dir = tempfile::tempdir().unwrap();
    let log = LogBuffer::default();
    let mut p = spawn_serve(&serve_args(dir.path()), &[], &log);
    let hint = log.wait_for(
        0,
        Duration::from_secs(10),
        |l| l.contains("intake init"),
        || false,
    );
    assert!(
        hint.is_some(),
        "no `intake init` hint in log:\n{}",
        log.text()
    );
    // It does serve: an unknown route answers with a JSON 404.
    let agent = new_agent(Duration::from_secs(10));
    let r = try_send(&agent, &format!("http://{}/nope", p.addr), "GET", &[], None).unwrap();
    assert_error(&r, 404, "route_not_found");
    let _ = p.child.kill();
    let _ = p.child.wait();
}

#[test]
fn unknown_config_key_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    init_data_dir(dir.path(), OWNER_EMAIL);
    let cfg = write_config(
        dir.path(),
        &format!("lisen = \"x\"\ndata_dir = '{}'\n", dir.path().display()),
    );
    let stderr = serve_expect_refusal(&["--config".as_ref(), cfg.as_os_str()]);
    assert!(
        stderr.contains("lisen"),
        "stderr must name the key `lisen`: {stderr}"
    );

    let cfg = write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = '{}'\n[request_log]\nretention = \"14d\"\nkeep_forever = true\n",
            dir.path().display()
        ),
    );
    let stderr = serve_expect_refusal(&["--config".as_ref(), cfg.as_os_str()]);
    assert!(
        stderr.contains("keep_forever"),
        "stderr must name the key: {stderr}"
    );
}

#[test]
fn bad_config_values_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    init_data_dir(dir.path(), OWNER_EMAIL);
    let d = dir.path().display();
    let cases = [
        (format!("listen = 5\ndata_dir = '{d}'\n"), "listen"),
        (
            format!("listen = \"not an address\"\ndata_dir = '{d}'\n"),
            "listen",
        ),
        (
            "listen = \"127.0.0.1:0\"\ndata_dir = 7\n".to_string(),
            "data_dir",
        ),
        (
            format!(
                "listen = \"127.0.0.1:0\"\ndata_dir = '{d}'\n[request_log]\nretention = \"forever\"\n"
            ),
            "retention",
        ),
        (
            format!("listen = \"127.0.0.1:0\"\ndata_dir = '{d}'\n[request_log]\nretention = 14\n"),
            "retention",
        ),
    ];
    for (body, key) in cases {
        let cfg = write_config(dir.path(), &body);
        let stderr = serve_expect_refusal(&["--config".as_ref(), cfg.as_os_str()]);
        assert!(
            stderr.contains(key),
            "config {body:?}: stderr must name `{key}`: {stderr}"
        );
    }
}

#[test]
fn config_file_supplies_listen_data_dir_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let init = init_data_dir(dir.path(), OWNER_EMAIL);
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        cfg_dir.path(),
        &format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = '{}'\n\n[request_log]\nretention = \"14d\"\n",
            dir.path().display()
        ),
    );
    let log = LogBuffer::default();
    let mut p = spawn_serve(&["--config".as_ref(), cfg.as_os_str()], &[], &log);
    assert_eq!(p.addr.ip().to_string(), "127.0.0.1");
    // The owner from the configured data dir is known.
    assert_eq!(token_works(&format!("http://{}", p.addr), &init.token), 200);
    sigterm(p.pid());
    let st = wait_with_deadline(&mut p.child, Duration::from_secs(20));
    assert_eq!(st.code(), Some(0), "SIGTERM must exit 0");
    // A background thread writes the log; the last line before the exit still gets out.
    let last = log.wait_for(
        0,
        Duration::from_secs(5),
        |l| l.contains("shutdown complete"),
        || false,
    );
    assert!(last.is_some(), "no final log line:\n{}", log.text());
}

#[test]
fn command_line_data_dir_overrides_the_config_file() {
    let from_config = tempfile::tempdir().unwrap();
    let from_cli = tempfile::tempdir().unwrap();
    let config_owner = init_data_dir(from_config.path(), OWNER_EMAIL);
    let cli_owner = init_data_dir(from_cli.path(), OWNER_EMAIL);
    let cfg = write_config(
        from_config.path(),
        &format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = '{}'\n",
            from_config.path().display()
        ),
    );
    let log = LogBuffer::default();
    let mut p = spawn_serve(
        &[
            "--config".as_ref(),
            cfg.as_os_str(),
            "--data-dir".as_ref(),
            from_cli.path().as_os_str(),
        ],
        &[],
        &log,
    );
    let base = format!("http://{}", p.addr);
    assert_eq!(token_works(&base, &cli_owner.token), 200);
    assert_eq!(token_works(&base, &config_owner.token), 401);
    let _ = p.child.kill();
    let _ = p.child.wait();
}

#[test]
fn sigterm_on_an_idle_server_exits_with_code_0() {
    let mut s = TestServer::start();
    s.create_endpoint("orders", &[]);
    let st = s.sigterm_and_wait();
    assert_eq!(st.code(), Some(0), "exit status {st:?}\n{}", s.log.text());
}

#[test]
fn endpoint_create_and_list_via_cli_talk_to_the_server() {
    let s = TestServer::start();
    let base = s.base_url();
    let out = run_cli(
        intake_cmd().args([
            "endpoint",
            "create",
            "CLI Orders",
            "--description",
            "made by the cli",
            "--required-field",
            "sku",
            "--required-field",
            "qty",
            "--server",
            &base,
            "--token",
            &s.owner_token,
        ]),
        CLI_TIMEOUT,
    );
    assert!(
        out.status.success(),
        "create failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "create stdout not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(created["name"], "CLI Orders");
    assert_eq!(created["description"], "made by the cli");
    assert_eq!(created["required_fields"], json!(["sku", "qty"]));
    let slug = created["slug"].as_str().expect("slug").to_string();
    // The server really has it.
    let got = s.manage("GET", &format!("/api/v1/manage/endpoints/{slug}"), None);
    assert_status(&got, 200);
    assert_eq!(got.json()["name"], "CLI Orders");

    // list, with the token from INTAKE_TOKEN.
    let out = run_cli(
        intake_cmd()
            .args(["endpoint", "list", "--server", &base])
            .env("INTAKE_TOKEN", &s.owner_token),
        CLI_TIMEOUT,
    );
    assert!(
        out.status.success(),
        "list failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "list stdout not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let data = listed["data"].as_array().expect("{\"data\": [...]}");
    assert_eq!(data.len(), 1);
    assert_eq!(data[0]["slug"], slug.as_str());
}

#[test]
fn endpoint_cli_with_a_wrong_token_fails_and_creates_nothing() {
    let s = TestServer::start();
    let out = run_cli(
        intake_cmd().args([
            "endpoint",
            "create",
            "nope",
            "--server",
            &s.base_url(),
            "--token",
            "wrong-token",
        ]),
        CLI_TIMEOUT,
    );
    assert!(!out.status.success(), "create with a wrong token must fail");
    assert!(
        !out.stderr.is_empty(),
        "failure must be explained on stderr"
    );
    let out = run_cli(
        intake_cmd()
            .args(["endpoint", "list", "--server", &s.base_url()])
            .env("INTAKE_TOKEN", "wrong-token"),
        CLI_TIMEOUT,
    );
    assert!(!out.status.success(), "list with a wrong token must fail");
    assert_eq!(
        s.manage("GET", "/api/v1/manage/endpoints", None).json()["data"],
        json!([])
    );
}

#[test]
fn server_log_has_one_line_per_request_and_never_a_key_token_password_or_payload() {
    let mut s = TestServer::start();
    let marker = "sEcReT-PaYlOaD-91b2";
    let ep = s.create_endpoint("orders", &["email"]);
    s.deploy(&ep.slug);
    let post = s.post_record(&ep.slug, &ep.sandbox_key, &json!({"email": marker}));
    assert_status(&post, 202);
    let id = post.json()["id"].as_str().unwrap().to_string();
    let get = s.get_record(&ep.slug, &ep.sandbox_key, &id);
    assert_status(&get, 200);
    assert_status(
        &s.put_record(
            &ep.slug,
            &ep.sandbox_key,
            &id,
            &json!({"email": marker, "v": 2}),
        ),
        202,
    );
    assert_status(
        &s.post_record(&ep.slug, &ep.production_key, &json!({"email": marker})),
        202,
    );
    let bad = s.post_record(&ep.slug, &ep.sandbox_key, &json!({"nope": marker}));
    assert_error(&bad, 400, "missing_required_field");
    let bogus_key = "tm_test_BOGUSKEY123456789";
    assert_error(
        &s.post_record(&ep.slug, bogus_key, &json!({"email": marker})),
        401,
        "invalid_api_key",
    );
    let wrong_token = "WRONGTOKEN-abcdef123456";
    let r = s.manage_with(
        "GET",
        "/api/v1/manage/endpoints",
        Some(&format!("Bearer {wrong_token}")),
        None,
    );
    assert_error(&r, 401, "invalid_token");
    let idem = "IDEMKEY-secretish-4242";
    let r = s.request(
        "POST",
        &format!("/api/v1/data/{}", ep.slug),
        &[
            ("Authorization", &format!("Bearer {}", ep.sandbox_key)),
            ("Content-Type", "application/json"),
            ("Idempotency-Key", idem),
        ],
        Some(format!("{{\"email\":\"{marker}\"}}").as_bytes()),
    );
    assert_status(&r, 202);
    assert_status(&s.delete_record(&ep.slug, &ep.sandbox_key, &id), 202);
    // CLI call too.
    let out = run_cli(
        intake_cmd().args([
            "endpoint",
            "list",
            "--server",
            &s.base_url(),
            "--token",
            &s.owner_token,
        ]),
        CLI_TIMEOUT,
    );
    assert!(out.status.success());

    // The POST's request line is in the log with method, template, status, id.
    let rid = post.request_id();
    let line = s
        .log
        .wait_for(0, Duration::from_secs(5), |l| l.contains(&rid), || false)
        .unwrap_or_else(|| panic!("no log line with request id {rid}:\n{}", s.log.text()));
    assert!(line.contains("POST"), "{line}");
    assert!(has_latency(&line), "no latency in request line: {line}");
    assert!(
        line.contains("/api/v1/data/{slug}"),
        "path template missing: {line}"
    );
    assert!(line.contains("202"), "{line}");
    let get_rid = get.request_id();
    let line = s
        .log
        .wait_for(
            0,
            Duration::from_secs(5),
            |l| l.contains(&get_rid),
            || false,
        )
        .unwrap_or_else(|| panic!("no log line with request id {get_rid}:\n{}", s.log.text()));
    assert!(
        line.contains("GET") && line.contains("200") && line.contains("/api/v1/data/{slug}/{"),
        "{line}"
    );
    assert_eq!(
        s.log.lines().iter().filter(|l| l.contains(&rid)).count(),
        1,
        "exactly one log line per request"
    );

    let st = s.sigterm_and_wait();
    assert_eq!(st.code(), Some(0));
    let text = s.log.text();
    let secrets = [
        ("owner token", s.owner_token.as_str()),
        ("password", s.password.as_str()),
        ("sandbox key", ep.sandbox_key.as_str()),
        ("production key", ep.production_key.as_str()),
        ("sandbox key body", &ep.sandbox_key["tm_test_".len()..]),
        (
            "production key body",
            &ep.production_key["tm_live_".len()..],
        ),
        ("bogus key", bogus_key),
        ("wrong token", wrong_token),
        ("payload", marker),
    ];
    for (what, secret) in secrets {
        assert!(
            !text.contains(secret),
            "server log contains the {what} {secret:?}:\n{text}"
        );
    }
}

/// The variables build.rs gives rustc (`cargo:rustc-env=NAME=VALUE` in its output file).
/// Cargo sets them in the environment of every program it runs, so `cargo run -- serve`
/// starts the server with them.
fn build_script_variables() -> Vec<(String, String)> {
    let output = Path::new(env!("OUT_DIR"))
        .parent()
        .expect("OUT_DIR has a parent")
        .join("output");
    let text = std::fs::read_to_string(&output)
        .unwrap_or_else(|e| panic!("read the build script's output {}: {e}", output.display()));
    let vars: Vec<(String, String)> = text
        .lines()
        .filter_map(|l| {
            l.strip_prefix("cargo:rustc-env=")
                .or_else(|| l.strip_prefix("cargo::rustc-env="))
        })
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert!(
        !vars.is_empty(),
        "no rustc-env lines in {}",
        output.display()
    );
    vars
}

#[test]
fn serve_starts_in_the_environment_cargo_run_gives_it() {
    // Regression: `cargo run --release -- serve` on a fresh clone exited at once with
    // "INTAKE_BUILD_FEATURES: names no config key".
    let vars = build_script_variables();
    let envs: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let dir = tempfile::tempdir().unwrap();
    let log = LogBuffer::default();
    let mut p = spawn_serve(&serve_args(dir.path()), &envs, &log);
    let agent = new_agent(Duration::from_secs(10));
    let r = try_send(
        &agent,
        &format!("http://{}/healthz", p.addr),
        "GET",
        &[],
        None,
    )
    .unwrap();
    assert_status(&r, 200);
    sigterm(p.pid());
    let st = wait_with_deadline(&mut p.child, Duration::from_secs(30));
    assert_eq!(st.code(), Some(0), "exit status {st:?}\n{}", log.text());
}

#[test]
fn a_damaged_data_file_is_a_clean_error_naming_the_file_and_the_remedy() {
    if redb_only("it damages intake.redb") {
        return;
    }
    // Regression: redb panicked on the damaged pages (exit 101), and under systemd the
    // service restarted in a loop.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    init_data_dir(&data, OWNER_EMAIL);
    let file = data.join("intake.redb");
    let mut bytes = std::fs::read(&file).unwrap();
    // Every page after redb's header overwritten.
    for byte in bytes.iter_mut().skip(4096) {
        *byte = 0x5a;
    }
    std::fs::write(&file, &bytes).unwrap();
    for command in ["serve", "init"] {
        let mut cmd = intake_cmd();
        cmd.arg(command).arg("--data-dir").arg(&data);
        if command == "init" {
            cmd.args(["--owner-email", OWNER_EMAIL]);
        } else {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        let out = run_cli(&mut cmd, CLI_TIMEOUT);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command}: {stderr}");
        assert!(
            stderr.contains(&format!("{} is damaged", file.display()))
                && stderr.contains("intake restore --from"),
            "{command}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{command}: {stderr}");
    }
    assert_eq!(
        std::fs::read(&file).unwrap(),
        bytes,
        "the damaged file was changed"
    );
}

/// `intake compact` gives back what deleted records left in the store file: refused while the
/// server runs (nothing changed), then on the stopped server's data dir the file shrinks and
/// the records that remain read back the same after a restart.
#[test]
fn compact_shrinks_the_store_of_a_stopped_server_and_keeps_its_records() {
    if redb_only("compacts redb's files") {
        return;
    }
    let mut s = TestServer::start();
    let ep = s.create_endpoint("compact", &[]);
    let pad = "x".repeat(20_000);
    let ids: Vec<String> = (0..200)
        .map(|n| {
            let record = s.create_record(&ep.slug, &ep.sandbox_key, &json!({"n": n, "pad": pad}));
            record["id"].as_str().expect("id").to_string()
        })
        .collect();
    // The first 190 go: the pages of the last 10, written after them, keep the end of the
    // file in use, so the space is freed inside the file where only compaction returns it.
    for id in &ids[..190] {
        let path = format!("/api/v1/data/{}/{id}", ep.slug);
        assert_status(&s.data("DELETE", &path, &ep.sandbox_key, None), 202);
    }
    let dir = s.data_dir();
    let compact = || {
        run_cli(
            intake_cmd().arg("compact").arg("--data-dir").arg(&dir),
            CLI_TIMEOUT,
        )
    };

    let store = dir.join("intake.redb");
    let size = || std::fs::metadata(&store).expect("intake.redb").len();
    let running = size();
    let out = compact();
    assert!(!out.status.success(), "compacted under a running server");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("stop the server first"), "{stderr}");
    assert_eq!(size(), running, "the refused compaction changed the file");

    let st = s.sigterm_and_wait();
    assert_eq!(st.code(), Some(0));
    let before = size();
    let out = compact();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("intake.redb"), "{stdout}");
    let after = size();
    // Not `after <= before`: when the deletes happen to free the end of the file, redb cuts it
    // off at their commit, and such a file can be smaller than a freshly written one (seen in
    // CI: 225,280 -> 450,560 bytes). What compaction promises is a file the size of what it
    // holds (10 records) whatever was freed inside it (6.5 MB of it in most runs).
    assert!(
        after < 1_500_000,
        "4 MB of 4.2 MB deleted, yet {before} -> {after} bytes"
    );

    s.restart();
    let (listed, _) = s.list_all(&ep.slug, &ep.sandbox_key, 30);
    let mut kept: Vec<&str> = listed.iter().filter_map(|r| r["id"].as_str()).collect();
    kept.sort_unstable();
    let mut expected: Vec<&str> = ids[190..].iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(kept, expected);
    for r in &listed {
        assert_eq!(r["payload"]["pad"], json!(pad));
    }
}

#[test]
fn health_exits_0_while_the_server_answers_and_1_when_nothing_does() {
    let s = TestServer::start();
    let base = s.base_url();
    let port = base.rsplit(':').next().unwrap();
    // Ready once its search index is built, a moment after it listens.
    assert_eq!(s.ready_status_within(Duration::from_secs(30)), 200);
    for args in [vec!["health"], vec!["health", "--ready"]] {
        let out = run_cli(
            intake_cmd().args(&args).env("INTAKE_SERVER", &base),
            CLI_TIMEOUT,
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert!(stdout.contains("\"ok\""), "{args:?}: {stdout}");
        // No --server: the address `serve` would listen on, the wildcard asked on loopback.
        let out = run_cli(
            intake_cmd()
                .args(&args)
                .env("INTAKE_LISTEN", format!("0.0.0.0:{port}")),
            CLI_TIMEOUT,
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert!(stdout.contains("\"ok\""), "{args:?}: {stdout}");
    }
    // A port nothing listens on: bound, then closed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let out = run_cli(
        intake_cmd().args([
            "health",
            "--server",
            &format!("http://{addr}"),
            "--timeout",
            "2",
        ]),
        CLI_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot reach"), "{stderr}");
}

#[test]
fn bash_completion_completes_the_commands_and_their_flags() {
    let out = run_cli(intake_cmd().args(["completions", "bash"]), CLI_TIMEOUT);
    assert!(out.status.success(), "{out:?}");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("intake.bash");
    std::fs::write(&script, &out.stdout).unwrap();
    // What bash's completion machinery does on TAB: set COMP_WORDS/COMP_CWORD, call the
    // function `complete -F` registered, read COMPREPLY.
    let complete = |words: &str| -> String {
        let program = format!(
            "source '{}'; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}; \
             $(complete -p intake | sed -E 's/.*-F ([^ ]+).*/\\1/') intake \"${{COMP_WORDS[-1]}}\" \"${{COMP_WORDS[-2]}}\"; \
             echo \"${{COMPREPLY[*]}}\"",
            script.display()
        );
        let out = run_cli(
            std::process::Command::new("bash").args(["-c", &program]),
            CLI_TIMEOUT,
        );
        assert!(out.status.success(), "{words}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let commands = complete("intake ''");
    for command in ["serve", "init", "health", "completions", "man"] {
        assert!(
            commands.split(' ').any(|c| c == command),
            "{command} not in {commands}"
        );
    }
    assert_eq!(complete("intake serve --data-d"), "--data-dir");
    let shells = complete("intake completions ''");
    for shell in ["bash", "zsh", "fish"] {
        assert!(
            shells.split(' ').any(|s| s == shell),
            "{shell} not in {shells}"
        );
    }
}

#[test]
fn every_shell_gets_a_completion_script_naming_the_commands() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run_cli(intake_cmd().args(["completions", shell]), CLI_TIMEOUT);
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(
            script.contains("serve") && script.contains("data-dir"),
            "{shell}: {script}"
        );
    }
    let out = run_cli(intake_cmd().args(["completions", "tcsh"]), CLI_TIMEOUT);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn account_reset_password_prints_a_one_time_link_that_sets_a_new_password() {
    let dir = tempfile::tempdir().unwrap();
    let init = init_data_dir(dir.path(), OWNER_EMAIL);
    let cfg = write_config(
        dir.path(),
        &format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = '{}'\npublic_url = \"https://intake.example.com\"\n",
            dir.path().display()
        ),
    );
    let reset = |email: &str| {
        run_cli(
            intake_cmd()
                .args(["account", "reset-password", email, "--config"])
                .arg(&cfg),
            CLI_TIMEOUT,
        )
    };
    let unknown = reset("nobody@example.com");
    assert!(!unknown.status.success());
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        stderr.contains("No account has the address nobody@example.com."),
        "{stderr}"
    );

    let out = reset(OWNER_EMAIL);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let link = stdout.trim();
    let token = link
        .strip_prefix("https://intake.example.com/dashboard/password-reset/")
        .unwrap_or_else(|| panic!("not a link under public_url: {stdout}"));
    assert!(token.starts_with("ipr_") && !token.contains(char::is_whitespace));
    assert!(String::from_utf8_lossy(&out.stderr).contains("works once, for 30 minutes"));

    let log = LogBuffer::default();
    let mut p = spawn_serve(&["--config".as_ref(), cfg.as_os_str()], &[], &log);
    let base = format!("http://{}", p.addr);
    let agent = new_agent(Duration::from_secs(10));
    let complete = |password: &str| {
        try_send_json(
            &agent,
            &format!("{base}/api/v1/auth/password-reset/complete"),
            "POST",
            &[],
            Some(&json!({ "token": token, "new_password": password })),
        )
        .expect("request")
    };
    assert_eq!(complete("the-operators-new-password").status, 200);
    assert_error(
        &complete("yet-another-password"),
        410,
        "password_reset_link_invalid",
    );
    let login = |password: &str| {
        try_send_json(
            &agent,
            &format!("{base}/api/v1/auth/login"),
            "POST",
            &[],
            Some(&json!({ "email": OWNER_EMAIL, "password": password })),
        )
        .expect("request")
        .status
    };
    assert_eq!(login("the-operators-new-password"), 200);
    assert_eq!(login(&init.password), 401);
    let _ = p.child.kill();
    let _ = p.child.wait();
}
