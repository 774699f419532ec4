//! The dispatcher: sends due deliveries, applies the retry policy, records every attempt.
//!
//! Four kinds of threads share one [`Dispatcher`] state (`Shared`: the claims, the slots in
//! use and the wake-up flags):
//!
//! - **The scheduler** (`webhook-scheduler`, in `scheduler`) claims the due deliveries a
//!   worker can start at once, within the pool's fairness limits and the subscriptions' rate
//!   limits, and hands them to the workers.
//! - **The workers** (`webhook-worker`, `[webhooks] workers` of them, in `pool`) sign and send
//!   one delivery at a time (`send`), judge the answer by the retry policy
//!   (`domain::webhooks::policy`), then hand the outcome to the result writer.
//! - **The result writer** (`webhook-results`, in `results`) commits outcomes in groups
//!   (`domain::webhooks::outcomes`), like the ingest writer: under load many attempts share
//!   one fsync; with one in flight it costs one.
//! - **The recovery walk** (`webhook-recovery`, in `scheduler`) carries out bulk recoveries
//!   (`domain::webhooks::recovery`) a chunk at a time while one is running: woken by the
//!   commit that starts one (and at start, for one a restart interrupted), it re-arms the
//!   deliveries each chunk takes, whose commit wakes the scheduler.
//!
//! Signing a request only reads: the server makes the signing secrets that endpoints from
//! before secrets existed lack before it starts the dispatcher (`secrets::create_missing`).
//!
//! **Claims and at-least-once.** A claimed delivery is held in memory (`State::claimed`) from
//! the scheduler's claim until its outcome is committed, so it is not taken twice. That lease
//! lives as long as the attempt, which the timeout bounds, plus one commit; nothing about it
//! is persisted, so nothing can go stale: after a crash or restart every unfinished delivery
//! is simply due again at its persisted due time. A delivery can thus reach a receiver twice
//! (an answer whose outcome was not yet committed), never zero times, and a pending retry is
//! neither lost nor sent before its time. Receivers deduplicate by `webhook-id` with the body's
//! `type` and `timestamp`. The
//! scheduler snapshots the claims together with its read transaction, so a claim released by
//! a commit its snapshot does not show yet still counts.
//!
//! **Several nodes.** On a store shared by several nodes the scheduler also claims each
//! delivery in the store before handing it to a worker (`ClusterStore::claim_delivery`): a
//! delivery another node holds is passed over, and the claim of a node that died lapses after
//! twice the attempt timeout, when another node takes the delivery over.
//!
//! **Shutdown.** [`Dispatcher::shutdown`] stops the scheduler claiming; workers finish the
//! attempt in hand (bounded by the timeout) and start no other; the result writer commits
//! every outcome and stops once the workers have; [`DispatchThreads::join`] waits for all.

pub mod pacing;
mod pool;
pub mod probe;
pub mod proxy;
mod results;
mod scheduler;
pub mod send;

use std::collections::HashSet;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use self::scheduler::Slots;
use self::send::Sender;
use crate::core::config::WebhooksConfig;
use crate::core::crypto::Sealer;
use crate::core::metrics::Metrics;
use crate::core::telemetry::Telemetry;
use crate::domain::handles::Handles;
use crate::domain::webhooks::health::Breaker;
use crate::domain::webhooks::outcomes::Outcome;
use crate::store::DeliveryRow;

/// Longest real-time wait between looks at the clock.
const TICK: Duration = Duration::from_secs(1);

/// Handle of the dispatcher; cheap to clone. It exists before its threads (so the after-commit
/// path the dispatcher writes through can hold it): [`Dispatcher::start`] starts them.
#[derive(Clone, Default)]
pub struct Dispatcher {
    shared: Arc<Shared>,
}

/// Joins the dispatcher's threads after [`Dispatcher::shutdown`].
pub struct DispatchThreads(Vec<JoinHandle<()>>);

impl DispatchThreads {
    pub fn join(self) {
        for handle in self.0 {
            if handle.join().is_err() {
                log::error!("a webhook dispatcher thread panicked");
            }
        }
    }
}

/// What the dispatcher needs from the server.
pub struct DispatchParts {
    /// The store, the clock, and the after-commit path (a failure e-mail wakes the mail
    /// worker).
    pub handles: Handles,
    pub sealer: Sealer,
    /// Base of the delivery-log links in failure e-mails.
    pub public_url: String,
    /// Where attempt outcomes are counted (`GET /metrics`).
    pub metrics: Arc<Metrics>,
    /// Where each attempt's span goes.
    pub telemetry: Telemetry,
}

