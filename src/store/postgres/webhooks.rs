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
use super::{PgStore, PgTx, big, from_json, id_bytes, to_json, unbig};
use crate::core::clock::Timestamp;
use crate::store::webhooks::{AttemptOutcome, DueDelivery, Settled, WebhooksRead, WebhooksWrite};
use crate::store::{
    AttemptRow, DeliveryRow, DeliveryState, StoreError, StoreGauges, SubscriptionHealth,
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
    fn webhook_secret(&self, partition: u64) -> Result<Option<WebhookSecretRow>, StoreError> {
        let row = self.query_opt(
            "SELECT data FROM webhook_secrets WHERE partition = $1",
            &[&big(partition)],
        )?;
        row.map(|row| from_json(row.try_get(0)?)).transpose()
    }

    fn webhook_settings(&self, partition: u64) -> Result<Option<WebhookSettingsRow>, StoreError> {
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
        partition: u64,
        record: Option<u128>,
        before: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        let rows = match record {
            None => self.query(
                "SELECT data FROM deliveries WHERE partition = $1 AND id < $2 \
                 ORDER BY id DESC LIMIT $3",
                &[&big(partition), &big(before), &sql_limit(limit)],
            )?,
            Some(record) => self.query(
                "SELECT data FROM deliveries \
                 WHERE partition = $1 AND record_id = $2 AND id < $3 \
                 ORDER BY id DESC LIMIT $4",
                &[
                    &big(partition),
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
        partition: u64,
        after: u64,
        limit: usize,
    ) -> Result<Vec<DeliveryRow>, StoreError> {
        let rows = self.query(
            "SELECT data FROM deliveries WHERE partition = $1 AND id > $2 ORDER BY id LIMIT $3",
            &[&big(partition), &big(after), &sql_limit(limit)],
        )?;
        decode_all(&rows)
    }

    fn recovering_settings(&self) -> Result<Vec<(u64, WebhookSettingsRow)>, StoreError> {
        let rows = self.query("SELECT partition, data FROM owner_webhooks", &[])?;
        let mut out = Vec::new();
        for row in &rows {
            let settings: WebhookSettingsRow = from_json(row.try_get(1)?)?;
            if settings.recovering() {
                let partition = unbig(row.try_get(0)?);
                if let Some(settings) = subscription_health::settings_with_health(self, partition)?
                {
                    out.push((partition, settings));
                }
            }
        }
        Ok(out)
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
        partition: u64,
        row: &WebhookSecretRow,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO webhook_secrets (partition, data) VALUES ($1, $2) \
             ON CONFLICT (partition) DO UPDATE SET data = EXCLUDED.data",
            &[&big(partition), &to_json(row)?],
        )?;
        Ok(())
    }

    fn delete_webhook_secret(&mut self, partition: u64) -> Result<bool, StoreError> {
        let removed = self.execute(
            "DELETE FROM webhook_secrets WHERE partition = $1",
            &[&big(partition)],
        )?;
        Ok(removed > 0)
    }

    fn put_webhook_settings(
        &mut self,
        partition: u64,
        row: &WebhookSettingsRow,
    ) -> Result<(), StoreError> {
        subscription_health::put_settings(self, partition, row)?;
        self.effects.recoveries |= row.recovering();
        Ok(())
    }

    fn delete_webhook_settings(&mut self, partition: u64) -> Result<bool, StoreError> {
        subscription_health::delete_health(self, partition)?;
        let removed = self.execute(
            "DELETE FROM owner_webhooks WHERE partition = $1",
            &[&big(partition)],
        )?;
        Ok(removed > 0)
    }

    fn put_subscription_health(
        &mut self,
        partition: u64,
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
                &big(row.partition),
                &&id_bytes(row.record_id)[..],
                &to_json(row)?,
            ],
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
            if row.state != DeliveryState::Pending || row.attempts.saturating_add(1) != number {
                continue;
            }
            row.attempts = number;
            let due = match outcome.settle(row) {
                Settled::Finished(state, at) => {
                    finish(row, state, at);
                    None
                }
                Settled::Due(at, receiver) => {
                    row.next_attempt_at = Some(at);
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

/// `row` finished in `state` at `at`.
fn finish(row: &mut DeliveryRow, state: DeliveryState, at: Timestamp) {
    row.state = state;
    row.next_attempt_at = None;
    row.finished_at = Some(at);
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

    use super::super::{PgStore, PgTx, test_cluster, test_store};
    use crate::core::clock::Timestamp;
    use crate::core::config::{PostgresConfig, PostgresTls, Secret};
    use crate::store::webhooks::{
        AfterAttempt, AttemptOutcome, DueDelivery, WebhooksRead, WebhooksWrite,
    };
    use crate::store::{
        AttemptRow, DeliveryRow, DeliveryState, EventType, Store, StoreGauges, SubscriptionRow,
        WebhookKind, WebhookSecretRow, WebhookSettingsRow,
    };

    /// Two stores on one new database: two nodes of a cluster.
    pub(in crate::store::postgres) fn two_nodes() -> (PgStore, PgStore) {
        let url = test_cluster::shared().database();
        let open = || {
            let config = PostgresConfig {
                url: Secret::new(url.clone()),
                tls: PostgresTls::Disable,
                ..PostgresConfig::default()
            };
            let store = PgStore::open(&config).unwrap();
            // Nodes that may apply batches (see `test_node`).
            crate::store::cluster::ClusterStore::publish_low_water(
                &store,
                crate::core::clock::Timestamp(0),
                crate::core::clock::Timestamp(0),
            )
            .unwrap();
            store
        };
        (open(), open())
    }

    fn delivery(id: u64, partition: u64, record_id: u128) -> DeliveryRow {
        DeliveryRow {
            id,
            partition,
            record_id,
            kind: WebhookKind::Caller,
            subscription: None,
            url: format!("http://hooks.test/{id}"),
            auth_header: None,
            auth_value_sealed: None,
            body: format!("body {id}"),
            sender: None,
            trace: None,
            state: DeliveryState::Pending,
            attempts: 0,
            max_attempts: 3,
            next_attempt_at: Some(Timestamp(10)),
            created_at: Timestamp(1),
            finished_at: None,
            retry_requests: 0,
        }
    }

    fn due(due_at: i64, id: u64) -> DueDelivery {
        DueDelivery {
            due_at: Timestamp(due_at),
            id,
            retry: id % 2 == 0,
            receiver: format!("http://r{id}.test:80"),
        }
    }

    fn attempt(number: u32) -> AttemptRow {
        AttemptRow {
            attempt: number,
            started_at: Timestamp(50),
            duration_us: 7,
            url: "http://hooks.test/".into(),
            request_headers: vec![("x".into(), "y".into())],
            status: Some(500),
            error: None,
            response_body: Some("no".into()),
            outcome: format!("outcome {number}"),
        }
    }

    fn outcome(delivery_id: u64, number: u32, next: AfterAttempt) -> AttemptOutcome {
        AttemptOutcome {
            delivery_id,
            attempt: attempt(number),
            next,
            retry_requests: 0,
        }
    }

    /// Puts pending deliveries and lists each as due at `due_at`.
    fn listed(store: &PgStore, rows: &[(DeliveryRow, i64)]) {
        store
            .write_unit(|tx| {
                for (row, at) in rows {
                    tx.put_delivery(row)?;
                    tx.put_due(&DueDelivery {
                        due_at: Timestamp(*at),
                        ..due(0, row.id)
                    })?;
                }
                Ok(())
            })
            .unwrap();
    }

    fn due_ids(tx: &PgTx<'_>, now: i64, after: Option<(i64, u64)>, limit: usize) -> Vec<u64> {
        tx.due_deliveries(
            Timestamp(now),
            after.map(|(at, id)| (Timestamp(at), id)),
            limit,
        )
        .unwrap()
        .iter()
        .map(|d| d.id)
        .collect()
    }

    #[test]
    fn secrets_and_webhook_settings_are_put_replaced_and_deleted() {
        let store = test_store();
        let secret = |n: u8| WebhookSecretRow {
            current_sealed: vec![n; 4],
            previous_sealed: Some(vec![0, n]),
            created_at: Timestamp(1),
            rotated_at: None,
        };
        let owner = |url: &str| {
            let mut settings = WebhookSettingsRow::default();
            settings.add(SubscriptionRow {
                auth_header: Some("X-Auth".into()),
                auth_value_sealed: Some(vec![9]),
                event_types: vec![EventType::RecordDeleted],
                rate_limit: Some(5),
                ..SubscriptionRow::new(url.into(), Timestamp(2))
            });
            settings
        };
        store
            .write_unit(|tx| {
                tx.put_webhook_secret(2, &secret(1))?;
                tx.put_webhook_secret(2, &secret(2))?;
                tx.put_webhook_secret(3, &secret(3))?;
                tx.put_webhook_settings(2, &owner("http://a.test/"))?;
                tx.put_webhook_settings(2, &owner("http://b.test/"))?;
                // Reads see the transaction's own writes.
                assert_eq!(tx.webhook_secret(2)?.unwrap().current_sealed, vec![2; 4]);
                assert_eq!(tx.webhook_settings(2)?, Some(owner("http://b.test/")));
                Ok(())
            })
            .unwrap();
        let tx = PgTx::read(&store).unwrap();
        let kept = tx.webhook_secret(2).unwrap().unwrap();
        assert_eq!(kept.previous_sealed, Some(vec![0, 2]));
        assert_eq!(
            tx.webhook_secret(3).unwrap().unwrap().current_sealed,
            vec![3; 4]
        );
        assert!(tx.webhook_secret(4).unwrap().is_none());
        let settings = tx.webhook_settings(2).unwrap().unwrap();
        assert_eq!(settings.subscriptions[0].auth_value_sealed, Some(vec![9]));
        assert_eq!(settings.next_subscription_id, 2);
        assert!(tx.webhook_settings(3).unwrap().is_none());
        drop(tx);
        let (gone, _) = store
            .write_unit(|tx| {
                Ok([
                    tx.delete_webhook_secret(2)?,
                    tx.delete_webhook_secret(2)?,
                    tx.delete_webhook_settings(2)?,
                    tx.delete_webhook_settings(3)?,
                ])
            })
            .unwrap();
        assert_eq!(gone, [true, false, true, false]);
        let tx = PgTx::read(&store).unwrap();
        assert!(tx.webhook_secret(2).unwrap().is_none());
        assert!(tx.webhook_secret(3).unwrap().is_some());
        assert!(tx.webhook_settings(2).unwrap().is_none());
    }

    #[test]
    fn deliveries_are_read_by_id_and_paged_newest_first() {
        let store = test_store();
        let rows = [
            delivery(1, 2, 11),
            delivery(2, 2, 11),
            delivery(3, 2, 12),
            delivery(4, 2, 11),
            delivery(5, 2, 12),
            delivery(6, 3, 11),
        ];
        let (_, effects) = store
            .write_unit(|tx| {
                for row in &rows {
                    tx.put_delivery(row)?;
                }
                // Reads see the transaction's own writes.
                assert_eq!(tx.delivery(4)?.unwrap().body, "body 4");
                Ok(())
            })
            .unwrap();
        assert!(!effects.deliveries_due);
        let mut replaced = delivery(4, 2, 11);
        replaced.state = DeliveryState::GivenUp;
        replaced.body = "replaced".into();
        store.write_unit(|tx| tx.put_delivery(&replaced)).unwrap();

        let tx = PgTx::read(&store).unwrap();
        let ids = |rows: Vec<DeliveryRow>| rows.iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(ids(tx.deliveries(&[5, 9, 1, 5]).unwrap()), vec![5, 1, 5]);
        assert!(tx.deliveries(&[]).unwrap().is_empty());
        assert!(tx.delivery(9).unwrap().is_none());
        let four = tx.delivery(4).unwrap().unwrap();
        assert_eq!(
            (four.state, four.body.as_str()),
            (DeliveryState::GivenUp, "replaced")
        );
        assert_eq!(
            ids(tx.delivery_page(2, None, u64::MAX, 10).unwrap()),
            vec![5, 4, 3, 2, 1]
        );
        assert_eq!(ids(tx.delivery_page(2, None, 4, 2).unwrap()), vec![3, 2]);
        assert_eq!(
            ids(tx.delivery_page(2, None, 1, 10).unwrap()),
            Vec::<u64>::new()
        );
        assert_eq!(
            ids(tx.delivery_page(2, Some(11), u64::MAX, 10).unwrap()),
            vec![4, 2, 1]
        );
        assert_eq!(ids(tx.delivery_page(2, Some(11), 2, 10).unwrap()), vec![1]);
        assert_eq!(
            ids(tx.delivery_page(2, Some(12), u64::MAX, 1).unwrap()),
            vec![5]
        );
        assert_eq!(
            ids(tx.delivery_page(3, None, u64::MAX, 0).unwrap()),
            Vec::<u64>::new()
        );
        assert_eq!(
            ids(tx.delivery_page(3, None, u64::MAX, 10).unwrap()),
            vec![6]
        );
        // Only listed deliveries are due.
        assert!(due_ids(&tx, i64::MAX, None, 10).is_empty());
    }

    #[test]
    fn the_due_list_is_in_order_up_to_now_and_wraps_around() {
        let store = test_store();
        let (_, effects) = store
            .write_unit(|tx| {
                for id in 1..=6 {
                    tx.put_delivery(&delivery(id, 2, 1))?;
                }
                for (at, id) in [(50, 5), (20, 3), (10, 1), (30, 4), (20, 2)] {
                    tx.put_due(&due(at, id))?;
                }
                // Reads see the transaction's own writes.
                assert_eq!(due_ids(tx, 30, None, 10), vec![1, 2, 3, 4]);
                Ok(())
            })
            .unwrap();
        assert!(effects.deliveries_due);
        let tx = PgTx::read(&store).unwrap();
        let listed = tx.due_deliveries(Timestamp(30), None, 10).unwrap();
        assert_eq!(listed[1], due(20, 2));
        assert_eq!(listed[2], due(20, 3));
        assert_eq!(due_ids(&tx, 30, None, 2), vec![1, 2]);
        assert_eq!(due_ids(&tx, 9, None, 10), Vec::<u64>::new());
        assert_eq!(due_ids(&tx, 1000, None, 10), vec![1, 2, 3, 4, 5]);
        // Just after `after` up to now, then from the start up to `after` inclusive.
        assert_eq!(due_ids(&tx, 30, Some((20, 2)), 10), vec![3, 4, 1, 2]);
        assert_eq!(due_ids(&tx, 30, Some((20, 2)), 3), vec![3, 4, 1]);
        assert_eq!(due_ids(&tx, 30, Some((20, 2)), 1), vec![3]);
        assert_eq!(due_ids(&tx, 30, Some((30, 4)), 10), vec![1, 2, 3, 4]);
        assert_eq!(due_ids(&tx, 30, Some((5, 0)), 10), vec![1, 2, 3, 4]);
        assert_eq!(due_ids(&tx, 30, Some((15, 9)), 10), vec![2, 3, 4, 1]);
        // `after` past now: from the start.
        assert_eq!(due_ids(&tx, 30, Some((40, 0)), 10), vec![1, 2, 3, 4]);
        assert_eq!(due_ids(&tx, 30, Some((40, 0)), 0), Vec::<u64>::new());
    }

    #[test]
    fn record_outcomes_follows_the_skip_rules() {
        let store = test_store();
        let mut finished = delivery(6, 2, 1);
        finished.state = DeliveryState::Delivered;
        finished.next_attempt_at = None;
        listed(
            &store,
            &[
                (delivery(1, 2, 1), 10),
                (delivery(2, 2, 1), 10),
                (delivery(3, 2, 1), 10),
                (delivery(4, 2, 1), 10),
                (delivery(5, 2, 1), 10),
            ],
        );
        store.write_unit(|tx| tx.put_delivery(&finished)).unwrap();
        let retry = |at, receiver: &str| AfterAttempt::Retry {
            at: Timestamp(at),
            answered_at: Timestamp(at - 30),
            receiver: receiver.into(),
        };
        let (given_up, effects) = store
            .write_unit(|tx| {
                let given_up = tx.record_outcomes(&[
                    outcome(1, 1, AfterAttempt::Delivered { at: Timestamp(100) }),
                    outcome(2, 1, retry(200, "http://b.test:80")),
                    outcome(3, 1, AfterAttempt::GivenUp { at: Timestamp(101) }),
                    // Not the next attempt, not pending, no such delivery.
                    outcome(4, 2, AfterAttempt::Delivered { at: Timestamp(100) }),
                    outcome(6, 1, AfterAttempt::GivenUp { at: Timestamp(100) }),
                    outcome(99, 1, AfterAttempt::GivenUp { at: Timestamp(100) }),
                    // The next attempt of a delivery recorded earlier in the group.
                    outcome(2, 2, retry(300, "http://c.test:80")),
                    outcome(1, 2, AfterAttempt::GivenUp { at: Timestamp(100) }),
                ])?;
                // Reads see the transaction's own writes.
                assert_eq!(tx.delivery(2)?.unwrap().attempts, 2);
                Ok(given_up)
            })
            .unwrap();
        assert!(effects.deliveries_due);
        assert_eq!(given_up.len(), 1);
        assert_eq!(given_up[0].id, 3);
        assert_eq!(given_up[0].state, DeliveryState::GivenUp);
        assert_eq!(given_up[0].finished_at, Some(Timestamp(101)));

        let tx = PgTx::read(&store).unwrap();
        let due = tx.due_deliveries(Timestamp(1000), None, 10).unwrap();
        let positions: Vec<(i64, u64)> = due.iter().map(|d| (d.due_at.0, d.id)).collect();
        assert_eq!(positions, vec![(10, 4), (10, 5), (300, 2)]);
        assert!(due[2].retry);
        assert_eq!(due[2].receiver, "http://c.test:80");
        let row = |id| tx.delivery(id).unwrap().unwrap();
        let one = row(1);
        assert_eq!(one.state, DeliveryState::Delivered);
        assert_eq!((one.attempts, one.next_attempt_at), (1, None));
        assert_eq!(one.finished_at, Some(Timestamp(100)));
        let two = row(2);
        assert_eq!(two.state, DeliveryState::Pending);
        assert_eq!(
            (two.attempts, two.next_attempt_at),
            (2, Some(Timestamp(300)))
        );
        assert_eq!((row(4).attempts, row(4).state), (0, DeliveryState::Pending));
        assert_eq!(row(6).attempts, 0);
        let outcomes = |id| -> Vec<String> {
            let attempts = tx.delivery_attempts(id).unwrap();
            attempts.into_iter().map(|a| a.outcome).collect()
        };
        assert_eq!(outcomes(2), vec!["outcome 1", "outcome 2"]);
        assert_eq!(outcomes(1), vec!["outcome 1"]);
        assert!(outcomes(4).is_empty());
        assert!(outcomes(6).is_empty());
        drop(tx);

        // A group that lists no retry reports nothing due; one skipped entirely writes nothing.
        let (given_up, effects) = store
            .write_unit(|tx| {
                tx.record_outcomes(&[
                    outcome(4, 1, AfterAttempt::GivenUp { at: Timestamp(400) }),
                    outcome(1, 1, AfterAttempt::GivenUp { at: Timestamp(400) }),
                ])
            })
            .unwrap();
        assert!(!effects.deliveries_due);
        assert_eq!(given_up.iter().map(|r| r.id).collect::<Vec<_>>(), vec![4]);
        let (given_up, effects) = store
            .write_unit(|tx| {
                tx.record_outcomes(&[outcome(3, 2, AfterAttempt::GivenUp { at: Timestamp(1) })])
            })
            .unwrap();
        assert!(given_up.is_empty() && !effects.deliveries_due);
        let tx = PgTx::read(&store).unwrap();
        assert_eq!(due_ids(&tx, 1000, None, 10), vec![5, 2]);
        assert_eq!(
            tx.delivery(3).unwrap().unwrap().finished_at,
            Some(Timestamp(101))
        );
    }

    #[test]
    fn two_nodes_recording_one_attempt_apply_it_once() {
        let (one, two) = two_nodes();
        let ids: Vec<u64> = (1..=6).collect();
        let rows: Vec<(DeliveryRow, i64)> =
            ids.iter().map(|id| (delivery(*id, 2, 1), 10)).collect();
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
    fn failure_mails_are_noted_once_per_endpoint_and_day() {
        let store = test_store();
        store
            .write_unit(|tx| {
                tx.insert_failure_mail(4, 100)?;
                assert!(tx.failure_mailed(4, 100)?);
                Ok(())
            })
            .unwrap();
        let tx = PgTx::read(&store).unwrap();
        assert!(tx.failure_mailed(4, 100).unwrap());
        assert!(!tx.failure_mailed(4, 101).unwrap());
        assert!(!tx.failure_mailed(5, 100).unwrap());
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
                (delivery(1, 2, 1), 10),
                (delivery(2, 2, 1), 20),
                (delivery(3, 2, 1), 30),
                (delivery(4, 2, 1), 40),
            ],
        );
        store
            .write_unit(|tx| tx.put_delivery(&delivery(5, 2, 1)))
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
