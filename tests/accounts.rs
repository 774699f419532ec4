//! Accounts and collaboration: logins and session cookies, the login rate limit, account
//! tokens, password changes, accounts administration and suspension, invitations and their
//! edge cases, what collaborators may not do, managing collaborators, the deploy workflow
//! (states, notifications, audit; not its e-mails), and the monthly usage quota.
//!
//! Most tests drive the real binary over HTTP on loopback. Tests that need time to pass
//! (session expiry, the login window, invitation expiry, the usage month) run the server
//! in-process on its own tokio runtime with a [`ManualClock`] and move the clock instead of
//! sleeping; they still talk to it over real HTTP.

use crate::common;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use common::in_process::{InProcessServer, at};
use common::*;
use intake::core::clock::Clock;
use serde_json::{Value, json};

const MEMBER_PASSWORD: &str = "member-password-1";
const ENDPOINTS: &str = "/api/v1/manage/endpoints";
const MINUTE: Duration = Duration::from_secs(60);
const SECOND: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------
// HTTP with a choice of credentials
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Cred<'a> {
    Anon,
    Bearer(&'a str),
    Cookie(&'a str),
}

/// A client for one server address (the binary's or the in-process server's).
struct Api {
    agent: ureq::Agent,
    base: String,
}

impl Api {
    fn new(base: String) -> Api {
        Api {
            agent: new_agent(Duration::from_secs(30)),
            base,
        }
    }

    fn of(s: &ServerClient) -> Api {
        Api::new(s.base_url())
    }

    fn call(&self, method: &str, path: &str, cred: Cred, body: Option<&Value>) -> Resp {
        let auth;
        let cookie;
        let mut h: Vec<(&str, &str)> = Vec::new();
        match cred {
            Cred::Anon => {}
            Cred::Bearer(t) => {
                auth = format!("Bearer {t}");
                h.push(("Authorization", &auth));
            }
            Cred::Cookie(c) => {
                cookie = format!("intake_session={c}");
                h.push(("Cookie", &cookie));
            }
        }
        let url = format!("{}{path}", self.base);
        try_send_json(&self.agent, &url, method, &h, body)
            .unwrap_or_else(|e| panic!("{method} {path}: transport error: {e}"))
    }

    fn get(&self, path: &str, cred: Cred) -> Resp {
        self.call("GET", path, cred, None)
    }

    fn login(&self, email: &str, password: &str) -> Resp {
        self.call(
            "POST",
            "/api/v1/auth/login",
            Cred::Anon,
            Some(&json!({"email": email, "password": password})),
        )
    }

    /// Logs in (asserts 200) and returns the session cookie's value.
    fn session(&self, email: &str, password: &str) -> String {
        let r = self.login(email, password);
        assert_status(&r, 200);
        session_cookie(&r)
    }

    fn create_endpoint(&self, cred: Cred, name: &str) -> Endpoint {
        let r = self.call("POST", ENDPOINTS, cred, Some(&json!({ "name": name })));
        assert_status(&r, 201);
        Endpoint::from_json(&r.json())
    }

    /// A data call with an API key.
    fn data(&self, method: &str, path: &str, key: &str, body: Option<&Value>) -> Resp {
        self.call(method, path, Cred::Bearer(key), body)
    }

    fn list(&self, slug: &str, key: &str) -> Resp {
        self.data("GET", &format!("/api/v1/data/{slug}"), key, None)
    }

    fn invite(&self, owner: Cred, slug: &str, email: &str, permissions: &[&str]) -> Value {
        let r = self.call(
            "POST",
            &ep_path(slug, "invitations"),
            owner,
            Some(&json!({"email": email, "permissions": permissions})),
        );
        assert_status(&r, 201);
        r.json()
    }

    /// Accepts a link without credentials, creating an account with `password`.
    fn accept_new(&self, token: &str, password: &str) -> Resp {
        self.call(
            "POST",
            &format!("/api/v1/invitations/{token}/accept"),
            Cred::Anon,
            Some(&json!({ "password": password })),
        )
    }

    /// Invites `email` and accepts as a new account: a logged-in member.
    fn join(&self, owner: Cred, slug: &str, email: &str, permissions: &[&str]) -> Member {
        let invitation = self.invite(owner, slug, email, permissions);
        let r = self.accept_new(&link_token(&invitation), MEMBER_PASSWORD);
        assert_status(&r, 200);
        let v = r.json();
        Member {
            id: v["account"]["id"].as_u64().expect("account id"),
            email: email.to_string(),
            cookie: session_cookie(&r),
            sandbox_key: v["endpoint"]["sandbox_key"]
                .as_str()
                .expect("sandbox_key")
                .to_string(),
        }
    }

    fn audit_actions(&self, owner: Cred, slug: &str) -> Vec<String> {
        let r = self.get(&ep_path(slug, "audit"), owner);
        assert_status(&r, 200);
        r.json()["data"]
            .as_array()
            .expect("audit data")
            .iter()
            .map(|e| e["action"].as_str().expect("action").to_string())
            .collect()
    }

    fn notifications(&self, cred: Cred, query: &str) -> Vec<Value> {
        let r = self.get(&format!("/api/v1/manage/notifications{query}"), cred);
        assert_status(&r, 200);
        r.json()["data"].as_array().expect("data").clone()
    }

    fn usage(&self, owner: Cred, slug: &str) -> Value {
        let r = self.get(&ep_path(slug, "usage"), owner);
        assert_status(&r, 200);
        r.json()
    }
}

struct Member {
    id: u64,
    email: String,
    cookie: String,
    sandbox_key: String,
}

impl Member {
    fn cred(&self) -> Cred<'_> {
        Cred::Cookie(&self.cookie)
    }

    /// The member's new account token, made with its cookie: reads whose answer holds keys
    /// take a token (the cookie alone is refused with `token_required`).
    fn token(&self, api: &Api) -> String {
        let r = api.call(
            "POST",
            "/api/v1/manage/tokens",
            self.cred(),
            Some(&json!({ "name": "reads" })),
        );
        assert_status(&r, 201);
        r.json()["token"].as_str().expect("token").to_string()
    }
}

/// `/api/v1/manage/endpoints/{slug}/{rest}` (or the endpoint itself when `rest` is empty).
fn ep_path(slug: &str, rest: &str) -> String {
    if rest.is_empty() {
        format!("{ENDPOINTS}/{slug}")
    } else {
        format!("{ENDPOINTS}/{slug}/{rest}")
    }
}

/// The link token of an invitation: the last segment of its `accept_url`.
fn link_token(invitation: &Value) -> String {
    let url = invitation["accept_url"]
        .as_str()
        .unwrap_or_else(|| panic!("invitation has no accept_url: {invitation}"));
    url.rsplit('/').next().unwrap().to_string()
}

/// The `Set-Cookie` header that sets `intake_session`.
fn set_cookie_header(r: &Resp) -> &str {
    r.headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
        .map(|(_, v)| v.as_str())
        .find(|v| v.starts_with("intake_session="))
        .unwrap_or_else(|| panic!("no intake_session cookie set: {}", r.describe()))
}

fn has_set_cookie(r: &Resp) -> bool {
    r.headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
}

/// The cookie's value and its attributes.
fn parse_set_cookie(header: &str) -> (String, Vec<String>) {
    let mut parts = header.split(';').map(str::trim);
    let value = parts.next().unwrap()["intake_session=".len()..].to_string();
    (value, parts.map(str::to_string).collect())
}

fn session_cookie(r: &Resp) -> String {
    parse_set_cookie(set_cookie_header(r)).0
}

fn retry_after(r: &Resp) -> u64 {
    r.header("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After header: {:?}", r.headers))
        .parse()
        .expect("Retry-After is a number of seconds")
}

const PUBLIC_URL: &str = "https://intake.example.test/base";

/// The binary with `public_url` set (links in invitations start with it).
fn server_with_public_url() -> TestServer {
    TestServer::start_with_config(&format!("public_url = \"{PUBLIC_URL}/\"\n"))
}

// ---------------------------------------------------------------------------
// In-process server on a manual clock
// ---------------------------------------------------------------------------

/// The in-process server with an [`Api`] on its current address.
struct InProc {
    server: InProcessServer,
    api: Api,
}

impl InProc {
    fn start(toml: &str, start: &str) -> InProc {
        let server = InProcessServer::start(toml, at(start));
        InProc {
            api: Api::of(&server),
            server,
        }
    }

    /// Graceful shutdown (as on SIGTERM), then a new server on the same data dir and clock.
    fn restart(&mut self) {
        self.server.restart();
        self.api = Api::of(&self.server);
    }

    fn owner(&self) -> Cred<'_> {
        Cred::Bearer(&self.server.owner_token)
    }

    /// Whole seconds from the clock's now to `t` (which must be in the future).
    fn secs_until(&self, t: &str) -> u64 {
        let micros = at(t).as_micros() - self.clock.now().as_micros();
        assert!(micros > 0, "{t} is not in the future");
        u64::try_from(micros).unwrap().div_ceil(1_000_000)
    }
}

impl std::ops::Deref for InProc {
    type Target = InProcessServer;

    fn deref(&self) -> &InProcessServer {
        &self.server
    }
}

// ---------------------------------------------------------------------------
// Login, logout, sessions
// ---------------------------------------------------------------------------

