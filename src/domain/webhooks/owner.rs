//! The owner webhook: one receiver per endpoint and environment, configured by the owner.
//!
//! The custom auth value is a secret of the owner's receiver: it is stored sealed and never
//! shown again (the view says only whether one is set). Changes apply to deliveries created
//! afterwards; a delivery keeps the target it was created with.

use serde::{Deserialize, Serialize};

use crate::core::crypto::Sealer;
use crate::domain::audit;
use crate::domain::endpoints::Endpoints;
use crate::domain::error::{Error, Missing, Result};
use crate::domain::handles::Handles;
use crate::domain::webhooks::deliveries::{displayed_url, valid_auth_header, valid_url};
use crate::store::{AccountRow, Environment, OwnerWebhookRow, Store, partition};

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
    endpoints: &Endpoints,
    store: &dyn Store,
    owner: &AccountRow,
    slug: &str,
    environment: Environment,
) -> Result<OwnerWebhookView> {
    let endpoint = endpoints.owned_row(owner, slug)?;
    let row = store
        .read()?
        .owner_webhook(partition(endpoint.id, environment))?
        .ok_or(Error::NotFound(Missing::Webhook))?;
    Ok(view(environment, &row))
}

/// Sets (replaces) the owner webhook of one environment.
pub fn put(
    endpoints: &Endpoints,
    handles: &Handles,
    sealer: &Sealer,
    owner: &AccountRow,
    slug: &str,
    environment: Environment,
    config: OwnerWebhookConfig,
) -> Result<OwnerWebhookView> {
    let endpoint = endpoints.owned_row(owner, slug)?;
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
    let now = handles.now();
    let row = OwnerWebhookRow {
        url,
        auth_header,
        auth_value_sealed: config.auth_value.map(|v| sealer.seal(v.as_bytes())),
        enabled: config.enabled,
        updated_at: now,
    };
    handles.write(|tx| {
        tx.put_owner_webhook(partition(endpoint.id, environment), &row)?;
        let details =
            serde_json::json!({ "environment": environment, "url": row.url, "enabled": row.enabled });
        audit::record(tx, now, endpoint.id, owner, "webhook.configured", details)
    })?;
    Ok(view(environment, &row))
}

/// Switches the owner webhook of one environment on or off.
pub fn set_enabled(
    endpoints: &Endpoints,
    handles: &Handles,
    owner: &AccountRow,
    slug: &str,
    environment: Environment,
    change: EnabledChange,
) -> Result<OwnerWebhookView> {
    let endpoint = endpoints.owned_row(owner, slug)?;
    let now = handles.now();
    let key = partition(endpoint.id, environment);
    let action = if change.enabled {
        "webhook.enabled"
    } else {
        "webhook.disabled"
    };
    let row = handles.write(|tx| {
        let mut row = tx
            .owner_webhook(key)?
            .ok_or(Error::NotFound(Missing::Webhook))?;
        row.enabled = change.enabled;
        row.updated_at = now;
        tx.put_owner_webhook(key, &row)?;
        let details = serde_json::json!({ "environment": environment });
        audit::record(tx, now, endpoint.id, owner, action, details)?;
        Ok(row)
    })?;
    Ok(view(environment, &row))
}

/// Removes the owner webhook of one environment; deliveries already created still run.
pub fn delete(
    endpoints: &Endpoints,
    handles: &Handles,
    owner: &AccountRow,
    slug: &str,
    environment: Environment,
) -> Result<()> {
    let endpoint = endpoints.owned_row(owner, slug)?;
    let now = handles.now();
    handles.write(|tx| {
        if !tx.delete_owner_webhook(partition(endpoint.id, environment))? {
            return Err(Error::NotFound(Missing::Webhook));
        }
        let details = serde_json::json!({ "environment": environment });
        audit::record(tx, now, endpoint.id, owner, "webhook.removed", details)
    })
}
