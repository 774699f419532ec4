//! Configuration: the TOML file, its defaults, `INTAKE_*` environment overrides, and (in
//! `cli`) command-line overrides, in that order of precedence from lowest to highest.
//!
//! Every option and its default is documented in `intake.toml.example`; keep the two in step.
//! Unknown keys and bad values are refused at start with a message that names the key (or the
//! environment variable). The configuration serialises back to TOML for `intake check`, with
//! every [`Secret`] masked.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use lettre::message::Mailbox;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

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
    /// Folder holding the redb file, the key-encryption key and (later) the search index.
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

/// `[tls]`: the certificate to serve and the optional plain-HTTP redirect listener.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
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

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsageConfig {
    /// Data calls allowed per endpoint, environment and calendar month (UTC); absent means
    /// unlimited. The owner can override it per endpoint.
    pub monthly_quota: Option<u64>,
}

/// `[telemetry]`: traces exported over OTLP/HTTP (see `core::telemetry`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP endpoint, such as `http://127.0.0.1:4318` (spans go to its
    /// `/v1/traces`, or to the URL as given when it has a path); absent, no traces.
    pub otlp_endpoint: Option<OtlpEndpoint>,
    /// The `service.name` of every span.
    pub service_name: String,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            service_name: "intake".into(),
        }
    }
}

impl TelemetryConfig {
    fn validate(&self) -> Result<(), String> {
        if let Some(endpoint) = &self.otlp_endpoint {
            endpoint.collector()?;
        }
        if self.service_name.trim().is_empty() {
            return Err("telemetry.service_name must not be empty".into());
        }
        Ok(())
    }
}

/// `[telemetry] otlp_endpoint` as written. A `user:password@` in it is the collector's
/// credentials, sent as HTTP Basic auth (see [`Collector`]); every printout and message shows
/// it through [`masked_url`], and its `Debug` too.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct OtlpEndpoint(String);

/// Where the exporter sends spans, from [`OtlpEndpoint::collector`].
#[derive(Debug)]
pub struct Collector {
    /// The endpoint without its userinfo (query and path as written).
    pub url: String,
    /// `user` and `password` of `user:password@` (a lone `user@` has an empty password),
    /// percent-decoded.
    pub credentials: Option<(String, Secret)>,
}

impl OtlpEndpoint {
    /// The collector's URL and credentials; an error naming the key (the URL masked) unless
    /// it is an `http://` or `https://` URL with a host.
    pub fn collector(&self) -> Result<Collector, String> {
        let invalid = || {
            format!(
                "telemetry.otlp_endpoint {:?} is not an http:// or https:// URL with a host",
                masked_url(&self.0)
            )
        };
        let uri = self.0.parse::<http::Uri>().map_err(|_| invalid())?;
        if !matches!(uri.scheme_str(), Some("http" | "https"))
            || uri.host().is_none_or(str::is_empty)
        {
            return Err(invalid());
        }
        let parts = UrlParts::of(&self.0);
        Ok(Collector {
            url: format!("{}{}{}", parts.scheme, parts.host, parts.tail),
            credentials: parts.userinfo.map(|userinfo| {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                (percent_decode(user), Secret::new(percent_decode(password)))
            }),
        })
    }
}

/// Written back masked: `intake check` prints it.
impl Serialize for OtlpEndpoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&masked_url(&self.0))
    }
}

impl std::fmt::Debug for OtlpEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", masked_url(&self.0))
    }
}

/// A URL's text in the parts [`masked_url`] and [`OtlpEndpoint::collector`] take apart.
struct UrlParts<'a> {
    /// `http://`; empty when the text has no `://`.
    scheme: &'a str,
    /// What precedes the last `@` of the authority.
    userinfo: Option<&'a str>,
    /// Host and port.
    host: &'a str,
    /// Path, query and fragment.
    tail: &'a str,
}

