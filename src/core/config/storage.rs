//! `[storage]` and `[storage.postgres]`: where the data is kept, and how `intake check` prints
//! the database URL.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use super::urls::UrlParts;
use super::values::{Secret, de_duration, ser_duration};

/// `[storage]`: which backend keeps the data, and the limits of the data dir.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Where the data is kept: the embedded redb file (one node), or a PostgreSQL database
    /// shared by any number of nodes.
    pub backend: StorageBackend,
    /// Size of redb's page cache in MiB: most of the server's memory use.
    pub cache_mb: usize,
    /// Writes are refused (503 `storage_full`) while the data dir's file system has less than
    /// this many MiB free; 0 turns the check off (see `Store::write`).
    pub min_free_mb: u64,
    /// `[storage.postgres]`: required with `backend = "postgres"`.
    pub postgres: Option<PostgresConfig>,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            backend: StorageBackend::Redb,
            cache_mb: 64,
            min_free_mb: 64,
            postgres: None,
        }
    }
}

impl StorageConfig {
    pub fn min_free_bytes(&self) -> u64 {
        self.min_free_mb.saturating_mul(1024 * 1024)
    }

    /// How many ingest batches a node commits at once: one on redb (it has one write
    /// transaction at a time), `[storage.postgres] ingest_writers` on PostgreSQL.
    pub fn ingest_writers(&self) -> usize {
        match (self.backend, &self.postgres) {
            (StorageBackend::Postgres, Some(pg)) => pg
                .ingest_writers
                .unwrap_or(DEFAULT_INGEST_WRITERS.min(pg.pool_size.saturating_sub(1))),
            _ => 1,
        }
    }

    pub(super) fn validate(&self) -> Result<(), String> {
        match (self.backend, &self.postgres) {
            (StorageBackend::Postgres, None) => Err(
                "storage.backend = \"postgres\" needs a [storage.postgres] section with its url"
                    .into(),
            ),
            (StorageBackend::Postgres, Some(pg)) => pg.validate(),
            (StorageBackend::Redb, _) => Ok(()),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageBackend {
    Redb,
    Postgres,
}

/// A node's ingest writers on PostgreSQL unless `ingest_writers` says otherwise
/// (docs/src/benchmarks.md, "PostgreSQL").
pub const DEFAULT_INGEST_WRITERS: usize = 4;

/// `[storage.postgres]`: the database several nodes share (docs/src/scale-out.md).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PostgresConfig {
    /// A libpq-style URL (`postgresql://user:password@host:5432/db`) or key/value string
    /// (`host=... user=... dbname=...`), with one host or several (`h1:5432,h2:5432`, tried
    /// in turn). It may hold a password, so it is a [`Secret`], printed by `intake check`
    /// with only the password masked ([`masked_postgres_url`]).
    #[serde(serialize_with = "ser_postgres_url")]
    pub url: Secret,
    /// Most connections this node opens.
    pub pool_size: usize,
    /// How many ingest batches this node commits at once, each a transaction on a connection
    /// of its own: one writer spends most of its time waiting on the database's round trips
    /// and fsync (docs/src/benchmarks.md, "PostgreSQL"). At most `pool_size - 1`; unset,
    /// [`DEFAULT_INGEST_WRITERS`] or `pool_size - 1` if that is fewer.
    pub ingest_writers: Option<usize>,
    /// The most one host of the URL may take to give a connection: TCP connect, TLS, login
    /// and the `target_session_attrs` check together, as libpq's `connect_timeout`. Then the
    /// next host is tried.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub connect_timeout: Duration,
    /// The most a request waits for the database: a unit of work of the data path (taking a
    /// connection, its statements, its commit) that has no answer by then is abandoned and
    /// the request answered 503 `storage_unavailable` (docs/src/scale-out.md, "Failover").
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub request_timeout: Duration,
    /// TLS to the database; the URL's `sslmode` is ignored in favour of this.
    pub tls: PostgresTls,
    /// PEM file of the certificate authorities that may sign the server's certificate with
    /// `tls = "verify-full"`; absent, the Mozilla roots built into the binary.
    pub ca_file: Option<PathBuf>,
    /// How long a node's claim (its poll low-water mark, a webhook delivery or e-mail it is
    /// sending, a periodic job) holds without renewal: a node that dies holds the poll feed
    /// and its claims back by at most this long.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub lease: Duration,
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            url: Secret::new(""),
            pool_size: 16,
            ingest_writers: None,
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(2),
            tls: PostgresTls::VerifyFull,
            ca_file: None,
            lease: Duration::from_secs(10),
        }
    }
}

impl PostgresConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.url.expose().trim().is_empty() {
            return Err("storage.postgres.url is required".into());
        }
        if self.pool_size < 2 {
            return Err("storage.postgres.pool_size must be at least 2".into());
        }
        if let Some(writers) = self.ingest_writers
            && (writers == 0 || writers >= self.pool_size)
        {
            return Err(format!(
                "storage.postgres.ingest_writers must be from 1 to pool_size - 1 ({})",
                self.pool_size - 1
            ));
        }
        if self.lease < Duration::from_secs(1) {
            return Err("storage.postgres.lease must be at least \"1s\"".into());
        }
        for (key, value) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
        ] {
            if value < Duration::from_millis(100) {
                return Err(format!("storage.postgres.{key} must be at least \"100ms\""));
            }
        }
        Ok(())
    }
}