#[test]
fn login_sets_an_httponly_samesite_strict_session_cookie_that_works_on_manage_routes() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let r = api.login(OWNER_EMAIL, &s.password);
    assert_status(&r, 200);
    let v = r.json();
    let account = v["account"].clone();
    assert_eq!(account["email"], OWNER_EMAIL);
    assert_eq!(account["role"], "owner");
    assert_eq!(account["suspended"], false);
    assert!(account["id"].is_u64(), "{v}");
    ts(&account["created_at"]);
    ts(&v["expires_at"]);

    let (cookie, attributes) = parse_set_cookie(set_cookie_header(&r));
    assert!(!cookie.is_empty(), "empty session cookie");
    for wanted in ["Path=/", "HttpOnly", "SameSite=Strict", "Max-Age=86400"] {
        assert!(
            attributes.iter().any(|a| a == wanted),
            "Set-Cookie lacks {wanted}: {attributes:?}"
        );
    }
    assert!(
        !attributes.iter().any(|a| a.eq_ignore_ascii_case("secure")),
        "served over http (no https public_url): no Secure attribute expected: {attributes:?}"
    );

    let who = api.get("/api/v1/auth/session", Cred::Cookie(&cookie));
    assert_status(&who, 200);
    assert_eq!(who.json(), account);
    let who = api.get("/api/v1/manage/account", Cred::Cookie(&cookie));
    assert_status(&who, 200);
    assert_eq!(who.json(), account);
    // Management writes work with the cookie too; a read whose answer holds keys takes the
    // account's token.
    let ep = api.create_endpoint(Cred::Cookie(&cookie), "via cookie");
    assert_error(
        &api.get(ENDPOINTS, Cred::Cookie(&cookie)),
        403,
        "token_required",
    );
    let listed = api.get(ENDPOINTS, Cred::Bearer(&s.owner_token)).json();
    assert_eq!(listed["data"][0]["slug"], ep.slug.as_str(), "{listed}");
    // Neither the cookie nor an account token is a data key.
    let data = format!("/api/v1/data/{}", ep.slug);
    assert_error(
        &api.get(&data, Cred::Cookie(&cookie)),
        401,
        "missing_api_key",
    );
    assert_error(
        &api.get(&data, Cred::Bearer(&s.owner_token)),
        401,
        "invalid_api_key",
    );

    // The e-mail address is matched without regard to case and surrounding spaces.
    let r = api.login("  Owner@EXAMPLE.com ", &s.password);
    assert_status(&r, 200);
    assert_eq!(r.json()["account"]["email"], OWNER_EMAIL);
}

#[test]
fn session_cookie_is_secure_when_public_url_is_https() {
    let s = server_with_public_url();
    let r = Api::of(&s).login(OWNER_EMAIL, &s.password);
    assert_status(&r, 200);
    let (_, attributes) = parse_set_cookie(set_cookie_header(&r));
    assert!(
        attributes.iter().any(|a| a == "Secure"),
        "public_url is https: the cookie must be Secure: {attributes:?}"
    );
}

#[test]
fn logout_clears_the_cookie_and_ends_only_that_session() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let first = api.session(OWNER_EMAIL, &s.password);
    let second = api.session(OWNER_EMAIL, &s.password);
    assert_ne!(first, second, "each login opens its own session");

    let r = api.call("POST", "/api/v1/auth/logout", Cred::Cookie(&first), None);
    assert_status(&r, 200);
    assert_eq!(r.json(), json!({"logged_out": true}));
    let (value, attributes) = parse_set_cookie(set_cookie_header(&r));
    assert_eq!(value, "", "logout must clear the cookie");
    for wanted in ["Path=/", "HttpOnly", "SameSite=Strict", "Max-Age=0"] {
        assert!(
            attributes.iter().any(|a| a == wanted),
            "clearing Set-Cookie lacks {wanted}: {attributes:?}"
        );
    }

    for path in ["/api/v1/auth/session", "/api/v1/manage/account", ENDPOINTS] {
        let r = api.get(path, Cred::Cookie(&first));
        assert_error(&r, 401, "session_expired");
    }
    assert_status(&api.get("/api/v1/auth/session", Cred::Cookie(&second)), 200);
    // Logging out twice is fine.
    let r = api.call("POST", "/api/v1/auth/logout", Cred::Cookie(&first), None);
    assert_status(&r, 200);
}

#[test]
fn wrong_password_or_unknown_email_is_401_invalid_credentials_without_a_cookie() {
    let s = TestServer::start();
    let api = Api::of(&s);
    for (email, password) in [
        (OWNER_EMAIL, "not-the-password"),
        ("nobody@example.com", s.password.as_str()),
    ] {
        let r = api.login(email, password);
        assert_error(&r, 401, "invalid_credentials");
        assert!(!has_set_cookie(&r), "a failed login set a cookie: {r:?}");
    }
    assert_error(
        &api.get("/api/v1/auth/session", Cred::Anon),
        401,
        "missing_token",
    );
    assert_error(
        &api.get("/api/v1/auth/session", Cred::Cookie("ise_made-up")),
        401,
        "session_expired",
    );
}

#[test]
fn session_expires_after_session_ttl_on_the_clock() {
    let s = InProc::start("[accounts]\nsession_ttl = \"2h\"\n", "2026-05-10T12:00:00Z");
    let r = s.api.login(OWNER_EMAIL, &s.password);
    assert_status(&r, 200);
    assert_eq!(r.json()["expires_at"], "2026-05-10T14:00:00.000000Z");
    let (cookie, attributes) = parse_set_cookie(set_cookie_header(&r));
    assert!(
        attributes.iter().any(|a| a == "Max-Age=7200"),
        "Max-Age must follow session_ttl: {attributes:?}"
    );

    s.advance(2 * 3600 * SECOND - SECOND);
    assert_status(
        &s.api.get("/api/v1/auth/session", Cred::Cookie(&cookie)),
        200,
    );
    s.advance(SECOND);
    for path in ["/api/v1/auth/session", ENDPOINTS] {
        assert_error(
            &s.api.get(path, Cred::Cookie(&cookie)),
            401,
            "session_expired",
        );
    }
    // Account tokens do not expire with sessions; a new login works.
    assert_status(&s.api.get(ENDPOINTS, s.owner()), 200);
    let fresh = s.api.session(OWNER_EMAIL, &s.password);
    assert_status(
        &s.api.get("/api/v1/auth/session", Cred::Cookie(&fresh)),
        200,
    );
}

#[test]
fn failed_logins_per_account_are_limited_until_the_window_passes() {
    // Defaults: 5 failures per account (from one client address) within 15 minutes.
    let s = InProc::start("", "2026-05-10T12:00:00Z");
    // Failures one minute apart, at t0 .. t0+4m.
    for i in 0..5 {
        if i > 0 {
            s.advance(MINUTE);
        }
        let r = s.api.login(OWNER_EMAIL, "wrong-password");
        assert_error(&r, 401, "invalid_credentials");
    }
    // At the limit: even the right password is refused until the oldest failure (t0) is
    // 15 minutes old.
    let r = s.api.login(OWNER_EMAIL, &s.password);
    assert_error(&r, 429, "too_many_login_attempts");
    assert!(!has_set_cookie(&r));
    assert_eq!(retry_after(&r), s.secs_until("2026-05-10T12:15:00Z"));
    assert_eq!(retry_after(&r), 660);
    // A wrong password is refused the same way (not checked, not 401).
    s.advance(5 * MINUTE);
    let r = s.api.login(OWNER_EMAIL, "wrong-password");
    assert_error(&r, 429, "too_many_login_attempts");
    assert_eq!(retry_after(&r), 360);
    // The limit is per account: another e-mail address from the same client is still checked.
    assert_error(
        &s.api.login("someone-else@example.com", "whatever-password"),
        401,
        "invalid_credentials",
    );

    // Sliding window: at t0+15m the first failure leaves it, leaving room for one more.
    s.set("2026-05-10T12:15:00Z");
    let r = s.api.login(OWNER_EMAIL, "wrong-password");
    assert_error(&r, 401, "invalid_credentials");
    let r = s.api.login(OWNER_EMAIL, &s.password);
    assert_error(&r, 429, "too_many_login_attempts");
    assert_eq!(retry_after(&r), s.secs_until("2026-05-10T12:16:00Z"));

    // Waiting exactly Retry-After seconds is enough.
    s.advance(Duration::from_secs(retry_after(&r)));
    let r = s.api.login(OWNER_EMAIL, &s.password);
    assert_status(&r, 200);
    // A successful login starts the account's count afresh.
    assert_error(
        &s.api.login(OWNER_EMAIL, "wrong-password"),
        401,
        "invalid_credentials",
    );
}

#[test]
fn failed_logins_per_client_address_are_limited_until_the_window_passes() {
    // Defaults: 20 failures per address within 15 minutes. Made-up addresses, so no
    // account reaches its own limit.
    let s = InProc::start("", "2026-05-10T12:00:00Z");
    for i in 0..20 {
        let r = s
            .api
            .login(&format!("guess-{i}@example.com"), "wrong-password");
        assert_error(&r, 401, "invalid_credentials");
    }
    let r = s.api.login(OWNER_EMAIL, &s.password);
    assert_error(&r, 429, "too_many_login_attempts");
    assert_eq!(retry_after(&r), 900);
    let r = s.api.login("guess-99@example.com", "wrong-password");
    assert_error(&r, 429, "too_many_login_attempts");

    s.advance(15 * MINUTE);
    assert_status(&s.api.login(OWNER_EMAIL, &s.password), 200);
}

