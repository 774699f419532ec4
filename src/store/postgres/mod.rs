//! The PostgreSQL backend: one database shared by any number of intake nodes
//! (docs/src/scale-out.md). Beside `store::redb`, the only code of the crate that names
//! PostgreSQL, its client or a table.
//!
//! How it fits the synchronous seam: the store owns a small tokio runtime of its own (the
//! `pg` threads) on which the connection pool and every connection's task run. A store method
//! blocks its caller until its statements have answered ([`PgStore::block`]): a worker thread
//! (ingest writer, dispatcher, mail) simply waits; a task of the server's runtime first hands
//! its worker thread's other tasks to another thread (`block_in_place`), so a slow database
//! never stalls requests that do not need it.
//!
//! Layout and invariants (the schema is `migrations/*.sql`, applied by [`schema`]):
//! - Rows are kept as the same JSON as on redb (`data bytea`), with the columns that are
//!   looked up, ordered or claimed beside it. Record ids are 16 big-endian bytes (`bytea`
//!   compares bytewise, so id order is created_at order); u64 ids and microsecond times are
//!   `bigint`.
//! - Ids come from sequences (one per [`IdKind`]): a `nextval` is higher than every value
//!   handed out before, committed or not.
//! - Write transactions are `SERIALIZABLE`; [`PgStore::write_with`] runs the closure again on a
//!   serialisation failure, which the seam allows (the closure has no effects of its own).
//! - Times are the caller's (its injected clock), never the database's, except leases, which
//!   compare the database's clock with itself so that nodes with skewed clocks agree on them.
//!
//! Waiting (docs/src/scale-out.md, "Failover"): every unit of work (a transaction from taking
//! its connection to its commit, or one statement) runs under a deadline
//! ([`PgStore::block_until`]) of its [`Patience`]: `[storage.postgres] request_timeout` on
//! the data path (an ingest batch [`TIME_PER_MIB`] more for each MiB of payload it carries),
//! [`MAINTENANCE_TIMEOUT`] for maintenance no request waits on. A frozen or cut
//! off server answers nothing and closes nothing, so only such a deadline ends the wait. A
//! unit that finds the database out of reach closes its connection and tells the store's
//! [`health`], which refuses new work at once until its watcher reaches a server again.
//! Connections are made by [`connect`], one host of the URL at a time.

mod accounts;
mod cluster;
mod connect;
mod endpoints;
mod erasures;
mod events;
mod health;
mod mail;
mod purge;
mod records;
mod request_log;
mod schema;
mod search;
mod subscription_health;
mod transfer;
mod tx;
mod usage;
mod webhooks;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_postgres::error::SqlState;

use crate::core::config::{PostgresConfig, PostgresTls};
use crate::store::{Partition, StoreError, with_causes};

pub use tx::PgTx;

/// The store's pool of connections, made by [`connect::Connector`].
type Pool = deadpool::managed::Pool<connect::Connector>;
/// A connection taken from the pool.
type Connection = deadpool::managed::Object<connect::Connector>;

/// How long maintenance may wait for the database (a chunk of a purge, a step of
/// `intake migrate`'s copy): no request waits on it, and a large table may legitimately
/// take long, but a database that never answers must not hold it for ever.
const MAINTENANCE_TIMEOUT: Duration = Duration::from_secs(300);

/// How much longer than `request_timeout` an ingest batch may wait for each MiB of payload it
/// carries. Sending, indexing and logging a large batch takes the database time in proportion
/// to it: a 4 MB batch request took 250 ms of a debug build on an idle machine and over 2 s
/// when CI ran four test suites' servers beside a build, and a slow answer is not a lost
/// database. A database that stops answering meanwhile is still found within a probe's
/// `request_timeout` and a second (`health::watch`), which ends the batch's wait too.
const TIME_PER_MIB: Duration = Duration::from_secs(1);

/// The open database: a pool of connections on the store's own runtime.
pub struct PgStore {
    runtime: PgRuntime,
    pool: Pool,
    /// Whether the database is reachable, as far as this node knows (see `health`).
    health: Arc<health::Health>,
    /// `[storage.postgres] request_timeout`: the data path's deadline.
    request_timeout: Duration,
    /// How long a claim of this node holds without renewal (`[storage.postgres] lease`).
    lease: Duration,
    /// This node's membership of the cluster, once it has joined (see `cluster`).
    node: Mutex<Option<cluster::Membership>>,
    /// Lets the node's own ingest writers retry a lost conflict alone (see `tx::Turns`).
    ingest_turns: tx::Turns,
}

