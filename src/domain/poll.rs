//! Poll: a gap-free feed of created records, oldest first.
//!
//! A consumer follows cursors; each response carries either `next_cursor` (a backlog remains:
//! call again at once) or `poll_cursor` (caught up: save it, call again later).
//!
//! **No gaps.** A record's created_at is stamped when its request arrives but it is stored a
//! little later, so a record can appear *behind* one a consumer has already passed. To rule
//! that out, poll only shows records below a *visibility bound*: the oldest created_at still in
//! flight (stamped, not yet committed or refused), and never later than `now - hold_back`.
//! [`InFlight`] stamps creates and computes the bound under one lock, so a stamp is either
//! counted by a poll or later than the bound that poll computed. Everything below the bound
//! that will ever exist is therefore already stored, and a caught-up cursor can move to the
//! bound itself. Time as [`InFlight`] sees it never goes backwards (it keeps the latest time it
//! has handed out), so a wall clock stepping back cannot stamp a record below a bound a
//! consumer has passed. `hold_back` (`[poll] hold_back`, default 60 s as the spec documents)
//! is the least a record is held back; 0 is allowed.
//!
//! Cursors hold a record id: the feed continues with ids above it. Ids begin with created_at,
//! so id order is (created_at, tiebreak) order.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound::{Excluded, Included};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::core::clock::{Clock, Timestamp, parse_date_or_rfc3339};
use crate::core::cursor::{self, CursorKind, Position};
use crate::domain::endpoints::DataAccess;
use crate::domain::error::{Error, Result};
use crate::domain::records::RecordsBody;
use crate::store::records::ScanOrder;
use crate::store::{Partition, Store, first_id_at};

pub const LIMIT_DEFAULT: usize = 100;
pub const LIMIT_MAX: usize = 100;

/// Creates that have been stamped but not yet stored or refused.
///
/// This registry lives in the memory of the one server process that stamps and stores every
/// create. Several nodes writing one store would each stamp creates the others cannot see, so
/// a multi-node backend must provide the bound itself: each node publishes the low-water mark
/// of its stamps in flight (its oldest, or its clock when it has none) in the store under a
/// lease it renews, and a poll's bound is the lowest mark of the nodes whose lease is live (a
/// node whose lease lapsed has no writes left that could commit).
#[derive(Default)]
pub struct InFlight {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    stamps: BTreeMap<Timestamp, usize>,
    /// The latest time handed out: stamps and bounds never go below it.
    latest: Timestamp,
}

impl State {
    fn now(&mut self, clock: &dyn Clock) -> Timestamp {
        self.latest = self.latest.max(clock.now());
        self.latest
    }
}

/// Keeps a stamp in flight until dropped (after the write's commit, or its refusal).
pub struct Stamp<'a> {
    registry: &'a InFlight,
    pub at: Timestamp,
}

impl Drop for Stamp<'_> {
    fn drop(&mut self) {
        let mut state = self.registry.lock();
        if let Some(n) = state.stamps.get_mut(&self.at) {
            *n -= 1;
            if *n == 0 {
                state.stamps.remove(&self.at);
            }
        }
    }
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stamps a create with the current time and counts it as in flight.
    pub fn stamp(&self, clock: &dyn Clock) -> Stamp<'_> {
        let mut state = self.lock();
        let at = state.now(clock);
        *state.stamps.entry(at).or_insert(0) += 1;
        Stamp { registry: self, at }
    }

    /// This node's low-water mark and its time now: it will never commit a create stamped
    /// below the mark (see `store::cluster`).
    pub fn low_water_mark(&self, clock: &dyn Clock) -> (Timestamp, Timestamp) {
        let mut state = self.lock();
        let now = state.now(clock);
        (state.stamps.keys().next().copied().unwrap_or(now), now)
    }

    /// This node's visibility bound: records it created before it are all stored.
    pub fn visibility_bound(&self, clock: &dyn Clock, hold_back: Duration) -> Timestamp {
        let mut state = self.lock();
        let now = state.now(clock);
        let oldest = state.stamps.keys().next().copied().unwrap_or(now);
        oldest.min(now.minus(hold_back))
    }
}

