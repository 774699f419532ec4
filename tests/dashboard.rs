//! The dashboard over plain HTTP (no browser): security headers and the CSP, login
//! redirects, CSRF refusals, asset caching, and the first-run setup link printed by `serve`.
//! The browser workflows are in tests/dashboard_browser.rs.

use crate::common;

use std::time::Duration;

use common::visitor::{Visitor, csrf_of, login};
use common::{LogBuffer, OWNER_EMAIL, Resp, TestServer, serve_args, spawn_serve};

#[test]
fn pages_need_a_login_and_carry_a_strict_csp() {
    let s = TestServer::start();
    let mut v = Visitor::new(s.base_url(), &s.agent);
    for path in [
        "/dashboard",
        "/dashboard/endpoints",
        "/dashboard/endpoints/x/requests?environment=production",
    ] {
        let r = v.get(path);
        assert_eq!(r.status, 303, "{path}: {}", r.describe());
        let location = r.header("location").unwrap();
        assert!(
            location.starts_with("/dashboard/login"),
            "{path} → {location}"
        );
    }
    let r = v.get("/dashboard/endpoints/x/requests?environment=production");
    assert_eq!(
        r.header("location"),
        Some(
            "/dashboard/login?next=%2Fdashboard%2Fendpoints%2Fx%2Frequests%3Fenvironment%3Dproduction"
        )
    );

    let page = v.get("/dashboard/login");
    assert_eq!(page.status, 200);
    let csp = page.header("content-security-policy").unwrap();
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
        "form-action 'self'",
        "object-src 'none'",
    ] {
        assert!(csp.contains(directive), "CSP lacks {directive}: {csp}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("referrer-policy"), Some("same-origin"));
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert_eq!(page.header("cache-control"), Some("no-store"));
    assert!(
        page.header("content-type")
            .unwrap()
            .starts_with("text/html")
    );
    let html = page.text();
    assert!(!html.contains("style=\""), "inline style in {html}");
    assert!(!html.contains("<script>"), "inline script in {html}");
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "external reference in {html}"
    );

    // The stylesheet: content-hashed URL, cached for a year, revalidated by ETag.
    let href_at = html.find("/dashboard/static/").unwrap();
    let href = &html[href_at..href_at + html[href_at..].find('"').unwrap()];
    let css = v.get(href);
    assert_eq!(css.status, 200);
    assert!(css.header("content-type").unwrap().starts_with("text/css"));
    assert_eq!(
        css.header("cache-control"),
        Some("public, max-age=31536000, immutable")
    );
    let etag = css.header("etag").unwrap().to_string();
    let again = common::try_send(
        &s.agent,
        &format!("{}{href}", s.base_url()),
        "GET",
        &[("If-None-Match", &etag)],
        None,
    )
    .unwrap();
    assert_eq!(again.status, 304);
    assert_eq!(
        v.get("/dashboard/static/0000/app.css")
            .header("cache-control"),
        Some("no-cache")
    );
    assert_eq!(v.get("/dashboard/static/0000/nothing.css").status, 404);
    assert_eq!(v.get("/dashboard/nowhere").status, 404);

    // A wrong password shows the form again with the reason, 401.
    let token = csrf_of(&v.get("/dashboard/login"));
    let r = v.post(
        "/dashboard/login",
        &[
            ("csrf", &token),
            ("email", OWNER_EMAIL),
            ("password", "wrong password"),
        ],
        &[],
    );
    assert_eq!(r.status, 401);
    assert!(r.text().contains("login-error"), "{}", r.text());
    assert!(!v.cookies.iter().any(|(k, _)| k == "intake_session"));

    // Logged in: the pages answer; logging out ends the session.
    let token = login(&mut v, OWNER_EMAIL, &s.password);
    let r = v.post("/dashboard/logout", &[("csrf", &token)], &[]);
    assert_eq!(r.status, 303);
    assert_eq!(v.get("/dashboard/endpoints").status, 303);
}

