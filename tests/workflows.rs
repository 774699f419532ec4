//! The spec's two workflows, end to end over HTTP against the real binary, with e-mail going
//! through a real SMTP listener on loopback (`common::smtp`).
//!
//! - Owner: create an endpoint → call it with the default sandbox key and see the call in the
//!   log → invite a collaborator by e-mail → see the collaborator's sandbox calls in the log →
//!   approve their deploy request; the collaborator is notified and e-mailed.
//! - Collaborator: accept the invitation after logging in → find the sandbox key on the
//!   endpoint → integrate and test → submit a deploy request → after the owner deploys, get
//!   the notification and take the production key, which now works.

use crate::common;

use std::time::Duration;

use common::smtp::{Received, SmtpServer};
use common::*;
use serde_json::{Value, json};

const FROM: &str = "intake <intake@example.com>";
const COLLABORATOR: &str = "dev@example.com";
const MAIL_WAIT: Duration = Duration::from_secs(20);

fn server_with_mail(smtp: &SmtpServer) -> TestServer {
    TestServer::start_with_config(&smtp.config_toml(FROM))
}

/// The invitation token in an e-mail: the last segment of its `/invitations/` link.
fn invitation_token(mail: &Received) -> String {
    let body = mail.body_text();
    let link = body
        .split_whitespace()
        .find(|w| w.contains("/invitations/inv_"))
        .unwrap_or_else(|| panic!("no invitation link in the e-mail body:\n{body}"));
    link.rsplit('/').next().unwrap_or_default().to_string()
}

/// The messages sent to `to`, oldest first.
fn mails_to(smtp: &SmtpServer, to: &str) -> Vec<Received> {
    smtp.messages()
        .into_iter()
        .filter(|m| m.to.iter().any(|t| t == to))
        .collect()
}

/// Waits until `to` has received `n` messages; returns them.
fn wait_mails_to(smtp: &SmtpServer, to: &str, n: usize) -> Vec<Received> {
    let deadline = std::time::Instant::now() + MAIL_WAIT;
    loop {
        let mails = mails_to(smtp, to);
        if mails.len() >= n {
            return mails;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{to} received {} of {n} e-mails; all received: {:?}",
            mails.len(),
            smtp.messages()
                .iter()
                .map(|m| (m.to.clone(), m.subject()))
                .collect::<Vec<_>>()
        );
        let total = smtp.messages().len();
        smtp.wait_for(total + 1, MAIL_WAIT);
    }
}

/// A management call with a session cookie.
fn with_cookie(
    s: &TestServer,
    method: &str,
    path: &str,
    cookie: &str,
    body: Option<&Value>,
) -> Resp {
    let cookie_header = format!("intake_session={cookie}");
    let mut headers = vec![("Cookie", cookie_header.as_str())];
    let bytes = body.map(|b| serde_json::to_vec(b).expect("json"));
    if bytes.is_some() {
        headers.push(("Content-Type", "application/json"));
    }
    s.request(method, path, &headers, bytes.as_deref())
}

fn invite(s: &TestServer, slug: &str, email: &str, permissions: &[&str]) -> Value {
    let r = s.manage(
        "POST",
        &format!("/api/v1/manage/endpoints/{slug}/invitations"),
        Some(&json!({ "email": email, "permissions": permissions })),
    );
    assert_status(&r, 201);
    r.json()
}

