//! Export (`GET /api/v1/data/{slug}/export`): NDJSON, JSON and CSV (parsed back by Python's
//! `csv` module), the window, `q` and `order`, one snapshot however slowly it is read, and the
//! key checked again while it runs.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// The payload text of each NDJSON line, as sent on the wire (not re-serialised).
fn lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect()
}

#[test]
fn ndjson_json_and_the_window_order_and_q() {
    let s = TestServer::start();
    let ep = s.create_endpoint("orders", &[]);
    let (slug, key) = (ep.slug.as_str(), ep.sandbox_key.as_str());
    let payloads: Vec<Value> = (0..25)
        .map(|n| json!({ "n": n, "city": if n % 5 == 0 { "Kraków" } else { "Berlin" } }))
        .collect();
    let ids = s.store_all(slug, key, &payloads);
    let r = s.export(slug, key, "");
    assert_status(&r, 200);
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    assert_eq!(
        r.header("content-disposition"),
        Some(format!("attachment; filename=\"{slug}_all.ndjson\"").as_str())
    );
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    let exported = lines(&r.text());
    let exported_ids: Vec<&str> = exported.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(exported_ids, ids, "oldest first, every record");
    for (record, payload) in exported.iter().zip(&payloads) {
        assert_eq!(&record["payload"], payload);
        assert!(record["created_at"].is_string() && record["updated_at"].is_string());
    }
    // Numbers as stored: the line holds the payload text exactly.
    let id = s.create_record(slug, key, &json!({"x": 1}))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let raw = br#"{"price":1.50,"big":12345678901234567890123}"#;
    let r = s.request(
        "PUT",
        &format!("/api/v1/data/{slug}/{id}"),
        &[
            ("Authorization", &format!("Bearer {key}")),
            ("Content-Type", "application/json"),
        ],
        Some(raw),
    );
    assert_status(&r, 202);
    let text = s.export(slug, key, "").text();
    assert!(
        text.contains(r#""payload":{"price":1.50,"big":12345678901234567890123}"#),
        "{text}"
    );

    // One JSON array, newest first, only the records containing "krak" (case-insensitive).
    let r = s.export(slug, key, "?format=json&order=desc&q=KRAK");
    assert_status(&r, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let found: Vec<Value> = r.json().as_array().unwrap().clone();
    let found_n: Vec<i64> = found
        .iter()
        .map(|r| r["payload"]["n"].as_i64().unwrap())
        .collect();
    assert_eq!(found_n, vec![20, 15, 10, 5, 0]);
    // A window that holds nothing, and one after every record: valid, empty answers.
    let r = s.export(slug, key, "?format=json&end=2000-01-01");
    assert_eq!(r.json(), json!([]));
    assert!(
        r.header("content-disposition")
            .unwrap()
            .contains(&format!("{slug}_start_2000-01-01.json"))
    );
    assert_eq!(s.export(slug, key, "?start=2999-01-01").text(), "");
    // Bad parameters: 400 invalid_parameter naming them, as search does.
    for (query, name) in [
        ("?format=xml", "format"),
        ("?order=sideways", "order"),
        ("?fields=a", "fields"),
        ("?start=yesterday", "start"),
        ("?start=2026-12-01&end=2026-11-01", "start"),
        ("?q=ab", "q"),
    ] {
        let r = s.export(slug, key, query);
        assert_error(&r, 400, "invalid_parameter");
        assert!(error_message(&r).contains(name), "{query}: {}", r.text());
    }
}

/// `rows` of CSV text parsed by Python's `csv` module.
fn python_csv(text: &str) -> Vec<Vec<String>> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("export.csv");
    std::fs::write(&path, text).unwrap();
    let script = "import csv, json, sys\n\
                  with open(sys.argv[1], newline='', encoding='utf-8') as f:\n    \
                  print(json.dumps(list(csv.reader(f, strict=True))))";
    let out = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn csv_is_rfc_4180_that_python_reads_back_with_formulas_disarmed() {
    let s = TestServer::start();
    let ep = s.create_endpoint("people", &[]);
    let (slug, key) = (ep.slug.as_str(), ep.sandbox_key.as_str());
    let ids = s.store_all(
        slug,
        key,
        &[
            json!({"name": "Ada", "age": 36, "address": {"city": "London"}}),
            json!({"name": "=HYPERLINK(\"http://x\")", "age": -1.5, "tags": ["a", "b"],
                   "note": "line one\nline \"two\", three"}),
            json!({"email": "+48 600", "name": null, "vip": true}),
        ],
    );
    let r = s.export(slug, key, "?format=csv");
    assert_status(&r, 200);
    assert_eq!(r.header("content-type"), Some("text/csv; charset=utf-8"));
    let text = r.text();
    assert!(!text.starts_with('\u{feff}'), "no BOM");
    assert!(text.ends_with("\r\n") && text.matches("\r\n").count() >= 4);
    let rows = python_csv(&text);
    // Columns: the keys of the newest records first, in first-seen order.
    assert_eq!(
        rows[0],
        [
            "id",
            "created_at",
            "updated_at",
            "email",
            "name",
            "vip",
            "age",
            "tags",
            "note",
            "address"
        ]
    );
    let cells = |row: &Vec<String>| row[3..].to_vec();
    assert_eq!(rows[1][0], ids[0]);
    assert_eq!(
        cells(&rows[1]),
        ["", "Ada", "", "36", "", "", r#"{"city":"London"}"#]
    );
    assert_eq!(
        cells(&rows[2]),
        [
            "",
            "'=HYPERLINK(\"http://x\")",
            "",
            "-1.5",
            r#"["a","b"]"#,
            "line one\nline \"two\", three",
            ""
        ]
    );
    assert_eq!(cells(&rows[3]), ["'+48 600", "", "true", "", "", "", ""]);
    assert_eq!(rows.len(), 4);
    // Fields asked for, dotted into objects.
    let rows = python_csv(
        &s.export(slug, key, "?format=csv&fields=address.city,age")
            .text(),
    );
    assert_eq!(rows[0][3..], ["address.city", "age"]);
    assert_eq!(rows[1][3..], ["London", "36"]);
    assert_eq!(rows[2][3..], ["", "-1.5"]);
}

/// Reads an HTTP/1.1 response's head from `stream`; returns the head and the body bytes read
/// with it.
fn read_head(stream: &mut TcpStream) -> (String, Vec<u8>) {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).expect("read");
        assert!(n > 0, "the connection closed before the head");
        data.extend_from_slice(&buf[..n]);
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).into_owned();
            return (head, data[end + 4..].to_vec());
        }
    }
}