#[test]
fn failures_from_one_address_never_lock_the_owner_out_of_another() {
    // Defaults: 5 failures per account and address. The server listens on 127.0.0.1; the
    // clients bind 127.0.0.2 (the attacker) and 127.0.0.3 (the owner) before connecting.
    let s = TestServer::start();
    let attacker: IpAddr = "127.0.0.2".parse().unwrap();
    let owner: IpAddr = "127.0.0.3".parse().unwrap();
    for _ in 0..5 {
        let r = login_from(attacker, s.addr(), &[], OWNER_EMAIL, "wrong-password");
        assert_error(&r, 401, "invalid_credentials");
    }
    let r = login_from(attacker, s.addr(), &[], OWNER_EMAIL, &s.password);
    assert_error(&r, 429, "too_many_login_attempts");

    let r = login_from(owner, s.addr(), &[], OWNER_EMAIL, &s.password);
    assert_status(&r, 200);
    assert_eq!(r.json()["account"]["email"], OWNER_EMAIL);
    // The owner's login gives the attacker's address nothing back.
    let r = login_from(attacker, s.addr(), &[], OWNER_EMAIL, &s.password);
    assert_error(&r, 429, "too_many_login_attempts");
}

#[test]
fn parallel_wrong_logins_from_one_address_let_exactly_the_limit_through() {
    // Defaults: 5 failures per account and address. 30 wrong passwords at once: each
    // attempt takes its failure slot before the password is checked, so exactly 5 are
    // checked (401) and the other 25 are refused unchecked (429).
    let s = TestServer::start();
    let start = Arc::new(std::sync::Barrier::new(30));
    let attempts: Vec<_> = (0..30)
        .map(|_| {
            let (start, api) = (start.clone(), Api::of(&s));
            std::thread::spawn(move || {
                start.wait();
                api.login(OWNER_EMAIL, "wrong-password")
            })
        })
        .collect();
    let answers: Vec<Resp> = attempts.into_iter().map(|t| t.join().unwrap()).collect();
    let codes = |status: u16| answers.iter().filter(|r| r.status == status).count();
    let statuses: Vec<u16> = answers.iter().map(|r| r.status).collect();
    assert_eq!((codes(401), codes(429)), (5, 25), "{statuses:?}");
    for r in &answers {
        let code = if r.status == 401 {
            "invalid_credentials"
        } else {
            "too_many_login_attempts"
        };
        assert_error(r, r.status, code);
    }
}

#[test]
fn password_checks_leave_the_async_workers_free_for_other_requests() {
    // More logins at once than the server has async workers (one per CPU): were argon2
    // (about a second in this debug build) run on those workers, all of them would be busy
    // hashing and no /healthz could be answered until a login was. On the blocking pool,
    // /healthz keeps being answered while every password is still being checked. What is
    // asserted is an order of events, not a duration.
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let s = TestServer::start_with_config("[accounts]\nlogin_failures_per_address = 1000\n");
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (sent, answered) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let logins: Vec<_> = (0..=workers)
        .map(|i| {
            let (addr, sent, answered) = (s.addr(), sent.clone(), answered.clone());
            std::thread::spawn(move || {
                let body = json!({ "email": format!("guess-{i}@example.com"),
                                   "password": "wrong-password" })
                .to_string();
                let mut stream = std::net::TcpStream::connect(addr).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(60)))
                    .unwrap();
                let request = format!(
                    "POST /api/v1/auth/login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: \
                     application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                std::io::Write::write_all(&mut stream, request.as_bytes()).unwrap();
                sent.fetch_add(1, SeqCst);
                let r = read_response(&mut stream).unwrap();
                answered.fetch_add(1, SeqCst);
                assert_error(&r, 401, "invalid_credentials");
            })
        })
        .collect();
    while sent.load(SeqCst) <= workers {
        std::thread::yield_now();
    }
    // /healthz answers that came back while no login had been answered yet.
    let mut answered_meanwhile = 0;
    while answered.load(SeqCst) <= workers {
        assert_status(&s.request("GET", "/healthz", &[], None), 200);
        if answered.load(SeqCst) == 0 {
            answered_meanwhile += 1;
        }
    }
    for login in logins {
        login.join().unwrap();
    }
    assert!(
        answered_meanwhile >= 3,
        "only {answered_meanwhile} /healthz answers before the first login's: the password \
         checks held the async workers"
    );
}

// ---------------------------------------------------------------------------
// Tokens and passwords
// ---------------------------------------------------------------------------

#[test]
fn tokens_are_created_shown_once_listed_and_stop_working_at_once_when_revoked() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let r = api.call(
        "POST",
        "/api/v1/manage/tokens",
        owner,
        Some(&json!({"name": "ci"})),
    );
    assert_status(&r, 201);
    let created = r.json();
    let id = created["id"].as_str().expect("id").to_string();
    let token = created["token"].as_str().expect("token").to_string();
    assert!(id.starts_with("tok_"), "{created}");
    assert!(token.starts_with("itk_"), "{created}");
    assert_eq!(created["name"], "ci");
    ts(&created["created_at"]);

    let listed = api.get("/api/v1/manage/tokens", owner).json();
    let data = listed["data"].as_array().expect("data");
    assert_eq!(data.len(), 2, "the init token and the new one: {listed}");
    let entry = data
        .iter()
        .find(|t| t["id"] == id.as_str())
        .expect("listed");
    assert_eq!(entry["name"], "ci");
    assert!(
        data.iter().all(|t| t.get("token").is_none()),
        "a listed token must never show the token: {listed}"
    );
    assert!(
        !listed.to_string().contains(&token),
        "the token leaked into the list"
    );

    let me = api.get("/api/v1/manage/account", Cred::Bearer(&token));
    assert_status(&me, 200);
    assert_eq!(me.json()["email"], OWNER_EMAIL);

    let r = api.call(
        "DELETE",
        &format!("/api/v1/manage/tokens/{id}"),
        owner,
        None,
    );
    assert_status(&r, 200);
    assert_eq!(r.json(), json!({"id": id, "revoked": true}));
    assert_error(
        &api.get("/api/v1/manage/account", Cred::Bearer(&token)),
        401,
        "invalid_token",
    );
    let listed = api.get("/api/v1/manage/tokens", owner).json();
    assert!(
        listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["id"] != id.as_str()),
        "revoked token still listed: {listed}"
    );
    let r = api.call(
        "DELETE",
        &format!("/api/v1/manage/tokens/{id}"),
        owner,
        None,
    );
    assert_error(&r, 404, "token_not_found");
    assert_status(&api.get("/api/v1/manage/account", owner), 200);

    let r = api.call(
        "POST",
        "/api/v1/manage/tokens",
        owner,
        Some(&json!({"name": "  "})),
    );
    assert_error(&r, 400, "invalid_request");
}

#[test]
fn password_change_checks_the_current_password_and_the_minimum_length() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let path = "/api/v1/manage/account/password";
    let r = api.call(
        "POST",
        path,
        owner,
        Some(&json!({"current_password": "wrong-password", "new_password": "0123456789"})),
    );
    assert_error(&r, 401, "invalid_credentials");
    let r = api.call(
        "POST",
        path,
        owner,
        Some(&json!({"current_password": s.password, "new_password": "012345678"})),
    );
    assert_error(&r, 400, "invalid_request");
    // Ten characters is enough.
    let r = api.call(
        "POST",
        path,
        owner,
        Some(&json!({"current_password": s.password, "new_password": "0123456789"})),
    );
    assert_status(&r, 200);
    assert_eq!(r.json()["email"], OWNER_EMAIL);

    assert_error(
        &api.login(OWNER_EMAIL, &s.password),
        401,
        "invalid_credentials",
    );
    assert_status(&api.login(OWNER_EMAIL, "0123456789"), 200);
}

/// `POST /api/v1/manage/account/password` with `token`, from the local address `from`.
fn change_password_from(s: &TestServer, from: IpAddr, current: &str, new: &str) -> Resp {
    let body = json!({ "current_password": current, "new_password": new }).to_string();
    let request = format!(
        "POST /api/v1/manage/account/password HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        s.addr(),
        s.owner_token,
        body.len()
    );
    raw_exchange_from(from, s.addr(), request.as_bytes(), Duration::from_secs(60))
}

#[test]
fn guesses_at_the_current_password_count_against_the_login_limits() {
    // A stolen token or session must not guess the current password faster than the login
    // form lets anyone guess it: 5 wrong guesses from one address, then 429 there.
    let s = TestServer::start();
    let thief: IpAddr = "127.0.0.2".parse().unwrap();
    let owner: IpAddr = "127.0.0.3".parse().unwrap();
    for _ in 0..5 {
        let r = change_password_from(&s, thief, "wrong-password", "stolen-password");
        assert_error(&r, 401, "invalid_credentials");
    }
    let r = change_password_from(&s, thief, &s.password, "stolen-password");
    assert_error(&r, 429, "too_many_login_attempts");
    // The holder, elsewhere, is not locked out; the password is theirs.
    let r = change_password_from(&s, owner, &s.password, "second-password");
    assert_status(&r, 200);
    assert_status(&Api::of(&s).login(OWNER_EMAIL, "second-password"), 200);
}

#[test]
fn a_password_change_ends_the_other_sessions_but_keeps_tokens() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let path = "/api/v1/manage/account/password";
    let (changer, other) = (
        api.session(OWNER_EMAIL, &s.password),
        api.session(OWNER_EMAIL, &s.password),
    );
    let r = api.call(
        "POST",
        path,
        Cred::Cookie(&changer),
        Some(&json!({"current_password": s.password, "new_password": "second-password"})),
    );
    assert_status(&r, 200);

    // The other session is over, on the API and in the dashboard.
    assert_error(
        &api.get("/api/v1/auth/session", Cred::Cookie(&other)),
        401,
        "session_expired",
    );
    let page = s.request(
        "GET",
        "/dashboard/endpoints",
        &[("Cookie", &format!("intake_session={other}"))],
        None,
    );
    assert_eq!(page.status, 303, "{}", page.describe());
    assert!(
        page.header("location")
            .is_some_and(|l| l.starts_with("/dashboard/login")),
        "{page:?}"
    );
    // The session that made the change stays logged in; personal tokens keep working.
    assert_status(
        &api.get("/api/v1/auth/session", Cred::Cookie(&changer)),
        200,
    );
    assert_status(&api.get(ENDPOINTS, Cred::Bearer(&s.owner_token)), 200);

    // A change made with a token ends every session.
    let r = api.call(
        "POST",
        path,
        Cred::Bearer(&s.owner_token),
        Some(&json!({"current_password": "second-password", "new_password": "third-password"})),
    );
    assert_status(&r, 200);
    assert_error(
        &api.get("/api/v1/auth/session", Cred::Cookie(&changer)),
        401,
        "session_expired",
    );
    assert_status(&api.login(OWNER_EMAIL, "third-password"), 200);
}

