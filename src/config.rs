//! Configuration: the TOML file, its defaults, and command-line overrides.
//!
//! Every option and its default is documented in `intake.toml.example`; keep the two in step.
//! Unknown keys and bad values are refused at start with a message that names the key.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use lettre::message::Mailbox;
use serde::{Deserialize, Deserializer};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Invalid { path: String, message: String },
}

/// The effective configuration of one server.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the HTTP server binds.
    pub listen: SocketAddr,
    /// Folder holding the redb file, the key-encryption key and (later) the search index.
    pub data_dir: PathBuf,
    /// The address users reach this server at, used in links sent by e-mail (invitations).
    /// Defaults to `http://` + the address the server listens on.
    pub public_url: Option<String>,
    pub storage: StorageConfig,
    pub poll: PollConfig,
    pub retention: RetentionConfig,
    pub request_log: RequestLogConfig,
    pub shutdown: ShutdownConfig,
    pub accounts: AccountsConfig,
    pub usage: UsageConfig,
    pub webhooks: WebhooksConfig,
    /// The SMTP server e-mail goes through; absent, e-mail stays queued in the outbox.
    pub smtp: Option<SmtpConfig>,
    pub operations: OperationsConfig,
    /// `[tls]`: serve HTTPS; absent, plain HTTP (see `tls`).
    pub tls: Option<TlsConfig>,
}

/// `[tls]`: the certificate to serve and the optional plain-HTTP redirect listener.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM file of the certificate chain, leaf first.
    pub cert: Option<PathBuf>,
    /// PEM file of the private key (PKCS#8, PKCS#1 or SEC1).
    pub key: Option<PathBuf>,
    /// Generate (once) and serve a self-signed certificate for localhost, kept in the data dir.
    pub self_signed: bool,
    /// Address of a plain-HTTP listener that only redirects to `public_url` (308).
    pub redirect_listen: Option<SocketAddr>,
}

impl TlsConfig {
    fn validate(&self) -> Result<(), String> {
        match (&self.cert, &self.key, self.self_signed) {
            (Some(_), Some(_), false) | (None, None, true) => Ok(()),
            (_, _, true) => {
                Err("tls.self_signed = true and tls.cert / tls.key exclude each other".into())
            }
            _ => Err("tls.cert and tls.key go together (or set tls.self_signed = true)".into()),
        }
    }
}

/// `[operations]`: readiness, metrics and backups (see `health`, `metrics`).
#[derive(Clone, Debug, Deserialize)]
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

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AccountsConfig {
    /// How long a dashboard login lasts.
    #[serde(deserialize_with = "de_duration")]
    pub session_ttl: Duration,
    /// How long an invitation link can be accepted.
    #[serde(deserialize_with = "de_duration")]
    pub invitation_ttl: Duration,
    /// Failed logins allowed per account within `login_window` before logins are refused.
    pub login_failures_per_account: u32,
    /// Failed logins allowed per client address within `login_window`.
    pub login_failures_per_address: u32,
    #[serde(deserialize_with = "de_duration")]
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

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsageConfig {
    /// Data calls allowed per endpoint, environment and calendar month (UTC); absent means
    /// unlimited. The owner can override it per endpoint.
    pub monthly_quota: Option<u64>,
}

/// `[webhooks]`: how deliveries are sent (see `webhooks::dispatch`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhooksConfig {
    /// Threads sending deliveries; retries may use at most half of them.
    pub workers: usize,
    /// Attempts in flight to one receiver (host and port) at most.
    pub per_target_concurrency: usize,
    /// Limit of one attempt: connecting, sending, and reading the answer.
    #[serde(deserialize_with = "de_duration")]
    pub timeout: Duration,
    /// Deliver to loopback, private and other non-global addresses too.
    pub allow_private_targets: bool,
    /// Non-global ranges deliveries may go to anyway, e.g. `"10.0.0.0/8"`.
    #[serde(deserialize_with = "de_cidrs")]
    pub allowed_cidrs: Vec<Cidr>,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        WebhooksConfig {
            workers: 8,
            per_target_concurrency: 4,
            timeout: Duration::from_secs(15),
            allow_private_targets: false,
            allowed_cidrs: Vec::new(),
        }
    }
}

