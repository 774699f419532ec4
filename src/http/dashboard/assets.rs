//! The dashboard's stylesheet, scripts and icon, compiled into the binary and served under
//! `/dashboard/static/{hash}/{name}`: the hash of the content is in the URL, so a response
//! may be cached for a year and a new build is fetched at once. The `ETag` (the same hash)
//! answers revalidations with 304.

use std::sync::LazyLock;

use http::{HeaderMap, HeaderValue, StatusCode, header};
use sha2::{Digest, Sha256};
use warp::reply::Response;

struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
    hash: String,
}

fn asset(name: &'static str, content_type: &'static str, body: &'static str) -> Asset {
    let digest = Sha256::digest(body.as_bytes());
    let hash = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    Asset {
        name,
        content_type,
        body,
        hash,
    }
}

static ASSETS: LazyLock<[Asset; 7]> = LazyLock::new(|| {
    [
        asset(
            "app.css",
            "text/css; charset=utf-8",
            include_str!("static/app.css"),
        ),
        asset(
            "app.js",
            "text/javascript; charset=utf-8",
            include_str!("static/app.js"),
        ),
        asset(
            "theme.js",
            "text/javascript; charset=utf-8",
            include_str!("static/theme.js"),
        ),
        asset(
            "highlight.js",
            "text/javascript; charset=utf-8",
            include_str!("static/highlight.js"),
        ),
        asset(
            "testpage.js",
            "text/javascript; charset=utf-8",
            include_str!("static/testpage.js"),
        ),
        asset(
            "records.js",
            "text/javascript; charset=utf-8",
            include_str!("static/records.js"),
        ),
        asset(
            "favicon.svg",
            "image/svg+xml",
            include_str!("static/favicon.svg"),
        ),
    ]
});

static CSS_URL: LazyLock<String> = LazyLock::new(|| url("app.css"));
static JS_URL: LazyLock<String> = LazyLock::new(|| url("app.js"));
static TESTPAGE_JS_URL: LazyLock<String> = LazyLock::new(|| url("testpage.js"));
static RECORDS_JS_URL: LazyLock<String> = LazyLock::new(|| url("records.js"));
static THEME_JS_URL: LazyLock<String> = LazyLock::new(|| url("theme.js"));
static HIGHLIGHT_JS_URL: LazyLock<String> = LazyLock::new(|| url("highlight.js"));
static FAVICON_URL: LazyLock<String> = LazyLock::new(|| url("favicon.svg"));

fn url(name: &str) -> String {
    ASSETS
        .iter()
        .find(|a| a.name == name)
        .map(|a| format!("/dashboard/static/{}/{}", a.hash, a.name))
        .unwrap_or_default()
}

/// The versioned URL of the stylesheet.
pub fn css_url() -> &'static str {
    &CSS_URL
}

/// The versioned URL of the script every page loads.
pub fn js_url() -> &'static str {
    &JS_URL
}

/// The versioned URL of the theme script, which runs before the page paints.
pub fn theme_js_url() -> &'static str {
    &THEME_JS_URL
}

/// The versioned URL of the syntax highlighter (pages with code load it).
pub fn highlight_js_url() -> &'static str {
    &HIGHLIGHT_JS_URL
}

/// The versioned URL of the icon every page links (`<link rel="icon">`).
pub fn favicon_url() -> &'static str {
    &FAVICON_URL
}

/// The versioned URL of the API test page's script (only that page loads it).
pub fn testpage_js_url() -> &'static str {
    &TESTPAGE_JS_URL
}

/// The versioned URL of the record browser's script: the column chooser and the record
/// editor's checks (only those pages load it).
pub fn records_js_url() -> &'static str {
    &RECORDS_JS_URL
}

/// Serves asset `name` requested under `hash`; `None` when no asset has that name. A stale
/// hash (a page from an older build) still gets the current file, but not cached for long.
pub fn serve(hash: &str, name: &str, request: &HeaderMap) -> Option<Response> {
    let asset = ASSETS.iter().find(|a| a.name == name)?;
    let etag = format!("\"{}\"", asset.hash);
    let cache = if hash == asset.hash {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    let mut response = if fresh {
        let mut r = Response::new(Vec::new().into());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let mut r = Response::new(asset.body.into());
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        );
        r
    };
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, v);
    }
    Some(response)
}
