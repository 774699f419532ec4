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
//! bound itself. `hold_back` (`[poll] hold_back`, default 60 s as the spec documents) adds a
//! margin against the wall clock stepping backwards; 0 is allowed.
//!
//! Cursors hold a record id: the feed continues with ids above it. Ids begin with created_at,
//! so id order is (created_at, tiebreak) order.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound::{Excluded, Included};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

use crate::clock::{Clock, Timestamp, parse_date_or_rfc3339};
use crate::cursor::{self, CursorKind, Position};
use crate::endpoints::DataAccess;
use crate::error::{Error, Result};
use crate::ids::RecordId;
use crate::records::{RecordView, view};
use crate::storage::{RECORDS, Store, time_key};

pub const LIMIT_DEFAULT: usize = 100;
pub const LIMIT_MAX: usize = 100;

/// Creates that have been stamped but not yet stored or refused.
#[derive(Default)]
pub struct InFlight {
    stamps: Mutex<BTreeMap<Timestamp, usize>>,
}

/// Keeps a stamp in flight until dropped (after the write's commit, or its refusal).
pub struct Stamp<'a> {
    registry: &'a InFlight,
    pub at: Timestamp,
}

impl Drop for Stamp<'_> {
    fn drop(&mut self) {
        let mut stamps = self.registry.lock();
        if let Some(n) = stamps.get_mut(&self.at) {
            *n -= 1;
            if *n == 0 {
                stamps.remove(&self.at);
            }
        }
    }
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Timestamp, usize>> {
        self.stamps.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stamps a create with the current time and counts it as in flight.
    pub fn stamp(&self, clock: &dyn Clock) -> Stamp<'_> {
        let mut stamps = self.lock();
        let at = clock.now();
        *stamps.entry(at).or_insert(0) += 1;
        Stamp { registry: self, at }
    }

    /// The visibility bound: records created before it are all stored.
    pub fn visibility_bound(&self, clock: &dyn Clock, hold_back: Duration) -> Timestamp {
        let stamps = self.lock();
        let now = clock.now();
        let oldest = stamps.keys().next().copied().unwrap_or(now);
        oldest.min(now.minus(hold_back))
    }
}

/// A poll response: exactly one of `next_cursor` and `poll_cursor`.
#[derive(Debug, Serialize)]
pub struct PollPage {
    pub data: Vec<RecordView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_cursor: Option<String>,
}

/// Where a poll starts: after this id (exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// Subscribe from now on.
    Now,
    After(u128),
}

/// Parses `since`, `cursor` and `limit`.
pub fn parse_request(params: &HashMap<String, String>, partition: u64) -> Result<(Start, usize)> {
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
            Start::After(cursor::parse(CursorKind::Poll, partition, text)?.tiebreak)
        }
        (None, None) => Start::Now,
    };
    let limit = cursor::limit_param(params, LIMIT_DEFAULT, LIMIT_MAX)?;
    Ok((start, limit))
}

/// The smallest record id with this created_at.
fn first_id_at(t: Timestamp) -> u128 {
    u128::from(time_key(t)) << 64
}

/// One poll at time `now`: records after `start` and below `bound`, oldest first, at most
/// `limit`.
pub fn poll(
    store: &Store,
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
            p,
            Position {
                time: (id >> 64) as u64,
                tiebreak: id,
            },
        )
    };
    let mut data = Vec::new();
    let mut last = None;
    if after < below {
        let txn = store.read()?;
        let records = txn.open_table(RECORDS)?;
        for entry in records.range((Excluded((p, after)), Included((p, below - 1))))? {
            let (key, value) = entry?;
            let id = key.value().1;
            if data.len() == limit {
                // One more exists below the bound: a backlog remains.
                return Ok(PollPage {
                    data,
                    next_cursor: last.map(encode),
                    poll_cursor: None,
                });
            }
            data.push(view(RecordId(id), value.value())?);
            last = Some(id);
        }
    }
    // Caught up: everything below the bound has been delivered.
    let caught_up_to = last.unwrap_or(after).max(below.saturating_sub(1));
    Ok(PollPage {
        data,
        next_cursor: None,
        poll_cursor: Some(encode(caught_up_to)),
    })
}