// ---------------------------------------------------------------------------
// Accounts administration and suspension
// ---------------------------------------------------------------------------

#[test]
fn accounts_administration_is_for_the_server_owner_only() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let ep = api.create_endpoint(owner, "shared");
    let m = api.join(owner, &ep.slug, "member@example.com", &["read"]);

    let listed = api.get("/api/v1/manage/accounts", owner);
    assert_status(&listed, 200);
    let data = listed.json()["data"].as_array().unwrap().clone();
    assert_eq!(data.len(), 2, "{data:?}");
    assert_eq!(data[0]["email"], OWNER_EMAIL);
    assert_eq!(data[0]["role"], "owner");
    assert_eq!(data[1]["email"], "member@example.com");
    assert_eq!(data[1]["role"], "member");
    assert_eq!(data[1]["suspended"], false);
    let owner_id = data[0]["id"].as_u64().unwrap();
    let one = api.get(&format!("/api/v1/manage/accounts/{}", m.id), owner);
    assert_status(&one, 200);
    assert_eq!(one.json(), data[1]);
    for missing in ["999999", "abc"] {
        let r = api.get(&format!("/api/v1/manage/accounts/{missing}"), owner);
        assert_error(&r, 404, "account_not_found");
    }
    let r = api.call(
        "PATCH",
        &format!("/api/v1/manage/accounts/{owner_id}"),
        owner,
        Some(&json!({"suspended": true})),
    );
    assert_error(&r, 409, "conflict");

    // A member may do none of it, not even to itself.
    let member = m.cred();
    assert_error(
        &api.get("/api/v1/manage/accounts", member),
        403,
        "server_owner_only",
    );
    assert_error(
        &api.get(&format!("/api/v1/manage/accounts/{owner_id}"), member),
        403,
        "server_owner_only",
    );
    for id in [owner_id, m.id] {
        let r = api.call(
            "PATCH",
            &format!("/api/v1/manage/accounts/{id}"),
            member,
            Some(&json!({"suspended": true})),
        );
        assert_error(&r, 403, "server_owner_only");
    }
    let r = api.call("POST", ENDPOINTS, member, Some(&json!({"name": "mine"})));
    assert_error(&r, 403, "server_owner_only");
    assert_eq!(
        api.get("/api/v1/manage/accounts", owner).json()["data"],
        json!(data)
    );

    // A member's own tokens: its list shows only them, and it cannot revoke the owner's.
    let r = api.call(
        "POST",
        "/api/v1/manage/tokens",
        member,
        Some(&json!({"name": "member cli"})),
    );
    assert_status(&r, 201);
    let member_token = r.json()["token"].as_str().unwrap().to_string();
    let me = api.get("/api/v1/manage/account", Cred::Bearer(&member_token));
    assert_eq!(me.json()["email"], "member@example.com");
    let mine = api.get("/api/v1/manage/tokens", member).json();
    let mine = mine["data"].as_array().unwrap();
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(mine[0]["name"], "member cli");
    let owners = api.get("/api/v1/manage/tokens", owner).json();
    let owner_token_id = owners["data"][0]["id"].as_str().unwrap().to_string();
    let r = api.call(
        "DELETE",
        &format!("/api/v1/manage/tokens/{owner_token_id}"),
        member,
        None,
    );
    assert_error(&r, 404, "token_not_found");
    assert_status(&api.get("/api/v1/manage/account", owner), 200);
}

#[test]
fn suspension_blocks_login_tokens_sessions_and_keys_until_reinstated() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let ep = api.create_endpoint(owner, "shared");
    let m = api.join(owner, &ep.slug, "member@example.com", &["read"]);
    let r = api.call(
        "POST",
        "/api/v1/manage/tokens",
        m.cred(),
        Some(&json!({"name": "cli"})),
    );
    assert_status(&r, 201);
    let token = r.json()["token"].as_str().unwrap().to_string();
    let account_path = format!("/api/v1/manage/accounts/{}", m.id);

    let r = api.call(
        "PATCH",
        &account_path,
        owner,
        Some(&json!({"suspended": true})),
    );
    assert_status(&r, 200);
    assert_eq!(r.json()["suspended"], true);
    assert_eq!(api.get(&account_path, owner).json()["suspended"], true);
    let collaborators = api.get(&ep_path(&ep.slug, "collaborators"), owner).json();
    assert_eq!(
        collaborators["data"][0]["suspended"], true,
        "{collaborators}"
    );

    let r = api.login(&m.email, MEMBER_PASSWORD);
    assert_error(&r, 403, "account_suspended");
    assert!(!has_set_cookie(&r), "a suspended login set a cookie");
    // A wrong password says nothing about the suspension.
    assert_error(
        &api.login(&m.email, "wrong-password"),
        401,
        "invalid_credentials",
    );
    assert_error(
        &api.get("/api/v1/auth/session", m.cred()),
        403,
        "account_suspended",
    );
    assert_error(
        &api.get("/api/v1/manage/account", Cred::Bearer(&token)),
        403,
        "account_suspended",
    );
    assert_error(
        &api.list(&ep.slug, &m.sandbox_key),
        403,
        "account_suspended",
    );
    // The owner's own access is untouched.
    assert_status(&api.list(&ep.slug, &ep.sandbox_key), 200);

    let r = api.call(
        "PATCH",
        &account_path,
        owner,
        Some(&json!({"suspended": false})),
    );
    assert_status(&r, 200);
    assert_eq!(r.json()["suspended"], false);
    assert_status(&api.get("/api/v1/auth/session", m.cred()), 200);
    assert_status(
        &api.get("/api/v1/manage/account", Cred::Bearer(&token)),
        200,
    );
    assert_status(&api.list(&ep.slug, &m.sandbox_key), 200);
    assert_status(&api.login(&m.email, MEMBER_PASSWORD), 200);
}

// ---------------------------------------------------------------------------
// Invitations
// ---------------------------------------------------------------------------

#[test]
fn invitation_is_pending_with_an_accept_link_and_previews_without_credentials() {
    let s = server_with_public_url();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let ep = api.create_endpoint(owner, "Signups");
    let inv = api.invite(
        owner,
        &ep.slug,
        "  New.Person@Example.com ",
        &["read", "create", "read"],
    );
    assert!(inv["id"].is_u64(), "{inv}");
    assert!(inv["mail_id"].is_u64(), "{inv}");
    assert_eq!(inv["email"], "new.person@example.com");
    assert_eq!(inv["permissions"], json!(["create", "read"]));
    assert_eq!(inv["status"], "pending");
    let url = inv["accept_url"].as_str().expect("accept_url");
    let token = link_token(&inv);
    assert_eq!(url, format!("{PUBLIC_URL}/invitations/{token}"));
    assert!(token.starts_with("inv_") && token.len() > 4, "{token}");
    let (created, _) = ts(&inv["created_at"]);
    let (expires, _) = ts(&inv["expires_at"]);
    assert_eq!(
        expires - created,
        7 * 86_400,
        "default invitation_ttl is 7 days"
    );

    let listed = api.get(&ep_path(&ep.slug, "invitations"), owner);
    assert_status(&listed, 200);
    assert_eq!(listed.json()["data"], json!([inv]));

    let preview = api.get(&format!("/api/v1/invitations/{token}"), Cred::Anon);
    assert_status(&preview, 200);
    assert_eq!(
        preview.json(),
        json!({
            "endpoint_name": "Signups",
            "email": "new.person@example.com",
            "permissions": ["create", "read"],
            "invited_by": OWNER_EMAIL,
            "expires_at": inv["expires_at"],
            "account_exists": false,
        })
    );
    let audit = api.get(&ep_path(&ep.slug, "audit"), owner).json();
    assert_eq!(audit["data"][0]["action"], "invitation.sent", "{audit}");
    assert_eq!(
        audit["data"][0]["details"]["email"],
        "new.person@example.com"
    );
    assert_eq!(audit["data"][0]["actor"]["email"], OWNER_EMAIL);
}

