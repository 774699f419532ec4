//! The dispatcher: sends due deliveries, applies the retry policy, records every attempt.
//!
//! Three kinds of threads share one [`Dispatcher`] state:
//!
//! - **The scheduler** (`webhook-scheduler`) looks at the due list (entries due by the
//!   injected clock) when woken (after each ingest commit, after a manual redelivery, after a
//!   worker or the result writer finishes) and at least every [`TICK`] of real time, so
//!   clock-driven retries become due without a wake-up. It claims a due delivery only when a
//!   worker can start it at once: fewer than `workers` attempts in flight, fewer than
//!   `per_target_concurrency` to its receiver (scheme, host and port), fewer than
//!   `per_endpoint_concurrency` (half the workers by default) for its endpoint, and, for a
//!   retry (a delivery attempted before), fewer than half the workers busy with retries. So
//!   one slow or failing receiver holds at most its own share of the workers, one endpoint's
//!   receivers (one tenant's) can never take the whole pool from the others, and first
//!   attempts never wait behind a backlog of retries. A delivery of a subscription with a
//!   rate limit also waits for its subscription's pace (`pacing`); the scheduler then looks
//!   again when the next may start, not before. Deliveries it cannot start stay due for the
//!   next look. The due list carries each delivery's receiver and retry flag, and the
//!   scheduler remembers each delivery's endpoint once it has read its row, so passing one
//!   over costs no row read; a look passes over at most [`PASS_OVER_LIMIT`] and the next goes
//!   on from there, so a long backlog for one busy receiver neither makes every look slow nor
//!   hides the deliveries behind it. The rows it claims are read from its snapshot a group at
//!   a time: the delivery at hand and the ones after it that fit the free slots.
//! - **The workers** (`webhook-worker`, `[webhooks] workers` of them) sign and send one
//!   delivery at a time (`send`), then hand the outcome to the result writer.
//! - **The result writer** (`webhook-results`) commits outcomes in groups, like the ingest
//!   writer: it takes every outcome waiting at that moment and writes, in one transaction,
//!   each attempt's `AttemptRow`, the delivery's new state, attempts and next attempt time,
//!   its place in the due list (removed, or moved to the retry time), and the owner's failure
//!   e-mail, whose commit wakes the mail worker. Under load many attempts share one fsync;
//!   with one in flight it costs one.
//!
//! - **The recovery walk** (`webhook-recovery`) carries out bulk recoveries
//!   (`domain::webhooks::recovery`) a chunk at a time while one is running: woken by the
//!   commit that starts one (and at start, for one a restart interrupted), it re-arms the
//!   deliveries each chunk takes, whose commit wakes the scheduler.
//!
//! **Claims and at-least-once.** A claimed delivery is held in memory (`State::claimed`) from
//! the scheduler's claim until its outcome is committed, so it is not taken twice. That lease
//! lives as long as the attempt, which the timeout bounds, plus one commit; nothing about it
//! is persisted, so nothing can go stale: after a crash or restart every unfinished delivery
//! is simply due again at its persisted due time. A delivery can thus reach a receiver twice
//! (an answer whose outcome was not yet committed), never zero times, and a pending retry is
//! neither lost nor sent before its time. Receivers deduplicate by `webhook-id`. The
//! scheduler snapshots the claims together with its read transaction, so a claim released by
//! a commit its snapshot does not show yet still counts.
//!
//! **Several nodes.** On a store shared by several nodes the scheduler also claims each
//! delivery in the store before handing it to a worker (`ClusterStore::claim_delivery`): a
//! delivery another node holds is passed over, and the claim of a node that died lapses after
//! twice the attempt timeout, when another node takes the delivery over.
//!
//! **Retry policy** ([`verdict`]): any 2xx is delivered. 5xx except 501 and 505, 429, 3xx
//! (redirects are not followed), timeouts, connection, DNS and TLS errors are retried after
//! [`RETRY_DELAYS`] (the spec's 30 s, 2 min, 10 min, 1 h, 4 h) until the delivery's
//! `max_attempts` (production 6, sandbox 4; a manual redelivery adds a fresh budget and
//! restarts the schedule). Any other 4xx, 501 and 505 give up at once, and so does
//! a target the SSRF guard refuses: a rule's answer does not change on a retry. A 429's
//! `Retry-After` only lengthens the wait, and values over 4 hours are ignored.
//!
//! **Failure e-mail.** When an owner webhook in production is given up, the endpoint owner is
//! e-mailed in the same transaction, at most once per endpoint per UTC day (the store notes
//! each day's e-mail), with no follow-up or recovery notice; never for caller webhooks or in
//! sandbox.
//!
//! **Shutdown.** [`Dispatcher::shutdown`] stops the scheduler claiming; workers finish the
//! attempt in hand (bounded by the timeout) and start no other; the result writer commits
//! every outcome and stops once the workers have; [`DispatchThreads::join`] waits for all.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use super::pacing::{Pacing, SubscriptionKey, pace};
use super::send::Sender;
use crate::core::clock::Timestamp;
use crate::core::config::WebhooksConfig;
use crate::core::crypto::Sealer;
use crate::core::ids::RecordId;
use crate::core::metrics::Metrics;
use crate::core::telemetry::{Span, SpanKind, Telemetry};
use crate::core::trace::TraceContext;
use crate::domain::error::Result;
use crate::domain::handles::Handles;
use crate::domain::webhooks::health::{Breaker, SubscriptionAttempt};
use crate::domain::webhooks::outcomes::{self, Attempt, Outcome};
use crate::domain::webhooks::policy::{Exchange, Verdict, verdict};
use crate::domain::webhooks::signing::{Message, redacted};
use crate::domain::webhooks::{recovery, secrets};
use crate::store::webhooks::{AttemptOutcome, DueDelivery};
use crate::store::{
    DeliveryRow, DeliveryState, ReadTx, WebhookKind, WebhookSettingsRow, partition_endpoint,
};

