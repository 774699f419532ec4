//! `intake export`: the data API's export, byte for byte, into a file or onto a pipe, with
//! the window, `q`, order and CSV fields passed on; progress only on a terminal; refusals and
//! cut answers as errors that leave no file.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// `intake export --server … --slug SLUG ARGS`, the key in INTAKE_API_KEY.
fn export_cmd(server: &str, slug: &str, key: &str, args: &[&str]) -> Command {
    let mut cmd = intake_cmd();
    cmd.args(["export", "--server", server, "--slug", slug])
        .args(args)
        .env("INTAKE_API_KEY", key);
    cmd
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The names of the files in `dir`.
fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn export_writes_the_apis_answer_to_a_file_and_to_a_pipe() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let (slug, key) = (ep.slug.as_str(), ep.sandbox_key.as_str());
    let early: Vec<Value> = (0..20)
        .map(|n| {
            json!({ "n": n, "city": if n % 4 == 0 { "Kraków" } else { "Berlin" },
                         "note": "line one\nline \"two\", three" })
        })
        .collect();
    s.store_all(slug, key, &early);
    std::thread::sleep(Duration::from_millis(20));
    let late: Vec<Value> = (20..30)
        .map(|n| json!({ "n": n, "city": "Oslo", "address": { "zip": n } }))
        .collect();
    let late_ids = s.store_all(slug, key, &late);
    let exported = s.export(slug, key, "");
    let first_late = exported
        .text()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|record| record["id"] == late_ids[0].as_str())
        .unwrap()["created_at"]
        .as_str()
        .unwrap()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let base = s.base_url();

    // Into a file, every record; stderr is a pipe: no progress, nothing at all.
    let path = dir.path().join("orders.ndjson");
    let out = run_cli(
        export_cmd(&base, slug, key, &["--out"]).arg(&path),
        CLI_TIMEOUT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    assert_eq!(std::fs::read(&path).unwrap(), exported.body);
    assert_eq!(files_in(dir.path()), ["orders.ndjson"]);

    // Onto a pipe, with the key as a flag; then each parameter, as the API answers it.
    let out = run_cli(
        intake_cmd().args(["export", "--server", &base, "--slug", slug, "--key", key]),
        CLI_TIMEOUT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
    assert_eq!(out.stdout, exported.body);
    let window = format!("start={}&end=2999-12-31", first_late.replace('+', "%2B"));
    for (args, query) in [
        (vec!["--format", "csv"], "format=csv".to_string()),
        (
            vec![
                "--format",
                "csv",
                "--start",
                &first_late,
                "--end",
                "2999-12-31",
            ],
            format!("format=csv&{window}"),
        ),
        (
            vec![
                "--format",
                "csv",
                "--fields",
                "n,address.zip",
                "--order",
                "desc",
            ],
            "format=csv&fields=n,address.zip&order=desc".to_string(),
        ),
        (
            vec!["--format", "json", "--q", "KRAK"],
            "format=json&q=KRAK".to_string(),
        ),
        (vec!["--end", "2000-01-01"], "end=2000-01-01".to_string()),
    ] {
        let out = run_cli(&mut export_cmd(&base, slug, key, &args), CLI_TIMEOUT);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert!(out.stderr.is_empty(), "{args:?}: {}", stderr(&out));
        let api = s.export(slug, key, &format!("?{query}"));
        assert_status(&api, 200);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            api.text(),
            "{args:?} against ?{query}"
        );
    }
    // The window holds the late records only: a header and 10 rows of CSV.
    let out = run_cli(
        &mut export_cmd(
            &base,
            slug,
            key,
            &["--format", "csv", "--fields", "n", "--start", &first_late],
        ),
        CLI_TIMEOUT,
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(text.matches("\r\n").count(), 1 + late.len(), "{text}");
}

#[test]
fn a_refused_export_exits_1_with_the_servers_error_and_creates_no_file() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    s.store_all(&ep.slug, &ep.sandbox_key, &[json!({"n": 1})]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders.ndjson");
    let wrong_key = "tm_test_notakeyatall000000000000";
    let out = run_cli(
        export_cmd(&s.base_url(), &ep.slug, wrong_key, &["--out"]).arg(&path),
        CLI_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let message = stderr(&out);
    assert!(
        message.contains("401") && message.contains("invalid_api_key"),
        "{message}"
    );
    assert!(
        !message.contains(wrong_key),
        "the key was printed: {message}"
    );
    assert!(out.stdout.is_empty(), "{out:?}");
    assert_eq!(files_in(dir.path()), Vec::<String>::new());
    // A parameter the server refuses: its code and message, naming the parameter.
    let out = run_cli(
        &mut export_cmd(&s.base_url(), &ep.slug, &ep.sandbox_key, &["--q", "ab"]),
        CLI_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let message = stderr(&out);
    assert!(message.contains("invalid_parameter"), "{message}");
    // Nothing listening: says what it could not reach.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let out = run_cli(
        &mut export_cmd(&format!("http://{addr}"), &ep.slug, &ep.sandbox_key, &[]),
        CLI_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("cannot reach"), "{}", stderr(&out));
}

/// A server that answers each of `answers` connections with a chunked 200 carrying `records`
/// and then closes without the last chunk, as intake does when it stops an export midway.
fn cutting_server(answers: usize, records: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for _ in 0..answers {
            let Ok((mut stream, _)) = listener.accept() else {
                return;
            };
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n\
                 Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{records}\r\n",
                records.len()
            );
        }
    });
    format!("http://{addr}")
}