/// Request-log entries of the sandbox, waiting until `pred` holds for one of them.
fn wait_log_entry(s: &TestServer, slug: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = s.request_log(slug, "environment=sandbox&limit=100");
        assert_status(&r, 200);
        if let Some(entry) = r.json()["data"]
            .as_array()
            .and_then(|entries| entries.iter().find(|e| pred(e)).cloned())
        {
            return entry;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no matching request-log entry: {}",
            r.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the outbox shows message `id` as sent (the SMTP answer arrives before the
/// outbox row is updated).
fn wait_mail_sent(s: &TestServer, id: &Value) {
    let deadline = std::time::Instant::now() + MAIL_WAIT;
    loop {
        let r = s.manage("GET", &format!("/api/v1/manage/mail/{id}"), None);
        assert_status(&r, 200);
        if r.json()["status"] == "sent" {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "mail never sent: {}",
            r.text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn owner_workflow_create_call_invite_verify_approve() {
    let smtp = SmtpServer::start();
    let s = server_with_mail(&smtp);

    // 1. Create the endpoint with a name; the data operations exist at once. Description and
    //    required fields are added later.
    let ep = s.create_endpoint("Orders", &[]);
    let patched = s.patch_endpoint(
        &ep.slug,
        &json!({ "description": "Web shop orders", "required_fields": ["email"] }),
    );
    assert_eq!(patched["description"], "Web shop orders");
    assert_eq!(patched["required_fields"], json!(["email"]));
    assert_eq!(patched["environment"], "sandbox");

    // 2. Call with the default sandbox key and check the log.
    let created = s.create_record(
        &ep.slug,
        &ep.sandbox_key,
        &json!({ "email": "a@example.com" }),
    );
    let owner_call = wait_log_entry(&s, &ep.slug, |e| {
        e["method"] == "POST" && e["status"] == 202 && e["key_id"].is_string()
    });
    let owner_key_id = owner_call["key_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    // 3. Invite a collaborator by e-mail.
    let invitation = invite(&s, &ep.slug, COLLABORATOR, &["create", "read"]);
    assert_eq!(invitation["status"], "pending");
    let mail = &wait_mails_to(&smtp, COLLABORATOR, 1)[0];
    assert!(mail.subject().contains("Orders"), "{}", mail.subject());
    assert!(mail.subject().contains(OWNER_EMAIL), "{}", mail.subject());
    let token = invitation_token(mail);
    assert!(
        invitation["accept_url"]
            .as_str()
            .is_some_and(|u| u.ends_with(&token)),
        "the owner sees the same link: {invitation}"
    );
    wait_mail_sent(&s, &invitation["mail_id"]);

    // The collaborator accepts (new account) and calls the sandbox.
    let accepted = s.request(
        "POST",
        &format!("/api/v1/invitations/{token}/accept"),
        &[("Content-Type", "application/json")],
        Some(br#"{"password": "correct horse battery"}"#),
    );
    assert_status(&accepted, 200);
    let cookie = session_cookie(&accepted);
    let collab_sandbox = accepted.json()["endpoint"]["sandbox_key"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(collab_sandbox.starts_with("tm_test_"));
    assert_ne!(collab_sandbox, ep.sandbox_key);
    let record = s.create_record(
        &ep.slug,
        &collab_sandbox,
        &json!({ "email": "b@example.com" }),
    );
    let r = s.get_record(
        &ep.slug,
        &collab_sandbox,
        record["id"].as_str().unwrap_or_default(),
    );
    assert_status(&r, 200);
    // The collaboration key cannot delete (no `delete` permission).
    let r = s.delete_record(
        &ep.slug,
        &collab_sandbox,
        created["id"].as_str().unwrap_or_default(),
    );
    assert_error(&r, 403, "missing_permission_delete");

    // 4. Verify the collaborator's sandbox calls through the logs: their key id, not the owner's.
    let collaborators = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{}/collaborators", ep.slug),
        None,
    );
    assert_status(&collaborators, 200);
    let collaborator = collaborators.json()["data"][0].clone();
    assert_eq!(collaborator["email"], COLLABORATOR);
    let collab_key_id = collaborator["sandbox_key_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_ne!(collab_key_id, owner_key_id);
    for (method, status) in [("POST", 202), ("GET", 200), ("DELETE", 403)] {
        wait_log_entry(&s, &ep.slug, |e| {
            e["key_id"] == collab_key_id.as_str() && e["method"] == method && e["status"] == status
        });
    }

    // 5. The collaborator asks to deploy; the owner is notified and e-mailed, then approves;
    //    the collaborator is notified and e-mailed.
    let r = with_cookie(
        &s,
        "POST",
        &format!("/api/v1/manage/endpoints/{}/deploy-request", ep.slug),
        &cookie,
        Some(&json!({ "note": "Integration done" })),
    );
    assert_status(&r, 201);
    let owner_mail = &wait_mails_to(&smtp, OWNER_EMAIL, 1)[0];
    assert!(
        owner_mail.body_text().contains(COLLABORATOR),
        "{}",
        owner_mail.body_text()
    );
    let owner_notes = s
        .manage("GET", "/api/v1/manage/notifications?unread=true", None)
        .json();
    assert!(
        owner_notes["data"].as_array().is_some_and(|n| n
            .iter()
            .any(|n| n["kind"] == "deploy_requested" && n["endpoint_slug"] == ep.slug.as_str())),
        "{owner_notes}"
    );
    let pending = s
        .manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{}", ep.slug),
            None,
        )
        .json();
    assert_eq!(pending["deploy_request"]["requested_by"], COLLABORATOR);
    assert_eq!(pending["deploy_request"]["note"], "Integration done");
    // Still the sandbox: production keys are refused.
    let r = s.post_record(
        &ep.slug,
        &ep.production_key,
        &json!({ "email": "x@example.com" }),
    );
    assert_error(&r, 403, "endpoint_not_deployed");

    let approved = s.manage(
        "POST",
        &format!(
            "/api/v1/manage/endpoints/{}/deploy-request/approve",
            ep.slug
        ),
        None,
    );
    assert_status(&approved, 200);
    assert_eq!(approved.json()["deployed"], true);
    assert_eq!(approved.json()["environment"], "production");
    assert!(approved.json()["deploy_request"].is_null());
    let collab_mails = wait_mails_to(&smtp, COLLABORATOR, 2);
    assert!(
        collab_mails[1].body_text().contains("deployed"),
        "{}",
        collab_mails[1].body_text()
    );
    let notes = with_cookie(&s, "GET", "/api/v1/manage/notifications", &cookie, None).json();
    assert_eq!(notes["data"][0]["kind"], "endpoint_deployed", "{notes}");
    // The owner's production key works now.
    s.create_record(
        &ep.slug,
        &ep.production_key,
        &json!({ "email": "live@example.com" }),
    );

    // Every transition is in the audit log, newest first, with who did it.
    let audit = s
        .manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{}/audit", ep.slug),
            None,
        )
        .json();
    let actions: Vec<(String, String)> = audit["data"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["action"].as_str().unwrap_or_default().to_string(),
                        e["actor"]["email"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let expected = [
        ("endpoint.deployed", OWNER_EMAIL),
        ("deploy.requested", COLLABORATOR),
        ("invitation.accepted", COLLABORATOR),
        ("invitation.sent", OWNER_EMAIL),
        ("endpoint.updated", OWNER_EMAIL),
        ("endpoint.created", OWNER_EMAIL),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(a, w)| (a.to_string(), w.to_string()))
        .collect();
    assert_eq!(actions, expected);
}

#[test]
fn collaborator_workflow_accept_find_key_test_request_take_production_key() {
    let smtp = SmtpServer::start();
    let s = server_with_mail(&smtp);
    let first = s.create_endpoint("Leads", &[]);
    let ep = s.create_endpoint("Tickets", &[]);

    // The collaborator already has an account (from an earlier invitation).
    let r = invite(&s, &first.slug, COLLABORATOR, &["read"]);
    assert_status(&s.manage("GET", "/api/v1/manage/mail", None), 200);
    let first_token = invitation_token(&wait_mails_to(&smtp, COLLABORATOR, 1)[0]);
    assert!(
        r["accept_url"]
            .as_str()
            .is_some_and(|u| u.ends_with(&first_token))
    );
    let created = s.request(
        "POST",
        &format!("/api/v1/invitations/{first_token}/accept"),
        &[("Content-Type", "application/json")],
        Some(br#"{"password": "correct horse battery"}"#),
    );
    assert_status(&created, 200);

    // 1. Accept the invitation after logging in to the dashboard.
    invite(&s, &ep.slug, COLLABORATOR, &["create", "read", "replace"]);
    let token = invitation_token(&wait_mails_to(&smtp, COLLABORATOR, 2)[1]);
    let preview = s.request("GET", &format!("/api/v1/invitations/{token}"), &[], None);
    assert_status(&preview, 200);
    assert_eq!(preview.json()["endpoint_name"], "Tickets");
    assert_eq!(preview.json()["account_exists"], true);
    let r = s.request(
        "POST",
        &format!("/api/v1/invitations/{token}/accept"),
        &[],
        None,
    );
    assert_error(&r, 401, "login_required");
    let login = s.request(
        "POST",
        "/api/v1/auth/login",
        &[("Content-Type", "application/json")],
        Some(
            format!(r#"{{"email": "{COLLABORATOR}", "password": "correct horse battery"}}"#)
                .as_bytes(),
        ),
    );
    assert_status(&login, 200);
    let cookie = session_cookie(&login);
    let r = with_cookie(
        &s,
        "POST",
        &format!("/api/v1/invitations/{token}/accept"),
        &cookie,
        None,
    );
    assert_status(&r, 200);
    assert_eq!(r.json()["endpoint"]["slug"], ep.slug.as_str());

    // 2. Find the sandbox key on the endpoint detail (no production key before deployment),
    //    read with a personal token: the session cookie alone reads no keys.
    let authorization = common::authorization_of_session(&s, &cookie);
    let detail = s.manage_with(
        "GET",
        &format!("/api/v1/manage/endpoints/{}", ep.slug),
        Some(&authorization),
        None,
    );
    assert_status(&detail, 200);
    let detail = detail.json();
    assert_eq!(detail["role"], "collaborator");
    assert_eq!(detail["permissions"], json!(["create", "read", "replace"]));
    assert!(detail["production_key"].is_null(), "{detail}");
    let sandbox_key = detail["sandbox_key"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(sandbox_key.starts_with("tm_test_"));
    let listed = s
        .manage_with(
            "GET",
            "/api/v1/manage/endpoints",
            Some(&authorization),
            None,
        )
        .json();
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(2), "{listed}");

    // 3. Integrate and test in the sandbox.
    let rec = s.create_record(
        &ep.slug,
        &sandbox_key,
        &json!({ "subject": "printer on fire" }),
    );
    let id = rec["id"].as_str().unwrap_or_default().to_string();
    assert_status(
        &s.put_record(
            &ep.slug,
            &sandbox_key,
            &id,
            &json!({ "subject": "printer fixed" }),
        ),
        202,
    );
    assert_eq!(
        s.expect_record(&ep.slug, &sandbox_key, &id)["payload"]["subject"],
        "printer fixed"
    );
    assert_error(
        &s.delete_record(&ep.slug, &sandbox_key, &id),
        403,
        "missing_permission_delete",
    );

    // 4. Submit a deploy request from the endpoint detail.
    let r = with_cookie(
        &s,
        "POST",
        &format!("/api/v1/manage/endpoints/{}/deploy-request", ep.slug),
        &cookie,
        None,
    );
    assert_status(&r, 201);
    assert_eq!(r.json()["deploy_request"]["requested_by"], COLLABORATOR);
    let r = with_cookie(
        &s,
        "POST",
        &format!("/api/v1/manage/endpoints/{}/deploy-request", ep.slug),
        &cookie,
        None,
    );
    assert_error(&r, 409, "conflict");
    let r = with_cookie(
        &s,
        "POST",
        &format!("/api/v1/manage/endpoints/{}/deploy", ep.slug),
        &cookie,
        None,
    );
    assert_error(&r, 403, "owner_only");

    // 5. The owner deploys directly; a notification and an e-mail arrive; the production key
    //    is on the endpoint and works against production data only.
    let deployed = s.deploy(&ep.slug);
    assert_eq!(deployed["deployed"], true);
    let mails = wait_mails_to(&smtp, COLLABORATOR, 3);
    assert!(
        mails[2].subject().contains("Tickets"),
        "{}",
        mails[2].subject()
    );
    let unread = with_cookie(
        &s,
        "GET",
        "/api/v1/manage/notifications?unread=true",
        &cookie,
        None,
    )
    .json();
    let note = unread["data"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["kind"] == "endpoint_deployed").cloned())
        .unwrap_or_else(|| panic!("no deployment notification: {unread}"));
    assert_eq!(note["endpoint_slug"], ep.slug.as_str());
    let r = with_cookie(
        &s,
        "POST",
        &format!("/api/v1/manage/notifications/{}/read", note["id"]),
        &cookie,
        None,
    );
    assert_status(&r, 200);
    assert_eq!(r.json()["read"], true);
    let unread = with_cookie(
        &s,
        "GET",
        "/api/v1/manage/notifications?unread=true",
        &cookie,
        None,
    )
    .json();
    assert!(
        unread["data"]
            .as_array()
            .is_some_and(|n| n.iter().all(|n| n["id"] != note["id"])),
        "{unread}"
    );

    let detail = s
        .manage_with(
            "GET",
            &format!("/api/v1/manage/endpoints/{}", ep.slug),
            Some(&authorization),
            None,
        )
        .json();
    let production_key = detail["production_key"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(production_key.starts_with("tm_live_"), "{detail}");
    assert_ne!(production_key, ep.production_key);
    let live = s.create_record(
        &ep.slug,
        &production_key,
        &json!({ "subject": "real ticket" }),
    );
    let live_id = live["id"].as_str().unwrap_or_default().to_string();
    assert_eq!(s.list_ids(&ep.slug, &production_key), vec![live_id.clone()]);
    assert_error(
        &s.get_record(&ep.slug, &sandbox_key, &live_id),
        404,
        "record_not_found",
    );

    // Logging out ends the session.
    let r = with_cookie(&s, "POST", "/api/v1/auth/logout", &cookie, None);
    assert_status(&r, 200);
    let r = with_cookie(&s, "GET", "/api/v1/auth/session", &cookie, None);
    assert_error(&r, 401, "session_expired");
}
