//! Monthly usage: a counter of data calls per endpoint, environment and calendar month (UTC),
//! and the optional monthly quota that turns calls past it into 429. A second counter per day
//! feeds the dashboard's requests-per-day chart.
//!
//! Counting must not add an fsync to every call (most are reads), so counters live in memory
//! and the calls counted since the last flush are added to the store ([`UsageStore`]) in one
//! batch every second and at shutdown. A crash can forget at most the last second of counts:
//! the quota is a soft business limit, and this errs in the caller's favour.
//!
//! On a store shared by several nodes each node adds its own deltas, and after each flush it
//! forgets the totals it knew, so the next call reloads them with every node's flushed calls.
//! A node's view of a month thus misses at most the calls the other nodes made in their last
//! flush interval and its own (more when a busy machine runs the flushes late): the quota can
//! be overshot by at most about `(nodes - 1) × (calls per second per node) × 2 s`, plus that
//! lateness (docs/src/scale-out.md).

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::core::clock::Timestamp;
use crate::core::config::UsageConfig;
use crate::domain::error::{Error, Result};
use crate::store::usage::CallsDelta;
use crate::store::{EndpointRow, Environment, Partition, Store, StoreError};

/// A month as stored: `yyyymm`.
fn month_key(t: Timestamp) -> u32 {
    let (year, month) = t.year_month();
    u32::try_from(year.clamp(0, 9999)).unwrap_or(0) * 100 + month
}

/// A day as stored: `yyyymmdd`.
fn day_key(t: Timestamp) -> u32 {
    let (year, month, day) = t.date();
    u32::try_from(year.clamp(0, 9999)).unwrap_or(0) * 10_000 + month * 100 + day
}

/// The monthly quota that applies to `endpoint`: its own, or else the server's
/// (`[usage] monthly_quota`); `None` is unlimited.
pub fn monthly_quota(endpoint: &EndpointRow, config: &UsageConfig) -> Option<u64> {
    endpoint.monthly_quota.or(config.monthly_quota)
}

/// The usage counters of a running server.
pub struct Usage {
    store: Arc<dyn Store>,
    counters: Mutex<Counters>,
}

/// The counters in memory.
#[derive(Default)]
struct Counters {
    /// Calls by (partition, month) and by (partition, day) as this server knows them: the
    /// stored count when first touched, plus the calls counted here since. The quota and the
    /// views read these.
    months: HashMap<(Partition, u32), u64>,
    days: HashMap<(Partition, u32), u64>,
    /// Calls counted here and not yet added to the store, by (partition, month, day).
    unflushed: HashMap<(Partition, u32, u32), u64>,
}

/// One day of an endpoint's usage.
#[derive(Debug, Serialize)]
pub struct DayUsage {
    /// `YYYY-MM-DD`.
    pub date: String,
    pub sandbox: u64,
    pub production: u64,
}

/// One month of an endpoint's usage.
#[derive(Debug, Serialize)]
pub struct MonthUsage {
    /// `YYYY-MM`.
    pub month: String,
    pub sandbox: u64,
    pub production: u64,
}

impl Usage {
    pub fn new(store: Arc<dyn Store>) -> Usage {
        Usage {
            store,
            counters: Mutex::default(),
        }
    }

    fn counters(&self) -> std::sync::MutexGuard<'_, Counters> {
        self.counters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one data call of `partition` at `now`, or refuses it with 429 when the month's
    /// count has reached `quota`. Refused calls are not counted.
    pub fn count(&self, now: Timestamp, partition: Partition, quota: Option<u64>) -> Result<()> {
        self.count_many(now, partition, quota, 1)
    }

    /// Counts `n` at once (a batch's records), or refuses them all with 429 when they would
    /// take the month's count past `quota`.
    pub fn count_many(
        &self,
        now: Timestamp,
        partition: Partition,
        quota: Option<u64>,
        n: u64,
    ) -> Result<()> {
        self.tally(now, partition, quota, n, true)
    }

