//! API key rotation and revocation: `POST /api/v1/manage/endpoints/{slug}/keys/{environment}/
//! rotate` and `…/revoke-previous`, and the same under `…/collaborators/{account_id}/keys/…`.
//!
//! On an in-process server with a manual clock (the grace period ends by the server's clock):
//! - the owner's rotation answers a new key at once; the old key works until exactly
//!   `previous_valid_until` and is refused with 401 `invalid_api_key` from then on; a grace of
//!   0 (or no body) refuses it at once; a rotation during a grace period ends the older key;
//!   revoke-previous ends the grace early and answers 404 `previous_key_not_found` when none
//!   runs; more than 7 days is 400; the grace survives a restart; the audit log has every
//!   rotation and revocation with the holder and never a key;
//! - a collaborator rotates their own keys (`…/keys/…`), never by the collaborators' paths,
//!   which are the owner's (403 `owner_only`),
//!   not their production key before the deploy (403 `endpoint_not_deployed`); the owner
//!   rotates any collaborator's key, which keeps its permissions; strangers get 404, unknown
//!   collaborators 404 `collaborator_not_found`, calls without a token 401; removing a
//!   collaborator also ends their replaced key still in its grace period.

use crate::common;

use std::time::Duration;

use common::in_process::{InProcessServer, at};
use common::*;
use intake::core::clock::Clock;
use serde_json::{Value, json};

const HOUR: Duration = Duration::from_secs(3600);
const SECOND: Duration = Duration::from_secs(1);

fn in_process() -> InProcessServer {
    InProcessServer::start("", at("2026-01-01T00:00:00Z"))
}

fn keys_path(slug: &str, env: &str, action: &str) -> String {
    format!("/api/v1/manage/endpoints/{slug}/keys/{env}/{action}")
}

fn collaborator_keys_path(slug: &str, account_id: u64, env: &str, action: &str) -> String {
    format!("/api/v1/manage/endpoints/{slug}/collaborators/{account_id}/keys/{env}/{action}")
}

/// The owner rotates with `grace_period_seconds` (no body for `None`); asserts 200.
#[track_caller]
fn rotate(s: &ServerClient, path: &str, grace: Option<u64>) -> Value {
    let body = grace.map(|g| json!({ "grace_period_seconds": g }));
    let r = s.manage("POST", path, body.as_ref());
    assert_status(&r, 200);
    r.json()
}

#[track_caller]
fn key_of(v: &Value) -> String {
    v["key"]
        .as_str()
        .unwrap_or_else(|| panic!("no key: {v}"))
        .to_string()
}

/// The status of listing the endpoint's records with `key`.
fn list_status(s: &ServerClient, slug: &str, key: &str) -> u16 {
    s.list(slug, key, "").status
}

#[track_caller]
fn assert_refused(s: &ServerClient, slug: &str, key: &str) {
    assert_error(&s.list(slug, key, ""), 401, "invalid_api_key");
}

/// A management call with a session cookie (and a JSON body if given).
fn as_member(
    s: &ServerClient,
    method: &str,
    path: &str,
    cookie: &str,
    body: Option<&Value>,
) -> Resp {
    let cookie = format!("intake_session={cookie}");
    s.request_json(method, path, &[("Cookie", cookie.as_str())], body)
}

