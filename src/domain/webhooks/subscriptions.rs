//! The owner's webhook subscriptions: receivers of an endpoint's events in one environment,
//! each with its URL, auth header, description, event filter and rate limit.
//!
//! An endpoint has at most [`MAX_SUBSCRIPTIONS`] per environment, numbered `sub_1`, `sub_2`…
//! in the order they were made; a number is never given again. The spec's single owner webhook
//! is the **first subscription**: the routes `…/webhooks/{environment}` act on it (`PUT` makes
//! it when there is none), and a webhook set up before subscriptions existed is `sub_1`.
//!
//! The custom auth value is a secret of the owner's receiver: it is stored sealed and never
//! shown again (views say only whether one is set). Changes apply to deliveries made
//! afterwards; a delivery keeps the target it was made with. A disabled subscription still
//! gets its deliveries, written as skipped (`domain::webhooks::deliveries`), so that nothing is
//! lost silently.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use crate::core::clock::Timestamp;
use crate::core::crypto::Sealer;
use crate::core::egress::TargetPolicy;
use crate::domain::audit;
use crate::domain::endpoints::Endpoints;
use crate::domain::error::{Error, Missing, Result};
use crate::domain::handles::Handles;
use crate::domain::webhooks::deliveries::{displayed_url, valid_auth_header};
use crate::domain::webhooks::log::cancel_pending;
use crate::domain::webhooks::targets;
use crate::store::{
    AccountRow, DeliveryState, EndpointRow, Environment, EventType, Partition, ReadTx, RecoveryRow,
    SubscriptionRow, WebhookSettingsRow,
};

/// Most subscriptions of one endpoint in one environment: every write makes a delivery for
/// each, in its own commit.
pub const MAX_SUBSCRIPTIONS: usize = 20;
/// Longest description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 200;
/// Highest rate limit, in deliveries a second.
pub const MAX_RATE_LIMIT: u32 = 10_000;
/// How a subscription's id is written: this prefix and its number.
const ID_PREFIX: &str = "sub_";

/// Body of `POST …/webhooks/{environment}/subscriptions` and of `PUT …/webhooks/{environment}`
/// (which sets the first subscription).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionConfig {
    pub url: String,
    /// Header that carries `auth_value` (default `Authorization` when a value is given).
    pub auth_header: Option<String>,
    pub auth_value: Option<String>,
    #[serde(default = "enabled_by_default")]
    pub enabled: bool,
    #[serde(default)]
    pub description: String,
    /// `record.created`, `record.replaced`, `record.deleted`; empty or absent for all.
    #[serde(default)]
    pub event_types: Vec<String>,
    /// Deliveries a second at most; absent for no limit.
    pub rate_limit: Option<u32>,
}

fn enabled_by_default() -> bool {
    true
}

/// Body of `PATCH …/subscriptions/{id}` and `PATCH …/webhooks/{environment}`: the fields given
/// change, the others stay. `null` removes an optional one (`auth_value`, `rate_limit`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionChange {
    #[serde(default, deserialize_with = "not_null")]
    pub url: Option<String>,
    #[serde(default, deserialize_with = "present")]
    pub auth_header: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub auth_value: Option<Option<String>>,
    #[serde(default, deserialize_with = "not_null")]
    pub enabled: Option<bool>,
    #[serde(default, deserialize_with = "not_null")]
    pub description: Option<String>,
    #[serde(default, deserialize_with = "not_null")]
    pub event_types: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    pub rate_limit: Option<Option<u32>>,
}

/// A field that is present, `null` included (`Some(None)`); absent fields stay `None`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> std::result::Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(deserializer).map(Some)
}

/// A field that, when present, has a value: `null` is refused (there is nothing to remove).
fn not_null<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    deserializer: D,
) -> std::result::Result<Option<T>, D::Error> {
    T::deserialize(deserializer).map(Some)
}

/// A subscription as the API and the dashboard show it.
#[derive(Debug, Serialize)]
pub struct SubscriptionView {
    pub id: String,
    pub environment: Environment,
    pub url: String,
    pub auth_header: Option<String>,
    /// Whether an auth value is stored (it is never shown).
    pub auth_value_set: bool,
    pub enabled: bool,
    pub description: String,
    /// The events it gets; empty for all.
    pub event_types: Vec<EventType>,
    pub rate_limit: Option<u32>,
    pub created_at: String,
    pub updated_at: String,
    pub health: HealthView,
    /// When the circuit breaker disabled it; `null` otherwise.
    pub auto_disabled_at: Option<String>,
    /// Its latest recovery (`recovery`), running or finished; `null` if it had none.
    pub recovery: Option<RecoveryView>,
}

