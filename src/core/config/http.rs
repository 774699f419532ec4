//! `[http]` (what one client may hold of the server, which proxies are believed about its
//! address) and `[tls]` (the certificate served).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use super::values::{Cidr, de_cidrs, de_duration, ser_cidrs, ser_duration};

/// `[http]`: what one client may hold of the server (see `server::connection_builder`), and
/// which proxies in front of it are believed about the client's address (see `forwarded`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Longest wait for a request's headers, and for the next request on an idle keep-alive
    /// connection; then the connection is closed.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub header_timeout: Duration,
    /// Longest time to receive a request's whole body; then 408 `request_timeout`.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub body_timeout: Duration,
    /// Most connections open at once; further clients wait in the listen backlog.
    pub max_connections: usize,
    /// Most memory (MB) request bodies hold at once, from reading them until the answer (see
    /// `request::BodyBudget`); a request that finds no room within 5 s gets 503 `server_busy`.
    pub body_memory_mb: usize,
    /// Reverse proxies in front of the server (address ranges): only a request whose TCP peer
    /// is in one has its client address taken from `client_address_header` (see `forwarded`).
    /// Empty by default: nobody is trusted, and the client is the TCP peer.
    #[serde(deserialize_with = "de_trusted_proxies", serialize_with = "ser_cidrs")]
    pub trusted_proxies: Vec<Cidr>,
    /// The header those proxies put the client address in.
    pub client_address_header: ClientAddressHeader,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            max_connections: 1000,
            body_memory_mb: 32,
            trusted_proxies: Vec::new(),
            client_address_header: ClientAddressHeader::default(),
        }
    }
}

impl HttpConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.header_timeout.is_zero() || self.body_timeout.is_zero() {
            return Err("http.header_timeout and http.body_timeout must be above 0".into());
        }
        if self.max_connections == 0 {
            return Err("http.max_connections must be at least 1".into());
        }
        if self.body_memory_mb == 0 {
            return Err("http.body_memory_mb must be at least 1".into());
        }
        Ok(())
    }
}

/// The header a trusted proxy appends the client address to. Only that one is read: a proxy
/// passes the other one on as the client sent it, so it could name any address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientAddressHeader {
    /// `X-Forwarded-For: client, proxy1, ...` (nginx's `$proxy_add_x_forwarded_for`, HAProxy's
    /// `option forwardfor`, most load balancers).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1, ...`.
    Forwarded,
}

/// `[tls]`: the certificate to serve and the optional plain-HTTP redirect listener.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM file of the certificate chain, leaf first.
    pub cert: Option<PathBuf>,
    /// PEM file of the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
    /// Generate (once) and serve a self-signed certificate for localhost, kept in the data dir.
    pub self_signed: bool,
    /// Address of a plain-HTTP listener that only redirects to `public_url` (308).
    pub redirect_listen: Option<SocketAddr>,
}

impl TlsConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        match (&self.cert, &self.key, self.self_signed) {
            (Some(_), Some(_), false) | (None, None, true) => Ok(()),
            (_, _, true) => {
                Err("tls.self_signed = true and tls.cert / tls.key exclude each other".into())
            }
            _ => Err("tls.cert and tls.key go together (or set tls.self_signed = true)".into()),
        }
    }
}

fn de_trusted_proxies<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Cidr>, D::Error> {
    de_cidrs(d, "http.trusted_proxies")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::Config;

    #[test]
    fn tls_needs_cert_and_key_or_self_signed() {
        assert!(Config::parse("").unwrap().tls.is_none());
        assert_eq!(Config::parse("").unwrap().scheme(), "http");
        let c = Config::parse("[tls]\nself_signed = true\n").unwrap();
        assert_eq!(c.scheme(), "https");
        assert!(c.public_url().starts_with("https://127.0.0.1:8080"));
        Config::parse("[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n").unwrap();
        for text in [
            "[tls]\n",
            "[tls]\ncert = \"c.pem\"\n",
            "[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nself_signed = true\n",
        ] {
            let err = Config::parse(text).unwrap_err();
            assert!(err.contains("tls."), "{text}: {err}");
        }
        let err = Config::parse("[tls]\nself_signed = true\nredirect = \"x\"").unwrap_err();
        assert!(err.contains("redirect"), "{err}");
    }

    #[test]
    fn trusted_proxies_and_the_client_address_header() {
        let h = Config::parse("").unwrap().http;
        assert!(h.trusted_proxies.is_empty(), "nobody is trusted by default");
        assert_eq!(h.client_address_header, ClientAddressHeader::XForwardedFor);
        let h = Config::parse(
            "[http]\ntrusted_proxies = [\"10.0.0.0/8\", \"::1\"]\n\
             client_address_header = \"forwarded\"\n",
        )
        .unwrap()
        .http;
        assert_eq!(h.trusted_proxies.len(), 2);
        assert_eq!(h.client_address_header, ClientAddressHeader::Forwarded);
        for (text, key) in [
            ("trusted_proxies = [\"proxy\"]", "http.trusted_proxies"),
            (
                "client_address_header = \"x-real-ip\"",
                "client_address_header",
            ),
        ] {
            let err = Config::parse(&format!("[http]\n{text}\n")).unwrap_err();
            assert!(err.contains(key), "{text}: {err}");
        }
        for url in ["https://", "http:///path"] {
            let err = Config::parse(&format!("public_url = \"{url}\"\n")).unwrap_err();
            assert!(err.contains("public_url"), "{url}: {err}");
        }
        // It begins the links of every e-mail: no credentials, and the refusal hides them.
        for url in [
            "https://admin:pub-s3cret@intake.example.com",
            "https://pub-s3cret@x:1/",
        ] {
            let err = Config::parse(&format!("public_url = \"{url}\"\n")).unwrap_err();
            assert!(err.contains("public_url"), "{url}: {err}");
            assert!(!err.contains("pub-s3cret"), "{url}: {err}");
        }
    }
}
