//! Configuration: the TOML file, its defaults, `INTAKE_*` environment overrides, and (in
//! `cli`) command-line overrides, in that order of precedence from lowest to highest.
//!
//! Every option and its default is documented in `intake.toml.example`; keep the two in step.
//! Unknown keys and bad values are refused at start with a message that names the key (or the
//! environment variable). The configuration serialises back to TOML for `intake check`, with
//! every [`Secret`] masked.
//!
//! This file holds [`Config`], its loading and the order its rules are checked in. Each
//! section is in a file of its own with its defaults and its rules (`validate`): `http`
//! (`[http]` and `[tls]`), `storage`, `webhooks`, `telemetry`, `smtp`, and `sections` for the
//! small ones; `values` holds the value types they share (secrets, address ranges,
//! durations), `urls` the masking of configured URLs, and `env` the `INTAKE_*` overrides.

mod env;
mod http;
mod sections;
mod smtp;
mod storage;
mod telemetry;
mod urls;
mod values;
mod webhooks;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use self::http::{ClientAddressHeader, HttpConfig, TlsConfig};
pub use env::CLI_VARIABLES;
pub use sections::{
    AccountsConfig, BackupConfig, MIN_PRODUCTION_RETENTION, MIN_SANDBOX_RETENTION,
    OperationsConfig, PollConfig, RequestLogConfig, RetentionConfig, SearchConfig, ShutdownConfig,
    StreamConfig, UsageConfig,
};
pub use smtp::{SmtpConfig, SmtpSecurity};
pub use storage::{
    PostgresConfig, PostgresTls, StorageBackend, StorageConfig, masked_postgres_url,
};
pub use telemetry::{Collector, OtlpEndpoint, TelemetryConfig};
pub use urls::{masked_url, percent_decode};
pub use values::{Cidr, Secret, format_duration, parse_duration};
pub use webhooks::{ProxyUrl, WebhooksConfig};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Invalid { path: String, message: String },
    #[error("environment variable {variable}: {message}")]
    Env { variable: String, message: String },
}

/// The store's file in the data dir (and its member in a backup archive).
pub const STORE_FILE: &str = "intake.redb";
/// The request log's file in the data dir.
pub const REQUEST_LOG_FILE: &str = "requests.redb";

/// The effective configuration of one server.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the HTTP server binds.
    pub listen: SocketAddr,
    /// Folder of this node's files: the key-encryption key (`master.key`) and, on redb, the
    /// store, the request log and the search index.
    pub data_dir: PathBuf,
    /// The address users reach this server at, used in links sent by e-mail (invitations).
    /// Defaults to `http://` + the address the server listens on. When set, a browser's form
    /// posts must come from its origin (`dashboard::security::same_origin`), as they do
    /// behind a reverse proxy that rewrites `Host`.
    pub public_url: Option<String>,
    pub storage: StorageConfig,
    pub poll: PollConfig,
    pub stream: StreamConfig,
    pub telemetry: TelemetryConfig,
    pub retention: RetentionConfig,
    pub request_log: RequestLogConfig,
    pub search: SearchConfig,
    pub shutdown: ShutdownConfig,
    pub accounts: AccountsConfig,
    pub usage: UsageConfig,
    pub webhooks: WebhooksConfig,
    /// The SMTP server e-mail goes through; absent, e-mail stays queued in the outbox.
    pub smtp: Option<SmtpConfig>,
    pub operations: OperationsConfig,
    pub http: HttpConfig,
    /// `[tls]`: serve HTTPS; absent, plain HTTP (see `tls`).
    pub tls: Option<TlsConfig>,
    pub backup: BackupConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("./intake-data"),
            public_url: None,
            storage: StorageConfig::default(),
            poll: PollConfig::default(),
            stream: StreamConfig::default(),
            telemetry: TelemetryConfig::default(),
            retention: RetentionConfig::default(),
            request_log: RequestLogConfig::default(),
            search: SearchConfig::default(),
            shutdown: ShutdownConfig::default(),
            accounts: AccountsConfig::default(),
            usage: UsageConfig::default(),
            webhooks: WebhooksConfig::default(),
            smtp: None,
            operations: OperationsConfig::default(),
            http: HttpConfig::default(),
            tls: None,
            backup: BackupConfig::default(),
        }
    }
}

