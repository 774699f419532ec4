//! The cluster on PostgreSQL (see `store::cluster` for the invariant): the `nodes` table of
//! leases and low-water marks, the `jobs` table of periodic runs, the `access` counter, and
//! the fence that keeps a node whose lease lapsed from committing creates the others no
//! longer wait for.

use std::net::IpAddr;
use std::time::Duration;

use super::{PgStore, PgTx, big};
use crate::core::clock::Timestamp;
use crate::store::StoreError;
use crate::store::cluster::{ClusterStore, LoginLimits};
use crate::store::rows::time_key;

/// This node's current membership: its row in `nodes`, and the time its creates must be
/// stamped after (its clock when it joined).
#[derive(Clone, Copy, Debug)]
pub(super) struct Membership {
    id: i64,
    live_since: Timestamp,
}

/// A node's batch is refused unless its lease still has this share of its length to run: a
/// commit that passes the check lands well before the others stop waiting for the node.
const FENCE_MARGIN: f64 = 0.5;

/// Rows of nodes whose lease lapsed this long ago are removed when a node joins.
const FORGET_AFTER_SECS: f64 = 86_400.0;

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

impl PgStore {
    fn membership(&self) -> Option<Membership> {
        *self.node.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_membership(&self, membership: Option<Membership>) {
        *self.node.lock().unwrap_or_else(|e| e.into_inner()) = membership;
    }

    /// Refuses a batch this node may not commit: before it joined, with creates stamped before
    /// its latest join (`oldest_create`), or while its lease is not live with a margin. Runs
    /// in the batch's transaction, so the check and the commit see the same lease row.
    pub(super) fn check_fence(
        &self,
        tx: &PgTx<'_>,
        oldest_create: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        let Some(node) = self.membership() else {
            return Err(StoreError::Backend(
                "this node has not joined the cluster (its lease is not live)".into(),
            ));
        };
        if oldest_create.is_some_and(|created| created < node.live_since) {
            return Err(StoreError::Backend(
                "these creates were stamped before this node's lease lapsed".into(),
            ));
        }
        let live = tx.query_opt(
            "SELECT 1 FROM nodes WHERE id = $1 AND lease_until > now() + make_interval(secs => $2)",
            &[&node.id, &(secs(self.lease) * FENCE_MARGIN)],
        )?;
        match live {
            Some(_) => Ok(()),
            None => Err(StoreError::Backend(
                "this node's lease has lapsed; it joins again shortly".into(),
            )),
        }
    }

    fn join(&self, now: Timestamp) -> Result<(), StoreError> {
        // Forget the membership first: from here until the new row is in, nothing commits.
        self.set_membership(None);
        self.statement(
            "DELETE FROM nodes WHERE lease_until < now() - make_interval(secs => $1)",
            &[&FORGET_AFTER_SECS],
        )?;
        let name = format!(
            "{}:{}",
            rustix::system::uname().nodename().to_string_lossy(),
            std::process::id()
        );
        let rows = self.statement(
            "INSERT INTO nodes (name, lease_until, low_water)
             VALUES ($1, now() + make_interval(secs => $2), $3) RETURNING id",
            &[&name, &secs(self.lease), &big(time_key(now))],
        )?;
        let id: i64 = rows
            .first()
            .ok_or_else(|| StoreError::Corrupt("INSERT ... RETURNING gave no row".into()))?
            .try_get(0)?;
        self.set_membership(Some(Membership {
            id,
            live_since: now,
        }));
        log::info!("joined the cluster as node {id} ({name})");
        Ok(())
    }
}

impl ClusterStore for PgStore {
    fn publish_low_water(&self, low_water: Timestamp, now: Timestamp) -> Result<(), StoreError> {
        let Some(node) = self.membership() else {
            return self.join(now);
        };
        let renewed = self.statement(
            "UPDATE nodes SET lease_until = now() + make_interval(secs => $2), low_water = $3
             WHERE id = $1 AND lease_until > now() RETURNING id",
            &[&node.id, &secs(self.lease), &big(time_key(low_water))],
        )?;
        if renewed.is_empty() {
            log::warn!(
                "node {}: the lease lapsed; joining the cluster again",
                node.id
            );
            return self.join(now);
        }
        Ok(())
    }

    fn leave(&self) -> Result<(), StoreError> {
        if let Some(node) = self.membership() {
            self.set_membership(None);
            self.statement("DELETE FROM nodes WHERE id = $1", &[&node.id])?;
        }
        Ok(())
    }

    fn visibility_floor(&self) -> Result<Option<Timestamp>, StoreError> {
        let rows = self.statement(
            "SELECT min(low_water) FROM nodes WHERE lease_until > now()",
            &[],
        )?;
        let floor: Option<i64> = match rows.first() {
            Some(row) => row.try_get(0)?,
            None => None,
        };
        Ok(floor.map(Timestamp))
    }

