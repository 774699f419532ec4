//! The cluster on PostgreSQL (see `store::cluster` for the invariant): the `nodes` table of
//! leases and low-water marks, the `jobs` table of periodic runs, the `access` counter, and
//! the fence that keeps a node whose lease lapsed from committing creates the others no
//! longer wait for.

use std::net::IpAddr;
use std::time::Duration;

use super::{PgStore, PgTx, big, micros};
use crate::core::clock::Timestamp;
use crate::store::cluster::{ClusterStore, JobClaim, LoginLimits};
use crate::store::{Partition, StoreError};

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
            &[&name, &secs(self.lease), &micros(now)],
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
            &[&node.id, &secs(self.lease), &micros(low_water)],
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
        // This node's own row is left out: the mark it last published is up to a heartbeat
        // old, and its caller bounds the poll by its in-flight creates, which are current.
        let me = self.membership().map(|node| node.id);
        let rows = self.statement(
            "SELECT min(low_water) FROM nodes WHERE lease_until > now() AND id IS DISTINCT FROM $1",
            &[&me],
        )?;
        let floor: Option<i64> = match rows.first() {
            Some(row) => row.try_get(0)?,
            None => None,
        };
        Ok(floor.map(Timestamp))
    }

    fn claim_job(
        &self,
        name: &str,
        now: Timestamp,
        period: Duration,
    ) -> Result<JobClaim, StoreError> {
        let Some(node) = self.membership() else {
            return Ok(JobClaim::NotDue);
        };
        // Due and no run under way (this node's own earlier run is over: it asks only once
        // that has ended), or a run whose node is no longer live.
        let claimed = self.statement(
            "INSERT INTO jobs (name, next_run, holder) VALUES ($1, $2, $4)
             ON CONFLICT (name) DO UPDATE SET next_run = EXCLUDED.next_run, holder = $4
             WHERE CASE
                 WHEN jobs.holder IS NULL OR jobs.holder = $4 THEN jobs.next_run <= $3
                 ELSE NOT EXISTS (
                     SELECT 1 FROM nodes WHERE id = jobs.holder AND lease_until > now())
             END
             RETURNING name",
            &[&name, &micros(now.plus(period)), &micros(now), &node.id],
        )?;
        if !claimed.is_empty() {
            return Ok(JobClaim::Claimed);
        }
        let held = self.statement(
            "SELECT 1 FROM jobs WHERE name = $1 AND holder IS NOT NULL AND holder <> $2",
            &[&name, &node.id],
        )?;
        Ok(match held.is_empty() {
            true => JobClaim::NotDue,
            false => JobClaim::Held,
        })
    }

    fn finish_job(&self, name: &str) -> Result<bool, StoreError> {
        let Some(node) = self.membership() else {
            return Ok(false);
        };
        let finished = self.statement(
            "UPDATE jobs SET holder = NULL WHERE name = $1 AND holder = $2 RETURNING name",
            &[&name, &node.id],
        )?;
        Ok(!finished.is_empty())
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

    fn pace(
        &self,
        (partition, subscription): (Partition, u32),
        interval_us: i64,
        tolerance_us: i64,
        now: Timestamp,
    ) -> Result<Result<(), Timestamp>, StoreError> {
        let key: (i64, i32) = (big(partition.raw()), subscription as i32);
        let now_us = now.as_micros();
        // The same step as `Pacing::start`, in one statement: a start is booked when the next
        // start is at most `tolerance` ahead of now.
        let booked = self.statement(
            "INSERT INTO subscription_pace AS p (partition, subscription, next_start)
                 VALUES ($1, $2, $3::bigint + $4::bigint)
             ON CONFLICT (partition, subscription) DO UPDATE
                 SET next_start = GREATEST(p.next_start, $3::bigint) + $4::bigint
                 WHERE GREATEST(p.next_start, $3::bigint) - $3::bigint <= $5::bigint
             RETURNING next_start",
            &[&key.0, &key.1, &now_us, &interval_us, &tolerance_us],
        )?;
        if !booked.is_empty() {
            return Ok(Ok(()));
        }
        let next = self.statement(
            "SELECT next_start FROM subscription_pace WHERE partition = $1 AND subscription = $2",
            &[&key.0, &key.1],
        )?;
        let next: i64 = match next.first() {
            Some(row) => row.try_get(0)?,
            None => now_us,
        };
        Ok(Err(Timestamp(next - tolerance_us)))
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
        let since = micros(now.minus(limits.window));
        let window = limits.window;
        // Serializable, and run again on a conflict: parallel attempts cannot all pass the
        // check before one of them is counted.
        self.write_unit(|tx| {
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
                    &[&email, &address, &micros(now)],
                )?
                .ok_or_else(|| StoreError::Corrupt("INSERT ... RETURNING gave no row".into()))?;
            Ok(Ok(super::unbig(row.try_get(0)?)))
        })
        .map(|(value, _)| value)
    }

    fn login_succeeded(
        &self,
        slot: u64,
        email: &str,
        address: Option<IpAddr>,
    ) -> Result<(), StoreError> {
        let address = address.map(|ip| ip.to_string());
        self.write_unit(|tx| {
            tx.execute(
                "UPDATE login_failures SET pair_counts = false
                 WHERE email = $1 AND address IS NOT DISTINCT FROM $2",
                &[&email, &address],
            )?;
            tx.execute("DELETE FROM login_failures WHERE id = $1", &[&big(slot)])?;
            Ok(())
        })
        .map(|(value, _)| value)
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::time::Duration;

    use super::super::{PgTx, test_store};
    use crate::core::clock::Timestamp;
    use crate::store::cluster::{ClusterStore, JobClaim, LoginLimits};
    use crate::store::{Partition, Store};

    const SECOND: i64 = 1_000_000;

    #[test]
    fn a_subscription_is_paced_across_nodes() {
        let store = test_store();
        let other = super::super::PgStore::open(&store_config(&store)).unwrap();
        let at = |ms: i64| Timestamp(1_000 * SECOND + ms * 1000);
        // Two a second, none ahead: one start, then the next half a second later on any node.
        let pace = |store: &super::PgStore, ms| {
            store
                .pace((Partition::from_raw(7), 1), SECOND / 2, 0, at(ms))
                .unwrap()
        };
        assert_eq!(pace(&store, 0), Ok(()));
        assert_eq!(pace(&other, 10), Err(at(500)));
        assert_eq!(pace(&store, 10), Err(at(500)));
        assert_eq!(pace(&other, 500), Ok(()));
        assert_eq!(pace(&store, 600), Err(at(1000)));
        // Another subscription has its own pace.
        assert_eq!(
            store
                .pace((Partition::from_raw(7), 2), SECOND / 2, 0, at(600))
                .unwrap(),
            Ok(())
        );
    }

    #[test]
    fn the_floor_is_the_lowest_mark_of_the_other_live_nodes() {
        let floor = |store: &super::PgStore| store.visibility_floor().unwrap().map(|t| t.0);
        let store = test_store();
        assert_eq!(floor(&store), None);
        store
            .publish_low_water(Timestamp(50 * SECOND), Timestamp(50 * SECOND))
            .unwrap();
        // A node's own mark is not its floor (its polls bound themselves by its in-flight
        // creates): alone, it waits for nobody.
        assert_eq!(floor(&store), None);
        // Other nodes (other store handles on the same database) see it: the first call
        // joins with `now` as the mark, later ones publish the mark given.
        let other = super::super::PgStore::open(&store_config(&store)).unwrap();
        assert_eq!(floor(&other), Some(50 * SECOND));
        store
            .publish_low_water(Timestamp(40 * SECOND), Timestamp(60 * SECOND))
            .unwrap();
        assert_eq!(floor(&other), Some(40 * SECOND));
        other
            .publish_low_water(Timestamp(30 * SECOND), Timestamp(30 * SECOND))
            .unwrap();
        assert_eq!(floor(&store), Some(30 * SECOND));
        assert_eq!(floor(&other), Some(40 * SECOND));
        let third = super::super::PgStore::open(&store_config(&store)).unwrap();
        third
            .publish_low_water(Timestamp(45 * SECOND), Timestamp(45 * SECOND))
            .unwrap();
        assert_eq!(floor(&third), Some(30 * SECOND), "the lowest of the others");
        assert_eq!(floor(&store), Some(30 * SECOND));
        // A node whose lease lapsed is no longer waited for.
        lapse(&other);
        assert_eq!(floor(&store), Some(45 * SECOND));
        assert_eq!(floor(&third), Some(40 * SECOND));
        store.leave().unwrap();
        assert_eq!(floor(&third), None);
    }

    #[test]
    fn a_node_is_fenced_before_it_joins_after_its_lease_lapses_and_for_older_stamps() {
        let store = test_store();
        let fenced = |store: &super::PgStore, oldest: Option<Timestamp>| {
            let tx = PgTx::write(store).unwrap();
            store.check_fence(&tx, oldest).is_err()
        };
        assert!(fenced(&store, None), "not joined yet");
        store
            .publish_low_water(Timestamp(10 * SECOND), Timestamp(10 * SECOND))
            .unwrap();
        assert!(!fenced(&store, Some(Timestamp(10 * SECOND))));
        assert!(
            fenced(&store, Some(Timestamp(9 * SECOND))),
            "stamped before it joined"
        );
        lapse(&store);
        assert!(fenced(&store, None), "lease lapsed");
        // The next beat joins again: creates stamped before that stay refused.
        store
            .publish_low_water(Timestamp(5 * SECOND), Timestamp(20 * SECOND))
            .unwrap();
        assert!(!fenced(&store, Some(Timestamp(20 * SECOND))));
        assert!(fenced(&store, Some(Timestamp(15 * SECOND))));
    }

    #[test]
    fn a_periodic_job_is_claimed_once_per_period_across_nodes() {
        let (store, other) = two_joined_nodes();
        assert_eq!(claim_hourly(&store, "sweep", 1000), JobClaim::Claimed);
        assert_eq!(claim_hourly(&other, "sweep", 1001), JobClaim::Held);
        assert!(store.finish_job("sweep").unwrap());
        assert_eq!(claim_hourly(&other, "sweep", 1002), JobClaim::NotDue);
        assert_eq!(claim_hourly(&store, "sweep", 1000 + 3599), JobClaim::NotDue);
        assert_eq!(
            claim_hourly(&other, "sweep", 1000 + 3600),
            JobClaim::Claimed
        );
        // Another job has its own schedule.
        assert_eq!(claim_hourly(&store, "retention", 1001), JobClaim::Claimed);
    }

    #[test]
    fn a_run_whose_node_lost_its_lease_is_taken_over_once_and_its_node_is_fenced() {
        let (store, other) = two_joined_nodes();
        assert_eq!(claim_hourly(&store, "sweep", 1000), JobClaim::Claimed);
        // Its node cut off: the lease lapses, and the next node to ask takes the run over,
        // although the period has not passed.
        lapse(&store);
        assert_eq!(claim_hourly(&other, "sweep", 1010), JobClaim::Claimed);
        // Back, the first node rejoins under a new lease: the run is not its any more, and
        // it cannot claim it again this period.
        store
            .publish_low_water(Timestamp(20 * SECOND), Timestamp(20 * SECOND))
            .unwrap();
        assert!(!store.finish_job("sweep").unwrap(), "fenced");
        assert_eq!(claim_hourly(&store, "sweep", 1020), JobClaim::Held);
        assert!(other.finish_job("sweep").unwrap());
        assert_eq!(claim_hourly(&store, "sweep", 1030), JobClaim::NotDue);
        // A run that ended without its finish being recorded (its node lost the database
        // for less than a lease) is its own node's to claim again next period.
        assert_eq!(
            claim_hourly(&other, "sweep", 1010 + 3600),
            JobClaim::Claimed
        );
        assert_eq!(
            claim_hourly(&other, "sweep", 1010 + 7200),
            JobClaim::Claimed
        );
    }

    #[test]
    fn login_failures_are_limited_per_pair_and_per_address_for_every_node() {
        let store = test_store();
        let other = super::super::PgStore::open(&store_config(&store)).unwrap();
        let limits = LoginLimits {
            per_account: 2,
            per_address: 3,
            window: Duration::from_secs(60),
        };
        let ip: Option<IpAddr> = "192.0.2.1".parse().ok();
        let t = |s: i64| Timestamp(s * SECOND);
        let first = store.reserve_login("a@x", ip, t(100), limits).unwrap();
        assert!(first.is_ok());
        assert!(
            other
                .reserve_login("a@x", ip, t(101), limits)
                .unwrap()
                .is_ok()
        );
        // The pair is at its limit on both nodes until the first failure leaves the window.
        assert_eq!(
            store.reserve_login("a@x", ip, t(102), limits).unwrap(),
            Err(t(160))
        );
        assert!(
            store
                .reserve_login("a@x", ip, t(161), limits)
                .unwrap()
                .is_ok()
        );
        // The failures at 100 and 101 have left the window: the address holds 161, 162, 163,
        // its limit of 3, whichever account is tried.
        assert!(
            other
                .reserve_login("b@x", ip, t(162), limits)
                .unwrap()
                .is_ok()
        );
        assert!(
            other
                .reserve_login("c@x", ip, t(163), limits)
                .unwrap()
                .is_ok()
        );
        assert_eq!(
            store.reserve_login("e@x", ip, t(164), limits).unwrap(),
            Err(t(221))
        );
        // A right password gives the pair a fresh start and the address this one slot back.
        let slot = store
            .reserve_login("d@x", "192.0.2.9".parse().ok(), t(170), limits)
            .unwrap()
            .unwrap();
        store
            .login_succeeded(slot, "d@x", "192.0.2.9".parse().ok())
            .unwrap();
        let pair = |email: &str| {
            store
                .reserve_login(email, "192.0.2.9".parse().ok(), t(171), limits)
                .unwrap()
        };
        assert!(pair("d@x").is_ok());
        assert!(pair("d@x").is_ok());
        assert!(pair("d@x").is_err());
    }

    #[test]
    fn the_access_version_moves_with_a_bump() {
        let store = test_store();
        let version = || store.read().unwrap().access_version().unwrap();
        let before = version();
        store
            .statement(
                "UPDATE counters SET value = value + 1 WHERE name = 'access'",
                &[],
            )
            .unwrap();
        assert_eq!(version(), before + 1);
    }

    /// The configuration of `store`'s database, for a second node on it.
    fn store_config(store: &super::PgStore) -> crate::core::config::PostgresConfig {
        let rows = store.statement("SELECT current_database()", &[]).unwrap();
        let db: String = rows[0].get(0);
        let mut config = crate::core::config::PostgresConfig::default();
        config.url =
            crate::core::config::Secret::new(super::super::test_cluster::shared().url(&db));
        config.tls = crate::core::config::PostgresTls::Disable;
        config
    }

    /// Two nodes on one test database, both joined at time zero.
    fn two_joined_nodes() -> (super::PgStore, super::PgStore) {
        let store = test_store();
        let other = super::super::PgStore::open(&store_config(&store)).unwrap();
        for node in [&store, &other] {
            node.publish_low_water(Timestamp(0), Timestamp(0)).unwrap();
        }
        (store, other)
    }

    /// `node`'s claim on the hourly job `name` at `secs` seconds.
    fn claim_hourly(node: &super::PgStore, name: &str, secs: i64) -> JobClaim {
        node.claim_job(name, Timestamp(secs * SECOND), Duration::from_secs(3600))
            .unwrap()
    }

    /// Ends `store`'s lease now, as if it had not renewed it for a whole lease.
    fn lapse(store: &super::PgStore) {
        let id = store.membership().unwrap().id;
        store
            .statement(
                "UPDATE nodes SET lease_until = now() - interval '1 second' WHERE id = $1",
                &[&id],
            )
            .unwrap();
    }
}
