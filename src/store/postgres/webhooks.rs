//! [`WebhooksRead`] and [`WebhooksWrite`] on PostgreSQL, and the store's gauges.
//!
//! A delivery's place in the due list is kept on its own row: `due_at` (with `retry` and
//! `receiver`) is set while it is listed and `NULL` otherwise, so the due list is the partial
//! index `deliveries_due` on `(due_at, id)`. A delivery a node has claimed (`lease_node`,
//! `lease_until`: `ClusterStore::claim_delivery`) is left out of the due list until the claim
//! lapses; recording its outcome ends the claim.

use std::collections::{BTreeMap, HashMap};

use super::records::sql_limit;
use super::subscription_health;
use super::{
    PgStore, PgTx, big, big_partition, from_json, id_bytes, to_json, unbig, unbig_partition,
};
use crate::core::clock::Timestamp;
use crate::store::webhooks::{AttemptOutcome, DueDelivery, Settled, WebhooksRead, WebhooksWrite};
use crate::store::{
    AttemptRow, DeliveryRow, DeliveryState, Partition, StoreError, StoreGauges, SubscriptionHealth,
    WebhookSecretRow, WebhookSettingsRow, time_from_key, time_key,
};

/// A due-list time as its column holds it.
fn due_column(at: Timestamp) -> i64 {
    big(time_key(at))
}

/// The `data` of every row `sql` returns, decoded.
fn decode_all<T: serde::de::DeserializeOwned>(
    rows: &[tokio_postgres::Row],
) -> Result<Vec<T>, StoreError> {
    rows.iter().map(|row| from_json(row.try_get(0)?)).collect()
}

