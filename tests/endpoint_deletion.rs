//! Deleting an endpoint: `DELETE /api/v1/manage/endpoints/{slug}` (owner only).
//!
//! On an in-process server (its store inspected while stopped):
//! - at once: the endpoint is gone from calls and lists (404 `endpoint_not_found`), every key
//!   (default, rotated in its grace period, production, collaboration) gets 401, invitation
//!   links 404, a second delete 404; collaborators get 403 `owner_only` and may not read the
//!   audit log, the owner still reads it with its final `endpoint.deleted` entry; the name is
//!   free again, the slug is never given again;
//! - in the background: the records of both environments, their change-stream events,
//!   deliveries and attempts, Idempotency-Key claims, usage counts, keys, collaborators,
//!   invitations, webhook subscriptions and secrets are gone from the store, its request log
//!   is empty, a search of its partitions finds nothing, and the other endpoint's data (and
//!   search results) is untouched;
//! - a deletion committed while no purge ran (the server stopped right after it) is purged
//!   after the next start;
//! - on redb, the purged payloads stay in `intake.redb` only, and after `intake compact` in no
//!   file of the data dir (the old in-place compaction left some in free pages, and the payload
//!   dictionary kept pieces of them).

use crate::common;

use std::time::{Duration, Instant};

use common::in_process::{InProcessServer, at};
use common::*;
use intake::core::crypto::secret_hash;
use intake::domain::endpoint_deletion;
use intake::domain::endpoints::Endpoints;
use intake::domain::search;
use intake::store::request_log::EntryFilter;
use intake::store::{Environment, Partition, Store};
use serde_json::json;

const CONFIG: &str = "[webhooks]\nallowed_cidrs = [\"127.0.0.0/8\"]\n";

fn in_process() -> InProcessServer {
    InProcessServer::start(CONFIG, at("2026-01-01T00:00:00Z"))
}

fn endpoint_path(slug: &str) -> String {
    format!("/api/v1/manage/endpoints/{slug}")
}

fn as_member(s: &ServerClient, method: &str, path: &str, cookie: &str) -> Resp {
    let cookie = format!("intake_session={cookie}");
    s.request_json(method, path, &[("Cookie", cookie.as_str())], None)
}

/// Waits until `ready` holds, re-checking every 50 ms for at most 20 s.
#[track_caller]
fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "still waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The id of the endpoint `slug` (deleted or not), read from the stopped server's store.
fn endpoint_id(store: &dyn Store, slug: &str) -> u64 {
    store
        .read()
        .unwrap()
        .endpoint_id_by_slug(slug)
        .unwrap()
        .expect("the slug stays taken")
}

