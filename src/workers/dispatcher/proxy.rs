//! The outbound proxy of deliveries (`[webhooks] proxy`, `no_proxy`), set only in the config.
//!
//! ureq's own proxy support stays off (`proxy(None)` in [`super::send`]): it reads
//! `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` from the environment, and it lets the proxy
//! resolve the target's name, so the SSRF guard would only ever judge the proxy's address.
//! Here ureq resolves every target through the guard exactly as without a proxy, and
//! [`ProxyTunnel`] then opens a CONNECT tunnel through the proxy to one of those checked
//! addresses (`CONNECT 203.0.113.7:443`). TLS to the receiver runs inside the tunnel and is
//! verified against the URL's host name as usual. The proxy's own address is the operator's
//! choice and is not judged by the guard.

use std::io::Write;
use std::net::IpAddr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, Transport, TransportAdapter,
};

use super::send::literal_address;
use crate::core::config::ProxyUrl;

/// Longest CONNECT answer head read from the proxy.
const ANSWER_HEAD_LIMIT: usize = 8192;

/// The configured proxy and the hosts that bypass it. Its `Debug` (ureq's connectors must
/// have one) leaves the credentials out.
pub struct OutboundProxy {
    /// `http://host:port/`, what ureq connects to for the tunnel.
    uri: http::Uri,
    /// `Basic …` when the proxy URL carries credentials.
    authorization: Option<String>,
    no_proxy: Vec<String>,
    resolver: DefaultResolver,
}

impl std::fmt::Debug for OutboundProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboundProxy")
            .field("uri", &self.uri)
            .field("authorization", &self.authorization.as_ref().map(|_| "***"))
            .field("no_proxy", &self.no_proxy)
            .finish()
    }
}

impl OutboundProxy {
    pub fn new(url: &ProxyUrl, no_proxy: &[String]) -> Result<OutboundProxy, String> {
        let uri = format!("http://{}/", url.authority)
            .parse()
            .map_err(|e| format!("webhooks.proxy: {e}"))?;
        let authorization = url.credentials.as_ref().map(|(user, password)| {
            format!(
                "Basic {}",
                BASE64.encode(format!("{user}:{}", password.expose()))
            )
        });
        Ok(OutboundProxy {
            uri,
            authorization,
            no_proxy: no_proxy
                .iter()
                .map(|e| e.trim().trim_start_matches('.').to_ascii_lowercase())
                .collect(),
            resolver: DefaultResolver::default(),
        })
    }

    /// Whether a connection to `uri` goes direct: its host is listed in `no_proxy` (a name
    /// covers its subdomains), or `uri` is the proxy itself (the tunnel's own connection).
    fn bypasses(&self, uri: &http::Uri) -> bool {
        if uri.authority() == self.uri.authority() {
            return true;
        }
        let Some(host) = uri.host() else {
            return false;
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = host.to_ascii_lowercase();
        self.no_proxy.iter().any(|entry| {
            entry == "*"
                || *entry == host
                || host
                    .strip_suffix(entry.as_str())
                    .is_some_and(|rest| rest.ends_with('.') && host.parse::<IpAddr>().is_err())
        })
    }

    /// The proxy's addresses: its literal IP, or a lookup (never filtered by the guard).
    fn addresses(&self, details: &ConnectionDetails) -> Result<ResolvedSocketAddrs, ureq::Error> {
        if let Some(addr) = literal_address(&self.uri) {
            let mut one = self.resolver.empty();
            one.push(addr);
            return Ok(one);
        }
        self.resolver
            .resolve(&self.uri, details.config, details.timeout)
    }
}

/// The connector that tunnels through [`OutboundProxy`]; a pass-through without one.
#[derive(Debug)]
pub struct ProxyTunnel(pub Option<OutboundProxy>);

impl<In: Transport> Connector<In> for ProxyTunnel {
    type Out = Either<In, Box<dyn Transport>>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        if let Some(transport) = chained {
            return Ok(Some(Either::A(transport)));
        }
        let Some(proxy) = &self.0 else {
            return Ok(None);
        };
        if proxy.bypasses(details.uri) {
            return Ok(None);
        }
        // Resolved by ureq through the guard: only addresses deliveries may go to.
        let target = *details.addrs.first().ok_or(ureq::Error::HostNotFound)?;
        let to_proxy = ConnectionDetails {
            uri: &proxy.uri,
            addrs: proxy.addresses(details)?,
            config: details.config,
            request_level: details.request_level,
            resolver: details.resolver,
            now: details.now,
            timeout: details.timeout,
            current_time: details.current_time.clone(),
            run_connector: details.run_connector.clone(),
            register_shutdown: details.register_shutdown.clone(),
        };
        let transport = (details.run_connector)(&to_proxy)?;
        let mut w = TransportAdapter::new(transport, details.current_time.clone());
        w.set_timeout(details.timeout);
        // `SocketAddr` writes IPv6 in brackets, as the authority form of CONNECT wants.
        write!(w, "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n")?;
        if let Some(authorization) = &proxy.authorization {
            write!(w, "Proxy-Authorization: {authorization}\r\n")?;
        }
        write!(w, "\r\n")?;
        let mut transport = w.into_inner();
        let status = read_answer_status(&mut transport, details)?;
        if status != 200 {
            return Err(ureq::Error::ConnectProxyFailed(format!(
                "the proxy answered {status} to CONNECT {target}"
            )));
        }
        Ok(Some(Either::B(transport)))
    }
}

