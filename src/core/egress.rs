//! Where webhooks may go: the rule the delivery guard applies to every resolved address
//! (`workers::dispatcher::send`) and the subscription settings apply when a URL is saved
//! (`domain::webhooks::targets`), so both refuse the same targets for the same reason.
//!
//! By default only global addresses pass: a webhook URL is chosen by an API caller and must
//! not reach this server's own network. `[webhooks] allow_private_targets` lifts the rule;
//! `allowed_cidrs` lets listed ranges through.

use std::net::IpAddr;
use std::sync::Arc;

use crate::core::config::{Cidr, WebhooksConfig};

/// The server's rule for webhook target addresses.
#[derive(Clone, Debug)]
pub struct TargetPolicy {
    allow_private: bool,
    allowed: Arc<[Cidr]>,
}

impl TargetPolicy {
    pub fn new(config: &WebhooksConfig) -> TargetPolicy {
        TargetPolicy::with(config.allow_private_targets, config.allowed_cidrs.clone())
    }

    pub fn with(allow_private: bool, allowed: Vec<Cidr>) -> TargetPolicy {
        TargetPolicy {
            allow_private,
            allowed: Arc::from(allowed),
        }
    }

    /// Whether a delivery may connect to `ip`.
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.allow_private || is_global(ip) || self.allowed.iter().any(|c| c.contains(ip))
    }
}

/// Why a delivery to `ip` is not made, for the attempt log and the settings page.
pub fn refusal(ip: IpAddr) -> String {
    format!(
        "target address {ip} is not allowed (private or loopback); set \
         webhooks.allow_private_targets or webhooks.allowed_cidrs"
    )
}

