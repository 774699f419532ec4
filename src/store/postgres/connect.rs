//! How a node makes its connections: one attempt per host of the URL, each under its own
//! limit, the host that took the latest connection tried first. It is the manager of the
//! store's pool, so every connection is made here.
//!
//! tokio-postgres tries a multi-host URL's hosts in turn, but its `connect_timeout` bounds
//! only each TCP connect. A server that accepts connections and then never answers (a
//! primary frozen, or cut off behind a firewall that still lets its kernel complete the
//! handshake) holds the login for ever, and the next host is never tried. So the URL is split
//! into one single-host configuration per host ([`single_hosts`]), and each attempt (TCP
//! connect, TLS, login and the `target_session_attrs` check) runs under
//! `[storage.postgres] connect_timeout`, as libpq's `connect_timeout` does, before the next
//! host is tried.
//!
//! Every connection also gets TCP keepalives and `TCP_USER_TIMEOUT`, so an idle pooled
//! connection to a peer that went away without closing is closed by the kernel and never
//! handed out; a connection made before the node last lost the database is not handed out
//! again either (see `health`).
//!
//! The server's side of each session gets the same, and a limit on silence inside a
//! transaction ([`SessionLimits`]): a node cut off from the database while its transaction is
//! open (its `COMMIT` lost on the way) leaves a session behind that holds its row locks, and
//! another node's write of the same row (a client retrying the same `Idempotency-Key` there)
//! would wait for it until the server's kernel gives the connection up, hours by default. The
//! server ends such a session once it has been silent for half of `request_timeout`, before a
//! request waiting on its locks reaches its own deadline.

use std::cmp::Reverse;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool::managed::{Metrics, RecycleError, RecycleResult};
use deadpool_postgres::ClientWrapper;
use tokio_postgres::Config;
use tokio_postgres::config::Host;

use super::health::{Health, Unreachable};
use crate::store::StoreError;
use crate::store::with_causes;

/// Keepalive probes of an idle connection: a peer gone without closing it is found within
/// `IDLE + INTERVAL × RETRIES` (8 s).
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_RETRIES: u32 = 3;
/// How long data sent may stay unacknowledged before the kernel gives the connection up (a
/// peer cut off mid-statement; the client's own deadline usually comes first).
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(5);

/// What the server enforces on each session of a node (see the module's doc).
#[derive(Clone, Copy, Debug)]
pub(super) struct SessionLimits {
    /// `idle_in_transaction_session_timeout`: the longest silence of the node inside a
    /// transaction before the server ends the session.
    pub(super) silent_in_transaction: Duration,
}

impl SessionLimits {
    /// The limits for a node whose data path waits `request_timeout` at most: a unit of work
    /// never lasts longer, so a healthy node is never silent that long inside a transaction.
    pub(super) fn for_request_timeout(request_timeout: Duration) -> SessionLimits {
        SessionLimits {
            silent_in_transaction: (request_timeout / 2).max(Duration::from_millis(500)),
        }
    }

    /// The statements that set them, sent once a connection is made. Keepalives apply to TCP
    /// sessions only; a server on a system without `TCP_USER_TIMEOUT` logs that it ignores it.
    fn statements(&self) -> String {
        let ms = |d: Duration| d.as_millis();
        format!(
            "SET idle_in_transaction_session_timeout = {}; SET tcp_user_timeout = {}; \
             SET tcp_keepalives_idle = {}; SET tcp_keepalives_interval = {}; \
             SET tcp_keepalives_count = {}",
            ms(self.silent_in_transaction),
            ms(TCP_USER_TIMEOUT),
            KEEPALIVE_IDLE.as_secs(),
            KEEPALIVE_INTERVAL.as_secs(),
            KEEPALIVE_RETRIES,
        )
    }
}

/// TLS to the database, as `[storage.postgres] tls` says.
pub(super) enum Tls {
    Disable,
    Rustls(tokio_postgres_rustls::MakeRustlsConnect),
}

/// One host of the URL.
struct Target {
    /// `host:port`, as messages name it.
    name: Arc<str>,
    config: Config,
}

/// A connection, and the host of the URL it goes to.
pub(super) struct HostConnection {
    client: ClientWrapper,
    /// `host:port`.
    pub(super) host: Arc<str>,
}

impl std::ops::Deref for HostConnection {
    type Target = ClientWrapper;

