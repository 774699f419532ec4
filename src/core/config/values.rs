//! The value types the sections share: secrets, address ranges and durations, and the serde
//! helpers that read and print them.

use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A configured secret: its `Debug` prints `"***"`, so logging a config never reveals it.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(text: impl Into<String>) -> Secret {
        Secret(text.into())
    }

    /// The secret itself, for the one place that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// Serialised masked: the only serialisation of a config is `intake check`'s printout.
impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("***")
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"***\"")
    }
}

/// An address range written `address/prefix-length` (`10.0.0.0/8`, `fd00::/8`); a bare
/// address is the range of that one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl Cidr {
    pub fn parse(text: &str) -> Option<Cidr> {
        let (address, prefix) = match text.trim().split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text.trim(), None),
        };
        let network: IpAddr = address.parse().ok()?;
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse().ok().filter(|p| *p <= bits)?,
            None => bits,
        };
        Some(Cidr { network, prefix })
    }

    /// Whether `ip` is in the range. An IPv4 address and its IPv4-mapped IPv6 form
    /// (`::ffff:10.0.0.1`) are the same address: a range written in either form holds both.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let shift = |bits: u32| bits.saturating_sub(u32::from(self.prefix));
        match self.network {
            IpAddr::V4(net) => match ip.to_canonical() {
                IpAddr::V4(ip) => {
                    let s = shift(32);
                    u32::from(net).checked_shr(s).unwrap_or(0)
                        == u32::from(ip).checked_shr(s).unwrap_or(0)
                }
                IpAddr::V6(_) => false,
            },
            IpAddr::V6(net) => {
                let ip = match ip {
                    IpAddr::V4(ip) => ip.to_ipv6_mapped(),
                    IpAddr::V6(ip) => ip,
                };
                let s = shift(128);
                u128::from(net).checked_shr(s).unwrap_or(0)
                    == u128::from(ip).checked_shr(s).unwrap_or(0)
            }
        }
    }
}

/// The shortest exact way to write `d` in the config's duration syntax.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms % 1000 != 0 {
        return format!("{ms}ms");
    }
    let secs = d.as_secs();
    for (unit, factor) in [("d", 86_400), ("h", 3600), ("m", 60)] {
        if secs != 0 && secs % factor == 0 {
            return format!("{}{unit}", secs / factor);
        }
    }
    format!("{secs}s")
}

pub(super) fn ser_duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_duration(*d))
}

pub(super) fn ser_opt_duration<S: Serializer>(
    d: &Option<Duration>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => s.serialize_str(&format_duration(*d)),
        None => s.serialize_none(),
    }
}

pub(super) fn ser_display<S: Serializer>(
    value: &impl std::fmt::Display,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}

pub(super) fn ser_cidrs<S: Serializer>(cidrs: &[Cidr], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(cidrs.iter().map(Cidr::to_string))
}

/// Parses durations written as `500ms`, `60s`, `5m`, `24h` or `7d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("duration {text:?} needs a unit (ms, s, m, h or d)"))?;
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("duration {text:?} must start with a whole number"))?;
    let secs = |factor: u64| {
        n.checked_mul(factor)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("duration {text:?} is too large"))
    };
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        "d" => secs(86_400),
        _ => Err(format!(
            "duration {text:?} has an unknown unit {unit:?} (use ms, s, m, h or d)"
        )),
    }
}

pub(super) fn de_cidrs<'de, D: Deserializer<'de>>(d: D, key: &str) -> Result<Vec<Cidr>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|text| {
            Cidr::parse(text).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "{key}: {text:?} is not an address range \
                     (write \"10.0.0.0/8\" or \"fd00::/8\")"
                ))
            })
        })
        .collect()
}

pub(super) fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

pub(super) fn de_opt_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_in_their_shortest_exact_unit() {
        for text in [
            "500ms", "1500ms", "0s", "59s", "1m", "90m", "1h", "25h", "1d", "60d",
        ] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("5").is_err());
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("5w").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
    }
}
