//! The small sections of the config, each a struct with its defaults and its rules
//! (`validate`, called by `Config::validate`).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::values::{
    Secret, de_duration, de_opt_duration, format_duration, ser_duration, ser_opt_duration,
};

/// `[poll]`: the oldest-first feed (see `domain::poll`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct PollConfig {
    /// The least a record is held back from poll after its created_at (see `poll`).
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub hold_back: Duration,
}

impl Default for PollConfig {
    fn default() -> Self {
        PollConfig {
            hold_back: Duration::from_secs(60),
        }
    }
}

/// `[stream]`: the change stream, `GET /api/v1/data/{slug}/stream` (see `domain::stream`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamConfig {
    /// A comment line goes out after this long without an event, so proxies and clients see
    /// the connection is alive.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub heartbeat: Duration,
    /// Streams one API key may hold open at once; one more is refused with 429.
    pub max_per_key: usize,
    /// What a stream may hold that its reader has not taken yet, in KiB.
    pub buffer_kb: usize,
    /// A reader that leaves the buffer full this long is sent a `stream_reader_too_slow` error
    /// event and disconnected.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub slow_reader_timeout: Duration,
    /// On a shared store: how often a stream looks for events committed by other nodes.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub cluster_poll: Duration,
    /// Streams this node holds open in all; one more is refused with 503. Unset: half of
    /// `[http] max_connections`, so streams never take the connections data calls need.
    pub max_total: Option<usize>,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            heartbeat: Duration::from_secs(15),
            max_per_key: 10,
            buffer_kb: 256,
            slow_reader_timeout: Duration::from_secs(30),
            cluster_poll: Duration::from_millis(250),
            max_total: None,
        }
    }
}

impl StreamConfig {
    /// The most streams a node holds open: `max_total`, or half of the connections it serves.
    pub fn total_cap(&self, max_connections: usize) -> usize {
        self.max_total.unwrap_or((max_connections / 2).max(1))
    }

    /// The rules of `[stream]`; `max_connections` is `[http]`'s, which data calls need too.
    pub(super) fn validate(&self, max_connections: usize) -> Result<(), String> {
        if self.heartbeat < Duration::from_millis(10) {
            return Err("stream.heartbeat must be at least \"10ms\"".into());
        }
        if self.max_per_key == 0 {
            return Err("stream.max_per_key must be at least 1".into());
        }
        // A record's payload is at most 100 KB: one event must always fit.
        if self.buffer_kb < 128 {
            return Err("stream.buffer_kb must be at least 128".into());
        }
        if self.slow_reader_timeout < Duration::from_millis(10) {
            return Err("stream.slow_reader_timeout must be at least \"10ms\"".into());
        }
        if self.cluster_poll < Duration::from_millis(10) {
            return Err("stream.cluster_poll must be at least \"10ms\"".into());
        }
        if self
            .max_total
            .is_some_and(|total| total == 0 || total >= max_connections)
        {
            return Err(
                "stream.max_total must be at least 1 and below http.max_connections, which \
                 data calls need too"
                    .into(),
            );
        }
        Ok(())
    }
}

/// `[retention]`: how long records are kept (see `domain::retention`): the server's default
/// of each environment, which an endpoint's owner may change for the endpoint within the
/// minimums and `max`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// How long sandbox records are kept (at least one day).
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub sandbox: Duration,
    /// How long production records are kept (at least 60 days, as the spec promises).
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub production: Duration,
    /// The longest window an endpoint may set for either environment; none when unset.
    #[serde(
        deserialize_with = "de_opt_duration",
        serialize_with = "ser_opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub max: Option<Duration>,
}

pub const MIN_PRODUCTION_RETENTION: Duration = Duration::from_secs(60 * 86_400);
pub const MIN_SANDBOX_RETENTION: Duration = Duration::from_secs(86_400);

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            sandbox: Duration::from_secs(30 * 86_400),
            production: MIN_PRODUCTION_RETENTION,
            max: None,
        }
    }
}