/// Reads the proxy's answer head, leaving anything after it unread; returns its status.
fn read_answer_status(
    transport: &mut Box<dyn Transport>,
    details: &ConnectionDetails,
) -> Result<u16, ureq::Error> {
    let failed = |why: &str| ureq::Error::ConnectProxyFailed(why.to_string());
    loop {
        let progressed = transport.maybe_await_input(details.timeout)?;
        let buffers: &mut dyn Buffers = transport.buffers();
        let input = buffers.input();
        if let Some(end) = input.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&input[..end]).into_owned();
            buffers.input_consume(end + 4);
            let mut words = head.split_ascii_whitespace();
            let status = match (words.next(), words.next()) {
                (Some(version), Some(status)) if version.starts_with("HTTP/1.") => {
                    status.parse().ok()
                }
                _ => None,
            };
            return status.ok_or_else(|| failed("the proxy's answer is not HTTP/1.x"));
        }
        if input.len() > ANSWER_HEAD_LIMIT {
            return Err(failed("the proxy's answer head is too long"));
        }
        // Nothing consumed: the next wait reads more instead of returning at once.
        buffers.input_consume(0);
        if !progressed {
            return Err(failed("the proxy closed the connection without answering"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxy(no_proxy: &[&str]) -> OutboundProxy {
        let url = ProxyUrl::parse("http://proxy.internal:3128").unwrap();
        let list: Vec<String> = no_proxy.iter().map(|s| s.to_string()).collect();
        OutboundProxy::new(&url, &list).unwrap()
    }

    fn uri(text: &str) -> http::Uri {
        text.parse().unwrap()
    }

    #[test]
    fn no_proxy_lists_names_with_their_subdomains_and_addresses() {
        let p = proxy(&["hooks.example.com", ".corp.example", "10.1.2.3", "fd00::1"]);
        assert!(p.bypasses(&uri("https://hooks.example.com/x")));
        assert!(p.bypasses(&uri("https://a.hooks.example.com/x")));
        assert!(p.bypasses(&uri("https://HOOKS.example.com/x")));
        assert!(!p.bypasses(&uri("https://otherhooks.example.com/x")));
        assert!(p.bypasses(&uri("https://corp.example/")));
        assert!(p.bypasses(&uri("https://x.corp.example/")));
        assert!(p.bypasses(&uri("http://10.1.2.3:8080/")));
        assert!(!p.bypasses(&uri("http://110.1.2.3/")));
        assert!(p.bypasses(&uri("http://[fd00::1]/")));
        assert!(!p.bypasses(&uri("https://example.net/")));
        // The tunnel's own connection to the proxy goes direct.
        assert!(p.bypasses(&uri("http://proxy.internal:3128/")));
        assert!(proxy(&["*"]).bypasses(&uri("https://example.net/")));
    }

    #[test]
    fn credentials_become_a_basic_proxy_authorization() {
        let url = ProxyUrl::parse("http://us%40er:p%3Ass@127.0.0.1:3128/").unwrap();
        assert_eq!(url.authority, "127.0.0.1:3128");
        let (user, password) = url.credentials.clone().unwrap();
        assert_eq!((user.as_str(), password.expose()), ("us@er", "p:ss"));
        let p = OutboundProxy::new(&url, &[]).unwrap();
        assert_eq!(
            p.authorization.as_deref(),
            Some(format!("Basic {}", BASE64.encode("us@er:p:ss")).as_str())
        );
        assert_eq!(p.uri, uri("http://127.0.0.1:3128/"));
        assert!(!format!("{p:?}").contains("p:ss") && !format!("{p:?}").contains("Basic"));
        // `intake check` shows the user, never the password.
        let shown = toml::Value::try_from(&url).unwrap();
        assert_eq!(shown.as_str(), Some("http://us%40er:***@127.0.0.1:3128"));
    }

    #[test]
    fn only_plain_http_proxy_urls_are_accepted() {
        assert_eq!(
            ProxyUrl::parse("http://proxy").unwrap().authority,
            "proxy:80"
        );
        assert_eq!(
            ProxyUrl::parse("http://[fd00::1]:3128").unwrap().authority,
            "[fd00::1]:3128"
        );
        for bad in [
            "https://proxy:3128",
            "socks5://proxy:1080",
            "proxy:3128",
            "http://",
            "http://proxy:3128/path",
            "http://proxy:port",
        ] {
            assert!(ProxyUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