/// Stops the server, checks whether the endpoint's purge finished, and serves again; until it
/// has (each restart also checks that the purge resumes).
fn wait_purged(s: &mut InProcessServer, slug: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let purged = s.stopped(|handles, _| {
            let store = handles.store.as_ref();
            let id = endpoint_id(store, slug);
            store.read().unwrap().endpoint(id).unwrap().unwrap().purged
        });
        s.resume();
        if purged {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the purge of {slug} never finished"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Every row of the endpoint's partitions that the purge removes, counted in the store.
fn leftovers(store: &dyn Store, endpoint_id: u64, deliveries: &[u64]) -> Vec<String> {
    let snapshot = store.read().unwrap();
    let mut left = Vec::new();
    for environment in [Environment::Sandbox, Environment::Production] {
        let p = Partition::new(endpoint_id, environment);
        if snapshot.record_partitions().unwrap().contains(&p) {
            left.push(format!("records of {p}"));
        }
        if store.event_partitions().unwrap().contains(&p) {
            left.push(format!("events of {p}"));
        }
        if snapshot.webhook_secret(p).unwrap().is_some() {
            left.push(format!("webhook secret of {p}"));
        }
        if snapshot.webhook_settings(p).unwrap().is_some() {
            left.push(format!("subscriptions of {p}"));
        }
        if !store.monthly_calls(p, 0..=u32::MAX).unwrap().is_empty() {
            left.push(format!("usage of {p}"));
        }
    }
    for id in deliveries {
        if snapshot.delivery(*id).unwrap().is_some() {
            left.push(format!("delivery {id}"));
        }
        if !snapshot.delivery_attempts(*id).unwrap().is_empty() {
            left.push(format!("attempts of delivery {id}"));
        }
    }
    if !snapshot.collaborators(endpoint_id).unwrap().is_empty() {
        left.push("collaborators".into());
    }
    if !snapshot.invitations(endpoint_id).unwrap().is_empty() {
        left.push("invitations".into());
    }
    left
}

/// How many request log entries the endpoint `id`'s partitions hold (at most a page each).
fn logged_requests(s: &mut InProcessServer, id: u64) -> usize {
    let count = s.stopped_request_log(|log| {
        [Environment::Sandbox, Environment::Production]
            .into_iter()
            .map(|environment| {
                let p = Partition::new(id, environment);
                let page = log
                    .requests_page(p, None, 100, &EntryFilter::default())
                    .unwrap();
                page.entries.len()
            })
            .sum()
    });
    s.resume();
    count
}

#[test]
fn a_deleted_endpoint_is_gone_at_once_and_its_data_is_purged() {
    let mut s = in_process();
    let ep = s.create_endpoint("Orders", &[]);
    let other = s.create_endpoint("Leads", &[]);
    let slug = ep.slug.clone();
    let member = add_collaborator(&s, &slug, "ada@example.com", &["read"]);
    let r = s.manage(
        "POST",
        &invitations_path(&slug),
        Some(&json!({ "email": "bob@example.com", "permissions": ["read"] })),
    );
    assert_status(&r, 201);
    let invitation_url = r.json()["accept_url"].as_str().unwrap().to_string();
    let token = invitation_url.rsplit('/').next().unwrap().to_string();

    // Data of both environments, webhooks failing (deliveries and attempts), a rotated key.
    let r = s.manage(
        "PUT",
        &format!("/api/v1/manage/endpoints/{slug}/webhooks/sandbox"),
        Some(&json!({ "url": "http://127.0.0.1:9/hook" })),
    );
    assert_status(&r, 200);
    for n in 0..25 {
        let r = s.data_with(
            "POST",
            &format!("/api/v1/data/{slug}"),
            &ep.sandbox_key,
            &[("Idempotency-Key", &format!("k{n}"))],
            Some(&json!({ "animal": "zebra", "n": n })),
        );
        assert_status(&r, 202);
    }
    s.create_record(
        &other.slug,
        &other.sandbox_key,
        &json!({ "animal": "zebra" }),
    );
    s.deploy(&slug);
    s.create_record(&slug, &ep.production_key, &json!({ "animal": "zebra" }));
    let r = s.manage(
        "POST",
        &format!("/api/v1/manage/endpoints/{slug}/keys/sandbox/rotate"),
        Some(&json!({ "grace_period_seconds": 3600 })),
    );
    assert_status(&r, 200);
    let rotated = r.json()["key"].as_str().unwrap().to_string();
    let search = format!("/api/v1/data/{slug}/search?q=zebra&limit=30");
    wait_until("the search index", || {
        let r = s.data("GET", &search, &rotated, None);
        r.status == 200 && r.json()["data"].as_array().is_some_and(|d| d.len() == 25)
    });
    let mut deliveries: Vec<u64> = Vec::new();
    wait_until("attempted deliveries", || {
        let r = s.manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{slug}/deliveries?limit=100"),
            None,
        );
        let data = r.json()["data"].as_array().cloned().unwrap_or_default();
        deliveries = data.iter().filter_map(|d| d["id"].as_u64()).collect();
        deliveries.len() == 25 && data.iter().all(|d| d["attempts"].as_u64() >= Some(1))
    });

    s.wait_request_log(&slug, "sandbox", Duration::from_secs(10), |d| d.len() >= 25);

    // Only the owner deletes.
    let r = as_member(&s, "DELETE", &endpoint_path(&slug), &member.cookie);
    assert_error(&r, 403, "owner_only");
    let r = s.manage("DELETE", &endpoint_path(&slug), None);
    assert_status(&r, 200);
    let v = r.json();
    assert_eq!(
        (v["slug"].as_str(), v["deleted"].as_bool()),
        (Some(slug.as_str()), Some(true))
    );

    // Gone at once, for every call and list.
    assert_error(
        &s.manage("GET", &endpoint_path(&slug), None),
        404,
        "endpoint_not_found",
    );
    assert_error(
        &s.manage("DELETE", &endpoint_path(&slug), None),
        404,
        "endpoint_not_found",
    );
    let listed = s.manage("GET", "/api/v1/manage/endpoints", None).json();
    assert!(!listed.to_string().contains(&slug), "{listed}");
    let authorization = member.authorization(&s);
    let listed = s
        .manage_with(
            "GET",
            "/api/v1/manage/endpoints",
            Some(&authorization),
            None,
        )
        .json();
    assert!(!listed.to_string().contains(&slug), "{listed}");
    for key in [
        &ep.sandbox_key,
        &rotated,
        &ep.production_key,
        &member.sandbox_key,
    ] {
        assert_error(&s.list(&slug, key, ""), 401, "invalid_api_key");
    }
    let r = s.request("GET", &format!("/api/v1/invitations/{token}"), &[], None);
    assert_error(&r, 404, "invitation_not_found");
    let r = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{slug}/deliveries"),
        None,
    );
    assert_error(&r, 404, "endpoint_not_found");

    // The audit log stays for the owner, newest first, ending with the deletion.
    let audit_path = format!("/api/v1/manage/endpoints/{slug}/audit");
    let r = s.manage("GET", &audit_path, None);
    assert_status(&r, 200);
    let entries = r.json()["data"].as_array().cloned().unwrap();
    assert_eq!(entries[0]["action"], "endpoint.deleted", "{entries:?}");
    assert_eq!(entries[0]["details"]["name"], "Orders");
    assert!(entries.iter().any(|e| e["action"] == "endpoint.created"));
    assert_error(
        &as_member(&s, "GET", &audit_path, &member.cookie),
        404,
        "endpoint_not_found",
    );

    // The name is free again; the slug is not given again.
    let again = s.create_endpoint("Orders", &[]);
    assert_ne!(again.slug, slug);

    // The purge removes the rest; the other endpoint keeps its data.
    wait_purged(&mut s, &slug);
    let keys = [
        &ep.sandbox_key,
        &rotated,
        &ep.production_key,
        &member.sandbox_key,
    ];
    let id = s.stopped(|handles, _| {
        let store = handles.store.as_ref();
        let id = endpoint_id(store, &slug);
        assert_eq!(leftovers(store, id, &deliveries), Vec::<String>::new());
        let snapshot = store.read().unwrap();
        for key in keys {
            assert!(snapshot.api_key(&secret_hash(key)).unwrap().is_none());
        }
        // The store-side search of the deleted partitions finds nothing (what the search index
        // returns is confirmed against the store, whose records are gone).
        let params = [("q".to_string(), "zebra".to_string())]
            .into_iter()
            .collect();
        for environment in [Environment::Sandbox, Environment::Production] {
            let p = Partition::new(id, environment);
            let request = search::parse_request(&params, p, handles.now()).unwrap();
            let page: serde_json::Value =
                serde_json::from_str(&search::search(store, None, p, &request).unwrap()).unwrap();
            assert_eq!(page["data"], json!([]), "{page}");
        }
        let kept = Partition::new(endpoint_id(store, &other.slug), Environment::Sandbox);
        assert!(snapshot.record_partitions().unwrap().contains(&kept));
        let request = search::parse_request(&params, kept, handles.now()).unwrap();
        let page: serde_json::Value =
            serde_json::from_str(&search::search(store, None, kept, &request).unwrap()).unwrap();
        assert_eq!(page["data"].as_array().map(Vec::len), Some(1), "{page}");
        id
    });
    s.resume();
    assert_eq!(logged_requests(&mut s, id), 0);
    let r = s.data(
        "GET",
        &format!("/api/v1/data/{}/search?q=zebra", other.slug),
        &other.sandbox_key,
        None,
    );
    assert_eq!(
        r.json()["data"].as_array().map(Vec::len),
        Some(1),
        "{}",
        r.describe()
    );
    assert_status(&s.manage("GET", &audit_path, None), 200);
}

