//! Records: the ingest batch (idempotency, deliveries), pages, scans and purges
//! (`store::records`), and the due list (`store::webhooks`).

use std::ops::{Bound, ControlFlow};
use std::time::Duration;

use crate::core::clock::Timestamp;
use crate::core::ids::RecordId;
use crate::store::records::{
    AppliedBatch, BatchWrite, Change, ChangeKind, DeliveryPlanner, IdempotencyClaim,
    KEYED_HASH_PREFIX, NewDelivery, NewRecord, RecordWrite, ScanOrder, WriteOutcome,
};
use crate::store::{
    DeliveryState, EventType, Partition, Store, StoreError, SubscriptionRow, WebhookKind,
    WebhookSettingsRow, write,
};

/// A delivery to the owner's webhook for every change of a partition that has one.
pub(crate) struct OwnerHooks;

impl DeliveryPlanner for OwnerHooks {
    fn deliveries(
        &self,
        change: &Change<'_>,
        settings: Option<&WebhookSettingsRow>,
    ) -> Result<Vec<NewDelivery>, StoreError> {
        Ok(settings
            .and_then(WebhookSettingsRow::first)
            .map(|owner| NewDelivery {
                kind: WebhookKind::Owner,
                event: match change.kind {
                    ChangeKind::Created => EventType::RecordCreated,
                    ChangeKind::Replaced => EventType::RecordReplaced,
                    ChangeKind::Deleted => EventType::RecordDeleted,
                },
                subscription: Some(owner.id),
                skipped: !owner.enabled,
                url: owner.url.clone(),
                receiver: "http://hooks.test:80".into(),
                auth_header: None,
                auth_value_sealed: None,
                body: format!("{:?} {}", change.kind, change.id.0),
                sender: None,
                trace: None,
                max_attempts: 3,
                created_at: Timestamp(7),
            })
            .into_iter()
            .collect())
    }
}

/// A record id created at `micros`.
pub(crate) fn rid(micros: i64, n: u64) -> RecordId {
    RecordId(((micros as u128) << 64) | u128::from(n))
}

pub(crate) fn create(partition: Partition, id: RecordId, payload: &str) -> RecordWrite {
    RecordWrite::Create {
        partition,
        records: vec![NewRecord {
            id,
            payload: payload.as_bytes().to_vec(),
        }],
        idempotency: None,
    }
}

pub(crate) fn create_keyed(
    partition: Partition,
    id: RecordId,
    key: &str,
    hash: &str,
) -> RecordWrite {
    RecordWrite::Create {
        partition,
        records: vec![NewRecord {
            id,
            payload: format!("{{\"hash\":\"{hash}\"}}").into_bytes(),
        }],
        idempotency: Some(IdempotencyClaim {
            key: key.into(),
            payload_hash: format!("{KEYED_HASH_PREFIX}{hash}"),
            legacy_payload_hash: format!("plain {hash}"),
            ttl: Duration::from_micros(10),
        }),
    }
}

pub(crate) fn replace(
    partition: Partition,
    id: RecordId,
    updated_at: i64,
    payload: &str,
) -> RecordWrite {
    RecordWrite::Replace {
        partition,
        id,
        updated_at: Timestamp(updated_at),
        payload: payload.as_bytes().to_vec(),
    }
}

pub(crate) fn delete(partition: Partition, id: RecordId) -> RecordWrite {
    RecordWrite::Delete {
        partition,
        id,
        at: id.created_at(),
    }
}

pub(crate) fn apply(store: &dyn Store, writes: &[RecordWrite]) -> AppliedBatch {
    apply_planned(store, writes, &OwnerHooks)
}

/// Applies `writes` in one batch, with the deliveries `webhooks` plans for them.
pub(crate) fn apply_planned(
    store: &dyn Store,
    writes: &[RecordWrite],
    webhooks: &dyn DeliveryPlanner,
) -> AppliedBatch {
    let batch: Vec<BatchWrite<'_>> = writes
        .iter()
        .map(|write| BatchWrite { write, webhooks })
        .collect();
    store.apply_batch(&batch).unwrap()
}