/// Whether `ip` is a public, globally routed address.
pub fn is_global(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(a) => {
            let [first, second, third, _] = a.octets();
            !(a.is_private()
                || a.is_loopback()
                || a.is_link_local()
                || a.is_unspecified()
                || a.is_broadcast()
                || a.is_multicast()
                || a.is_documentation()
                || first == 0
                || first >= 240
                // 100.64.0.0/10 shared (carrier-grade NAT), 198.18.0.0/15 benchmarking,
                // 192.0.0.0/24 protocol assignments.
                || (first == 100 && second & 0xc0 == 64)
                || (first == 198 && second & 0xfe == 18)
                || (first == 192 && second == 0 && third == 0))
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            let v4 = |hi: u16, lo: u16| IpAddr::V4(((u32::from(hi) << 16) | u32::from(lo)).into());
            // Addresses that carry an IPv4 address, which a relay or the host's own stack may
            // reach: each is judged by what it carries.
            // (IPv4-mapped `::ffff:0:0/96` is made IPv4 by `to_canonical` above.)
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
                || s[..6] == [0, 0, 0, 0, 0, 0]
                || s[..6] == [0, 0, 0, 0, 0xffff, 0]
            {
                // NAT64 (64:ff9b::/96), IPv4-compatible (::/96, with :: and ::1 in it),
                // IPv4-translated (::ffff:0:0:0/96, RFC 2765).
                return is_global(v4(s[6], s[7]));
            }
            if s[0] == 0x2002 {
                // 6to4 (2002::/16): the relay's IPv4 address follows the prefix.
                return is_global(v4(s[1], s[2]));
            }
            if s[0] == 0x2001 && s[1] == 0 {
                // Teredo (2001::/32): the server's IPv4 address, then the client's, inverted.
                return is_global(v4(s[2], s[3])) && is_global(v4(!s[6], !s[7]));
            }
            !(a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                || s[0] & 0xfe00 == 0xfc00
                || s[0] & 0xffc0 == 0xfe80
                || s[0] & 0xffc0 == 0xfec0
                // 64:ff9b:1::/48 local-use NAT64 (its IPv4 address may sit anywhere after
                // the prefix, so none is read out of it), 100::/64 discard-only.
                || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1)
                || s[..4] == [0x100, 0, 0, 0]
                // Documentation 2001:db8::/32 and 3fff::/20, benchmarking 2001:2::/48,
                // ORCHIDv2 2001:20::/28, segment routing 5f00::/16: never a receiver.
                || (s[0] == 0x2001 && s[1] == 0x0db8)
                || (s[0] == 0x3fff && s[1] & 0xf000 == 0)
                || s[..3] == [0x2001, 2, 0]
                || (s[0] == 0x2001 && s[1] & 0xfff0 == 0x20)
                || s[0] == 0x5f00)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn only_global_addresses_pass_by_default() {
        for text in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
        ] {
            assert!(is_global(ip(text)), "{text}");
        }
        for text in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "100.64.0.1",
            "192.0.2.1",
            "240.0.0.1",
            "::1",
            "::",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
            "2001:db8::1",
            // IPv4-compatible, 6to4 and Teredo addresses carrying a refused IPv4 address.
            "::127.0.0.1",
            "::10.0.0.1",
            "::169.254.169.254",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            "2002:c0a8:101:1::1",
            // Teredo: server 10.0.0.1; client 127.0.0.1 (inverted: 80ff:fffe).
            "2001:0:a00:1::808:808",
            "2001:0:808:808::80ff:fffe",
            "64:ff9b:1::808:808",
            "100::1",
        ] {
            assert!(!is_global(ip(text)), "{text}");
        }
        for text in [
            "64:ff9b::808:808",
            "::8.8.8.8",
            "2002:808:808::1",
            // Teredo: server 8.8.8.8, client 1.1.1.1 (inverted: fefe:fefe).
            "2001:0:808:808::fefe:fefe",
        ] {
            assert!(is_global(ip(text)), "{text}");
        }
    }

    /// Every IPv6 form that carries an IPv4 address passes exactly when the address it
    /// carries would: one refused and one allowed case per form.
    #[test]
    fn each_embedded_ipv4_form_is_judged_by_its_ipv4_address() {
        for (form, refused, allowed) in [
            (
                "IPv4-mapped ::ffff:0:0/96",
                "::ffff:169.254.169.254",
                "::ffff:8.8.8.8",
            ),
            (
                "IPv4-translated ::ffff:0:0:0/96",
                "::ffff:0:127.0.0.1",
                "::ffff:0:8.8.8.8",
            ),
            (
                "IPv4-translated ::ffff:0:0:0/96",
                "::ffff:0:10.20.30.40",
                "::ffff:0:1.1.1.1",
            ),
            (
                "IPv4-translated ::ffff:0:0:0/96",
                "::ffff:0:169.254.169.254",
                "::ffff:0:9.9.9.9",
            ),
            (
                "NAT64 64:ff9b::/96",
                "64:ff9b::127.0.0.1",
                "64:ff9b::8.8.8.8",
            ),
            ("IPv4-compatible ::/96", "::10.0.0.1", "::8.8.8.8"),
            ("6to4 2002::/16", "2002:a9fe:a9fe::1", "2002:808:808::1"),
            // Server 127.0.0.1, client 1.1.1.1 (inverted); both global in the allowed one.
            (
                "Teredo 2001::/32",
                "2001:0:7f00:1::fefe:fefe",
                "2001:0:808:808::fefe:fefe",
            ),
            // Server 8.8.8.8, client 192.168.1.1 (inverted: 3f57:fefe).
            (
                "Teredo 2001::/32",
                "2001:0:808:808::3f57:fefe",
                "2001:0:101:101::f7f7:f7f7",
            ),
        ] {
            assert!(!is_global(ip(refused)), "{form}: {refused}");
            assert!(is_global(ip(allowed)), "{form}: {allowed}");
        }
        // Local-use NAT64 (64:ff9b:1::/48) puts its IPv4 address where the network chooses,
        // so it is refused whatever it seems to carry.
        for text in [
            "64:ff9b:1::808:808",
            "64:ff9b:1:808:808::",
            "64:ff9b:1::7f00:1",
        ] {
            assert!(!is_global(ip(text)), "{text}");
        }
    }

    #[test]
    fn special_purpose_ipv6_ranges_are_not_global() {
        for text in [
            // Documentation (RFC 3849, RFC 9637), benchmarking, ORCHIDv2, segment routing.
            "2001:db8::1",
            "3fff::1",
            "3fff:fff:ffff::1",
            "2001:2::1",
            "2001:20::1",
            "2001:2f:ffff::1",
            "5f00::1",
        ] {
            assert!(!is_global(ip(text)), "{text}");
        }
        // Just outside the documentation /20; an ordinary global unicast address.
        for text in ["3fff:1000::1", "2a00:1450::1"] {
            assert!(is_global(ip(text)), "{text}");
        }
    }

    #[test]
    fn the_policy_honours_its_settings() {
        let policy = |allow_private, cidrs: &[&str]| {
            TargetPolicy::with(
                allow_private,
                cidrs.iter().map(|c| Cidr::parse(c).unwrap()).collect(),
            )
        };
        assert!(!policy(false, &[]).allows(ip("127.0.0.1")));
        assert!(policy(true, &[]).allows(ip("127.0.0.1")));
        let some = policy(false, &["10.0.0.0/8"]);
        assert!(some.allows(ip("10.9.8.7")));
        assert!(!some.allows(ip("192.168.0.1")));
        assert!(some.allows(ip("8.8.8.8")));
        assert!(refusal(ip("127.0.0.1")).starts_with("target address 127.0.0.1 is not allowed"));
    }
}