    fn deref(&self) -> &ClientWrapper {
        &self.client
    }
}

impl std::ops::DerefMut for HostConnection {
    fn deref_mut(&mut self) -> &mut ClientWrapper {
        &mut self.client
    }
}

/// What the latest attempt on a host found, in the order hosts are tried: the host that gave
/// the latest connection first, a host that answered (refused, or a standby) before one that
/// did not answer at all. A host whose latest connection was made before the database was
/// last found lost counts as unanswered: it is the one that stopped answering, most likely,
/// and a standby promoted meanwhile is tried before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Standing {
    Worked,
    Untried,
    Refused,
    Unanswered,
}

/// The pool's manager: makes connections host by host and refuses to hand out stale ones.
pub(super) struct Connector {
    targets: Vec<Target>,
    tls: Tls,
    per_host: Duration,
    /// `SET` statements of [`SessionLimits`], run on every new connection.
    session: String,
    /// Each host's standing and when it was set.
    standings: Mutex<Vec<(Standing, Instant)>>,
    health: Arc<Health>,
}

impl Connector {
    /// A connector for every host of `config`.
    pub(super) fn new(
        config: &Config,
        tls: Tls,
        per_host: Duration,
        limits: SessionLimits,
        health: Arc<Health>,
    ) -> Result<Connector, StoreError> {
        let targets = single_hosts(config)?
            .into_iter()
            .map(|mut config| {
                config
                    .keepalives(true)
                    .keepalives_idle(KEEPALIVE_IDLE)
                    .keepalives_interval(KEEPALIVE_INTERVAL)
                    .keepalives_retries(KEEPALIVE_RETRIES)
                    .tcp_user_timeout(TCP_USER_TIMEOUT);
                Target {
                    name: target_name(&config).into(),
                    config,
                }
            })
            .collect::<Vec<_>>();
        let hosts = targets.len();
        Ok(Connector {
            targets,
            tls,
            per_host,
            session: limits.statements(),
            standings: Mutex::new(vec![(Standing::Untried, Instant::now()); hosts]),
            health,
        })
    }

    /// How many hosts the URL names.
    pub(super) fn hosts(&self) -> usize {
        self.targets.len()
    }

    /// The hosts in the order to try them.
    fn order(&self) -> Vec<usize> {
        let standings = self
            .standings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut order: Vec<usize> = (0..standings.len()).collect();
        order.sort_by_key(|&i| match standings[i] {
            (Standing::Worked, at) if self.health.lost_since(at) => (Standing::Unanswered, None, i),
            // The latest to give a connection first.
            (Standing::Worked, at) => (Standing::Worked, Some(Reverse(at)), i),
            (standing, _) => (standing, None, i),
        });
        order
    }

    fn set_standing(&self, host: usize, standing: Standing) {
        let mut standings = self.standings.lock().unwrap_or_else(|e| e.into_inner());
        standings[host] = (standing, Instant::now());
    }

    /// A new connection: each host in turn, each under the per-host limit, until one gives
    /// it; the error names every host and what it did.
    pub(super) async fn connect(&self) -> Result<HostConnection, StoreError> {
        let mut failures = Vec::new();
        for host in self.order() {
            let target = &self.targets[host];
            // Set when the attempt ends however it ends: dropped by its caller's deadline
            // too, which leaves the host as unanswered.
            let mut attempt = Attempt {
                connector: self,
                host,
                standing: Standing::Unanswered,
            };
            let attempt_connect = async {
                let client = self.tls.connect(&target.config).await?;
                client.batch_execute(&self.session).await?;
                Ok::<_, tokio_postgres::Error>(client)
            };
            match tokio::time::timeout(self.per_host, attempt_connect).await {
                Ok(Ok(client)) => {
                    attempt.standing = Standing::Worked;
                    return Ok(HostConnection {
                        client,
                        host: target.name.clone(),
                    });
                }
                Ok(Err(err)) => {
                    attempt.standing = Standing::Refused;
                    failures.push(format!("{}: {}", target.name, with_causes(&err)));
                }
                Err(_) => failures.push(format!(
                    "{}: no connection within {:?} (connect_timeout)",
                    target.name, self.per_host
                )),
            }
        }
        Err(StoreError::Backend(Box::new(Unreachable(format!(
            "cannot connect to the database: {}",
            failures.join("; ")
        )))))
    }
}