#[test]
fn forms_without_a_valid_csrf_token_change_nothing() {
    let s = TestServer::start();
    let agent = common::new_agent(Duration::from_secs(30));
    let mut v = Visitor::new(s.base_url(), &agent);

    // A login post without the visitor cookie's token is refused before the password check.
    let r = v.post(
        "/dashboard/login",
        &[("email", OWNER_EMAIL), ("password", &s.password)],
        &[],
    );
    assert_eq!(r.status, 403, "{}", r.describe());
    assert!(r.text().contains("csrf_failed"));

    let token = login(&mut v, OWNER_EMAIL, &s.password);
    let count = || {
        s.manage("GET", "/api/v1/manage/endpoints", None).json()["data"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(count(), 0);
    type Fields<'a> = Vec<(&'a str, &'a str)>;
    let refused: [(&str, Fields, Fields); 4] = [
        ("no token", vec![("name", "Orders")], vec![]),
        (
            "wrong token",
            vec![
                ("name", "Orders"),
                ("csrf", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
            ],
            vec![],
        ),
        (
            "cross-site origin",
            vec![("name", "Orders"), ("csrf", &token)],
            vec![("Origin", "https://evil.example")],
        ),
        (
            "cross-site fetch",
            vec![("name", "Orders"), ("csrf", &token)],
            vec![("Sec-Fetch-Site", "cross-site")],
        ),
    ];
    for (what, fields, headers) in &refused {
        let r = v.post("/dashboard/endpoints", fields, headers);
        assert_eq!(r.status, 403, "{what}: {}", r.describe());
        assert!(r.text().contains("csrf_failed"), "{what}");
        assert_eq!(count(), 0, "{what} created an endpoint");
    }
    // Another session's token does not work in this one.
    let mut other = Visitor::new(s.base_url(), &agent);
    let other_token = login(&mut other, OWNER_EMAIL, &s.password);
    assert_ne!(other_token, token);
    let r = v.post(
        "/dashboard/endpoints",
        &[("name", "Orders"), ("csrf", &other_token)],
        &[],
    );
    assert_eq!(r.status, 403);
    assert_eq!(count(), 0);

    let r = v.post(
        "/dashboard/endpoints",
        &[("name", "Orders"), ("csrf", &token)],
        &[("Origin", &s.base_url())],
    );
    assert_eq!(r.status, 303, "{}", r.describe());
    assert!(r.header("location").unwrap().ends_with("?done=created"));
    assert_eq!(count(), 1);

    // A service error shows the API's error code on an error page.
    let r = v.post(
        "/dashboard/endpoints/no-such-slug/deploy",
        &[("csrf", &token)],
        &[],
    );
    assert_eq!(r.status, 404);
    assert!(r.text().contains("endpoint_not_found"), "{}", r.text());
}

#[test]
fn the_setup_link_creates_the_owner_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = LogBuffer::default();
    let mut proc = spawn_serve(&serve_args(dir.path()), &[], &log);
    let base = format!("http://{}", proc.addr);
    let line = log
        .lines()
        .into_iter()
        .find(|l| l.contains("/dashboard/setup?token="))
        .unwrap_or_else(|| panic!("no setup link in the log:\n{}", log.text()));
    let url = line[line.find("http://").unwrap()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let path = url.strip_prefix(&base).unwrap().to_string();
    let token = path.split("token=").nth(1).unwrap().to_string();

    let agent = common::new_agent(Duration::from_secs(30));
    let mut v = Visitor::new(base.clone(), &agent);
    assert_eq!(v.get("/dashboard/setup").status, 404);
    assert_eq!(v.get("/dashboard/setup?token=wrong").status, 404);
    let page = v.get(&path);
    assert_eq!(page.status, 200, "{}", page.describe());
    let csrf = csrf_of(&page);
    let password = "a long enough password";
    let r = v.post(
        "/dashboard/setup",
        &[
            ("csrf", &csrf),
            ("token", &token),
            ("email", "boss@example.com"),
            ("password", password),
            ("password_again", "another password!"),
        ],
        &[],
    );
    assert_eq!(r.status, 400, "{}", r.describe());
    let r = v.post(
        "/dashboard/setup",
        &[
            ("csrf", &csrf),
            ("token", &token),
            ("email", "boss@example.com"),
            ("password", password),
            ("password_again", password),
        ],
        &[],
    );
    assert_eq!(r.status, 303, "{}", r.describe());
    assert_eq!(
        r.header("location"),
        Some("/dashboard/endpoints?done=welcome")
    );
    let page = v.get("/dashboard/endpoints?done=welcome");
    assert_eq!(page.status, 200);
    assert!(page.text().contains("boss@example.com"));
    assert!(page.text().contains("Your owner account is ready."));

    // Used up: the link is gone, and the API login takes the chosen password.
    assert_eq!(v.get(&path).status, 404);
    let login = common::try_send(
        &agent,
        &format!("{base}/api/v1/auth/login"),
        "POST",
        &[("Content-Type", "application/json")],
        Some(br#"{"email":"boss@example.com","password":"a long enough password"}"#),
    )
    .unwrap();
    assert_eq!(login.status, 200, "{}", login.describe());
    let _ = proc.child.kill();
    let _ = proc.child.wait();
}

/// The `href` of the link marked `rel="next"` (the next older page), unescaped.
fn older_link(page: &Resp) -> Option<String> {
    let html = page.text();
    let end = html.find(r#"" rel="next""#)?;
    let start = html[..end].rfind("href=\"")? + "href=\"".len();
    Some(html[start..end].replace("&#38;", "&").replace("&amp;", "&"))
}

fn rows(page: &Resp) -> usize {
    page.text().matches("<tr data-request-id=").count()
}

#[test]
fn log_pages_filter_and_page_through_the_log_and_usage_counts_the_calls() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Logs", &[]);
    let list = format!("/api/v1/data/{}", ep.slug);
    for _ in 0..55 {
        assert_eq!(s.data("GET", &list, &ep.sandbox_key, None).status, 200);
    }
    let missing = format!("{list}/{}", common::unknown_record_id());
    for _ in 0..5 {
        assert_eq!(s.data("GET", &missing, &ep.sandbox_key, None).status, 404);
    }
    s.wait_request_log(&ep.slug, "sandbox", Duration::from_secs(10), |d| {
        d.len() >= 60
    });

    let mut v = Visitor::new(s.base_url(), &s.agent);
    let token = login(&mut v, OWNER_EMAIL, &s.password);
    let base = format!("/dashboard/endpoints/{}", ep.slug);

    // 50 a page, newest first; "Older" reads on with the cursor.
    let first = v.get(&format!("{base}/requests"));
    assert_eq!(first.status, 200, "{}", first.describe());
    assert_eq!(rows(&first), 50);
    let older = older_link(&first).expect("an Older link");
    assert!(
        older.contains("environment=sandbox") && older.contains("cursor="),
        "{older}"
    );
    let second = v.get(&older);
    assert_eq!(second.status, 200);
    assert_eq!(rows(&second), 10);
    assert!(older_link(&second).is_none());
    assert!(second.text().contains(">Newest</a>"));

    // The status filter shows only that class.
    let errors = v.get(&format!("{base}/requests?environment=sandbox&status=4xx"));
    assert_eq!(rows(&errors), 5);
    assert_eq!(errors.text().matches(">404</td>").count(), 5);
    assert!(!errors.text().contains(">200</td>"));
    let production = v.get(&format!("{base}/requests?environment=production"));
    assert_eq!(rows(&production), 0);
    // A bad filter is said on the page, which keeps its form.
    let bad = v.get(&format!("{base}/requests?status=teapot"));
    assert_eq!(bad.status, 200);
    assert!(bad.text().contains("id=\"filter-error\""));
    assert!(bad.text().contains("Invalid `status` parameter"));
    assert!(bad.text().contains("id=\"request-filters\""));
    assert_eq!(rows(&bad), 0);

    // Usage: this month's calls, the chart's total, no deliveries yet.
    let usage = v.get(&format!("{base}/usage"));
    assert_eq!(usage.status, 200, "{}", usage.describe());
    let html = usage.text();
    assert!(
        html.contains("60 sandbox and 0 production data calls"),
        "{html}"
    );
    assert!(html.contains("60 in total"), "{html}");
    assert!(html.contains("<svg class=\"chart\""));

    // The outbox: a test e-mail is queued (no SMTP here) and listed with its status.
    let r = v.post(
        "/dashboard/mail/test",
        &[("csrf", &token), ("to", "ops@example.com")],
        &[],
    );
    assert_eq!(r.status, 303, "{}", r.describe());
    let mail = v.get("/dashboard/mail?done=mail");
    assert!(mail.text().contains("Test e-mail queued"));
    assert!(mail.text().contains("ops@example.com"));
    assert!(mail.text().contains("Queued"));
}

/// The slug in a redirect to an endpoint page.
fn slug_of(location: &str) -> String {
    location
        .trim_start_matches("/dashboard/endpoints/")
        .split(['?', '/'])
        .next()
        .unwrap()
        .to_string()
}

#[test]
fn owner_settings_webhooks_secrets_and_a_member_who_logs_in_to_accept() {
    let s = TestServer::start();
    let mut owner = Visitor::new(s.base_url(), &s.agent);
    let token = login(&mut owner, OWNER_EMAIL, &s.password);

    let r = owner.post(
        "/dashboard/endpoints",
        &[("csrf", &token), ("name", "Shop")],
        &[],
    );
    assert_eq!(r.status, 303, "{}", r.describe());
    let slug = slug_of(r.header("location").unwrap());
    let base = format!("/dashboard/endpoints/{slug}");

    // Settings: name, description, required fields (commas or lines).
    let r = owner.post(
        &format!("{base}/settings"),
        &[
            ("csrf", &token),
            ("name", "Shop 2"),
            ("description", "Orders from the shop"),
            ("required_fields", "email, total"),
        ],
        &[],
    );
    assert_eq!(r.status, 303, "{}", r.describe());
    let page = owner.get(&base).text();
    assert!(
        page.contains("<h1>Shop 2</h1>") && page.contains("Orders from the shop"),
        "{page}"
    );
    let api = s
        .manage("GET", &format!("/api/v1/manage/endpoints/{slug}"), None)
        .json();
    assert_eq!(
        api["required_fields"],
        serde_json::json!(["email", "total"])
    );

    // The active switch: off refuses data calls with 403, on lets them through again.
    let key = api["sandbox_key"].as_str().unwrap().to_string();
    let r = owner.post(
        &format!("{base}/active"),
        &[("csrf", &token), ("active", "false")],
        &[],
    );
    assert_eq!(
        r.header("location"),
        Some(format!("{base}?done=deactivated").as_str())
    );
    let call = s.data("GET", &format!("/api/v1/data/{slug}"), &key, None);
    assert_eq!(call.error_code().as_deref(), Some("endpoint_inactive"));
    owner.post(
        &format!("{base}/active"),
        &[("csrf", &token), ("active", "true")],
        &[],
    );
    assert_eq!(
        s.data("GET", &format!("/api/v1/data/{slug}"), &key, None)
            .status,
        200
    );

    // The owner webhook (the first subscription): added (the auth value is never shown
    // again), changed, then removed.
    let r = owner.post(
        &format!("{base}/webhooks/sandbox/subscriptions"),
        &[
            ("csrf", &token),
            ("url", "https://hooks.example.com/in"),
            ("auth_header", "X-Token"),
            ("auth_value", "s3cret-value"),
            ("enabled", "true"),
        ],
        &[],
    );
    assert_eq!(r.status, 303, "{}", r.describe());
    let page = owner.get(&format!("{base}/webhooks")).text();
    assert!(
        page.contains("https://hooks.example.com/in") && page.contains("an auth value is stored")
    );
    assert!(!page.contains("s3cret-value"));
    let hook = s
        .manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{slug}/webhooks/sandbox"),
            None,
        )
        .json();
    assert_eq!(
        (hook["auth_header"].as_str(), hook["enabled"].as_bool()),
        (Some("x-token"), Some(true)),
        "{hook}"
    );
    // Saved again with the value left empty, the stored value stays; "stop sending" clears it.
    let hook_now = || {
        s.manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{slug}/webhooks/sandbox"),
            None,
        )
        .json()
    };
    for (clear, value_set) in [(None, true), (Some(("clear_auth", "true")), false)] {
        let mut fields = vec![
            ("csrf", token.as_str()),
            ("url", "https://hooks.example.com/in2"),
            ("auth_header", "X-Token"),
            ("auth_value", ""),
        ];
        fields.extend(clear);
        let r = owner.post(
            &format!("{base}/webhooks/sandbox/subscriptions/sub_1"),
            &fields,
            &[],
        );
        assert_eq!(r.status, 303, "{}", r.describe());
        let hook = hook_now();
        assert_eq!(hook["url"], "https://hooks.example.com/in2");
        assert_eq!(hook["auth_value_set"], value_set, "{hook}");
        assert_eq!(hook["enabled"], false, "the unchecked box disables it");
    }
    owner.post(
        &format!("{base}/webhooks/sandbox/subscriptions/sub_1/delete"),
        &[("csrf", &token)],
        &[],
    );
    let gone = s.manage(
        "GET",
        &format!("/api/v1/manage/endpoints/{slug}/webhooks/sandbox"),
        None,
    );
    assert_eq!(gone.status, 404);

    // Reissuing the signing secret shows the changeover's end.
    let before = s
        .manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{slug}/webhook-secrets/sandbox"),
            None,
        )
        .json();
    let r = owner.post(
        &format!("{base}/webhook-secrets/sandbox/reissue"),
        &[("csrf", &token)],
        &[],
    );
    assert_eq!(r.status, 303);
    let page = owner.get(&format!("{base}?done=reissued")).text();
    let after = s
        .manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{slug}/webhook-secrets/sandbox"),
            None,
        )
        .json();
    assert_ne!(before["secret"], after["secret"]);
    assert!(page.contains(after["secret"].as_str().unwrap()));
    assert!(page.contains("id=\"changeover\""), "{page}");
    assert!(page.contains(after["previous_valid_until"].as_str().unwrap()));

    // "Deploy now": straight to production, the production key on its tab.
    let r = owner.post(&format!("{base}/deploy"), &[("csrf", &token)], &[]);
    assert_eq!(
        r.header("location"),
        Some(format!("{base}/production?done=deployed").as_str())
    );
    let page = owner.get(&format!("{base}/production")).text();
    assert!(
        page.contains("id=\"production-key\"") && page.contains("tm_live_"),
        "{page}"
    );

    // A member with an account: invited by the dashboard, logs in from the link, accepts.
    let mut invite = |slug: &str| {
        let r = owner.post(
            &format!("/dashboard/endpoints/{slug}/invitations"),
            &[
                ("csrf", &token),
                ("email", "member@example.com"),
                ("permission", "read"),
            ],
            &[],
        );
        assert_eq!(r.status, 303, "{}", r.describe());
        let list = s
            .manage(
                "GET",
                &format!("/api/v1/manage/endpoints/{slug}/invitations"),
                None,
            )
            .json();
        let url = list["data"][0]["accept_url"].as_str().unwrap().to_string();
        assert_eq!(list["data"][0]["permissions"], serde_json::json!(["read"]));
        url.strip_prefix(&s.base_url()).unwrap().to_string()
    };
    let first = invite(&slug);
    let token_of = |path: &str| path.trim_start_matches("/invitations/").to_string();
    let r = s.request(
        "POST",
        &format!("/api/v1/invitations/{}/accept", token_of(&first)),
        &[("Content-Type", "application/json")],
        Some(br#"{"password":"member password 1"}"#),
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    let second_slug = s.create_endpoint("Second", &[]).slug;
    let link = invite(&second_slug);

    let mut member = Visitor::new(s.base_url(), &s.agent);
    let page = member.get(&link);
    assert_eq!(page.status, 200);
    let encoded: String = form_urlencoded::byte_serialize(link.as_bytes()).collect();
    let login_url = format!("/dashboard/login?next={encoded}");
    assert!(page.text().contains(&login_url), "{}", page.text());
    let login_page = member.get(&login_url);
    let csrf = csrf_of(&login_page);
    let r = member.post(
        "/dashboard/login",
        &[
            ("csrf", &csrf),
            ("email", "member@example.com"),
            ("password", "member password 1"),
            ("next", &link),
        ],
        &[],
    );
    assert_eq!(
        r.header("location"),
        Some(link.as_str()),
        "{}",
        r.describe()
    );
    let page = member.get(&link);
    assert!(
        page.text()
            .contains("You are logged in as member@example.com")
    );
    let member_token = csrf_of(&page);
    let r = member.post(&format!("{link}/accept"), &[("csrf", &member_token)], &[]);
    assert_eq!(
        r.header("location"),
        Some(format!("/dashboard/endpoints/{second_slug}?done=accepted").as_str()),
        "{}",
        r.describe()
    );

    // The owner's pages stay the owner's: the usage tab answers 403 owner_only.
    let refused = member.get(&format!("/dashboard/endpoints/{second_slug}/usage"));
    assert_eq!(refused.status, 403);
    assert!(refused.text().contains("owner_only"));

    // A deploy request rejected with a reason reaches the member's notifications.
    let r = member.post(
        &format!("/dashboard/endpoints/{second_slug}/deploy-request"),
        &[("csrf", &member_token), ("note", "ready")],
        &[],
    );
    assert_eq!(r.status, 303, "{}", r.describe());
    let r = owner.post(
        &format!("/dashboard/endpoints/{second_slug}/deploy-request/reject"),
        &[("csrf", &token), ("note", "tests first")],
        &[],
    );
    assert_eq!(
        r.header("location"),
        Some(format!("/dashboard/endpoints/{second_slug}?done=rejected").as_str())
    );
    let page = member.get("/dashboard/notifications");
    assert!(page.text().contains("tests first"), "{}", page.text());
    assert!(page.text().contains("<strong>New:</strong>"));
    let html = page.text();
    let at = html.find("/dashboard/notifications/").unwrap();
    let action = &html[at..at + html[at..].find('"').unwrap()];
    let r = member.post(action, &[("csrf", &member_token)], &[]);
    assert_eq!(r.status, 303, "{}", r.describe());
    assert!(
        !member
            .get("/dashboard/notifications")
            .text()
            .contains("<strong>New:</strong>")
    );
}

/// Waits until the endpoint's only sandbox delivery is in `state`; returns its id.
fn wait_delivery_state(s: &TestServer, slug: &str, state: &str) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let list = s
            .manage(
                "GET",
                &format!("/api/v1/manage/endpoints/{slug}/deliveries"),
                None,
            )
            .json();
        if let Some(d) = list["data"].as_array().and_then(|d| d.first()) {
            if d["state"] == state {
                return d["id"].as_u64().unwrap();
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "delivery never reached {state}: {list}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_delivery_log_shows_every_attempt_and_redelivers() {
    use common::receiver::{Receiver, Reply};
    let receiver = Receiver::start();
    receiver.script([Reply::status(400).body("bad payload")]);
    receiver.always(Reply::status(200));
    let s = TestServer::start_with_config("[webhooks]\nallow_private_targets = true\n");
    let ep = s.create_endpoint("Hooks", &[]);
    let hook = serde_json::json!({ "url": receiver.url("/hook") });
    let r = s.manage(
        "PUT",
        &format!("/api/v1/manage/endpoints/{}/webhooks/sandbox", ep.slug),
        Some(&hook),
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    let r = s.data(
        "POST",
        &format!("/api/v1/data/{}", ep.slug),
        &ep.sandbox_key,
        Some(&serde_json::json!({"n": 1})),
    );
    assert_eq!(r.status, 202);
    let id = wait_delivery_state(&s, &ep.slug, "given_up");

    let mut v = Visitor::new(s.base_url(), &s.agent);
    let token = login(&mut v, OWNER_EMAIL, &s.password);
    let base = format!("/dashboard/endpoints/{}", ep.slug);
    let list = v.get(&format!("{base}/deliveries")).text();
    assert!(
        list.contains(&format!("{base}/deliveries/{id}"))
            && list.contains("Given up · 1 of 4 attempts"),
        "{list}"
    );
    let detail = v.get(&format!("{base}/deliveries/{id}")).text();
    assert!(
        detail.contains(">400</span>") && detail.contains("bad payload"),
        "{detail}"
    );
    assert!(detail.contains(&format!("{base}/deliveries/{id}/redeliver")));

    let r = v.post(
        &format!("{base}/deliveries/{id}/redeliver"),
        &[("csrf", &token)],
        &[],
    );
    assert_eq!(
        r.header("location"),
        Some(format!("{base}/deliveries/{id}?done=redelivered").as_str())
    );
    receiver.wait_for(2, Duration::from_secs(30));
    wait_delivery_state(&s, &ep.slug, "delivered");
    let detail = v.get(&format!("{base}/deliveries/{id}")).text();
    assert!(
        detail.contains("Delivered") && detail.contains("Attempt 2"),
        "{detail}"
    );
    assert!(!detail.contains("/redeliver\""));

    // The usage page counts it in this month's success rate.
    let usage = v.get(&format!("{base}/usage")).text();
    assert!(
        usage.contains("<tr><td>sandbox</td><td>1</td><td>0</td><td>0</td><td>100 %"),
        "{usage}"
    );
}

/// With a JSON Schema, the API Reference shows it as the body of the writes and as the
/// payload of the records the reads answer.
#[test]
fn the_api_test_page_shows_the_endpoint_schema() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Orders", &[]);
    let schema = serde_json::json!({
        "type": "object",
        "properties": { "shipping_address": { "$ref": "#/$defs/address" } },
        "$defs": { "address": { "type": "object", "properties": { "postcode": { "type": "string" } } } }
    });
    let r = s.manage(
        "PATCH",
        &format!("/api/v1/manage/endpoints/{}", ep.slug),
        Some(&serde_json::json!({ "schema": schema })),
    );
    assert_eq!(r.status, 200, "{}", r.describe());
    let mut owner = Visitor::new(s.base_url(), &s.agent);
    login(&mut owner, OWNER_EMAIL, &s.password);
    let page = owner.get(&format!("/dashboard/endpoints/{}/test", ep.slug));
    assert_eq!(page.status, 200, "{}", page.describe());
    let html = page.text().replace("&#34;", "\"").replace("&quot;", "\"");
    // Pretty-printed as the owner wrote it (its `$defs` inline, not component references):
    // in the bodies of create and replace, and under the five reads' responses.
    let property = "\"shipping_address\": {";
    assert_eq!(html.matches(property).count(), 2 + 5, "{html}");
    assert!(html.contains("\"postcode\""), "{html}");
    assert!(!html.contains("Payload_address"), "{html}");
}

#[test]
fn the_api_test_page_is_for_members_and_takes_only_sandbox_keys_of_its_endpoint() {
    let s = TestServer::start();
    let ours = s.create_endpoint("Ours", &[]);
    let theirs = s.create_endpoint("Theirs", &[]);
    s.deploy(&ours.slug);
    let page_path = format!("/dashboard/endpoints/{}/test", ours.slug);
    let authorize_path = format!("{page_path}/authorize");

    // Logged out: the login page, coming back here afterwards.
    let mut visitor = Visitor::new(s.base_url(), &s.agent);
    let r = visitor.get(&page_path);
    assert_eq!(r.status, 303);
    let encoded: String = form_urlencoded::byte_serialize(page_path.as_bytes()).collect();
    assert_eq!(
        r.header("location"),
        Some(format!("/dashboard/login?next={encoded}").as_str())
    );

    // A member of `ours` only (invited with read, accepted with a password).
    let invitation = s
        .manage(
            "POST",
            &format!("/api/v1/manage/endpoints/{}/invitations", ours.slug),
            Some(&serde_json::json!({ "email": "member@example.com", "permissions": ["read"] })),
        )
        .json();
    let accept_url = invitation["accept_url"].as_str().unwrap();
    let token = accept_url.rsplit('/').next().unwrap();
    let accepted = s.request(
        "POST",
        &format!("/api/v1/invitations/{token}/accept"),
        &[("Content-Type", "application/json")],
        Some(br#"{"password":"member password 1"}"#),
    );
    assert_eq!(accepted.status, 200, "{}", accepted.describe());
    let member_key = accepted.json()["endpoint"]["sandbox_key"]
        .as_str()
        .unwrap()
        .to_string();
    let mut member = Visitor::new(s.base_url(), &s.agent);
    let csrf = login(&mut member, "member@example.com", "member password 1");

    // The page: server-rendered, its script a static asset, no inline script.
    let page = member.get(&page_path);
    assert_eq!(page.status, 200, "{}", page.describe());
    let html = page.text();
    assert!(html.contains("<h1>Ours</h1>") && html.contains("badge sandbox"));
    assert!(html.contains("/testpage.js\" defer></script>"), "{html}");
    assert!(!html.contains("<script>") && !html.contains("style=\""));
    assert_eq!(html.matches("class=\"api-card\"").count(), 9);
    assert!(!html.contains(&member_key) && !html.contains(&ours.sandbox_key));
    // Linked from the detail page.
    let detail = member.get(&format!("/dashboard/endpoints/{}", ours.slug));
    assert!(detail.text().contains(&format!("href=\"{page_path}\"")));

    // Not a member of `theirs`: 404, as its detail page.
    for path in [
        format!("/dashboard/endpoints/{}", theirs.slug),
        format!("/dashboard/endpoints/{}/test", theirs.slug),
    ] {
        assert_eq!(member.get(&path).status, 404, "{path}");
    }
    let r = member.post(
        &format!("/dashboard/endpoints/{}/test/authorize", theirs.slug),
        &[("csrf", &csrf), ("key", &theirs.sandbox_key)],
        &[],
    );
    assert_eq!(r.status, 404, "{}", r.describe());

    // The key check: only sandbox keys of this endpoint, whoever's; a verdict, not an error.
    let mut check = |key: &str| {
        let r = member.post(&authorize_path, &[("csrf", &csrf), ("key", key)], &[]);
        assert_eq!(r.status, 200, "{}", r.describe());
        assert_eq!(r.header("cache-control"), Some("no-store"));
        let verdict = r.json();
        match verdict["authorized"].as_bool().unwrap() {
            true => None,
            false => Some(verdict["message"].as_str().unwrap().to_string()),
        }
    };
    assert_eq!(check(&member_key), None);
    assert_eq!(check(&ours.sandbox_key), None);
    assert!(
        check(&ours.production_key)
            .unwrap()
            .contains("production key")
    );
    assert!(
        check("tm_live_notevenakey")
            .unwrap()
            .contains("production key")
    );
    assert!(
        check(&theirs.sandbox_key)
            .unwrap()
            .contains("another endpoint")
    );
    assert!(
        check("tm_test_unknownkey")
            .unwrap()
            .contains("not a valid API key")
    );
    assert!(check("").unwrap().contains("not a valid API key"));
    // The check is no data call: once a real call shows in the request log (written in
    // batches, in order), it is the only entry of either environment.
    common::assert_status(&s.list(&ours.slug, &member_key, ""), 200);
    s.wait_request_log(&ours.slug, "sandbox", Duration::from_secs(10), |d| {
        !d.is_empty()
    });
    let sandbox = s.request_log(&ours.slug, "environment=sandbox").json();
    assert_eq!(sandbox["data"].as_array().unwrap().len(), 1, "{sandbox}");
    let production = s.request_log(&ours.slug, "environment=production").json();
    assert_eq!(production["data"], serde_json::json!([]), "{production}");

    // Without the CSRF token the check is refused like any form.
    let r = member.post(&authorize_path, &[("key", &member_key)], &[]);
    assert_eq!(r.status, 403);
    assert!(r.text().contains("csrf_failed"));
}

#[test]
fn webhook_subscriptions_are_added_changed_recovered_and_deleted_from_the_dashboard() {
    let s = TestServer::start();
    let mut owner = Visitor::new(s.base_url(), &s.agent);
    let token = login(&mut owner, OWNER_EMAIL, &s.password);
    let ep = s.create_endpoint("Hooks", &[]);
    let base = format!("/dashboard/endpoints/{}/webhooks", ep.slug);
    let api = format!(
        "/api/v1/manage/endpoints/{}/webhooks/sandbox/subscriptions",
        ep.slug
    );
    let post = |owner: &mut Visitor, path: &str, fields: &[(&str, &str)]| {
        let mut all = vec![("csrf", token.as_str())];
        all.extend_from_slice(fields);
        let r = owner.post(path, &all, &[]);
        assert_eq!(r.status, 303, "{}", r.describe());
    };

    post(
        &mut owner,
        &format!("{base}/sandbox/subscriptions"),
        &[
            ("url", "https://hooks.example.com/orders"),
            ("description", "Order sync"),
            ("event_types", "record.created"),
            ("event_types", "record.deleted"),
            ("rate_limit", "5"),
            ("enabled", "true"),
        ],
    );
    let sub = &s.manage("GET", &api, None).json()["data"][0];
    assert_eq!(sub["id"], "sub_1");
    assert_eq!(
        sub["event_types"],
        serde_json::json!(["record.created", "record.deleted"])
    );
    assert_eq!(sub["rate_limit"], 5);
    assert_eq!(sub["description"], "Order sync");
    let page = owner.get(&base).text();
    for needle in [
        "sub_1",
        "Order sync",
        "record.created, record.deleted",
        "Enabled",
        "no attempt yet",
        "https://hooks.example.com/orders",
    ] {
        assert!(page.contains(needle), "{needle:?} not on the page");
    }
    // Its page shows the rest, the rate limit among it; a subscription that is not there,
    // or a path that names none, has no page.
    let sub_page = owner.get(&format!("{base}/sandbox/subscriptions/sub_1"));
    assert_eq!(sub_page.status, 200, "{}", sub_page.describe());
    assert!(sub_page.text().contains("5/s"));
    for missing in ["sub_9", "sub_x", "9"] {
        let r = owner.get(&format!("{base}/sandbox/subscriptions/{missing}"));
        assert_eq!(r.status, 404, "{missing}: {}", r.describe());
    }

    // Every box ticked is every event; an empty rate limit is none; unticked is disabled.
    post(
        &mut owner,
        &format!("{base}/sandbox/subscriptions/sub_1"),
        &[
            ("events_shown", "1"),
            ("url", "https://hooks.example.com/orders2"),
            ("description", "Order sync v2"),
            ("event_types", "record.created"),
            ("event_types", "record.replaced"),
            ("event_types", "record.deleted"),
            ("rate_limit", ""),
        ],
    );
    let sub = s.manage("GET", &format!("{api}/sub_1"), None).json();
    assert_eq!(sub["event_types"], serde_json::json!([]));
    assert_eq!(sub["rate_limit"], serde_json::Value::Null);
    assert_eq!(sub["enabled"], false);
    assert_eq!(sub["url"], "https://hooks.example.com/orders2");
    assert!(owner.get(&base).text().contains("Disabled"));

    // Recovery of the subscription and of the caller webhooks, from the date pickers.
    post(
        &mut owner,
        &format!("{base}/sandbox/subscriptions/sub_1/recover"),
        &[("since", "2026-01-01T00:00"), ("until", "")],
    );
    let sub = s.manage("GET", &format!("{api}/sub_1"), None).json();
    assert_eq!(
        sub["recovery"]["since"], "2026-01-01T00:00:00.000000Z",
        "{sub}"
    );
    post(
        &mut owner,
        &format!("{base}/sandbox/caller-recovery"),
        &[("since", "2026-01-01T00:00")],
    );
    let callers_api = &format!(
        "/api/v1/manage/endpoints/{}/webhooks/sandbox/caller-recovery",
        ep.slug
    );
    let callers = s.manage("GET", callers_api, None);
    assert_eq!(callers.status, 200, "{}", callers.describe());
    // The same windows again once those have finished (they found nothing to send): refused
    // for the cooldown, the reason beside each form.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while s.manage("GET", &format!("{api}/sub_1"), None).json()["recovery"]["state"] != "finished"
        || s.manage("GET", callers_api, None).json()["state"] != "finished"
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the recoveries never finished"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for path in [
        format!("{base}/sandbox/subscriptions/sub_1/recover"),
        format!("{base}/sandbox/caller-recovery"),
    ] {
        let r = owner.post(
            &path,
            &[("csrf", token.as_str()), ("since", "2026-01-01T00:00")],
            &[],
        );
        assert_eq!(r.status, 429, "{}", r.describe());
        assert!(r.text().contains("recovery cooldown"), "{}", r.describe());
    }
    // A bad rate limit is refused and changes nothing.
    let r = owner.post(
        &format!("{base}/sandbox/subscriptions/sub_1"),
        &[
            ("csrf", &token),
            ("events_shown", "1"),
            ("url", "https://hooks.example.com/x"),
            ("rate_limit", "lots"),
        ],
        &[],
    );
    assert_eq!(r.status, 400, "{}", r.describe());
    assert_eq!(
        s.manage("GET", &format!("{api}/sub_1"), None).json()["url"],
        "https://hooks.example.com/orders2"
    );

    post(
        &mut owner,
        &format!("{base}/sandbox/subscriptions/sub_1/delete"),
        &[],
    );
    assert_eq!(
        s.manage("GET", &api, None).json()["data"],
        serde_json::json!([])
    );
}

#[test]
fn the_records_page_exports_what_it_shows_and_only_to_a_signed_in_reader() {
    let s = TestServer::start();
    let ep = s.create_endpoint("Export", &[]);
    let path = format!("/api/v1/data/{}", ep.slug);
    for n in 0..12 {
        let city = if n % 3 == 0 { "Kraków" } else { "Berlin" };
        let payload = serde_json::json!({ "n": n, "city": city });
        assert_eq!(
            s.data("POST", &path, &ep.sandbox_key, Some(&payload))
                .status,
            202
        );
    }
    let base = format!("/dashboard/endpoints/{}/records", ep.slug);
    // Logged out: the login page, no data.
    let mut stranger = Visitor::new(s.base_url(), &s.agent);
    let r = stranger.get(&format!("{base}/export?environment=sandbox"));
    assert!(
        matches!(r.status, 302 | 303) && !r.text().contains("Kraków"),
        "{}",
        r.describe()
    );

    let mut v = Visitor::new(s.base_url(), &s.agent);
    login(&mut v, OWNER_EMAIL, &s.password);
    // The page's export form carries what the page shows.
    let page = v.get(&format!("{base}?environment=sandbox&q=krak"));
    assert_eq!(page.status, 200);
    let text = page.text();
    assert!(
        text.contains(&format!("action=\"{base}/export\"")),
        "{text}"
    );
    assert!(text.contains("name=\"q\" value=\"krak\""), "{text}");
    // CSV by default: a header and the four matching records, oldest first.
    let r = v.get(&format!("{base}/export?environment=sandbox&q=krak"));
    assert_eq!(r.status, 200, "{}", r.describe());
    assert_eq!(r.header("content-type"), Some("text/csv; charset=utf-8"));
    assert!(
        r.header("content-disposition")
            .is_some_and(|d| d.contains(&format!("{}_all.csv", ep.slug))),
        "{:?}",
        r.header("content-disposition")
    );
    let csv = r.text();
    let lines: Vec<&str> = csv.split("\r\n").filter(|l| !l.is_empty()).collect();
    assert_eq!(lines[0], "id,created_at,updated_at,n,city");
    let ns: Vec<&str> = lines[1..]
        .iter()
        .map(|l| l.split(',').nth(3).unwrap())
        .collect();
    assert_eq!(ns, ["0", "3", "6", "9"]);
    // NDJSON of everything in the environment; production holds nothing yet.
    let r = v.get(&format!(
        "{base}/export?environment=sandbox&format=ndjson&q="
    ));
    assert_eq!(r.text().lines().count(), 12);
    let r = v.get(&format!(
        "{base}/export?environment=production&format=ndjson"
    ));
    assert_eq!((r.status, r.text().as_str()), (200, ""));
    // A bad parameter is refused with its reason, not a file.
    let r = v.get(&format!("{base}/export?environment=sandbox&format=xml"));
    assert_eq!(r.status, 400, "{}", r.describe());
    assert!(r.header("content-disposition").is_none());
}
