//! What a node knows of its database without asking it: whether the database is reachable,
//! since when it is not and why, and whether the server it reaches is a read-only standby.
//!
//! Every unit of work runs under a deadline (`PgStore::block_until`). A unit that finds the
//! database out of reach (no answer by its deadline, a connection lost, no host of the URL
//! taking a connection) marks the database *lost*. Then every unit still waiting gives up at
//! once (its connection, made before the loss, is not to be trusted either), and while the
//! database is lost:
//! - new units fail at once (503 `storage_unavailable`), so no request waits on a database
//!   already known not to answer, and the writes queued behind a batch that found no answer
//!   are refused at once instead of each waiting out a deadline of its own;
//! - readiness (`Store::check_writable`) reports it, answering from here, never waiting;
//! - connections made before the loss are never handed out again (`connect`'s recycle);
//! - a watcher makes a fresh connection every [`PROBE_RETRY`], several at a time, through
//!   the connector (which tries every host of the URL); the first that reaches a server
//!   ends the loss.
//!
//! While the database is reachable the watcher asks it through the pool every
//! [`PROBE_EVERY`] whether it is in recovery, so an idle node notices a lost database or a
//! standby too.
//!
//! A failure of work begun before the database was last found reachable again is old news
//! and changes nothing, and so is a probe's.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};
use tokio_postgres::error::SqlState;

use super::Pool;
use crate::store::StoreError;
use crate::store::with_causes;

/// How often the watcher asks a reachable database whether it is a standby.
const PROBE_EVERY: Duration = Duration::from_secs(1);
/// How often the watcher starts a fresh connection while the database is lost.
const PROBE_RETRY: Duration = Duration::from_millis(250);
/// Fresh connections the watcher has under way at most: a round that waits out a host that
/// does not answer does not hold back the next one, which may find a standby just promoted.
const PROBES_IN_FLIGHT: usize = 8;

/// The database did not answer in time, or no host of the URL gave a connection.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct Unreachable(pub(super) String);

/// Whether `err` says the database is out of reach (rather than refusing one statement).
pub(super) fn is_unreachable(err: &StoreError) -> bool {
    let StoreError::Backend(err) = err else {
        return false;
    };
    if err.downcast_ref::<Unreachable>().is_some() {
        return true;
    }
    let Some(err) = err.downcast_ref::<tokio_postgres::Error>() else {
        return false;
    };
    if err.is_closed() {
        return true;
    }
    match err.code() {
        // Shut down, restarting, or a connection-class error.
        Some(code) => {
            *code == SqlState::ADMIN_SHUTDOWN
                || *code == SqlState::CRASH_SHUTDOWN
                || *code == SqlState::CANNOT_CONNECT_NOW
                || code.code().starts_with("08")
        }
        // No SQLSTATE: the socket itself failed.
        None => std::error::Error::source(err)
            .is_some_and(|source| source.downcast_ref::<std::io::Error>().is_some()),
    }
}

/// The database's state as this node last found it.
pub(super) struct Health {
    state: Mutex<State>,
    /// Wakes every unit of work waiting, and the watcher, when the database is found lost.
    lost: Notify,
}

#[derive(Default)]
struct State {
    /// Since when and why the database is taken as lost; `None` while it is reachable.
    lost: Option<(Instant, String)>,
    /// When the database was last found lost: connections made before are not reused.
    last_lost: Option<Instant>,
    /// When it was last found reachable again after a loss: failures of work begun before
    /// are old news.
    last_found: Option<Instant>,
    /// The latest probe found a server in recovery (a standby): writes would be refused.
    read_only: bool,
}