/// Opens an export over a raw connection and reads only its head.
fn open_export(s: &TestServer, slug: &str, key: &str) -> (TcpStream, Vec<u8>) {
    let mut stream = TcpStream::connect(s.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET /api/v1/data/{slug}/export HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n\r\n"
    )
    .unwrap();
    let (head, body) = read_head(&mut stream);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    (stream, body)
}

/// The rest of a chunked body after `start`; whether it ended with its last chunk.
fn read_rest(stream: &mut TcpStream, start: Vec<u8>) -> (Vec<u8>, bool) {
    let mut data = start;
    let mut buf = [0u8; 65536];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => data.extend_from_slice(&buf[..n]),
        }
        if data.ends_with(b"\r\n0\r\n\r\n") {
            return (data, true);
        }
    }
    (data, false)
}

/// The records of a chunked NDJSON body (chunk sizes dropped).
fn dechunk(raw: &[u8]) -> String {
    let mut out = Vec::new();
    let mut rest = raw;
    while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap(), 16)
            .expect("chunk size");
        if size == 0 {
            break;
        }
        let start = line_end + 2;
        out.extend_from_slice(&rest[start..start + size]);
        rest = &rest[start + size + 2..];
    }
    String::from_utf8(out).unwrap()
}

#[test]
fn a_slow_export_answers_from_its_snapshot_and_ends_when_its_key_is_revoked() {
    let s = TestServer::start();
    let ep = s.create_endpoint("bulk", &[]);
    let (slug, key) = (ep.slug.as_str(), ep.sandbox_key.as_str());
    let pad = "p".repeat(900);
    let mut ids = Vec::new();
    for batch in 0..6 {
        let payloads: Vec<Value> = (0..1000)
            .map(|n| json!({ "batch": batch, "n": n, "pad": pad }))
            .collect();
        ids.extend(s.store_all(slug, key, &payloads));
    }

    // A reader that took only the head: a delete and a create made now are not in its answer.
    let (mut stream, start) = open_export(&s, slug, key);
    assert_status(&s.delete_record(slug, key, &ids[10]), 202);
    let late = s.create_record(slug, key, &json!({"late": true}))["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (raw, ended) = read_rest(&mut stream, start);
    assert!(ended, "the export did not end with its last chunk");
    let text = dechunk(&raw);
    let exported: Vec<String> = lines(&text)
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    let differ = exported.iter().zip(&ids).position(|(a, b)| a != b);
    assert!(
        exported.len() == ids.len() && differ.is_none(),
        "not the snapshot of when the export began: {} records exported of {}, first \
         difference at {differ:?}",
        exported.len(),
        ids.len()
    );
    assert!(!text.contains(&late));

    // Another slow reader; the owner rotates the key without a grace period meanwhile: no
    // chunk leaves after that, and the answer is cut (no last chunk).
    let (mut stream, start) = open_export(&s, slug, key);
    let rotated = s.manage(
        "POST",
        &format!("/api/v1/manage/endpoints/{slug}/keys/sandbox/rotate"),
        Some(&json!({ "grace_period_seconds": 0 })),
    );
    assert_status(&rotated, 200);
    let (raw, ended) = read_rest(&mut stream, start);
    assert!(!ended, "an export went on after its key was revoked");
    let text = dechunk(&raw);
    assert!(
        text.lines().count() < ids.len(),
        "the whole export was sent ({} lines)",
        text.lines().count()
    );
    assert_error(&s.export(slug, key, ""), 401, "invalid_api_key");
}

#[test]
fn a_server_runs_four_exports_at_once_and_refuses_a_fifth_for_a_moment() {
    let s = TestServer::start();
    let ep = s.create_endpoint("busy", &[]);
    let (slug, key) = (ep.slug.as_str(), ep.sandbox_key.as_str());
    // More than an export writes ahead and the sockets hold: 20 MB.
    let pad = "q".repeat(1000);
    for batch in 0..20 {
        let payloads: Vec<Value> = (0..1000)
            .map(|n| json!({ "batch": batch, "n": n, "pad": pad }))
            .collect();
        s.store_all(slug, key, &payloads);
    }
    let mut readers: Vec<(TcpStream, Vec<u8>)> =
        (0..4).map(|_| open_export(&s, slug, key)).collect();
    let r = s.export(slug, key, "");
    assert_error(&r, 503, "exports_at_capacity");
    assert_eq!(r.header("retry-after"), Some("5"));
    // One reader finishes: its slot is free again.
    let (mut stream, start) = readers.pop().unwrap();
    let (_, ended) = read_rest(&mut stream, start);
    assert!(ended);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r = s.export(slug, key, "?format=json&start=2999-01-01");
        if r.status == 200 {
            assert_eq!(r.json(), json!([]));
            break;
        }
        assert_error(&r, 503, "exports_at_capacity");
        assert!(
            std::time::Instant::now() < deadline,
            "the slot never came back"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(readers);
}