impl WebhooksRead for PgTx<'_> {
    fn webhook_secret(&self, partition: Partition) -> Result<Option<WebhookSecretRow>, StoreError> {
        let row = self.query_opt(
            "SELECT data FROM webhook_secrets WHERE partition = $1",
            &[&big_partition(partition)],
        )?;
        row.map(|row| from_json(row.try_get(0)?)).transpose()
    }

    fn webhook_settings(
        &self,
        partition: Partition,
    ) -> Result<Option<WebhookSettingsRow>, StoreError> {
        subscription_health::settings_with_health(self, partition)
    }

    fn delivery(&self, id: u64) -> Result<Option<DeliveryRow>, StoreError> {
        let row = self.query_opt("SELECT data FROM deliveries WHERE id = $1", &[&big(id)])?;
        row.map(|row| from_json(row.try_get(0)?)).transpose()
    }

    fn deliveries(&self, ids: &[u64]) -> Result<Vec<DeliveryRow>, StoreError> {
        let ids: Vec<i64> = ids.iter().map(|id| big(*id)).collect();
        let rows = self.query(
            "SELECT d.data FROM unnest($1::bigint[]) WITH ORDINALITY AS u (id, n) \
             JOIN deliveries d ON d.id = u.id ORDER BY u.n",
            &[&ids],
        )?;
        decode_all(&rows)
    }

    fn delivery_page(
        &self,
        partition: Partition,
        record: Option<u128>,
        before: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        let rows = match record {
            None => self.query(
                "SELECT data FROM deliveries WHERE partition = $1 AND id < $2 \
                 ORDER BY id DESC LIMIT $3",
                &[&big_partition(partition), &big(before), &sql_limit(limit)],
            )?,
            Some(record) => self.query(
                "SELECT data FROM deliveries \
                 WHERE partition = $1 AND record_id = $2 AND id < $3 \
                 ORDER BY id DESC LIMIT $4",
                &[
                    &big_partition(partition),
                    &&id_bytes(record)[..],
                    &big(before),
                    &sql_limit(limit),
                ],
            )?,
        };
        decode_all(&rows)
    }

    fn deliveries_after(
        &self,
        partition: Partition,
        after: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        let rows = self.query(
            "SELECT data FROM deliveries WHERE partition = $1 AND id > $2 ORDER BY id LIMIT $3",
            &[&big_partition(partition), &big(after), &sql_limit(limit)],
        )?;
        decode_all(&rows)
    }

    fn recovering_settings(&self) -> Result<Vec<(Partition, WebhookSettingsRow)>, StoreError> {
        let rows = self.query("SELECT partition, data FROM owner_webhooks", &[])?;
        let mut out = Vec::new();
        for row in &rows {
            let settings: WebhookSettingsRow = from_json(row.try_get(1)?)?;
            if settings.recovering() {
                let partition = unbig_partition(row.try_get(0)?);
                if let Some(settings) = subscription_health::settings_with_health(self, partition)?
                {
                    out.push((partition, settings));
                }
            }
        }
        Ok(out)
    }

    fn pending_deliveries(&self, partition: Partition) -> Result<Vec<DeliveryRow>, StoreError> {
        let rows = self.query(
            "SELECT data FROM deliveries WHERE partition = $1 AND due_at IS NOT NULL ORDER BY id",
            &[&big_partition(partition)],
        )?;
        let mut rows: Vec<DeliveryRow> = decode_all(&rows)?;
        rows.retain(|row| row.state == DeliveryState::Pending);
        Ok(rows)
    }

    fn delivery_attempts(&self, id: u64) -> Result<Vec<AttemptRow>, StoreError> {
        let rows = self.query(
            "SELECT data FROM delivery_attempts WHERE delivery_id = $1 ORDER BY attempt",
            &[&big(id)],
        )?;
        decode_all(&rows)
    }

    fn due_deliveries(
        &self,
        now: Timestamp,
        after: Option<(Timestamp, u64)>,
        limit: usize,
    ) -> Result<Vec<DueDelivery>, StoreError> {
        let now_key = time_key(now);
        let after = after.map(|(at, id)| (time_key(at), id));
        let rows = match after {
            // Just after `after` up to now, then from the start up to `after`.
            Some((at, id)) if (at, id) < (now_key, u64::MAX) => self.query(
                "SELECT due_at, id, retry, receiver FROM ( \
                     (SELECT 0 AS part, due_at, id, retry, receiver FROM deliveries \
                      WHERE due_at IS NOT NULL AND (due_at, id) > ($1, $2) AND due_at <= $3 \
                        AND (lease_until IS NULL OR lease_until < now()) \
                      ORDER BY due_at, id LIMIT $4) \
                     UNION ALL \
                     (SELECT 1, due_at, id, retry, receiver FROM deliveries \
                      WHERE due_at IS NOT NULL AND (due_at, id) <= ($1, $2) \
                        AND (lease_until IS NULL OR lease_until < now()) \
                      ORDER BY due_at, id LIMIT $4) \
                 ) due ORDER BY part, due_at, id LIMIT $4",
                &[&big(at), &big(id), &big(now_key), &sql_limit(limit)],
            )?,
            _ => self.query(
                "SELECT due_at, id, retry, receiver FROM deliveries \
                 WHERE due_at IS NOT NULL AND due_at <= $1 \
                   AND (lease_until IS NULL OR lease_until < now()) \
                 ORDER BY due_at, id LIMIT $2",
                &[&big(now_key), &sql_limit(limit)],
            )?,
        };
        rows.iter()
            .map(|row| {
                Ok(DueDelivery {
                    due_at: time_from_key(unbig(row.try_get(0)?)),
                    id: unbig(row.try_get(1)?),
                    retry: row.try_get(2)?,
                    receiver: row.try_get(3)?,
                })
            })
            .collect()
    }

    fn failure_mailed(&self, endpoint_id: u64, day: u64) -> Result<bool, StoreError> {
        let row = self.query_opt(
            "SELECT 1 FROM failure_mails WHERE endpoint_id = $1 AND day = $2",
            &[&big(endpoint_id), &big(day)],
        )?;
        Ok(row.is_some())
    }
}

