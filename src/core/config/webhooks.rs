//! `[webhooks]`: how deliveries are sent, and the proxy they may go through.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::urls::percent_decode;
use super::values::{Cidr, Secret, de_cidrs, de_duration, ser_cidrs, ser_duration};

/// `[webhooks]`: how deliveries are sent (see `webhooks::dispatch`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhooksConfig {
    /// Threads sending deliveries; retries may use at most half of them.
    pub workers: usize,
    /// Attempts in flight to one receiver (host and port) at most.
    pub per_target_concurrency: usize,
    /// Attempts in flight for one endpoint's deliveries at most, whatever their receivers;
    /// default half the workers ([`WebhooksConfig::per_endpoint_concurrency`]).
    #[serde(rename = "per_endpoint_concurrency")]
    pub per_endpoint: Option<usize>,
    /// Limit of one attempt: connecting, sending, and reading the answer.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub timeout: Duration,
    /// Deliver to loopback, private and other non-global addresses too.
    pub allow_private_targets: bool,
    /// Non-global ranges deliveries may go to anyway, e.g. `"10.0.0.0/8"`.
    #[serde(deserialize_with = "de_allowed_cidrs", serialize_with = "ser_cidrs")]
    pub allowed_cidrs: Vec<Cidr>,
    /// Send deliveries through this HTTP proxy (`http://[user:password@]host:port`), in a
    /// CONNECT tunnel to the target address the guard checked. The environment's
    /// `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` are never read.
    pub proxy: Option<ProxyUrl>,
    /// Hosts reached directly even when `proxy` is set: a name (`hooks.example.com`, which
    /// covers its subdomains too; a leading dot is allowed), an IP address, or `*` for all.
    pub no_proxy: Vec<String>,
    /// A subscription whose attempts have all failed for this long (with at least
    /// `disable_after_attempts` of them) is disabled; `"0s"` never disables one.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub disable_after: Duration,
    pub disable_after_attempts: u32,
    /// After a recovery ends, another of the same deliveries over an overlapping window is
    /// refused for this long (`"0s"`: never), so a repeated call cannot send them again and
    /// again.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub recovery_cooldown: Duration,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        WebhooksConfig {
            workers: 8,
            per_target_concurrency: 4,
            per_endpoint: None,
            timeout: Duration::from_secs(15),
            allow_private_targets: false,
            allowed_cidrs: Vec::new(),
            proxy: None,
            no_proxy: Vec::new(),
            disable_after: Duration::from_secs(5 * 86_400),
            disable_after_attempts: 10,
            recovery_cooldown: Duration::from_secs(600),
        }
    }
}

impl WebhooksConfig {
    /// The cap on one endpoint's attempts in flight: as configured, or half the workers, so
    /// one tenant's slow or dead receivers always leave the other half to everyone else.
    pub fn per_endpoint_concurrency(&self) -> usize {
        self.per_endpoint.unwrap_or((self.workers / 2).max(1))
    }

    pub(super) fn validate(&self) -> Result<(), String> {
        if self
            .per_endpoint
            .is_some_and(|n| n == 0 || n > self.workers)
        {
            return Err(
                "webhooks.per_endpoint_concurrency must be from 1 to webhooks.workers".into(),
            );
        }
        if !(1..=256).contains(&self.workers) {
            return Err("webhooks.workers must be from 1 to 256".into());
        }
        if !(1..=256).contains(&self.per_target_concurrency) {
            return Err("webhooks.per_target_concurrency must be from 1 to 256".into());
        }
        if self.timeout.is_zero() || self.timeout > Duration::from_secs(300) {
            return Err("webhooks.timeout must be more than 0 and at most \"5m\"".into());
        }
        if let Some(entry) = self
            .no_proxy
            .iter()
            .find(|e| e.trim().trim_start_matches('.').is_empty() || e.contains(['/', ' ']))
        {
            return Err(format!(
                "webhooks.no_proxy: {entry:?} is not a host name, an IP address or \"*\""
            ));
        }
        Ok(())
    }
}

/// `[webhooks] proxy`: an `http://` proxy URL, its credentials kept apart as a [`Secret`].
#[derive(Clone, Debug)]
pub struct ProxyUrl {
    /// Host and port (`proxy.internal:3128`, `[fd00::1]:3128`); port 80 when not written.
    pub authority: String,
    /// `user` and `password` of `http://user:password@host:port`, percent-decoded.
    pub credentials: Option<(String, Secret)>,
}

