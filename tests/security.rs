//! The security review through the real server: the authentication matrix of every route
//! (taken from the served OpenAPI document, so a new route is covered without touching this
//! file) and of the dashboard's pages and forms; secrets absent from the logs of a full
//! workflow at `RUST_LOG=debug` and from the raw bytes of the data dir (and of the database, on
//! PostgreSQL); the dashboard's response headers, cookie flags, and the escaping of
//! user-supplied text on every page.

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::receiver::{Receiver, Reply};
use common::visitor::{Visitor, csrf_of, login};
use common::{Endpoint, OWNER_EMAIL, Resp, TestServer, assert_status, session_cookie};
use serde_json::{Value, json};

const METRICS_TOKEN: &str = "metrics-token-3k9x2m4n8p1q7r5t";
const MEMBER_EMAIL: &str = "member@example.com";
const MEMBER_PASSWORD: &str = "member password 7k2m9x4q";

/// The server's config: a metrics token (so `/metrics` has a credential to refuse) and
/// webhooks to the loopback receiver.
fn config() -> String {
    format!(
        "[operations]\nmetrics_token = \"{METRICS_TOKEN}\"\n\n\
         [webhooks]\nallow_private_targets = true\n"
    )
}

/// What the tests set up besides the owner: two endpoints of the owner, a record in the
/// first, and a member who collaborates on the first with the read permission only.
struct World {
    a: Endpoint,
    b: Endpoint,
    record_id: String,
    member_id: u64,
    member_key: String,
    member_token: String,
    member_session: String,
    invitation_token: String,
}

impl World {
    fn build(s: &TestServer, name: &str) -> World {
        let a = s.create_endpoint(name, &[]);
        let b = s.create_endpoint("Invoices", &[]);
        let record = s.create_record(&a.slug, &a.sandbox_key, &json!({"n": 1}));
        let invited = s.manage(
            "POST",
            &format!("/api/v1/manage/endpoints/{}/invitations", a.slug),
            Some(&json!({ "email": MEMBER_EMAIL, "permissions": ["read"] })),
        );
        assert_status(&invited, 201);
        let accept_url = invited.json()["accept_url"].as_str().unwrap().to_string();
        let invitation_token = accept_url.rsplit('/').next().unwrap().to_string();
        let accepted = s.manage_with(
            "POST",
            &format!("/api/v1/invitations/{invitation_token}/accept"),
            None,
            Some(&json!({ "password": MEMBER_PASSWORD })),
        );
        assert_status(&accepted, 200);
        let member_session = session_cookie(&accepted);
        let body = accepted.json();
        let token = call(
            s,
            "POST",
            "/api/v1/manage/tokens",
            &Cred::Session(&member_session),
            Some(&json!({ "name": "member" })),
        );
        assert_status(&token, 201);
        World {
            record_id: record["id"].as_str().unwrap().to_string(),
            member_id: body["account"]["id"].as_u64().unwrap(),
            member_key: body["endpoint"]["sandbox_key"]
                .as_str()
                .unwrap()
                .to_string(),
            member_token: token.json()["token"].as_str().unwrap().to_string(),
            member_session,
            invitation_token,
            a,
            b,
        }
    }
}

