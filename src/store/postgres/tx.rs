//! The PostgreSQL transaction behind both [`ReadTx`] and [`WriteTx`], and [`Store`] for
//! [`PgStore`].
//!
//! One type serves both: a read snapshot is a `REPEATABLE READ READ ONLY` transaction (the
//! database refuses any write in it), a write a `SERIALIZABLE` one, so each typed read is
//! written once. `BEGIN` goes out with the first statement, in the same round trip; a
//! transaction dropped without its commit is rolled back before its connection returns to the
//! pool.
//!
//! A transaction is one unit of work under one deadline (see the module `postgres`): taking
//! its connection, its statements and its commit. One that finds the database out of reach
//! closes its connection instead of returning it (a statement may still be under way on it).

use std::cell::Cell;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use super::health::is_unreachable;
use super::{Connection, Deadline, Patience, PgStore, is_retryable};
use crate::core::clock::Timestamp;
use crate::store::{Effects, IdKind, ReadTx, Store, StoreError, StoreGauges, WriteTx};

/// Statement parameters, as tokio-postgres takes them.
pub type Params<'a> = [&'a (dyn ToSql + Sync)];

const BEGIN_READ: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY";
/// A long snapshot ([`Store::long_read`]) waits on its reader between statements: the
/// session's idle limit, half a request's time, would end it. A read-only snapshot holds no
/// row and takes no transaction id, so it holds back neither writers nor the change stream's
/// settled events (`events.rs`); an hour bounds what a reader that stopped reading keeps open.
const BEGIN_LONG_READ: &str = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; \
                               SET LOCAL idle_in_transaction_session_timeout = '1h'";
const BEGIN_WRITE: &str = "BEGIN ISOLATION LEVEL SERIALIZABLE";

/// How often [`Store::write_with`] runs a closure whose transaction lost a serialisation
/// conflict before it gives up with the error.
const WRITE_ATTEMPTS: usize = 20;
/// The longest pause before running a transaction that lost a conflict again.
const MOST_BACK_OFF: Duration = Duration::from_millis(32);

/// Waits a random moment before attempt `attempt + 1` of a transaction that lost a conflict:
/// up to 1, 2, 4 … [`MOST_BACK_OFF`] ms, never past `deadline`. Run again at once, two
/// transactions that conflict tend to meet again the same way (a purge against a busy
/// ingest lost all its attempts in the soak benchmark); a random pause lets one finish first.
fn back_off(attempt: usize, deadline: Deadline) {
    let most = Duration::from_millis(1 << attempt.min(5)).min(MOST_BACK_OFF);
    let pause = most.mul_f64(rand::random::<f64>());
    let left = deadline.at.saturating_duration_since(Instant::now());
    std::thread::sleep(pause.min(left));
}

/// Turns of a node's own transactions that often meet the same rows: the ingest writers, whose
/// concurrent batches read and write neighbouring records, so under `SERIALIZABLE` they abort
/// each other. Retried side by side they can keep meeting until every attempt is spent (seen:
/// eight clients replacing neighbouring records on one node with four writers). The first
/// attempts run beside the others; a transaction that lost [`ALONE_FROM_ATTEMPT`]` - 1`
/// conflicts runs its next attempts alone among them, so the node's own writers never starve
/// one another (other nodes' units are still met, and retried, as before).
#[derive(Default)]
pub(super) struct Turns(RwLock<()>);

/// The attempt from which a [`Turns`] transaction runs alone. Sooner costs throughput: the
/// first retry running alone took sixteen clients' 512 neighbouring replacements from 3.9 s
/// to 7 s (four writers); from the fourth attempt they took 3.9 s, and none of 9 runs under
/// load failed where 4 of 9 had without turns (`data_api::concurrent_replacements_…`).
const ALONE_FROM_ATTEMPT: usize = 4;

/// One attempt's turn, held while it runs: shared with the others' early attempts, or alone.
struct Turn<'t> {
    _beside: Option<RwLockReadGuard<'t, ()>>,
    _alone: Option<RwLockWriteGuard<'t, ()>>,
}