impl UrlParts<'_> {
    fn of(url: &str) -> UrlParts<'_> {
        let (scheme, rest) = match url.find("://") {
            Some(at) => url.split_at(at + 3),
            None => ("", url),
        };
        let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((userinfo, host)) => (Some(userinfo), host),
            None => (None, authority),
        };
        UrlParts {
            scheme,
            userinfo,
            host,
            tail,
        }
    }
}

/// A configured URL as printouts and messages show it: the password of a `user:password@`
/// masked as `webhooks.proxy`'s is (`user:***@`; a lone `user@`, often a token, as `***@`),
/// and the query as `?***` (it may carry a token). The masked URL is still a valid one.
pub fn masked_url(url: &str) -> String {
    let parts = UrlParts::of(url);
    let userinfo = match parts.userinfo.map(|u| u.split_once(':')) {
        Some(Some((user, _))) => format!("{user}:***@"),
        Some(None) => "***@".to_string(),
        None => String::new(),
    };
    let tail = match parts.tail.split_once('?') {
        Some((path, _)) => format!("{path}?***"),
        None => parts.tail.to_string(),
    };
    format!("{}{userinfo}{}{tail}", parts.scheme, parts.host)
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

/// `[webhooks]`: how deliveries are sent (see `webhooks::dispatch`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhooksConfig {
    /// Threads sending deliveries; retries may use at most half of them.
    pub workers: usize,
    /// Attempts in flight to one receiver (host and port) at most.
    pub per_target_concurrency: usize,
    /// Attempts in flight for one endpoint's deliveries at most, whatever their receivers;
    /// default half the workers ([`WebhooksConfig::per_endpoint_concurrency`]).
    #[serde(rename = "per_endpoint_concurrency")]
    pub per_endpoint: Option<usize>,
    /// Limit of one attempt: connecting, sending, and reading the answer.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub timeout: Duration,
    /// Deliver to loopback, private and other non-global addresses too.
    pub allow_private_targets: bool,
    /// Non-global ranges deliveries may go to anyway, e.g. `"10.0.0.0/8"`.
    #[serde(deserialize_with = "de_allowed_cidrs", serialize_with = "ser_cidrs")]
    pub allowed_cidrs: Vec<Cidr>,
    /// Send deliveries through this HTTP proxy (`http://[user:password@]host:port`), in a
    /// CONNECT tunnel to the target address the guard checked. The environment's
    /// `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY` are never read.
    pub proxy: Option<ProxyUrl>,
    /// Hosts reached directly even when `proxy` is set: a name (`hooks.example.com`, which
    /// covers its subdomains too; a leading dot is allowed), an IP address, or `*` for all.
    pub no_proxy: Vec<String>,
    /// A subscription whose attempts have all failed for this long (with at least
    /// `disable_after_attempts` of them) is disabled; `"0s"` never disables one.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub disable_after: Duration,
    pub disable_after_attempts: u32,
    /// After a recovery ends, another of the same deliveries over an overlapping window is
    /// refused for this long (`"0s"`: never), so a repeated call cannot send them again and
    /// again.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub recovery_cooldown: Duration,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        WebhooksConfig {
            workers: 8,
            per_target_concurrency: 4,
            per_endpoint: None,
            timeout: Duration::from_secs(15),
            allow_private_targets: false,
            allowed_cidrs: Vec::new(),
            proxy: None,
            no_proxy: Vec::new(),
            disable_after: Duration::from_secs(5 * 86_400),
            disable_after_attempts: 10,
            recovery_cooldown: Duration::from_secs(600),
        }
    }
}

impl WebhooksConfig {
    /// The cap on one endpoint's attempts in flight: as configured, or half the workers, so
    /// one tenant's slow or dead receivers always leave the other half to everyone else.
    pub fn per_endpoint_concurrency(&self) -> usize {
        self.per_endpoint.unwrap_or((self.workers / 2).max(1))
    }