#[test]
fn a_deletion_whose_purge_was_cut_short_is_purged_after_a_restart() {
    let mut s = in_process();
    let ep = s.create_endpoint("Orders", &[]);
    let slug = ep.slug.clone();
    for n in 0..10 {
        s.create_record(&slug, &ep.sandbox_key, &json!({ "n": n }));
    }
    s.wait_request_log(&slug, "sandbox", Duration::from_secs(10), |d| d.len() >= 10);

    let id = s.stopped(|handles, _| endpoint_id(handles.store.as_ref(), &slug));
    s.resume();
    assert!(logged_requests(&mut s, id) >= 10);

    // Deleted while the server is stopped: nothing purges it yet.
    let owner_token = s.owner_token.clone();
    s.stopped(|handles, sealer| {
        let store = handles.store.as_ref();
        let owner =
            intake::domain::accounts::authenticate_token(store, handles.now(), &owner_token)
                .unwrap();
        let endpoints = Endpoints::new(
            handles.clone(),
            sealer.clone(),
            Default::default(),
            Default::default(),
        );
        endpoint_deletion::delete(&endpoints, &owner, &slug, Some("Orders")).unwrap();
        let id = endpoint_id(store, &slug);
        let sandbox = Partition::new(id, Environment::Sandbox);
        assert!(
            store
                .read()
                .unwrap()
                .record_partitions()
                .unwrap()
                .contains(&sandbox)
        );
    });
    s.resume();
    assert_error(
        &s.manage("GET", &endpoint_path(&slug), None),
        404,
        "endpoint_not_found",
    );
    wait_purged(&mut s, &slug);
    let id = s.stopped(|handles, _| {
        let store = handles.store.as_ref();
        let id = endpoint_id(store, &slug);
        assert_eq!(leftovers(store, id, &[]), Vec::<String>::new());
        id
    });
    s.resume();
    assert_eq!(logged_requests(&mut s, id), 0);
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &std::path::Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
        } else {
            let bytes = std::fs::read(&path).unwrap();
            let n = bytes.windows(needle.len()).filter(|w| *w == needle).count();
            if n > 0 {
                found.push(format!("{} ({n}x)", path.display()));
            }
        }
    }
    found
}