#[test]
fn the_owner_rotates_a_default_key_and_the_old_one_works_until_its_grace_ends() {
    let mut s = in_process();
    let ep = s.create_endpoint("Orders", &[]);
    let (slug, k0) = (ep.slug.clone(), ep.sandbox_key.clone());
    assert_eq!(list_status(&s, &slug, &k0), 200);

    // One hour of grace: both keys work until exactly then.
    let rotated_at = s.clock.now();
    let v = rotate(&s, &keys_path(&slug, "sandbox", "rotate"), Some(3600));
    let k1 = key_of(&v);
    assert!(k1.starts_with("tm_test_") && k1 != k0, "{v}");
    assert_eq!(v["environment"], "sandbox");
    assert_eq!(v["collaborator_id"], Value::Null);
    assert!(v["key_id"].as_str().unwrap().starts_with("key_"), "{v}");
    assert!(
        v["previous_key_id"].as_str().unwrap().starts_with("key_"),
        "{v}"
    );
    assert_ne!(v["key_id"], v["previous_key_id"]);
    let until = rotated_at.plus(HOUR).to_rfc3339();
    assert_eq!(v["previous_valid_until"].as_str(), Some(until.as_str()));
    let r = s.manage("GET", &format!("/api/v1/manage/endpoints/{slug}"), None);
    assert_eq!(r.json()["sandbox_key"].as_str(), Some(k1.as_str()));
    assert_eq!(list_status(&s, &slug, &k1), 200);
    assert_eq!(list_status(&s, &slug, &k0), 200);
    s.advance(HOUR - SECOND);
    assert_eq!(list_status(&s, &slug, &k0), 200);
    s.advance(SECOND);
    assert_refused(&s, &slug, &k0);
    assert_eq!(list_status(&s, &slug, &k1), 200);

    // Revoked early: the previous key stops at once; nothing more to revoke afterwards.
    let k2 = key_of(&rotate(
        &s,
        &keys_path(&slug, "sandbox", "rotate"),
        Some(86_400),
    ));
    assert_eq!(list_status(&s, &slug, &k1), 200);
    let r = s.manage(
        "POST",
        &keys_path(&slug, "sandbox", "revoke-previous"),
        None,
    );
    assert_status(&r, 200);
    let state = r.json();
    assert_eq!(state["previous_key_id"], Value::Null, "{state}");
    assert_eq!(state["previous_valid_until"], Value::Null, "{state}");
    assert!(
        state.get("key").is_none(),
        "no key in a revocation: {state}"
    );
    assert_refused(&s, &slug, &k1);
    assert_eq!(list_status(&s, &slug, &k2), 200);
    let r = s.manage(
        "POST",
        &keys_path(&slug, "sandbox", "revoke-previous"),
        None,
    );
    assert_error(&r, 404, "previous_key_not_found");

    // No body (or 0) revokes at once.
    let v = rotate(&s, &keys_path(&slug, "sandbox", "rotate"), None);
    let k3 = key_of(&v);
    assert_eq!(v["previous_valid_until"], Value::Null, "{v}");
    assert_refused(&s, &slug, &k2);
    let k4 = key_of(&rotate(&s, &keys_path(&slug, "sandbox", "rotate"), Some(0)));
    assert_refused(&s, &slug, &k3);

    // A rotation during a grace period ends the older replaced key: two keys at most.
    let k5 = key_of(&rotate(
        &s,
        &keys_path(&slug, "sandbox", "rotate"),
        Some(3600),
    ));
    let k6 = key_of(&rotate(
        &s,
        &keys_path(&slug, "sandbox", "rotate"),
        Some(3600),
    ));
    assert_refused(&s, &slug, &k4);
    assert_eq!(list_status(&s, &slug, &k5), 200);
    assert_eq!(list_status(&s, &slug, &k6), 200);

    // The grace period is kept across a restart and still ends by the clock.
    s.restart();
    assert_eq!(list_status(&s, &slug, &k5), 200);
    s.advance(HOUR);
    assert_refused(&s, &slug, &k5);
    assert_eq!(list_status(&s, &slug, &k6), 200);

    // At most 7 days; bad bodies change nothing.
    let path = keys_path(&slug, "sandbox", "rotate");
    let r = s.manage(
        "POST",
        &path,
        Some(&json!({ "grace_period_seconds": 604_801 })),
    );
    assert_error(&r, 400, "invalid_request");
    let r = s.manage("POST", &path, Some(&json!({ "grace": 60 })));
    assert_eq!(r.status, 400, "{}", r.describe());
    assert_eq!(list_status(&s, &slug, &k6), 200);
    let v = rotate(&s, &path, Some(604_800));
    let k7 = key_of(&v);
    let week = s
        .clock
        .now()
        .plus(Duration::from_secs(604_800))
        .to_rfc3339();
    assert_eq!(v["previous_valid_until"].as_str(), Some(week.as_str()));

    // The production key rotates on its own.
    let v = rotate(&s, &keys_path(&slug, "production", "rotate"), Some(0));
    let live = key_of(&v);
    assert!(
        live.starts_with("tm_live_") && live != ep.production_key,
        "{v}"
    );
    assert_eq!(v["environment"], "production");
    s.deploy(&slug);
    assert_eq!(list_status(&s, &slug, &live), 200);
    assert_refused(&s, &slug, &ep.production_key);
    assert_eq!(list_status(&s, &slug, &k7), 200);

    // Only the two environments exist.
    let r = s.manage("POST", &keys_path(&slug, "staging", "rotate"), None);
    assert_error(&r, 404, "route_not_found");

    // Every rotation and revocation is audited, without a key.
    let audit = s.audit_text(&slug);
    assert_eq!(audit.matches("api_key.rotated").count(), 8, "{audit}");
    assert_eq!(audit.matches("api_key.revoked").count(), 1, "{audit}");
    assert!(audit.contains(&until), "{audit}");
    assert!(audit.contains("\"holder\":\"owner\""), "{audit}");
    for key in [&k0, &k1, &k2, &k3, &k4, &k5, &k6, &k7, &live] {
        assert!(
            !audit.contains(key.as_str()),
            "a key in the audit log: {audit}"
        );
    }
}