    fn validate(&self) -> Result<(), String> {
        if self
            .per_endpoint
            .is_some_and(|n| n == 0 || n > self.workers)
        {
            return Err(
                "webhooks.per_endpoint_concurrency must be from 1 to webhooks.workers".into(),
            );
        }
        if !(1..=256).contains(&self.workers) {
            return Err("webhooks.workers must be from 1 to 256".into());
        }
        if !(1..=256).contains(&self.per_target_concurrency) {
            return Err("webhooks.per_target_concurrency must be from 1 to 256".into());
        }
        if self.timeout.is_zero() || self.timeout > Duration::from_secs(300) {
            return Err("webhooks.timeout must be more than 0 and at most \"5m\"".into());
        }
        if let Some(entry) = self
            .no_proxy
            .iter()
            .find(|e| e.trim().trim_start_matches('.').is_empty() || e.contains(['/', ' ']))
        {
            return Err(format!(
                "webhooks.no_proxy: {entry:?} is not a host name, an IP address or \"*\""
            ));
        }
        Ok(())
    }
}

/// `[webhooks] proxy`: an `http://` proxy URL, its credentials kept apart as a [`Secret`].
#[derive(Clone, Debug)]
pub struct ProxyUrl {
    /// Host and port (`proxy.internal:3128`, `[fd00::1]:3128`); port 80 when not written.
    pub authority: String,
    /// `user` and `password` of `http://user:password@host:port`, percent-decoded.
    pub credentials: Option<(String, Secret)>,
}

impl ProxyUrl {
    pub fn parse(text: &str) -> Result<ProxyUrl, String> {
        let bad = |why: &str| format!("webhooks.proxy: {why} (write \"http://host:port\")");
        let rest = text
            .trim()
            .strip_prefix("http://")
            .ok_or_else(|| bad("only http:// proxies are supported"))?;
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err(bad("a proxy URL has no path"));
        }
        let (userinfo, host_port) = match rest.rsplit_once('@') {
            Some((userinfo, host_port)) => (Some(userinfo), host_port),
            None => (None, rest),
        };
        let (host, port) = match host_port.strip_prefix('[') {
            Some(v6) => {
                let (address, rest) = v6.split_once(']').ok_or_else(|| bad("unclosed ["))?;
                address
                    .parse::<std::net::Ipv6Addr>()
                    .map_err(|_| bad("not an IPv6 address in [ ]"))?;
                (format!("[{address}]"), rest.strip_prefix(':'))
            }
            None => match host_port.rsplit_once(':') {
                Some((host, port)) => (host.to_string(), Some(port)),
                None => (host_port.to_string(), None),
            },
        };
        let host_ok = !host.is_empty()
            && (host.starts_with('[')
                || host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'));
        if !host_ok {
            return Err(bad("not a host name or address"));
        }
        let port: u16 = match port {
            Some(port) => port.parse().map_err(|_| bad("not a port number"))?,
            None => 80,
        };
        let credentials = userinfo.map(|userinfo| {
            let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            let decode = |t: &str| percent_decode(t);
            (decode(user), Secret::new(decode(password)))
        });
        Ok(ProxyUrl {
            authority: format!("{host}:{port}"),
            credentials,
        })
    }
}

/// `%XX` escapes decoded (invalid ones kept as written), for the userinfo of a URL.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Written back with the password masked: `intake check` prints it.
impl Serialize for ProxyUrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.credentials {
            Some((user, _)) => {
                let user = user
                    .replace('%', "%25")
                    .replace('@', "%40")
                    .replace(':', "%3A");
                s.serialize_str(&format!("http://{user}:***@{}", self.authority))
            }
            None => s.serialize_str(&format!("http://{}", self.authority)),
        }
    }
}