impl WebhooksConfig {
    fn validate(&self) -> Result<(), String> {
        if !(1..=256).contains(&self.workers) {
            return Err("webhooks.workers must be from 1 to 256".into());
        }
        if !(1..=256).contains(&self.per_target_concurrency) {
            return Err("webhooks.per_target_concurrency must be from 1 to 256".into());
        }
        if self.timeout.is_zero() || self.timeout > Duration::from_secs(300) {
            return Err("webhooks.timeout must be more than 0 and at most \"5m\"".into());
        }
        Ok(())
    }
}

/// An address range written `address/prefix-length` (`10.0.0.0/8`, `fd00::/8`); a bare
/// address is the range of that one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    network: IpAddr,
    prefix: u8,
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

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// Size of redb's page cache in MiB: most of the server's memory use.
    pub cache_mb: usize,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig { cache_mb: 64 }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PollConfig {
    /// The least a record is held back from poll after its created_at (see `poll`).
    #[serde(deserialize_with = "de_duration")]
    pub hold_back: Duration,
}

impl Default for PollConfig {
    fn default() -> Self {
        PollConfig {
            hold_back: Duration::from_secs(60),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// How long sandbox records are kept (at least one day).
    #[serde(deserialize_with = "de_duration")]
    pub sandbox: Duration,
    /// How long production records are kept (at least 60 days, as the spec promises).
    #[serde(deserialize_with = "de_duration")]
    pub production: Duration,
}

pub const MIN_PRODUCTION_RETENTION: Duration = Duration::from_secs(60 * 86_400);
pub const MIN_SANDBOX_RETENTION: Duration = Duration::from_secs(86_400);

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            sandbox: Duration::from_secs(30 * 86_400),
            production: MIN_PRODUCTION_RETENTION,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestLogConfig {
    /// How long request-log entries are kept.
    #[serde(deserialize_with = "de_duration")]
    pub retention: Duration,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownConfig {
    /// How long a graceful shutdown waits for in-flight requests before closing them.
    #[serde(deserialize_with = "de_duration")]
    pub grace: Duration,
}

/// `[smtp]`: where and how outgoing e-mail is delivered (see `mail`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpConfig {
    pub host: String,
    /// Absent: the usual port of `security` (see [`SmtpConfig::port`]).
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub security: SmtpSecurity,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<Secret>,
    /// The `From` of every message: `addr@example.com` or `Name <addr@example.com>`.
    #[serde(deserialize_with = "de_mailbox")]
    pub from: Mailbox,
    /// Limit of connecting and of each SMTP command.
    #[serde(default = "default_smtp_timeout", deserialize_with = "de_duration")]
    pub timeout: Duration,
}

impl SmtpConfig {
    /// The configured port, else the usual one of the security mode.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(match self.security {
            SmtpSecurity::Starttls => 587,
            SmtpSecurity::Tls => 465,
            SmtpSecurity::None => 25,
        })
    }

    fn validate(&self) -> Result<(), String> {
        if self.host.is_empty() || self.host.chars().any(char::is_whitespace) {
            return Err("smtp.host must be a host name or IP address".into());
        }
        if self.port == Some(0) {
            return Err("smtp.port must be from 1 to 65535".into());
        }
        if self.username.is_some() != self.password.is_some() {
            return Err("smtp.username and smtp.password go together: set both or neither".into());
        }
        if self.timeout.is_zero() {
            return Err("smtp.timeout must be more than 0".into());
        }
        Ok(())
    }
}

fn default_smtp_timeout() -> Duration {
    Duration::from_secs(30)
}

/// How the connection to the SMTP server is protected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SmtpSecurity {
    /// Plain connection upgraded with STARTTLS; refused if the server cannot upgrade.
    #[default]
    Starttls,
    /// TLS from the first byte (SMTPS).
    Tls,
    /// No encryption: only for a relay on the same host or a trusted network.
    None,
}