impl Config {
    /// Reads `path` when given (otherwise starts from the defaults), then applies the
    /// `INTAKE_*` variables of the process environment.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        Config::load_with_env(path, std::env::vars_os())
    }

    /// [`Config::load`] with the environment given: see [`env::overrides`].
    pub fn load_with_env(
        path: Option<&Path>,
        vars: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Result<Config, ConfigError> {
        let text = match path {
            Some(path) => std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.display().to_string(),
                source,
            })?,
            None => String::new(),
        };
        let source = path.map_or_else(|| "(defaults)".to_string(), |p| p.display().to_string());
        let invalid = |source: String| {
            move |message| ConfigError::Invalid {
                path: source,
                message,
            }
        };
        let overrides = env::overrides(vars)?;
        if overrides.is_empty() {
            return Config::parse(&text).map_err(invalid(source));
        }
        let mut table: toml::Table =
            toml::from_str(&text).map_err(|e| invalid(source.clone())(e.to_string()))?;
        for (variable, key, value) in overrides {
            env::apply(&mut table, &variable, &key, value)?;
        }
        let merged = toml::to_string(&table).map_err(|e| invalid(source.clone())(e.to_string()))?;
        Config::parse(&merged).map_err(invalid(format!(
            "{source} with the INTAKE_* environment variables"
        )))
    }

    /// Parses TOML text; the error text names the offending key and line.
    pub fn parse(text: &str) -> Result<Config, String> {
        let config: Config =
            toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        config.validate()?;
        Ok(config)
    }

    /// Rules between values that the types alone do not enforce: the top-level keys', then
    /// each section's, in this order (the first broken rule is the one reported).
    pub fn validate(&self) -> Result<(), String> {
        if let Some(url) = &self.public_url {
            validate_public_url(url)?;
        }
        self.accounts.validate()?;
        self.retention.validate()?;
        if let Some(smtp) = &self.smtp {
            smtp.validate()?;
        }
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
        self.http.validate()?;
        self.storage.validate()?;
        self.stream.validate(self.http.max_connections)?;
        self.telemetry.validate()?;
        self.search.validate()?;
        self.backup.validate()?;
        self.webhooks.validate()
    }

    /// The base of links sent to users, without a trailing slash.
    pub fn public_url(&self) -> String {
        match &self.public_url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => format!("{}://{}", self.scheme(), self.listen),
        }
    }

    /// Whether cookies are `Secure`: when the server itself serves https, or its public URL
    /// is https (TLS ended by a proxy in front).
    pub fn secure_cookies(&self) -> bool {
        self.tls.is_some() || self.public_url().starts_with("https://")
    }

    /// `https` when `[tls]` is configured, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join(STORE_FILE)
    }

    pub fn request_log_path(&self) -> PathBuf {
        self.data_dir.join(REQUEST_LOG_FILE)
    }
}