impl<'de> Deserialize<'de> for ProxyUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ProxyUrl, D::Error> {
        ProxyUrl::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
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

impl StorageConfig {
    pub fn min_free_bytes(&self) -> u64 {
        self.min_free_mb.saturating_mul(1024 * 1024)
    }
}

impl StorageConfig {
    fn validate(&self) -> Result<(), String> {
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

impl PostgresConfig {
    fn validate(&self) -> Result<(), String> {
        if self.url.expose().trim().is_empty() {
            return Err("storage.postgres.url is required".into());
        }
        if self.pool_size < 2 {
            return Err("storage.postgres.pool_size must be at least 2".into());
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StorageBackend {
    Redb,
    Postgres,
}

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
            connect_timeout: Duration::from_secs(2),
            request_timeout: Duration::from_secs(2),
            tls: PostgresTls::VerifyFull,
            ca_file: None,
            lease: Duration::from_secs(10),
        }
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

    fn validate(&self) -> Result<(), String> {
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
        Ok(())
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// How long sandbox records are kept (at least one day).
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub sandbox: Duration,
    /// How long production records are kept (at least 60 days, as the spec promises).
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
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

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RequestLogConfig {
    /// How long request-log entries are kept.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub retention: Duration,
}

/// `[search]`: the search indexer (see `workers::search`).
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

/// `[http]`: what one client may hold of the server (see `server::connection_builder`), and
/// which proxies in front of it are believed about the client's address (see `forwarded`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Longest wait for a request's headers, and for the next request on an idle keep-alive
    /// connection; then the connection is closed.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub header_timeout: Duration,
    /// Longest time to receive a request's whole body; then 408 `request_timeout`.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub body_timeout: Duration,
    /// Most connections open at once; further clients wait in the listen backlog.
    pub max_connections: usize,
    /// Most memory (MB) request bodies hold at once, from reading them until the answer (see
    /// `request::BodyBudget`); a request that finds no room within 5 s gets 503 `server_busy`.
    pub body_memory_mb: usize,
    /// Reverse proxies in front of the server (address ranges): only a request whose TCP peer
    /// is in one has its client address taken from `client_address_header` (see `forwarded`).
    /// Empty by default: nobody is trusted, and the client is the TCP peer.
    #[serde(deserialize_with = "de_trusted_proxies", serialize_with = "ser_cidrs")]
    pub trusted_proxies: Vec<Cidr>,
    /// The header those proxies put the client address in.
    pub client_address_header: ClientAddressHeader,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            header_timeout: Duration::from_secs(30),
            body_timeout: Duration::from_secs(60),
            max_connections: 1000,
            body_memory_mb: 32,
            trusted_proxies: Vec::new(),
            client_address_header: ClientAddressHeader::default(),
        }
    }
}

/// The header a trusted proxy appends the client address to. Only that one is read: a proxy
/// passes the other one on as the client sent it, so it could name any address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClientAddressHeader {
    /// `X-Forwarded-For: client, proxy1, ...` (nginx's `$proxy_add_x_forwarded_for`, HAProxy's
    /// `option forwardfor`, most load balancers).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for=proxy1, ...`.
    Forwarded,
}

impl HttpConfig {
    fn validate(&self) -> Result<(), String> {
        if self.header_timeout.is_zero() || self.body_timeout.is_zero() {
            return Err("http.header_timeout and http.body_timeout must be above 0".into());
        }
        if self.max_connections == 0 {
            return Err("http.max_connections must be at least 1".into());
        }
        if self.body_memory_mb == 0 {
            return Err("http.body_memory_mb must be at least 1".into());
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownConfig {
    /// How long a graceful shutdown waits for in-flight requests before closing them.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub grace: Duration,
}

/// `[smtp]`: where and how outgoing e-mail is delivered (see `mail`).
#[derive(Clone, Debug, Deserialize, Serialize)]
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
    #[serde(deserialize_with = "de_mailbox", serialize_with = "ser_display")]
    pub from: Mailbox,
    /// Limit of connecting and of each SMTP command.
    #[serde(
        default = "default_smtp_timeout",
        deserialize_with = "de_duration",
        serialize_with = "ser_duration"
    )]
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
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
    /// Reads `path` when given (otherwise starts from the defaults), then applies the
    /// `INTAKE_*` variables of the process environment.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        Config::load_with_env(path, std::env::vars_os())
    }

