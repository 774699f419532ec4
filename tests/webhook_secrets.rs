//! Webhook signing secrets: `GET /api/v1/manage/endpoints/{slug}/webhook-secrets/{environment}`
//! and `POST .../reissue`.
//!
//! What is checked:
//! - Against the real binary: every new endpoint has a secret per environment at once
//!   (`whsec_` + base64 of 32 bytes, all different); a reissue replaces it and reports the end
//!   of the 24-hour changeover; collaborators can view but not reissue (403 `owner_only`),
//!   other accounts get 404 and requests without a token 401; the audit entry names the
//!   environment and no secret; the secret survives a restart; no secret reaches the log.
//! - On an in-process server with a [`ManualClock`]: the changeover ends exactly 24 hours
//!   after the reissue, both in the API and in `signing_keys` (the keys a sender signs with),
//!   a second reissue inside the changeover keeps only the latest previous secret, and an
//!   endpoint from before secrets existed gets one when the server starts.

use crate::common;

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use common::in_process::{InProcessServer, at};
use common::*;
use intake::core::clock::{Clock, Timestamp};
use intake::domain::handles::Handles;
use intake::domain::webhooks::secrets::{CHANGEOVER, signing_keys};
use intake::store::{Environment, Partition};
use serde_json::{Value, json};

const ENVIRONMENTS: [&str; 2] = ["sandbox", "production"];
const DAY: Duration = Duration::from_secs(86_400);
const HOUR: Duration = Duration::from_secs(3600);
const SECOND: Duration = Duration::from_secs(1);
const COLLABORATOR: &str = "dev@example.com";
const STRANGER: &str = "stranger@example.com";
const PASSWORD: &str = "correct horse battery";

fn secret_path(slug: &str, env: &str) -> String {
    format!("/api/v1/manage/endpoints/{slug}/webhook-secrets/{env}")
}

fn reissue_path(slug: &str, env: &str) -> String {
    format!("{}/reissue", secret_path(slug, env))
}

/// The `secret` of a secret view.
#[track_caller]
fn secret_of(view: &Value) -> String {
    view["secret"]
        .as_str()
        .unwrap_or_else(|| panic!("no secret: {view}"))
        .to_string()
}

/// The key bytes of a secret, checking its format on the way.
#[track_caller]
fn key_of(secret: &str) -> Vec<u8> {
    let encoded = secret
        .strip_prefix("whsec_")
        .unwrap_or_else(|| panic!("secret without whsec_: {secret}"));
    STANDARD
        .decode(encoded)
        .unwrap_or_else(|e| panic!("secret is not standard base64 ({e}): {secret}"))
}

/// Seconds since the epoch of an RFC 3339 field, to the microsecond.
#[track_caller]
fn micros(v: &Value) -> i64 {
    let (secs, nanos) = ts(v);
    secs * 1_000_000 + i64::from(nanos / 1000)
}

/// Asserts that the server's log holds none of `secrets`, once it shows the secret requests
/// (so the check is not made on an empty log).
#[track_caller]
fn assert_not_logged(log: &LogBuffer, secrets: &[String]) {
    let logged = log.wait_for(
        0,
        Duration::from_secs(10),
        |l| l.contains("/webhook-secrets/{environment}"),
        || false,
    );
    assert!(
        logged.is_some(),
        "no request line in the log:\n{}",
        log.text()
    );
    let log = log.text();
    for secret in secrets {
        let encoded = secret.trim_start_matches("whsec_");
        assert!(
            !log.contains(encoded),
            "the server log contains a webhook secret:\n{log}"
        );
    }
    assert!(
        !log.contains("whsec_"),
        "the server log mentions whsec_:\n{log}"
    );
}

impl ServerClient {
    fn reissue(&self, slug: &str, env: &str) -> Value {
        let r = self.manage("POST", &reissue_path(slug, env), None);
        assert_status(&r, 200);
        r.json()
    }

    /// A management call as the account of session `cookie`: a change with the cookie, a
    /// read with a token of the account (the cookie alone reads no secret: `token_required`).
    fn as_member(&self, method: &str, path: &str, cookie: &str) -> Resp {
        if method == "GET" {
            let authorization = common::authorization_of_session(self, cookie);
            return self.manage_with(method, path, Some(&authorization), None);
        }
        let cookie = format!("intake_session={cookie}");
        self.request(method, path, &[("Cookie", cookie.as_str())], None)
    }

