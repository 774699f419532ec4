//! Backups: `intake backup` of a server under write load, `intake restore` into a new data
//! dir (every write acknowledged before the backup began is served, and search works on the
//! rebuilt index), restore's refusals, and SIGUSR1 backups with rotation; on PostgreSQL, the
//! refusals that point to pg_dump instead.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::backup::*;
use common::*;
use serde_json::json;

#[test]
fn backup_under_write_load_restores_every_acknowledged_write_and_search() {
    if redb_only("backup archives hold redb's file") {
        return;
    }
    let mut server = TestServer::start();
    let endpoint = server.create_endpoint("Orders", &[]);
    let (slug, key) = (endpoint.slug.clone(), endpoint.sandbox_key.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicUsize::new(0));
    let url = format!("{}/api/v1/data/{slug}", server.base_url());
    // Each writer keeps (when its 202 arrived, record id).
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (stop, count, url, key) = (stop.clone(), count.clone(), url.clone(), key.clone());
            thread::spawn(move || {
                let agent = new_agent(Duration::from_secs(30));
                let auth = format!("Bearer {key}");
                let mut acked = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let body = json!({ "writer": w, "n": n, "note": format!("parcel-{w}-{n}") });
                    let bytes = serde_json::to_vec(&body).unwrap();
                    let r = try_send(
                        &agent,
                        &url,
                        "POST",
                        &[
                            ("Authorization", &auth),
                            ("Content-Type", "application/json"),
                        ],
                        Some(&bytes),
                    )
                    .expect("create");
                    assert_eq!(r.status, 202, "{}", r.describe());
                    acked.push((Instant::now(), r.json()["id"].as_str().unwrap().to_string()));
                    count.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
                (w, acked)
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while count.load(Ordering::Relaxed) < 40 {
        assert!(Instant::now() < deadline, "the writers are stuck");
        thread::sleep(Duration::from_millis(10));
    }
    let archives = tempfile::tempdir().unwrap();
    let archive = archives.path().join("backup.tar");
    let began = Instant::now();
    let out = backup(&server, &archive);
    let ended = Instant::now();
    assert_success(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Backup written to"));
    // It holds the key-encryption key: private to its owner, like the data dir.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&archive).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // Every writer goes on past the backup: the load spans it.
    let goal = count.load(Ordering::Relaxed) + 40;
    while count.load(Ordering::Relaxed) < goal {
        thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let per_writer: Vec<(usize, Vec<(Instant, String)>)> =
        writers.into_iter().map(|w| w.join().unwrap()).collect();
    for (w, acked) in &per_writer {
        assert!(
            acked.first().is_some_and(|(at, _)| *at < began)
                && acked.last().is_some_and(|(at, _)| *at > ended),
            "writer {w} did not write across the backup"
        );
    }
    let acked: Vec<(Instant, String)> = per_writer.into_iter().flat_map(|(_, a)| a).collect();
    let before: Vec<&String> = acked
        .iter()
        .filter(|(at, _)| *at < began)
        .map(|(_, id)| id)
        .collect();
    assert!(before.len() >= 40, "only {} writes before", before.len());
    server.sigterm_and_wait();

    // Members as documented: manifest, key, store; the key is the data dir's.
    let listing = Command::new("tar").arg("-tf").arg(&archive).output();
    if let Ok(listing) = listing {
        let names = String::from_utf8_lossy(&listing.stdout).into_owned();
        assert_eq!(
            names.lines().collect::<Vec<_>>(),
            ["intake-backup.json", "master.key", "intake.redb"]
        );
    }

    let target = tempfile::tempdir().unwrap();
    let data = target.path().join("restored");
    let out = restore(&archive, &data, false);
    assert_success(&out);
    assert_eq!(
        std::fs::read(data.join("master.key")).unwrap(),
        std::fs::read(server.dir.path().join("master.key")).unwrap()
    );
    assert!(!data.join("search").exists());
    let restored = Restored::start(&data);
    for id in &before {
        let r = restored.get(&format!("/api/v1/data/{slug}/{id}"), &key);
        assert_eq!(
            r.status,
            200,
            "{id} acknowledged before the backup: {}",
            r.describe()
        );
    }
    // The index was rebuilt from the store: search finds an early and a late record.
    assert!(data.join("search").exists());
    let first = &acked.iter().find(|(_, id)| id == before[0]).unwrap().1;
    let note = restored
        .get(&format!("/api/v1/data/{slug}/{first}"), &key)
        .json()["payload"]["note"]
        .as_str()
        .unwrap()
        .to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = restored.get(
            &format!("/api/v1/data/{slug}/search?q={}", url_encode(&note)),
            &key,
        );
        assert_eq!(r.status, 200, "{}", r.describe());
        let ids: Vec<String> = r.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|rec| rec["id"].as_str().unwrap().to_string())
            .collect();
        if ids.contains(first) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "search never found {first}: {ids:?}"
        );
        thread::sleep(Duration::from_millis(100));
    }
    // The account came along: the owner token works.
    let r = restored.get("/api/v1/manage/endpoints", &server.owner_token);
    assert_eq!(r.status, 200, "{}", r.describe());
    restored.stop();
}

#[test]
fn restore_refuses_a_running_or_non_empty_data_dir_unless_forced() {
    if redb_only("backup archives hold redb's file") {
        return;
    }
    let mut server = TestServer::start();
    let endpoint = server.create_endpoint("Orders", &[]);
    let (slug, key) = (endpoint.slug.clone(), endpoint.sandbox_key.clone());
    let kept = server.create_record(&slug, &key, &json!({"n": 1}));
    let archives = tempfile::tempdir().unwrap();
    let archive = archives.path().join("backup.tar");
    // Only the server's owner takes backups; the CLI reports the server's refusal.
    assert_error(
        &server.request("POST", "/api/v1/manage/backups", &[], None),
        401,
        "missing_token",
    );
    let out = run_cli(
        intake_cmd().args(["backup", "--to"]).arg(&archive).args([
            "--server",
            &server.base_url(),
            "--token",
            "tok_wrong",
        ]),
        CLI_TIMEOUT,
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("401"), "{}", stderr(&out));
    assert!(!archive.exists());
    assert_success(&backup(&server, &archive));
    let later = server.create_record(&slug, &key, &json!({"n": 2}));

    let out = restore(&archive, server.dir.path(), true);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("a server is running"),
        "{}",
        stderr(&out)
    );

    server.sigterm_and_wait();
    let out = restore(&archive, server.dir.path(), false);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is not empty"), "{}", stderr(&out));
    assert!(stderr(&out).contains("--force"), "{}", stderr(&out));

    let not_backup = server.dir.path().join("intake.toml.bak");
    std::fs::write(&not_backup, "hello").unwrap();
    let empty = tempfile::tempdir().unwrap();
    let out = restore(&not_backup, empty.path(), false);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("not an intake backup") || stderr(&out).contains("cannot read"),
        "{}",
        stderr(&out)
    );

    // Forced: the data files are replaced, other files stay.
    let out = restore(&archive, server.dir.path(), true);
    assert_success(&out);
    assert!(not_backup.exists());
    server.restart();
    let id = |v: &serde_json::Value| v["id"].as_str().unwrap().to_string();
    assert_status(&server.get_record(&slug, &key, &id(&kept)), 200);
    assert_status(&server.get_record(&slug, &key, &id(&later)), 404);
}