/// How long a unit of work may wait for the database (see the module's doc).
#[derive(Clone, Copy, Debug)]
enum Patience {
    /// A request's, and the workers' on the data path: `[storage.postgres] request_timeout`.
    Request,
    /// An ingest writer's batch carrying `bytes` of payload: a request's, plus
    /// [`TIME_PER_MIB`] for each MiB of them.
    Carrying { bytes: usize },
    /// Maintenance no request waits on: [`MAINTENANCE_TIMEOUT`].
    Maintenance,
}

/// When a unit of work began, and when it stops waiting for the database.
#[derive(Clone, Copy, Debug)]
struct Deadline {
    began: Instant,
    at: Instant,
}

impl Deadline {
    /// The same unit, allowed `more` time (a search's statement limit).
    fn extended(self, more: Duration) -> Deadline {
        Deadline {
            at: self.at + more,
            ..self
        }
    }
}

/// The store's runtime; dropped without waiting (the store may be dropped by a task).
struct PgRuntime(Option<tokio::runtime::Runtime>);

impl Drop for PgRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl PgStore {
    /// Connects to the database of `config`, applies the embedded migrations (one node at a
    /// time) and checks the server's settings.
    pub fn open(config: &PostgresConfig) -> Result<PgStore, StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("pg")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Backend(Box::new(e)))?;
        let health = health::Health::new();
        let pool = pool(config, health.clone())?;
        let store = PgStore {
            runtime: PgRuntime(Some(runtime)),
            pool,
            health,
            request_timeout: config.request_timeout,
            lease: config.lease,
            node: Mutex::new(None),
            ingest_turns: tx::Turns::default(),
        };
        // Migrations may take long on a large database and wait for another node's: no
        // deadline (each host's connect has its own).
        store.block(schema::prepare(&store.pool))?;
        let hosts = u32::try_from(store.pool.manager().hosts()).unwrap_or(u32::MAX);
        store.spawn(health::watch(
            store.health.clone(),
            store.pool.clone(),
            health::ProbeLimits {
                pooled: config.request_timeout,
                fresh: config.connect_timeout.saturating_mul(hosts) + config.request_timeout,
            },
        ));
        Ok(store)
    }

    /// The deadline of a unit of work beginning now; refused at once while the database is
    /// known to be out of reach.
    fn deadline(&self, patience: Patience) -> Result<Deadline, StoreError> {
        self.health.check()?;
        let began = Instant::now();
        let limit = match patience {
            Patience::Request => self.request_timeout,
            Patience::Carrying { bytes } => {
                let more = TIME_PER_MIB.mul_f64(bytes as f64 / f64::from(1 << 20));
                // In whole milliseconds: the limit is named in the error of a unit that ran out.
                let more = u64::try_from(more.as_millis()).unwrap_or(u64::MAX);
                self.request_timeout + Duration::from_millis(more)
            }
            Patience::Maintenance => MAINTENANCE_TIMEOUT.max(self.request_timeout),
        };
        Ok(Deadline {
            began,
            at: began + limit,
        })
    }

    /// Runs `work`, a step of the unit of work of `deadline` (on a connection to `host`, once
    /// it has one), and waits for it until the deadline at most, or until the database is
    /// found out of reach by another unit. A step that finds the database out of reach itself
    /// (no answer by the deadline included) tells the store's health; either way its caller
    /// closes the connection it used.
    fn block_until<T, E>(
        &self,
        deadline: Deadline,
        host: Option<&str>,
        work: impl Future<Output = Result<T, E>> + Send,
    ) -> Result<T, StoreError>
    where
        T: Send,
        E: Into<StoreError> + Send,
    {
        let unreachable = |why: String| {
            let why = match host {
                Some(host) => format!("{host}: {why}"),
                None => why,
            };
            StoreError::Backend(Box::new(health::Unreachable(why)))
        };
        let (result, by_another) = self.block(async {
            let next_loss = self.health.next_loss();
            tokio::select! {
                biased;
                done = tokio::time::timeout_at(deadline.at.into(), work) => match done {
                    Ok(done) => (done.map_err(Into::into), false),
                    Err(_) => (
                        Err(unreachable(format!(
                            "no answer within {:?}",
                            deadline.at.saturating_duration_since(deadline.began)
                        ))),
                        false,
                    ),
                },
                () = next_loss => (
                    Err(unreachable(
                        "the database was found out of reach while this waited for it".into(),
                    )),
                    true,
                ),
            }
        });
        if let (Err(err), false) = (&result, by_another) {
            self.health.failed(deadline.began, err);
        }
        result
    }

    /// Runs `work` on the store's runtime and waits for its result, from any thread (see the
    /// module's doc).
    pub(crate) fn block<F>(&self, work: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        let Some(runtime) = self.runtime.0.as_ref() else {
            unreachable!("the runtime is only taken when the store is dropped")
        };
        let handle = runtime.handle();
        match tokio::runtime::Handle::try_current() {
            Ok(current) => match current.runtime_flavor() {
                tokio::runtime::RuntimeFlavor::CurrentThread => {
                    // A single-threaded runtime cannot lend its thread; its caller waits.
                    std::thread::scope(|scope| {
                        scope
                            .spawn(|| handle.block_on(work))
                            .join()
                            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                    })
                }
                _ => tokio::task::block_in_place(|| handle.block_on(work)),
            },
            Err(_) => handle.block_on(work),
        }
    }

    /// Starts `work` on the store's runtime without waiting for it.
    pub(crate) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        if let Some(runtime) = self.runtime.0.as_ref() {
            runtime.spawn(work);
        }
    }

    /// A connection from the pool for the unit of work of `deadline`.
    fn connection(&self, deadline: Deadline) -> Result<Connection, StoreError> {
        self.block_until(deadline, None, self.pool.get())
    }

    /// Runs one statement on its own (committed when it returns) and returns its rows, under
    /// a request's deadline.
    pub(crate) fn statement(
        &self,
        sql: &str,
        params: &tx::Params<'_>,
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        self.statement_within(Patience::Request, sql, params)
    }

    /// [`PgStore::statement`] under the deadline of `patience`.
    fn statement_within(
        &self,
        patience: Patience,
        sql: &str,
        params: &tx::Params<'_>,
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let deadline = self.deadline(patience)?;
        let client = self.connection(deadline)?;
        let rows = self.block_until(deadline, Some(&client.host), async {
            let statement = client.prepare_cached(sql).await?;
            client.query(&statement, params).await
        });
        if rows.as_ref().is_err_and(health::is_unreachable) {
            // Its state is unknown (a statement may still be under way): never reused.
            drop(Connection::take(client));
        }
        rows
    }
}