impl SmtpSecurity {
    pub fn as_str(self) -> &'static str {
        match self {
            SmtpSecurity::Starttls => "starttls",
            SmtpSecurity::Tls => "tls",
            SmtpSecurity::None => "none",
        }
    }
}

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

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("\"***\"")
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("./intake-data"),
            public_url: None,
            storage: StorageConfig::default(),
            poll: PollConfig::default(),
            retention: RetentionConfig::default(),
            request_log: RequestLogConfig::default(),
            shutdown: ShutdownConfig::default(),
            accounts: AccountsConfig::default(),
            usage: UsageConfig::default(),
            webhooks: WebhooksConfig::default(),
            smtp: None,
            operations: OperationsConfig::default(),
            tls: None,
        }
    }
}

impl Default for RequestLogConfig {
    fn default() -> Self {
        RequestLogConfig {
            retention: Duration::from_secs(14 * 86_400),
        }
    }
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        ShutdownConfig {
            grace: Duration::from_secs(10),
        }
    }
}

impl Config {
    /// Reads `path` when given, otherwise starts from the embedded defaults.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let Some(path) = path else {
            return Ok(Config::default());
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text).map_err(|message| ConfigError::Invalid {
            path: path.display().to_string(),
            message,
        })
    }

    /// Parses TOML text; the error text names the offending key and line.
    pub fn parse(text: &str) -> Result<Config, String> {
        let config: Config =
            toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        config.validate()?;
        Ok(config)
    }

    /// Rules between values that the types alone do not enforce.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(url) = &self.public_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err("public_url must start with http:// or https://".into());
        }
        if self.accounts.session_ttl < Duration::from_secs(60) {
            return Err("accounts.session_ttl must be at least \"1m\"".into());
        }
        if self.accounts.invitation_ttl < Duration::from_secs(60) {
            return Err("accounts.invitation_ttl must be at least \"1m\"".into());
        }
        if self.accounts.login_failures_per_account == 0
            || self.accounts.login_failures_per_address == 0
        {
            return Err("accounts.login_failures_per_account and login_failures_per_address must be at least 1".into());
        }
        if self.retention.production < MIN_PRODUCTION_RETENTION {
            return Err("retention.production must be at least \"60d\"".into());
        }
        if self.retention.sandbox < MIN_SANDBOX_RETENTION {
            return Err("retention.sandbox must be at least \"1d\"".into());
        }
        if let Some(smtp) = &self.smtp {
            smtp.validate()?;
        }
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
        self.webhooks.validate()
    }

    /// The base of links sent to users, without a trailing slash.
    pub fn public_url(&self) -> String {
        match &self.public_url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None => format!("{}://{}", self.scheme(), self.listen),
        }
    }

    /// `https` when `[tls]` is configured, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("intake.redb")
    }

    pub fn request_log_path(&self) -> PathBuf {
        self.data_dir.join("requests.redb")
    }
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

fn de_mailbox<'de, D: Deserializer<'de>>(d: D) -> Result<Mailbox, D::Error> {
    let text = String::deserialize(d)?;
    text.parse().map_err(|_| {
        serde::de::Error::custom(format!(
            "smtp.from {text:?} is not an e-mail address \
             (write \"intake@example.com\" or \"Intake <intake@example.com>\")"
        ))
    })
}