impl Turns {
    /// Waits for attempt `attempt`'s turn. A poisoned lock guards nothing (`()`), so it is
    /// taken as it is.
    fn take(&self, attempt: usize) -> Turn<'_> {
        if attempt < ALONE_FROM_ATTEMPT {
            Turn {
                _beside: Some(self.0.read().unwrap_or_else(PoisonError::into_inner)),
                _alone: None,
            }
        } else {
            Turn {
                _beside: None,
                _alone: Some(self.0.write().unwrap_or_else(PoisonError::into_inner)),
            }
        }
    }
}

/// A transaction on one pooled connection.
pub struct PgTx<'s> {
    store: &'s PgStore,
    client: Option<Connection>,
    begin: &'static str,
    begun: Cell<bool>,
    /// A statement failed with a conflict that a new attempt may not meet.
    conflicted: Cell<bool>,
    /// When the transaction stops waiting for the database.
    deadline: Cell<Deadline>,
    /// A step found the database out of reach: the connection is closed, never reused.
    broken: Cell<bool>,
    /// Each statement gets a request's time anew (a long snapshot), not a share of one.
    renewed: bool,
    pub(super) effects: Effects,
}

impl<'s> PgTx<'s> {
    fn new(
        store: &'s PgStore,
        begin: &'static str,
        deadline: Deadline,
    ) -> Result<PgTx<'s>, StoreError> {
        let client = store.connection(deadline)?;
        Ok(PgTx {
            store,
            client: Some(client),
            begin,
            begun: Cell::new(false),
            conflicted: Cell::new(false),
            deadline: Cell::new(deadline),
            broken: Cell::new(false),
            renewed: false,
            effects: Effects::default(),
        })
    }

    /// A long read snapshot ([`Store::long_read`]).
    fn long_read(store: &'s PgStore) -> Result<PgTx<'s>, StoreError> {
        let mut tx = PgTx::new(store, BEGIN_LONG_READ, store.deadline(Patience::Request)?)?;
        tx.renewed = true;
        Ok(tx)
    }

    /// A read snapshot, under a request's deadline.
    pub(super) fn read(store: &'s PgStore) -> Result<PgTx<'s>, StoreError> {
        PgTx::new(store, BEGIN_READ, store.deadline(Patience::Request)?)
    }

    /// A write transaction, under a request's deadline.
    pub(super) fn write(store: &'s PgStore) -> Result<PgTx<'s>, StoreError> {
        PgTx::new(store, BEGIN_WRITE, store.deadline(Patience::Request)?)
    }

    /// Allows the rest of the transaction `more` time (a search's statement limit).
    pub(super) fn wait_longer(&self, more: std::time::Duration) {
        self.deadline.set(self.deadline.get().extended(more));
    }

    fn client(&self) -> &Connection {
        match &self.client {
            Some(client) => client,
            None => unreachable!("the client is only taken by commit and drop"),
        }
    }

    /// Runs one statement (prepared once per connection) and returns its rows.
    pub(super) fn query(&self, sql: &str, params: &Params<'_>) -> Result<Vec<Row>, StoreError> {
        let client = self.client();
        self.run(sql, |statement| async move {
            client.query(&statement, params).await
        })
    }

    /// The one row a statement returns, if any.
    pub(super) fn query_opt(
        &self,
        sql: &str,
        params: &Params<'_>,
    ) -> Result<Option<Row>, StoreError> {
        let mut rows = self.query(sql, params)?;
        if rows.len() > 1 {
            return Err(StoreError::Corrupt(format!(
                "{} rows where one was expected",
                rows.len()
            )));
        }
        Ok(rows.pop())
    }

    /// Runs one statement; returns how many rows it changed.
    pub(super) fn execute(&self, sql: &str, params: &Params<'_>) -> Result<u64, StoreError> {
        let client = self.client();
        self.run(sql, |statement| async move {
            client.execute(&statement, params).await
        })
    }

    /// Prepares `sql` (once per connection) and runs it with `send`, under the transaction's
    /// deadline. The first statement takes the transaction's BEGIN with it: both go out in one
    /// write, so BEGIN costs no round trip of its own.
    fn run<T, Sent>(
        &self,
        sql: &str,
        send: impl FnOnce(Statement) -> Sent + Send,
    ) -> Result<T, StoreError>
    where
        T: Send,
        Sent: Future<Output = Result<T, tokio_postgres::Error>> + Send,
    {
        let client = self.client();
        if self.renewed {
            self.deadline.set(self.store.deadline(Patience::Request)?);
        }
        let begin = (!self.begun.get()).then_some(self.begin);
        let result = self
            .store
            .block_until(self.deadline.get(), Some(&client.host), async {
                let statement = client.prepare_cached(sql).await?;
                match begin {
                    None => send(statement).await,
                    Some(begin) => {
                        let (begun, sent) = futures_util::future::join(
                            client.batch_execute(begin),
                            send(statement),
                        )
                        .await;
                        begun.and(sent)
                    }
                }
            });
        self.begun.set(true);
        result.map_err(|e| self.note(e))
    }

    /// Remembers a conflict, so the caller of `write_with` can tell it from a refusal, and a
    /// database out of reach, so the connection is closed.
    fn note(&self, err: StoreError) -> StoreError {
        if is_retryable(&err) {
            self.conflicted.set(true);
        }
        if is_unreachable(&err) {
            self.broken.set(true);
        }
        err
    }

    /// Commits; returns what the transaction changed that others must follow. A commit whose
    /// answer did not come is an error, though it may have been applied: nothing is
    /// acknowledged on it.
    fn commit(mut self) -> Result<Effects, StoreError> {
        if self.begun.get() {
            let client = self.client();
            let result = self.store.block_until(
                self.deadline.get(),
                Some(&client.host),
                client.batch_execute("COMMIT"),
            );
            // Committed or not, the transaction is over: nothing to roll back on drop.
            self.begun.set(false);
            result.map_err(|e| self.note(e))?;
        }
        Ok(std::mem::take(&mut self.effects))
    }
}

impl Drop for PgTx<'_> {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        if self.broken.get() {
            drop(Connection::take(client));
            return;
        }
        if !self.begun.get() {
            return;
        }
        // Roll back off the caller's thread; the connection returns to the pool afterwards,
        // or is closed if even that failed or found no answer in a request's time.
        let limit = self.store.request_timeout;
        self.store.spawn(async move {
            let rolled_back = tokio::time::timeout(limit, client.batch_execute("ROLLBACK")).await;
            if !matches!(rolled_back, Ok(Ok(()))) {
                drop(Connection::take(client));
            }
        });
    }
}