    /// Invites `email` to `slug` and accepts as a new account; returns its session cookie.
    fn join(&self, slug: &str, email: &str) -> String {
        let r = self.manage(
            "POST",
            &format!("/api/v1/manage/endpoints/{slug}/invitations"),
            Some(&json!({ "email": email, "permissions": ["read"] })),
        );
        assert_status(&r, 201);
        let invitation = r.json();
        let url = invitation["accept_url"]
            .as_str()
            .unwrap_or_else(|| panic!("no accept_url without [smtp]: {invitation}"));
        let token = url.rsplit('/').next().unwrap_or_default();
        let accepted = self.request(
            "POST",
            &format!("/api/v1/invitations/{token}/accept"),
            &[("Content-Type", "application/json")],
            Some(json!({ "password": PASSWORD }).to_string().as_bytes()),
        );
        assert_status(&accepted, 200);
        let set = accepted.header("set-cookie").unwrap_or_default();
        let pair = set.split(';').next().unwrap_or_default();
        let (name, value) = pair.split_once('=').unwrap_or_default();
        assert_eq!(name, "intake_session", "{set}");
        value.to_string()
    }
}

#[test]
fn every_new_endpoint_has_a_secret_per_environment() {
    let s = TestServer::start();
    let mut secrets = Vec::new();
    for name in ["Orders", "Leads"] {
        let ep = s.create_endpoint(name, &[]);
        for env in ENVIRONMENTS {
            let view = s.webhook_secret(&ep.slug, env);
            assert_eq!(view["environment"], env, "{view}");
            let secret = secret_of(&view);
            assert!(secret.starts_with("whsec_"), "{secret}");
            assert_eq!(key_of(&secret).len(), 32, "{secret}");
            // Made with the endpoint, never reissued.
            assert_eq!(view["created_at"], ep.json["created_at"], "{view}");
            assert!(view.get("rotated_at").is_none(), "{view}");
            assert!(view.get("previous_valid_until").is_none(), "{view}");
            // Viewing does not change it.
            assert_eq!(s.webhook_secret(&ep.slug, env), view);
            secrets.push(secret);
        }
    }
    let mut distinct = secrets.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), secrets.len(), "{secrets:?}");

    // The endpoint itself does not carry its secrets.
    let ep = s.manage("GET", "/api/v1/manage/endpoints", None).text();
    assert!(!ep.contains("whsec_"), "{ep}");
    assert_not_logged(&s.log, &secrets);
}

#[test]
fn a_reissue_replaces_the_secret_and_starts_a_24_hour_changeover() {
    let mut s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    let before = secret_of(&s.webhook_secret(&ep.slug, "sandbox"));
    let production = s.webhook_secret(&ep.slug, "production");

    let view = s.reissue(&ep.slug, "sandbox");
    assert_eq!(view["environment"], "sandbox");
    let after = secret_of(&view);
    assert_ne!(after, before);
    assert_eq!(key_of(&after).len(), 32);
    let rotated = micros(&view["rotated_at"]);
    let day = i64::try_from(DAY.as_micros()).unwrap_or(i64::MAX);
    assert_eq!(
        micros(&view["previous_valid_until"]) - rotated,
        day,
        "{view}"
    );
    assert_eq!(view["created_at"], ep.json["created_at"], "{view}");
    assert!(micros(&view["created_at"]) <= rotated);
    // What GET shows from now on; the other environment is untouched.
    assert_eq!(s.webhook_secret(&ep.slug, "sandbox"), view);
    assert_eq!(s.webhook_secret(&ep.slug, "production"), production);

    // The audit log records who reissued which environment's secret, and no secret.
    let audit = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{}/audit", ep.slug),
        None,
    );
    assert_status(&audit, 200);
    let entry = audit.json()["data"][0].clone();
    assert_eq!(entry["action"], "webhook_secret.reissued", "{entry}");
    assert_eq!(entry["details"], json!({ "environment": "sandbox" }));
    assert_eq!(entry["actor"]["email"], OWNER_EMAIL);
    assert!(!audit.text().contains("whsec_"), "{}", audit.text());

    // Only POST reissues; only GET reads.
    let r = s.manage("GET", &reissue_path(&ep.slug, "sandbox"), None);
    assert_error(&r, 405, "method_not_allowed");
    assert_eq!(r.header("allow"), Some("POST"));
    let r = s.manage("PUT", &secret_path(&ep.slug, "sandbox"), None);
    assert_error(&r, 405, "method_not_allowed");
    assert_eq!(r.header("allow"), Some("GET"));

    // The secret and its changeover survive a restart.
    assert!(s.sigterm_and_wait().success());
    s.restart();
    assert_eq!(s.webhook_secret(&ep.slug, "sandbox"), view);
    assert_eq!(s.webhook_secret(&ep.slug, "production"), production);

    assert_not_logged(&s.log, &[before, after, secret_of(&production)]);
}