/// How a node talks TLS to PostgreSQL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PostgresTls {
    /// No TLS (a database on loopback or a private network the operator trusts).
    Disable,
    /// TLS required, the server's certificate verified against the roots and its host name.
    VerifyFull,
}

/// `[storage.postgres] url` as `intake check` prints it: the hosts, ports, database and
/// parameters as written, only the password masked (`user:***@` in a URL, `password=***` as a
/// URL's parameter or in the key/value form), so an operator sees which servers a node uses.
/// Text it cannot take apart is masked whole.
pub fn masked_postgres_url(url: &str) -> String {
    const UNREADABLE: &str = "***";
    let url = url.trim();
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return masked_key_values(url).unwrap_or_else(|| UNREADABLE.into());
    }
    let parts = UrlParts::of(url);
    let before_query = url.split('?').next().unwrap_or_default();
    if parts.userinfo.is_none() && before_query.contains('@') {
        // An `@` after a `/`: a password with an unencoded `/`, perhaps.
        return UNREADABLE.into();
    }
    let userinfo = match parts.userinfo {
        Some(userinfo) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@"),
            None => format!("{userinfo}@"),
        },
        None => String::new(),
    };
    let tail = match parts.tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some(("password", _)) => "password=***".to_string(),
                    _ => pair.to_string(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => parts.tail.to_string(),
    };
    format!("{}{userinfo}{}{tail}", parts.scheme, parts.host)
}

/// A libpq key/value string (`host=a password='x y' dbname=b`) with the value of `password`
/// replaced by `***`, everything else as written; `None` unless it is made of `key=value`
/// pairs.
fn masked_key_values(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let trimmed = rest.trim_start();
        out.push_str(&rest[..rest.len() - trimmed.len()]);
        rest = trimmed;
        if rest.is_empty() {
            return Some(out);
        }
        // The key runs to `=` or a space; spaces may surround the `=`.
        let key_end = rest
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(rest.len());
        let key = &rest[..key_end];
        let value_start = rest[key_end..].trim_start().strip_prefix('=')?;
        let value_start = value_start.trim_start();
        let separator = &rest[key_end..rest.len() - value_start.len()];
        let value_len = key_value_length(value_start);
        out.push_str(key);
        out.push_str(separator);
        if key == "password" {
            out.push_str("***");
        } else {
            out.push_str(&value_start[..value_len]);
        }
        rest = &value_start[value_len..];
    }
}

/// The length of the value at the start of `text`: a single-quoted string (with `\'` and
/// `\\` escapes), or everything up to the next unescaped space.
fn key_value_length(text: &str) -> usize {
    let quoted = text.starts_with('\'');
    let mut escaped = false;
    for (at, c) in text.char_indices().skip(usize::from(quoted)) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '\'' if quoted => return at + 1,
            c if !quoted && c.is_whitespace() => return at,
            _ => {}
        }
    }
    text.len()
}

fn ser_postgres_url<S: Serializer>(url: &Secret, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&masked_postgres_url(url.expose()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::Config;

    #[test]
    fn a_postgres_url_is_printed_with_its_hosts_and_only_the_password_masked() {
        for (url, masked) in [
            (
                "postgresql://intake:s3cret@db1:5432,db2:5433/intake?target_session_attrs=read-write",
                "postgresql://intake:***@db1:5432,db2:5433/intake?target_session_attrs=read-write",
            ),
            (
                "postgres://intake@[::1]:5432/intake?password=s3cret&sslmode=disable",
                "postgres://intake@[::1]:5432/intake?password=***&sslmode=disable",
            ),
            ("postgresql://db/intake", "postgresql://db/intake"),
            ("postgresql://u:p/s3cret@db/intake", "***"),
            (
                "host=db1,db2 port=5432,5433 user=intake password=s3cret dbname=intake",
                "host=db1,db2 port=5432,5433 user=intake password=*** dbname=intake",
            ),
            (
                "host = db1  password = 'with \\' s3cret spaces' target_session_attrs=read-write",
                "host = db1  password = *** target_session_attrs=read-write",
            ),
            ("password=s3cret\\ x host=db", "password=*** host=db"),
            ("s3cret host=db", "***"),
        ] {
            assert_eq!(masked_postgres_url(url), masked, "{url}");
        }
        let c = Config::parse(
            "[storage.postgres]\nurl = \"postgresql://intake:s3cret@db1:5432,db2:5433/intake\"\n",
        )
        .unwrap();
        let printed = toml::to_string(&c).unwrap();
        assert!(
            printed.contains("url = \"postgresql://intake:***@db1:5432,db2:5433/intake\""),
            "{printed}"
        );
        for shown in [printed, format!("{c:?}")] {
            assert!(!shown.contains("s3cret"), "{shown}");
        }
    }

    #[test]
    fn postgres_timeouts_below_a_tenth_of_a_second_are_refused_by_name() {
        for key in ["connect_timeout", "request_timeout"] {
            let err = Config::parse(&format!(
                "[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = \"host=db\"\n{key} = \"50ms\"\n"
            ))
            .unwrap_err();
            assert!(err.contains(&format!("storage.postgres.{key}")), "{err}");
        }
    }
}
