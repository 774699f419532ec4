//! Monthly usage: a counter of data calls per endpoint, environment and calendar month (UTC),
//! and the optional monthly quota that turns calls past it into 429.
//!
//! Counting must not add an fsync to every call (most are reads), so counters live in memory
//! and are written to the `USAGE` table in one batch every second and at shutdown. A crash can
//! forget at most the last second of counts: the quota is a soft business limit, and this
//! errs in the caller's favour.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::storage::{Environment, Store, USAGE, partition};

/// A month as stored: `yyyymm`.
fn month_key(t: Timestamp) -> u32 {
    let (year, month) = t.year_month();
    u32::try_from(year.clamp(0, 9999)).unwrap_or(0) * 100 + month
}

#[derive(Debug, Default)]
struct Counter {
    count: u64,
    /// Changed since the last flush.
    dirty: bool,
}

/// The usage counters of a running server.
pub struct Usage {
    store: Arc<Store>,
    counters: Mutex<HashMap<(u64, u32), Counter>>,
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
    pub fn new(store: Arc<Store>) -> Usage {
        Usage {
            store,
            counters: Mutex::default(),
        }
    }

    /// Counts one data call of `partition` at `now`, or refuses it with 429 when the month's
    /// count has reached `quota`. Refused calls are not counted.
    pub fn count(&self, now: Timestamp, partition: u64, quota: Option<u64>) -> Result<()> {
        let key = (partition, month_key(now));
        let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        let counter = match counters.entry(key) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => entry.insert(Counter {
                count: self.stored(key)?,
                dirty: false,
            }),
        };
        if quota.is_some_and(|q| counter.count >= q) {
            let reset = now.start_of_next_month();
            // Rounded up: waiting the advertised time must be enough.
            let micros = u64::try_from(reset.as_micros() - now.as_micros()).unwrap_or(0);
            return Err(Error::UsageLimitExceeded {
                retry_after_secs: micros.div_ceil(1_000_000).max(1),
            });
        }
        counter.count += 1;
        counter.dirty = true;
        Ok(())
    }

    fn stored(&self, key: (u64, u32)) -> Result<u64> {
        let txn = self.store.read()?;
        Ok(txn.open_table(USAGE)?.get(key)?.map_or(0, |v| v.value()))
    }

    /// Writes changed counters in one commit and forgets clean counters of past months.
    pub fn flush(&self, now: Timestamp) -> Result<()> {
        let current = month_key(now);
        let dirty: Vec<((u64, u32), u64)> = {
            let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
            counters.retain(|(_, month), c| c.dirty || *month >= current);
            counters
                .iter_mut()
                .filter(|(_, c)| c.dirty)
                .map(|(k, c)| {
                    c.dirty = false;
                    (*k, c.count)
                })
                .collect()
        };
        if dirty.is_empty() {
            return Ok(());
        }
        let result = (|| -> Result<()> {
            let txn = self.store.write()?;
            {
                let mut table = txn.open_table(USAGE)?;
                for (key, count) in &dirty {
                    table.insert(*key, *count)?;
                }
            }
            txn.commit()?;
            Ok(())
        })();
        if result.is_err() {
            // Keep them for the next flush.
            let mut counters = self.counters.lock().unwrap_or_else(|e| e.into_inner());
            for (key, _) in &dirty {
                if let Some(c) = counters.get_mut(key) {
                    c.dirty = true;
                }
            }
        }
        result
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
        for ((part, month), counter) in counters.iter() {
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
