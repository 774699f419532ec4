//! Erasures (`store::erasures`): their rows, and an erasure's step in the ingest batch
//! (`records::RecordWrite::Erase`).

use super::records::{apply, create, ids, rid};
use crate::core::clock::Timestamp;
use crate::core::ids::RecordId;
use crate::store::records::{RecordWrite, WriteOutcome};
use crate::store::{
    DeliveryState, Partition, Store, StoreError, SubscriptionRow, WebhookSettingsRow, write,
};

/// An erasure's row, running, to count steps on.
pub fn erasure(id: u64, partition: Partition) -> crate::store::ErasureRow {
    crate::store::ErasureRow {
        id,
        partition,
        query_hash: "h".into(),
        query_sealed: None,
        lower: 0,
        upper: u128::MAX - 1,
        notify: true,
        state: crate::store::ErasureState::Running,
        step: crate::store::ErasureStep::Erasing,
        matched: 2,
        erased: 0,
        erased_ids: None,
        resume_below: u128::MAX,
        created_at: Timestamp(5),
        finished_at: None,
        created_by: 1,
        error: None,
    }
}

pub fn an_erasure_step_removes_its_records_and_their_delivery_bodies(store: &dyn Store) {
    let (p, other) = (Partition::from_raw(3), Partition::from_raw(4));
    write(store, |tx| -> Result<(), StoreError> {
        let mut settings = WebhookSettingsRow::default();
        settings.add(SubscriptionRow::new(
            "http://hooks.test/in".into(),
            Timestamp(1),
        ));
        tx.put_webhook_settings(p, &settings)?;
        tx.put_erasure(&erasure(1, p))
    })
    .unwrap();
    let (a, b, kept) = (rid(1000, 1), rid(1001, 2), rid(1002, 3));
    apply(
        store,
        &[
            create(p, a, "{\"m\":1}"),
            create(p, b, "{\"m\":2}"),
            create(p, kept, "{}"),
            create(other, a, "{\"m\":1}"),
        ],
    );
    // The first delivery of `a` was attempted and answered; `b`'s waits.
    let first = store
        .read()
        .unwrap()
        .delivery_page(p, Some(a.0), u64::MAX, 10)
        .unwrap()[0]
        .id;
    write(store, |tx| -> Result<(), StoreError> {
        tx.record_outcomes(&[crate::store::webhooks::AttemptOutcome {
            delivery_id: first,
            attempt: crate::store::AttemptRow {
                attempt: 1,
                started_at: Timestamp(8),
                duration_us: 1,
                url: "http://hooks.test/in".into(),
                request_headers: Vec::new(),
                status: Some(200),
                error: None,
                response_body: Some("echo m 1".into()),
                outcome: "delivered".into(),
            },
            next: crate::store::webhooks::AfterAttempt::Delivered { at: Timestamp(9) },
            retry_requests: 0,
        }])?;
        Ok(())
    })
    .unwrap();
    let step = |ids: Vec<RecordId>, notify, resume_below| RecordWrite::Erase {
        partition: p,
        ids,
        at: Timestamp(50),
        notify,
        erasure: 1,
        resume_below,
    };
    // `b` twice: the second time it is gone, and counts nothing.
    let applied = apply(
        store,
        &[
            step(vec![b, a, rid(999, 9)], true, 77),
            step(vec![b], false, 66),
        ],
    );
    assert_eq!(
        applied.outcomes,
        vec![
            WriteOutcome::Erased { count: 2 },
            WriteOutcome::Erased { count: 0 }
        ]
    );
    assert_eq!(applied.effects.records_erased, vec![p]);
    assert!(applied.effects.records_changed.contains(&p));
    assert_eq!(ids(store, p), vec![kept.0]);
    assert_eq!(ids(store, other), vec![a.0]);
    let tx = store.read().unwrap();
    let row = tx.erasure(1).unwrap().unwrap();
    assert_eq!((row.erased, row.resume_below), (2, 66));
    assert_eq!(row.erased_ids, Some((a.0, b.0)));
    for id in [a, b] {
        let deliveries = tx.delivery_page(p, Some(id.0), u64::MAX, 10).unwrap();
        // The create's delivery, erased, and the erasure's notifying delete, made after.
        assert_eq!(deliveries.len(), 2, "{deliveries:?}");
        let (deleted, created) = (&deliveries[0], &deliveries[1]);
        assert!(created.erased && created.body.is_empty(), "{created:?}");
        assert_eq!(deleted.body, format!("Deleted {}", id.0));
        assert!(!deleted.erased);
        assert_eq!(deleted.state, DeliveryState::Pending);
        for attempt in tx.delivery_attempts(created.id).unwrap() {
            assert_eq!(attempt.response_body, None);
            assert_eq!(attempt.status, Some(200));
        }
    }
    // Delivered stays delivered; pending is given up and no longer due.
    let created_a = &tx.delivery_page(p, Some(a.0), u64::MAX, 10).unwrap()[1];
    assert_eq!(created_a.state, DeliveryState::Delivered);
    let created_b = &tx.delivery_page(p, Some(b.0), u64::MAX, 10).unwrap()[1];
    assert_eq!(created_b.state, DeliveryState::GivenUp);
    assert_eq!(created_b.finished_at, Some(Timestamp(50)));
    let due: Vec<u64> = tx
        .due_deliveries(Timestamp(100), None, 100)
        .unwrap()
        .iter()
        .map(|d| d.id)
        .collect();
    assert!(!due.contains(&created_b.id));
    // The kept record's delivery is untouched.
    let kept_delivery = &tx.delivery_page(p, Some(kept.0), u64::MAX, 10).unwrap()[0];
    assert!(!kept_delivery.erased && kept_delivery.body == format!("Created {}", kept.0));
    assert_eq!(tx.running_erasures().unwrap().len(), 1);
    assert_eq!(tx.erasures_to_follow(1).unwrap().len(), 1, "running");
    drop(tx);
    let mut done = erasure(1, p);
    done.state = crate::store::ErasureState::Finished;
    write(store, |tx| -> Result<(), StoreError> {
        tx.put_erasure(&done)?;
        tx.put_erasure(&erasure(2, other))
    })
    .unwrap();
    let tx = store.read().unwrap();
    let follow = |after| -> Vec<u64> {
        tx.erasures_to_follow(after)
            .unwrap()
            .iter()
            .map(|row| row.id)
            .collect()
    };
    assert_eq!(
        (follow(0), follow(1), follow(2)),
        (vec![1, 2], vec![2], vec![2])
    );
    assert_eq!(tx.running_erasures().unwrap().len(), 1);
    assert_eq!(tx.endpoint_erasures(p.endpoint()).unwrap().len(), 1);
    assert_eq!(tx.endpoint_erasures(other.endpoint()).unwrap().len(), 1);
    assert_eq!(tx.erasures_since(Timestamp(6)).unwrap().len(), 0);
}