impl PgStore {
    /// Runs `work` in one write transaction and commits it; returns its value and what the
    /// commit changed. A transaction that lost a serialisation conflict is run again, `work`
    /// included (at most [`WRITE_ATTEMPTS`] times): [`Store::write_with`] and the store-level
    /// units of work of the areas go through here.
    pub(super) fn write_unit<T>(
        &self,
        work: impl FnMut(&mut PgTx<'_>) -> Result<T, StoreError>,
    ) -> Result<(T, Effects), StoreError> {
        self.write_unit_within(Patience::Request, work)
    }

    /// [`PgStore::write_unit`] for an ingest writer's batch carrying `bytes` of payload, which
    /// may take longer (`Patience::Carrying`): an attempt after a lost conflict waits until it
    /// can run alone among the node's writers ([`Turns`]).
    pub(super) fn write_ingest_batch<T>(
        &self,
        bytes: usize,
        work: impl FnMut(&mut PgTx<'_>) -> Result<T, StoreError>,
    ) -> Result<(T, Effects), StoreError> {
        self.run_attempts(Patience::Carrying { bytes }, Some(&self.ingest_turns), work)
    }

    /// [`PgStore::write_unit`] under the deadline of `patience`, which every attempt shares.
    pub(super) fn write_unit_within<T>(
        &self,
        patience: Patience,
        work: impl FnMut(&mut PgTx<'_>) -> Result<T, StoreError>,
    ) -> Result<(T, Effects), StoreError> {
        self.run_attempts(patience, None, work)
    }

    /// The attempts of a write unit, each in its turn of `turns` if given.
    fn run_attempts<T>(
        &self,
        patience: Patience,
        turns: Option<&Turns>,
        mut work: impl FnMut(&mut PgTx<'_>) -> Result<T, StoreError>,
    ) -> Result<(T, Effects), StoreError> {
        let deadline = self.deadline(patience)?;
        let mut attempt = 1;
        loop {
            let turn = turns.map(|turns| turns.take(attempt));
            let mut tx = PgTx::new(self, BEGIN_WRITE, deadline)?;
            let result = work(&mut tx);
            let conflicted = tx.conflicted.get();
            let result = result.and_then(|value| Ok((value, tx.commit()?)));
            drop(turn);
            match result {
                Ok(done) => return Ok(done),
                Err(err) if (conflicted || is_retryable(&err)) && attempt < WRITE_ATTEMPTS => {
                    back_off(attempt, deadline);
                    attempt += 1;
                }
                Err(err) => return Err(err),
            }
        }
    }
}

impl ReadTx for PgTx<'_> {
    fn text_search(&self) -> Option<&dyn crate::store::records::TextSearch> {
        Some(self)
    }
}

impl WriteTx for PgTx<'_> {
    fn next_id(&mut self, kind: IdKind) -> Result<u64, StoreError> {
        let sql = match kind {
            IdKind::Account => "SELECT nextval('account_ids')",
            IdKind::Endpoint => "SELECT nextval('endpoint_ids')",
            IdKind::Invitation => "SELECT nextval('invitation_ids')",
            IdKind::Notification => "SELECT nextval('notification_ids')",
            IdKind::Audit => "SELECT nextval('audit_ids')",
            IdKind::Mail => "SELECT nextval('mail_ids')",
            IdKind::Erasure => "SELECT nextval('erasure_ids')",
        };
        let row = self
            .query_opt(sql, &[])?
            .ok_or_else(|| StoreError::Corrupt("nextval returned no row".into()))?;
        Ok(super::unbig(row.try_get(0)?))
    }
}

impl Store for PgStore {
    fn read(&self) -> Result<Box<dyn ReadTx + '_>, StoreError> {
        Ok(Box::new(PgTx::read(self)?))
    }

    fn long_read(&self) -> Result<Box<dyn ReadTx + '_>, StoreError> {
        Ok(Box::new(PgTx::long_read(self)?))
    }

