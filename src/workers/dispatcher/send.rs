//! The HTTP side of a delivery: one POST with ureq, and what came back.
//!
//! - **No redirects.** A receiver's 3xx is returned as the answer (`max_redirects(0)`), and
//!   the dispatcher retries it like a 5xx: following it would send the signed body to a
//!   target nobody configured.
//! - **One limit per attempt.** `[webhooks] timeout` bounds the whole exchange: resolving,
//!   connecting, TLS, sending, and reading the answer.
//! - **SSRF guard.** A webhook URL is chosen by an API caller, so by default it may not reach
//!   this server's own network: [`TargetGuard`] resolves the host with ureq's resolver and
//!   drops every address that is not global (loopback, RFC 1918 and other private ranges,
//!   `fc00::/7`, link-local, unspecified, multicast, broadcast, documentation, shared and
//!   reserved ranges, and IPv4 addresses mapped into IPv6 or NAT64 that are any of these).
//!   Checking the resolved addresses at connect time, not the URL text, also covers names
//!   that resolve to private addresses and DNS answers that change after the URL was
//!   accepted. `allow_private_targets` lifts the guard; `allowed_cidrs` lets listed ranges
//!   through. A refused target is reported as [`Exchange::Refused`]: the dispatcher gives up
//!   at once, since no retry can change the answer of a rule.
//! - **No proxy from the environment.** `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` are
//!   ignored: a proxy would receive the target's name and resolve it itself, past the guard.
//!   An outbound proxy is an explicit setting (`[webhooks] proxy`, see [`super::proxy`]),
//!   and even then the guard decides on the target's own addresses first.
//! - **No thread per lookup.** ureq resolves on a new thread whenever a timeout is set, so
//!   [`TargetGuard`] answers IP-literal hosts itself and keeps each name's addresses for
//!   [`DNS_CACHE_TTL`]; the guard still checks every address on every attempt.
//! - **Bounded answer.** Only the first [`RESPONSE_BODY_LIMIT`] bytes of a response body are
//!   read and kept in the attempt log: enough to see a receiver's error message, while a
//!   receiver answering megabytes cannot fill the store.

use std::collections::HashMap;
use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{Connector, NextTimeout, RustlsConnector, TcpConnector};

use super::proxy::{OutboundProxy, ProxyTunnel};

use crate::core::clock::Timestamp;
use crate::core::config::WebhooksConfig;
use crate::core::egress::{self, TargetPolicy};
use crate::domain::webhooks::RESPONSE_BODY_LIMIT;
use crate::domain::webhooks::policy::{Exchange, RETRY_AFTER_CAP};

/// How long a host name's resolved addresses are reused.
pub const DNS_CACHE_TTL: Duration = Duration::from_secs(10);
/// Most host names kept in the cache; it starts over when full.
const DNS_CACHE_NAMES: usize = 1024;

/// Sends deliveries; one per dispatcher, shared by its workers (ureq pools connections).
pub struct Sender {
    agent: ureq::Agent,
    timeout: Duration,
}

impl Sender {
    pub fn new(config: &WebhooksConfig) -> Result<Sender, String> {
        let agent_config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(config.timeout))
            // Never from the environment: see the module doc.
            .proxy(None)
            .build();
        let guard = TargetGuard::new(TargetPolicy::new(config));
        let proxy = config
            .proxy
            .as_ref()
            .map(|url| OutboundProxy::new(url, &config.no_proxy))
            .transpose()?;
        let connector =
            ().chain(ProxyTunnel(proxy))
                .chain(TcpConnector::default())
                .chain(RustlsConnector::default());
        Ok(Sender {
            agent: ureq::Agent::with_parts(agent_config, connector, guard),
            timeout: config.timeout,
        })
    }

    /// POSTs `body` to `url` with exactly `headers`; `now` dates a `Retry-After`.
    pub fn send(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
        now: Timestamp,
    ) -> Exchange {
        let mut request = self.agent.post(url);
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let mut response = match request.send(body) {
            Ok(response) => response,
            Err(err) => return self.failure(&err),
        };
        let status = response.status().as_u16();
        let retry_after = (status == 429)
            .then(|| response.headers().get(http::header::RETRY_AFTER))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| retry_after(v, now));
        let mut bytes = Vec::with_capacity(RESPONSE_BODY_LIMIT.min(1024));
        let read = response
            .body_mut()
            .as_reader()
            .take(RESPONSE_BODY_LIMIT as u64)
            .read_to_end(&mut bytes);
        let mut body = String::from_utf8_lossy(&bytes).into_owned();
        if let Err(err) = read {
            body.push_str(&format!("\n[reading the response body failed: {err}]"));
        }
        Exchange::Answered {
            status,
            retry_after,
            body,
        }
    }

    fn failure(&self, err: &ureq::Error) -> Exchange {
        Exchange::Failed(match err {
            ureq::Error::Timeout(_) => {
                format!("timed out: no complete answer within {:?}", self.timeout)
            }
            ureq::Error::HostNotFound => "host not found (DNS)".into(),
            ureq::Error::Io(io) => match io.get_ref().and_then(|e| e.downcast_ref::<Refused>()) {
                Some(refused) => return Exchange::Refused(refused.to_string()),
                None => format!("connection error: {io}"),
            },
            other => other.to_string(),
        })
    }
}

