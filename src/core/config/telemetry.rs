//! `[telemetry]`: the OTLP/HTTP collector spans are exported to, its credentials kept apart.

use serde::{Deserialize, Serialize, Serializer};

use super::urls::{UrlParts, masked_url, percent_decode};
use super::values::Secret;

/// `[telemetry]`: traces exported over OTLP/HTTP (see `core::telemetry`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP endpoint, such as `http://127.0.0.1:4318` (spans go to its
    /// `/v1/traces`, or to the URL as given when it has a path); absent, no traces.
    pub otlp_endpoint: Option<OtlpEndpoint>,
    /// The `service.name` of every span.
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            service_name: "intake".into(),
        }
    }
}

impl TelemetryConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if let Some(endpoint) = &self.otlp_endpoint {
            endpoint.collector()?;
        }
        if self.service_name.trim().is_empty() {
            return Err("telemetry.service_name must not be empty".into());
        }
        Ok(())
    }
}

/// `[telemetry] otlp_endpoint` as written. A `user:password@` in it is the collector's
/// credentials, sent as HTTP Basic auth (see [`Collector`]); every printout and message shows
/// it through [`masked_url`], and its `Debug` too.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct OtlpEndpoint(String);

/// Where the exporter sends spans, from [`OtlpEndpoint::collector`].
#[derive(Debug)]
pub struct Collector {
    /// The endpoint without its userinfo (query and path as written).
    pub url: String,
    /// `user` and `password` of `user:password@` (a lone `user@` has an empty password),
    /// percent-decoded.
    pub credentials: Option<(String, Secret)>,
}

impl OtlpEndpoint {
    /// The collector's URL and credentials; an error naming the key (the URL masked) unless
    /// it is an `http://` or `https://` URL with a host.
    pub fn collector(&self) -> Result<Collector, String> {
        let invalid = || {
            format!(
                "telemetry.otlp_endpoint {:?} is not an http:// or https:// URL with a host",
                masked_url(&self.0)
            )
        };
        let uri = self.0.parse::<http::Uri>().map_err(|_| invalid())?;
        if !matches!(uri.scheme_str(), Some("http" | "https"))
            || uri.host().is_none_or(str::is_empty)
        {
            return Err(invalid());
        }
        let parts = UrlParts::of(&self.0);
        Ok(Collector {
            url: format!("{}{}{}", parts.scheme, parts.host, parts.tail),
            credentials: parts.userinfo.map(|userinfo| {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                (percent_decode(user), Secret::new(percent_decode(password)))
            }),
        })
    }
}

/// Written back masked: `intake check` prints it.
impl Serialize for OtlpEndpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&masked_url(&self.0))
    }
}

impl std::fmt::Debug for OtlpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", masked_url(&self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::Config;

    #[test]
    fn the_otlp_endpoints_credentials_are_kept_apart_and_never_printed() {
        let c = Config::parse(
            "[telemetry]\notlp_endpoint = \"https://ten%40ant:p%3As3cret@otlp.example:4318/v1/traces?key=t0ken\"\n",
        )
        .unwrap();
        let endpoint = c.telemetry.otlp_endpoint.as_ref().unwrap();
        let collector = endpoint.collector().unwrap();
        assert_eq!(
            collector.url,
            "https://otlp.example:4318/v1/traces?key=t0ken"
        );
        let (user, password) = collector.credentials.unwrap();
        assert_eq!((user.as_str(), password.expose()), ("ten@ant", "p:s3cret"));
        let printed = toml::to_string(&c).unwrap();
        assert!(
            printed.contains(
                "otlp_endpoint = \"https://ten%40ant:***@otlp.example:4318/v1/traces?***\""
            ),
            "{printed}"
        );
        for shown in [printed, format!("{c:?}")] {
            assert!(
                !shown.contains("s3cret") && !shown.contains("t0ken"),
                "{shown}"
            );
        }
        // What is printed is a valid config again.
        assert!(Config::parse(&toml::to_string(&c).unwrap()).is_ok());
        let none = OtlpEndpoint("http://127.0.0.1:4318".into())
            .collector()
            .unwrap();
        assert!(none.credentials.is_none());
        assert_eq!(none.url, "http://127.0.0.1:4318");
        // A refused endpoint is named masked.
        for url in [
            "ftp://u:s3cret@host/",
            "http://u:s3cret@/x",
            "http://h/?t0ken=1 2",
        ] {
            let err =
                Config::parse(&format!("[telemetry]\notlp_endpoint = \"{url}\"\n")).unwrap_err();
            assert!(err.contains("telemetry.otlp_endpoint"), "{url}: {err}");
            assert!(
                !err.contains("s3cret") && !err.contains("t0ken"),
                "{url}: {err}"
            );
        }
    }
}