impl WebhooksWrite for PgTx<'_> {
    fn put_webhook_secret(
        &mut self,
        partition: Partition,
        row: &WebhookSecretRow,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO webhook_secrets (partition, data) VALUES ($1, $2) \
             ON CONFLICT (partition) DO UPDATE SET data = EXCLUDED.data",
            &[&big_partition(partition), &to_json(row)?],
        )?;
        Ok(())
    }

    fn delete_webhook_secret(&mut self, partition: Partition) -> Result<bool, StoreError> {
        let removed = self.execute(
            "DELETE FROM webhook_secrets WHERE partition = $1",
            &[&big_partition(partition)],
        )?;
        Ok(removed > 0)
    }

    fn put_webhook_settings(
        &mut self,
        partition: Partition,
        row: &WebhookSettingsRow,
    ) -> Result<(), StoreError> {
        subscription_health::put_settings(self, partition, row)?;
        self.effects.recoveries |= row.recovering();
        Ok(())
    }

    fn delete_webhook_settings(&mut self, partition: Partition) -> Result<bool, StoreError> {
        subscription_health::delete_health(self, partition)?;
        let removed = self.execute(
            "DELETE FROM owner_webhooks WHERE partition = $1",
            &[&big_partition(partition)],
        )?;
        Ok(removed > 0)
    }

    fn put_subscription_health(
        &mut self,
        partition: Partition,
        health: &[(u32, SubscriptionHealth)],
    ) -> Result<(), StoreError> {
        subscription_health::put_health(self, partition, health)
    }

    fn put_delivery(&mut self, row: &DeliveryRow) -> Result<(), StoreError> {
        // The due-list columns are put_due's and record_outcomes': left as they are.
        self.execute(
            "INSERT INTO deliveries (id, partition, record_id, data) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (id) DO UPDATE SET partition = EXCLUDED.partition, \
                 record_id = EXCLUDED.record_id, data = EXCLUDED.data",
            &[
                &big(row.id),
                &big_partition(row.partition),
                &&id_bytes(row.record_id)[..],
                &to_json(row)?,
            ],
        )?;
        Ok(())
    }

    fn next_delivery_id(&mut self) -> Result<u64, StoreError> {
        let row = self
            .query_opt("SELECT nextval('delivery_ids')", &[])?
            .ok_or_else(|| StoreError::Corrupt("nextval returned no row".into()))?;
        Ok(unbig(row.try_get(0)?))
    }

    fn put_attempt(&mut self, delivery_id: u64, attempt: &AttemptRow) -> Result<(), StoreError> {
        let number = i32::try_from(attempt.attempt).map_err(|_| {
            StoreError::Corrupt(format!(
                "attempt {} of delivery {delivery_id}",
                attempt.attempt
            ))
        })?;
        self.execute(
            "INSERT INTO delivery_attempts (delivery_id, attempt, data) VALUES ($1, $2, $3) \
             ON CONFLICT (delivery_id, attempt) DO UPDATE SET data = EXCLUDED.data",
            &[&big(delivery_id), &number, &to_json(attempt)?],
        )?;
        Ok(())
    }

    fn put_due(&mut self, due: &DueDelivery) -> Result<(), StoreError> {
        // A delivery is listed on its row: one that does not exist cannot be listed (on redb
        // its entry would be passed over by the dispatcher, which finds no row).
        self.execute(
            "UPDATE deliveries SET due_at = $2, retry = $3, receiver = $4 WHERE id = $1",
            &[
                &big(due.id),
                &due_column(due.due_at),
                &due.retry,
                &due.receiver,
            ],
        )?;
        self.effects.deliveries_due = true;
        Ok(())
    }

    /// The claim (`lease_node`, `lease_until`) stays: the node holding it ends it when it
    /// records the attempt's outcome.
    fn unlist_due(&mut self, _at: Timestamp, id: u64) -> Result<(), StoreError> {
        self.execute(
            "UPDATE deliveries SET due_at = NULL, retry = false, receiver = '' WHERE id = $1",
            &[&big(id)],
        )?;
        Ok(())
    }

    /// A delivery is listed on its row, so listing it again moves it.
    fn move_due(&mut self, _from: Option<Timestamp>, due: &DueDelivery) -> Result<(), StoreError> {
        self.put_due(due)
    }

    fn record_outcomes(
        &mut self,
        outcomes: &[AttemptOutcome],
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        if outcomes.is_empty() {
            return Ok(Vec::new());
        }
        // Every delivery of the group in one read; locked, so that a node recording the same
        // attempt waits for this one and then finds it is no longer the next.
        let ids: Vec<i64> = outcomes.iter().map(|o| big(o.delivery_id)).collect();
        let rows = self.query(
            "SELECT data FROM deliveries WHERE id = ANY($1) FOR UPDATE",
            &[&ids],
        )?;
        let mut deliveries: HashMap<u64, DeliveryRow> = HashMap::with_capacity(rows.len());
        for row in decode_all::<DeliveryRow>(&rows)? {
            deliveries.insert(row.id, row);
        }
        let mut given_up = Vec::new();
        let mut retries = false;
        // Where each changed delivery goes in the due list: `None` takes it off. A delivery
        // may be recorded more than once in a group; its last place counts.
        let mut changed: BTreeMap<u64, Option<(Timestamp, String)>> = BTreeMap::new();
        let (mut attempt_ids, mut attempt_numbers, mut attempt_data) =
            (Vec::new(), Vec::new(), Vec::new());
        for outcome in outcomes {
            let number = outcome.attempt.attempt;
            let Some(row) = deliveries.get_mut(&outcome.delivery_id) else {
                continue;
            };
            let due = match outcome.apply(row) {
                None => continue,
                Some(Settled::Finished(..)) => None,
                Some(Settled::Due(at, receiver)) => {
                    retries = true;
                    Some((at, receiver.to_string()))
                }
            };
            attempt_ids.push(big(row.id));
            attempt_numbers.push(i32::try_from(number).map_err(|_| {
                StoreError::Corrupt(format!("attempt {number} of delivery {}", row.id))
            })?);
            attempt_data.push(to_json(&outcome.attempt)?);
            changed.insert(row.id, due);
            if row.state == DeliveryState::GivenUp {
                given_up.push(row.clone());
            }
        }
        let (mut ids, mut data, mut due_at) = (Vec::new(), Vec::new(), Vec::new());
        let (mut retry, mut receiver) = (Vec::new(), Vec::new());
        for (id, due) in changed {
            let Some(row) = deliveries.get(&id) else {
                continue;
            };
            ids.push(big(id));
            data.push(to_json(row)?);
            match due {
                Some((at, to)) => {
                    due_at.push(Some(due_column(at)));
                    retry.push(row.attempts > 0);
                    receiver.push(to);
                }
                None => {
                    due_at.push(None);
                    retry.push(false);
                    receiver.push(String::new());
                }
            }
        }
        if ids.is_empty() {
            return Ok(given_up);
        }
        self.execute(
            "WITH attempts AS ( \
                 INSERT INTO delivery_attempts (delivery_id, attempt, data) \
                 SELECT * FROM unnest($1::bigint[], $2::integer[], $3::bytea[]) \
                 ON CONFLICT (delivery_id, attempt) DO UPDATE SET data = EXCLUDED.data \
             ) \
             UPDATE deliveries \
             SET data = u.data, due_at = u.due_at, retry = u.retry, receiver = u.receiver, \
                 lease_node = NULL, lease_until = NULL \
             FROM unnest($4::bigint[], $5::bytea[], $6::bigint[], $7::bool[], $8::text[]) \
                 AS u (id, data, due_at, retry, receiver) \
             WHERE deliveries.id = u.id",
            &[
                &attempt_ids,
                &attempt_numbers,
                &attempt_data,
                &ids,
                &data,
                &due_at,
                &retry,
                &receiver,
            ],
        )?;
        self.effects.deliveries_due |= retries;
        Ok(given_up)
    }

    fn insert_failure_mail(&mut self, endpoint_id: u64, day: u64) -> Result<(), StoreError> {
        // A plain insert: when two nodes that both found no e-mail noted race, the second's
        // insert fails as a serialisation conflict, and its transaction, run again, finds the
        // first's note and sends nothing (one e-mail per endpoint per day, cluster-wide).
        self.execute(
            "INSERT INTO failure_mails (endpoint_id, day) VALUES ($1, $2)",
            &[&big(endpoint_id), &big(day)],
        )?;
        Ok(())
    }
}