/// One host's attempt; records the host's standing when dropped.
struct Attempt<'a> {
    connector: &'a Connector,
    host: usize,
    standing: Standing,
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        self.connector.set_standing(self.host, self.standing);
    }
}

impl Tls {
    async fn connect(&self, config: &Config) -> Result<ClientWrapper, tokio_postgres::Error> {
        match self {
            Tls::Disable => {
                let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
                Ok(wrap(client, connection))
            }
            Tls::Rustls(tls) => {
                let (client, connection) = config.connect(tls.clone()).await?;
                Ok(wrap(client, connection))
            }
        }
    }
}

/// A client whose connection runs as a task of the store's runtime (ended with the client).
fn wrap(
    client: tokio_postgres::Client,
    connection: impl Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
) -> ClientWrapper {
    let task = tokio::spawn(async move {
        if let Err(err) = connection.await {
            log::debug!("a database connection ended: {}", with_causes(&err));
        }
    });
    ClientWrapper::new(client, task)
}

impl deadpool::managed::Manager for Connector {
    type Type = HostConnection;
    type Error = StoreError;

    async fn create(&self) -> Result<HostConnection, StoreError> {
        self.connect().await
    }

    async fn recycle(
        &self,
        client: &mut HostConnection,
        metrics: &Metrics,
    ) -> RecycleResult<StoreError> {
        if client.is_closed() {
            return Err(RecycleError::message("the connection is closed"));
        }
        if self.health.lost_since(metrics.created) {
            return Err(RecycleError::message(
                "the connection was made before the database was last lost",
            ));
        }
        Ok(())
    }
}

