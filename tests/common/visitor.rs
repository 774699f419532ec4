//! A cookie-keeping client of the dashboard's HTML forms (no browser): tests/dashboard.rs and
//! tests/security.rs log in and post forms with it.

use super::Resp;

/// A cookie-keeping form client, as a browser would be.
pub struct Visitor<'s> {
    pub base: String,
    pub agent: &'s ureq::Agent,
    pub cookies: Vec<(String, String)>,
    /// The `Origin` sent with every post, as browsers do; none by default.
    pub origin: Option<String>,
}

impl<'s> Visitor<'s> {
    pub fn new(base: String, agent: &'s ureq::Agent) -> Visitor<'s> {
        Visitor {
            base,
            agent,
            cookies: Vec::new(),
            origin: None,
        }
    }

    pub fn keep_cookies(&mut self, resp: &Resp) {
        for (k, v) in &resp.headers {
            if k.eq_ignore_ascii_case("set-cookie") {
                let pair = v.split(';').next().unwrap();
                let (name, value) = pair.split_once('=').unwrap();
                self.cookies.retain(|(n, _)| n != name);
                if !value.is_empty() {
                    self.cookies.push((name.to_string(), value.to_string()));
                }
            }
        }
    }

    pub fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    pub fn get(&mut self, path: &str) -> Resp {
        let cookie = self.cookie_header();
        let resp = super::try_send(
            self.agent,
            &format!("{}{path}", self.base),
            "GET",
            &[("Cookie", &cookie)],
            None,
        )
        .unwrap();
        self.keep_cookies(&resp);
        resp
    }

    pub fn post(&mut self, path: &str, fields: &[(&str, &str)], extra: &[(&str, &str)]) -> Resp {
        let body: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let cookie = self.cookie_header();
        let mut headers = vec![
            ("Cookie", cookie.as_str()),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ];
        if let Some(origin) = &self.origin {
            headers.push(("Origin", origin));
        }
        headers.extend_from_slice(extra);
        let resp = super::try_send(
            self.agent,
            &format!("{}{path}", self.base),
            "POST",
            &headers,
            Some(body.as_bytes()),
        )
        .unwrap();
        self.keep_cookies(&resp);
        resp
    }
}

/// The value of the first hidden `csrf` field of a page.
pub fn csrf_of(page: &Resp) -> String {
    let html = page.text();
    let at = html
        .find(r#"name="csrf" value=""#)
        .unwrap_or_else(|| panic!("no csrf field in {html}"));
    let rest = &html[at + r#"name="csrf" value=""#.len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

/// Logs in through the dashboard's form; returns the CSRF token of the logged-in pages.
pub fn login(v: &mut Visitor, email: &str, password: &str) -> String {
    let page = v.get("/dashboard/login");
    assert_eq!(page.status, 200, "{}", page.describe());
    let token = csrf_of(&page);
    let r = v.post(
        "/dashboard/login",
        &[
            ("csrf", &token),
            ("email", email),
            ("password", password),
            ("next", "/dashboard/endpoints"),
        ],
        &[],
    );
    assert_eq!(r.status, 303, "{}", r.describe());
    assert_eq!(r.header("location"), Some("/dashboard/endpoints"));
    let page = v.get("/dashboard/endpoints");
    assert_eq!(page.status, 200, "{}", page.describe());
    csrf_of(&page)
}
