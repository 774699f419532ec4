//! The owner subscriptions' health on PostgreSQL: one `subscription_health` row per
//! subscription, beside the partition's settings in `owner_webhooks`, whose JSON keeps the
//! subscriptions without it.
//!
//! Why apart: the dispatcher notes a subscription's health after every attempt, and every
//! ingest batch reads the partition's settings to plan its deliveries. Under SERIALIZABLE a
//! health written into the settings' row made each such write and each batch (which inserts
//! deliveries the result writer's reads cover) a read/write cycle that one of them lost, and a
//! busy endpoint's writes failed with 503 after their retries. Batches read `owner_webhooks`
//! alone (`records`); everything else reads the settings with their health
//! ([`settings_with_health`]).

use super::{PgTx, big_partition, from_json, to_json};
use crate::store::{Partition, StoreError, SubscriptionHealth, WebhookSettingsRow};

/// The settings of `partition`, each subscription with its health (none noted yet: the
/// default).
pub(super) fn settings_with_health(
    tx: &PgTx<'_>,
    partition: Partition,
) -> Result<Option<WebhookSettingsRow>, StoreError> {
    let rows = tx.query(
        "SELECT NULL::integer, data FROM owner_webhooks WHERE partition = $1 \
         UNION ALL \
         SELECT subscription, data FROM subscription_health WHERE partition = $1",
        &[&big_partition(partition)],
    )?;
    let mut settings: Option<WebhookSettingsRow> = None;
    let mut health = Vec::new();
    for row in &rows {
        match row.try_get::<_, Option<i32>>(0)? {
            None => settings = Some(from_json(row.try_get(1)?)?),
            Some(id) => health.push((id, from_json::<SubscriptionHealth>(row.try_get(1)?)?)),
        }
    }
    let Some(mut settings) = settings else {
        return Ok(None);
    };
    for (id, health) in health {
        if let Some(row) = u32::try_from(id)
            .ok()
            .and_then(|id| settings.subscription_mut(id))
        {
            row.health = health;
        }
    }
    Ok(Some(settings))
}

/// Writes `settings` of `partition`: the subscriptions without their health into
/// `owner_webhooks`, each one's health into its own row, and no row for a subscription the
/// settings no longer have.
pub(super) fn put_settings(
    tx: &mut PgTx<'_>,
    partition: Partition,
    settings: &WebhookSettingsRow,
) -> Result<(), StoreError> {
    let mut without_health = settings.clone();
    for row in &mut without_health.subscriptions {
        row.health = SubscriptionHealth::default();
    }
    tx.execute(
        "INSERT INTO owner_webhooks (partition, data) VALUES ($1, $2) \
         ON CONFLICT (partition) DO UPDATE SET data = EXCLUDED.data",
        &[&big_partition(partition), &to_json(&without_health)?],
    )?;
    let health: Vec<(u32, SubscriptionHealth)> = settings
        .subscriptions
        .iter()
        .map(|row| (row.id, row.health.clone()))
        .collect();
    let (ids, _) = columns(&health)?;
    tx.execute(
        "DELETE FROM subscription_health \
         WHERE partition = $1 AND NOT (subscription = ANY($2::integer[]))",
        &[&big_partition(partition), &ids],
    )?;
    upsert(tx, partition, &health)
}

/// Replaces the health of the subscriptions in `health` that `partition`'s settings have.
pub(super) fn put_health(
    tx: &mut PgTx<'_>,
    partition: Partition,
    health: &[(u32, SubscriptionHealth)],
) -> Result<(), StoreError> {
    let Some(row) = tx.query_opt(
        "SELECT data FROM owner_webhooks WHERE partition = $1",
        &[&big_partition(partition)],
    )?
    else {
        return Ok(());
    };
    let settings: WebhookSettingsRow = from_json(row.try_get(0)?)?;
    let known: Vec<(u32, SubscriptionHealth)> = health
        .iter()
        .filter(|(id, _)| settings.subscription(*id).is_some())
        .cloned()
        .collect();
    upsert(tx, partition, &known)
}

/// Writes each `(id, health)` of `partition` into its row.
fn upsert(
    tx: &mut PgTx<'_>,
    partition: Partition,
    health: &[(u32, SubscriptionHealth)],
) -> Result<(), StoreError> {
    let (ids, data) = columns(health)?;
    tx.execute(
        "INSERT INTO subscription_health (partition, subscription, data) \
         SELECT $1, * FROM unnest($2::integer[], $3::bytea[]) \
         ON CONFLICT (partition, subscription) DO UPDATE SET data = EXCLUDED.data",
        &[&big_partition(partition), &ids, &data],
    )?;
    Ok(())
}

/// Removes the health of every subscription of `partition`.
pub(super) fn delete_health(tx: &mut PgTx<'_>, partition: Partition) -> Result<(), StoreError> {
    tx.execute(
        "DELETE FROM subscription_health WHERE partition = $1",
        &[&big_partition(partition)],
    )?;
    Ok(())
}

/// The ids and encoded health of `health`, as statement parameters.
fn columns(health: &[(u32, SubscriptionHealth)]) -> Result<(Vec<i32>, Vec<Vec<u8>>), StoreError> {
    let mut ids = Vec::with_capacity(health.len());
    let mut data = Vec::with_capacity(health.len());
    for (id, row) in health {
        ids.push(
            i32::try_from(*id)
                .map_err(|_| StoreError::Corrupt(format!("subscription id {id} out of range")))?,
        );
        data.push(to_json(row)?);
    }
    Ok((ids, data))
}