#[test]
fn collaborators_view_the_secret_others_get_404_and_only_the_owner_reissues() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    let elsewhere = s.create_endpoint("Leads", &[]);
    let collaborator = s.join(&ep.slug, COLLABORATOR);
    let stranger = s.join(&elsewhere.slug, STRANGER);

    let mut secrets = Vec::new();
    for env in ENVIRONMENTS {
        let owners = s.webhook_secret(&ep.slug, env);
        // The collaborator sees the same secret (their webhooks are signed with it).
        let r = s.as_member("GET", &secret_path(&ep.slug, env), &collaborator);
        assert_status(&r, 200);
        assert_eq!(r.json(), owners);
        // ...but cannot reissue it.
        let r = s.as_member("POST", &reissue_path(&ep.slug, env), &collaborator);
        assert_error(&r, 403, "owner_only");
        assert_eq!(
            s.webhook_secret(&ep.slug, env),
            owners,
            "a refused reissue changed it"
        );
        // An account unrelated to the endpoint learns nothing about it.
        for method in ["GET", "POST"] {
            let path = match method {
                "GET" => secret_path(&ep.slug, env),
                _ => reissue_path(&ep.slug, env),
            };
            let r = s.as_member(method, &path, &stranger);
            assert_error(&r, 404, "endpoint_not_found");
        }
        secrets.push(secret_of(&owners));
    }
    // The stranger sees their own endpoint's secret.
    let r = s.as_member("GET", &secret_path(&elsewhere.slug, "sandbox"), &stranger);
    assert_status(&r, 200);

    // Authentication comes first; unknown endpoints and environments are 404.
    let path = secret_path(&ep.slug, "sandbox");
    assert_error(&s.request("GET", &path, &[], None), 401, "missing_token");
    assert_error(
        &s.manage_with("GET", &path, Some("Bearer itk_nope"), None),
        401,
        "invalid_token",
    );
    let r = s.request("POST", &reissue_path(&ep.slug, "sandbox"), &[], None);
    assert_error(&r, 401, "missing_token");
    let r = s.manage("GET", &secret_path("no-such-endpoint", "sandbox"), None);
    assert_error(&r, 404, "endpoint_not_found");
    let r = s.manage("POST", &reissue_path("no-such-endpoint", "sandbox"), None);
    assert_error(&r, 404, "endpoint_not_found");
    for env in ["staging", "live", "Sandbox"] {
        let r = s.manage("GET", &secret_path(&ep.slug, env), None);
        assert_error(&r, 404, "route_not_found");
        let r = s.manage("POST", &reissue_path(&ep.slug, env), None);
        assert_error(&r, 404, "route_not_found");
    }

    // Nothing was reissued: no audit entry.
    let audit = s.audit_text(&ep.slug);
    assert!(!audit.contains("webhook_secret"), "{audit}");
    assert_not_logged(&s.log, &secrets);
}

// ---------------------------------------------------------------------------
// In-process server on a manual clock
// ---------------------------------------------------------------------------

/// The in-process server, its clock at 2026-01-01T00:00:00Z.
fn in_process() -> InProcessServer {
    InProcessServer::start("", at("2026-01-01T00:00:00Z"))
}

/// The sandbox partition of the endpoint with `slug`.
fn sandbox_partition(handles: &Handles, slug: &str) -> Partition {
    let snapshot = handles.store.read().expect("read");
    let endpoint_id = snapshot.endpoint_id_by_slug(slug).expect("get");
    Partition::new(endpoint_id.expect("slug exists"), Environment::Sandbox)
}