    /// Refuses with 429 when `n` more would take the month's count past `quota`; counts
    /// nothing (a batch is counted once it is stored, so a refused one counts nothing).
    pub fn check_room(
        &self,
        now: Timestamp,
        partition: Partition,
        quota: Option<u64>,
        n: u64,
    ) -> Result<()> {
        self.tally(now, partition, quota, n, false)
    }

    fn tally(
        &self,
        now: Timestamp,
        partition: Partition,
        quota: Option<u64>,
        n: u64,
        count: bool,
    ) -> Result<()> {
        let (month, day) = (month_key(now), day_key(now));
        let mut counters = self.counters();
        let Counters {
            months,
            days,
            unflushed,
        } = &mut *counters;
        let month_calls = self.counter(months, unflushed, (partition, month), Period::Month)?;
        if quota.is_some_and(|q| *month_calls + n > q) {
            let reset = now.start_of_next_month();
            // Rounded up: waiting the advertised time must be enough.
            let micros = u64::try_from(reset.as_micros() - now.as_micros()).unwrap_or(0);
            return Err(Error::UsageLimitExceeded {
                retry_after_secs: micros.div_ceil(1_000_000).max(1),
            });
        }
        if !count {
            return Ok(());
        }
        *month_calls += n;
        *self.counter(days, unflushed, (partition, day), Period::Day)? += n;
        *unflushed.entry((partition, month, day)).or_default() += n;
        Ok(())
    }