#[test]
fn a_cut_export_exits_1_and_leaves_the_file_as_it_was() {
    let records = "{\"id\":\"rec_1\"}\n{\"id\":\"rec_2\"}\n";
    let server = cutting_server(2, records);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders.ndjson");
    std::fs::write(&path, "an earlier export\n").unwrap();
    let out = run_cli(
        export_cmd(&server, "orders", "tm_test_x", &["--out"]).arg(&path),
        CLI_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let message = stderr(&out);
    assert!(
        message.contains("cut short after 2 records") && message.contains("not written"),
        "{message}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "an earlier export\n"
    );
    assert_eq!(files_in(dir.path()), ["orders.ndjson"]);
    // Onto a pipe, what came is passed on, and the error says it is only part.
    let out = run_cli(
        &mut export_cmd(&server, "orders", "tm_test_x", &[]),
        CLI_TIMEOUT,
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), records);
    assert!(stderr(&out).contains("only part of it"), "{}", stderr(&out));
}

#[test]
fn an_export_cut_by_a_revoked_key_exits_1() {
    let s = TestServer::start();
    let ep = s.create_endpoint("bulk", &[]);
    let (slug, key) = (ep.slug.as_str(), ep.sandbox_key.as_str());
    // 32 MB: more than the socket buffers and the pipe hold, whatever the kernel allows them.
    let pad = "p".repeat(4000);
    for batch in 0..8 {
        let payloads: Vec<Value> = (0..1000)
            .map(|n| json!({ "batch": batch, "n": n, "pad": pad }))
            .collect();
        s.store_all(slug, key, &payloads);
    }
    // Nobody reads the export's pipe yet: the export waits for its reader when the key goes.
    let mut child = export_cmd(&s.base_url(), slug, key, &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    let rotated = s.manage(
        "POST",
        &format!("/api/v1/manage/endpoints/{slug}/keys/sandbox/rotate"),
        Some(&json!({ "grace_period_seconds": 0 })),
    );
    assert_status(&rotated, 200);
    let mut received = first.to_vec();
    stdout.read_to_end(&mut received).unwrap();
    let mut message = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut message)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{message}");
    assert!(message.contains("cut short"), "{message}");
    let lines = received.iter().filter(|&&b| b == b'\n').count();
    assert!(lines < 8000, "the whole export arrived ({lines} lines)");
}

#[test]
fn on_a_terminal_progress_is_one_line_that_ends_as_a_summary() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let payloads: Vec<Value> = (0..30).map(|n| json!({ "n": n })).collect();
    s.store_all(&ep.slug, &ep.sandbox_key, &payloads);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders.csv");
    // script(1) runs the command on a pseudo-terminal and copies what it shows.
    let command = format!(
        "{} export --server {} --slug {} --format csv --out {}",
        bin(),
        s.base_url(),
        ep.slug,
        path.display()
    );
    let out = run_cli(
        with_test_env(Command::new(external_program(
            "SCRIPT",
            "/usr/bin/script",
            "bsdutils",
        )))
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env("INTAKE_API_KEY", &ep.sandbox_key),
        CLI_TIMEOUT,
    );
    assert!(out.status.success(), "{out:?}");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("\r\x1b[2Kintake: "),
        "no progress line: {shown:?}"
    );
    assert!(
        shown.contains("\r\x1b[2Kintake: exported 30 records (")
            && shown.contains(&format!("to {} in ", path.display())),
        "{shown:?}"
    );
    assert!(!shown.contains(&ep.sandbox_key), "{shown:?}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        s.export(&ep.slug, &ep.sandbox_key, "?format=csv").body
    );
}