/// What a recovery is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryTarget {
    Subscription(u32),
    Callers,
}

/// A recovery as the API shows it.
#[derive(Debug, Serialize)]
pub struct RecoveryView {
    pub environment: Environment,
    /// The subscription (`sub_N`), or `null` for the caller webhooks'.
    pub subscription: Option<String>,
    /// `running`, `scheduled` or `finished` ([`RecoveryState`]).
    pub state: &'static str,
    pub since: String,
    pub until: String,
    pub requested_at: String,
    /// Deliveries scheduled so far.
    pub scheduled: u64,
    /// When it finished: when its last scheduled delivery was attempted.
    pub finished_at: Option<String>,
}

/// Where a recovery is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveryState {
    /// Walking the deliveries of its window, scheduling the ones it takes.
    Running,
    /// Every delivery it takes is scheduled; the last (the latest due, with a rate limit
    /// possibly long after) has not been attempted yet.
    Scheduled,
    /// Its last scheduled delivery was attempted at this time (or it scheduled none, and its
    /// walk ended then).
    Finished(Timestamp),
}

impl RecoveryState {
    /// The state of `row`, read in `tx`: a recovery is over only once the last delivery it
    /// scheduled has been attempted again (or is gone with its endpoint's purge).
    pub fn of(tx: &(impl ReadTx + ?Sized), row: &RecoveryRow) -> Result<RecoveryState> {
        let Some(walked_at) = row.walked_at else {
            return Ok(RecoveryState::Running);
        };
        let Some(last) = row.last else {
            return Ok(RecoveryState::Finished(walked_at));
        };
        let attempted_again = match tx.delivery(last.id)? {
            Some(delivery) if delivery.attempts > last.attempts => last.attempts + 1,
            Some(delivery) if delivery.state == DeliveryState::Pending => {
                return Ok(RecoveryState::Scheduled);
            }
            _ => return Ok(RecoveryState::Finished(walked_at)),
        };
        let at = tx
            .delivery_attempts(last.id)?
            .into_iter()
            .find(|a| a.attempt == attempted_again)
            .map_or(walked_at, |a| a.started_at);
        Ok(RecoveryState::Finished(at))
    }

    fn name(self) -> &'static str {
        match self {
            RecoveryState::Running => "running",
            RecoveryState::Scheduled => "scheduled",
            RecoveryState::Finished(_) => "finished",
        }
    }
}

/// `row`, a recovery of `target`, as the API shows it (its state read in `tx`).
pub fn recovery_view(
    tx: &(impl ReadTx + ?Sized),
    environment: Environment,
    target: RecoveryTarget,
    row: &RecoveryRow,
) -> Result<RecoveryView> {
    let state = RecoveryState::of(tx, row)?;
    Ok(RecoveryView {
        environment,
        subscription: match target {
            RecoveryTarget::Subscription(id) => Some(subscription_id(id)),
            RecoveryTarget::Callers => None,
        },
        state: state.name(),
        since: row.since.to_rfc3339(),
        until: row.until.to_rfc3339(),
        requested_at: row.requested_at.to_rfc3339(),
        scheduled: row.scheduled,
        finished_at: match state {
            RecoveryState::Finished(at) => Some(at.to_rfc3339()),
            RecoveryState::Running | RecoveryState::Scheduled => None,
        },
    })
}

/// How a subscription's attempts have been going. Switching it on again (from disabled)
/// starts the failure streak afresh: `failing_since` and `failed_attempts` count from then.
#[derive(Debug, Serialize)]
pub struct HealthView {
    pub last_success_at: Option<String>,
    pub last_failure_at: Option<String>,
    /// The first failed attempt since the last success (or since it was last switched on);
    /// `null` while the last one succeeded.
    pub failing_since: Option<String>,
    /// Attempts that failed since the last success (or since it was last switched on).
    pub failed_attempts: u32,
}

/// The subscriptions of one environment, first one first.
#[derive(Debug, Serialize)]
pub struct SubscriptionList {
    pub environment: Environment,
    pub data: Vec<SubscriptionView>,
}

/// How a subscription's number is written (`sub_3`).
pub fn subscription_id(number: u32) -> String {
    format!("{ID_PREFIX}{number}")
}