impl PgStore {
    pub(super) fn read_gauges(&self, now: Timestamp) -> Result<StoreGauges, StoreError> {
        let tx = PgTx::read(self)?;
        // One snapshot; the outbox's `status` is the JSON's status, in serde's lowercase.
        let row = tx
            .query_opt(
                "SELECT (SELECT count(*) FROM deliveries WHERE due_at IS NOT NULL), \
                        (SELECT count(*) FROM deliveries WHERE due_at > $1), \
                        count(*) FILTER (WHERE status = 'queued'), \
                        count(*) FILTER (WHERE status = 'sent'), \
                        count(*) FILTER (WHERE status = 'failed') \
                 FROM outbox",
                &[&due_column(now)],
            )?
            .ok_or_else(|| StoreError::Corrupt("the gauges returned no row".into()))?;
        let count = |index: usize| -> Result<u64, StoreError> { Ok(unbig(row.try_get(index)?)) };
        Ok(StoreGauges {
            webhook_pending: count(0)?,
            webhook_retry_backlog: count(1)?,
            mail_queued: count(2)?,
            mail_sent: count(3)?,
            mail_failed: count(4)?,
            payload_dictionaries: 0,
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Barrier;

    use super::super::{PgStore, PgTx, test_cluster, test_node_on, test_store};
    use crate::core::clock::Timestamp;
    use crate::store::conformance::webhooks::{delivery, due_ids, listed, outcome};
    use crate::store::webhooks::{AfterAttempt, AttemptOutcome, WebhooksRead, WebhooksWrite};
    use crate::store::{DeliveryRow, Partition, Store, StoreGauges};

    /// Two stores on one new database: two nodes of a cluster.
    pub(in crate::store::postgres) fn two_nodes() -> (PgStore, PgStore) {
        let url = test_cluster::shared().database();
        (test_node_on(url.clone(), |_| {}), test_node_on(url, |_| {}))
    }

    #[test]
    fn two_nodes_recording_one_attempt_apply_it_once() {
        let (one, two) = two_nodes();
        let ids: Vec<u64> = (1..=6).collect();
        let rows: Vec<(DeliveryRow, i64)> = ids
            .iter()
            .map(|id| (delivery(*id, Partition::from_raw(2), 1), 10))
            .collect();
        listed(&one, &rows);
        let barrier = Barrier::new(2);
        let record = |store: &PgStore, order: &[u64]| {
            let outcomes: Vec<AttemptOutcome> = order
                .iter()
                .map(|id| outcome(*id, 1, AfterAttempt::GivenUp { at: Timestamp(100) }))
                .collect();
            barrier.wait();
            let (given_up, _) = store
                .write_unit(|tx| tx.record_outcomes(&outcomes))
                .unwrap();
            given_up.into_iter().map(|r| r.id).collect::<Vec<_>>()
        };
        let reversed: Vec<u64> = ids.iter().rev().copied().collect();
        let (mut first, second) = std::thread::scope(|scope| {
            let first = scope.spawn(|| record(&one, &ids));
            let second = scope.spawn(|| record(&two, &reversed));
            (first.join().unwrap(), second.join().unwrap())
        });
        first.extend(second);
        first.sort_unstable();
        assert_eq!(first, ids);
        let tx = PgTx::read(&one).unwrap();
        for id in ids {
            assert_eq!(tx.delivery_attempts(id).unwrap().len(), 1);
            assert_eq!(tx.delivery(id).unwrap().unwrap().attempts, 1);
        }
        assert!(due_ids(&tx, 1000, None, 10).is_empty());
    }

    #[test]
    fn two_nodes_giving_up_at_once_note_one_failure_mail() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let (one, two) = two_nodes();
        let (barrier, sent) = (Barrier::new(2), AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for store in [&one, &two] {
                let (barrier, sent) = (&barrier, &sent);
                scope.spawn(move || {
                    let first = AtomicBool::new(true);
                    let (would_send, _) = store
                        .write_unit(|tx| {
                            let mailed = tx.failure_mailed(7, 200)?;
                            // Both have looked before either notes it, on the first run.
                            if first.swap(false, Ordering::SeqCst) {
                                barrier.wait();
                            }
                            if mailed {
                                return Ok(false);
                            }
                            tx.insert_failure_mail(7, 200)?;
                            Ok(true)
                        })
                        .unwrap();
                    if would_send {
                        sent.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(sent.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn gauges_count_the_due_list_and_the_outbox() {
        let store = test_store();
        assert_eq!(store.gauges(Timestamp(0)).unwrap(), StoreGauges::default());
        listed(
            &store,
            &[
                (delivery(1, Partition::from_raw(2), 1), 10),
                (delivery(2, Partition::from_raw(2), 1), 20),
                (delivery(3, Partition::from_raw(2), 1), 30),
                (delivery(4, Partition::from_raw(2), 1), 40),
            ],
        );
        store
            .write_unit(|tx| tx.put_delivery(&delivery(5, Partition::from_raw(2), 1)))
            .unwrap();
        store
            .write_unit(|tx| {
                tx.execute(
                    "INSERT INTO outbox (id, status, created_at, data) VALUES \
                     (1, 'queued', 0, ''), (2, 'queued', 0, ''), (3, 'sent', 0, ''), \
                     (4, 'failed', 0, ''), (5, 'sent', 0, ''), (6, 'sent', 0, '')",
                    &[],
                )
            })
            .unwrap();
        assert_eq!(
            store.gauges(Timestamp(20)).unwrap(),
            StoreGauges {
                webhook_pending: 4,
                webhook_retry_backlog: 2,
                mail_queued: 2,
                mail_sent: 3,
                mail_failed: 1,
                payload_dictionaries: 0,
            }
        );
        assert_eq!(
            store.gauges(Timestamp(40)).unwrap().webhook_retry_backlog,
            0
        );
    }
}