/// A credential a caller presents.
#[derive(Debug)]
enum Cred<'a> {
    None,
    Bearer(&'a str),
    Session(&'a str),
}

fn call(s: &TestServer, method: &str, path: &str, cred: &Cred, body: Option<&Value>) -> Resp {
    call_with(s, method, path, cred, body, &[])
}

/// [`call`] with extra request headers.
fn call_with(
    s: &TestServer,
    method: &str,
    path: &str,
    cred: &Cred,
    body: Option<&Value>,
    extra: &[(&str, &str)],
) -> Resp {
    let (name, value) = match cred {
        Cred::None => ("", String::new()),
        Cred::Bearer(token) => ("Authorization", format!("Bearer {token}")),
        Cred::Session(cookie) => ("Cookie", format!("intake_session={cookie}")),
    };
    let mut headers = Vec::new();
    if !name.is_empty() {
        headers.push((name, value.as_str()));
    }
    let bytes = body.map(|b| serde_json::to_vec(b).unwrap());
    if bytes.is_some() {
        headers.push(("Content-Type", "application/json"));
    }
    headers.extend_from_slice(extra);
    s.request(method, path, &headers, bytes.as_deref())
}

/// Everything an owner can see, to show that refused calls changed nothing.
fn snapshot(s: &TestServer, w: &World) -> Vec<(String, Value)> {
    let a = &w.a.slug;
    let mut seen: Vec<(String, Value)> = [
        "/api/v1/manage/account".to_string(),
        "/api/v1/manage/accounts".to_string(),
        "/api/v1/manage/tokens".to_string(),
        "/api/v1/manage/endpoints".to_string(),
        "/api/v1/manage/notifications".to_string(),
        "/api/v1/manage/mail".to_string(),
        format!("/api/v1/manage/endpoints/{a}/audit"),
        format!("/api/v1/manage/endpoints/{a}/invitations"),
        format!("/api/v1/manage/endpoints/{a}/collaborators"),
        format!("/api/v1/manage/endpoints/{a}/deliveries"),
        format!("/api/v1/manage/endpoints/{a}/webhook-secrets/sandbox"),
        format!("/api/v1/manage/endpoints/{a}/webhook-secrets/production"),
        format!("/api/v1/manage/endpoints/{a}/webhooks/sandbox"),
    ]
    .into_iter()
    .map(|path| {
        let r = s.manage("GET", &path, None);
        // An error body differs by its request id alone: keep its code.
        let body = match r.error_code() {
            Some(code) => json!(code),
            None => r.json(),
        };
        (path, json!({ "status": r.status, "body": body }))
    })
    .collect();
    let records = s.list(a, &w.a.sandbox_key, "limit=30");
    assert_status(&records, 200);
    seen.push(("records".into(), records.json()));
    seen
}

/// The documented error codes of an operation for `status` (empty if it documents none).
fn documented_codes(op: &Value, status: u16) -> Vec<String> {
    op["responses"][status.to_string()]["content"]["application/json"]["schema"]["properties"]
        ["error"]["properties"]["code"]["enum"]
        .as_array()
        .map(|codes| {
            codes
                .iter()
                .map(|c| c.as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether the operation's security requirements name `scheme`.
fn accepts(op: &Value, scheme: &str) -> bool {
    op["security"]
        .as_array()
        .unwrap()
        .iter()
        .any(|requirement| requirement.get(scheme).is_some())
}

/// Whether the operation may be called without credentials.
fn open_to_anyone(op: &Value) -> bool {
    let security = op["security"].as_array().unwrap();
    security.is_empty()
        || security
            .iter()
            .any(|r| r.as_object().is_some_and(|o| o.is_empty()))
}

#[test]
fn every_route_refuses_calls_without_the_right_credential_and_they_change_nothing() {
    let s = TestServer::start_with_config(&config());
    let w = World::build(&s, "Orders");
    let before = snapshot(&s, &w);
    let doc = s.request("GET", "/api/v1/openapi.json", &[], None).json();

    // Credentials that are wrong for every route: the wrong kind, the wrong prefix, nothing.
    let wrong_prefix_key = w.a.sandbox_key.replacen("tm_test_", "tm_demo_", 1);
    let wrong_prefix_token = s.owner_token.replacen("itk_", "itx_", 1);
    let garbage_session = "0".repeat(40);
    let anonymous = [
        Cred::None,
        Cred::Bearer("garbage"),
        Cred::Bearer(&wrong_prefix_key),
        Cred::Bearer(&wrong_prefix_token),
    ];

    let mut checked = 0;
    for (template, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let method = method.to_uppercase();
            let body = op.pointer("/requestBody/content/application~1json/example");
            let path_for = |slug: &str| {
                template
                    .replace("{slug}", slug)
                    .replace("{record_id}", &w.record_id)
                    .replace("{environment}", "sandbox")
                    .replace("{account_id}", &w.member_id.to_string())
                    .replace("{token}", "inv_unknown")
                    .replace("{subscription_id}", "sub_1")
                    .replace("{id}", "1")
            };
            let path = path_for(&w.a.slug);
            let mut refuse_with = |cred: &Cred, path: &str, extra: &[(&str, &str)], status: u16| {
                let r = call_with(&s, &method, path, cred, body, extra);
                let what = format!("{method} {path} with {cred:?} {extra:?}");
                assert_eq!(r.status, status, "{what}: {}", r.describe());
                let code = r.error_code().unwrap_or_default();
                assert!(
                    documented_codes(op, status).contains(&code),
                    "{what}: {code} is not documented for {status}"
                );
                checked += 1;
            };
            let mut refuse =
                |cred: &Cred, path: &str, status: u16| refuse_with(cred, path, &[], status);
            if template.contains("{token}") {
                // The invitation token in the path is the credential: an unknown one names
                // nothing, whoever asks.
                for cred in [Cred::None, Cred::Bearer(&s.owner_token)] {
                    refuse(&cred, &path, 404);
                }
            } else if open_to_anyone(op) && !accepts(op, "metricsToken") {
                // Public by design: health, readiness, the document, login, logout.
                continue;
            } else if accepts(op, "metricsToken") {
                for cred in &anonymous {
                    refuse(cred, &path, 401);
                }
                let r = call(&s, "GET", &path, &Cred::Bearer(METRICS_TOKEN), None);
                assert_status(&r, 200);
            } else if accepts(op, "apiKey") {
                for cred in &anonymous {
                    refuse(cred, &path, 401);
                }
                if !accepts(op, "accountToken") {
                    refuse(&Cred::Bearer(&s.owner_token), &path, 401);
                }
                // Another endpoint's key names another endpoint: this one is not found.
                refuse(&Cred::Bearer(&w.b.sandbox_key), &path, 404);
                // Production keys work only once the endpoint is deployed.
                refuse(&Cred::Bearer(&w.a.production_key), &path, 403);
                if method != "GET" {
                    // The collaborator's key only has the read permission.
                    refuse(&Cred::Bearer(&w.member_key), &path, 403);
                }
                if accepts(op, "accountToken") {
                    refuse(&Cred::Session(&garbage_session), &path, 401);
                    refuse(&Cred::Bearer(&w.member_token), &path_for(&w.b.slug), 404);
                }
            } else {
                assert!(accepts(op, "accountToken"), "{method} {template}: {op}");
                for cred in &anonymous {
                    refuse(cred, &path, 401);
                }
                refuse(&Cred::Bearer(&w.a.sandbox_key), &path, 401);
                refuse(&Cred::Session(&garbage_session), &path, 401);
                // The member's own token and session, where only the endpoint's owner or
                // the server's owner may call.
                let owners_only = documented_codes(op, 403)
                    .iter()
                    .any(|c| c == "owner_only" || c == "server_owner_only");
                if owners_only {
                    refuse(&Cred::Bearer(&w.member_token), &path, 403);
                    refuse(&Cred::Session(&w.member_session), &path, 403);
                }
                if template.contains("{slug}") {
                    // An endpoint the member does not collaborate on does not exist for it.
                    refuse(&Cred::Bearer(&w.member_token), &path_for(&w.b.slug), 404);
                }
                // A change the session cookie authorises must come from this origin: not
                // from another site, nor from a sibling subdomain (same site).
                if method != "GET" {
                    let session = Cred::Session(&w.member_session);
                    for cross in [
                        ("Origin", "https://evil.example"),
                        ("Sec-Fetch-Site", "same-site"),
                    ] {
                        refuse_with(&session, &path, &[cross], 403);
                    }
                }
            }
        }
    }
    assert!(checked > 300, "only {checked} refusals checked");
    // Logging out is open to anyone, but another origin cannot end a session.
    let session = Cred::Session(&w.member_session);
    let cross = [("Origin", "https://evil.example")];
    let r = call_with(&s, "POST", "/api/v1/auth/logout", &session, None, &cross);
    assert_eq!(
        r.error_code().as_deref(),
        Some("cross_site_request"),
        "{}",
        r.describe()
    );
    assert_status(
        &call(&s, "GET", "/api/v1/auth/session", &session, None),
        200,
    );
    assert_eq!(snapshot(&s, &w), before, "a refused call changed something");
}

/// The dashboard's pages of endpoint `slug` and the server-wide ones (`dashboard::router`).
fn dashboard_pages(slug: &str) -> Vec<String> {
    let mut pages: Vec<String> = [
        "/dashboard",
        "/dashboard/endpoints",
        "/dashboard/notifications",
    ]
    .map(String::from)
    .to_vec();
    for tail in [
        "",
        "/production",
        "/collaborators",
        "/webhooks",
        "/webhooks/sandbox/subscriptions/sub_1",
        "/requests",
        "/deliveries",
        "/deliveries/1",
        "/usage",
    ] {
        pages.push(format!("/dashboard/endpoints/{slug}{tail}"));
    }
    pages
}

/// The dashboard's forms (`dashboard::router`), each with fields that would change something.
fn dashboard_forms(w: &World) -> Vec<(String, Vec<(&'static str, String)>)> {
    let e = format!("/dashboard/endpoints/{}", w.a.slug);
    let member = w.member_id;
    let name = |v: &str| vec![("name", v.to_string())];
    vec![
        ("/dashboard/endpoints".into(), name("Forged")),
        (format!("{e}/settings"), name("Forged")),
        (format!("{e}/active"), vec![("active", "off".into())]),
        (format!("{e}/deploy"), vec![]),
        (format!("{e}/deploy-request"), vec![("note", "x".into())]),
        (format!("{e}/deploy-request/approve"), vec![]),
        (format!("{e}/deploy-request/reject"), vec![]),
        (format!("{e}/webhook-secrets/sandbox/reissue"), vec![]),
        (
            format!("{e}/invitations"),
            vec![
                ("email", "x@example.com".into()),
                ("permission", "read".into()),
            ],
        ),
        (format!("{e}/invitations/1/revoke"), vec![]),
        (
            format!("{e}/collaborators/{member}/permissions"),
            vec![("permission", "delete".into())],
        ),
        (format!("{e}/collaborators/{member}/remove"), vec![]),
        (
            format!("{e}/webhooks/sandbox/subscriptions"),
            vec![("url", "https://example.com/hook".into())],
        ),
        (
            format!("{e}/webhooks/sandbox/subscriptions/sub_1"),
            vec![("url", "https://example.com/hook".into())],
        ),
        (
            format!("{e}/webhooks/sandbox/subscriptions/sub_1/delete"),
            vec![],
        ),
        (
            format!("{e}/webhooks/sandbox/subscriptions/sub_1/recover"),
            vec![("since", "2026-01-01T00:00".into())],
        ),
        (
            format!("{e}/webhooks/sandbox/caller-recovery"),
            vec![("since", "2026-01-01T00:00".into())],
        ),
        (format!("{e}/deliveries/1/redeliver"), vec![]),
        ("/dashboard/notifications/1/read".into(), vec![]),
        ("/dashboard/mail/test".into(), vec![]),
        ("/dashboard/logout".into(), vec![]),
        (
            format!("/invitations/{}/accept", w.invitation_token),
            vec![("password", "forged password 123".into())],
        ),
    ]
}

/// The headers every dashboard response carries: a CSP without inline script, no framing,
/// no sniffing, a referrer policy.
fn assert_hardened(r: &Resp, what: &str) {
    let csp = r
        .header("content-security-policy")
        .unwrap_or_else(|| panic!("{what}: no CSP"));
    assert!(csp.contains("script-src 'self'"), "{what}: {csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{what}: {csp}");
    assert!(!csp.contains("unsafe-inline"), "{what}: {csp}");
    assert_eq!(r.header("x-frame-options"), Some("DENY"), "{what}");
    assert_eq!(
        r.header("x-content-type-options"),
        Some("nosniff"),
        "{what}"
    );
    assert!(r.header("referrer-policy").is_some(), "{what}");
}

#[test]
fn dashboard_pages_need_a_session_and_forms_a_csrf_token() {
    let s = TestServer::start_with_config(&config());
    let w = World::build(&s, "Orders");
    let before = snapshot(&s, &w);

    // Without a session every page sends the visitor to the login form.
    let mut stranger = Visitor::new(s.base_url(), &s.agent);
    for page in dashboard_pages(&w.a.slug) {
        let r = stranger.get(&page);
        assert_eq!(r.status, 303, "{page}: {}", r.describe());
        assert!(
            r.header("location")
                .is_some_and(|l| l.starts_with("/dashboard/login")),
            "{page}: {:?}",
            r.header("location")
        );
        assert_hardened(&r, &page);
    }
    // The member's session sees nothing of an endpoint it does not collaborate on.
    let mut member = Visitor::new(s.base_url(), &s.agent);
    login(&mut member, MEMBER_EMAIL, MEMBER_PASSWORD);
    for page in dashboard_pages(&w.b.slug).iter().skip(3) {
        let r = member.get(page);
        assert_eq!(r.status, 404, "{page}: {}", r.describe());
        assert_hardened(&r, page);
    }

    // Every form refuses a post without the session's CSRF token, with or without a
    // session, before reading or changing anything.
    let mut owner = Visitor::new(s.base_url(), &s.agent);
    let token = login(&mut owner, OWNER_EMAIL, &s.password);
    for (form, fields) in dashboard_forms(&w) {
        let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut wrong = fields.clone();
        wrong.push(("csrf", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
        for (who, with_session, fields) in [
            ("no session, no token", false, &fields),
            ("session, no token", true, &fields),
            ("session, wrong token", true, &wrong),
        ] {
            let visitor = if with_session {
                &mut owner
            } else {
                &mut stranger
            };
            let r = visitor.post(&form, fields, &[]);
            assert_hardened(&r, &form);
            // Without a session, a form that needs one sends the visitor to log in.
            let to_login = r.status == 303
                && !with_session
                && r.header("location")
                    .is_some_and(|l| l.starts_with("/dashboard/login"));
            if !to_login {
                assert_eq!(r.status, 403, "{form} ({who}): {}", r.describe());
                assert!(r.text().contains("csrf_failed"), "{form} ({who})");
            }
        }
    }
    // The owner's session still works: the refusals did not end it either.
    assert_eq!(owner.get("/dashboard/endpoints").status, 200);
    assert!(!token.is_empty());
    assert_eq!(snapshot(&s, &w), before, "a refused form changed something");
}

/// The attributes of the cookie `name` set by a response.
fn cookie_attributes(r: &Resp, name: &str) -> Vec<String> {
    let header = r
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
        .map(|(_, v)| v)
        .find(|v| v.starts_with(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} cookie: {}", r.describe()));
    header
        .split(';')
        .skip(1)
        .map(|a| a.trim().to_string())
        .collect()
}

/// Logs in through the dashboard's form with `agent` and checks the flags of both cookies it
/// sets: the visitor's CSRF cookie and the session.
fn assert_login_cookies(base: String, agent: &ureq::Agent, password: &str, secure: bool) {
    let mut v = Visitor::new(base, agent);
    let page = v.get("/dashboard/login");
    assert_hardened(&page, "login page");
    let visitor = cookie_attributes(&page, "intake_csrf");
    let r = v.post(
        "/dashboard/login",
        &[
            ("csrf", &csrf_of(&page)),
            ("email", OWNER_EMAIL),
            ("password", password),
        ],
        &[],
    );
    assert_eq!(r.status, 303, "{}", r.describe());
    let session = cookie_attributes(&r, "intake_session");
    for attributes in [visitor, session] {
        for flag in ["HttpOnly", "SameSite=Strict", "Path=/"] {
            assert!(
                attributes.iter().any(|a| a == flag),
                "{flag}: {attributes:?}"
            );
        }
        assert_eq!(
            attributes.iter().any(|a| a == "Secure"),
            secure,
            "{attributes:?}"
        );
    }
}

#[test]
fn session_cookies_are_httponly_strict_and_secure_over_tls() {
    let s = TestServer::start();
    assert_login_cookies(s.base_url(), &s.agent, &s.password, false);

    // Served over TLS (the self-signed development certificate): the cookies are Secure,
    // even when `public_url` (links in e-mails) was left at plain http.
    let tls = TestServer::start_with_config(
        "public_url = \"http://intake.example\"\n\n[tls]\nself_signed = true\n",
    );
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .tls_config(
            ureq::tls::TlsConfig::builder()
                .disable_verification(true)
                .build(),
        )
        .build()
        .into();
    assert_login_cookies(
        format!("https://{}", tls.addr()),
        &agent,
        &tls.password,
        true,
    );
}

const XSS: &str = "<script>alert(1)</script>";

/// How many times [`XSS`] appears escaped in `html` (as named or numeric references).
fn escaped_count(html: &str) -> usize {
    ["&lt;script&gt;alert(1)", "&#60;script&#62;alert(1)"]
        .iter()
        .map(|escaped| html.matches(escaped).count())
        .sum()
}

#[test]
fn user_supplied_text_renders_escaped_on_every_page() {
    let receiver = Receiver::start();
    // The receiver's answer is shown in the delivery log: it is someone else's text too.
    receiver.always(Reply::status(500).body(XSS));
    let s = TestServer::start_with_config(&config());
    let w = World::build(&s, XSS);
    let a = &w.a.slug;
    let patch = json!({ "description": XSS, "required_fields": [XSS] });
    s.patch_endpoint(a, &patch);
    let hook = json!({ "url": receiver.url("/hook") });
    let r = s.manage(
        "PUT",
        &format!("/api/v1/manage/endpoints/{a}/webhooks/sandbox"),
        Some(&hook),
    );
    assert_status(&r, 200);
    let payload = json!({ "x": XSS, XSS: "key" });
    s.create_record(a, &w.a.sandbox_key, &payload);
    // The member's deploy request carries a note the owner reads.
    let r = call(
        &s,
        "POST",
        &format!("/api/v1/manage/endpoints/{a}/deploy-request"),
        &Cred::Bearer(&w.member_token),
        Some(&json!({ "note": XSS })),
    );
    assert_status(&r, 201);
    receiver.wait_for(1, Duration::from_secs(30));
    let delivery = loop {
        let list = s.manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{a}/deliveries"),
            None,
        );
        let attempted = list.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["attempts"].as_u64().unwrap_or(0) > 0)
            .map(|d| d["id"].as_u64().unwrap());
        if let Some(id) = attempted {
            break id;
        }
        std::thread::sleep(Duration::from_millis(50));
    };

    let mut owner = Visitor::new(s.base_url(), &s.agent);
    login(&mut owner, OWNER_EMAIL, &s.password);
    let mut pages = dashboard_pages(a);
    pages.push(format!("/dashboard/endpoints/{a}/deliveries/{delivery}"));
    let mut shown = 0;
    for page in &pages {
        let r = owner.get(page);
        // `/dashboard` redirects to the endpoints; a delivery id that does not exist is 404.
        assert!(
            [200, 303, 404].contains(&r.status),
            "{page}: {}",
            r.describe()
        );
        let html = r.text();
        // The layout's only script is its own file (`<script src>`), never inline.
        assert!(
            !html.contains(XSS) && !html.contains("<script>"),
            "{page} carries an inline script: {html}"
        );
        if escaped_count(&html) > 0 {
            shown += 1;
        }
    }
    // The name is on every page of the endpoint; the payload and the receiver's answer on
    // the delivery's page.
    let detail = owner
        .get(&format!("/dashboard/endpoints/{a}/deliveries/{delivery}"))
        .text();
    assert!(
        escaped_count(&detail) >= 3,
        "name, payload and answer: {detail}"
    );
    assert!(shown >= 8, "escaped text on only {shown} pages");
}

/// Every file under `dir`, as raw bytes, with its path.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(files(&path));
        } else {
            out.push((path.display().to_string(), std::fs::read(&path).unwrap()));
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[test]
fn secrets_never_reach_the_logs_or_the_data_dir_in_plain() {
    let receiver = Receiver::start();
    let s = TestServer::start_with_config_env(&config(), &[("RUST_LOG", "debug")]);
    let w = World::build(&s, "Orders");
    let a = &w.a.slug;

    // Webhooks: the owner's with an auth value, a caller's with X-Webhook-Auth, and the
    // signing secret shown, reissued and used.
    let owner_hook_auth = "Bearer owner-hook-auth-9q8w7e6r5t4y";
    let caller_auth = "caller-auth-1z2x3c4v5b6n";
    let r = s.manage(
        "PUT",
        &format!("/api/v1/manage/endpoints/{a}/webhooks/sandbox"),
        Some(&json!({ "url": receiver.url("/owner"), "auth_value": owner_hook_auth })),
    );
    assert_status(&r, 200);
    let secret_path = format!("/api/v1/manage/endpoints/{a}/webhook-secrets/sandbox");
    let first_secret = s.manage("GET", &secret_path, None).json()["secret"]
        .as_str()
        .unwrap()
        .to_string();
    let r = s.manage("POST", &format!("{secret_path}/reissue"), None);
    assert_status(&r, 200);
    let second_secret = r.json()["secret"].as_str().unwrap().to_string();
    let callback = receiver.url("/caller");
    let body = serde_json::to_vec(&json!({ "n": 2 })).unwrap();
    let auth = format!("Bearer {}", w.a.sandbox_key);
    let r = s.request(
        "POST",
        &format!("/api/v1/data/{a}"),
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("X-Webhook-Callback", &callback),
            ("X-Webhook-Auth", caller_auth),
        ],
        Some(&body),
    );
    assert_status(&r, 202);
    let created = r.json()["id"].as_str().unwrap().to_string();
    assert_status(&s.get_record(a, &w.a.sandbox_key, &created), 200);
    assert_status(
        &s.put_record(a, &w.a.sandbox_key, &created, &json!({"n": 3})),
        202,
    );
    assert_status(&s.get_record(a, &w.member_key, &created), 200);
    assert_status(&s.delete_record(a, &w.a.sandbox_key, &created), 202);
    // Deployed: the production key works too.
    s.deploy(a);
    s.create_record(a, &w.a.production_key, &json!({"n": 4}));

    // Logins: the API's and the dashboard's, and the member's token in use.
    let login_body = json!({ "email": OWNER_EMAIL, "password": s.password });
    let r = call(
        &s,
        "POST",
        "/api/v1/auth/login",
        &Cred::None,
        Some(&login_body),
    );
    assert_status(&r, 200);
    let api_session = session_cookie(&r);
    let who = call(
        &s,
        "GET",
        "/api/v1/auth/session",
        &Cred::Session(&api_session),
        None,
    );
    assert_status(&who, 200);
    let mut v = Visitor::new(s.base_url(), &s.agent);
    login(&mut v, OWNER_EMAIL, &s.password);
    let dashboard_cookies: Vec<String> = v.cookies.iter().map(|(_, value)| value.clone()).collect();
    let r = call(
        &s,
        "GET",
        "/api/v1/manage/endpoints",
        &Cred::Bearer(&w.member_token),
        None,
    );
    assert_status(&r, 200);
    let metrics = call(&s, "GET", "/metrics", &Cred::Bearer(METRICS_TOKEN), None);
    assert_status(&metrics, 200);
    // The owner's hook for the create, replace and delete, the caller's for the create: the
    // secrets and auth values were used in requests.
    let received = receiver.wait_for(4, Duration::from_secs(30));
    assert!(
        received
            .iter()
            .any(|r| r.header("x-webhook-auth") == Some(caller_auth)
                || r.header("authorization") == Some(caller_auth))
    );
    assert!(
        received
            .iter()
            .any(|r| r.header("authorization") == Some(owner_hook_auth))
    );

    let base64_body = |secret: &str| secret.strip_prefix("whsec_").unwrap().to_string();
    let mut secrets = vec![
        ("owner token", s.owner_token.clone()),
        ("owner password", s.password.clone()),
        ("member password", MEMBER_PASSWORD.to_string()),
        ("member token", w.member_token.clone()),
        ("member session", w.member_session.clone()),
        ("sandbox key", w.a.sandbox_key.clone()),
        ("production key", w.a.production_key.clone()),
        ("other endpoint's key", w.b.sandbox_key.clone()),
        ("collaboration key", w.member_key.clone()),
        ("API session", api_session.clone()),
        ("first signing secret", first_secret.clone()),
        ("first signing secret's body", base64_body(&first_secret)),
        ("second signing secret", second_secret.clone()),
        ("second signing secret's body", base64_body(&second_secret)),
        ("owner webhook auth value", owner_hook_auth.to_string()),
        ("caller webhook auth value", caller_auth.to_string()),
        ("metrics token", METRICS_TOKEN.to_string()),
    ];
    for cookie in &dashboard_cookies {
        secrets.push(("dashboard cookie", cookie.clone()));
    }

    let log = s.log.text();
    assert!(
        log.contains(" DEBUG "),
        "the run did not log at debug level"
    );
    let mut in_log: Vec<&str> = secrets
        .iter()
        .filter(|(_, value)| log.contains(value.as_str()))
        .map(|(what, _)| *what)
        .collect();
    if log.contains(&w.invitation_token) {
        in_log.push("invitation token");
    }
    assert!(in_log.is_empty(), "in the log: {in_log:?}\n{log}");

    // At rest: keys, tokens, sessions and passwords only hashed, the secrets that are shown
    // again only sealed. (Not the metrics token: it is the config file's. Not the invitation
    // token: the outbox keeps the invitation e-mail, with its link, until it is sent.)
    let mut s = s;
    assert!(s.sigterm_and_wait().success());
    let dir = s.data_dir();
    let config_file = dir.join("intake.toml").display().to_string();
    // On PostgreSQL the data is the database's: its dump is checked too. It shows the rows'
    // text (the owner's e-mail address is stored in plain), so a secret in plain would show.
    let mut stored = files(&dir);
    if let Some(dump) = common::database_dump(&dir) {
        assert!(contains(&dump, OWNER_EMAIL), "the dump shows no row's text");
        stored.push(("the database".to_string(), dump));
    }
    for (path, bytes) in stored {
        for (what, value) in &secrets {
            if *what == "metrics token" && path == config_file {
                continue;
            }
            assert!(!contains(&bytes, value), "{what} in plain in {path}");
        }
    }
}