#[test]
fn accepting_without_an_account_creates_a_logged_in_member_with_its_own_sandbox_key() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let ep = api.create_endpoint(owner, "Signups");
    let inv = api.invite(owner, &ep.slug, "new@example.com", &["create", "read"]);
    let token = link_token(&inv);

    let r = api.accept_new(&token, MEMBER_PASSWORD);
    assert_status(&r, 200);
    let v = r.json();
    assert_eq!(v["account"]["email"], "new@example.com");
    assert_eq!(v["account"]["role"], "member");
    assert_eq!(v["account"]["suspended"], false);
    let endpoint = &v["endpoint"];
    assert_eq!(endpoint["slug"], ep.slug.as_str());
    assert_eq!(endpoint["role"], "collaborator");
    assert_eq!(endpoint["permissions"], json!(["create", "read"]));
    assert_eq!(endpoint["deployed"], false);
    assert_eq!(
        endpoint["production_key"],
        Value::Null,
        "no production key before deploy"
    );
    let key = endpoint["sandbox_key"].as_str().expect("sandbox_key");
    assert!(key.starts_with("tm_test_"), "{key}");
    assert_ne!(key, ep.sandbox_key, "the collaborator gets its own key");

    let (cookie, attributes) = parse_set_cookie(set_cookie_header(&r));
    assert!(attributes.iter().any(|a| a == "HttpOnly"), "{attributes:?}");
    let who = api.get("/api/v1/auth/session", Cred::Cookie(&cookie));
    assert_status(&who, 200);
    assert_eq!(who.json(), v["account"]);
    let token = api.call(
        "POST",
        "/api/v1/manage/tokens",
        Cred::Cookie(&cookie),
        Some(&json!({ "name": "cli" })),
    );
    assert_status(&token, 201);
    let token = token.json()["token"].as_str().expect("token").to_string();
    let mine = api.get(ENDPOINTS, Cred::Bearer(&token)).json();
    assert_eq!(
        mine["data"],
        json!([endpoint]),
        "a member sees only its endpoints"
    );
    assert_status(&api.login("new@example.com", MEMBER_PASSWORD), 200);

    // The key works and writes into the endpoint the owner sees.
    let r = api.data(
        "POST",
        &format!("/api/v1/data/{}", ep.slug),
        key,
        Some(&json!({"from": "collaborator"})),
    );
    assert_status(&r, 202);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let r = api.data(
        "GET",
        &format!("/api/v1/data/{}/{id}", ep.slug),
        &ep.sandbox_key,
        None,
    );
    assert_status(&r, 200);

    let listed = api.get(&ep_path(&ep.slug, "invitations"), owner).json();
    assert_eq!(listed["data"][0]["status"], "accepted", "{listed}");
    assert_eq!(listed["data"][0]["accept_url"], Value::Null, "{listed}");
    let audit = api.get(&ep_path(&ep.slug, "audit"), owner).json();
    assert_eq!(audit["data"][0]["action"], "invitation.accepted", "{audit}");
    assert_eq!(audit["data"][0]["actor"]["email"], "new@example.com");
    let notes = api.notifications(owner, "");
    assert_eq!(notes[0]["kind"], "invitation_accepted", "{notes:?}");
    assert_eq!(notes[0]["endpoint_slug"], ep.slug.as_str());
    assert!(
        notes[0]["message"]
            .as_str()
            .unwrap()
            .contains("new@example.com"),
        "{notes:?}"
    );
}

#[test]
fn invitation_links_refuse_unknown_used_and_revoked_tokens() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let ep = api.create_endpoint(owner, "Signups");

    // Unknown.
    for token in ["inv_0000000000000000000000000000000", "not-a-token"] {
        let r = api.get(&format!("/api/v1/invitations/{token}"), Cred::Anon);
        assert_error(&r, 404, "invitation_not_found");
        assert_error(
            &api.accept_new(token, MEMBER_PASSWORD),
            404,
            "invitation_not_found",
        );
    }

    // Revoked: the link stops working and no account is created through it.
    let inv = api.invite(owner, &ep.slug, "revoked@example.com", &["read"]);
    let id = inv["id"].as_u64().unwrap();
    let invitation_path = ep_path(&ep.slug, &format!("invitations/{id}"));
    let r = api.call("DELETE", &invitation_path, owner, None);
    assert_status(&r, 200);
    assert_eq!(r.json()["status"], "revoked");
    assert_eq!(r.json()["accept_url"], Value::Null);
    let token = link_token(&inv);
    assert_error(
        &api.get(&format!("/api/v1/invitations/{token}"), Cred::Anon),
        410,
        "invitation_revoked",
    );
    assert_error(
        &api.accept_new(&token, MEMBER_PASSWORD),
        410,
        "invitation_revoked",
    );
    let accounts = api.get("/api/v1/manage/accounts", owner).json();
    assert_eq!(accounts["data"].as_array().unwrap().len(), 1, "{accounts}");
    let r = api.call(
        "DELETE",
        &ep_path(&ep.slug, "invitations/999999"),
        owner,
        None,
    );
    assert_error(&r, 404, "invitation_not_found");
    let actions = api.audit_actions(owner, &ep.slug);
    assert_eq!(actions[0], "invitation.revoked", "{actions:?}");
    // The address can be invited again.
    let again = api.invite(owner, &ep.slug, "revoked@example.com", &["read"]);
    assert_eq!(again["status"], "pending");

    // Used: a link works once.
    let inv = api.invite(owner, &ep.slug, "used@example.com", &["read"]);
    let token = link_token(&inv);
    let r = api.accept_new(&token, MEMBER_PASSWORD);
    assert_status(&r, 200);
    let cookie = session_cookie(&r);
    assert_error(
        &api.get(&format!("/api/v1/invitations/{token}"), Cred::Anon),
        410,
        "invitation_already_accepted",
    );
    assert_error(
        &api.accept_new(&token, "another-password"),
        410,
        "invitation_already_accepted",
    );
    let r = api.call(
        "POST",
        &format!("/api/v1/invitations/{token}/accept"),
        Cred::Cookie(&cookie),
        None,
    );
    assert_error(&r, 410, "invitation_already_accepted");
    // An accepted invitation cannot be revoked (the collaborator is removed instead).
    let r = api.call(
        "DELETE",
        &ep_path(&ep.slug, &format!("invitations/{}", inv["id"])),
        owner,
        None,
    );
    assert_error(&r, 409, "conflict");
}

#[test]
fn accepting_as_an_existing_account_needs_its_login_and_the_invited_address() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let first = api.create_endpoint(owner, "first");
    let second = api.create_endpoint(owner, "second");
    let m = api.join(owner, &first.slug, "member@example.com", &["read"]);

    let inv = api.invite(owner, &second.slug, "member@example.com", &["create"]);
    let token = link_token(&inv);
    let accept = format!("/api/v1/invitations/{token}/accept");
    let preview = api.get(&format!("/api/v1/invitations/{token}"), Cred::Anon);
    assert_eq!(preview.json()["account_exists"], true);

    assert_error(
        &api.call("POST", &accept, Cred::Anon, None),
        401,
        "login_required",
    );
    assert_error(
        &api.accept_new(&token, "a-brand-new-password"),
        401,
        "login_required",
    );
    // Logged in as someone else: the owner.
    assert_error(
        &api.call("POST", &accept, owner, None),
        403,
        "invitation_for_other_account",
    );
    let listed = api.get(&ep_path(&second.slug, "invitations"), owner).json();
    assert_eq!(
        listed["data"][0]["status"], "pending",
        "refusals used the link"
    );

    let r = api.call("POST", &accept, m.cred(), None);
    assert_status(&r, 200);
    assert!(!has_set_cookie(&r), "already logged in: no new session");
    let v = r.json();
    assert_eq!(v["account"]["id"], m.id);
    assert_eq!(v["endpoint"]["slug"], second.slug.as_str());
    assert_eq!(v["endpoint"]["role"], "collaborator");
    assert_eq!(v["endpoint"]["permissions"], json!(["create"]));
    let key = v["endpoint"]["sandbox_key"].as_str().unwrap();
    assert_ne!(key, m.sandbox_key, "one collaboration key per endpoint");
    // The new key belongs to the second endpoint only.
    assert_error(&api.list(&first.slug, key), 404, "endpoint_not_found");
    let mine = api.get(ENDPOINTS, Cred::Bearer(&m.token(&api))).json();
    assert_eq!(mine["data"].as_array().unwrap().len(), 2, "{mine}");
}

#[test]
fn invitation_requests_are_validated() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let ep = api.create_endpoint(owner, "Signups");
    let path = ep_path(&ep.slug, "invitations");
    let invite = |body: Value| api.call("POST", &path, owner, Some(&body));

    assert_error(
        &invite(json!({"email": OWNER_EMAIL, "permissions": ["read"]})),
        409,
        "conflict",
    );
    for bad in [
        json!({"email": "x@example.com", "permissions": []}),
        json!({"email": "x@example.com", "permissions": ["admin"]}),
        json!({"email": "not-an-address", "permissions": ["read"]}),
        json!({"email": "x@example.com"}),
    ] {
        assert_error(&invite(bad), 400, "invalid_request");
    }
    let r = api.call(
        "POST",
        &ep_path("no-such-endpoint", "invitations"),
        owner,
        Some(&json!({"email": "x@example.com", "permissions": ["read"]})),
    );
    assert_error(&r, 404, "endpoint_not_found");

    let inv = api.invite(owner, &ep.slug, "x@example.com", &["read"]);
    assert_error(
        &invite(json!({"email": "X@example.com", "permissions": ["create"]})),
        409,
        "conflict",
    );
    let token = link_token(&inv);
    // Accepting needs a password of at least 10 characters, or a login.
    assert_error(&api.accept_new(&token, "short-pw1"), 400, "invalid_request");
    let r = api.call(
        "POST",
        &format!("/api/v1/invitations/{token}/accept"),
        Cred::Anon,
        None,
    );
    assert_error(&r, 400, "invalid_request");
    let listed = api.get(&path, owner).json();
    assert_eq!(listed["data"][0]["status"], "pending", "{listed}");
    let accounts = api.get("/api/v1/manage/accounts", owner).json();
    assert_eq!(accounts["data"].as_array().unwrap().len(), 1, "{accounts}");

    assert_status(&api.accept_new(&token, "exactly10c"), 200);
    assert_error(
        &invite(json!({"email": "x@example.com", "permissions": ["read"]})),
        409,
        "conflict",
    );
}

