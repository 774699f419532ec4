//! The client's address of a request: the TCP peer, or, when the peer is a trusted reverse
//! proxy (`[http] trusted_proxies`), the client address the proxies forwarded.
//!
//! Each proxy appends the address it got the request from to `X-Forwarded-For` (or RFC 7239
//! `Forwarded: for=`), after whatever the client sent in that header itself. So only the
//! right end of the list is vouched for: walking it from the right, past addresses of trusted
//! proxies, the first address that is not one is the client. Everything left of it may be
//! made up. An entry that names no address (`unknown`, an obfuscated `_name`, garbage) ends
//! the walk at the last proxy reached.
//!
//! With no trusted proxies (the default) nobody is believed: a client cannot pick the address
//! the login limits count it under by sending these headers.

use std::net::{IpAddr, SocketAddr};

use http::HeaderMap;

use crate::core::config::{ClientAddressHeader, HttpConfig};

/// The client's address of a request from `peer` with `headers`.
pub fn client_address(peer: IpAddr, headers: &HeaderMap, http: &HttpConfig) -> IpAddr {
    let trusted = |ip: IpAddr| http.trusted_proxies.iter().any(|range| range.contains(ip));
    let mut client = peer.to_canonical();
    if !trusted(client) {
        return client;
    }
    for hop in forwarded_chain(headers, http.client_address_header)
        .into_iter()
        .rev()
    {
        match hop {
            Some(ip) => client = ip.to_canonical(),
            None => break,
        }
        if !trusted(client) {
            break;
        }
    }
    client
}

/// The addresses of `header`, left to right over all its lines; `None` for an entry that
/// names no address. Bytes that are not text spoil only their own entry, so the ones a proxy
/// appended after them still count.
fn forwarded_chain(headers: &HeaderMap, header: ClientAddressHeader) -> Vec<Option<IpAddr>> {
    let (name, parse): (&str, fn(&str) -> Option<IpAddr>) = match header {
        ClientAddressHeader::XForwardedFor => ("x-forwarded-for", node),
        ClientAddressHeader::Forwarded => ("forwarded", forwarded_for),
    };
    headers
        .get_all(name)
        .iter()
        .flat_map(|line| {
            String::from_utf8_lossy(line.as_bytes())
                .split(',')
                .map(|entry| parse(entry.trim()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The `for=` node of one `Forwarded` element (`for=192.0.2.1;proto=https`).
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        name.eq_ignore_ascii_case("for")
            .then(|| node(value.trim().trim_matches('"')))
            .flatten()
    })
}

/// An address, maybe with a port: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`,
/// `[2001:db8::1]`, `[2001:db8::1]:4711`.
fn node(text: &str) -> Option<IpAddr> {
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| text.strip_prefix('[')?.strip_suffix(']')?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::Cidr;
    use http::HeaderValue;

    fn http(trusted: &[&str], header: ClientAddressHeader) -> HttpConfig {
        HttpConfig {
            trusted_proxies: trusted.iter().map(|c| Cidr::parse(c).unwrap()).collect(),
            client_address_header: header,
            ..HttpConfig::default()
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn client(peer: &str, lines: &[(&'static str, &str)], http: &HttpConfig) -> IpAddr {
        let mut headers = HeaderMap::new();
        for (name, value) in lines {
            headers.append(*name, HeaderValue::from_str(value).unwrap());
        }
        client_address(ip(peer), &headers, http)
    }

    #[test]
    fn nobody_is_trusted_by_default() {
        let none = HttpConfig::default();
        let xff = [("x-forwarded-for", "203.0.113.7")];
        assert_eq!(client("192.0.2.1", &xff, &none), ip("192.0.2.1"));
        let fwd = [("forwarded", "for=203.0.113.7")];
        assert_eq!(client("192.0.2.1", &fwd, &none), ip("192.0.2.1"));
    }

    #[test]
    fn x_forwarded_for_is_read_right_to_left_past_trusted_proxies() {
        let http = http(&["10.0.0.0/8"], ClientAddressHeader::XForwardedFor);
        // One proxy: what it appended. The client's own (made-up) entries are not believed.
        let one = [("x-forwarded-for", "198.51.100.1, 203.0.113.7")];
        assert_eq!(client("10.0.0.1", &one, &http), ip("203.0.113.7"));
        // Two proxies, over two header lines.
        let two = [
            ("x-forwarded-for", "198.51.100.1, 203.0.113.7"),
            ("x-forwarded-for", "10.0.0.2"),
        ];
        assert_eq!(client("10.0.0.1", &two, &http), ip("203.0.113.7"));
        // Every entry a proxy: the left-most.
        let all = [("x-forwarded-for", "10.1.1.1, 10.0.0.2")];
        assert_eq!(client("10.0.0.1", &all, &http), ip("10.1.1.1"));
        // An entry that names no address ends the walk at the last proxy reached.
        let garbage = [("x-forwarded-for", "203.0.113.7, unknown, 10.0.0.2")];
        assert_eq!(client("10.0.0.1", &garbage, &http), ip("10.0.0.2"));
        // Bytes that are not text spoil only their entry.
        let mut headers = HeaderMap::new();
        let line = HeaderValue::from_bytes(b"198.51.100.\xff, 203.0.113.7").unwrap();
        headers.append("x-forwarded-for", line);
        assert_eq!(
            client_address(ip("10.0.0.1"), &headers, &http),
            ip("203.0.113.7")
        );
        // No header: the proxy itself.
        assert_eq!(client("10.0.0.1", &[], &http), ip("10.0.0.1"));
        // A peer outside the ranges is the client, whatever it sends.
        assert_eq!(client("192.0.2.1", &one, &http), ip("192.0.2.1"));
        // The `Forwarded` header is not read when the proxies use X-Forwarded-For.
        let fwd = [
            ("forwarded", "for=198.51.100.9"),
            ("x-forwarded-for", "203.0.113.7"),
        ];
        assert_eq!(client("10.0.0.1", &fwd, &http), ip("203.0.113.7"));
    }

    #[test]
    fn forwarded_for_nodes_in_every_form() {
        let http = http(&["10.0.0.0/8", "fd00::/8"], ClientAddressHeader::Forwarded);
        for (line, want) in [
            ("for=203.0.113.7", "203.0.113.7"),
            ("for=\"203.0.113.7:4711\";proto=https", "203.0.113.7"),
            ("proto=https;For=\"[2001:db8::17]:4711\"", "2001:db8::17"),
            (
                "for=\"[2001:db8::17]\", for=10.0.0.2;by=10.0.0.1",
                "2001:db8::17",
            ),
            ("for=203.0.113.7, for=_hidden", "fd00::1"),
            ("by=10.0.0.1", "fd00::1"),
        ] {
            let headers = [("forwarded", line)];
            assert_eq!(client("fd00::1", &headers, &http), ip(want), "{line}");
        }
        // X-Forwarded-For is not read when the proxies use Forwarded.
        let xff = [("x-forwarded-for", "203.0.113.7")];
        assert_eq!(client("10.0.0.1", &xff, &http), ip("10.0.0.1"));
    }

    #[test]
    fn ipv4_mapped_peers_and_entries_are_plain_ipv4() {
        let http = http(&["10.0.0.0/8"], ClientAddressHeader::XForwardedFor);
        let xff = [("x-forwarded-for", "::ffff:203.0.113.7")];
        assert_eq!(client("::ffff:10.0.0.1", &xff, &http), ip("203.0.113.7"));
    }
}