/// The visibility bound of a poll at this node: its own in-flight creates and hold-back, and,
/// on a store shared by several nodes, the lowest low-water mark the other live nodes
/// published (see `store::cluster`).
pub fn visibility_bound(
    in_flight: &InFlight,
    store: &dyn Store,
    clock: &dyn Clock,
    hold_back: Duration,
) -> Result<Timestamp> {
    let local = in_flight.visibility_bound(clock, hold_back);
    let floor = match store.cluster() {
        Some(cluster) => cluster.visibility_floor()?,
        None => None,
    };
    Ok(floor.map_or(local, |floor| local.min(floor)))
}

/// A poll response.
pub struct PollPage {
    /// The JSON body.
    pub json: String,
    /// When a backlog remains: the last id on this page, after which the consumer continues.
    pub continues_after: Option<u128>,
}

/// The part of a poll response after `data`: exactly one of `next_cursor` and `poll_cursor`.
#[derive(Debug, Serialize)]
struct PollTail {
    #[serde(skip_serializing_if = "Option::is_none")]
    next_cursor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    poll_cursor: Option<String>,
}

/// Where a poll starts: after this id (exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Subscribe from now on.
    Now,
    After(u128),
}

/// Parses `since`, `cursor` and `limit`.
pub fn parse_request(
    params: &HashMap<String, String>,
    partition: Partition,
) -> Result<(Start, usize)> {
    let invalid = |name: &'static str, reason: &str| Error::InvalidParameter {
        name,
        reason: reason.to_string(),
    };
    let start = match (params.get("since"), params.get("cursor")) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "since",
                "send either `since` or `cursor`, not both",
            ));
        }
        (Some(text), None) => {
            let since = parse_date_or_rfc3339(text).ok_or_else(|| {
                invalid(
                    "since",
                    "it must be a date (YYYY-MM-DD) or an RFC 3339 time",
                )
            })?;
            Start::After(first_id_at(since).saturating_sub(1))
        }
        (None, Some(text)) => {
            Start::After(cursor::parse(CursorKind::Poll, partition.raw(), text)?.tiebreak)
        }
        (None, None) => Start::Now,
    };
    let limit = cursor::limit_param(params, LIMIT_DEFAULT, LIMIT_MAX)?;
    Ok((start, limit))
}

/// One poll at time `now`: records after `start` and below `bound`, oldest first, at most
/// `limit`.
pub fn poll(
    store: &dyn Store,
    access: &DataAccess,
    start: Start,
    limit: usize,
    now: Timestamp,
    bound: Timestamp,
) -> Result<PollPage> {
    let p = access.partition;
    let below = first_id_at(bound);
    let after = match start {
        // A subscription covers records created from this call on, not those still held back.
        Start::Now => first_id_at(now).saturating_sub(1),
        Start::After(id) => id,
    };
    let encode = |id: u128| {
        cursor::encode(
            CursorKind::Poll,
            p.raw(),
            Position {
                time: (id >> 64) as u64,
                tiebreak: id,
            },
        )
    };
    let mut body = RecordsBody::new(limit);
    let mut last = None;
    let more = after < below
        && store.read()?.record_page(
            p,
            (Excluded(after), Included(below - 1)),
            ScanOrder::OldestFirst,
            limit,
            &mut |record| {
                body.push(record.id, record.updated_at, record.payload)?;
                last = Some(record.id.0);
                Ok(())
            },
        )?;
    if more {
        // One more exists below the bound: a backlog remains.
        let json = body.finish(&PollTail {
            next_cursor: last.map(encode),
            poll_cursor: None,
        })?;
        return Ok(PollPage {
            json,
            continues_after: last,
        });
    }
    // Caught up: everything below the bound has been delivered.
    let caught_up_to = last.unwrap_or(after).max(below.saturating_sub(1));
    let json = body.finish(&PollTail {
        next_cursor: None,
        poll_cursor: Some(encode(caught_up_to)),
    })?;
    Ok(PollPage {
        json,
        continues_after: None,
    })
}

