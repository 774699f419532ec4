//! The owner's webhook settings and their subscriptions' health (`store::webhooks`).

use crate::core::clock::Timestamp;
use crate::store::{
    Partition, Store, SubscriptionHealth, SubscriptionRow, WebhookSettingsRow, write,
};

fn settings(ids: &[u32]) -> WebhookSettingsRow {
    WebhookSettingsRow {
        subscriptions: ids
            .iter()
            .map(|&id| SubscriptionRow {
                id,
                ..SubscriptionRow::new(format!("https://example.com/{id}"), Timestamp(1_000))
            })
            .collect(),
        next_subscription_id: ids.iter().max().map_or(1, |id| id + 1),
        caller_recovery: None,
    }
}

fn failing(since: i64, attempts: u32) -> SubscriptionHealth {
    SubscriptionHealth {
        last_success_at: Some(Timestamp(since - 1)),
        last_failure_at: Some(Timestamp(since + 10)),
        failing_since: Some(Timestamp(since)),
        failed_attempts: attempts,
    }
}

/// Each subscription's health as the settings of `partition` show it (`None`: no settings).
fn health_of(store: &dyn Store, partition: Partition) -> Option<Vec<(u32, SubscriptionHealth)>> {
    let settings = store.read().unwrap().webhook_settings(partition).unwrap()?;
    Some(
        settings
            .subscriptions
            .into_iter()
            .map(|row| (row.id, row.health))
            .collect(),
    )
}

pub fn subscription_health_is_noted_alone_and_kept_with_its_settings(store: &dyn Store) {
    write(store, |tx| {
        tx.put_webhook_settings(Partition::from_raw(2), &settings(&[1, 2]))?;
        tx.put_webhook_settings(Partition::from_raw(3), &settings(&[1]))?;
        // Nothing to note it in: no settings, no error.
        tx.put_subscription_health(Partition::from_raw(4), &[(1, failing(5_000, 1))])
    })
    .unwrap();
    // Noted alone: for a subscription the settings have; an unknown id is left out.
    write(store, |tx| {
        tx.put_subscription_health(
            Partition::from_raw(2),
            &[(1, failing(5_000, 3)), (7, failing(5_000, 9))],
        )?;
        // The transaction reads its own writes.
        assert_eq!(
            tx.webhook_settings(Partition::from_raw(2))?
                .unwrap()
                .subscription(1)
                .unwrap()
                .health,
            failing(5_000, 3)
        );
        Ok::<_, crate::store::StoreError>(())
    })
    .unwrap();
    let default = SubscriptionHealth::default();
    assert_eq!(
        health_of(store, Partition::from_raw(2)),
        Some(vec![(1, failing(5_000, 3)), (2, default.clone())])
    );
    assert_eq!(
        health_of(store, Partition::from_raw(3)),
        Some(vec![(1, default.clone())])
    );
    assert_eq!(health_of(store, Partition::from_raw(4)), None);
    // The rest of the settings is as it was.
    let mut expected = settings(&[1, 2]);
    expected.subscriptions[0].health = failing(5_000, 3);
    assert_eq!(
        store
            .read()
            .unwrap()
            .webhook_settings(Partition::from_raw(2))
            .unwrap(),
        Some(expected.clone())
    );

    // Settings written whole carry their health: a change kept, a removed subscription's gone.
    expected.subscriptions.remove(0);
    expected.subscriptions[0].health = failing(6_000, 1);
    write(store, |tx| {
        tx.put_webhook_settings(Partition::from_raw(2), &expected)
    })
    .unwrap();
    assert_eq!(
        health_of(store, Partition::from_raw(2)),
        Some(vec![(2, failing(6_000, 1))])
    );

    // Deleted settings leave no health behind for settings written again.
    write(store, |tx| {
        tx.delete_webhook_settings(Partition::from_raw(2))
    })
    .unwrap();
    assert_eq!(health_of(store, Partition::from_raw(2)), None);
    write(store, |tx| {
        tx.put_webhook_settings(Partition::from_raw(2), &settings(&[2]))
    })
    .unwrap();
    assert_eq!(
        health_of(store, Partition::from_raw(2)),
        Some(vec![(2, default)])
    );
}