/// The pool: connections made by a [`connect::Connector`] for every host of the URL. It has
/// no timeouts of its own: every wait for it is within a unit of work's deadline.
fn pool(config: &PostgresConfig, health: Arc<health::Health>) -> Result<Pool, StoreError> {
    let mut pg: tokio_postgres::Config = config
        .url
        .expose()
        .parse()
        .map_err(|e| StoreError::Backend(format!("storage.postgres.url: {e}").into()))?;
    // Bounds each TCP connect too (the connector bounds the whole attempt on a host).
    pg.connect_timeout(config.connect_timeout);
    pg.application_name("intake");
    let tls = match config.tls {
        PostgresTls::Disable => {
            pg.ssl_mode(tokio_postgres::config::SslMode::Disable);
            connect::Tls::Disable
        }
        PostgresTls::VerifyFull => {
            pg.ssl_mode(tokio_postgres::config::SslMode::Require);
            connect::Tls::Rustls(tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(
                config,
            )?))
        }
    };
    let connector = connect::Connector::new(
        &pg,
        tls,
        config.connect_timeout,
        connect::SessionLimits::for_request_timeout(config.request_timeout),
        health,
    )?;
    Pool::builder(connector)
        .max_size(config.pool_size)
        .build()
        .map_err(|e| StoreError::Backend(Box::new(e)))
}

/// rustls with the ring provider, verifying the server's certificate and host name against
/// `ca_file` or the built-in Mozilla roots.
fn tls_config(config: &PostgresConfig) -> Result<rustls::ClientConfig, StoreError> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;

    let mut roots = rustls::RootCertStore::empty();
    match &config.ca_file {
        Some(path) => {
            let bad = |detail: String| {
                StoreError::Backend(
                    format!("storage.postgres.ca_file {}: {detail}", path.display()).into(),
                )
            };
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| bad(e.to_string()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad(e.to_string()))?;
            if certs.is_empty() {
                return Err(bad("holds no certificate".into()));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| bad(e.to_string()))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Backend(Box::new(e)))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(err: tokio_postgres::Error) -> Self {
        StoreError::Backend(Box::new(err))
    }
}

/// A connection that could not be taken from the pool: the connector's error as it is (it
/// names every host and what each did).
impl From<deadpool::managed::PoolError<StoreError>> for StoreError {
    fn from(err: deadpool::managed::PoolError<StoreError>) -> Self {
        match err {
            deadpool::managed::PoolError::Backend(err) => err,
            other => StoreError::Backend(with_causes(&other).into()),
        }
    }
}