    fn write_with(
        &self,
        work: &mut dyn FnMut(&mut dyn WriteTx) -> Result<(), StoreError>,
    ) -> Result<Effects, StoreError> {
        self.write_unit(|tx| work(tx)).map(|((), effects)| effects)
    }

    fn shared_value(&self, name: &str, proposed: &[u8]) -> Result<Vec<u8>, StoreError> {
        let tx = PgTx::write(self)?;
        // Inserted unless present; either way the row now holds the value that counts.
        tx.execute(
            "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
            &[&name, &proposed],
        )?;
        let row = tx
            .query_opt("SELECT value FROM settings WHERE name = $1", &[&name])?
            .ok_or_else(|| StoreError::Corrupt(format!("setting {name} vanished")))?;
        let value: Vec<u8> = row.try_get(0)?;
        tx.commit()?;
        Ok(value)
    }

    /// Answers from what the node knows (its units of work and its watcher, see `health`),
    /// never waiting for the database.
    fn check_writable(&self) -> Result<(), StoreError> {
        match self.health.problem() {
            Some(problem) => Err(StoreError::Backend(problem.into())),
            None => Ok(()),
        }
    }

    fn gauges(&self, now: Timestamp) -> Result<StoreGauges, StoreError> {
        self.read_gauges(now)
    }

    fn change_log(&self) -> Option<&dyn crate::store::changes::ChangesStore> {
        None
    }

    fn cluster(&self) -> Option<&dyn crate::store::cluster::ClusterStore> {
        Some(self)
    }

    fn import(&self) -> Option<&dyn crate::store::transfer::Import> {
        Some(self)
    }

    fn backup_source(&self) -> Option<&dyn crate::store::backup::BackupSource> {
        None
    }

    fn payload_dictionaries(&self) -> Option<&dyn crate::store::compression::PayloadDictionaries> {
        None
    }

    /// The database's free space is the server's (VACUUM).
    fn scrub_free_space(&self) -> Result<Option<crate::store::ScrubReport>, StoreError> {
        Ok(None)
    }
}
