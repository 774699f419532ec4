//! A subscription's URL made ready to save: normalised and checked as a URL
//! ([`valid_url`]), then checked against the server's egress rule ([`TargetPolicy`]), in that
//! order, so the rule judges exactly the URL that is stored. A target every delivery would be
//! refused is refused at once, with the reason, instead of leaving deliveries that fail one
//! by one.
//!
//! The check resolves the host the way a delivery would. It is advice at save time, not the
//! guard: DNS answers change, so `workers::dispatcher::send` still checks every address of
//! every attempt. A name that does not resolve now (no DNS here, or not yet published) is
//! accepted; its deliveries report what they find. Since it tells whoever saves what a name
//! resolves to, it runs only after the caller's right to change the subscription was checked.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::core::egress::{self, TargetPolicy};
use crate::domain::error::{Error, Result};
use crate::domain::webhooks::deliveries::valid_url;

/// How long a save waits for the host's addresses.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(3);

/// `text` as the URL to store: 400 `invalid_webhook` unless [`valid_url`] takes it, then 400
/// `webhook_target_refused` when every address its host resolves to is refused by `policy`,
/// saying which address and which setting would allow it.
pub async fn checked_url(policy: &TargetPolicy, text: &str) -> Result<String> {
    let url = valid_url(text)?;
    let Some(host) = url.uri.host() else {
        return Err(Error::InvalidWebhook("a webhook URL needs a host".into()));
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = url
        .uri
        .port_u16()
        .unwrap_or(if url.uri.scheme_str() == Some("http") {
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
            _ => return Ok(url.text),
        },
    };
    match addresses.iter().find(|ip| !policy.allows(**ip)) {
        Some(refused) if addresses.iter().all(|ip| !policy.allows(*ip)) => {
            Err(Error::WebhookTargetRefused(format!(
                "Deliveries to {host} would be refused by this server's egress rule: {}.",
                egress::refusal(*refused)
            )))
        }
        _ => Ok(url.text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::Cidr;

    fn checked(policy: &TargetPolicy, url: &str) -> Result<String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(checked_url(policy, url))
    }

    fn refused(policy: &TargetPolicy, url: &str) -> Option<String> {
        match checked(policy, url) {
            Err(Error::WebhookTargetRefused(reason)) => Some(reason),
            Err(other) => panic!("unexpected error {other}"),
            Ok(_) => None,
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
        assert!(refused(&strict, "http://[::ffff:0:7f00:1]/hook").is_some());
        assert_eq!(refused(&strict, "https://8.8.8.8/hook"), None);
        // Not resolvable here: accepted, its deliveries report what they find.
        assert_eq!(refused(&strict, "https://no-such-host.invalid/hook"), None);
    }

    #[test]
    fn whitespace_around_a_url_is_dropped_before_the_rule_judges_it() {
        let strict = TargetPolicy::with(false, Vec::new());
        for (text, address) in [
            (" http://127.0.0.1:9001/", "127.0.0.1"),
            ("\thttp://10.0.0.1/", "10.0.0.1"),
            ("http://169.254.169.254/\r\n", "169.254.169.254"),
            ("\n https://[::1]/hook \t", "::1"),
        ] {
            let reason = refused(&strict, text).unwrap_or_else(|| panic!("{text:?} passed"));
            assert!(reason.contains(address), "{text:?}: {reason}");
        }
        assert_eq!(
            checked(&strict, "  https://8.8.8.8/hook\n").unwrap(),
            "https://8.8.8.8/hook"
        );
    }

    #[test]
    fn a_url_that_does_not_parse_is_refused_not_waved_through() {
        let open = TargetPolicy::with(true, Vec::new());
        for text in [
            "http://127.0.0.1 /hook",
            "http://[::1/hook",
            "not a url",
            "/relative/path",
            "",
        ] {
            match checked(&open, text) {
                Err(Error::InvalidWebhook(_)) => {}
                other => panic!("{text:?}: {other:?}"),
            }
        }
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