#[test]
fn the_changeover_ends_24_hours_after_the_reissue() {
    assert_eq!(CHANGEOVER, DAY);
    let mut s = in_process();
    let slug = s.create_endpoint("Orders", &[]).slug;
    let first = secret_of(&s.webhook_secret(&slug, "sandbox"));

    s.clock.advance(HOUR);
    let reissued_at = s.clock.now();
    let view = s.reissue(&slug, "sandbox");
    let second = secret_of(&view);
    assert_eq!(
        view["rotated_at"].as_str(),
        Some(reissued_at.to_rfc3339().as_str())
    );
    let end = reissued_at.plus(CHANGEOVER);
    assert_eq!(
        view["previous_valid_until"].as_str(),
        Some(end.to_rfc3339().as_str())
    );

    // One second before the end the changeover still runs; at the end it is over.
    s.clock.set(end.minus(SECOND));
    assert_eq!(
        s.webhook_secret(&slug, "sandbox")["previous_valid_until"].as_str(),
        Some(end.to_rfc3339().as_str())
    );
    s.clock.set(end);
    let over = s.webhook_secret(&slug, "sandbox");
    assert!(over.get("previous_valid_until").is_none(), "{over}");
    assert_eq!(secret_of(&over), second);
    assert_eq!(
        over["rotated_at"].as_str(),
        Some(reissued_at.to_rfc3339().as_str())
    );

    // What a sender signs with: the new key first, the previous one until the end.
    let (new, old) = (key_of(&second), key_of(&first));
    s.stopped(|handles, sealer| {
        let p = sandbox_partition(handles, &slug);
        let keys = |t: Timestamp| signing_keys(handles, sealer, p, t).expect("signing keys");
        assert_eq!(keys(reissued_at), [new.clone(), old.clone()]);
        assert_eq!(keys(end.minus(SECOND)), [new.clone(), old.clone()]);
        assert_eq!(keys(end), vec![new.clone()]);
        assert_eq!(keys(end.plus(DAY)), vec![new.clone()]);
        // The other environment was not reissued.
        let production = Partition::new(p.endpoint(), Environment::Production);
        let keys = signing_keys(handles, sealer, production, reissued_at).expect("keys");
        assert_eq!(keys.len(), 1);
        assert!(keys[0] != new && keys[0] != old);
    });
}

#[test]
fn a_second_reissue_inside_the_changeover_keeps_only_the_latest_previous() {
    let mut s = in_process();
    let slug = s.create_endpoint("Orders", &[]).slug;
    let first = secret_of(&s.webhook_secret(&slug, "sandbox"));
    let second = secret_of(&s.reissue(&slug, "sandbox"));
    s.clock.advance(HOUR);
    let last_reissue = s.clock.now();
    let view = s.reissue(&slug, "sandbox");
    let third = secret_of(&view);
    let end = last_reissue.plus(CHANGEOVER);
    assert_eq!(
        view["previous_valid_until"].as_str(),
        Some(end.to_rfc3339().as_str())
    );

    let (k1, k2, k3) = (key_of(&first), key_of(&second), key_of(&third));
    s.stopped(|handles, sealer| {
        let p = sandbox_partition(handles, &slug);
        let keys = |t: Timestamp| signing_keys(handles, sealer, p, t).expect("signing keys");
        assert_eq!(keys(last_reissue), [k3.clone(), k2.clone()]);
        assert!(!keys(last_reissue).contains(&k1));
        assert_eq!(keys(end.minus(SECOND)), [k3.clone(), k2.clone()]);
        assert_eq!(keys(end), vec![k3.clone()]);
    });
}

#[test]
fn an_endpoint_from_before_secrets_gets_one_when_the_server_starts() {
    let mut s = in_process();
    let slug = s.create_endpoint("Orders", &[]).slug;
    // Make the data dir look like one written before webhook secrets existed.
    s.stopped(|handles, _| {
        let p = sandbox_partition(handles, &slug);
        let production = Partition::new(p.endpoint(), Environment::Production);
        handles
            .write(|tx| {
                tx.delete_webhook_secret(p)?;
                tx.delete_webhook_secret(production)?;
                Ok(())
            })
            .expect("remove");
    });
    s.resume();

    let made = s.webhook_secret(&slug, "sandbox");
    let secret = secret_of(&made);
    assert_eq!(key_of(&secret).len(), 32);
    assert_eq!(
        made["created_at"].as_str(),
        Some(s.clock.now().to_rfc3339().as_str())
    );
    s.clock.advance(SECOND);
    assert_eq!(
        s.webhook_secret(&slug, "sandbox"),
        made,
        "made once, then kept"
    );
    // The production secret is made by its reissue, which then has a previous one.
    let r = s.manage("POST", &reissue_path(&slug, "production"), None);
    assert_status(&r, 200);
    assert!(r.json()["previous_valid_until"].is_string(), "{}", r.text());
    assert_ne!(secret_of(&r.json()), secret);
}