impl RetentionConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.production < MIN_PRODUCTION_RETENTION {
            return Err("retention.production must be at least \"60d\"".into());
        }
        if self.sandbox < MIN_SANDBOX_RETENTION {
            return Err("retention.sandbox must be at least \"1d\"".into());
        }
        if let Some(max) = self.max {
            if max < MIN_PRODUCTION_RETENTION {
                return Err(
                    "retention.max must be at least \"60d\" (production records are \
                            kept at least that long)"
                        .into(),
                );
            }
            for (key, default) in [("sandbox", self.sandbox), ("production", self.production)] {
                if default > max {
                    return Err(format!(
                        "retention.{key} ({}) must not be longer than retention.max ({})",
                        format_duration(default),
                        format_duration(max)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// `[request_log]`: the per-endpoint call log (see `workers::request_log`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestLogConfig {
    /// How long request-log entries are kept.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub retention: Duration,
}

impl Default for RequestLogConfig {
    fn default() -> Self {
        RequestLogConfig {
            retention: Duration::from_secs(14 * 86_400),
        }
    }
}

/// `[search]`: the search indexer (see `workers::search_index`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SearchConfig {
    /// Nice value (0 to 19) of the threads that build the search index. Above 0 they yield the
    /// CPU to requests and durable writes when both want it: a write burst is acknowledged
    /// sooner and the index catches up after it (searches stay exact meanwhile: they check
    /// the records not yet indexed in the store, see `search`).
    pub indexer_nice: i32,
    /// Memory (MB, at least 15) the indexer may fill with documents before it writes them into
    /// a segment: more means fewer, larger segments and less merging; it is allocated only
    /// while records are being indexed.
    pub index_memory_mb: usize,
    /// A trigram found in more than this share (0 to 1) of the indexed records is left out of
    /// the index from then on: such trigrams make up most of an index's tokens but hardly
    /// narrow a query down. 1 keeps every trigram.
    pub stop_share: f64,
    /// No trigram is left out before the index holds this many records.
    pub stop_min_records: u64,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig {
            indexer_nice: 10,
            index_memory_mb: 50,
            stop_share: 0.05,
            stop_min_records: 10_000,
        }
    }
}

impl SearchConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if !(0..=19).contains(&self.indexer_nice) {
            return Err("search.indexer_nice must be from 0 to 19".into());
        }
        if self.index_memory_mb < 15 {
            return Err("search.index_memory_mb must be at least 15".into());
        }
        if !(self.stop_share > 0.0 && self.stop_share <= 1.0) {
            return Err("search.stop_share must be above 0 and at most 1".into());
        }
        Ok(())
    }
}

/// `[shutdown]`: the graceful shutdown (see `server`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownConfig {
    /// How long a graceful shutdown waits for in-flight requests before closing them.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub grace: Duration,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        ShutdownConfig {
            grace: Duration::from_secs(10),
        }
    }
}

/// `[accounts]`: dashboard logins and invitations (see `domain::sessions`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccountsConfig {
    /// How long a dashboard login lasts.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub session_ttl: Duration,
    /// How long an invitation link can be accepted.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub invitation_ttl: Duration,
    /// Failed logins allowed per account from one client address within `login_window`; then
    /// that address may not log in to that account (other addresses still may).
    pub login_failures_per_account: u32,
    /// Failed logins allowed per client address, whatever the accounts, within `login_window`.
    pub login_failures_per_address: u32,
    /// The sliding window failed logins are counted in (see `sessions::LoginLimiter`).
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub login_window: Duration,
}

impl Default for AccountsConfig {
    fn default() -> Self {
        AccountsConfig {
            session_ttl: Duration::from_secs(24 * 3600),
            invitation_ttl: Duration::from_secs(7 * 86_400),
            login_failures_per_account: 5,
            login_failures_per_address: 20,
            login_window: Duration::from_secs(15 * 60),
        }
    }
}