/// Reads a draining consumer's next page into the store's page cache while it is still
/// receiving this one, on another core: the page it then asks for is served from memory
/// instead of waiting for storage reads (about a third of a drain's server time).
///
/// At most one read-ahead runs at a time; a poll that finds one running starts none, so the
/// extra work is bounded whatever the number of consumers. Only caching changes: what the
/// next poll returns is decided by that poll alone.
pub struct ReadAhead {
    running: Arc<tokio::sync::Semaphore>,
}

impl Default for ReadAhead {
    fn default() -> ReadAhead {
        ReadAhead {
            running: Arc::new(tokio::sync::Semaphore::new(1)),
        }
    }
}

impl ReadAhead {
    /// Starts reading the `limit` records of `partition` after `after`, unless one is running.
    pub fn start(&self, store: &Arc<dyn Store>, partition: Partition, after: u128, limit: usize) {
        let Ok(permit) = self.running.clone().try_acquire_owned() else {
            return;
        };
        let store = store.clone();
        tokio::task::spawn_blocking(move || {
            if let Err(err) = read_ahead(store.as_ref(), partition, after, limit) {
                log::debug!("poll read-ahead: {err}");
            }
            // The store goes first: once `stop` has the permit, no read-ahead holds the store.
            drop(store);
            drop(permit);
        });
    }

    /// Waits for a running read-ahead (which holds the store) and starts no more.
    pub async fn stop(&self) {
        if let Ok(permit) = self.running.acquire().await {
            permit.forget();
        }
        self.running.close();
    }
}

/// Walks the next `limit` records of `partition` after `after`, which loads their pages.
fn read_ahead(store: &dyn Store, partition: Partition, after: u128, limit: usize) -> Result<()> {
    store.read()?.record_page(
        partition,
        (Excluded(after), Included(u128::MAX)),
        ScanOrder::OldestFirst,
        limit,
        &mut |_| Ok(()),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::clock::ManualClock;

    #[tokio::test]
    async fn a_stopped_read_ahead_holds_no_store_and_starts_no_more() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            crate::store::open_embedded(&dir.path().join("t.redb"), 1 << 20, 0).unwrap();
        let read_ahead = ReadAhead::default();
        read_ahead.start(&store, Partition::from_raw(1), 0, LIMIT_MAX);
        read_ahead.stop().await;
        read_ahead.start(&store, Partition::from_raw(1), 0, LIMIT_MAX);
        assert_eq!(Arc::strong_count(&store), 1);
    }

    #[test]
    fn bound_waits_for_the_oldest_stamp_in_flight() {
        let clock = ManualClock::new(Timestamp(1_000_000_000));
        let in_flight = InFlight::default();
        let first = in_flight.stamp(&clock);
        clock.advance(Duration::from_secs(5));
        let second = in_flight.stamp(&clock);
        assert_eq!(in_flight.visibility_bound(&clock, Duration::ZERO), first.at);
        drop(first);
        assert_eq!(
            in_flight.visibility_bound(&clock, Duration::ZERO),
            second.at
        );
        drop(second);
        assert_eq!(
            in_flight.visibility_bound(&clock, Duration::ZERO),
            clock.now()
        );
        assert_eq!(
            in_flight.visibility_bound(&clock, Duration::from_secs(60)),
            clock.now().minus(Duration::from_secs(60))
        );
    }

    #[test]
    fn time_never_goes_backwards_for_stamps_and_bounds() {
        let clock = ManualClock::new(Timestamp(10_000_000_000));
        let in_flight = InFlight::default();
        let bound = in_flight.visibility_bound(&clock, Duration::ZERO);
        // The wall clock steps back an hour.
        clock.set(Timestamp(10_000_000_000 - 3_600_000_000));
        let stamp = in_flight.stamp(&clock);
        assert!(
            stamp.at >= bound,
            "a stamp below a bound already handed out"
        );
        drop(stamp);
        assert!(in_flight.visibility_bound(&clock, Duration::ZERO) >= bound);
    }
}