impl Dispatcher {
    /// Starts the scheduler, the workers and the result writer.
    pub fn start(
        &self,
        parts: DispatchParts,
        config: &WebhooksConfig,
    ) -> std::io::Result<DispatchThreads> {
        let ctx = Arc::new(Context {
            parts,
            sender: Sender::new(config).map_err(std::io::Error::other)?,
            shared: self.shared.clone(),
            workers: config.workers,
            retry_workers: (config.workers / 2).max(1),
            per_target: config.per_target_concurrency,
            per_endpoint: config.per_endpoint_concurrency(),
            claim_hold: config.timeout * 2 + Duration::from_secs(5),
            breaker: Breaker {
                after: config.disable_after,
                min_attempts: config.disable_after_attempts,
            },
        });
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let (results_tx, results_rx) = mpsc::channel::<Outcome>();
        let jobs_rx = Arc::new(Mutex::new(jobs_rx));
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name.into()).spawn(f)
        };
        let mut threads = Vec::with_capacity(config.workers + 3);
        threads.push(spawn("webhook-results", {
            let ctx = ctx.clone();
            Box::new(move || results::write(&ctx, &results_rx))
        })?);
        for _ in 0..config.workers {
            let (ctx, jobs, results) = (ctx.clone(), jobs_rx.clone(), results_tx.clone());
            threads.push(spawn(
                "webhook-worker",
                Box::new(move || pool::work(&ctx, &jobs, &results)),
            )?);
        }
        drop(results_tx);
        threads.push(spawn("webhook-scheduler", {
            let ctx = ctx.clone();
            Box::new(move || scheduler::schedule(&ctx, &jobs_tx))
        })?);
        // Recoveries a restart interrupted go on.
        self.wake_recoveries();
        threads.push(spawn("webhook-recovery", {
            let ctx = ctx.clone();
            Box::new(move || scheduler::walk_recoveries(&ctx))
        })?);
        log::info!(
            "webhooks: {} workers, at most {} per receiver and {} per endpoint, timeout {:?}{}",
            config.workers,
            config.per_target_concurrency,
            config.per_endpoint_concurrency(),
            config.timeout,
            if config.proxy.is_some() {
                ", through the configured proxy"
            } else {
                ""
            }
        );
        Ok(DispatchThreads(threads))
    }

    /// Tells the scheduler that deliveries may be due; the after-commit path and the ingest
    /// writer call it.
    pub fn wake(&self) {
        self.shared.wake();
    }

    /// Tells the recovery walk that a recovery is running; the after-commit path calls it.
    pub fn wake_recoveries(&self) {
        self.shared.state().recoveries_wanted = true;
        self.shared.changed.notify_all();
    }

    /// Stops claiming deliveries; attempts in flight finish and their outcomes are committed.
    /// Join the [`DispatchThreads`] to wait.
    pub fn shutdown(&self) {
        self.shared.state().stopping = true;
        self.shared.changed.notify_all();
    }
}

/// The claims, the slots in use and the wake-up flags.
#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    woken: bool,
    stopping: bool,
    /// A recovery may be running: the recovery walk has work.
    recoveries_wanted: bool,
    /// Deliveries taken by a worker whose outcome is not committed yet: this process's leases.
    /// They live only here, which is enough while one process dispatches from the store. With
    /// several nodes dispatching from one shared store, the store must keep the claims: a
    /// claim taken atomically with a lease (an expiry a little past the attempt timeout plus
    /// one commit), released by the outcome's commit, and claimable by any node once its lease
    /// has run out, so a node that dies mid-attempt delays its deliveries by one lease and
    /// never holds them for good.
    claimed: HashSet<u64>,
    slots: Slots,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // Counters and a set updated in single steps: a panic elsewhere leaves them usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake(&self) {
        self.state().woken = true;
        self.changed.notify_all();
    }

    fn stopping(&self) -> bool {
        self.state().stopping
    }

    /// Waits for a wake-up or `timeout`; `false` once stopping.
    fn wait(&self, timeout: Duration) -> bool {
        let mut state = self.state();
        if !state.woken && !state.stopping {
            state = self
                .changed
                .wait_timeout(state, timeout)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        state.woken = false;
        !state.stopping
    }

    /// A worker is done with `job`'s attempt (its claim stays until the commit).
    fn free_slot(&self, job: &Job) {
        self.state().slots.free(job);
    }

    fn release(&self, ids: impl IntoIterator<Item = u64>) {
        let mut state = self.state();
        for id in ids {
            state.claimed.remove(&id);
        }
        state.woken = true;
        self.changed.notify_all();
    }
}

/// What every thread of the dispatcher shares: the parts, the sender and the limits.
struct Context {
    parts: DispatchParts,
    sender: Sender,
    shared: Arc<Shared>,
    workers: usize,
    retry_workers: usize,
    per_target: usize,
    per_endpoint: usize,
    /// How long this node's claim on a delivery holds on a shared store: the attempt's timeout
    /// and the commit of its outcome, with room to spare.
    claim_hold: Duration,
    breaker: Breaker,
}

/// A claimed delivery on its way to a worker.
struct Job {
    row: DeliveryRow,
    target: String,
    endpoint: u64,
    retry: bool,
}