impl Health {
    pub(super) fn new() -> Arc<Health> {
        Arc::new(Health {
            state: Mutex::new(State::default()),
            lost: Notify::new(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Refuses new work at once while the database is lost.
    pub(super) fn check(&self) -> Result<(), StoreError> {
        match &self.state().lost {
            Some((since, cause)) => Err(StoreError::Backend(Box::new(Unreachable(format!(
                "the database has been out of reach for {:.1} s ({cause}); trying again",
                since.elapsed().as_secs_f64()
            ))))),
            None => Ok(()),
        }
    }

    /// Work begun at `began` failed with `err`: the database is lost if `err` says so.
    pub(super) fn failed(&self, began: Instant, err: &StoreError) {
        if is_unreachable(err) {
            let cause = match err {
                StoreError::Backend(err) => with_causes(err.as_ref()),
                other => other.to_string(),
            };
            self.lose(began, cause);
        }
    }

    fn lose(&self, began: Instant, cause: String) {
        let mut state = self.state();
        if state.last_found.is_some_and(|found| began < found) {
            return;
        }
        match &mut state.lost {
            // Still lost: the latest cause is the one to show.
            Some((_, shown)) => *shown = cause,
            None => {
                log::warn!("the database is out of reach: {cause}");
                let now = Instant::now();
                state.lost = Some((now, cause));
                state.last_lost = Some(now);
                drop(state);
                self.lost.notify_waiters();
            }
        }
    }

    fn found(&self, began: Instant, read_only: bool) {
        let mut state = self.state();
        if state.last_lost.is_some_and(|lost| began < lost) {
            // Begun before the latest loss (perhaps on a connection made before it): it
            // says nothing of now.
            return;
        }
        if let Some((since, _)) = state.lost.take() {
            log::info!(
                "the database is reachable again after {:.1} s",
                since.elapsed().as_secs_f64()
            );
            state.last_found = Some(Instant::now());
        }
        state.read_only = read_only;
    }

    /// Whether a connection made at `created` predates the latest loss of the database.
    pub(super) fn lost_since(&self, created: Instant) -> bool {
        self.state().last_lost.is_some_and(|lost| created <= lost)
    }

    /// Why writes would fail now, as far as this node knows: the database out of reach, or
    /// a standby.
    pub(super) fn problem(&self) -> Option<String> {
        let state = self.state();
        match &state.lost {
            Some((since, cause)) => Some(format!(
                "the database has been out of reach for {:.1} s: {cause}",
                since.elapsed().as_secs_f64()
            )),
            None if state.read_only => Some(
                "the database is a read-only standby (in recovery): point storage.postgres.url \
                 at the primary (with several hosts, add target_session_attrs=read-write)"
                    .into(),
            ),
            None => None,
        }
    }

    fn is_lost(&self) -> bool {
        self.state().lost.is_some()
    }

    /// Completes when the database is next found lost (from the moment it is called, before
    /// it is first polled).
    pub(super) fn next_loss(&self) -> tokio::sync::futures::Notified<'_> {
        self.lost.notified()
    }
}

/// The limits the watcher's probes run under.
#[derive(Clone, Copy)]
pub(super) struct ProbeLimits {
    /// A probe through the pool, while the database is reachable: a request's limit.
    pub(super) pooled: Duration,
    /// A fresh connection and its question: every host's connect limit, then a request's.
    pub(super) fresh: Duration,
}

/// The watcher (see the module's doc); runs on the store's runtime until it shuts down.
pub(super) async fn watch(health: Arc<Health>, pool: Pool, limits: ProbeLimits) {
    let in_flight = Arc::new(Semaphore::new(PROBES_IN_FLIGHT));
    loop {
        let next_loss = health.next_loss();
        if health.is_lost() {
            if let Ok(permit) = in_flight.clone().try_acquire_owned() {
                let (health, pool) = (health.clone(), pool.clone());
                tokio::spawn(async move {
                    let began = Instant::now();
                    let asked = tokio::time::timeout(limits.fresh, async {
                        let client = pool.manager().connect().await?;
                        in_recovery(&client).await
                    })
                    .await;
                    settle(&health, began, asked, limits.fresh);
                    drop(permit);
                });
            }
            tokio::time::sleep(PROBE_RETRY).await;
        } else {
            tokio::select! {
                () = tokio::time::sleep(PROBE_EVERY) => {}
                () = next_loss => continue,
            }
            let began = Instant::now();
            // Found lost meanwhile by another unit: fresh connections are what to try now.
            tokio::select! {
                asked = tokio::time::timeout(limits.pooled, async {
                    let client = pool.get().await?;
                    in_recovery(&client).await
                }) => settle(&health, began, asked, limits.pooled),
                () = health.next_loss() => {}
            }
        }
    }
}

async fn in_recovery(client: &tokio_postgres::Client) -> Result<bool, StoreError> {
    Ok(client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await?
        .try_get(0)?)
}

/// Records what a probe begun at `began` found.
fn settle(
    health: &Health,
    began: Instant,
    asked: Result<Result<bool, StoreError>, tokio::time::error::Elapsed>,
    limit: Duration,
) {
    match asked {
        Ok(Ok(read_only)) => health.found(began, read_only),
        Ok(Err(err)) if is_unreachable(&err) => health.failed(began, &err),
        Ok(Err(err)) => log::warn!("the database's probe failed: {}", with_causes(&err)),
        Err(_) => health.lose(
            began,
            format!("the database did not answer a probe within {limit:?}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Health, Unreachable, is_unreachable};
    use crate::store::StoreError;

    fn unreachable() -> StoreError {
        StoreError::Backend(Box::new(Unreachable("no answer".into())))
    }

    #[test]
    fn a_lost_database_refuses_work_until_found_and_old_failures_change_nothing() {
        let health = Health::new();
        let before = Instant::now();
        assert!(health.check().is_ok());
        // A refusal of one statement is no loss.
        health.failed(before, &StoreError::Corrupt("x".into()));
        assert!(health.check().is_ok() && health.problem().is_none());
        health.failed(before, &unreachable());
        let err = health.check().unwrap_err();
        assert!(is_unreachable(&err), "{err}");
        assert!(health.problem().unwrap().contains("no answer"));
        // Connections made before the loss are not handed out again; later ones are.
        assert!(health.lost_since(before));
        let probe = Instant::now();
        health.found(probe, false);
        assert!(health.check().is_ok() && health.problem().is_none());
        assert!(!health.lost_since(Instant::now() + Duration::from_millis(1)));
        // Work begun before the database was found again failed with old news.
        health.failed(before, &unreachable());
        assert!(health.check().is_ok());
        // A probe that found a standby: reachable, but not writable.
        health.found(Instant::now(), true);
        assert!(health.check().is_ok());
        assert!(health.problem().unwrap().contains("standby"));
    }
}