/// The number of the subscription named in a path (`sub_3`).
pub fn subscription_param(text: &str) -> Result<u32> {
    text.strip_prefix(ID_PREFIX)
        .and_then(|n| n.parse::<u32>().ok())
        .filter(|n| *n > 0 && !text[ID_PREFIX.len()..].starts_with('0'))
        .ok_or_else(|| Error::InvalidParameter {
            name: "subscription_id",
            reason: "it must be a subscription id such as sub_1".into(),
        })
}

/// `row` as the API shows it, its recovery's state read in `tx`.
fn view(
    tx: &(impl ReadTx + ?Sized),
    environment: Environment,
    row: &SubscriptionRow,
) -> Result<SubscriptionView> {
    let recovery = row
        .recovery
        .as_ref()
        .map(|recovery| {
            recovery_view(
                tx,
                environment,
                RecoveryTarget::Subscription(row.id),
                recovery,
            )
        })
        .transpose()?;
    Ok(SubscriptionView {
        id: subscription_id(row.id),
        environment,
        url: displayed_url(&row.url),
        auth_header: row.auth_header.clone(),
        auth_value_set: row.auth_value_sealed.is_some(),
        enabled: row.enabled,
        description: row.description.clone(),
        event_types: row.event_types.clone(),
        rate_limit: row.rate_limit,
        created_at: row.created_at.to_rfc3339(),
        updated_at: row.updated_at.to_rfc3339(),
        health: HealthView {
            last_success_at: row.health.last_success_at.map(Timestamp::to_rfc3339),
            last_failure_at: row.health.last_failure_at.map(Timestamp::to_rfc3339),
            failing_since: row.health.failing_since.map(Timestamp::to_rfc3339),
            failed_attempts: row.health.failed_attempts,
        },
        auto_disabled_at: row.auto_disabled_at.map(Timestamp::to_rfc3339),
        recovery,
    })
}

/// Switches `row` on or off. Switching it on starts the circuit breaker's count afresh: its
/// failure streak (`failing_since`, `failed_attempts`) and `auto_disabled_at` are cleared.
fn set_enabled(row: &mut SubscriptionRow, enabled: bool) {
    if enabled && !row.enabled {
        row.auto_disabled_at = None;
        row.health.failing_since = None;
        row.health.failed_attempts = 0;
    }
    row.enabled = enabled;
}

/// The environment named in a path.
pub fn environment_param(text: &str) -> Result<Environment> {
    Environment::parse(text).ok_or_else(|| Error::InvalidParameter {
        name: "environment",
        reason: "it must be sandbox or production".into(),
    })
}

/// Which subscription a request is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    /// The first (the spec's single owner webhook).
    First,
    Id(u32),
}

impl Which {
    pub fn find(self, settings: &WebhookSettingsRow) -> Option<&SubscriptionRow> {
        match self {
            Which::First => settings.first(),
            Which::Id(id) => settings.subscription(id),
        }
    }

    pub fn missing(self) -> Error {
        match self {
            Which::First => Error::NotFound(Missing::Webhook),
            Which::Id(_) => Error::NotFound(Missing::Subscription),
        }
    }
}

/// The owner's view of one endpoint and environment: its row and partition.
struct Target {
    endpoint: EndpointRow,
    environment: Environment,
    partition: Partition,
}