/// `host:port` of a single-host configuration.
fn target_name(config: &Config) -> String {
    let host = match (config.get_hosts().first(), config.get_hostaddrs().first()) {
        (Some(Host::Tcp(name)), _) => name.clone(),
        (Some(Host::Unix(path)), _) => path.display().to_string(),
        (None, Some(addr)) => addr.to_string(),
        (None, None) => "(no host)".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

/// One configuration per host of `config` (its `host`, its `hostaddr`, and its port or the
/// one port given), each with every other setting of `config`.
pub(super) fn single_hosts(config: &Config) -> Result<Vec<Config>, StoreError> {
    let (hosts, addrs, ports) = (
        config.get_hosts(),
        config.get_hostaddrs(),
        config.get_ports(),
    );
    let count = hosts.len().max(addrs.len());
    let invalid = |what: &str| StoreError::Backend(format!("storage.postgres.url: {what}").into());
    if count == 0 {
        return Err(invalid("it names no host"));
    }
    if (!hosts.is_empty() && hosts.len() != count) || (!addrs.is_empty() && addrs.len() != count) {
        return Err(invalid(
            "it names a different number of hosts and hostaddrs",
        ));
    }
    if ports.len() > 1 && ports.len() != count {
        return Err(invalid("it names a different number of hosts and ports"));
    }
    Ok((0..count)
        .map(|i| {
            let mut single = settings_of(config);
            match hosts.get(i) {
                Some(Host::Tcp(name)) => {
                    single.host(name);
                }
                Some(Host::Unix(path)) => {
                    single.host_path(path);
                }
                None => {}
            }
            if let Some(addr) = addrs.get(i) {
                single.hostaddr(*addr);
            }
            if let Some(port) = ports.get(i).or(ports.first()) {
                single.port(*port);
            }
            single
        })
        .collect())
}

/// A configuration with every setting of `config` but its hosts, hostaddrs and ports.
fn settings_of(config: &Config) -> Config {
    let mut copy = Config::new();
    if let Some(user) = config.get_user() {
        copy.user(user);
    }
    if let Some(password) = config.get_password() {
        copy.password(password);
    }
    if let Some(dbname) = config.get_dbname() {
        copy.dbname(dbname);
    }
    if let Some(options) = config.get_options() {
        copy.options(options);
    }
    if let Some(name) = config.get_application_name() {
        copy.application_name(name);
    }
    if let Some(timeout) = config.get_connect_timeout() {
        copy.connect_timeout(*timeout);
    }
    if let Some(timeout) = config.get_tcp_user_timeout() {
        copy.tcp_user_timeout(*timeout);
    }
    if let Some(interval) = config.get_keepalives_interval() {
        copy.keepalives_interval(interval);
    }
    if let Some(retries) = config.get_keepalives_retries() {
        copy.keepalives_retries(retries);
    }
    copy.ssl_mode(config.get_ssl_mode())
        .ssl_negotiation(config.get_ssl_negotiation())
        .keepalives(config.get_keepalives())
        .keepalives_idle(config.get_keepalives_idle())
        .target_session_attrs(config.get_target_session_attrs())
        .channel_binding(config.get_channel_binding())
        .load_balance_hosts(config.get_load_balance_hosts());
    copy
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::time::Duration;

    use tokio_postgres::Config;
    use tokio_postgres::config::{
        ChannelBinding, LoadBalanceHosts, SslMode, SslNegotiation, TargetSessionAttrs,
    };

    use super::{single_hosts, target_name};

    /// A configuration of one host with every setting away from its default.
    fn every_setting() -> Config {
        let mut config = Config::new();
        config
            .user("intake")
            .password("s3cret")
            .dbname("db")
            .options("-c search_path=x")
            .application_name("app")
            .ssl_mode(SslMode::Require)
            .ssl_negotiation(SslNegotiation::Direct)
            .connect_timeout(Duration::from_secs(7))
            .tcp_user_timeout(Duration::from_secs(8))
            .keepalives(false)
            .keepalives_idle(Duration::from_secs(9))
            .keepalives_interval(Duration::from_secs(10))
            .keepalives_retries(11)
            .target_session_attrs(TargetSessionAttrs::ReadWrite)
            .channel_binding(ChannelBinding::Require)
            .load_balance_hosts(LoadBalanceHosts::Random);
        config
    }

    #[test]
    fn a_single_host_is_copied_with_every_setting() {
        let mut config = every_setting();
        config
            .host("db1")
            .hostaddr("192.0.2.1".parse::<IpAddr>().unwrap())
            .port(6543);
        // Config's equality compares every field: a setting the copy forgot fails here.
        assert_eq!(single_hosts(&config).unwrap(), vec![config]);
    }

    #[test]
    fn a_host_that_never_answers_is_given_up_after_connect_timeout_and_the_next_tried() {
        // A listener nobody accepts on: the kernel completes the handshake and takes the
        // login, and no answer ever comes, as from a frozen server.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let silent = silent.local_addr().unwrap().port();
        let url = super::super::test_cluster::shared().database();
        let (server, database) = url
            .strip_prefix("postgresql://intake@")
            .and_then(|rest| rest.split_once('/'))
            .unwrap();
        let config = crate::core::config::PostgresConfig {
            url: crate::core::config::Secret::new(format!(
                "postgresql://intake@127.0.0.1:{silent},{server}/{database}"
            )),
            tls: crate::core::config::PostgresTls::Disable,
            connect_timeout: Duration::from_millis(300),
            ..Default::default()
        };
        let started = std::time::Instant::now();
        let store = super::super::PgStore::open(&config).unwrap();
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(10),
            "{took:?}"
        );
        // The host that answered is tried first from now on.
        let started = std::time::Instant::now();
        let client = store.block(store.pool.manager().connect()).unwrap();
        assert_eq!(&*client.host, server);
        assert!(started.elapsed() < Duration::from_millis(300));
    }

    #[test]
    fn each_host_gets_its_own_port_or_the_one_given() {
        let config: Config =
            "postgresql://intake:pw@db1:5432,db2:5433/intake?target_session_attrs=read-write"
                .parse()
                .unwrap();
        let singles = single_hosts(&config).unwrap();
        let names: Vec<String> = singles.iter().map(target_name).collect();
        assert_eq!(names, ["db1:5432", "db2:5433"]);
        for single in &singles {
            assert_eq!(single.get_user(), Some("intake"));
            assert_eq!(single.get_password(), Some(&b"pw"[..]));
            assert_eq!(single.get_dbname(), Some("intake"));
            assert_eq!(
                single.get_target_session_attrs(),
                TargetSessionAttrs::ReadWrite
            );
        }
        let config: Config = "host=db1,db2 port=6000 dbname=intake".parse().unwrap();
        let names: Vec<String> = single_hosts(&config)
            .unwrap()
            .iter()
            .map(target_name)
            .collect();
        assert_eq!(names, ["db1:6000", "db2:6000"]);
        let config: Config = "host=db1,db2 port=1,2,3".parse().unwrap();
        assert!(single_hosts(&config).is_err());
    }
}