fn de_cidrs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Cidr>, D::Error> {
    Vec::<String>::deserialize(d)?
        .iter()
        .map(|text| {
            Cidr::parse(text).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "webhooks.allowed_cidrs: {text:?} is not an address range \
                     (write \"10.0.0.0/8\" or \"fd00::/8\")"
                ))
            })
        })
        .collect()
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn smtp_is_optional_and_has_defaults() {
        assert!(Config::parse("").unwrap().smtp.is_none());
        let c =
            Config::parse("[smtp]\nhost = \"mail.example.com\"\nfrom = \"intake@example.com\"\n")
                .unwrap();
        let smtp = c.smtp.unwrap();
        assert_eq!(smtp.host, "mail.example.com");
        assert_eq!(smtp.security, SmtpSecurity::Starttls);
        assert_eq!(smtp.port(), 587);
        assert_eq!(smtp.timeout, Duration::from_secs(30));
        assert!(smtp.username.is_none() && smtp.password.is_none());
        assert_eq!(smtp.from.email.to_string(), "intake@example.com");
    }

    #[test]
    fn smtp_reads_every_key_and_ports_follow_security() {
        let base = "[smtp]\nhost = \"h\"\nfrom = \"Intake <i@example.com>\"\n";
        let port = |extra: &str| {
            Config::parse(&format!("{base}{extra}"))
                .unwrap()
                .smtp
                .unwrap()
                .port()
        };
        assert_eq!(port("security = \"tls\""), 465);
        assert_eq!(port("security = \"none\""), 25);
        assert_eq!(port("security = \"none\"\nport = 2525"), 2525);
        let c = Config::parse(&format!(
            "{base}security = \"tls\"\nport = 1465\nusername = \"u\"\npassword = \"hunter2\"\n\
             timeout = \"5s\"\n"
        ))
        .unwrap();
        let smtp = c.smtp.as_ref().unwrap();
        assert_eq!(smtp.username.as_deref(), Some("u"));
        assert_eq!(smtp.password.as_ref().map(Secret::expose), Some("hunter2"));
        assert_eq!(smtp.timeout, Duration::from_secs(5));
        assert_eq!(smtp.from.name.as_deref(), Some("Intake"));
        let debug = format!("{c:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("***"), "{debug}");
    }

    #[test]
    fn smtp_errors_name_the_key() {
        let base = "[smtp]\nhost = \"h\"\n";
        let err = |extra: &str| Config::parse(&format!("{base}{extra}")).unwrap_err();
        let e = err("");
        assert!(e.contains("from"), "{e}");
        let e = err("from = \"not an address\"");
        assert!(e.contains("smtp.from"), "{e}");
        let e = err("from = \"a@example.com\"\nsecurity = \"ssl\"");
        assert!(e.contains("security"), "{e}");
        let e = err("from = \"a@example.com\"\nusername = \"u\"");
        assert!(e.contains("smtp.password"), "{e}");
        let e = err("from = \"a@example.com\"\npassword = \"p\"");
        assert!(e.contains("smtp.username"), "{e}");
        let e = err("from = \"a@example.com\"\nuser = \"u\"");
        assert!(e.contains("user"), "{e}");
        let e = err("from = \"a@example.com\"\ntimeout = \"0s\"");
        assert!(e.contains("smtp.timeout"), "{e}");
        let e = err("from = \"a@example.com\"\nport = 0");
        assert!(e.contains("smtp.port"), "{e}");
        let e = Config::parse("[smtp]\nfrom = \"a@example.com\"").unwrap_err();
        assert!(e.contains("host"), "{e}");
        let e = Config::parse("[smtp]\nhost = \"\"\nfrom = \"a@example.com\"").unwrap_err();
        assert!(e.contains("smtp.host"), "{e}");
    }

    #[test]
    fn the_example_file_parses_with_every_option_uncommented() {
        let text: String = include_str!("../intake.toml.example")
            .lines()
            .map(|line| {
                let rest = line.strip_prefix("# ").unwrap_or(line);
                let is_setting = rest == "[smtp]"
                    || rest == "[tls]"
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
    }

    #[test]
    fn tls_needs_cert_and_key_or_self_signed() {
        assert!(Config::parse("").unwrap().tls.is_none());
        assert_eq!(Config::parse("").unwrap().scheme(), "http");
        let c = Config::parse("[tls]\nself_signed = true\n").unwrap();
        assert_eq!(c.scheme(), "https");
        assert!(c.public_url().starts_with("https://127.0.0.1:8080"));
        Config::parse("[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n").unwrap();
        for text in [
            "[tls]\n",
            "[tls]\ncert = \"c.pem\"\n",
            "[tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nself_signed = true\n",
        ] {
            let err = Config::parse(text).unwrap_err();
            assert!(err.contains("tls."), "{text}: {err}");
        }
        let err = Config::parse("[tls]\nself_signed = true\nredirect = \"x\"").unwrap_err();
        assert!(err.contains("redirect"), "{err}");
    }

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