/// The event types of a filter, each once, in their order.
fn valid_event_types(names: &[String]) -> Result<Vec<EventType>> {
    let mut types = names
        .iter()
        .map(|name| {
            EventType::parse(name).ok_or_else(|| {
                Error::InvalidWebhook(format!(
                    "`{}` is not an event type: use record.created, record.replaced or \
                     record.deleted (or no filter for all three)",
                    name.chars().take(100).collect::<String>()
                ))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    types.sort_unstable();
    types.dedup();
    Ok(types)
}

fn valid_description(text: &str) -> Result<String> {
    let text = text.trim();
    if text.chars().count() > MAX_DESCRIPTION_CHARS || text.chars().any(char::is_control) {
        return Err(Error::InvalidWebhook(format!(
            "the description must be at most {MAX_DESCRIPTION_CHARS} characters on one line"
        )));
    }
    Ok(text.to_string())
}

fn valid_rate_limit(limit: Option<u32>) -> Result<Option<u32>> {
    match limit {
        Some(n) if n == 0 || n > MAX_RATE_LIMIT => Err(Error::InvalidWebhook(format!(
            "the rate limit must be 1 to {MAX_RATE_LIMIT} deliveries a second (or absent for \
             none)"
        ))),
        limit => Ok(limit),
    }
}

/// The auth header name and sealed value of a configuration.
fn valid_auth(
    sealer: &Sealer,
    header: Option<&str>,
    value: Option<&str>,
) -> Result<(Option<String>, Option<Vec<u8>>)> {
    match value {
        None if header.is_some() => Err(Error::InvalidWebhook(
            "`auth_header` needs an `auth_value`".into(),
        )),
        None => Ok((None, None)),
        Some(value) => {
            http::HeaderValue::from_str(value).map_err(|_| {
                Error::InvalidWebhook("`auth_value` is not a valid header value".into())
            })?;
            let header = valid_auth_header(header.unwrap_or("authorization"))?;
            Ok((Some(header), Some(sealer.seal(value.as_bytes()))))
        }
    }
}

/// A new subscription row from `config` with its checked `url` (its id is given when it is
/// added).
fn new_row(
    sealer: &Sealer,
    config: SubscriptionConfig,
    url: String,
    now: Timestamp,
) -> Result<SubscriptionRow> {
    let (auth_header, auth_value_sealed) = valid_auth(
        sealer,
        config.auth_header.as_deref(),
        config.auth_value.as_deref(),
    )?;
    Ok(SubscriptionRow {
        auth_header,
        auth_value_sealed,
        enabled: config.enabled,
        description: valid_description(&config.description)?,
        event_types: valid_event_types(&config.event_types)?,
        rate_limit: valid_rate_limit(config.rate_limit)?,
        ..SubscriptionRow::new(url, now)
    })
}

/// What the audit log keeps of a subscription: never its auth value.
fn audit_details(environment: Environment, row: &SubscriptionRow) -> serde_json::Value {
    serde_json::json!({
        "environment": environment,
        "subscription": subscription_id(row.id),
        "url": displayed_url(&row.url),
        "enabled": row.enabled,
        "event_types": row.event_types,
        "rate_limit": row.rate_limit,
    })
}

/// Changes the settings of `target` in one transaction: `change` gets the current settings
/// and returns the subscription to show and the audit action; the settings are written back.
fn update_settings(
    handles: &Handles,
    owner: &AccountRow,
    target: &Target,
    change: impl Fn(&mut WebhookSettingsRow, Timestamp) -> Result<(SubscriptionRow, &'static str)>,
) -> Result<SubscriptionView> {
    let now = handles.now();
    handles.write(|tx| {
        let mut settings = tx.webhook_settings(target.partition)?.unwrap_or_default();
        let (row, action) = change(&mut settings, now)?;
        tx.put_webhook_settings(target.partition, &settings)?;
        let details = audit_details(target.environment, &row);
        audit::record(tx, now, target.endpoint.id, owner, action, details)?;
        view(tx, target.environment, &row)
    })
}

fn add(settings: &mut WebhookSettingsRow, row: SubscriptionRow) -> Result<SubscriptionRow> {
    if settings.subscriptions.len() >= MAX_SUBSCRIPTIONS {
        return Err(Error::Conflict(format!(
            "an endpoint can have at most {MAX_SUBSCRIPTIONS} subscriptions per environment: \
             delete one first"
        )));
    }
    Ok(settings.add(row).clone())
}

fn only_enabled(change: &SubscriptionChange) -> bool {
    change.url.is_none()
        && change.auth_header.is_none()
        && change.auth_value.is_none()
        && change.description.is_none()
        && change.event_types.is_none()
        && change.rate_limit.is_none()
}

/// The subscription service: what the owner does with their subscriptions.
pub struct Subscriptions<'a> {
    pub endpoints: &'a Endpoints,
    pub handles: &'a Handles,
    /// Seals auth values.
    pub sealer: &'a Sealer,
    /// Where deliveries may go: a URL every delivery would be refused is refused on save.
    pub policy: &'a TargetPolicy,
    /// How long after a recovery ends another over an overlapping window is refused
    /// (`[webhooks] recovery_cooldown`).
    pub recovery_cooldown: Duration,
}

impl Subscriptions<'_> {
    fn target(&self, owner: &AccountRow, slug: &str, environment: Environment) -> Result<Target> {
        let endpoint = self.endpoints.owned_row(owner, slug)?;
        let partition = Partition::new(endpoint.id, environment);
        Ok(Target {
            endpoint,
            environment,
            partition,
        })
    }

    /// A snapshot of the store and the settings of `target` in it.
    fn settings(&self, target: &Target) -> Result<(Box<dyn ReadTx + '_>, WebhookSettingsRow)> {
        let snapshot = self.handles.store.read()?;
        let settings = snapshot
            .webhook_settings(target.partition)?
            .unwrap_or_default();
        Ok((snapshot, settings))
    }

    pub fn list(
        &self,
        owner: &AccountRow,
        slug: &str,
        environment: Environment,
    ) -> Result<SubscriptionList> {
        let target = self.target(owner, slug, environment)?;
        let (snapshot, settings) = self.settings(&target)?;
        Ok(SubscriptionList {
            environment,
            data: settings
                .subscriptions
                .iter()
                .map(|row| view(snapshot.as_ref(), environment, row))
                .collect::<Result<_>>()?,
        })
    }

    pub fn get(
        &self,
        owner: &AccountRow,
        slug: &str,
        environment: Environment,
        which: Which,
    ) -> Result<SubscriptionView> {
        let target = self.target(owner, slug, environment)?;
        let (snapshot, settings) = self.settings(&target)?;
        let row = which.find(&settings).ok_or_else(|| which.missing())?;
        view(snapshot.as_ref(), environment, row)
    }

    /// One subscription as stored, with its partition: what a test event is sent to.
    pub fn stored(
        &self,
        owner: &AccountRow,
        slug: &str,
        environment: Environment,
        which: Which,
    ) -> Result<(Partition, SubscriptionRow)> {
        let target = self.target(owner, slug, environment)?;
        let (_, settings) = self.settings(&target)?;
        let row = which.find(&settings).ok_or_else(|| which.missing())?;
        Ok((target.partition, row.clone()))
    }

    /// Adds a subscription (`POST …/subscriptions`).
    pub async fn create(
        &self,
        owner: &AccountRow,
        slug: &str,
        environment: Environment,
        config: SubscriptionConfig,
    ) -> Result<SubscriptionView> {
        self.configure(owner, slug, environment, config, |settings, new, _| {
            add(settings, new).map(|row| (row, "webhook.subscription_created"))
        })
        .await
    }

    /// Sets (replaces) the first subscription, making it when there is none
    /// (`PUT …/webhooks/{environment}`).
    pub async fn put_first(
        &self,
        owner: &AccountRow,
        slug: &str,
        environment: Environment,
        config: SubscriptionConfig,
    ) -> Result<SubscriptionView> {
        self.configure(owner, slug, environment, config, |settings, new, now| {
            let row = match settings.subscriptions.first_mut() {
                Some(first) => {
                    let enabled = new.enabled;
                    *first = SubscriptionRow {
                        id: first.id,
                        created_at: first.created_at,
                        updated_at: now,
                        enabled: first.enabled,
                        health: first.health.clone(),
                        auto_disabled_at: first.auto_disabled_at,
                        recovery: first.recovery.clone(),
                        ..new
                    };
                    set_enabled(first, enabled);
                    first.clone()
                }
                None => add(settings, new)?,
            };
            Ok((row, "webhook.configured"))
        })
        .await
    }

    /// Checks `config` and `apply`s the subscription it makes to the settings. The caller's
    /// right to change the endpoint is checked first: the URL's check resolves its host and
    /// names the addresses it refuses, which is for the owner's eyes only.
    async fn configure(
        &self,
        owner: &AccountRow,
        slug: &str,
        environment: Environment,
        config: SubscriptionConfig,
        apply: impl Fn(
            &mut WebhookSettingsRow,
            SubscriptionRow,
            Timestamp,
        ) -> Result<(SubscriptionRow, &'static str)>,
    ) -> Result<SubscriptionView> {
        let target = self.target(owner, slug, environment)?;
        let url = targets::checked_url(self.policy, &config.url).await?;
        let new = new_row(self.sealer, config, url, self.handles.now())?;
        update_settings(self.handles, owner, &target, |settings, now| {
            apply(settings, new.clone(), now)
        })
    }

    /// Changes the fields `change` gives of one subscription (`PATCH`).
    pub async fn update(
        &self,
        owner: &AccountRow,
        slug: &str,
        environment: Environment,
        which: Which,
        change: SubscriptionChange,
    ) -> Result<SubscriptionView> {
        // The owner's endpoint first: see `configure`.
        let target = self.target(owner, slug, environment)?;
        let url = match &change.url {
            Some(text) => Some(targets::checked_url(self.policy, text).await?),
            None => None,
        };
        let description = change
            .description
            .as_deref()
            .map(valid_description)
            .transpose()?;
        let event_types = change
            .event_types
            .as_deref()
            .map(valid_event_types)
            .transpose()?;
        let rate_limit = change.rate_limit.map(valid_rate_limit).transpose()?;
        // A new auth value is sealed once, outside the transaction (which may run again).
        let auth = match &change.auth_value {
            Some(value) => {
                let header = change.auth_header.clone().flatten();
                Some(valid_auth(
                    self.sealer,
                    header.as_deref(),
                    value.as_deref(),
                )?)
            }
            None => None,
        };
        let action = match change.enabled {
            Some(true) if only_enabled(&change) => "webhook.enabled",
            Some(false) if only_enabled(&change) => "webhook.disabled",
            _ => "webhook.subscription_updated",
        };
        update_settings(self.handles, owner, &target, |settings, now| {
            let row = match which {
                Which::First => settings.subscriptions.first_mut(),
                Which::Id(id) => settings.subscription_mut(id),
            }
            .ok_or_else(|| which.missing())?;
            if let Some(url) = &url {
                row.url = url.clone();
            }
            match (&auth, &change.auth_header) {
                (Some((header, value)), _) => {
                    row.auth_header = header.clone();
                    row.auth_value_sealed = value.clone();
                }
                // Only the header's name: the stored value goes under it.
                (None, Some(Some(name))) if row.auth_value_sealed.is_some() => {
                    row.auth_header = Some(valid_auth_header(name)?);
                }
                (None, Some(_)) => {
                    return Err(Error::InvalidWebhook(
                        "`auth_header` needs an `auth_value` (set `auth_value` to null to stop \
                         sending one)"
                            .into(),
                    ));
                }
                (None, None) => {}
            }
            if let Some(enabled) = change.enabled {
                set_enabled(row, enabled);
            }
            if let Some(description) = &description {
                row.description = description.clone();
            }
            if let Some(event_types) = &event_types {
                row.event_types = event_types.clone();
            }
            if let Some(rate_limit) = rate_limit {
                row.rate_limit = rate_limit;
            }
            row.updated_at = now;
            Ok((row.clone(), action))
        })
    }

    /// Removes one subscription and, as `pending` says, cancels its pending deliveries
    /// (`log::cancel_pending`) in the same commit or leaves them to run. Returns how many it
    /// cancelled.
    pub fn delete(
        &self,
        owner: &AccountRow,
        slug: &str,
        environment: Environment,
        which: Which,
        pending: PendingDeliveries,
    ) -> Result<u64> {
        let target = self.target(owner, slug, environment)?;
        let now = self.handles.now();
        self.handles.write(|tx| {
            let mut settings = tx.webhook_settings(target.partition)?.unwrap_or_default();
            let row = which
                .find(&settings)
                .cloned()
                .ok_or_else(|| which.missing())?;
            settings.subscriptions.retain(|s| s.id != row.id);
            tx.put_webhook_settings(target.partition, &settings)?;
            let cancelled = match pending {
                PendingDeliveries::Cancel => cancel_pending(tx, target.partition, row.id, now)?,
                PendingDeliveries::Keep => 0,
            };
            let action = match which {
                Which::First => "webhook.removed",
                Which::Id(_) => "webhook.subscription_deleted",
            };
            let mut details = audit_details(target.environment, &row);
            details["pending"] = pending.as_str().into();
            details["cancelled"] = cancelled.into();
            audit::record(tx, now, target.endpoint.id, owner, action, details)?;
            Ok(cancelled)
        })
    }
}

/// What deleting a subscription does with its deliveries still pending (`?pending=` on the
/// API, a box ticked by default on the dashboard).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingDeliveries {
    /// Cancelled in the delete's commit: never attempted again, recoverable one by one. The
    /// default: deleting a receiver means "stop sending to it".
    Cancel,
    /// Left to run on their schedule, to the URL they were made with.
    Keep,
}

impl PendingDeliveries {
    pub fn as_str(self) -> &'static str {
        match self {
            PendingDeliveries::Cancel => "cancel",
            PendingDeliveries::Keep => "keep",
        }
    }

    /// The `pending` parameter: `cancel` (also when absent) or `keep`.
    pub fn param(text: Option<&str>) -> Result<PendingDeliveries> {
        match text {
            None | Some("cancel") => Ok(PendingDeliveries::Cancel),
            Some("keep") => Ok(PendingDeliveries::Keep),
            Some(_) => Err(Error::InvalidParameter {
                name: "pending",
                reason: "it must be cancel or keep".into(),
            }),
        }
    }
}
