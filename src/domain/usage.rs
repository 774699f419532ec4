//! Monthly usage: a counter of data calls per endpoint, environment and calendar month (UTC),
//! and the optional monthly quota that turns calls past it into 429. A second counter per day
//! feeds the dashboard's requests-per-day chart.
//!
//! Counting must not add an fsync to every call (most are reads), so counters live in memory
//! and are written to the `USAGE` table in one batch every second and at shutdown. A crash can
//! forget at most the last second of counts: the quota is a soft business limit, and this
//! errs in the caller's favour.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::core::clock::Timestamp;
use crate::domain::error::{Error, Result};
use crate::store::{Environment, RedbStore, USAGE, USAGE_DAYS, partition};

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

type Table = redb::TableDefinition<'static, (u64, u32), u64>;

#[derive(Debug, Default)]
struct Counter {
    count: u64,
    /// Changed since the last flush.
    dirty: bool,
}

/// The usage counters of a running server.
pub struct Usage {
    store: Arc<RedbStore>,
    counters: Mutex<Counters>,
}

/// The counters in memory, by (partition, month) and by (partition, day).
#[derive(Default)]
struct Counters {
    months: HashMap<(u64, u32), Counter>,
    days: HashMap<(u64, u32), Counter>,
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
    pub fn new(store: Arc<RedbStore>) -> Usage {
        Usage {
            store,
            counters: Mutex::default(),
        }
    }

    /// Counts one data call of `partition` at `now`, or refuses it with 429 when the month's
    /// count has reached `quota`. Refused calls are not counted.
    pub fn count(&self, now: Timestamp, partition: u64, quota: Option<u64>) -> Result<()> {
        let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let month = self.counter(&mut counters.months, USAGE, (partition, month_key(now)))?;
        if quota.is_some_and(|q| month.count >= q) {
            let reset = now.start_of_next_month();
            // Rounded up: waiting the advertised time must be enough.
            let micros = u64::try_from(reset.as_micros() - now.as_micros()).unwrap_or(0);
            return Err(Error::UsageLimitExceeded {
                retry_after_secs: micros.div_ceil(1_000_000).max(1),
            });
        }
        month.count += 1;
        month.dirty = true;
        let day = self.counter(&mut counters.days, USAGE_DAYS, (partition, day_key(now)))?;
        day.count += 1;
        day.dirty = true;
        Ok(())
    }

    /// The counter of `key`, loaded from `table` when first touched.
    fn counter<'c>(
        &self,
        counters: &'c mut HashMap<(u64, u32), Counter>,
        table: Table,
        key: (u64, u32),
    ) -> Result<&'c mut Counter> {
        Ok(match counters.entry(key) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => entry.insert(Counter {
                count: self.stored(table, key)?,
                dirty: false,
            }),
        })
    }

    fn stored(&self, table: Table, key: (u64, u32)) -> Result<u64> {
        let txn = self.store.read()?;
        Ok(txn.open_table(table)?.get(key)?.map_or(0, |v| v.value()))
    }

    /// Writes changed counters in one commit and forgets clean counters of past months and
    /// days.
    pub fn flush(&self, now: Timestamp) -> Result<()> {
        let (months, days) = {
            let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
            (
                take_dirty(&mut counters.months, month_key(now)),
                take_dirty(&mut counters.days, day_key(now)),
            )
        };
        if months.is_empty() && days.is_empty() {
            return Ok(());
        }
        let result = (|| -> Result<()> {
            let txn = self.store.write()?;
            for (table, dirty) in [(USAGE, &months), (USAGE_DAYS, &days)] {
                let mut table = txn.open_table(table)?;
                for (key, count) in dirty {
                    table.insert(*key, *count)?;
                }
            }
            txn.commit()?;
            Ok(())
        })();
        if result.is_err() {
            // Keep them for the next flush.
            let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
            let Counters { months: m, days: d } = &mut *counters;
            for (map, dirty) in [(m, &months), (d, &days)] {
                for (key, _) in dirty {
                    if let Some(c) = map.get_mut(key) {
                        c.dirty = true;
                    }
                }
            }
        }
        result
    }

    /// Calls per day of the endpoint from `from` to `to` (inclusive, UTC days), one entry per
    /// day, counting calls not yet flushed.
    pub fn days(&self, endpoint_id: u64, from: Timestamp, to: Timestamp) -> Result<Vec<DayUsage>> {
        let parts = [
            partition(endpoint_id, Environment::Sandbox),
            partition(endpoint_id, Environment::Production),
        ];
        let (first, last) = (day_key(from), day_key(to));
        let mut counts: std::collections::BTreeMap<u32, [u64; 2]> = Default::default();
        {
            let txn = self.store.read()?;
            let table = txn.open_table(USAGE_DAYS)?;
            for (i, part) in parts.iter().enumerate() {
                for entry in table.range((*part, first)..=(*part, last))? {
                    let (key, value) = entry?;
                    counts.entry(key.value().1).or_default()[i] = value.value();
                }
            }
        }
        let counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        for ((part, day), counter) in &counters.days {
            if let Some(i) = parts.iter().position(|p| p == part) {
                if (first..=last).contains(day) {
                    counts.entry(*day).or_default()[i] = counter.count;
                }
            }
        }
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
        let mut by_month: std::collections::BTreeMap<u32, (u64, u64)> = Default::default();
        let sandbox = partition(endpoint_id, Environment::Sandbox);
        let production = partition(endpoint_id, Environment::Production);
        let mut add = |part: u64, month: u32, count: u64| {
            let entry = by_month.entry(month).or_default();
            if part == production {
                entry.1 = count;
            } else {
                entry.0 = count;
            }
        };
        {
            let txn = self.store.read()?;
            let table = txn.open_table(USAGE)?;
            for part in [sandbox, production] {
                for entry in table.range((part, 0)..=(part, u32::MAX))? {
                    let (key, value) = entry?;
                    add(part, key.value().1, value.value());
                }
            }
        }
        let counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        for ((part, month), counter) in counters.months.iter() {
            if *part == sandbox || *part == production {
                add(*part, *month, counter.count);
            }
        }
        Ok(by_month
            .into_iter()
            .rev()
            .map(|(month, (sandbox, production))| MonthUsage {
                month: format!("{:04}-{:02}", month / 100, month % 100),
                sandbox,
                production,
            })
            .collect())
    }
}

/// The dirty counters of `map` (marked clean), after forgetting clean ones older than
/// `current`.
fn take_dirty(map: &mut HashMap<(u64, u32), Counter>, current: u32) -> Vec<((u64, u32), u64)> {
    map.retain(|(_, period), c| c.dirty || *period >= current);
    map.iter_mut()
        .filter(|(_, c)| c.dirty)
        .map(|(k, c)| {
            c.dirty = false;
            (*k, c.count)
        })
        .collect()
}
