//! The rows every backend keeps: plain data types, no storage types. Services build and read
//! them; each backend decides how to lay them out (redb keeps most as JSON, see `redb`).
//!
//! One file per area (`accounts`, `endpoints`, `erasures`, `records`, `webhooks`, `mail`), all re-exported
//! here; this file keeps what they share: environments, partitions (an endpoint's data in one
//! environment), stored time keys and the base64 form of byte fields.

mod accounts;
mod endpoints;
mod erasures;
mod mail;
mod records;
mod webhooks;

use serde::{Deserialize, Serialize};

pub use self::accounts::*;
pub use self::endpoints::*;
pub use self::erasures::*;
pub use self::mail::*;
pub use self::records::*;
pub use self::webhooks::*;
use crate::core::clock::Timestamp;

/// sandbox or production.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Environment {
    Sandbox,
    Production,
}

impl Environment {
    pub const ALL: [Environment; 2] = [Environment::Sandbox, Environment::Production];

    pub fn as_str(self) -> &'static str {
        match self {
            Environment::Sandbox => "sandbox",
            Environment::Production => "production",
        }
    }

    pub fn parse(s: &str) -> Option<Environment> {
        match s {
            "sandbox" => Some(Environment::Sandbox),
            "production" => Some(Environment::Production),
            _ => None,
        }
    }

    /// The API key prefix of this environment.
    pub fn key_prefix(self) -> &'static str {
        match self {
            Environment::Sandbox => "tm_test_",
            Environment::Production => "tm_live_",
        }
    }
}

/// One endpoint's data in one environment: the unit records, events, deliveries, usage counts,
/// webhook settings and request-log entries are kept and read by.
///
/// A store keeps it as its raw number, `endpoint_id << 1 | environment` (production 1), so an
/// endpoint's two partitions sort together; [`Partition::raw`] and [`Partition::from_raw`] are
/// for that boundary (a table key, a column, a cursor's bytes) only.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Partition(u64);

impl Partition {
    pub fn new(endpoint_id: u64, environment: Environment) -> Partition {
        Partition((endpoint_id << 1) | u64::from(environment == Environment::Production))
    }

    /// The endpoint whose data it holds.
    pub fn endpoint(self) -> u64 {
        self.0 >> 1
    }

    pub fn environment(self) -> Environment {
        if self.0 & 1 == 1 {
            Environment::Production
        } else {
            Environment::Sandbox
        }
    }

    /// The partition a stored number names.
    pub const fn from_raw(raw: u64) -> Partition {
        Partition(raw)
    }

    /// The number a store keeps.
    pub const fn raw(self) -> u64 {
        self.0
    }
}

/// Logs name a partition by its stored number, as they always have.
impl std::fmt::Display for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Stored times are non-negative microseconds.
pub fn time_key(t: Timestamp) -> u64 {
    u64::try_from(t.as_micros()).unwrap_or(0)
}

/// The smallest record id with this created_at: ids below it were created before `t` (a
/// record id begins with its created_at, `RecordId`).
pub fn first_id_at(t: Timestamp) -> u128 {
    u128::from(time_key(t)) << 64
}

pub fn time_from_key(k: u64) -> Timestamp {
    Timestamp(i64::try_from(k).unwrap_or(i64::MAX))
}

/// Byte fields of JSON rows as base64 text rather than arrays of numbers.
mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = <&str>::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

/// Optional byte fields of JSON rows as base64 text or `null`.
mod base64_bytes_opt {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(bytes) => s.serialize_some(&STANDARD.encode(bytes)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        match Option::<String>::deserialize(d)? {
            Some(text) => STANDARD
                .decode(text)
                .map(Some)
                .map_err(serde::de::Error::custom),
            None => Ok(None),
        }
    }
}