/// What a purge leaves, and the remedy (docs/src/security.md, "Deleted data"): on redb the
/// purged rows' bytes stay in `intake.redb`'s free pages, in no other file, until redb reuses
/// those pages or `intake compact` runs; after it, no file of the data dir holds a purged
/// endpoint's payload, while the other endpoint's records read back whole.
#[test]
fn after_a_purge_and_intake_compact_no_file_of_the_data_dir_holds_the_purged_payloads() {
    if redb_only("reads redb's files") {
        return;
    }
    let mut s = in_process();
    let receiver = common::receiver::Receiver::start();
    let doomed = s.create_endpoint("Doomed", &[]);
    let kept = s.create_endpoint("Kept", &[]);
    let hook = format!("/api/v1/manage/endpoints/{}/webhooks/sandbox", doomed.slug);
    let body = json!({ "url": receiver.url("/hook") });
    assert_status(&s.manage("PUT", &hook, Some(&body)), 200);
    // The purged payloads (in records, change-stream events, delivery bodies) between the kept
    // endpoint's small records, then large records of the kept endpoint after them: pages
    // too large to move into the small holes the purge leaves.
    let marker = "purged-payload-q7z9w";
    for n in 0..60 {
        let payload = json!({ "secret": format!("{marker}-{n}"), "pad": "p".repeat(900) });
        s.create_record(&doomed.slug, &doomed.sandbox_key, &payload);
        s.create_record(&kept.slug, &kept.sandbox_key, &json!({ "n": n }));
    }
    receiver.wait_for(60, Duration::from_secs(30));
    let large = "k".repeat(30_000);
    for n in 0..40 {
        s.create_record(
            &kept.slug,
            &kept.sandbox_key,
            &json!({ "m": n, "pad": large }),
        );
    }
    assert_status(&s.manage("DELETE", &endpoint_path(&doomed.slug), None), 200);
    wait_purged(&mut s, &doomed.slug);
    s.stop();
    let data = s.data_dir().to_path_buf();
    let store = data.join("intake.redb").display().to_string();
    let holding = files_containing(&data, marker.as_bytes());
    assert!(
        holding.iter().all(|file| file.starts_with(&store)),
        "purged payloads outside intake.redb: {holding:?}"
    );

    let out = run_cli(
        intake_cmd().arg("compact").arg("--data-dir").arg(&data),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        files_containing(&data, marker.as_bytes()),
        Vec::<String>::new()
    );
    s.resume();
    let (listed, _) = s.list_all(&kept.slug, &kept.sandbox_key, 30);
    assert_eq!(listed.len(), 100);
    assert!(listed.iter().any(|r| r["payload"]["pad"] == json!(large)));
}