/// A `Retry-After` value (delta seconds or an HTTP date) as a wait from `now`; `None` when
/// unreadable or over [`RETRY_AFTER_CAP`]. A date in the past is no wait.
pub fn retry_after(value: &str, now: Timestamp) -> Option<Duration> {
    let value = value.trim();
    let wait = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => {
            let at = httpdate::parse_http_date(value).ok()?;
            let at = at.duration_since(std::time::UNIX_EPOCH).ok()?;
            let at_us = i64::try_from(at.as_micros()).ok()?;
            // Saturating: `now` is any timestamp, and a wait that overflows is over the cap.
            Duration::from_micros(u64::try_from(at_us.saturating_sub(now.as_micros())).unwrap_or(0))
        }
    };
    (wait <= RETRY_AFTER_CAP).then_some(wait)
}

/// Why no connection was made: every address of the target is refused by the guard.
#[derive(Debug)]
struct Refused(IpAddr);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&egress::refusal(self.0))
    }
}

impl std::error::Error for Refused {}

/// ureq's resolver, keeping only the addresses deliveries may go to.
#[derive(Debug)]
struct TargetGuard {
    inner: DefaultResolver,
    /// `scheme://authority` → when it was resolved and its addresses.
    cache: Mutex<HashMap<String, (Instant, ResolvedSocketAddrs)>>,
    policy: TargetPolicy,
}

impl TargetGuard {
    fn new(policy: TargetPolicy) -> TargetGuard {
        TargetGuard {
            inner: DefaultResolver::default(),
            cache: Mutex::default(),
            policy,
        }
    }

    /// Every address of `uri`'s host: the literal itself, the cached answer while fresh, or a
    /// lookup with ureq's resolver.
    fn addresses(
        &self,
        uri: &http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        if let Some(addr) = literal_address(uri) {
            let mut one = self.empty();
            one.push(addr);
            return Ok(one);
        }
        let key = format!(
            "{}://{}",
            uri.scheme_str().unwrap_or_default(),
            uri.authority().map(|a| a.as_str()).unwrap_or_default()
        );
        let cache = || self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, addrs)) = cache().get(&key)
            && at.elapsed() < DNS_CACHE_TTL
        {
            return Ok(addrs.clone());
        }
        let addrs = self.inner.resolve(uri, config, timeout)?;
        let mut cache = cache();
        if cache.len() >= DNS_CACHE_NAMES {
            cache.clear();
        }
        cache.insert(key, (Instant::now(), addrs.clone()));
        Ok(addrs)
    }
}

/// The socket address of a URL whose host is an IP address (port given or the scheme's).
pub(super) fn literal_address(uri: &http::Uri) -> Option<SocketAddr> {
    let host = uri.host()?;
    let ip: IpAddr = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
        .parse()
        .ok()?;
    let port = match (uri.port_u16(), uri.scheme_str()) {
        (Some(port), _) => port,
        (None, Some("https")) => 443,
        (None, Some("http")) => 80,
        (None, _) => return None,
    };
    Some(SocketAddr::new(ip, port))
}

impl Resolver for TargetGuard {
    fn resolve(
        &self,
        uri: &http::Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let resolved = self.addresses(uri, config, timeout)?;
        let mut kept = self.empty();
        let mut refused = None;
        for addr in resolved.iter() {
            if self.policy.allows(addr.ip()) {
                kept.push(*addr);
            } else {
                refused.get_or_insert(addr.ip());
            }
        }
        match refused {
            Some(ip) if kept.is_empty() => Err(ureq::Error::Io(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                Refused(ip),
            ))),
            _ => Ok(kept),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_literal_hosts_need_no_lookup() {
        let at = |url: &str| literal_address(&url.parse::<http::Uri>().unwrap());
        let addr = |text: &str| Some(text.parse::<SocketAddr>().unwrap());
        assert_eq!(at("http://127.0.0.1:9000/hook"), addr("127.0.0.1:9000"));
        assert_eq!(at("https://[::1]/hook"), addr("[::1]:443"));
        assert_eq!(at("http://10.0.0.1/"), addr("10.0.0.1:80"));
        assert_eq!(at("https://hooks.example.com/"), None);
    }

    #[test]
    fn retry_after_reads_seconds_and_dates_up_to_four_hours() {
        let now = Timestamp(1_767_225_600_000_000); // 2026-01-01T00:00:00Z
        assert_eq!(retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(retry_after("14400", now), Some(RETRY_AFTER_CAP));
        assert_eq!(retry_after("14401", now), None);
        assert_eq!(
            retry_after("Thu, 01 Jan 2026 00:10:00 GMT", now),
            Some(Duration::from_secs(600))
        );
        assert_eq!(
            retry_after("Wed, 31 Dec 2025 23:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("Thu, 01 Jan 2026 05:00:00 GMT", now), None);
        assert_eq!(retry_after("soon", now), None);
        // Found by fuzzing (target `retry_after`): a date minus a "now" far in the past
        // overflowed.
        let date = "Thursday, 01-Jan-26 00:10:00 GMT";
        assert_eq!(retry_after(date, Timestamp(i64::MIN)), None);
        assert_eq!(retry_after(date, Timestamp(i64::MAX)), Some(Duration::ZERO));
        assert_eq!(retry_after("-5", now), None);
    }
}