#[test]
fn invitation_expires_after_invitation_ttl_on_the_clock() {
    let s = InProc::start("", "2026-05-10T12:00:00Z");
    let ep = s.api.create_endpoint(s.owner(), "Signups");
    let inv = s
        .api
        .invite(s.owner(), &ep.slug, "late@example.com", &["read"]);
    assert_eq!(inv["expires_at"], "2026-05-17T12:00:00.000000Z");
    let token = link_token(&inv);
    let preview = format!("/api/v1/invitations/{token}");

    s.set("2026-05-17T11:59:59Z");
    assert_status(&s.api.get(&preview, Cred::Anon), 200);
    s.set("2026-05-17T12:00:00Z");
    assert_error(&s.api.get(&preview, Cred::Anon), 410, "invitation_expired");
    assert_error(
        &s.api.accept_new(&token, MEMBER_PASSWORD),
        410,
        "invitation_expired",
    );
    let listed = s
        .api
        .get(&ep_path(&ep.slug, "invitations"), s.owner())
        .json();
    assert_eq!(listed["data"][0]["status"], "expired", "{listed}");
    assert_eq!(listed["data"][0]["accept_url"], Value::Null, "{listed}");
    let accounts = s.api.get("/api/v1/manage/accounts", s.owner()).json();
    assert_eq!(accounts["data"].as_array().unwrap().len(), 1, "{accounts}");
    // An expired invitation does not block a new one.
    let again = s
        .api
        .invite(s.owner(), &ep.slug, "late@example.com", &["read"]);
    assert_eq!(again["status"], "pending");
    assert_status(&s.api.accept_new(&link_token(&again), MEMBER_PASSWORD), 200);
}

// ---------------------------------------------------------------------------
// Collaborators
// ---------------------------------------------------------------------------

#[test]
fn collaborator_cannot_use_owner_only_routes_and_strangers_get_404() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let ep = api.create_endpoint(owner, "shared");
    let other = api.create_endpoint(owner, "other");
    let m = api.join(owner, &ep.slug, "member@example.com", &["read"]);
    let stranger = api.join(owner, &other.slug, "stranger@example.com", &["read"]);
    let pending = api.invite(owner, &ep.slug, "pending@example.com", &["read"]);
    let invitation = format!("invitations/{}", pending["id"]);
    let collaborator = format!("collaborators/{}", m.id);
    let everything = json!({"permissions": ["create", "read", "replace", "delete"]});
    let invite_body = json!({"email": "z@example.com", "permissions": ["read"]});
    let rename = json!({"name": "x"});

    let owner_only: Vec<(&str, String, Option<&Value>)> = vec![
        ("PATCH", ep_path(&ep.slug, ""), Some(&rename)),
        ("POST", ep_path(&ep.slug, "deploy"), None),
        ("POST", ep_path(&ep.slug, "deploy-request/approve"), None),
        ("POST", ep_path(&ep.slug, "deploy-request/reject"), None),
        ("GET", ep_path(&ep.slug, "invitations"), None),
        ("POST", ep_path(&ep.slug, "invitations"), Some(&invite_body)),
        ("DELETE", ep_path(&ep.slug, &invitation), None),
        ("GET", ep_path(&ep.slug, "collaborators"), None),
        ("PATCH", ep_path(&ep.slug, &collaborator), Some(&everything)),
        ("DELETE", ep_path(&ep.slug, &collaborator), None),
        ("GET", ep_path(&ep.slug, "audit"), None),
        ("GET", ep_path(&ep.slug, "usage"), None),
    ];
    // What a collaborator may do: see the endpoint and its request log.
    let r = api.get(&ep_path(&ep.slug, ""), Cred::Bearer(&m.token(&api)));
    assert_status(&r, 200);
    assert_eq!(r.json()["role"], "collaborator");
    assert_status(&api.get(&ep_path(&ep.slug, "requests"), m.cred()), 200);
    for (method, path, body) in &owner_only {
        let r = api.call(method, path, m.cred(), *body);
        assert_eq!(
            (r.status, r.error_code().as_deref()),
            (403, Some("owner_only")),
            "{method} {path} as a collaborator: {}",
            r.describe()
        );
    }
    // Nothing changed: the collaborator still has only `read`, the invitation is pending,
    // the endpoint keeps its name and is not deployed.
    let collaborators = api.get(&ep_path(&ep.slug, "collaborators"), owner).json();
    assert_eq!(collaborators["data"][0]["permissions"], json!(["read"]));
    let invitations = api.get(&ep_path(&ep.slug, "invitations"), owner).json();
    assert_eq!(invitations["data"][0]["status"], "pending", "{invitations}");
    assert_eq!(invitations["data"].as_array().unwrap().len(), 2);
    let view = api.get(&ep_path(&ep.slug, ""), owner).json();
    assert_eq!(
        (&view["name"], &view["deployed"]),
        (&json!("shared"), &json!(false))
    );

    // An account with no relation to the endpoint learns nothing about it (with its token:
    // the cookie alone reads no endpoint).
    let stranger_token = stranger.token(&api);
    let mut stranger_routes = owner_only;
    stranger_routes.push(("GET", ep_path(&ep.slug, ""), None));
    stranger_routes.push(("GET", ep_path(&ep.slug, "requests"), None));
    stranger_routes.push(("POST", ep_path(&ep.slug, "deploy-request"), None));
    for (method, path, body) in &stranger_routes {
        let r = api.call(method, path, Cred::Bearer(&stranger_token), *body);
        assert_eq!(
            (r.status, r.error_code().as_deref()),
            (404, Some("endpoint_not_found")),
            "{method} {path} as an unrelated account: {}",
            r.describe()
        );
    }
    let theirs = api.get(ENDPOINTS, Cred::Bearer(&stranger_token)).json();
    let slugs: Vec<&Value> = theirs["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["slug"])
        .collect();
    assert_eq!(slugs, vec![&json!(other.slug)]);
    assert_error(
        &api.list(&ep.slug, &stranger.sandbox_key),
        404,
        "endpoint_not_found",
    );
}

/// Ownership is checked before the invitation itself: a collaborator inviting its own address
/// gets 403 `owner_only` (not a 409 about the address), an unrelated account 404.
#[test]
fn collaborator_inviting_its_own_address_is_refused_as_owner_only() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let ep = api.create_endpoint(owner, "shared");
    let m = api.join(owner, &ep.slug, "member@example.com", &["read"]);
    let r = api.call(
        "POST",
        &ep_path(&ep.slug, "invitations"),
        m.cred(),
        Some(&json!({"email": m.email, "permissions": ["read"]})),
    );
    assert_error(&r, 403, "owner_only");
}

#[test]
fn owner_lists_changes_and_removes_collaborators_with_immediate_effect() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let ep = api.create_endpoint(owner, "shared");
    let m = api.join(owner, &ep.slug, "member@example.com", &["read"]);
    let data_path = format!("/api/v1/data/{}", ep.slug);

    let listed = api.get(&ep_path(&ep.slug, "collaborators"), owner);
    assert_status(&listed, 200);
    let data = listed.json()["data"].as_array().unwrap().clone();
    assert_eq!(data.len(), 1, "{data:?}");
    let c = &data[0];
    assert_eq!(c["account_id"], m.id);
    assert_eq!(c["email"], "member@example.com");
    assert_eq!(c["suspended"], false);
    assert_eq!(c["permissions"], json!(["read"]));
    ts(&c["added_at"]);
    let key_id = c["sandbox_key_id"]
        .as_str()
        .expect("sandbox_key_id")
        .to_string();
    assert!(c["production_key_id"].is_string(), "{c}");
    assert!(!c.to_string().contains(&m.sandbox_key), "a key leaked: {c}");

    // The key id is the one the request log shows for the collaborator's calls.
    assert_status(&api.list(&ep.slug, &m.sandbox_key), 200);
    s.wait_request_log(&ep.slug, "sandbox", Duration::from_secs(10), |entries| {
        entries.iter().any(|e| e["key_id"] == key_id.as_str())
    });

    let body = json!({"data": 1});
    assert_error(
        &api.data("POST", &data_path, &m.sandbox_key, Some(&body)),
        403,
        "missing_permission_create",
    );
    let collaborator = ep_path(&ep.slug, &format!("collaborators/{}", m.id));
    let r = api.call(
        "PATCH",
        &collaborator,
        owner,
        Some(&json!({"permissions": ["read", "create"]})),
    );
    assert_status(&r, 200);
    assert_eq!(r.json()["permissions"], json!(["create", "read"]));
    assert_status(
        &api.data("POST", &data_path, &m.sandbox_key, Some(&body)),
        202,
    );
    let r = api.call(
        "PATCH",
        &collaborator,
        owner,
        Some(&json!({"permissions": []})),
    );
    assert_error(&r, 400, "invalid_request");
    let r = api.call(
        "PATCH",
        &ep_path(&ep.slug, "collaborators/999999"),
        owner,
        Some(&json!({"permissions": ["read"]})),
    );
    assert_error(&r, 404, "collaborator_not_found");

    let r = api.call("DELETE", &collaborator, owner, None);
    assert_status(&r, 200);
    assert_eq!(r.json(), json!({"account_id": m.id, "removed": true}));
    assert_error(&api.list(&ep.slug, &m.sandbox_key), 401, "invalid_api_key");
    assert_error(
        &api.get(&ep_path(&ep.slug, ""), Cred::Bearer(&m.token(&api))),
        404,
        "endpoint_not_found",
    );
    assert_eq!(
        api.get(ENDPOINTS, Cred::Bearer(&m.token(&api))).json()["data"],
        json!([])
    );
    let listed = api.get(&ep_path(&ep.slug, "collaborators"), owner).json();
    assert_eq!(listed["data"], json!([]));
    assert_error(
        &api.call("DELETE", &collaborator, owner, None),
        404,
        "collaborator_not_found",
    );

    let audit = api.get(&ep_path(&ep.slug, "audit"), owner).json();
    let entries = audit["data"].as_array().unwrap();
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "collaborator.removed",
            "collaborator.permissions_changed",
            "invitation.accepted",
            "invitation.sent",
            "endpoint.created",
        ]
    );
    assert_eq!(entries[0]["details"]["account_id"], m.id);
    assert_eq!(entries[1]["details"]["from"], json!(["read"]));
    assert_eq!(entries[1]["details"]["to"], json!(["create", "read"]));
    assert_eq!(entries[1]["actor"]["email"], OWNER_EMAIL);

    // The account itself remains, and can be invited again.
    assert_status(&api.get("/api/v1/auth/session", m.cred()), 200);
    let again = api.invite(owner, &ep.slug, "member@example.com", &["read"]);
    let r = api.call(
        "POST",
        &format!("/api/v1/invitations/{}/accept", link_token(&again)),
        m.cred(),
        None,
    );
    assert_status(&r, 200);
    let new_key = r.json()["endpoint"]["sandbox_key"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(
        new_key, m.sandbox_key,
        "a removed key is never handed out again"
    );
    assert_status(&api.list(&ep.slug, &new_key), 200);
    assert_error(&api.list(&ep.slug, &m.sandbox_key), 401, "invalid_api_key");
}