/// The ids of the records of `partition`, oldest first.
pub(crate) fn ids(store: &dyn Store, partition: Partition) -> Vec<u128> {
    let mut ids = Vec::new();
    let tx = store.read().unwrap();
    let bounds = (Bound::Unbounded, Bound::Unbounded);
    tx.record_page(
        partition,
        bounds,
        ScanOrder::OldestFirst,
        10_000,
        &mut |r| {
            ids.push(r.id.0);
            Ok(())
        },
    )
    .unwrap();
    ids
}

pub(crate) fn payload(
    store: &dyn Store,
    partition: Partition,
    id: RecordId,
) -> Option<(i64, String)> {
    let tx = store.read().unwrap();
    tx.record(partition, id)
        .unwrap()
        .map(|r| (r.updated_at.0, String::from_utf8(r.payload).unwrap()))
}

pub fn a_batch_applies_its_writes_in_order_seeing_its_own(store: &dyn Store) {
    let (a, b, c, d, e, f) = (
        rid(1000, 1),
        rid(1001, 2),
        rid(1002, 3),
        rid(1003, 4),
        rid(1004, 5),
        rid(1005, 6),
    );
    let applied = apply(
        store,
        &[
            create(Partition::from_raw(2), a, r#"{"a":1}"#),
            replace(Partition::from_raw(2), a, 2000, r#"{"a":2}"#),
            create(Partition::from_raw(2), b, r#"{"b":1}"#),
            delete(Partition::from_raw(2), b),
            replace(Partition::from_raw(2), c, 2000, r#"{"c":1}"#),
            delete(Partition::from_raw(2), c),
            delete(Partition::from_raw(2), b),
            create_keyed(Partition::from_raw(2), d, "k1", "h1"),
            create_keyed(Partition::from_raw(2), e, "k1", "h1"),
            create_keyed(Partition::from_raw(2), f, "k1", "h2"),
            create_keyed(Partition::from_raw(3), f, "k1", "h2"),
        ],
    );
    assert_eq!(
        applied.outcomes,
        vec![
            WriteOutcome::Created { ids: vec![a] },
            WriteOutcome::Replaced,
            WriteOutcome::Created { ids: vec![b] },
            WriteOutcome::Deleted,
            WriteOutcome::NotFound,
            WriteOutcome::NotFound,
            WriteOutcome::NotFound,
            WriteOutcome::Created { ids: vec![d] },
            WriteOutcome::Replayed { ids: vec![d] },
            WriteOutcome::IdempotencyConflict,
            // The same key in another partition is another claim.
            WriteOutcome::Created { ids: vec![f] },
        ]
    );
    assert!(!applied.effects.deliveries_due);
    assert_eq!(ids(store, Partition::from_raw(2)), vec![a.0, d.0]);
    assert_eq!(ids(store, Partition::from_raw(3)), vec![f.0]);
    assert_eq!(
        payload(store, Partition::from_raw(2), a),
        Some((2000, r#"{"a":2}"#.into()))
    );
    assert_eq!(
        payload(store, Partition::from_raw(2), d),
        Some((1003, r#"{"hash":"h1"}"#.into()))
    );

    // A later batch reads what the first committed.
    let g = rid(1006, 7);
    let applied = apply(
        store,
        &[
            create_keyed(Partition::from_raw(2), g, "k1", "h1"),
            create_keyed(Partition::from_raw(2), g, "k1", "h2"),
            replace(Partition::from_raw(2), d, 3000, r#"{"d":2}"#),
            delete(Partition::from_raw(2), a),
            replace(Partition::from_raw(2), a, 3000, r#"{"a":3}"#),
            create(Partition::from_raw(2), b, r#"{"b":2}"#),
        ],
    );
    assert_eq!(
        applied.outcomes,
        vec![
            WriteOutcome::Replayed { ids: vec![d] },
            WriteOutcome::IdempotencyConflict,
            WriteOutcome::Replaced,
            WriteOutcome::Deleted,
            WriteOutcome::NotFound,
            WriteOutcome::Created { ids: vec![b] },
        ]
    );
    assert_eq!(ids(store, Partition::from_raw(2)), vec![b.0, d.0]);
    assert_eq!(
        payload(store, Partition::from_raw(2), d),
        Some((3000, r#"{"d":2}"#.into()))
    );
    assert_eq!(payload(store, Partition::from_raw(2), a), None);
    // A batch of refusals and replays only writes nothing and still answers.
    let applied = apply(
        store,
        &[
            delete(Partition::from_raw(2), a),
            create_keyed(Partition::from_raw(2), g, "k1", "h1"),
        ],
    );
    assert_eq!(applied.outcomes.len(), 2);
    assert!(store.apply_batch(&[]).unwrap().outcomes.is_empty());
}

pub fn an_expired_claim_is_forgotten_and_replaced(store: &dyn Store) {
    let (first, second, third) = (rid(1000, 1), rid(1009, 2), rid(1010, 3));
    apply(
        store,
        &[create_keyed(Partition::from_raw(2), first, "k", "h")],
    );
    // The TTL is 10µs: still held at 1009, forgotten at 1010.
    let applied = apply(
        store,
        &[
            create_keyed(Partition::from_raw(2), second, "k", "other"),
            create_keyed(Partition::from_raw(2), second, "k", "h"),
            create_keyed(Partition::from_raw(2), third, "k", "other"),
            create_keyed(Partition::from_raw(2), rid(1015, 4), "k", "other"),
        ],
    );
    assert_eq!(
        applied.outcomes,
        vec![
            WriteOutcome::IdempotencyConflict,
            WriteOutcome::Replayed { ids: vec![first] },
            WriteOutcome::Created { ids: vec![third] },
            WriteOutcome::Replayed { ids: vec![third] },
        ]
    );
    let applied = apply(
        store,
        &[create_keyed(
            Partition::from_raw(2),
            rid(1016, 5),
            "k",
            "other",
        )],
    );
    assert_eq!(
        applied.outcomes,
        vec![WriteOutcome::Replayed { ids: vec![third] }]
    );
    assert_eq!(ids(store, Partition::from_raw(2)), vec![first.0, third.0]);
}

pub fn applied_writes_get_their_deliveries_in_the_commit(store: &dyn Store) {
    let settings = |enabled| {
        let mut settings = WebhookSettingsRow::default();
        settings.add(SubscriptionRow {
            enabled,
            ..SubscriptionRow::new("http://hooks.test/in".into(), Timestamp(1))
        });
        settings
    };
    write(store, |tx| -> Result<(), StoreError> {
        tx.put_webhook_settings(Partition::from_raw(3), &settings(true))?;
        tx.put_webhook_settings(Partition::from_raw(5), &settings(false))
    })
    .unwrap();
    let (a, b) = (rid(1000, 1), rid(1001, 2));
    let applied = apply(
        store,
        &[
            create(Partition::from_raw(3), a, "{}"),
            replace(Partition::from_raw(3), a, 2000, "{\"x\":1}"),
            delete(Partition::from_raw(3), b),
            create(Partition::from_raw(4), b, "{}"),
            create_keyed(Partition::from_raw(3), b, "k", "h"),
            create_keyed(Partition::from_raw(3), rid(1002, 3), "k", "h"),
            delete(Partition::from_raw(3), a),
        ],
    );
    assert!(applied.effects.deliveries_due);
    let tx = store.read().unwrap();
    let due = tx.due_deliveries(Timestamp(7), None, 100).unwrap();
    assert_eq!(due.len(), 4);
    assert!(due.windows(2).all(|w| w[0].id < w[1].id));
    assert!(
        due.iter()
            .all(|d| d.due_at == Timestamp(7) && !d.retry && d.receiver == "http://hooks.test:80")
    );
    let ids: Vec<u64> = due.iter().map(|d| d.id).collect();
    let rows = tx.deliveries(&ids).unwrap();
    let bodies: Vec<String> = rows.iter().map(|r| r.body.clone()).collect();
    assert_eq!(
        bodies,
        vec![
            format!("Created {}", a.0),
            format!("Replaced {}", a.0),
            format!("Created {}", b.0),
            format!("Deleted {}", a.0),
        ]
    );
    for (row, id) in rows.iter().zip(&ids) {
        assert_eq!(row.id, *id);
        assert_eq!(row.partition, Partition::from_raw(3));
        assert_eq!(row.state, DeliveryState::Pending);
        assert_eq!(row.next_attempt_at, Some(Timestamp(7)));
        assert_eq!(row.url, "http://hooks.test/in");
    }
    assert_eq!(
        tx.delivery_page(Partition::from_raw(3), Some(a.0), u64::MAX, 10)
            .unwrap()
            .len(),
        3
    );
    drop(tx);
    // Changes of a partition without a webhook make none.
    let applied = apply(store, &[create(Partition::from_raw(4), rid(1003, 4), "{}")]);
    assert!(!applied.effects.deliveries_due);
    // A disabled subscription's delivery is written skipped, and is not due.
    apply(store, &[create(Partition::from_raw(5), rid(1004, 5), "{}")]);
    let tx = store.read().unwrap();
    let skipped = tx
        .delivery_page(Partition::from_raw(5), None, u64::MAX, 10)
        .unwrap();
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].state, DeliveryState::Skipped);
    assert_eq!(skipped[0].subscription, Some(1));
    assert_eq!(skipped[0].next_attempt_at, None);
    let due = tx.due_deliveries(Timestamp(7), None, 100).unwrap();
    assert!(due.iter().all(|d| d.id != skipped[0].id));
}

/// A create of several records (a batch request), with one Idempotency-Key.
fn create_many(partition: Partition, ids: &[RecordId], key: &str, hash: &str) -> RecordWrite {
    RecordWrite::Create {
        partition,
        records: ids
            .iter()
            .enumerate()
            .map(|(n, id)| NewRecord {
                id: *id,
                payload: format!("{{\"n\":{n}}}").into_bytes(),
            })
            .collect(),
        idempotency: Some(IdempotencyClaim {
            key: key.into(),
            payload_hash: format!("{KEYED_HASH_PREFIX}{hash}"),
            legacy_payload_hash: format!("plain {hash}"),
            ttl: Duration::from_secs(60),
        }),
    }
}

pub fn a_create_of_many_records_stores_them_all_under_one_claim(store: &dyn Store) {
    let partition = Partition::from_raw(7);
    let mut settings = WebhookSettingsRow::default();
    settings.add(SubscriptionRow::new(
        "http://hooks.test/in".into(),
        Timestamp(1),
    ));
    write(store, |tx| tx.put_webhook_settings(partition, &settings)).unwrap();
    let batch = [rid(3000, 1), rid(3000, 2), rid(3000, 3)];
    let retried = [rid(3001, 1), rid(3001, 2), rid(3001, 3)];
    let applied = apply(
        store,
        &[
            create(partition, rid(2999, 9), "{}"),
            create_many(partition, &batch, "kb", "hb"),
            // A retry in the same commit, and one with other payloads: nothing of either.
            create_many(partition, &retried, "kb", "hb"),
            create_many(partition, &retried, "kb", "other"),
            // The key of a single create answers it whole, and is answered whole.
            create_keyed(partition, rid(3002, 1), "kb", "hb"),
        ],
    );
    assert_eq!(
        applied.outcomes,
        vec![
            WriteOutcome::Created {
                ids: vec![rid(2999, 9)]
            },
            WriteOutcome::Created {
                ids: batch.to_vec()
            },
            WriteOutcome::Replayed {
                ids: batch.to_vec()
            },
            WriteOutcome::IdempotencyConflict,
            WriteOutcome::Replayed {
                ids: batch.to_vec()
            },
        ]
    );
    let mut stored = vec![rid(2999, 9).0];
    stored.extend(batch.iter().map(|id| id.0));
    assert_eq!(ids(store, partition), stored);
    for (n, id) in batch.iter().enumerate() {
        assert_eq!(
            payload(store, partition, *id),
            Some((3000, format!("{{\"n\":{n}}}")))
        );
    }
    // One delivery and one event per record, in the order sent.
    let tx = store.read().unwrap();
    let due = tx.due_deliveries(Timestamp(7), None, 100).unwrap();
    let rows = tx
        .deliveries(&due.iter().map(|d| d.id).collect::<Vec<_>>())
        .unwrap();
    let bodies: Vec<String> = rows.iter().map(|r| r.body.clone()).collect();
    let expected: Vec<String> = stored.iter().map(|id| format!("Created {id}")).collect();
    assert_eq!(bodies, expected);
    drop(tx);
    // A shared store hands out only settled events: those of transactions older than every
    // one still running anywhere on the database server (the other tests' included).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let evented = loop {
        let events = store.events_after(partition, 0, 100, usize::MAX).unwrap();
        let evented: Vec<u128> = events.events.iter().map(|e| e.record_id.0).collect();
        if evented.len() >= stored.len() || std::time::Instant::now() > deadline {
            break evented;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(evented, stored);
    // Another key: a new batch goes ahead.
    let later = [rid(4000, 1), rid(4000, 2)];
    let applied = apply(store, &[create_many(partition, &later, "kc", "hb")]);
    assert_eq!(
        applied.outcomes,
        vec![WriteOutcome::Created {
            ids: later.to_vec()
        }]
    );
}

pub fn record_page_keeps_its_bounds_order_and_more(store: &dyn Store) {
    let mut writes: Vec<RecordWrite> = (1..=10)
        .map(|n| create(Partition::from_raw(2), RecordId(n), "{}"))
        .collect();
    writes.push(create(Partition::from_raw(3), RecordId(5), "{}"));
    writes.push(create(Partition::from_raw(1), RecordId(5), "{}"));
    apply(store, &writes);
    let tx = store.read().unwrap();
    let page = |lower, upper, order, limit| {
        let mut ids = Vec::new();
        let more = tx
            .record_page(
                Partition::from_raw(2),
                (lower, upper),
                order,
                limit,
                &mut |r| {
                    ids.push(r.id.0);
                    assert_eq!(r.payload, b"{}");
                    Ok(())
                },
            )
            .unwrap();
        (ids, more)
    };
    use Bound::{Excluded, Included, Unbounded};
    use ScanOrder::{NewestFirst, OldestFirst};
    assert_eq!(
        page(Unbounded, Unbounded, OldestFirst, 100),
        ((1..=10).collect(), false)
    );
    assert_eq!(
        page(Included(3), Excluded(7), OldestFirst, 10),
        (vec![3, 4, 5, 6], false)
    );
    assert_eq!(
        page(Excluded(3), Included(7), NewestFirst, 2),
        (vec![7, 6], true)
    );
    assert_eq!(
        page(Unbounded, Unbounded, NewestFirst, 3),
        (vec![10, 9, 8], true)
    );
    assert_eq!(
        page(Included(9), Unbounded, OldestFirst, 2),
        (vec![9, 10], false)
    );
    assert_eq!(page(Unbounded, Unbounded, OldestFirst, 0), (vec![], true));
    assert_eq!(
        page(Excluded(u128::MAX), Unbounded, OldestFirst, 5),
        (vec![], false)
    );
    assert_eq!(
        page(Unbounded, Excluded(0), NewestFirst, 5),
        (vec![], false)
    );
    assert_eq!(
        page(Included(8), Included(2), OldestFirst, 5),
        (vec![], false)
    );
    // A visitor's error ends the page.
    let err = tx.record_page(
        Partition::from_raw(2),
        (Unbounded, Unbounded),
        OldestFirst,
        5,
        &mut |_| Err(StoreError::Corrupt("stop".into())),
    );
    assert!(matches!(err, Err(StoreError::Corrupt(_))));
}

pub fn record_partitions_are_listed_once_in_order(store: &dyn Store) {
    assert!(
        store
            .read()
            .unwrap()
            .record_partitions()
            .unwrap()
            .is_empty()
    );
    apply(
        store,
        &[
            create(Partition::from_raw(7), RecordId(1), "{}"),
            create(Partition::from_raw(2), RecordId(1), "{}"),
            create(Partition::from_raw(2), RecordId(2), "{}"),
            create(Partition::from_raw(1 << 40), RecordId(1), "{}"),
            create(Partition::from_raw(5), RecordId(3), "{}"),
        ],
    );
    let tx = store.read().unwrap();
    assert_eq!(
        tx.record_partitions().unwrap(),
        [2, 5, 7, 1 << 40].map(Partition::from_raw)
    );
}

pub fn visit_newest_first_reads_in_chunks_until_the_visitor_stops(store: &dyn Store) {
    let mut writes: Vec<RecordWrite> = (0..=600)
        .map(|n| {
            create(
                Partition::from_raw(2),
                RecordId(n),
                &format!("{{\"n\":{n}}}"),
            )
        })
        .collect();
    writes.push(create(Partition::from_raw(3), RecordId(300), "{}"));
    apply(store, &writes);
    let tx = store.read().unwrap();
    let visit = |lower, upper, stop_after: usize| {
        let mut seen = Vec::new();
        tx.visit_newest_first(
            Partition::from_raw(2),
            lower,
            upper,
            &mut |id, updated_at, payload| {
                assert_eq!(updated_at, Timestamp(0));
                assert_eq!(payload, format!("{{\"n\":{id}}}").as_bytes());
                seen.push(id);
                if seen.len() == stop_after {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            },
        )
        .unwrap();
        seen
    };
    assert_eq!(
        visit(50, 550, usize::MAX),
        (50..=550).rev().collect::<Vec<_>>()
    );
    assert_eq!(visit(50, 550, 300), (251..=550).rev().collect::<Vec<_>>());
    assert_eq!(visit(0, 3, usize::MAX), vec![3, 2, 1, 0]);
    assert_eq!(visit(0, u128::MAX, usize::MAX).len(), 601);
    assert!(visit(700, 800, usize::MAX).is_empty());
    assert!(visit(9, 8, usize::MAX).is_empty());
}

pub fn visit_records_follows_the_given_order_until_the_visitor_stops(store: &dyn Store) {
    apply(
        store,
        &[
            create(Partition::from_raw(2), RecordId(1), "{\"n\":1}"),
            create(Partition::from_raw(2), RecordId(2), "{\"n\":2}"),
            create(Partition::from_raw(2), RecordId(3), "{\"n\":3}"),
            create(Partition::from_raw(2), RecordId(4), "{\"n\":4}"),
            create(Partition::from_raw(3), RecordId(5), "{\"n\":5}"),
        ],
    );
    let tx = store.read().unwrap();
    let visit = |ids: &[u128], stop_after: usize| {
        let mut seen = Vec::new();
        tx.visit_records(Partition::from_raw(2), ids, &mut |id, _, payload| {
            assert_eq!(payload, format!("{{\"n\":{id}}}").as_bytes());
            seen.push(id);
            if seen.len() == stop_after {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
        seen
    };
    assert_eq!(visit(&[3, 99, 1, 3, 5, 2], usize::MAX), vec![3, 1, 3, 2]);
    assert_eq!(visit(&[3, 99, 1, 3, 2], 2), vec![3, 1]);
    // Past the first chunk of ids.
    let mut many: Vec<u128> = (1000..1300).collect();
    many.extend([4, 1]);
    assert_eq!(visit(&many, usize::MAX), vec![4, 1]);
    assert!(visit(&[], usize::MAX).is_empty());
}

pub fn purge_partition_before_takes_the_oldest_first_within_its_bounds(store: &dyn Store) {
    let (purged, other) = (Partition::from_raw(2), Partition::from_raw(3));
    let mut writes: Vec<RecordWrite> = (1..=10)
        .map(|n| create(purged, RecordId(n), "{}"))
        .collect();
    writes.extend((1..=3).map(|n| create(other, RecordId(n), "{}")));
    apply(store, &writes);
    // At most `limit` of the records below id 6, oldest first.
    let purge = |limit| store.purge_partition_before(purged, 6, limit).unwrap();
    assert_eq!(purge(0), 0);
    assert_eq!(purge(3), 3);
    assert_eq!(ids(store, purged), (4..=10).collect::<Vec<_>>());
    assert_eq!(purge(10), 2);
    assert_eq!(purge(10), 0);
    assert_eq!(ids(store, purged), (6..=10).collect::<Vec<_>>());
    assert_eq!(ids(store, other), vec![1, 2, 3]);
}
