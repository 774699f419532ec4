//! Retention per endpoint: each environment's window set by the owner within the server's
//! bounds (`[retention]`: the minimums, `max`), shown with the window in force, and a shortened
//! window purged in the background soon after, never in the request.

use crate::common;

use std::time::{Duration, Instant};

use common::in_process::{InProcessServer, at};
use common::*;
use intake::core::config::Config;
use serde_json::{Value, json};

const DAY: Duration = Duration::from_secs(86_400);

fn endpoint(s: &InProcessServer, slug: &str) -> Value {
    let r = s.manage("GET", &format!("/api/v1/manage/endpoints/{slug}"), None);
    assert_status(&r, 200);
    r.json()
}

fn patch(s: &InProcessServer, slug: &str, body: &Value) -> Resp {
    s.manage(
        "PATCH",
        &format!("/api/v1/manage/endpoints/{slug}"),
        Some(body),
    )
}

#[test]
fn the_operator_bounds_are_checked_when_the_config_is_read() {
    let err = Config::parse("[retention]\nmax = \"30d\"\n").unwrap_err();
    assert!(err.contains("retention.max"), "{err}");
    let err = Config::parse("[retention]\nmax = \"90d\"\nproduction = \"120d\"\n").unwrap_err();
    assert!(err.contains("retention.production"), "{err}");
    let err = Config::parse("[retention]\nmax = \"90d\"\nsandbox = \"100d\"\n").unwrap_err();
    assert!(err.contains("retention.sandbox"), "{err}");
    let c = Config::parse("[retention]\nmax = \"400d\"\n").unwrap();
    assert_eq!(c.retention.max, Some(400 * DAY));
    assert_eq!(Config::parse("").unwrap().retention.max, None);
}

#[test]
fn an_endpoint_sets_its_retention_within_the_servers_bounds() {
    let s = InProcessServer::start("[retention]\nmax = \"400d\"\n", at("2025-03-01T00:00:00Z"));
    let ep = s.create_endpoint("kept", &[]);
    let shown = endpoint(&s, &ep.slug);
    assert_eq!(
        shown["retention"],
        json!({ "sandbox": null, "production": null })
    );
    assert_eq!(
        shown["effective_retention"],
        json!({ "sandbox": "30d", "production": "60d" })
    );

    let r = patch(
        &s,
        &ep.slug,
        &json!({ "retention": { "sandbox": "7d", "production": "2160h" } }),
    );
    assert_status(&r, 200);
    assert_eq!(
        r.json()["retention"],
        json!({ "sandbox": "7d", "production": "90d" })
    );
    assert_eq!(
        r.json()["effective_retention"],
        json!({ "sandbox": "7d", "production": "90d" })
    );
    let audit = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{}/audit", ep.slug),
        None,
    );
    assert_eq!(
        audit.json()["data"][0]["details"]["retention"],
        json!({ "sandbox": "7d", "production": "90d" })
    );

    // Out of bounds or unreadable: 400 naming the bound, nothing changed (the description
    // sent with it neither).
    for (retention, says) in [
        (json!({ "production": "30d" }), "at least 60d"),
        (json!({ "sandbox": "12h" }), "at least 1d"),
        (json!({ "sandbox": "401d" }), "at most 400d"),
        (json!({ "production": "7 weeks" }), "retention.production"),
        (json!({ "sandbox": "1500ms" }), "at least 1d"),
    ] {
        let r = patch(
            &s,
            &ep.slug,
            &json!({ "retention": retention, "description": "changed" }),
        );
        assert_error(&r, 400, "invalid_request");
        let message = error_message(&r);
        assert!(message.contains(says), "{retention}: {message}");
        let shown = endpoint(&s, &ep.slug);
        assert_eq!(
            shown["retention"],
            json!({ "sandbox": "7d", "production": "90d" })
        );
        assert_eq!(shown["description"], Value::Null);
    }
    let r = patch(&s, &ep.slug, &json!({ "retention": { "staging": "7d" } }));
    assert_eq!(r.status, 400, "{}", r.describe());

    // `null` returns one environment, or both, to the server's default.
    let r = patch(&s, &ep.slug, &json!({ "retention": { "sandbox": null } }));
    assert_eq!(
        r.json()["retention"],
        json!({ "sandbox": null, "production": "90d" })
    );
    assert_eq!(
        r.json()["effective_retention"],
        json!({ "sandbox": "30d", "production": "90d" })
    );
    let r = patch(&s, &ep.slug, &json!({ "retention": null }));
    assert_eq!(
        r.json()["retention"],
        json!({ "sandbox": null, "production": null })
    );
}