// ---------------------------------------------------------------------------
// Deploy workflow, notifications, audit
// ---------------------------------------------------------------------------

#[test]
fn deploy_request_approved_by_the_owner_deploys_and_notifies_collaborators() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let ep = api.create_endpoint(owner, "shared");
    let m = api.join(owner, &ep.slug, "member@example.com", &["read"]);
    let request = ep_path(&ep.slug, "deploy-request");

    let r = api.call(
        "POST",
        &request,
        m.cred(),
        Some(&json!({"note": "ready for prod"})),
    );
    assert_status(&r, 201);
    let v = r.json();
    assert_eq!(v["deployed"], false);
    assert_eq!(v["deploy_request"]["requested_by"], "member@example.com");
    assert_eq!(v["deploy_request"]["note"], "ready for prod");
    ts(&v["deploy_request"]["requested_at"]);
    assert_eq!(v["production_key"], Value::Null);

    assert_error(&api.call("POST", &request, m.cred(), None), 409, "conflict");
    assert_error(&api.call("POST", &request, owner, None), 409, "conflict");
    let owner_view = api.get(&ep_path(&ep.slug, ""), owner).json();
    assert_eq!(owner_view["deploy_request"], v["deploy_request"]);
    let unread = api.notifications(owner, "?unread=true");
    assert_eq!(unread[0]["kind"], "deploy_requested", "{unread:?}");
    assert_eq!(unread[0]["endpoint_slug"], ep.slug.as_str());
    assert!(
        unread[0]["message"]
            .as_str()
            .unwrap()
            .contains("member@example.com"),
        "{unread:?}"
    );

    let r = api.call(
        "POST",
        &ep_path(&ep.slug, "deploy-request/approve"),
        owner,
        None,
    );
    assert_status(&r, 200);
    let v = r.json();
    assert_eq!(v["deployed"], true);
    assert_eq!(v["environment"], "production");
    assert_eq!(v["deploy_request"], Value::Null);
    ts(&v["deployed_at"]);

    let theirs = api.notifications(m.cred(), "?unread=true");
    assert_eq!(theirs.len(), 1, "{theirs:?}");
    assert_eq!(theirs[0]["kind"], "endpoint_deployed");
    assert_eq!(theirs[0]["endpoint_slug"], ep.slug.as_str());
    let view = api
        .get(&ep_path(&ep.slug, ""), Cred::Bearer(&m.token(&api)))
        .json();
    let live = view["production_key"]
        .as_str()
        .expect("production key after deploy");
    assert!(live.starts_with("tm_live_"), "{live}");
    assert_ne!(live, ep.production_key);
    assert_status(&api.list(&ep.slug, live), 200);
    assert_error(
        &api.data(
            "POST",
            &format!("/api/v1/data/{}", ep.slug),
            live,
            Some(&json!({})),
        ),
        403,
        "missing_permission_create",
    );

    assert_error(&api.call("POST", &request, m.cred(), None), 409, "conflict");
    let r = api.call(
        "POST",
        &ep_path(&ep.slug, "deploy-request/approve"),
        owner,
        None,
    );
    assert_error(&r, 404, "deploy_request_not_found");
    // Deploying again is harmless and records nothing.
    let r = api.call("POST", &ep_path(&ep.slug, "deploy"), owner, None);
    assert_status(&r, 200);
    assert_eq!(r.json()["deployed_at"], v["deployed_at"]);

    let audit = api.get(&ep_path(&ep.slug, "audit"), owner).json();
    let entries = audit["data"].as_array().unwrap();
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "endpoint.deployed",
            "deploy.requested",
            "invitation.accepted",
            "invitation.sent",
            "endpoint.created",
        ]
    );
    assert_eq!(entries[0]["actor"]["email"], OWNER_EMAIL);
    assert_eq!(entries[0]["details"]["approved_request_of"], m.id);
    assert_eq!(entries[1]["actor"]["email"], "member@example.com");
    assert_eq!(entries[1]["details"]["note"], "ready for prod");
}

#[test]
fn deploy_request_can_be_rejected_then_requested_again_and_deployed_directly() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let ep = api.create_endpoint(owner, "shared");
    let m = api.join(owner, &ep.slug, "member@example.com", &["read"]);
    let request = ep_path(&ep.slug, "deploy-request");
    let reject = ep_path(&ep.slug, "deploy-request/reject");

    let r = api.call("POST", &request, m.cred(), None);
    assert_status(&r, 201);
    assert_eq!(r.json()["deploy_request"]["note"], Value::Null);
    let r = api.call("POST", &reject, owner, Some(&json!({"note": "not yet"})));
    assert_status(&r, 200);
    assert_eq!(r.json()["deploy_request"], Value::Null);
    assert_eq!(r.json()["deployed"], false);
    let theirs = api.notifications(m.cred(), "");
    assert_eq!(theirs[0]["kind"], "deploy_request_rejected", "{theirs:?}");
    assert!(
        theirs[0]["message"].as_str().unwrap().contains("not yet"),
        "{theirs:?}"
    );
    assert_error(
        &api.call("POST", &reject, owner, None),
        404,
        "deploy_request_not_found",
    );
    assert_error(
        &api.call(
            "POST",
            &ep_path(&ep.slug, "deploy-request/approve"),
            owner,
            None,
        ),
        404,
        "deploy_request_not_found",
    );
    assert_eq!(
        api.get(&ep_path(&ep.slug, ""), Cred::Bearer(&m.token(&api)))
            .json()["production_key"],
        Value::Null
    );

    assert_status(&api.call("POST", &request, m.cred(), None), 201);
    let r = api.call("POST", &ep_path(&ep.slug, "deploy"), owner, None);
    assert_status(&r, 200);
    assert_eq!(r.json()["deployed"], true);
    assert_eq!(
        r.json()["deploy_request"],
        Value::Null,
        "deploying settles the pending request"
    );
    let audit = api.get(&ep_path(&ep.slug, "audit"), owner).json();
    let entries = audit["data"].as_array().unwrap();
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions[..4],
        [
            "endpoint.deployed",
            "deploy.requested",
            "deploy.rejected",
            "deploy.requested",
        ]
    );
    assert_eq!(entries[0]["details"]["approved_request_of"], m.id);
    assert_eq!(entries[2]["details"]["note"], "not yet");
    assert_eq!(entries[2]["details"]["requested_by"], m.id);
    let kinds: Vec<Value> = api
        .notifications(m.cred(), "")
        .iter()
        .map(|n| n["kind"].clone())
        .collect();
    assert_eq!(
        kinds,
        [json!("endpoint_deployed"), json!("deploy_request_rejected")]
    );
}

#[test]
fn notifications_can_be_filtered_to_unread_and_marked_read_by_their_account_only() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let ep = api.create_endpoint(owner, "shared");
    let m = api.join(owner, &ep.slug, "member@example.com", &["read"]);

    let all = api.notifications(owner, "");
    assert_eq!(all.len(), 1, "{all:?}");
    let n = &all[0];
    assert_eq!(n["kind"], "invitation_accepted");
    assert_eq!(n["read"], false);
    assert_eq!(n["read_at"], Value::Null);
    ts(&n["created_at"]);
    assert_eq!(api.notifications(owner, "?unread=true"), all);
    let id = n["id"].as_u64().unwrap();
    let read_path = format!("/api/v1/manage/notifications/{id}/read");

    // Someone else's notification does not exist for them.
    assert_error(
        &api.call("POST", &read_path, m.cred(), None),
        404,
        "notification_not_found",
    );
    let r = api.call("POST", &read_path, owner, None);
    assert_status(&r, 200);
    let read = r.json();
    assert_eq!(read["id"], id);
    assert_eq!(read["read"], true);
    ts(&read["read_at"]);
    assert_eq!(
        api.notifications(owner, "?unread=true"),
        Vec::<Value>::new()
    );
    assert_eq!(
        api.notifications(owner, "?unread=false"),
        vec![read.clone()]
    );
    // Marking again changes nothing.
    let again = api.call("POST", &read_path, owner, None);
    assert_eq!(again.json(), read);

    assert_error(
        &api.call("POST", "/api/v1/manage/notifications/abc/read", owner, None),
        404,
        "notification_not_found",
    );
    assert_error(
        &api.get("/api/v1/manage/notifications?unread=maybe", owner),
        400,
        "invalid_parameter",
    );
}

