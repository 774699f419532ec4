//! Signing secrets, the owner's settings, deliveries, the due list, attempt outcomes and
//! failure mails (`store::webhooks`).

use crate::core::clock::Timestamp;
use crate::store::webhooks::{AfterAttempt, AttemptOutcome, DueDelivery, WebhooksRead};
use crate::store::{
    AttemptRow, DeliveryRow, DeliveryState, EventType, Partition, Store, StoreError,
    SubscriptionRow, WebhookKind, WebhookSecretRow, WebhookSettingsRow, write,
};

/// A pending caller delivery of `partition`'s record `record_id`, due at 10.
pub(crate) fn delivery(id: u64, partition: Partition, record_id: u128) -> DeliveryRow {
    DeliveryRow {
        id,
        partition,
        record_id,
        kind: WebhookKind::Caller,
        event: None,
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
        erased: false,
        test: false,
    }
}

pub(crate) fn due(due_at: i64, id: u64) -> DueDelivery {
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

/// Attempt `number` of delivery `delivery_id`, which leads to `next`.
pub(crate) fn outcome(delivery_id: u64, number: u32, next: AfterAttempt) -> AttemptOutcome {
    AttemptOutcome {
        delivery_id,
        attempt: attempt(number),
        next,
        retry_requests: 0,
    }
}

/// Puts pending deliveries and lists each as due at its time.
pub(crate) fn listed(store: &dyn Store, rows: &[(DeliveryRow, i64)]) {
    write(store, |tx| -> Result<(), StoreError> {
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

/// The ids of the due list up to `now`, from just after `after`.
pub(crate) fn due_ids(
    tx: &dyn WebhooksRead,
    now: i64,
    after: Option<(i64, u64)>,
    limit: usize,
) -> Vec<u64> {
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

pub fn secrets_and_webhook_settings_are_put_replaced_and_deleted(store: &dyn Store) {
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
    write(store, |tx| -> Result<(), StoreError> {
        tx.put_webhook_secret(Partition::from_raw(2), &secret(1))?;
        tx.put_webhook_secret(Partition::from_raw(2), &secret(2))?;
        tx.put_webhook_secret(Partition::from_raw(3), &secret(3))?;
        tx.put_webhook_settings(Partition::from_raw(2), &owner("http://a.test/"))?;
        tx.put_webhook_settings(Partition::from_raw(2), &owner("http://b.test/"))?;
        // Reads see the transaction's own writes.
        assert_eq!(
            tx.webhook_secret(Partition::from_raw(2))?
                .unwrap()
                .current_sealed,
            vec![2; 4]
        );
        assert_eq!(
            tx.webhook_settings(Partition::from_raw(2))?,
            Some(owner("http://b.test/"))
        );
        Ok(())
    })
    .unwrap();
    let tx = store.read().unwrap();
    let kept = tx.webhook_secret(Partition::from_raw(2)).unwrap().unwrap();
    assert_eq!(kept.previous_sealed, Some(vec![0, 2]));
    assert_eq!(
        tx.webhook_secret(Partition::from_raw(3))
            .unwrap()
            .unwrap()
            .current_sealed,
        vec![3; 4]
    );
    assert!(tx.webhook_secret(Partition::from_raw(4)).unwrap().is_none());
    let settings = tx
        .webhook_settings(Partition::from_raw(2))
        .unwrap()
        .unwrap();
    assert_eq!(settings.subscriptions[0].auth_value_sealed, Some(vec![9]));
    assert_eq!(settings.next_subscription_id, 2);
    assert!(
        tx.webhook_settings(Partition::from_raw(3))
            .unwrap()
            .is_none()
    );
    drop(tx);
    let (gone, _) = write(store, |tx| -> Result<_, StoreError> {
        Ok([
            tx.delete_webhook_secret(Partition::from_raw(2))?,
            tx.delete_webhook_secret(Partition::from_raw(2))?,
            tx.delete_webhook_settings(Partition::from_raw(2))?,
            tx.delete_webhook_settings(Partition::from_raw(3))?,
        ])
    })
    .unwrap();
    assert_eq!(gone, [true, false, true, false]);
    let tx = store.read().unwrap();
    assert!(tx.webhook_secret(Partition::from_raw(2)).unwrap().is_none());
    assert!(tx.webhook_secret(Partition::from_raw(3)).unwrap().is_some());
    assert!(
        tx.webhook_settings(Partition::from_raw(2))
            .unwrap()
            .is_none()
    );
}

pub fn deliveries_are_read_by_id_and_paged_newest_first(store: &dyn Store) {
    let rows = [
        delivery(1, Partition::from_raw(2), 11),
        delivery(2, Partition::from_raw(2), 11),
        delivery(3, Partition::from_raw(2), 12),
        delivery(4, Partition::from_raw(2), 11),
        delivery(5, Partition::from_raw(2), 12),
        delivery(6, Partition::from_raw(3), 11),
    ];
    let (_, effects) = write(store, |tx| -> Result<(), StoreError> {
        for row in &rows {
            tx.put_delivery(row)?;
        }
        // Reads see the transaction's own writes.
        assert_eq!(tx.delivery(4)?.unwrap().body, "body 4");
        Ok(())
    })
    .unwrap();
    assert!(!effects.deliveries_due);
    let mut replaced = delivery(4, Partition::from_raw(2), 11);
    replaced.state = DeliveryState::GivenUp;
    replaced.body = "replaced".into();
    write(store, |tx| tx.put_delivery(&replaced)).unwrap();

    let tx = store.read().unwrap();
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
        ids(tx
            .delivery_page(Partition::from_raw(2), None, u64::MAX, 10)
            .unwrap()),
        vec![5, 4, 3, 2, 1]
    );
    assert_eq!(
        ids(tx
            .delivery_page(Partition::from_raw(2), None, 4, 2)
            .unwrap()),
        vec![3, 2]
    );
    assert_eq!(
        ids(tx
            .delivery_page(Partition::from_raw(2), None, 1, 10)
            .unwrap()),
        Vec::<u64>::new()
    );
    assert_eq!(
        ids(tx
            .delivery_page(Partition::from_raw(2), Some(11), u64::MAX, 10)
            .unwrap()),
        vec![4, 2, 1]
    );
    assert_eq!(
        ids(tx
            .delivery_page(Partition::from_raw(2), Some(11), 2, 10)
            .unwrap()),
        vec![1]
    );
    assert_eq!(
        ids(tx
            .delivery_page(Partition::from_raw(2), Some(12), u64::MAX, 1)
            .unwrap()),
        vec![5]
    );
    assert_eq!(
        ids(tx
            .delivery_page(Partition::from_raw(3), None, u64::MAX, 0)
            .unwrap()),
        Vec::<u64>::new()
    );
    assert_eq!(
        ids(tx
            .delivery_page(Partition::from_raw(3), None, u64::MAX, 10)
            .unwrap()),
        vec![6]
    );
    // Only listed deliveries are due.
    assert!(due_ids(&*tx, i64::MAX, None, 10).is_empty());
}

pub fn the_due_list_is_in_order_up_to_now_and_wraps_around(store: &dyn Store) {
    let (_, effects) = write(store, |tx| -> Result<(), StoreError> {
        for id in 1..=6 {
            tx.put_delivery(&delivery(id, Partition::from_raw(2), 1))?;
        }
        for (at, id) in [(50, 5), (20, 3), (10, 1), (30, 4), (20, 2)] {
            tx.put_due(&due(at, id))?;
        }
        // Reads see the transaction's own writes.
        assert_eq!(due_ids(&*tx, 30, None, 10), vec![1, 2, 3, 4]);
        Ok(())
    })
    .unwrap();
    assert!(effects.deliveries_due);
    let tx = store.read().unwrap();
    let listed = tx.due_deliveries(Timestamp(30), None, 10).unwrap();
    assert_eq!(listed[1], due(20, 2));
    assert_eq!(listed[2], due(20, 3));
    assert_eq!(due_ids(&*tx, 30, None, 2), vec![1, 2]);
    assert_eq!(due_ids(&*tx, 9, None, 10), Vec::<u64>::new());
    assert_eq!(due_ids(&*tx, 1000, None, 10), vec![1, 2, 3, 4, 5]);
    // Just after `after` up to now, then from the start up to `after` inclusive.
    assert_eq!(due_ids(&*tx, 30, Some((20, 2)), 10), vec![3, 4, 1, 2]);
    assert_eq!(due_ids(&*tx, 30, Some((20, 2)), 3), vec![3, 4, 1]);
    assert_eq!(due_ids(&*tx, 30, Some((20, 2)), 1), vec![3]);
    assert_eq!(due_ids(&*tx, 30, Some((30, 4)), 10), vec![1, 2, 3, 4]);
    assert_eq!(due_ids(&*tx, 30, Some((5, 0)), 10), vec![1, 2, 3, 4]);
    assert_eq!(due_ids(&*tx, 30, Some((15, 9)), 10), vec![2, 3, 4, 1]);
    // `after` past now: from the start.
    assert_eq!(due_ids(&*tx, 30, Some((40, 0)), 10), vec![1, 2, 3, 4]);
    assert_eq!(due_ids(&*tx, 30, Some((40, 0)), 0), Vec::<u64>::new());
}

/// A moved delivery is listed once, at its new time; the others stay where they were.
pub fn move_due_lists_a_delivery_once(store: &dyn Store) {
    let ids = |now: i64| -> Vec<(i64, u64)> {
        store
            .read()
            .unwrap()
            .due_deliveries(Timestamp(now), None, 10)
            .unwrap()
            .iter()
            .map(|d| (d.due_at.0, d.id))
            .collect()
    };
    let pending = |id| DeliveryRow {
        attempts: 1,
        next_attempt_at: Some(Timestamp(500)),
        ..delivery(id, Partition::from_raw(4), 1)
    };
    listed(store, &[(pending(1), 500), (pending(2), 500)]);
    let (_, effects) = write(store, |tx| tx.move_due(Some(Timestamp(500)), &due(100, 2))).unwrap();
    assert!(effects.deliveries_due);
    assert_eq!(ids(100), [(100, 2)]);
    assert_eq!(ids(1_000), [(100, 2), (500, 1)]);
}

pub fn record_outcomes_follows_the_skip_rules(store: &dyn Store) {
    let mut finished = delivery(6, Partition::from_raw(2), 1);
    finished.state = DeliveryState::Delivered;
    finished.next_attempt_at = None;
    listed(
        store,
        &[
            (delivery(1, Partition::from_raw(2), 1), 10),
            (delivery(2, Partition::from_raw(2), 1), 10),
            (delivery(3, Partition::from_raw(2), 1), 10),
            (delivery(4, Partition::from_raw(2), 1), 10),
            (delivery(5, Partition::from_raw(2), 1), 10),
        ],
    );
    write(store, |tx| tx.put_delivery(&finished)).unwrap();
    let retry = |at, receiver: &str| AfterAttempt::Retry {
        at: Timestamp(at),
        answered_at: Timestamp(at - 30),
        receiver: receiver.into(),
    };
    let (given_up, effects) = write(store, |tx| -> Result<_, StoreError> {
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

    let tx = store.read().unwrap();
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
    let (given_up, effects) = write(store, |tx| {
        tx.record_outcomes(&[
            outcome(4, 1, AfterAttempt::GivenUp { at: Timestamp(400) }),
            outcome(1, 1, AfterAttempt::GivenUp { at: Timestamp(400) }),
        ])
    })
    .unwrap();
    assert!(!effects.deliveries_due);
    assert_eq!(given_up.iter().map(|r| r.id).collect::<Vec<_>>(), vec![4]);
    let (given_up, effects) = write(store, |tx| {
        tx.record_outcomes(&[outcome(3, 2, AfterAttempt::GivenUp { at: Timestamp(1) })])
    })
    .unwrap();
    assert!(given_up.is_empty() && !effects.deliveries_due);
    let tx = store.read().unwrap();
    assert_eq!(due_ids(&*tx, 1000, None, 10), vec![5, 2]);
    assert_eq!(
        tx.delivery(3).unwrap().unwrap().finished_at,
        Some(Timestamp(101))
    );
}

/// "Retry now" asked for while an attempt was in flight: its retry is due when the answer
/// came, not at the schedule's time.
pub fn a_retry_asked_for_during_the_attempt_is_due_when_it_ends(store: &dyn Store) {
    listed(
        store,
        &[
            (delivery(1, Partition::from_raw(2), 1), 10),
            (delivery(2, Partition::from_raw(2), 1), 10),
        ],
    );
    let mut asked = delivery(1, Partition::from_raw(2), 1);
    asked.retry_requests = 1;
    write(store, |tx| tx.put_delivery(&asked)).unwrap();
    let retry = AfterAttempt::Retry {
        at: Timestamp(500),
        answered_at: Timestamp(60),
        receiver: "http://r.test:80".into(),
    };
    write(store, |tx| {
        tx.record_outcomes(&[outcome(1, 1, retry.clone()), outcome(2, 1, retry.clone())])
    })
    .unwrap();
    let tx = store.read().unwrap();
    let positions: Vec<(i64, u64)> = tx
        .due_deliveries(Timestamp(1000), None, 10)
        .unwrap()
        .iter()
        .map(|d| (d.due_at.0, d.id))
        .collect();
    assert_eq!(positions, vec![(60, 1), (500, 2)]);
    assert_eq!(
        tx.delivery(1).unwrap().unwrap().next_attempt_at,
        Some(Timestamp(60))
    );
}

/// Cancelled deliveries (`DeliveryRow::cancel`) leave the due list and the pending ones; an
/// attempt in flight then ends logged, its delivery cancelled still (or delivered, on a 2xx),
/// never due again.
pub fn cancelled_deliveries_leave_the_due_list_and_an_attempt_in_flight_ends(store: &dyn Store) {
    let (mine, other) = (Partition::from_raw(2), Partition::from_raw(3));
    let mut finished = delivery(5, mine, 1);
    finished.state = DeliveryState::Delivered;
    finished.next_attempt_at = None;
    listed(
        store,
        &[
            (delivery(1, mine, 1), 10),
            (delivery(2, mine, 1), 10),
            (delivery(3, mine, 1), 10),
            (delivery(4, other, 1), 10),
        ],
    );
    write(store, |tx| tx.put_delivery(&finished)).unwrap();
    let pending = |partition| -> Vec<u64> {
        let tx = store.read().unwrap();
        let rows = tx.pending_deliveries(partition).unwrap();
        rows.iter().map(|row| row.id).collect()
    };
    assert_eq!(pending(mine), [1, 2, 3]);
    assert_eq!(pending(other), [4]);

    write(store, |tx| -> Result<(), StoreError> {
        for id in [1, 2] {
            let mut row = tx.delivery(id)?.unwrap();
            let listed_at = row.cancel(Timestamp(50));
            assert_eq!(listed_at, Some(Timestamp(10)));
            tx.unlist_due(Timestamp(10), id)?;
            tx.put_delivery(&row)?;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(pending(mine), [3]);
    let tx = store.read().unwrap();
    assert_eq!(due_ids(&*tx, 1000, None, 10), vec![3, 4]);
    let one = tx.delivery(1).unwrap().unwrap();
    assert_eq!(one.state, DeliveryState::Cancelled);
    assert_eq!(
        (one.next_attempt_at, one.finished_at),
        (None, Some(Timestamp(50)))
    );
    drop(tx);

    // Their attempts, in flight when they were cancelled, end: each logged and counted, the
    // failed one still cancelled and not due, the answered one delivered; neither applies twice.
    let retry = AfterAttempt::Retry {
        at: Timestamp(500),
        answered_at: Timestamp(60),
        receiver: "http://r.test:80".into(),
    };
    let (given_up, effects) = write(store, |tx| {
        tx.record_outcomes(&[
            outcome(1, 1, retry.clone()),
            outcome(2, 1, AfterAttempt::Delivered { at: Timestamp(70) }),
            outcome(1, 1, AfterAttempt::Delivered { at: Timestamp(80) }),
        ])
    })
    .unwrap();
    assert!(given_up.is_empty() && !effects.deliveries_due);
    let tx = store.read().unwrap();
    assert_eq!(due_ids(&*tx, 1000, None, 10), vec![3, 4]);
    let one = tx.delivery(1).unwrap().unwrap();
    assert_eq!((one.state, one.attempts), (DeliveryState::Cancelled, 1));
    assert_eq!(
        (one.next_attempt_at, one.finished_at),
        (None, Some(Timestamp(50)))
    );
    let two = tx.delivery(2).unwrap().unwrap();
    assert_eq!((two.state, two.attempts), (DeliveryState::Delivered, 1));
    assert_eq!(two.finished_at, Some(Timestamp(70)));
    for id in [1, 2] {
        assert_eq!(tx.delivery_attempts(id).unwrap().len(), 1, "delivery {id}");
    }
}

/// A delivery made outside the ingest batch (a test event's) takes a new id and stores its
/// attempt.
pub fn a_delivery_made_outside_the_batch_takes_a_new_id_and_keeps_its_attempt(store: &dyn Store) {
    let (first, second) = write(store, |tx| -> Result<_, StoreError> {
        let first = tx.next_delivery_id()?;
        let mut row = delivery(first, Partition::from_raw(2), 1);
        row.state = DeliveryState::Delivered;
        row.next_attempt_at = None;
        row.test = true;
        tx.put_delivery(&row)?;
        tx.put_attempt(first, &attempt(1))?;
        Ok((first, tx.next_delivery_id()?))
    })
    .unwrap()
    .0;
    assert!(second > first, "{first} then {second}");
    let tx = store.read().unwrap();
    let row = tx.delivery(first).unwrap().unwrap();
    assert!(row.test);
    let attempts = tx.delivery_attempts(first).unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome, "outcome 1");
    assert!(due_ids(&*tx, 1000, None, 10).is_empty());
}

pub fn failure_mails_are_noted_once_per_endpoint_and_day(store: &dyn Store) {
    write(store, |tx| -> Result<(), StoreError> {
        tx.insert_failure_mail(4, 100)?;
        assert!(tx.failure_mailed(4, 100)?);
        Ok(())
    })
    .unwrap();
    let tx = store.read().unwrap();
    assert!(tx.failure_mailed(4, 100).unwrap());
    assert!(!tx.failure_mailed(4, 101).unwrap());
    assert!(!tx.failure_mailed(5, 100).unwrap());
}