#[test]
fn a_shortened_window_is_purged_in_the_background_soon_after() {
    let t0 = at("2025-03-01T00:00:00Z");
    let s = InProcessServer::start("", t0);
    let ep = s.create_endpoint("short", &[]);
    // A sentinel endpoint whose sandbox keeps a day: its records going show that a run of the
    // schedule has happened (and, its partitions coming after `ep`'s, got past `ep`'s).
    let other = s.create_endpoint("sentinels", &[]);
    let r = patch(
        &s,
        &other.slug,
        &json!({ "retention": { "sandbox": "1d" } }),
    );
    assert_status(&r, 200);
    s.deploy(&ep.slug);
    let (slug, sk, pk) = (
        ep.slug.as_str(),
        ep.sandbox_key.as_str(),
        ep.production_key.as_str(),
    );
    let create = |slug: &str, key: &str, tag: &str| {
        let r = s.post_record(slug, key, &json!({ "tag": tag }));
        assert_status(&r, 202);
        r.json()["id"].as_str().unwrap().to_string()
    };
    let old_sandbox = create(slug, sk, "oldsandbox");
    let old_production = create(slug, pk, "oldproduction");
    let sentinel = create(&other.slug, &other.sandbox_key, "sentinel");
    s.clock.set(t0.plus(5 * DAY));
    let recent = create(slug, sk, "recentsandbox");
    // Ten days on, the schedule runs once (the sentinel goes) and then not for an hour of the
    // server's clock, which stays here: only an early purge can act on what follows.
    s.clock.set(t0.plus(10 * DAY));
    wait_gone(&s, &other.slug, &other.sandbox_key, &sentinel);
    assert_status(&s.get_record(slug, sk, &old_sandbox), 200);
    let sentinel = create(&other.slug, &other.sandbox_key, "sentinel");

    // 7 days for sandbox: the 10-day-old sandbox record goes without the clock moving on.
    let started = Instant::now();
    let r = patch(&s, slug, &json!({ "retention": { "sandbox": "7d" } }));
    assert_status(&r, 200);
    wait_gone(&s, slug, sk, &old_sandbox);
    eprintln!("purged {:?} after the PATCH", started.elapsed());
    assert_eq!(s.list_ids(slug, sk), std::slice::from_ref(&recent));
    let found = s.data(
        "GET",
        &format!("/api/v1/data/{slug}/search?q=oldsandbox"),
        sk,
        None,
    );
    assert_eq!(found.json()["data"], json!([]), "{}", found.describe());
    // Production keeps the server's window.
    assert_status(&s.get_record(slug, pk, &old_production), 200);

    // The schedule applies the endpoint's windows too: at 31 days its run takes the 26-day-old
    // sandbox record and keeps the 31-day-old production one.
    s.clock.set(t0.plus(31 * DAY));
    wait_gone(&s, &other.slug, &other.sandbox_key, &sentinel);
    assert_status(&s.get_record(slug, sk, &recent), 404);
    assert_status(&s.get_record(slug, pk, &old_production), 200);
}

/// Waits (at most 60 s, the promise) until record `id` of `slug` is purged.
fn wait_gone(s: &InProcessServer, slug: &str, key: &str, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while s.get_record(slug, key, id).status != 404 {
        assert!(Instant::now() < deadline, "{id} not purged within 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}