/// Longest real-time wait between looks at the clock.
const TICK: Duration = Duration::from_secs(1);
/// Due entries one look may pass over (claimed, their receiver or the retry share full)
/// before it stops; the next look goes on from there. So a large backlog for one busy
/// receiver costs each look a bounded amount, and every due entry still gets its turn.
const PASS_OVER_LIMIT: usize = 256;
/// Most outcomes committed in one transaction.
const MAX_BATCH: usize = 512;
/// Most delivery → endpoint pairs the scheduler remembers; it starts over when full.
const ENDPOINTS_REMEMBERED: usize = 1 << 16;

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
        // Endpoints from before signing secrets existed get theirs before anything is sent,
        // so that signing a request only reads.
        match secrets::create_missing(&parts.handles, &parts.sealer) {
            Ok(0) => {}
            Ok(made) => log::info!("webhooks: made {made} missing signing secret(s)"),
            Err(err) => {
                return Err(std::io::Error::other(format!(
                    "cannot make the missing webhook signing secrets: {err}"
                )));
            }
        }
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
            Box::new(move || write_results(&ctx, &results_rx))
        })?);
        for _ in 0..config.workers {
            let (ctx, jobs, results) = (ctx.clone(), jobs_rx.clone(), results_tx.clone());
            threads.push(spawn(
                "webhook-worker",
                Box::new(move || work(&ctx, &jobs, &results)),
            )?);
        }
        drop(results_tx);
        threads.push(spawn("webhook-scheduler", {
            let ctx = ctx.clone();
            Box::new(move || schedule(&ctx, &jobs_tx))
        })?);
        // Recoveries a restart interrupted go on.
        self.wake_recoveries();
        threads.push(spawn("webhook-recovery", {
            let ctx = ctx.clone();
            Box::new(move || walk_recoveries(&ctx))
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

/// Attempts in flight: in all, of them retries, per receiver and per endpoint.
#[derive(Clone, Default)]
struct Slots {
    busy: usize,
    busy_retries: usize,
    busy_targets: HashMap<String, usize>,
    busy_endpoints: HashMap<u64, usize>,
}

impl Slots {
    /// One more attempt in flight (its endpoint once known).
    fn take(&mut self, target: &str, endpoint: Option<u64>, retry: bool) {
        self.busy += 1;
        self.busy_retries += usize::from(retry);
        *self.busy_targets.entry(target.to_string()).or_default() += 1;
        if let Some(endpoint) = endpoint {
            *self.busy_endpoints.entry(endpoint).or_default() += 1;
        }
    }

    /// `job`'s attempt is no longer in flight.
    fn free(&mut self, job: &Job) {
        self.busy = self.busy.saturating_sub(1);
        if job.retry {
            self.busy_retries = self.busy_retries.saturating_sub(1);
        }
        count_down(&mut self.busy_targets, &job.target);
        count_down(&mut self.busy_endpoints, &job.endpoint);
    }
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

/// One attempt fewer for `key`, forgetting it at zero.
fn count_down<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(key);
        }
    }
}

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

impl Context {
    /// Whether every worker is busy, or the dispatcher is stopping: nothing can be claimed.
    fn full(&self, state: &State) -> bool {
        state.stopping || state.slots.busy >= self.workers
    }

    /// Whether a worker could start `entry` besides the attempts in `slots` (`endpoint` when
    /// the scheduler knows it), the pool having a free worker.
    fn fits(&self, slots: &Slots, entry: &DueDelivery, endpoint: Option<u64>) -> bool {
        let target_busy = slots
            .busy_targets
            .get(&entry.receiver)
            .copied()
            .unwrap_or(0);
        !(entry.retry && slots.busy_retries >= self.retry_workers)
            && target_busy < self.per_target
            && endpoint.is_none_or(|endpoint| self.endpoint_has_room(slots, endpoint))
    }

    fn endpoint_has_room(&self, slots: &Slots, endpoint: u64) -> bool {
        slots.busy_endpoints.get(&endpoint).copied().unwrap_or(0) < self.per_endpoint
    }

    /// `first` (which fits now) and the entries of `later` that would fit too if those before
    /// them were claimed: the rows a look is likely to claim next, read together.
    fn likely_claims(
        &self,
        first: &DueDelivery,
        later: &[DueDelivery],
        claimed: &HashSet<u64>,
        endpoints: &HashMap<u64, u64>,
    ) -> Vec<u64> {
        let mut slots = self.shared.state().slots.clone();
        slots.take(
            &first.receiver,
            endpoints.get(&first.id).copied(),
            first.retry,
        );
        let mut ids = vec![first.id];
        for entry in later {
            if slots.busy >= self.workers {
                break;
            }
            let endpoint = endpoints.get(&entry.id).copied();
            if !claimed.contains(&entry.id) && self.fits(&slots, entry, endpoint) {
                slots.take(&entry.receiver, endpoint, entry.retry);
                ids.push(entry.id);
            }
        }
        ids
    }
}

/// A place in the due list: when due, and the delivery id.
type DuePosition = (Timestamp, u64);

/// How a look at the due list ended.
#[derive(Default)]
struct Look {
    /// Where the next look goes on from (see [`claim_due`]).
    resume_after: Option<DuePosition>,
    /// The earliest time a delivery it passed over for its subscription's rate limit may
    /// start.
    paced_until: Option<Timestamp>,
}

/// A claimed delivery on its way to a worker.
struct Job {
    row: DeliveryRow,
    target: String,
    endpoint: u64,
    retry: bool,
}

/// The scheduler's loop, until stopping.
fn schedule(ctx: &Context, jobs: &mpsc::Sender<Job>) {
    let mut resume_after = None;
    let mut endpoints = HashMap::new();
    let mut pacing = Pacing::default();
    loop {
        if endpoints.len() >= ENDPOINTS_REMEMBERED {
            endpoints.clear();
        }
        let look =
            claim_due(ctx, jobs, resume_after, &mut endpoints, &mut pacing).unwrap_or_else(|err| {
                log::error!("webhooks: cannot read the due deliveries: {err}");
                Look::default()
            });
        resume_after = look.resume_after;
        // A delivery held back by its rate limit may start at `paced_until`: look again then.
        let wait = match look.paced_until {
            Some(at) => {
                let micros = at.as_micros() - ctx.parts.handles.now().as_micros();
                Duration::from_micros(u64::try_from(micros).unwrap_or(0)).min(TICK)
            }
            None => TICK,
        };
        if !ctx.shared.wait(wait) {
            return;
        }
    }
}

/// Claims the due deliveries a worker can start now and hands them over, oldest first or
/// going on just after `resume_after`. Returns where the next look goes on from when this one
/// stopped at [`PASS_OVER_LIMIT`] (or read as much of the due list as one look may), and when
/// a delivery its rate limit held back may start. `endpoints` remembers the endpoint of each
/// delivery whose row was read, so a delivery of an endpoint at its share is passed over
/// without a read; `pacing` books the starts of rate-limited subscriptions.
fn claim_due(
    ctx: &Context,
    jobs: &mpsc::Sender<Job>,
    resume_after: Option<DuePosition>,
    endpoints: &mut HashMap<u64, u64>,
    pacing: &mut Pacing,
) -> Result<Look> {
    let now = ctx.parts.handles.now();
    let (snapshot, claimed) = {
        let state = ctx.shared.state();
        if ctx.full(&state) {
            return Ok(Look {
                resume_after,
                paced_until: None,
            });
        }
        (ctx.parts.handles.store.read()?, state.claimed.clone())
    };
    let look_limit = PASS_OVER_LIMIT + ctx.workers;
    let due = snapshot.due_deliveries(now, resume_after, look_limit)?;
    let mut rows = HashMap::new();
    let mut settings = HashMap::new();
    let mut paced_until: Option<Timestamp> = None;
    let look = |resume_after, paced_until| {
        Ok(Look {
            resume_after,
            paced_until,
        })
    };
    let mut passed_over = 0;
    for (index, entry) in due.iter().enumerate() {
        let id = entry.id;
        let startable = !claimed.contains(&id) && {
            // Workers only free slots, so a delivery that fits now still fits after the read.
            let state = ctx.shared.state();
            if ctx.full(&state) {
                return look(None, paced_until);
            }
            ctx.fits(&state.slots, entry, endpoints.get(&id).copied())
        };
        let row = match startable {
            true => {
                let later = &due[index + 1..];
                read_row(
                    ctx,
                    snapshot.as_ref(),
                    &mut rows,
                    entry,
                    later,
                    &claimed,
                    endpoints,
                )?
            }
            false => None,
        };
        let row = row.filter(|row| {
            let endpoint = partition_endpoint(row.partition);
            endpoints.insert(id, endpoint);
            row.state == DeliveryState::Pending
                && ctx.endpoint_has_room(&ctx.shared.state().slots, endpoint)
        });
        let paced = match &row {
            Some(row) => match rate_limit(snapshot.as_ref(), &mut settings, row)? {
                Some((subscription, rate)) => match ctx.parts.handles.store.cluster() {
                    Some(cluster) => {
                        let (interval, tolerance) = pace(rate);
                        cluster.pace(subscription, interval, tolerance, now)?.err()
                    }
                    None => pacing.start(subscription, rate, now).err(),
                },
                None => None,
            },
            None => None,
        };
        if let Some(at) = paced {
            paced_until = Some(paced_until.map_or(at, |until| until.min(at)));
        }
        let Some(row) = row.filter(|_| paced.is_none()) else {
            passed_over += 1;
            if passed_over >= PASS_OVER_LIMIT {
                return look(Some(entry.position()), paced_until);
            }
            continue;
        };
        let job = Job {
            target: entry.receiver.clone(),
            endpoint: partition_endpoint(row.partition),
            retry: entry.retry,
            row,
        };
        // On a shared store another node may be sending it: claim it there first.
        if let Some(cluster) = ctx.parts.handles.store.cluster()
            && !cluster.claim_delivery(id, ctx.claim_hold)?
        {
            passed_over += 1;
            continue;
        }
        {
            let mut state = ctx.shared.state();
            if state.stopping {
                return look(None, paced_until);
            }
            state.claimed.insert(id);
            state.slots.take(&job.target, Some(job.endpoint), job.retry);
        }
        if jobs.send(job).is_err() {
            return look(None, paced_until);
        }
    }
    match due.last() {
        Some(last) if due.len() == look_limit => look(Some(last.position()), paced_until),
        _ => look(None, paced_until),
    }
}

/// The subscription `row` was made for and its rate limit, when it has one; `settings` keeps
/// each partition's settings read during one look.
fn rate_limit(
    snapshot: &dyn ReadTx,
    settings: &mut HashMap<u64, Option<WebhookSettingsRow>>,
    row: &DeliveryRow,
) -> Result<Option<(SubscriptionKey, u32)>> {
    let Some(id) = row.owner_subscription() else {
        return Ok(None);
    };
    let partition_settings = match settings.entry(row.partition) {
        Entry::Occupied(known) => known.into_mut(),
        Entry::Vacant(slot) => slot.insert(snapshot.webhook_settings(row.partition)?),
    };
    Ok(partition_settings
        .as_ref()
        .and_then(|s| s.subscription(id))
        .and_then(|s| s.rate_limit)
        .map(|rate| ((row.partition, id), rate)))
}

/// The row of due `entry`, from `rows` or else read from `snapshot` together with the rows of
/// the entries of `later` the look is likely to claim next (one read for a group, not one per
/// row). `None` when the delivery is gone.
fn read_row(
    ctx: &Context,
    snapshot: &dyn ReadTx,
    rows: &mut HashMap<u64, Option<DeliveryRow>>,
    entry: &DueDelivery,
    later: &[DueDelivery],
    claimed: &HashSet<u64>,
    endpoints: &HashMap<u64, u64>,
) -> Result<Option<DeliveryRow>> {
    if !rows.contains_key(&entry.id) {
        let ids = ctx.likely_claims(entry, later, claimed, endpoints);
        rows.extend(ids.iter().map(|id| (*id, None)));
        for row in snapshot.deliveries(&ids)? {
            rows.insert(row.id, Some(row));
        }
    }
    Ok(rows.remove(&entry.id).flatten())
}

/// The recovery walk's loop, until stopping: whenever a recovery may be running, one chunk of
/// each (`recovery::advance`); its commit wakes the scheduler for what it re-armed, and the
/// walk again while a recovery runs.
fn walk_recoveries(ctx: &Context) {
    loop {
        {
            let mut state = ctx.shared.state();
            while !state.recoveries_wanted && !state.stopping {
                state = ctx
                    .shared
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            if state.stopping {
                return;
            }
            state.recoveries_wanted = false;
        }
        match recovery::advance(&ctx.parts.handles) {
            Ok(true) => ctx.shared.state().recoveries_wanted = true,
            Ok(false) => {}
            Err(err) => {
                log::error!("webhooks: a recovery could not go on; trying again: {err}");
                ctx.shared.state().recoveries_wanted = true;
                // Not at once: the store may need a moment.
                let state = ctx.shared.state();
                drop(
                    ctx.shared
                        .changed
                        .wait_timeout(state, TICK)
                        .unwrap_or_else(PoisonError::into_inner),
                );
            }
        }
    }
}

/// A worker's loop: one attempt at a time, until the scheduler is gone.
fn work(ctx: &Context, jobs: &Mutex<Receiver<Job>>, results: &mpsc::Sender<Outcome>) {
    loop {
        let job = jobs.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(job) = job else {
            return;
        };
        if ctx.shared.stopping() {
            // Not started: it stays due for the next start.
            ctx.shared.free_slot(&job);
            ctx.shared.release([job.row.id]);
            continue;
        }
        let attempted = attempt(ctx, &job);
        ctx.shared.free_slot(&job);
        if results.send(attempted).is_err() {
            return;
        }
        ctx.shared.wake();
    }
}

/// Signs and sends the next attempt of `job`'s delivery.
fn attempt(ctx: &Context, job: &Job) -> Outcome {
    let row = &job.row;
    let number = row.attempts.saturating_add(1);
    let started_at = ctx.parts.handles.now();
    let started = Instant::now();
    // The attempt is a span of the write's trace while telemetry is on (a trace of its own
    // for a delivery made without one); otherwise the write's trace is passed on as it came.
    let parent = row.trace.as_deref().and_then(TraceContext::parse);
    let span = ctx
        .parts
        .telemetry
        .enabled()
        .then(|| parent.map_or_else(TraceContext::root, |p| p.child()));
    let traceparent = span.or(parent).map(|c| c.header());
    let span_start = SystemTime::now();
    let message = Message {
        partition: row.partition,
        id: &RecordId(row.record_id).to_string(),
        body: row.body.as_bytes(),
        auth_header: row.auth_header.as_deref(),
        auth_value_sealed: row.auth_value_sealed.as_deref(),
    };
    let headers = secrets::signed_headers(
        &ctx.parts.handles,
        &ctx.parts.sealer,
        &message,
        number,
        started_at,
        traceparent.as_deref(),
    );
    let (exchange, request_headers) = match headers {
        Ok(headers) => {
            let exchange = ctx
                .sender
                .send(&row.url, &headers, row.body.as_bytes(), started_at);
            (exchange, redacted(headers, row.auth_header.as_deref()))
        }
        Err(err) => (
            Exchange::Failed(format!("cannot prepare the request: {err}")),
            Vec::new(),
        ),
    };
    let verdict = verdict(row, &exchange);
    if let Some(context) = span {
        ctx.parts.telemetry.record(attempt_span(
            context,
            parent.map(|p| p.span_id),
            span_start,
            row,
            number,
            &exchange,
            verdict,
        ));
    }
    let attempt = Attempt {
        number,
        started_at,
        duration_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        request_headers,
        exchange,
        answered_at: ctx.parts.handles.now(),
    };
    Outcome::of(row, &job.target, attempt, verdict)
}

/// The span of one attempt: the webhook id, attempt number and kind, the receiver's host and
/// its status (never the URL's path, the body or a header value).
fn attempt_span(
    context: TraceContext,
    parent: Option<[u8; 8]>,
    start: SystemTime,
    row: &DeliveryRow,
    number: u32,
    exchange: &Exchange,
    verdict: Verdict,
) -> Span {
    let host = row
        .url
        .parse::<http::Uri>()
        .ok()
        .and_then(|uri| uri.host().map(str::to_string))
        .unwrap_or_default();
    let kind = match row.kind {
        WebhookKind::Owner => "owner",
        WebhookKind::Caller => "caller",
    };
    let mut span = Span::ended_now(context, parent, "webhook.attempt", SpanKind::Client, start)
        .attribute("webhook.id", RecordId(row.record_id).to_string())
        .attribute("webhook.attempt", i64::from(number))
        .attribute("intake.webhook.kind", kind)
        .attribute("server.address", host)
        .attribute("intake.webhook.outcome", verdict.outcome());
    match exchange {
        Exchange::Answered { status, .. } => {
            span = span.attribute("http.response.status_code", i64::from(*status));
            if verdict != Verdict::Delivered {
                span.error = Some(format!("HTTP {status}"));
            }
        }
        Exchange::Failed(error) | Exchange::Refused(error) => span.error = Some(error.clone()),
    }
    span
}

/// The result writer's loop: commits outcomes in groups until every worker has stopped.
fn write_results(ctx: &Context, results: &Receiver<Outcome>) {
    while let Ok(first) = results.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match results.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let subscriptions: Vec<SubscriptionAttempt> =
            batch.iter().filter_map(|o| o.subscription).collect();
        let (outcomes, verdicts): (Vec<AttemptOutcome>, Vec<Verdict>) =
            batch.into_iter().map(|o| (o.stored, o.verdict)).unzip();
        let recorded = outcomes::record(
            &ctx.parts.handles,
            &ctx.parts.public_url,
            &ctx.breaker,
            &outcomes,
            &subscriptions,
        );
        match recorded {
            Ok(()) => {
                for (outcome, verdict) in outcomes.iter().zip(verdicts) {
                    log_attempt(outcome, verdict);
                    count_attempt(&ctx.parts.metrics, verdict);
                }
            }
            // The deliveries stay due as they were: they are attempted again.
            Err(err) => log::error!(
                "webhooks: cannot record {} attempt outcome(s); they will be attempted again: \
                 {err}",
                outcomes.len()
            ),
        }
        ctx.shared
            .release(outcomes.iter().map(|outcome| outcome.delivery_id));
    }
}

fn count_attempt(metrics: &Metrics, verdict: Verdict) {
    let counter = match verdict {
        Verdict::Delivered => &metrics.webhook_delivered,
        Verdict::Retry(_) => &metrics.webhook_retry,
        Verdict::GivenUp => &metrics.webhook_given_up,
    };
    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

fn log_attempt(outcome: &AttemptOutcome, verdict: Verdict) {
    let answer = match (&outcome.attempt.status, &outcome.attempt.error) {
        (Some(status), _) => format!("HTTP {status}"),
        (None, Some(error)) => error.clone(),
        (None, None) => String::new(),
    };
    let (id, n) = (outcome.delivery_id, outcome.attempt.attempt);
    match verdict {
        Verdict::Delivered => log::debug!("webhook delivery {id} delivered (attempt {n})"),
        Verdict::Retry(wait) => {
            log::info!("webhook delivery {id} attempt {n}: {answer}; retry in {wait:?}")
        }
        Verdict::GivenUp => {
            log::warn!("webhook delivery {id} given up after attempt {n}: {answer}")
        }
    }
}