impl ProxyUrl {
    pub fn parse(text: &str) -> Result<ProxyUrl, String> {
        let bad = |why: &str| format!("webhooks.proxy: {why} (write \"http://host:port\")");
        let rest = text
            .trim()
            .strip_prefix("http://")
            .ok_or_else(|| bad("only http:// proxies are supported"))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err(bad("a proxy URL has no path"));
        }
        let (userinfo, host_port) = match rest.rsplit_once('@') {
            Some((userinfo, host_port)) => (Some(userinfo), host_port),
            None => (None, rest),
        };
        let (host, port) = match host_port.strip_prefix('[') {
            Some(v6) => {
                let (address, rest) = v6.split_once(']').ok_or_else(|| bad("unclosed ["))?;
                address
                    .parse::<std::net::Ipv6Addr>()
                    .map_err(|_| bad("not an IPv6 address in [ ]"))?;
                (format!("[{address}]"), rest.strip_prefix(':'))
            }
            None => match host_port.rsplit_once(':') {
                Some((host, port)) => (host.to_string(), Some(port)),
                None => (host_port.to_string(), None),
            },
        };
        let host_ok = !host.is_empty()
            && (host.starts_with('[')
                || host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'));
        if !host_ok {
            return Err(bad("not a host name or address"));
        }
        let port: u16 = match port {
            Some(port) => port.parse().map_err(|_| bad("not a port number"))?,
            None => 80,
        };
        let credentials = userinfo.map(|userinfo| {
            let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            let decode = |t: &str| percent_decode(t);
            (decode(user), Secret::new(decode(password)))
        });
        Ok(ProxyUrl {
            authority: format!("{host}:{port}"),
            credentials,
        })
    }
}

/// Written back with the password masked: `intake check` prints it.
impl Serialize for ProxyUrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.credentials {
            Some((user, _)) => {
                let user = user
                    .replace('%', "%25")
                    .replace('@', "%40")
                    .replace(':', "%3A");
                s.serialize_str(&format!("http://{user}:***@{}", self.authority))
            }
            None => s.serialize_str(&format!("http://{}", self.authority)),
        }
    }
}

impl<'de> Deserialize<'de> for ProxyUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ProxyUrl, D::Error> {
        ProxyUrl::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

fn de_allowed_cidrs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Cidr>, D::Error> {
    de_cidrs(d, "webhooks.allowed_cidrs")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;

    use crate::core::config::Config;

    #[test]
    fn webhooks_defaults_values_and_errors() {
        let w = Config::parse("").unwrap().webhooks;
        assert_eq!(w.workers, 8);
        assert_eq!(w.per_target_concurrency, 4);
        assert_eq!(w.timeout, Duration::from_secs(15));
        assert!(!w.allow_private_targets);
        assert!(w.allowed_cidrs.is_empty());
        let w = Config::parse(
            "[webhooks]\nworkers = 2\nper_target_concurrency = 1\ntimeout = \"500ms\"\n\
             allow_private_targets = true\nallowed_cidrs = [\"10.0.0.0/8\", \"fd00::/8\", \"192.0.2.7\"]\n",
        )
        .unwrap()
        .webhooks;
        assert_eq!((w.workers, w.per_target_concurrency), (2, 1));
        assert_eq!(w.timeout, Duration::from_millis(500));
        assert!(w.allow_private_targets);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let [ten, fd, one] = w.allowed_cidrs.as_slice() else {
            panic!("{:?}", w.allowed_cidrs);
        };
        assert!(ten.contains(ip("10.200.3.4")) && !ten.contains(ip("11.0.0.1")));
        assert!(ten.contains(ip("::ffff:10.1.1.1")));
        assert!(fd.contains(ip("fd12::1")) && !fd.contains(ip("fc00::1")));
        assert!(one.contains(ip("192.0.2.7")) && !one.contains(ip("192.0.2.8")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        // Found by fuzzing (target `config`): a range written as IPv4-mapped IPv6 held no
        // address at all, not even its own.
        let mapped = Cidr::parse("::ffff:10.0.0.1/104").unwrap();
        assert!(mapped.contains(ip("::ffff:10.0.0.1")) && mapped.contains(ip("10.9.9.9")));
        assert!(!mapped.contains(ip("11.0.0.1")) && !mapped.contains(ip("fd12::1")));
        assert!(!ten.contains(ip("fd12::1")) && !fd.contains(ip("10.0.0.1")));
        for (text, key) in [
            ("workers = 0", "webhooks.workers"),
            (
                "per_target_concurrency = 0",
                "webhooks.per_target_concurrency",
            ),
            ("timeout = \"0s\"", "webhooks.timeout"),
            (
                "allowed_cidrs = [\"10.0.0.0/33\"]",
                "webhooks.allowed_cidrs",
            ),
            ("allowed_cidrs = [\"intranet\"]", "webhooks.allowed_cidrs"),
            ("retries = 3", "retries"),
        ] {
            let err = Config::parse(&format!("[webhooks]\n{text}")).unwrap_err();
            assert!(err.contains(key), "{text}: {err}");
        }
    }
}