#[test]
fn sigusr1_backups_keep_the_newest_n() {
    if redb_only("backup archives hold redb's file") {
        return;
    }
    let backups = tempfile::tempdir().unwrap();
    let dir = backups.path().join("nightly");
    let server = TestServer::start_with_config(&format!(
        "[backup]\ndir = \"{}\"\nkeep = 2\n",
        dir.display()
    ));
    let mut written: Vec<PathBuf> = Vec::new();
    for _ in 0..4 {
        let from = server.log.len();
        let st = Command::new("kill")
            .args(["-USR1", &server.pid().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let line = server
            .log
            .wait_for(
                from,
                Duration::from_secs(60),
                |l| l.contains("backup written to") || l.contains("backup failed"),
                || false,
            )
            .unwrap_or_else(|| panic!("no backup logged\n{}", server.log.text()));
        let path = line
            .split("backup written to ")
            .nth(1)
            .unwrap_or_else(|| panic!("{line}"));
        written.push(PathBuf::from(path.trim()));
    }
    let mut present: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    present.sort();
    assert_eq!(present, written[2..], "{}", server.log.text());
    // Each is a whole backup that restores.
    let target = tempfile::tempdir().unwrap();
    assert_success(&restore(&present[1], &target.path().join("d"), false));
}

/// PostgreSQL's counterpart of the tests above: the store is the database's to back up, and
/// every way of asking intake for a backup, or a restore, says so and names pg_dump.
#[test]
fn on_postgres_backups_and_restores_are_refused_naming_pg_dump() {
    if postgres_only("a redb store takes backup archives (the tests above)") {
        return;
    }
    let backups = tempfile::tempdir().unwrap();
    let dir = backups.path().join("nightly");
    let mut server = TestServer::start_with_config(&format!(
        "[backup]\ndir = \"{}\"\nkeep = 2\n",
        dir.display()
    ));
    let r = server.manage("POST", "/api/v1/manage/backups", None);
    assert_error(&r, 409, "conflict");
    assert!(error_message(&r).contains("pg_dump"), "{}", r.describe());

    let archive = backups.path().join("backup.tar");
    let out = backup(&server, &archive);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("409") && stderr(&out).contains("pg_dump"),
        "{}",
        stderr(&out)
    );
    assert!(!archive.exists());

    let from = server.log.len();
    let st = Command::new("kill")
        .args(["-USR1", &server.pid().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let line = server
        .log
        .wait_for(
            from,
            Duration::from_secs(60),
            |l| l.contains("backup written to") || l.contains("backup failed"),
            || false,
        )
        .unwrap_or_else(|| panic!("no backup logged\n{}", server.log.text()));
    assert!(
        line.contains("backup failed") && line.contains("pg_dump"),
        "{line}"
    );
    let written: Vec<_> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(written.is_empty(), "{written:?}");

    // The server still serves, and a restore into its data dir (stopped) changes nothing.
    let endpoint = server.create_endpoint("Orders", &[]);
    let kept = server.create_record(&endpoint.slug, &endpoint.sandbox_key, &json!({"n": 1}));
    server.sigterm_and_wait();
    let key = std::fs::read(server.dir.path().join("master.key")).unwrap();
    let out = restore(&archive, server.dir.path(), true);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("pg_restore"), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(server.dir.path().join("master.key")).unwrap(),
        key
    );
    server.restart();
    let id = kept["id"].as_str().unwrap();
    assert_status(
        &server.get_record(&endpoint.slug, &endpoint.sandbox_key, id),
        200,
    );
}

#[test]
fn a_backup_download_breaks_off_when_its_token_is_revoked() {
    use std::io::{Read, Write};

    if redb_only("backup archives hold redb's file") {
        return;
    }
    let server = TestServer::start();
    let endpoint = server.create_endpoint("Bulky", &[]);
    // About 24 MB of payloads that barely compress: far more than the sockets buffer, so the
    // download is still running when the token is revoked.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    for n in 0..250 {
        let noise: String = (0..6_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                format!("{:016x}", state)
            })
            .collect::<String>()
            .chars()
            .take(95_000)
            .collect();
        let r = server.post_record(
            &endpoint.slug,
            &endpoint.sandbox_key,
            &json!({"n": n, "noise": noise}),
        );
        assert_status(&r, 202);
    }
    let r = server.manage(
        "POST",
        "/api/v1/manage/tokens",
        Some(&json!({"name": "backups"})),
    );
    assert_status(&r, 201);
    let (id, token) = (
        r.json()["id"].as_str().unwrap().to_string(),
        r.json()["token"].as_str().unwrap().to_string(),
    );

    // Reads a download's raw response over its own connection: `limit` bytes, or all of it.
    let download = |token: &str, limit: Option<usize>| {
        let mut conn = std::net::TcpStream::connect(server.addr()).expect("connect");
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            conn,
            "POST /api/v1/manage/backups HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n",
            server.addr()
        )
        .unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0; 64 * 1024];
        while limit.is_none_or(|limit| got.len() < limit) {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        (conn, got)
    };
    let (mut conn, started) = download(&token, Some(64 * 1024));
    assert!(
        started.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&started[..200.min(started.len())])
    );
    let r = server.manage("DELETE", &format!("/api/v1/manage/tokens/{id}"), None);
    assert_status(&r, 200);
    let mut rest = Vec::new();
    let _ = conn.read_to_end(&mut rest);
    let broken = [started, rest].concat();
    // The chunked body never got its last chunk: the download broke off, far from its end.
    let (_, whole) = download(&server.owner_token, None);
    assert!(
        whole.ends_with(b"\r\n0\r\n\r\n"),
        "a full download ends with its last chunk"
    );
    assert!(
        !broken.ends_with(b"\r\n0\r\n\r\n"),
        "the revoked token's download completed"
    );
    assert!(
        broken.len() < whole.len() / 2,
        "{} of {} bytes sent after the revocation",
        broken.len(),
        whole.len()
    );
}
