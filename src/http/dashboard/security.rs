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
use http::{HeaderMap, HeaderValue};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use warp::reply::Response;

use crate::core::ids::random_base32;
use crate::http::reply::cookie;

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
}
