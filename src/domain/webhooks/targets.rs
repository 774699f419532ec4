//! A webhook URL checked against the server's egress rule ([`TargetPolicy`]) when an owner
//! saves it, so a target every delivery would be refused is refused at once, with the reason,
//! instead of leaving deliveries that fail one by one.
//!
//! The check resolves the host the way a delivery would. It is advice at save time, not the
//! guard: DNS answers change, so `workers::webhooks::send` still checks every address of
//! every attempt. A name that does not resolve now (no DNS here, or not yet published) is
//! accepted; its deliveries report what they find.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::core::egress::{self, TargetPolicy};
use crate::domain::error::{Error, Result};

/// How long a save waits for the host's addresses.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(3);

/// `Ok` unless every address `url`'s host resolves to is refused by `policy`: then 400
/// `webhook_target_refused` saying which address and which setting would allow it.
pub async fn vet(policy: &TargetPolicy, url: &str) -> Result<()> {
    let Ok(uri) = url.parse::<http::Uri>() else {
        // The URL's own checks name what is wrong with it.
        return Ok(());
    };
    let Some(host) = uri.host() else {
        return Ok(());
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("http") {
            80
        } else {
            443
        });
    let addresses: Vec<IpAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => match tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((host, port)))
            .await
        {
            Ok(Ok(found)) => found.map(|a: SocketAddr| a.ip()).collect(),
            _ => return Ok(()),
        },
    };
    match addresses.iter().find(|ip| !policy.allows(**ip)) {
        Some(refused) if addresses.iter().all(|ip| !policy.allows(*ip)) => {
            Err(Error::WebhookTargetRefused(format!(
                "Deliveries to {host} would be refused by this server's egress rule: {}.",
                egress::refusal(*refused)
            )))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::Cidr;

    fn refused(policy: &TargetPolicy, url: &str) -> Option<String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        match runtime.block_on(vet(policy, url)) {
            Err(Error::WebhookTargetRefused(reason)) => Some(reason),
            Err(other) => panic!("unexpected error {other}"),
            Ok(()) => None,
        }
    }

    #[test]
    fn loopback_and_private_targets_are_refused_with_the_reason() {
        let strict = TargetPolicy::with(false, Vec::new());
        let reason = refused(&strict, "http://127.0.0.1:9000/hook").unwrap();
        assert!(reason.contains("127.0.0.1"), "{reason}");
        assert!(reason.contains("allow_private_targets"), "{reason}");
        assert!(refused(&strict, "https://[::1]/hook").is_some());
        assert!(refused(&strict, "http://localhost:8080/hook").is_some());
        assert!(refused(&strict, "https://10.1.2.3/hook").is_some());
        assert_eq!(refused(&strict, "https://8.8.8.8/hook"), None);
        // Not resolvable here: accepted, its deliveries report what they find.
        assert_eq!(refused(&strict, "https://no-such-host.invalid/hook"), None);
    }

    #[test]
    fn the_settings_that_allow_private_targets_allow_saving_them() {
        let open = TargetPolicy::with(true, Vec::new());
        assert_eq!(refused(&open, "http://127.0.0.1:9000/hook"), None);
        let listed = TargetPolicy::with(false, vec![Cidr::parse("10.0.0.0/8").unwrap()]);
        assert_eq!(refused(&listed, "https://10.1.2.3/hook"), None);
        assert!(refused(&listed, "https://192.168.1.1/hook").is_some());
    }
}
