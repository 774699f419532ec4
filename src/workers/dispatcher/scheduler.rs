//! The scheduler and the recovery walk: what is due, and who may start it.
//!
//! The scheduler looks at the due list (entries due by the injected clock) when woken (after
//! each ingest commit, after a manual redelivery, after a worker or the result writer
//! finishes) and at least every [`TICK`] of real time, so clock-driven retries become due
//! without a wake-up. It claims a due delivery only when a worker can start it at once: fewer
//! than `workers` attempts in flight, fewer than `per_target_concurrency` to its receiver
//! (scheme, host and port), fewer than `per_endpoint_concurrency` (half the workers by
//! default) for its endpoint, and, for a retry (a delivery attempted before), fewer than half
//! the workers busy with retries. So one slow or failing receiver holds at most its own share
//! of the workers, one endpoint's receivers (one tenant's) can never take the whole pool from
//! the others, and first attempts never wait behind a backlog of retries. A delivery of a
//! subscription with a rate limit also waits for its subscription's pace (`pacing`); the
//! scheduler then looks again when the next may start, not before. Deliveries it cannot
//! start stay due for the next look. The due list carries each delivery's receiver and retry
//! flag, and the scheduler remembers each delivery's endpoint once it has read its row, so
//! passing one over costs no row read; a look passes over at most [`PASS_OVER_LIMIT`] and the
//! next goes on from there, so a long backlog for one busy receiver neither makes every look
//! slow nor hides the deliveries behind it. The rows it claims are read from its snapshot a
//! group at a time: the delivery at hand and the ones after it that fit the free slots.
//!
//! The recovery walk re-arms the deliveries of a running bulk recovery, a chunk at a time;
//! their commit wakes the scheduler.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::PoisonError;
use std::sync::mpsc;
use std::time::Duration;

use super::pacing::{Pacing, SubscriptionKey, pace};
use super::{Context, Job, State, TICK};
use crate::core::clock::Timestamp;
use crate::domain::error::Result;
use crate::domain::webhooks::recovery;
use crate::store::webhooks::DueDelivery;
use crate::store::{DeliveryRow, DeliveryState, Partition, ReadTx, WebhookSettingsRow};

/// Due entries one look may pass over (claimed, their receiver or the retry share full)
/// before it stops; the next look goes on from there. So a large backlog for one busy
/// receiver costs each look a bounded amount, and every due entry still gets its turn.
const PASS_OVER_LIMIT: usize = 256;
/// Most delivery → endpoint pairs the scheduler remembers; it starts over when full.
const ENDPOINTS_REMEMBERED: usize = 1 << 16;

/// Attempts in flight: in all, of them retries, per receiver and per endpoint.
#[derive(Clone, Default)]
pub(super) struct Slots {
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
    pub(super) fn free(&mut self, job: &Job) {
        self.busy = self.busy.saturating_sub(1);
        if job.retry {
            self.busy_retries = self.busy_retries.saturating_sub(1);
        }
        count_down(&mut self.busy_targets, &job.target);
        count_down(&mut self.busy_endpoints, &job.endpoint);
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
        delivery_endpoints: &DeliveryEndpoints,
    ) -> Vec<u64> {
        let mut slots = self.shared.state().slots.clone();
        slots.take(
            &first.receiver,
            delivery_endpoints.get(&first.id).copied(),
            first.retry,
        );
        let mut ids = vec![first.id];
        for entry in later {
            if slots.busy >= self.workers {
                break;
            }
            let endpoint = delivery_endpoints.get(&entry.id).copied();
            if !claimed.contains(&entry.id) && self.fits(&slots, entry, endpoint) {
                slots.take(&entry.receiver, endpoint, entry.retry);
                ids.push(entry.id);
            }
        }
        ids
    }
}

/// The endpoint of each delivery whose row the scheduler has read: delivery id → endpoint id.
type DeliveryEndpoints = HashMap<u64, u64>;

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

/// The scheduler's loop, until stopping.
pub(super) fn schedule(ctx: &Context, jobs: &mpsc::Sender<Job>) {
    let mut resume_after = None;
    let mut delivery_endpoints = DeliveryEndpoints::new();
    let mut pacing = Pacing::default();
    loop {
        if delivery_endpoints.len() >= ENDPOINTS_REMEMBERED {
            delivery_endpoints.clear();
        }
        let look = claim_due(
            ctx,
            jobs,
            resume_after,
            &mut delivery_endpoints,
            &mut pacing,
        )
        .unwrap_or_else(|err| {
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
/// a delivery its rate limit held back may start. `delivery_endpoints` remembers the endpoint
/// of each delivery whose row was read, so a delivery of an endpoint at its share is passed
/// over without a read; `pacing` books the starts of rate-limited subscriptions.
fn claim_due(
    ctx: &Context,
    jobs: &mpsc::Sender<Job>,
    resume_after: Option<DuePosition>,
    delivery_endpoints: &mut DeliveryEndpoints,
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
            ctx.fits(&state.slots, entry, delivery_endpoints.get(&id).copied())
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
                    delivery_endpoints,
                )?
            }
            false => None,
        };
        let row = row.filter(|row| {
            let endpoint = row.partition.endpoint();
            delivery_endpoints.insert(id, endpoint);
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
            endpoint: row.partition.endpoint(),
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
    settings: &mut HashMap<Partition, Option<WebhookSettingsRow>>,
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
    delivery_endpoints: &DeliveryEndpoints,
) -> Result<Option<DeliveryRow>> {
    if !rows.contains_key(&entry.id) {
        let ids = ctx.likely_claims(entry, later, claimed, delivery_endpoints);
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
pub(super) fn walk_recoveries(ctx: &Context) {
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