#[test]
fn collaborators_rotate_their_own_keys_and_the_owner_rotates_anyones() {
    let s = in_process();
    let ep = s.create_endpoint("Orders", &[]);
    let slug = ep.slug.clone();
    let ada = add_collaborator(&s, &slug, "ada@example.com", &["read"]);
    let bob = add_collaborator(&s, &slug, "bob@example.com", &["read", "create"]);

    // Ada rotates her own sandbox key.
    let r = as_member(
        &s,
        "POST",
        &keys_path(&slug, "sandbox", "rotate"),
        &ada.cookie,
        Some(&json!({ "grace_period_seconds": 60 })),
    );
    assert_status(&r, 200);
    let v = r.json();
    assert_eq!(v["collaborator_id"].as_u64(), Some(ada.id), "{v}");
    let ada1 = key_of(&v);
    assert!(ada1.starts_with("tm_test_"));
    assert_eq!(list_status(&s, &slug, &ada.sandbox_key), 200);
    assert_eq!(list_status(&s, &slug, &ada1), 200);
    let r = s.manage_with(
        "GET",
        &format!("/api/v1/manage/endpoints/{slug}"),
        Some(&ada.authorization(&s)),
        None,
    );
    assert_eq!(r.json()["sandbox_key"].as_str(), Some(ada1.as_str()));
    let r = as_member(
        &s,
        "POST",
        &keys_path(&slug, "sandbox", "revoke-previous"),
        &ada.cookie,
        None,
    );
    assert_status(&r, 200);
    assert_refused(&s, &slug, &ada.sandbox_key);

    // The collaborators' paths are the owner's, even for Ada's own id: not Bob's keys, nor
    // the default ones (they are the owner's), nor production before the deploy.
    for id in [bob.id, ada.id] {
        let r = as_member(
            &s,
            "POST",
            &collaborator_keys_path(&slug, id, "sandbox", "rotate"),
            &ada.cookie,
            None,
        );
        assert_error(&r, 403, "owner_only");
    }
    assert_eq!(list_status(&s, &slug, &bob.sandbox_key), 200);
    let r = as_member(
        &s,
        "POST",
        &keys_path(&slug, "production", "rotate"),
        &ada.cookie,
        None,
    );
    assert_error(&r, 403, "endpoint_not_deployed");
    assert_eq!(list_status(&s, &slug, &ep.sandbox_key), 200);

    // The owner rotates Bob's key (no grace): his permissions go with the new key.
    let v = rotate(
        &s,
        &collaborator_keys_path(&slug, bob.id, "sandbox", "rotate"),
        Some(0),
    );
    assert_eq!(v["collaborator_id"].as_u64(), Some(bob.id), "{v}");
    let bob1 = key_of(&v);
    assert_refused(&s, &slug, &bob.sandbox_key);
    assert_eq!(list_status(&s, &slug, &bob1), 200);
    assert_status(&s.post_record(&slug, &bob1, &json!({ "n": 1 })), 202);
    let r = s.data(
        "DELETE",
        &format!("/api/v1/data/{slug}/{}", unknown_record_id()),
        &bob1,
        None,
    );
    assert_error(&r, 403, "missing_permission_delete");
    // The owner's own key did not change.
    assert_eq!(list_status(&s, &slug, &ep.sandbox_key), 200);

    // Unknown collaborators, strangers and calls without a token.
    let r = s.manage(
        "POST",
        &collaborator_keys_path(&slug, 999, "sandbox", "rotate"),
        None,
    );
    assert_error(&r, 404, "collaborator_not_found");
    let other = s.create_endpoint("Leads", &[]);
    let carol = add_collaborator(&s, &other.slug, "carol@example.com", &["read"]);
    let r = as_member(
        &s,
        "POST",
        &keys_path(&slug, "sandbox", "rotate"),
        &carol.cookie,
        None,
    );
    assert_error(&r, 404, "endpoint_not_found");
    let r = s.request_json("POST", &keys_path(&slug, "sandbox", "rotate"), &[], None);
    assert_error(&r, 401, "missing_token");

    // Removing a collaborator ends their replaced key still in its grace period too.
    let v = rotate(
        &s,
        &collaborator_keys_path(&slug, bob.id, "sandbox", "rotate"),
        Some(3600),
    );
    let bob2 = key_of(&v);
    assert_eq!(list_status(&s, &slug, &bob1), 200);
    let r = s.manage(
        "DELETE",
        &format!("/api/v1/manage/endpoints/{slug}/collaborators/{}", bob.id),
        None,
    );
    assert_status(&r, 200);
    assert_refused(&s, &slug, &bob1);
    assert_refused(&s, &slug, &bob2);

    // After the deploy, Ada may rotate her production key.
    s.deploy(&slug);
    let r = as_member(
        &s,
        "POST",
        &keys_path(&slug, "production", "rotate"),
        &ada.cookie,
        None,
    );
    assert_status(&r, 200);
    let live = key_of(&r.json());
    assert!(live.starts_with("tm_live_"));
    assert_eq!(list_status(&s, &slug, &live), 200);

    let audit = s.audit_text(&slug);
    assert!(audit.contains("\"holder\":\"collaborator\""), "{audit}");
    assert!(
        audit.contains(&format!("\"account_id\":{}", bob.id)),
        "{audit}"
    );
    for key in [&ada1, &bob1, &bob2, &live] {
        assert!(
            !audit.contains(key.as_str()),
            "a key in the audit log: {audit}"
        );
    }
}