#[test]
fn audit_lists_endpoint_changes_newest_first_and_pages_with_before() {
    let s = TestServer::start();
    let api = Api::of(&s);
    let owner = Cred::Bearer(&s.owner_token);
    let ep = api.create_endpoint(owner, "audited");
    s.patch_endpoint(&ep.slug, &json!({"name": "renamed"}));
    s.patch_endpoint(&ep.slug, &json!({"active": false}));
    s.patch_endpoint(&ep.slug, &json!({"active": true}));
    s.patch_endpoint(&ep.slug, &json!({"monthly_quota": 10}));

    let audit = api.get(&ep_path(&ep.slug, "audit"), owner).json();
    let entries = audit["data"].as_array().unwrap().clone();
    let actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "endpoint.updated",
            "endpoint.reactivated",
            "endpoint.deactivated",
            "endpoint.updated",
            "endpoint.created",
        ]
    );
    assert_eq!(entries[0]["details"], json!({"monthly_quota": 10}));
    assert_eq!(entries[3]["details"], json!({"name": "renamed"}));
    for e in &entries {
        assert_eq!(e["actor"]["email"], OWNER_EMAIL, "{e}");
        ts(&e["time"]);
    }

    let page = api
        .get(&format!("{}?limit=2", ep_path(&ep.slug, "audit")), owner)
        .json();
    assert_eq!(page["data"], json!(entries[..2]));
    let before = entries[1]["id"].as_u64().unwrap();
    let page = api
        .get(
            &format!("{}?limit=2&before={before}", ep_path(&ep.slug, "audit")),
            owner,
        )
        .json();
    assert_eq!(page["data"], json!(entries[2..4]));
}

// ---------------------------------------------------------------------------
// Monthly usage quota
// ---------------------------------------------------------------------------

#[test]
fn monthly_quota_refuses_calls_until_the_next_utc_month() {
    let s = InProc::start("[usage]\nmonthly_quota = 3\n", "2026-11-30T23:59:00Z");
    let ep = s.api.create_endpoint(s.owner(), "metered");
    let path = format!("/api/v1/data/{}", ep.slug);

    // Three calls of any kind are allowed this month.
    let r = s
        .api
        .data("POST", &path, &ep.sandbox_key, Some(&json!({"n": 1})));
    assert_status(&r, 202);
    let id = r.json()["id"].as_str().unwrap().to_string();
    assert_status(
        &s.api
            .data("GET", &format!("{path}/{id}"), &ep.sandbox_key, None),
        200,
    );
    assert_status(&s.api.list(&ep.slug, &ep.sandbox_key), 200);

    // The fourth is refused until 2026-12-01T00:00:00Z.
    let r = s
        .api
        .data("POST", &path, &ep.sandbox_key, Some(&json!({"n": 2})));
    assert_error(&r, 429, "usage_limit_exceeded");
    assert_eq!(retry_after(&r), s.secs_until("2026-12-01T00:00:00Z"));
    assert_eq!(retry_after(&r), 60);
    let r = s.api.list(&ep.slug, &ep.sandbox_key);
    assert_error(&r, 429, "usage_limit_exceeded");

    // Production is counted on its own.
    assert_status(
        &s.api
            .call("POST", &ep_path(&ep.slug, "deploy"), s.owner(), None),
        200,
    );
    for _ in 0..3 {
        assert_status(&s.api.list(&ep.slug, &ep.production_key), 200);
    }
    let r = s.api.list(&ep.slug, &ep.production_key);
    assert_error(&r, 429, "usage_limit_exceeded");
    assert_eq!(retry_after(&r), 60);

    s.set("2026-11-30T23:59:59Z");
    let r = s.api.list(&ep.slug, &ep.sandbox_key);
    assert_error(&r, 429, "usage_limit_exceeded");
    assert_eq!(retry_after(&r), 1);

    // A new month: allowed again, and the refused POST created nothing.
    s.set("2026-12-01T00:00:00Z");
    let r = s.api.list(&ep.slug, &ep.sandbox_key);
    assert_status(&r, 200);
    let listed = r.json();
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|rec| rec["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str()], "only the first record exists");
    assert_status(&s.api.list(&ep.slug, &ep.production_key), 200);

    assert_eq!(
        s.api.usage(s.owner(), &ep.slug),
        json!({
            "monthly_quota": 3,
            "months": [
                {"month": "2026-12", "sandbox": 1, "production": 1},
                {"month": "2026-11", "sandbox": 3, "production": 3},
            ],
        })
    );
}

/// Retry-After is the time to the next month rounded *up* to whole seconds, so a client that
/// waits exactly Retry-After seconds arrives after the reset.
#[test]
fn quota_retry_after_is_enough_to_wait_when_now_is_between_whole_seconds() {
    let s = InProc::start("[usage]\nmonthly_quota = 1\n", "2026-11-30T23:59:00.250Z");
    let ep = s.api.create_endpoint(s.owner(), "metered");
    assert_status(&s.api.list(&ep.slug, &ep.sandbox_key), 200);
    let r = s.api.list(&ep.slug, &ep.sandbox_key);
    assert_error(&r, 429, "usage_limit_exceeded");
    assert_eq!(retry_after(&r), s.secs_until("2026-12-01T00:00:00Z"));
    s.advance(Duration::from_secs(retry_after(&r)));
    assert_status(&s.api.list(&ep.slug, &ep.sandbox_key), 200);
}

#[test]
fn per_endpoint_quota_overrides_the_server_default() {
    let s = InProc::start("[usage]\nmonthly_quota = 3\n", "2026-06-15T12:00:00Z");
    let a = s.api.create_endpoint(s.owner(), "a");
    let b = s.api.create_endpoint(s.owner(), "b");
    let patch = |body: Value| {
        s.api
            .call("PATCH", &ep_path(&a.slug, ""), s.owner(), Some(&body))
    };

    let r = patch(json!({"monthly_quota": 1}));
    assert_status(&r, 200);
    assert_eq!(r.json()["monthly_quota"], 1);
    assert_eq!(s.api.usage(s.owner(), &a.slug)["monthly_quota"], 1);
    assert_status(&s.api.list(&a.slug, &a.sandbox_key), 200);
    assert_error(
        &s.api.list(&a.slug, &a.sandbox_key),
        429,
        "usage_limit_exceeded",
    );
    // The other endpoint keeps the server default.
    for _ in 0..3 {
        assert_status(&s.api.list(&b.slug, &b.sandbox_key), 200);
    }
    assert_error(
        &s.api.list(&b.slug, &b.sandbox_key),
        429,
        "usage_limit_exceeded",
    );

    // Raising it takes effect at once; the month's count carries on.
    assert_status(&patch(json!({"monthly_quota": 5})), 200);
    for _ in 0..4 {
        assert_status(&s.api.list(&a.slug, &a.sandbox_key), 200);
    }
    assert_error(
        &s.api.list(&a.slug, &a.sandbox_key),
        429,
        "usage_limit_exceeded",
    );
    // null returns to the server default (3), which 5 calls already exceed.
    let r = patch(json!({"monthly_quota": null}));
    assert_status(&r, 200);
    assert_eq!(r.json()["monthly_quota"], Value::Null);
    assert_eq!(
        s.api.usage(s.owner(), &a.slug),
        json!({
            "monthly_quota": 3,
            "months": [{"month": "2026-06", "sandbox": 5, "production": 0}],
        })
    );
    assert_error(
        &s.api.list(&a.slug, &a.sandbox_key),
        429,
        "usage_limit_exceeded",
    );
    assert_error(&patch(json!({"monthly_quota": 0})), 400, "invalid_request");
}

#[test]
fn per_endpoint_quota_applies_without_a_server_default() {
    let s = InProc::start("", "2026-06-15T12:00:00Z");
    let ep = s.api.create_endpoint(s.owner(), "metered");
    for _ in 0..5 {
        assert_status(&s.api.list(&ep.slug, &ep.sandbox_key), 200);
    }
    assert_eq!(
        s.api.usage(s.owner(), &ep.slug),
        json!({
            "monthly_quota": null,
            "months": [{"month": "2026-06", "sandbox": 5, "production": 0}],
        })
    );
    let r = s.api.call(
        "PATCH",
        &ep_path(&ep.slug, ""),
        s.owner(),
        Some(&json!({"monthly_quota": 6})),
    );
    assert_status(&r, 200);
    assert_status(&s.api.list(&ep.slug, &ep.sandbox_key), 200);
    assert_error(
        &s.api.list(&ep.slug, &ep.sandbox_key),
        429,
        "usage_limit_exceeded",
    );
}

#[test]
fn usage_counts_survive_a_graceful_restart() {
    let mut s = InProc::start("[usage]\nmonthly_quota = 3\n", "2026-06-15T12:00:00Z");
    let ep = s.api.create_endpoint(s.owner(), "metered");
    let path = format!("/api/v1/data/{}", ep.slug);
    assert_status(
        &s.api
            .data("POST", &path, &ep.sandbox_key, Some(&json!({"n": 1}))),
        202,
    );
    assert_status(&s.api.list(&ep.slug, &ep.sandbox_key), 200);

    s.restart();
    assert_eq!(
        s.api.usage(s.owner(), &ep.slug)["months"],
        json!([{"month": "2026-06", "sandbox": 2, "production": 0}]),
    );
    assert_status(&s.api.list(&ep.slug, &ep.sandbox_key), 200);
    assert_error(
        &s.api.list(&ep.slug, &ep.sandbox_key),
        429,
        "usage_limit_exceeded",
    );

    s.restart();
    assert_error(
        &s.api.list(&ep.slug, &ep.sandbox_key),
        429,
        "usage_limit_exceeded",
    );
    assert_eq!(
        s.api.usage(s.owner(), &ep.slug)["months"],
        json!([{"month": "2026-06", "sandbox": 3, "production": 0}]),
    );
}
