//! The dashboard's browser-facing defences: the response headers every page carries (a
//! strict Content-Security-Policy among them), and the CSRF check of every form.
//!
//! A form's CSRF token is an HMAC-SHA256 of a fixed label keyed with a secret only the
//! browser's HttpOnly cookie holds: the session token once logged in, otherwise a random
//! visitor cookie (login, first-run setup, accepting an invitation). A page from another
//! site can neither read the cookie nor compute the token; the SameSite=Strict cookies and
//! the `Origin` check are further layers. Tokens are compared in constant time.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderValue, header};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use warp::reply::Response;

use crate::core::ids::random_base32;
use crate::http::api::reply::cookie;

/// The cookie holding a logged-out visitor's CSRF secret.
pub const VISITOR_COOKIE: &str = "intake_csrf";
/// Name of the hidden form field carrying the token.
pub const FIELD: &str = "csrf";
const LABEL: &[u8] = b"intake dashboard csrf v1";

/// No inline script or style, nothing from another origin, no framing, forms post only here.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
    style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; \
    frame-ancestors 'none'; base-uri 'none'; object-src 'none'";

/// Sets the security headers every dashboard response carries.
pub fn harden(response: &mut Response) {
    let headers = response.headers_mut();
    for (name, value) in [
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("x-content-type-options", "nosniff"),
        // Setup and invitation links carry their token in the URL: never pass it to another
        // site. (`no-referrer` would also make browsers send `Origin: null` on our own
        // form posts, defeating the origin check.)
        ("referrer-policy", "same-origin"),
        ("x-frame-options", "DENY"),
        ("cross-origin-opener-policy", "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
}

/// The CSRF token of forms shown to the holder of `secret`.
pub fn token(secret: &str) -> String {
    // HMAC takes keys of any length; this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
    mac.update(LABEL);
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

/// Whether `submitted` is the token for `secret`, compared in constant time.
pub fn verify(secret: &str, submitted: &str) -> bool {
    let expected = token(secret);
    expected.as_bytes().ct_eq(submitted.as_bytes()).into()
}

/// A form post must not come from another site: browsers send `Origin` (and
/// `Sec-Fetch-Site`) on every POST; when present they must name this server. That is the
/// origin of `public_url` when it is configured (behind a reverse proxy, `Host` names the
/// upstream address the proxy connects to, never what the browser sees), else the `Host`
/// the request was sent to.
pub fn same_origin(headers: &HeaderMap, public_url: Option<&str>) -> bool {
    if headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|site| site == "cross-site" || site == "same-site")
    {
        return false;
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    if let Some(public_url) = public_url {
        return origin_of(origin).is_some_and(|o| Some(o) == origin_of(public_url));
    }
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let origin_host = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    origin_host.is_some_and(|h| h.eq_ignore_ascii_case(host))
}

/// The origin of an http(s) URL as (scheme, host, port), equal for two URLs exactly when
/// their origins are: lower case, the scheme's default port written out, no path.
fn origin_of(url: &str) -> Option<(String, String, u16)> {
    let uri: http::Uri = url.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let host = uri.host()?.to_ascii_lowercase();
    Some((scheme, host, uri.port_u16().unwrap_or(default_port)))
}

/// The visitor's CSRF secret: from its cookie, or a new one to set with [`visitor_cookie`].
pub fn visitor_secret(headers: &HeaderMap) -> (String, bool) {
    match cookie(headers, VISITOR_COOKIE) {
        Some(secret) if secret.len() >= 26 => (secret.to_string(), false),
        _ => (random_base32(32), true),
    }
}

/// The `Set-Cookie` value of a new visitor secret: lives for the browser session only.
pub fn visitor_cookie(secret: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{VISITOR_COOKIE}={secret}; Path=/; HttpOnly; SameSite=Strict{secure}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_verify_only_for_their_secret() {
        let t = token("ise_secret_one");
        assert!(verify("ise_secret_one", &t));
        assert!(!verify("ise_secret_two", &t));
        assert!(!verify("ise_secret_one", ""));
        assert!(!verify("ise_secret_one", &t[1..]));
    }

    #[test]
    fn cross_site_posts_are_refused() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        assert!(same_origin(&h, None));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert!(same_origin(&h, None));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(!same_origin(&h, None));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        h.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert!(!same_origin(&h, None));
    }

    #[test]
    fn with_a_public_url_the_origin_must_be_its_origin_whatever_the_host() {
        let public = Some("https://Intake.Example.com/base/");
        let mut h = HeaderMap::new();
        // A reverse proxy rewrote `Host` to the upstream address.
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        for (origin, same) in [
            ("https://intake.example.com", true),
            ("https://INTAKE.example.com:443", true),
            ("http://intake.example.com", false),
            ("https://intake.example.com:8443", false),
            ("https://intake.example.com.evil.example", false),
            ("http://127.0.0.1:8080", false),
            ("null", false),
        ] {
            h.insert(header::ORIGIN, HeaderValue::from_static(origin));
            assert_eq!(same_origin(&h, public), same, "{origin}");
        }
        let h = HeaderMap::new();
        assert!(
            same_origin(&h, public),
            "no Origin: not a browser's cross-site post"
        );
        let mut h = HeaderMap::new();
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://[::1]:8080"),
        );
        assert!(same_origin(&h, Some("http://[::1]:8080")));
        assert!(!same_origin(&h, Some("http://[::1]:8081")));
    }
}
