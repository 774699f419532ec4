//! The session cookie and the origin check shared by the API and the dashboard: setting the
//! cookie, opening a session, and whether a browser request comes from this server's origin.

use http::{HeaderMap, HeaderValue, header};
use warp::reply::Response;

use crate::domain::error::Result;
use crate::domain::sessions::{self, COOKIE};
use crate::http::app::App;
use crate::store::AccountRow;

/// The session cookie: HttpOnly (no script can read it), SameSite=Strict (no other site can
/// make the browser send it, which is the CSRF defence), Secure when served over https.
pub fn set_cookie(app: &App, response: &mut Response, value: &str, max_age: u64) {
    let secure = if app.config.secure_cookies() {
        "; Secure"
    } else {
        ""
    };
    let text =
        format!("{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}");
    if let Ok(v) = HeaderValue::from_str(&text) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
}

/// Opens a session (with the configured lifetime) for an account that just proved who it is.
pub fn open_session(app: &App, account: AccountRow) -> Result<sessions::Opened> {
    sessions::open(
        &app.handles,
        app.handles.now(),
        app.config.accounts.session_ttl,
        account,
    )
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

#[cfg(test)]
mod tests {
    use super::*;

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