/// `public_url`: an http:// or https:// URL with a host name and no credentials.
fn validate_public_url(url: &str) -> Result<(), String> {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err("public_url must start with http:// or https://".into());
    }
    // Its origin is the one the dashboard's forms must come from: it needs a host.
    // `::http` is the crate, not the `[http]` section's module.
    let authority = url
        .parse::<::http::Uri>()
        .ok()
        .filter(|uri| uri.host().is_some())
        .and_then(|uri| uri.authority().cloned());
    let Some(authority) = authority else {
        return Err(format!(
            "public_url {:?} is not a URL with a host name",
            masked_url(url)
        ));
    };
    // It begins every link intake sends and shows: credentials in it would go to every
    // reader of an e-mail.
    if authority.as_str().contains('@') {
        return Err(
            "public_url cannot carry credentials (user:password@): it begins every link \
             intake sends"
                .into(),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::parse("").unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.data_dir, PathBuf::from("./intake-data"));
        assert_eq!(c.request_log.retention, Duration::from_secs(14 * 86_400));
    }

    #[test]
    fn reads_every_key() {
        let c = Config::parse(
            "listen = \"0.0.0.0:9000\"\ndata_dir = \"/var/lib/intake\"\n\
             [storage]\ncache_mb = 16\n[request_log]\nretention = \"2d\"\n[shutdown]\ngrace = \"500ms\"\n",
        )
        .unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.request_log.retention, Duration::from_secs(172_800));
        assert_eq!(c.shutdown.grace, Duration::from_millis(500));
        assert_eq!(c.storage.cache_mb, 16);
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        let err = Config::parse("lisen = \"x\"").unwrap_err();
        assert!(err.contains("lisen"), "{err}");
        let err = Config::parse("[request_log]\nretention = \"10 parsecs\"").unwrap_err();
        assert!(err.contains("retention"), "{err}");
        let err = Config::parse("listen = \"nowhere\"").unwrap_err();
        assert!(err.contains("listen"), "{err}");
        let err = Config::parse("[request_log]\nkeep = 1").unwrap_err();
        assert!(err.contains("keep"), "{err}");
    }

    #[test]
    fn ingest_writers_are_one_on_redb_and_within_the_pool_on_postgres() {
        let postgres = |extra: &str| {
            Config::parse(&format!(
                "[storage]\nbackend = \"postgres\"\n[storage.postgres]\nurl = \"host=db\"\n{extra}"
            ))
        };
        assert_eq!(Config::parse("").unwrap().storage.ingest_writers(), 1);
        assert_eq!(postgres("").unwrap().storage.ingest_writers(), 4);
        let c = postgres("pool_size = 4\ningest_writers = 3").unwrap();
        assert_eq!(c.storage.ingest_writers(), 3);
        // Unset, they leave a connection of a small pool to the rest of the node.
        assert_eq!(
            postgres("pool_size = 3").unwrap().storage.ingest_writers(),
            2
        );
        for bad in ["ingest_writers = 0", "pool_size = 4\ningest_writers = 4"] {
            let err = postgres(bad).unwrap_err();
            assert!(err.contains("ingest_writers"), "{bad}: {err}");
        }
        // The redb backend ignores the PostgreSQL section's writers: one write at a time.
        let c = Config::parse("[storage.postgres]\nurl = \"host=db\"\ningest_writers = 8").unwrap();
        assert_eq!(c.storage.ingest_writers(), 1);
    }

    #[test]
    fn the_example_file_parses_with_every_option_uncommented() {
        let text: String = include_str!("../../../intake.toml.example")
            .lines()
            .map(|line| {
                let rest = line.strip_prefix("# ").unwrap_or(line);
                let is_setting = rest == "[smtp]"
                    || rest == "[tls]"
                    || rest == "[storage.postgres]"
                    || rest.split_once(" = ").is_some_and(|(key, _)| {
                        key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                    });
                if is_setting { rest } else { line }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let c = Config::parse(&text).unwrap();
        assert_eq!(c.public_url.as_deref(), Some("https://intake.example.com"));
        let smtp = c.smtp.unwrap();
        assert_eq!(smtp.host, "smtp.example.com");
        assert_eq!(smtp.port(), 587);
        assert_eq!(smtp.timeout, Duration::from_secs(30));
        let tls = c.tls.unwrap();
        assert_eq!(
            tls.cert.as_deref(),
            Some(Path::new("/etc/intake/tls/fullchain.pem"))
        );
        assert_eq!(tls.redirect_listen.map(|a| a.port()), Some(80));
        assert_eq!(c.operations.ready_max_index_lag, 10_000);
        assert!(c.operations.metrics_token.is_some());
        assert_eq!(
            c.backup.dir.as_deref(),
            Some(Path::new("/var/lib/intake/backups"))
        );
        assert_eq!(c.backup.keep, 7);
        assert_eq!(c.storage.backend, StorageBackend::Redb);
        let postgres = c.storage.postgres.unwrap();
        assert!(postgres.url.expose().starts_with("postgresql://"));
        assert_eq!(postgres.pool_size, 16);
        assert_eq!(postgres.tls, PostgresTls::VerifyFull);
        assert_eq!(postgres.lease, Duration::from_secs(10));
        assert_eq!(postgres.connect_timeout, Duration::from_secs(2));
        assert_eq!(postgres.request_timeout, Duration::from_secs(2));
    }
}