    /// The count of `key`, loaded from the store when first touched, with the calls counted
    /// here and not yet flushed.
    fn counter<'c>(
        &self,
        counters: &'c mut HashMap<(Partition, u32), u64>,
        unflushed: &HashMap<(Partition, u32, u32), u64>,
        key: (Partition, u32),
        period: Period,
    ) -> Result<&'c mut u64> {
        Ok(match counters.entry(key) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => {
                let stored = self.stored(period, key.0, key.1..=key.1)?;
                let pending: u64 = unflushed
                    .iter()
                    .filter(|((p, month, day), _)| {
                        *p == key.0
                            && match period {
                                Period::Month => *month == key.1,
                                Period::Day => *day == key.1,
                            }
                    })
                    .map(|(_, calls)| calls)
                    .sum();
                entry.insert(stored.first().map_or(0, |&(_, calls)| calls) + pending)
            }
        })
    }

    /// The stored counts of `partition` per period in `periods`, oldest first.
    fn stored(
        &self,
        period: Period,
        partition: Partition,
        periods: RangeInclusive<u32>,
    ) -> Result<Vec<(u32, u64)>> {
        Ok(match period {
            Period::Month => self.store.monthly_calls(partition, periods)?,
            Period::Day => self.store.daily_calls(partition, periods)?,
        })
    }

    /// The counts of the endpoint's two partitions (sandbox, production) per period in
    /// `periods`: the stored ones, or this server's counters (which include the calls it has
    /// not flushed yet) where they are higher.
    ///
    /// The counters are read first: a flush that commits between the two reads is then in the
    /// stored counts, and one that has not committed yet is still in the counters, so a count
    /// never seems to go back (the counters of a shared store are forgotten after each flush).
    fn per_period(
        &self,
        period: Period,
        endpoint_id: u64,
        periods: RangeInclusive<u32>,
    ) -> Result<BTreeMap<u32, [u64; 2]>> {
        let parts = [
            Partition::new(endpoint_id, Environment::Sandbox),
            Partition::new(endpoint_id, Environment::Production),
        ];
        let known: Vec<(usize, u32, u64)> = {
            let counters = self.counters();
            let known = match period {
                Period::Month => &counters.months,
                Period::Day => &counters.days,
            };
            known
                .iter()
                .filter(|((_, at), _)| periods.contains(at))
                .filter_map(|((part, at), calls)| {
                    let i = parts.iter().position(|p| p == part)?;
                    Some((i, *at, *calls))
                })
                .collect()
        };
        let mut counts: BTreeMap<u32, [u64; 2]> = BTreeMap::new();
        for (i, part) in parts.iter().enumerate() {
            for (at, calls) in self.stored(period, *part, periods.clone())? {
                counts.entry(at).or_default()[i] = calls;
            }
        }
        for (i, at, calls) in known {
            let count = &mut counts.entry(at).or_default()[i];
            *count = (*count).max(calls);
        }
        Ok(counts)
    }

    /// Adds the calls counted since the last flush to the store in one commit (kept for the
    /// next flush when it fails), and forgets the counters of past months and days that hold
    /// nothing unflushed.
    /// The deltas whose endpoint is not deleted: a deleted endpoint's counts are purged, and
    /// calls counted just before the deletion must not bring them back.
    fn of_live_endpoints(&self, deltas: &[CallsDelta]) -> Result<Vec<CallsDelta>, StoreError> {
        let snapshot = self.store.read()?;
        let mut live = Vec::with_capacity(deltas.len());
        for delta in deltas {
            let endpoint = snapshot.endpoint(delta.partition.endpoint())?;
            if endpoint.is_some_and(|row| row.deleted_at.is_none()) {
                live.push(*delta);
            }
        }
        Ok(live)
    }

    pub fn flush(&self, now: Timestamp) -> Result<()> {
        let deltas: Vec<CallsDelta> = self
            .counters()
            .unflushed
            .drain()
            .map(|((partition, month, day), calls)| CallsDelta {
                partition,
                month,
                day,
                calls,
            })
            .collect();
        let result = if deltas.is_empty() {
            Ok(())
        } else {
            self.of_live_endpoints(&deltas)
                .and_then(|live| self.store.add_calls(&live))
        };
        let mut counters = self.counters();
        if result.is_err() {
            for delta in &deltas {
                *counters
                    .unflushed
                    .entry((delta.partition, delta.month, delta.day))
                    .or_default() += delta.calls;
            }
        }
        match self.store.cluster() {
            // Reloaded on the next call with the calls every node has flushed.
            Some(_) if result.is_ok() => counters.forget_past(u32::MAX, u32::MAX),
            _ => counters.forget_past(month_key(now), day_key(now)),
        }
        Ok(result?)
    }

    /// Calls per day of the endpoint from `from` to `to` (inclusive, UTC days), one entry per
    /// day, counting calls not yet flushed.
    pub fn days(&self, endpoint_id: u64, from: Timestamp, to: Timestamp) -> Result<Vec<DayUsage>> {
        let (first, last) = (day_key(from), day_key(to));
        let counts = self.per_period(Period::Day, endpoint_id, first..=last)?;
        let mut out = Vec::new();
        let mut day = from;
        while day_key(day) <= last {
            let key = day_key(day);
            let [sandbox, production] = counts.get(&key).copied().unwrap_or_default();
            out.push(DayUsage {
                date: format!(
                    "{:04}-{:02}-{:02}",
                    key / 10_000,
                    key / 100 % 100,
                    key % 100
                ),
                sandbox,
                production,
            });
            day = day.plus(std::time::Duration::from_secs(86_400));
        }
        Ok(out)
    }

    /// Every month with calls on the endpoint, newest first, counting calls not yet flushed.
    pub fn months(&self, endpoint_id: u64) -> Result<Vec<MonthUsage>> {
        let by_month = self.per_period(Period::Month, endpoint_id, 0..=u32::MAX)?;
        Ok(by_month
            .into_iter()
            .rev()
            .map(|(month, [sandbox, production])| MonthUsage {
                month: format!("{:04}-{:02}", month / 100, month % 100),
                sandbox,
                production,
            })
            .collect())
    }
}

/// A counting period of the usage counters.
#[derive(Clone, Copy)]
enum Period {
    Month,
    Day,
}

impl Counters {
    /// Forgets the counters of months before `month` and days before `day`, except those with
    /// calls still to flush: the store has the rest, and only the current period is counted.
    fn forget_past(&mut self, month: u32, day: u32) {
        let pending_months: HashSet<(Partition, u32)> =
            self.unflushed.keys().map(|&(p, m, _)| (p, m)).collect();
        let pending_days: HashSet<(Partition, u32)> =
            self.unflushed.keys().map(|&(p, _, d)| (p, d)).collect();
        self.months
            .retain(|key, _| key.1 >= month || pending_months.contains(key));
        self.days
            .retain(|key, _| key.1 >= day || pending_days.contains(key));
    }
}