impl AccountsConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.session_ttl < Duration::from_secs(60) {
            return Err("accounts.session_ttl must be at least \"1m\"".into());
        }
        if self.invitation_ttl < Duration::from_secs(60) {
            return Err("accounts.invitation_ttl must be at least \"1m\"".into());
        }
        if self.login_failures_per_account == 0 || self.login_failures_per_address == 0 {
            return Err("accounts.login_failures_per_account and login_failures_per_address must be at least 1".into());
        }
        Ok(())
    }
}

/// `[usage]`: the quota of data calls (see `domain::usage`).
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsageConfig {
    /// Data calls allowed per endpoint, environment and calendar month (UTC); absent means
    /// unlimited. The owner can override it per endpoint.
    pub monthly_quota: Option<u64>,
}

/// `[operations]`: readiness, metrics and backups (see `health`, `metrics`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct OperationsConfig {
    /// When set, `GET /metrics` needs `Authorization: Bearer <token>`.
    pub metrics_token: Option<Secret>,
    /// `/readyz` fails while the search index is more change-log entries behind than this.
    pub ready_max_index_lag: u64,
}

impl Default for OperationsConfig {
    fn default() -> Self {
        OperationsConfig {
            metrics_token: None,
            ready_max_index_lag: 10_000,
        }
    }
}

/// `[backup]`: the backups SIGUSR1 writes (see `backup`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackupConfig {
    /// Folder of the backups taken on SIGUSR1; absent, SIGUSR1 takes none.
    pub dir: Option<PathBuf>,
    /// How many of those backups are kept; older ones are deleted after each new one.
    pub keep: usize,
}

impl Default for BackupConfig {
    fn default() -> Self {
        BackupConfig { dir: None, keep: 7 }
    }
}

impl BackupConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        if self.keep == 0 {
            return Err("backup.keep must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::Config;

    #[test]
    fn streams_keep_connections_for_data_calls() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.stream.total_cap(c.http.max_connections), 500);
        let c = Config::parse("[http]\nmax_connections = 24\n").unwrap();
        assert_eq!(c.stream.total_cap(c.http.max_connections), 12);
        let c = Config::parse("[http]\nmax_connections = 1\n").unwrap();
        assert_eq!(c.stream.total_cap(c.http.max_connections), 1);
        let c = Config::parse("[stream]\nmax_total = 900\n").unwrap();
        assert_eq!(c.stream.total_cap(c.http.max_connections), 900);
        for bad in ["0", "1000", "5000"] {
            let err = Config::parse(&format!("[stream]\nmax_total = {bad}")).unwrap_err();
            assert!(err.contains("stream.max_total"), "{err}");
        }
    }

    #[test]
    fn indexer_nice_is_a_nice_value() {
        assert_eq!(Config::parse("").unwrap().search.indexer_nice, 10);
        let c = Config::parse("[search]\nindexer_nice = 0").unwrap();
        assert_eq!(c.search.indexer_nice, 0);
        for bad in ["-1", "20"] {
            let err = Config::parse(&format!("[search]\nindexer_nice = {bad}")).unwrap_err();
            assert!(err.contains("search.indexer_nice"), "{err}");
        }
    }

    #[test]
    fn poll_and_retention() {
        let c =
            Config::parse("[poll]\nhold_back = \"0s\"\n[retention]\nsandbox = \"7d\"\n").unwrap();
        assert_eq!(c.poll.hold_back, Duration::ZERO);
        assert_eq!(c.retention.sandbox, Duration::from_secs(7 * 86_400));
        assert_eq!(c.retention.production, MIN_PRODUCTION_RETENTION);
        let err = Config::parse("[retention]\nproduction = \"30d\"").unwrap_err();
        assert!(err.contains("retention.production"), "{err}");
        let err = Config::parse("[retention]\nsandbox = \"1h\"").unwrap_err();
        assert!(err.contains("retention.sandbox"), "{err}");
    }
}