    /// [`Config::load`] with the environment given: see [`env_overrides`].
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
        let overrides = env_overrides(vars)?;
        if overrides.is_empty() {
            return Config::parse(&text).map_err(invalid(source));
        }
        let mut table: toml::Table =
            toml::from_str(&text).map_err(|e| invalid(source.clone())(e.to_string()))?;
        for (variable, key, value) in overrides {
            apply_override(&mut table, &variable, &key, value)?;
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

    /// Rules between values that the types alone do not enforce.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(url) = &self.public_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err("public_url must start with http:// or https://".into());
            }
            // Its origin is the one the dashboard's forms must come from: it needs a host.
            let authority = url
                .parse::<http::Uri>()
                .ok()
                .filter(|uri| uri.host().is_some())
                .and_then(|uri| uri.authority().cloned());
            let Some(authority) = authority else {
                return Err(format!(
                    "public_url {:?} is not a URL with a host name",
                    masked_url(url)
                ));
            };
            // It begins every link intake sends and shows: credentials in it would go to
            // every reader of an e-mail.
            if authority.as_str().contains('@') {
                return Err(
                    "public_url cannot carry credentials (user:password@): it begins every link \
                     intake sends"
                        .into(),
                );
            }
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
        self.http.validate()?;
        self.storage.validate()?;
        self.stream.validate()?;
        if self
            .stream
            .max_total
            .is_some_and(|total| total == 0 || total >= self.http.max_connections)
        {
            return Err(
                "stream.max_total must be at least 1 and below http.max_connections, which \
                 data calls need too"
                    .into(),
            );
        }
        self.telemetry.validate()?;
        if !(0..=19).contains(&self.search.indexer_nice) {
            return Err("search.indexer_nice must be from 0 to 19".into());
        }
        if self.search.index_memory_mb < 15 {
            return Err("search.index_memory_mb must be at least 15".into());
        }
        if !(self.search.stop_share > 0.0 && self.search.stop_share <= 1.0) {
            return Err("search.stop_share must be above 0 and at most 1".into());
        }
        if self.backup.keep == 0 {
            return Err("backup.keep must be at least 1".into());
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

/// Variables the command line reads itself (`intake endpoint`): not config keys.
pub const CLI_VARIABLES: [&str; 2] = ["INTAKE_SERVER", "INTAKE_TOKEN"];

/// The config keys set through the environment: `INTAKE_` + the key in upper case, with `__`
/// between a section and its key (`INTAKE_LISTEN`, `INTAKE_SMTP__HOST`,
/// `INTAKE_BACKUP__KEEP`, `INTAKE_STORAGE__POSTGRES__URL`). Returns `(variable, key path, value)`; a variable that names no
/// config key is refused, so a typo never goes unnoticed.
fn env_overrides(
    vars: impl IntoIterator<Item = (OsString, OsString)>,
) -> Result<Vec<(String, Vec<String>, toml::Value)>, ConfigError> {
    let mut overrides = Vec::new();
    for (name, value) in vars {
        let Some(name) = name.to_str().filter(|n| n.starts_with("INTAKE_")) else {
            continue;
        };
        if CLI_VARIABLES.contains(&name) {
            continue;
        }
        let env_err = |message: String| ConfigError::Env {
            variable: name.to_string(),
            message,
        };
        let value = value
            .into_string()
            .map_err(|_| env_err("the value is not UTF-8".into()))?;
        let key: Vec<String> = name["INTAKE_".len()..]
            .split("__")
            .map(str::to_ascii_lowercase)
            .collect();
        if key.iter().any(|k| k.is_empty()) {
            return Err(env_err(
                "names no config key (write INTAKE_KEY or INTAKE_SECTION__KEY)".into(),
            ));
        }
        let value = env_value(&value);
        // Deserialising the key alone tells whether it exists: `deny_unknown_fields` names it.
        let mut probe = toml::Table::new();
        set_key(&mut probe, &key, value.clone()).map_err(env_err)?;
        if let Err(err) = Config::deserialize(toml::Value::Table(probe))
            && err.to_string().contains("unknown field")
        {
            return Err(env_err(format!("names no config key ({})", key.join("."))));
        }
        overrides.push((name.to_string(), key, value));
    }
    Ok(overrides)
}

fn apply_override(
    table: &mut toml::Table,
    variable: &str,
    key: &[String],
    value: toml::Value,
) -> Result<(), ConfigError> {
    set_key(table, key, value).map_err(|message| ConfigError::Env {
        variable: variable.to_string(),
        message,
    })
}

/// Sets `key` (a key, or sections down to a key) in `table`, creating the sections when
/// needed.
fn set_key(table: &mut toml::Table, key: &[String], value: toml::Value) -> Result<(), String> {
    match key {
        [name] => {
            table.insert(name.clone(), value);
            Ok(())
        }
        [section, rest @ ..] if !rest.is_empty() => {
            let entry = table
                .entry(section.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            match entry {
                toml::Value::Table(section) => set_key(section, rest, value),
                _ => Err(format!("{section} is not a section of the config")),
            }
        }
        _ => Err("names no config key".into()),
    }
}

/// An environment value read as TOML when it is a number, a boolean, an array or a quoted
/// string, and as a plain string otherwise: `INTAKE_LISTEN=0.0.0.0:8080` needs no quotes,
/// while a string that looks like a number (a numeric password) is written quoted, `"1234"`.
fn env_value(text: &str) -> toml::Value {
    let parsed = toml::from_str::<toml::Table>(&format!("v = {text}"))
        .ok()
        .filter(|table| table.len() == 1)
        .and_then(|mut table| table.remove("v"));
    match parsed {
        Some(
            value @ (toml::Value::Integer(_)
            | toml::Value::Float(_)
            | toml::Value::Boolean(_)
            | toml::Value::Array(_)
            | toml::Value::String(_)),
        ) => value,
        _ => toml::Value::String(text.to_string()),
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

fn ser_duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_duration(*d))
}

fn ser_display<S: Serializer>(value: &impl std::fmt::Display, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(value)
}

fn ser_cidrs<S: Serializer>(cidrs: &[Cidr], s: S) -> Result<S::Ok, S::Error> {
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

fn de_mailbox<'de, D: Deserializer<'de>>(d: D) -> Result<Mailbox, D::Error> {
    let text = String::deserialize(d)?;
    text.parse().map_err(|_| {
        serde::de::Error::custom(format!(
            "smtp.from {text:?} is not an e-mail address \
             (write \"intake@example.com\" or \"Intake <intake@example.com>\")"
        ))
    })
}

fn de_allowed_cidrs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Cidr>, D::Error> {
    de_cidrs(d, "webhooks.allowed_cidrs")
}

fn de_trusted_proxies<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Cidr>, D::Error> {
    de_cidrs(d, "http.trusted_proxies")
}

fn de_cidrs<'de, D: Deserializer<'de>>(d: D, key: &str) -> Result<Vec<Cidr>, D::Error> {
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
        let text: String = include_str!("../../intake.toml.example")
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
    fn trusted_proxies_and_the_client_address_header() {
        let h = Config::parse("").unwrap().http;
        assert!(h.trusted_proxies.is_empty(), "nobody is trusted by default");
        assert_eq!(h.client_address_header, ClientAddressHeader::XForwardedFor);
        let h = Config::parse(
            "[http]\ntrusted_proxies = [\"10.0.0.0/8\", \"::1\"]\n\
             client_address_header = \"forwarded\"\n",
        )
        .unwrap()
        .http;
        assert_eq!(h.trusted_proxies.len(), 2);
        assert_eq!(h.client_address_header, ClientAddressHeader::Forwarded);
        for (text, key) in [
            ("trusted_proxies = [\"proxy\"]", "http.trusted_proxies"),
            (
                "client_address_header = \"x-real-ip\"",
                "client_address_header",
            ),
        ] {
            let err = Config::parse(&format!("[http]\n{text}\n")).unwrap_err();
            assert!(err.contains(key), "{text}: {err}");
        }
        for url in ["https://", "http:///path"] {
            let err = Config::parse(&format!("public_url = \"{url}\"\n")).unwrap_err();
            assert!(err.contains("public_url"), "{url}: {err}");
        }
        // It begins the links of every e-mail: no credentials, and the refusal hides them.
        for url in [
            "https://admin:pub-s3cret@intake.example.com",
            "https://pub-s3cret@x:1/",
        ] {
            let err = Config::parse(&format!("public_url = \"{url}\"\n")).unwrap_err();
            assert!(err.contains("public_url"), "{url}: {err}");
            assert!(!err.contains("pub-s3cret"), "{url}: {err}");
        }
    }

    #[test]
    fn configured_urls_are_masked_in_their_userinfo_password_and_query() {
        for (url, masked) in [
            ("http://127.0.0.1:4318", "http://127.0.0.1:4318"),
            (
                "https://tenant:s3cret@otlp.example:4318/v1/traces?key=t0ken&x=1#f",
                "https://tenant:***@otlp.example:4318/v1/traces?***",
            ),
            ("https://t0ken@otlp.example/", "https://***@otlp.example/"),
            ("https://otlp.example?key=t0ken", "https://otlp.example?***"),
            (
                "https://a:b@c@otlp.example/p@q",
                "https://a:***@otlp.example/p@q",
            ),
            ("u:s3cret@host/x", "u:***@host/x"),
        ] {
            assert_eq!(masked_url(url), masked, "{url}");
        }
    }

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

    #[test]
    fn the_otlp_endpoints_credentials_are_kept_apart_and_never_printed() {
        let c = Config::parse(
            "[telemetry]\notlp_endpoint = \"https://ten%40ant:p%3As3cret@otlp.example:4318/v1/traces?key=t0ken\"\n",
        )
        .unwrap();
        let endpoint = c.telemetry.otlp_endpoint.as_ref().unwrap();
        let collector = endpoint.collector().unwrap();
        assert_eq!(
            collector.url,
            "https://otlp.example:4318/v1/traces?key=t0ken"
        );
        let (user, password) = collector.credentials.unwrap();
        assert_eq!((user.as_str(), password.expose()), ("ten@ant", "p:s3cret"));
        let printed = toml::to_string(&c).unwrap();
        assert!(
            printed.contains(
                "otlp_endpoint = \"https://ten%40ant:***@otlp.example:4318/v1/traces?***\""
            ),
            "{printed}"
        );
        for shown in [printed, format!("{c:?}")] {
            assert!(
                !shown.contains("s3cret") && !shown.contains("t0ken"),
                "{shown}"
            );
        }
        // What is printed is a valid config again.
        assert!(Config::parse(&toml::to_string(&c).unwrap()).is_ok());
        let none = OtlpEndpoint("http://127.0.0.1:4318".into())
            .collector()
            .unwrap();
        assert!(none.credentials.is_none());
        assert_eq!(none.url, "http://127.0.0.1:4318");
        // A refused endpoint is named masked.
        for url in [
            "ftp://u:s3cret@host/",
            "http://u:s3cret@/x",
            "http://h/?t0ken=1 2",
        ] {
            let err =
                Config::parse(&format!("[telemetry]\notlp_endpoint = \"{url}\"\n")).unwrap_err();
            assert!(err.contains("telemetry.otlp_endpoint"), "{url}: {err}");
            assert!(
                !err.contains("s3cret") && !err.contains("t0ken"),
                "{url}: {err}"
            );
        }
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

    fn with_env(text: &str, vars: &[(&str, &str)]) -> Result<Config, String> {
        let dir = std::env::temp_dir().join(format!("intake-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{}.toml", crate::core::ids::random_base32(8)));
        std::fs::write(&path, text).unwrap();
        let vars = vars
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let result = Config::load_with_env(Some(&path), vars).map_err(|e| e.to_string());
        let _ = std::fs::remove_file(&path);
        result
    }

    #[test]
    fn environment_variables_override_the_file() {
        let c = with_env(
            "listen = \"127.0.0.1:1\"\n[storage]\ncache_mb = 8\n",
            &[
                ("INTAKE_LISTEN", "0.0.0.0:9000"),
                ("INTAKE_STORAGE__CACHE_MB", "32"),
                ("INTAKE_POLL__HOLD_BACK", "5s"),
                ("INTAKE_OPERATIONS__METRICS_TOKEN", "\"0042\""),
                ("INTAKE_BACKUP__DIR", "/var/backups/intake"),
                ("INTAKE_TOKEN", "not a config key"),
                ("HOME", "/root"),
            ],
        )
        .unwrap();
        assert_eq!(c.listen.port(), 9000);
        assert_eq!(c.storage.cache_mb, 32);
        assert_eq!(c.poll.hold_back, Duration::from_secs(5));
        assert_eq!(c.operations.metrics_token.unwrap().expose(), "0042");
        assert_eq!(
            c.backup.dir.as_deref(),
            Some(Path::new("/var/backups/intake"))
        );
        let err = with_env("", &[("INTAKE_STORAGE__CACHEMB", "1")]).unwrap_err();
        assert!(err.contains("INTAKE_STORAGE__CACHEMB"), "{err}");
        let err = with_env("", &[("INTAKE_A__B__C", "1")]).unwrap_err();
        assert!(err.contains("INTAKE_A__B__C"), "{err}");
        let err = with_env("", &[("INTAKE_LISTEN__PORT", "1")]).unwrap_err();
        assert!(err.contains("listen"), "{err}");
    }

    #[test]
    fn environment_variables_reach_the_keys_of_subsections() {
        let c = with_env(
            "[storage]
min_free_mb = 4
[storage.postgres]
pool_size = 3
",
            &[
                ("INTAKE_STORAGE__BACKEND", "postgres"),
                ("INTAKE_STORAGE__POSTGRES__URL", "postgresql://db/intake"),
                ("INTAKE_STORAGE__POSTGRES__TLS", "disable"),
            ],
        )
        .unwrap();
        assert_eq!(c.storage.backend, StorageBackend::Postgres);
        assert_eq!(c.storage.min_free_mb, 4);
        let postgres = c.storage.postgres.unwrap();
        assert_eq!(postgres.url.expose(), "postgresql://db/intake");
        assert_eq!(postgres.tls, PostgresTls::Disable);
        assert_eq!(postgres.pool_size, 3);
        // Without a file's section, the variable makes it.
        let c = with_env("", &[("INTAKE_STORAGE__POSTGRES__URL", "host=db")]).unwrap();
        assert_eq!(c.storage.postgres.unwrap().url.expose(), "host=db");
        let err = with_env("", &[("INTAKE_STORAGE__POSTGRES__URI", "x")]).unwrap_err();
        assert!(err.contains("INTAKE_STORAGE__POSTGRES__URI"), "{err}");
        // A key is no section: its value is refused, naming it.
        let err = with_env("", &[("INTAKE_STORAGE__POSTGRES__URL__X", "1")]).unwrap_err();
        assert!(err.contains("url"), "{err}");
        let err = with_env("", &[("INTAKE_STORAGE__CACHE_MB__X", "1")]).unwrap_err();
        assert!(err.contains("cache_mb"), "{err}");
    }

    #[test]
    fn environment_values_are_toml_or_plain_strings() {
        assert_eq!(env_value("12"), toml::Value::Integer(12));
        assert_eq!(env_value("true"), toml::Value::Boolean(true));
        assert_eq!(env_value("\"12\""), toml::Value::String("12".into()));
        assert_eq!(
            env_value("0.0.0.0:80"),
            toml::Value::String("0.0.0.0:80".into())
        );
        assert_eq!(
            env_value("1\nlisten = 2"),
            toml::Value::String("1\nlisten = 2".into())
        );
        assert_eq!(
            env_value("1979-05-27"),
            toml::Value::String("1979-05-27".into())
        );
    }

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
