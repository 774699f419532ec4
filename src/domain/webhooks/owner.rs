//! The owner webhook: one receiver per endpoint and environment, configured by the owner.
//!
//! The custom auth value is a secret of the owner's receiver: it is stored sealed and never
//! shown again (the view says only whether one is set). Changes apply to deliveries created
//! afterwards; a delivery keeps the target it was created with.

use redb::ReadableTable;
use serde::{Deserialize, Serialize};

use crate::domain::audit;
use crate::domain::error::{Error, Missing, Result};
use crate::domain::webhooks::deliveries::{displayed_url, valid_auth_header, valid_url};
use crate::http::app::App;
use crate::store::RedbWrite;
use crate::store::{
    AccountRow, Environment, OWNER_WEBHOOKS, OwnerWebhookRow, from_json, partition, to_json,
};

/// Body of `PUT /api/v1/manage/endpoints/{slug}/webhooks/{environment}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerWebhookConfig {
    pub url: String,
    /// Header that carries `auth_value` (default `Authorization` when a value is given).
    pub auth_header: Option<String>,
    pub auth_value: Option<String>,
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
}

fn enabled_by_default() -> bool {
    true
}

/// Body of `PATCH …/webhooks/{environment}`: switch deliveries on or off.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnabledChange {
    pub enabled: bool,
}

#[derive(Debug, Serialize)]
pub struct OwnerWebhookView {
    pub environment: Environment,
    pub url: String,
    pub auth_header: Option<String>,
    /// Whether an auth value is stored (it is never shown).
    pub auth_value_set: bool,
    pub enabled: bool,
    pub updated_at: String,
}

fn view(environment: Environment, row: &OwnerWebhookRow) -> OwnerWebhookView {
    OwnerWebhookView {
        environment,
        url: displayed_url(&row.url),
        auth_header: row.auth_header.clone(),
        auth_value_set: row.auth_value_sealed.is_some(),
        enabled: row.enabled,
        updated_at: row.updated_at.to_rfc3339(),
    }
}

/// The environment named in a path.
pub fn environment_param(text: &str) -> Result<Environment> {
    Environment::parse(text).ok_or_else(|| Error::InvalidParameter {
        name: "environment",
        reason: "it must be sandbox or production".into(),
    })
}

pub fn get(
    app: &App,
    owner: &AccountRow,
    slug: &str,
    environment: Environment,
) -> Result<OwnerWebhookView> {
    let endpoint = app.endpoints.owned_row(owner, slug)?;
    let txn = app.store.read()?;
    let row: OwnerWebhookRow = match txn
        .open_table(OWNER_WEBHOOKS)?
        .get(partition(endpoint.id, environment))?
    {
        Some(v) => from_json(v.value())?,
        None => return Err(Error::NotFound(Missing::Webhook)),
    };
    Ok(view(environment, &row))
}

/// Sets (replaces) the owner webhook of one environment.
pub fn put(
    app: &App,
    owner: &AccountRow,
    slug: &str,
    environment: Environment,
    config: OwnerWebhookConfig,
) -> Result<OwnerWebhookView> {
    let endpoint = app.endpoints.owned_row(owner, slug)?;
    let url = valid_url(&config.url)?;
    let auth_header = match (&config.auth_header, &config.auth_value) {
        (_, None) if config.auth_header.is_some() => {
            return Err(Error::InvalidWebhook(
                "`auth_header` needs an `auth_value`".into(),
            ));
        }
        (_, None) => None,
        (name, Some(value)) => {
            http::HeaderValue::from_str(value).map_err(|_| {
                Error::InvalidWebhook("`auth_value` is not a valid header value".into())
            })?;
            Some(valid_auth_header(
                name.as_deref().unwrap_or("authorization"),
            )?)
        }
    };
    let now = app.clock.now();
    let row = OwnerWebhookRow {
        url,
        auth_header,
        auth_value_sealed: config
            .auth_value
            .map(|v| app.endpoints.sealer.seal(v.as_bytes())),
        enabled: config.enabled,
        updated_at: now,
    };
    let txn = app.store.write()?;
    txn.open_table(OWNER_WEBHOOKS)?.insert(
        partition(endpoint.id, environment),
        to_json(&row)?.as_slice(),
    )?;
    audit::record(
        &mut RedbWrite::over(&txn),
        now,
        endpoint.id,
        owner,
        "webhook.configured",
        serde_json::json!({ "environment": environment, "url": row.url, "enabled": row.enabled }),
    )?;
    txn.commit()?;
    Ok(view(environment, &row))
}

/// Switches the owner webhook of one environment on or off.
pub fn set_enabled(
    app: &App,
    owner: &AccountRow,
    slug: &str,
    environment: Environment,
    change: EnabledChange,
) -> Result<OwnerWebhookView> {
    let endpoint = app.endpoints.owned_row(owner, slug)?;
    let now = app.clock.now();
    let key = partition(endpoint.id, environment);
    let txn = app.store.write()?;
    let row = {
        let mut table = txn.open_table(OWNER_WEBHOOKS)?;
        let mut row: OwnerWebhookRow = match table.get(key)? {
            Some(v) => from_json(v.value())?,
            None => return Err(Error::NotFound(Missing::Webhook)),
        };
        row.enabled = change.enabled;
        row.updated_at = now;
        table.insert(key, to_json(&row)?.as_slice())?;
        row
    };
    let action = if change.enabled {
        "webhook.enabled"
    } else {
        "webhook.disabled"
    };
    audit::record(
        &mut RedbWrite::over(&txn),
        now,
        endpoint.id,
        owner,
        action,
        serde_json::json!({ "environment": environment }),
    )?;
    txn.commit()?;
    Ok(view(environment, &row))
}

/// Removes the owner webhook of one environment; deliveries already created still run.
pub fn delete(app: &App, owner: &AccountRow, slug: &str, environment: Environment) -> Result<()> {
    let endpoint = app.endpoints.owned_row(owner, slug)?;
    let now = app.clock.now();
    let txn = app.store.write()?;
    let removed = txn
        .open_table(OWNER_WEBHOOKS)?
        .remove(partition(endpoint.id, environment))?
        .is_some();
    if !removed {
        return Err(Error::NotFound(Missing::Webhook));
    }
    audit::record(
        &mut RedbWrite::over(&txn),
        now,
        endpoint.id,
        owner,
        "webhook.removed",
        serde_json::json!({ "environment": environment }),
    )?;
    txn.commit()?;
    Ok(())
}
