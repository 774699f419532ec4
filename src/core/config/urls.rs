//! Configured URLs taken apart, and shown with their credentials masked.

/// A URL's text in the parts [`masked_url`] and `OtlpEndpoint::collector` take apart.
pub(super) struct UrlParts<'a> {
    /// `http://`; empty when the text has no `://`.
    pub(super) scheme: &'a str,
    /// What precedes the last `@` of the authority.
    pub(super) userinfo: Option<&'a str>,
    /// Host and port.
    pub(super) host: &'a str,
    /// Path, query and fragment.
    pub(super) tail: &'a str,
}

impl UrlParts<'_> {
    pub(super) fn of(url: &str) -> UrlParts<'_> {
        let (scheme, rest) = match url.find("://") {
            Some(at) => url.split_at(at + 3),
            None => ("", url),
        };
        let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((userinfo, host)) => (Some(userinfo), host),
            None => (None, authority),
        };
        UrlParts {
            scheme,
            userinfo,
            host,
            tail,
        }
    }
}

/// A configured URL as printouts and messages show it: the password of a `user:password@`
/// masked as `webhooks.proxy`'s is (`user:***@`; a lone `user@`, often a token, as `***@`),
/// and the query as `?***` (it may carry a token). The masked URL is still a valid one.
pub fn masked_url(url: &str) -> String {
    let parts = UrlParts::of(url);
    let userinfo = match parts.userinfo.map(|u| u.split_once(':')) {
        Some(Some((user, _))) => format!("{user}:***@"),
        Some(None) => "***@".to_string(),
        None => String::new(),
    };
    let tail = match parts.tail.split_once('?') {
        Some((path, _)) => format!("{path}?***"),
        None => parts.tail.to_string(),
    };
    format!("{}{userinfo}{}{tail}", parts.scheme, parts.host)
}

/// `%XX` escapes decoded (invalid ones kept as written), for the userinfo of a URL or a
/// fragment (a JSON Pointer in a schema's `$ref`).
pub fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_urls_are_masked_in_their_userinfo_password_and_query() {
        for (url, masked) in [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318"),
            (
                "https://tenant:s3cret@otlp.example:4318/v1/traces?key=t0ken&x=1#f",
                "https://tenant:***@otlp.example:4318/v1/traces?***",
            ),
            ("https://t0ken@otlp.example/", "https://***@otlp.example/"),
            ("https://otlp.example?key=t0ken", "https://otlp.example?***"),
            (
                "https://a:b@c@otlp.example/p@q",
                "https://a:***@otlp.example/p@q",
            ),
            ("u:s3cret@host/x", "u:***@host/x"),
        ] {
            assert_eq!(masked_url(url), masked, "{url}");
        }
    }
}