    fn claim_job(&self, name: &str, now: Timestamp, period: Duration) -> Result<bool, StoreError> {
        let next = big(time_key(now.plus(period)));
        let claimed = self.statement(
            "INSERT INTO jobs (name, next_run) VALUES ($1, $2)
             ON CONFLICT (name) DO UPDATE SET next_run = EXCLUDED.next_run
             WHERE jobs.next_run <= $3
             RETURNING name",
            &[&name, &next, &big(time_key(now))],
        )?;
        Ok(!claimed.is_empty())
    }

    fn claim_delivery(&self, id: u64, hold: Duration) -> Result<bool, StoreError> {
        let Some(node) = self.membership() else {
            return Ok(false);
        };
        let claimed = self.statement(
            "UPDATE deliveries SET lease_node = $2, lease_until = now() + make_interval(secs => $3)
             WHERE id = $1 AND due_at IS NOT NULL
               AND (lease_until IS NULL OR lease_until < now() OR lease_node = $2)
             RETURNING id",
            &[&big(id), &node.id, &secs(hold)],
        )?;
        Ok(!claimed.is_empty())
    }

    fn claim_mail(&self, id: u64, hold: Duration) -> Result<bool, StoreError> {
        let Some(node) = self.membership() else {
            return Ok(false);
        };
        let claimed = self.statement(
            "UPDATE outbox SET lease_node = $2, lease_until = now() + make_interval(secs => $3)
             WHERE id = $1 AND status = 'queued'
               AND (lease_until IS NULL OR lease_until < now() OR lease_node = $2)
             RETURNING id",
            &[&big(id), &node.id, &secs(hold)],
        )?;
        Ok(!claimed.is_empty())
    }

    fn reserve_login(
        &self,
        email: &str,
        address: Option<IpAddr>,
        now: Timestamp,
        limits: LoginLimits,
    ) -> Result<Result<u64, Timestamp>, StoreError> {
        let address = address.map(|ip| ip.to_string());
        let since = big(time_key(now.minus(limits.window)));
        let window = limits.window;
        // Serializable, and run again on a conflict: parallel attempts cannot all pass the
        // check before one of them is counted.
        self.transact(|tx| {
            tx.execute("DELETE FROM login_failures WHERE at <= $1", &[&since])?;
            let waits = [
                tx.query_opt(
                    "SELECT count(*), min(at) FROM login_failures
                     WHERE email = $1 AND address IS NOT DISTINCT FROM $2 AND pair_counts",
                    &[&email, &address],
                )?
                .map(|row| (row, limits.per_account)),
                match &address {
                    Some(address) => tx
                        .query_opt(
                            "SELECT count(*), min(at) FROM login_failures WHERE address = $1",
                            &[address],
                        )?
                        .map(|row| (row, limits.per_address)),
                    None => None,
                },
            ];
            let mut until = None;
            for (row, limit) in waits.into_iter().flatten() {
                let count: i64 = row.try_get(0)?;
                let oldest: Option<i64> = row.try_get(1)?;
                if let Some(oldest) = oldest.filter(|_| count >= i64::from(limit)) {
                    let at = Timestamp(oldest).plus(window);
                    until = Some(until.map_or(at, |u: Timestamp| u.max(at)));
                }
            }
            if let Some(until) = until {
                return Ok(Err(until));
            }
            let row = tx
                .query_opt(
                    "INSERT INTO login_failures (email, address, at) VALUES ($1, $2, $3)
                     RETURNING id",
                    &[&email, &address, &big(time_key(now))],
                )?
                .ok_or_else(|| StoreError::Corrupt("INSERT ... RETURNING gave no row".into()))?;
            Ok(Ok(super::unbig(row.try_get(0)?)))
        })
    }

    fn login_succeeded(
        &self,
        slot: u64,
        email: &str,
        address: Option<IpAddr>,
    ) -> Result<(), StoreError> {
        let address = address.map(|ip| ip.to_string());
        self.transact(|tx| {
            tx.execute(
                "UPDATE login_failures SET pair_counts = false
                 WHERE email = $1 AND address IS NOT DISTINCT FROM $2",
                &[&email, &address],
            )?;
            tx.execute("DELETE FROM login_failures WHERE id = $1", &[&big(slot)])?;
            Ok(())
        })
    }

    fn access_version(&self) -> Result<u64, StoreError> {
        let rows = self.statement("SELECT value FROM counters WHERE name = 'access'", &[])?;
        let value: i64 = rows
            .first()
            .ok_or_else(|| StoreError::Corrupt("the access counter is missing".into()))?
            .try_get(0)?;
        Ok(super::unbig(value))
    }
}