/// Whether a failed transaction may simply be run again: a serialisation failure or a
/// deadlock, where PostgreSQL rolled it back and nothing of it was written.
pub(crate) fn is_retryable(err: &StoreError) -> bool {
    let StoreError::Backend(err) = err else {
        return false;
    };
    err.downcast_ref::<tokio_postgres::Error>()
        .and_then(|e| e.code())
        .is_some_and(|code| {
            *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED
        })
}

pub(crate) fn to_json<T: Serialize>(row: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(row).map_err(|e| StoreError::Corrupt(format!("cannot encode row: {e}")))
}

pub(crate) fn from_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(bytes)
        .map_err(|e| StoreError::Corrupt(format!("cannot decode row: {e}")))
}

/// The JSON row in column `column` of `row`.
pub(crate) fn row_json<T: DeserializeOwned>(
    row: &tokio_postgres::Row,
    column: usize,
) -> Result<T, StoreError> {
    from_json(row.try_get::<_, &[u8]>(column)?)
}

/// A u64 (an id, a partition, a microsecond time) as PostgreSQL's `bigint`.
pub(crate) fn big(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A `bigint` column read back as the u64 it was written from.
pub(crate) fn unbig(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// A partition as its `bigint` column (its stored number).
pub(crate) fn big_partition(partition: Partition) -> i64 {
    big(partition.raw())
}

/// A `bigint` partition column read back.
pub(crate) fn unbig_partition(value: i64) -> Partition {
    Partition::from_raw(unbig(value))
}

/// A count (a `LIMIT`) as PostgreSQL's `bigint`.
pub(crate) fn count(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A time as the `bigint` microseconds it is stored as (times before 1970 as 0, as on redb).
pub(crate) fn micros(time: crate::core::clock::Timestamp) -> i64 {
    big(crate::store::time_key(time))
}

/// A record id as its 16 big-endian bytes.
pub(crate) fn id_bytes(id: u128) -> [u8; 16] {
    id.to_be_bytes()
}

/// A record id read back from its 16 bytes.
pub(crate) fn id_from_bytes(bytes: &[u8]) -> Result<u128, StoreError> {
    <[u8; 16]>::try_from(bytes)
        .map(u128::from_be_bytes)
        .map_err(|_| StoreError::Corrupt(format!("a record id of {} bytes", bytes.len())))
}

/// Throwaway clusters for the tests (the integration tests' harness, compiled in by path).
#[cfg(test)]
#[path = "../../../tests/common/postgres.rs"]
pub(crate) mod test_cluster;

/// A store on a new empty database of the test process's shared cluster.
#[cfg(test)]
pub(crate) fn test_store() -> PgStore {
    test_store_on(test_cluster::shared().database(), |_| {})
}

/// A store on the database at `url` (one of the test cluster's), its configuration the
/// default but for what `configure` changes.
#[cfg(test)]
pub(crate) fn test_store_on(url: String, configure: impl FnOnce(&mut PostgresConfig)) -> PgStore {
    let mut config = PostgresConfig {
        url: crate::core::config::Secret::new(url),
        tls: PostgresTls::Disable,
        ..PostgresConfig::default()
    };
    configure(&mut config);
    match PgStore::open(&config) {
        Ok(store) => store,
        Err(err) => panic!("open the test database: {err}"),
    }
}

/// [`test_store`] joined to the cluster as a node whose creates may be stamped at any time (its
/// lease from now), so that it may apply batches.
#[cfg(test)]
pub(crate) fn test_node() -> PgStore {
    test_node_on(test_cluster::shared().database(), |_| {})
}

/// [`test_store_on`] joined to the cluster as [`test_node`] is.
#[cfg(test)]
pub(crate) fn test_node_on(url: String, configure: impl FnOnce(&mut PostgresConfig)) -> PgStore {
    let store = test_store_on(url, configure);
    if let Err(err) = crate::store::cluster::ClusterStore::publish_low_water(
        &store,
        crate::core::clock::Timestamp(0),
        crate::core::clock::Timestamp(0),
    ) {
        panic!("join the test cluster: {err}");
    }
    store
}

/// The store's contract (`store::conformance`) on PostgreSQL, each check on a fresh database.
#[cfg(test)]
mod conformance {
    crate::store::conformance::conformance_tests!(Box::new(super::test_node()));
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_new_database_is_migrated_and_writable() {
        let store = super::test_store();
        crate::store::Store::check_writable(&store).unwrap();
        // A second open finds the schema current and changes nothing.
        let tx = super::PgTx::read(&store).unwrap();
        let row = tx
            .query_opt("SELECT max(version) FROM intake_schema", &[])
            .unwrap()
            .unwrap();
        assert_eq!(row.get::<_, i32>(0), super::schema::latest_version());
    }
}
