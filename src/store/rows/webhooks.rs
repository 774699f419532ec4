//! Owner webhook settings and subscriptions, signing secrets, deliveries and their attempts.

use serde::{Deserialize, Serialize};

use super::*;

/// What a delivery's body announces (its `type`); a subscription can ask for some only.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum EventType {
    #[serde(rename = "record.created")]
    RecordCreated,
    #[serde(rename = "record.replaced")]
    RecordReplaced,
    #[serde(rename = "record.deleted")]
    RecordDeleted,
    /// A test event ("Send test event"): no write's, and no subscription asks for it.
    #[serde(rename = "webhook.test")]
    WebhookTest,
}

impl EventType {
    /// The events of writes, which subscriptions filter on.
    pub const ALL: [EventType; 3] = [
        EventType::RecordCreated,
        EventType::RecordReplaced,
        EventType::RecordDeleted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::RecordCreated => "record.created",
            EventType::RecordReplaced => "record.replaced",
            EventType::RecordDeleted => "record.deleted",
            EventType::WebhookTest => "webhook.test",
        }
    }

    pub fn parse(text: &str) -> Option<EventType> {
        EventType::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

/// One of the owner's subscriptions of an endpoint in one environment: a receiver, and which
/// events it gets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionRow {
    /// Unique within its endpoint and environment, and never given again after a delete.
    pub id: u32,
    pub url: String,
    /// Name of the custom auth header sent with every delivery, if any.
    pub auth_header: Option<String>,
    /// Its value, sealed (see `crypto`).
    #[serde(default, with = "base64_bytes_opt")]
    pub auth_value_sealed: Option<Vec<u8>>,
    pub enabled: bool,
    #[serde(default)]
    pub description: String,
    /// The events it gets, in their order; empty for every event.
    #[serde(default)]
    pub event_types: Vec<EventType>,
    /// At most this many deliveries a second, when set.
    #[serde(default)]
    pub rate_limit: Option<u32>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    #[serde(default)]
    pub health: SubscriptionHealth,
    /// When the circuit breaker disabled it (its deliveries had failed for too long); `None`
    /// while enabled or when the owner disabled it.
    #[serde(default)]
    pub auto_disabled_at: Option<Timestamp>,
    /// Its latest recovery (`domain::webhooks::recovery`), running or finished.
    #[serde(default)]
    pub recovery: Option<RecoveryRow>,
}

/// A recovery: a fresh attempt for every given-up or skipped delivery of a subscription (or
/// of an environment's caller webhooks) made in a window, scheduled in created order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryRow {
    pub since: Timestamp,
    /// The window's end (exclusive): at most the time of the request.
    pub until: Timestamp,
    pub requested_at: Timestamp,
    /// The last delivery id the walk has looked at; it goes on after it.
    pub position: u64,
    /// Deliveries it has scheduled so far.
    pub scheduled: u64,
    /// When the next one it schedules is due at the earliest (paced by the rate limit).
    pub next_due: Timestamp,
    /// When the walk had looked at every delivery of the window (`finished_at` in rows
    /// written before a recovery waited for its deliveries' attempts).
    #[serde(alias = "finished_at")]
    pub walked_at: Option<Timestamp>,
    /// The last delivery it scheduled, with its attempts then: the recovery is over once that
    /// one (the latest due) has been attempted again.
    #[serde(default)]
    pub last: Option<RearmedDelivery>,
}

/// A delivery a recovery made pending again, and how many attempts it had then.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RearmedDelivery {
    pub id: u64,
    pub attempts: u32,
}

impl RecoveryRow {
    /// Whether its walk through the deliveries is still going.
    pub fn walking(&self) -> bool {
        self.walked_at.is_none()
    }
}

/// How a subscription's attempts have been going: what the dashboard shows, and what the
/// circuit breaker reads (`domain::webhooks::health`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionHealth {
    pub last_success_at: Option<Timestamp>,
    pub last_failure_at: Option<Timestamp>,
    /// When the first attempt that failed since the last success was made; `None` while the
    /// last attempt succeeded (or none was made).
    pub failing_since: Option<Timestamp>,
    /// Attempts that failed since the last success.
    pub failed_attempts: u32,
}

impl SubscriptionRow {
    /// A new enabled subscription to `url` for every event, made at `now` (its id is given
    /// when it is added to its settings).
    pub fn new(url: String, now: Timestamp) -> SubscriptionRow {
        SubscriptionRow {
            id: 0,
            url,
            auth_header: None,
            auth_value_sealed: None,
            enabled: true,
            description: String::new(),
            event_types: Vec::new(),
            rate_limit: None,
            created_at: now,
            updated_at: now,
            health: SubscriptionHealth::default(),
            auto_disabled_at: None,
            recovery: None,
        }
    }

    /// Whether it gets events of `event`'s type.
    pub fn wants(&self, event: EventType) -> bool {
        self.event_types.is_empty() || self.event_types.contains(&event)
    }
}

/// The owner's webhook settings of one endpoint in one environment: its subscriptions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "StoredWebhookSettings")]
pub struct WebhookSettingsRow {
    /// In id order.
    pub subscriptions: Vec<SubscriptionRow>,
    /// The id the next subscription gets.
    pub next_subscription_id: u32,
    /// The latest recovery of the environment's caller webhooks.
    pub caller_recovery: Option<RecoveryRow>,
}

impl WebhookSettingsRow {
    /// The first subscription: the one the single-webhook routes of the spec act on.
    pub fn first(&self) -> Option<&SubscriptionRow> {
        self.subscriptions.first()
    }

    pub fn subscription(&self, id: u32) -> Option<&SubscriptionRow> {
        self.subscriptions.iter().find(|s| s.id == id)
    }

    pub fn subscription_mut(&mut self, id: u32) -> Option<&mut SubscriptionRow> {
        self.subscriptions.iter_mut().find(|s| s.id == id)
    }

    /// Whether a recovery of these settings is walking through its deliveries.
    pub fn recovering(&self) -> bool {
        self.caller_recovery
            .as_ref()
            .is_some_and(RecoveryRow::walking)
            || self
                .subscriptions
                .iter()
                .any(|s| s.recovery.as_ref().is_some_and(RecoveryRow::walking))
    }

    /// Adds `subscription` under the next id.
    pub fn add(&mut self, mut subscription: SubscriptionRow) -> &SubscriptionRow {
        let id = self.next_subscription_id.max(1);
        subscription.id = id;
        self.next_subscription_id = id + 1;
        let index = self.subscriptions.len();
        self.subscriptions.push(subscription);
        &self.subscriptions[index]
    }
}

/// The webhook settings as stored: the current layout, or the single owner webhook that
/// versions before subscriptions kept (it becomes subscription 1). One struct with the fields
/// of both rather than an untagged enum: serde buffers an untagged enum's fields, and with
/// serde_json's `arbitrary_precision` (which exact schema validation needs) a buffered
/// number no longer reads as one.
#[derive(Deserialize)]
struct StoredWebhookSettings {
    // The current layout.
    subscriptions: Option<Vec<SubscriptionRow>>,
    next_subscription_id: Option<u32>,
    #[serde(default)]
    caller_recovery: Option<RecoveryRow>,
    // The single webhook of before.
    url: Option<String>,
    auth_header: Option<String>,
    #[serde(default, with = "base64_bytes_opt")]
    auth_value_sealed: Option<Vec<u8>>,
    enabled: Option<bool>,
    updated_at: Option<Timestamp>,
}

impl TryFrom<StoredWebhookSettings> for WebhookSettingsRow {
    type Error = String;

    fn try_from(stored: StoredWebhookSettings) -> Result<Self, String> {
        if let Some(subscriptions) = stored.subscriptions {
            let next_subscription_id = stored
                .next_subscription_id
                .ok_or("webhook settings without `next_subscription_id`")?;
            return Ok(WebhookSettingsRow {
                subscriptions,
                next_subscription_id,
                caller_recovery: stored.caller_recovery,
            });
        }
        let (Some(url), Some(enabled), Some(updated_at)) =
            (stored.url, stored.enabled, stored.updated_at)
        else {
            return Err("webhook settings with neither subscriptions nor a webhook".into());
        };
        Ok(WebhookSettingsRow {
            subscriptions: vec![SubscriptionRow {
                id: 1,
                auth_header: stored.auth_header,
                auth_value_sealed: stored.auth_value_sealed,
                enabled,
                ..SubscriptionRow::new(url, updated_at)
            }],
            next_subscription_id: 2,
            caller_recovery: None,
        })
    }
}

/// Who asked for a delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WebhookKind {
    /// Configured by the endpoint's owner; failures are e-mailed (production only).
    Owner,
    /// Requested by the API caller with `X-Webhook-Callback` on the write.
    Caller,
}

/// Where a delivery is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Waiting for its first or next attempt (listed in `DELIVERIES_DUE`).
    Pending,
    /// A receiver answered 2xx.
    Delivered,
    /// No attempt left, or an answer that is not retried.
    GivenUp,
    /// Not attempted: its subscription was disabled when its write was committed. A recovery
    /// can still schedule it.
    Skipped,
    /// Stopped before it finished: its subscription was deleted with its pending deliveries
    /// cancelled (`DeliveryRow::cancel`). Never attempted again unless redelivered or
    /// recovered.
    Cancelled,
}

/// What counting a partition's delivery outcomes reads of each delivery: a store can decode it
/// from a stored [`DeliveryRow`] without the body, the URL and the headers.
#[derive(Clone, Copy, Debug, Deserialize)]
pub struct DeliveryBrief {
    pub id: u64,
    pub state: DeliveryState,
    pub created_at: Timestamp,
    #[serde(default)]
    pub test: bool,
}

impl From<&DeliveryRow> for DeliveryBrief {
    fn from(row: &DeliveryRow) -> DeliveryBrief {
        DeliveryBrief {
            id: row.id,
            state: row.state,
            created_at: row.created_at,
            test: row.test,
        }
    }
}

/// One webhook delivery: one write to one receiver, with its fixed body.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeliveryRow {
    pub id: u64,
    pub partition: Partition,
    pub record_id: u128,
    pub kind: WebhookKind,
    /// The event its body announces (`None` in rows written before it was kept: the body
    /// says it, see [`DeliveryRow::event_type`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<EventType>,
    /// The owner subscription it was made for (`None` for a caller webhook's, and for those an
    /// owner webhook made before subscriptions existed: they belong to subscription 1).
    #[serde(default)]
    pub subscription: Option<u32>,
    pub url: String,
    pub auth_header: Option<String>,
    #[serde(default, with = "base64_bytes_opt")]
    pub auth_value_sealed: Option<Vec<u8>>,
    /// The JSON body, fixed when the write was committed; signed afresh on every attempt.
    pub body: String,
    /// Whose key made the write that asked for a caller webhook (`None` for an owner
    /// subscription's, and for caller deliveries made before it was kept): the delivery log
    /// shows the URL in full only to them and the owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender: Option<KeyHolder>,
    /// The `traceparent` of the write's request (`core::trace`): each attempt is a span of
    /// that trace, and tells the receiver so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    pub state: DeliveryState,
    /// Attempts made so far.
    pub attempts: u32,
    pub max_attempts: u32,
    /// When the next attempt is due, while pending.
    pub next_attempt_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    /// How many times "retry now" was asked for it. An attempt's outcome compares it with the
    /// count its own row had (`AttemptOutcome::retry_requests`): one asked for while the
    /// attempt was in flight is honoured when it ends.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub retry_requests: u32,
    /// Its record was erased (`domain::erasures`): the body is gone and the attempts' response
    /// bodies with it, so it is never sent again; the row stays, so the log's counts stay true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub erased: bool,
    /// A test event sent to its subscription ("Send test event"): logged with its one attempt,
    /// finished, and never sent again. `record_id` is the number of its `test_…` id.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub test: bool,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl DeliveryRow {
    /// What erasing its record makes of it, the rule both backends apply: no body, marked
    /// `erased`, and, if it was still pending, finished (given up at `at`), since there is
    /// nothing left to send. Returns the time it was listed as due at, to unlist it.
    pub fn erase(&mut self, at: Timestamp) -> Option<Timestamp> {
        self.body = String::new();
        self.erased = true;
        let listed_at = self.next_attempt_at.take();
        if self.state == DeliveryState::Pending {
            self.state = DeliveryState::GivenUp;
            self.finished_at = Some(at);
        }
        listed_at
    }

    /// What cancelling it makes of it, the rule both backends apply: a pending delivery is
    /// finished as `cancelled` at `at` and never attempted again (an attempt in flight still
    /// ends: `AttemptOutcome::apply`). Returns the time it was listed as due at, to unlist it;
    /// `None`, and the row left alone, when it was not pending.
    pub fn cancel(&mut self, at: Timestamp) -> Option<Timestamp> {
        if self.state != DeliveryState::Pending {
            return None;
        }
        self.state = DeliveryState::Cancelled;
        self.finished_at = Some(at);
        self.next_attempt_at.take()
    }

    /// The event it announces: as kept, or, for a row written before it was kept, as its body
    /// says (`None` once an erasure emptied the body).
    pub fn event_type(&self) -> Option<EventType> {
        #[derive(Deserialize)]
        struct Typed<'a> {
            #[serde(borrow, rename = "type")]
            kind: &'a str,
        }
        self.event.or_else(|| {
            let typed: Typed<'_> = serde_json::from_str(&self.body).ok()?;
            EventType::parse(typed.kind)
        })
    }

    /// The owner subscription it belongs to; `None` for a caller webhook's.
    pub fn owner_subscription(&self) -> Option<u32> {
        match self.kind {
            WebhookKind::Owner => Some(self.subscription.unwrap_or(1)),
            WebhookKind::Caller => None,
        }
    }
}

/// One delivery attempt as it went.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AttemptRow {
    pub attempt: u32,
    pub started_at: Timestamp,
    pub duration_us: u64,
    pub url: String,
    /// The request headers, with the signature and any auth value left out.
    pub request_headers: Vec<(String, String)>,
    /// The receiver's status code, if it answered.
    pub status: Option<u16>,
    /// Why there was no usable answer (timeout, connection refused, refused target...).
    pub error: Option<String>,
    /// The start of the response body (at most `webhooks::RESPONSE_BODY_LIMIT` bytes).
    pub response_body: Option<String>,
    /// What happened next: `delivered`, `retry`, or `given_up`.
    pub outcome: String,
}

impl AttemptRow {
    /// What erasing its delivery's record makes of it: the receiver's answer may have echoed
    /// the payload, so it goes.
    pub fn erase(&mut self) {
        self.response_body = None;
    }
}

/// The webhook signing secret of one endpoint in one environment. Both secrets are the
/// `whsec_…` text, sealed like the keys (see `crypto`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct WebhookSecretRow {
    /// The secret webhooks are signed with.
    #[serde(with = "base64_bytes")]
    pub current_sealed: Vec<u8>,
    /// The secret the last reissue replaced: webhooks carry its signature too until the
    /// changeover after `rotated_at` ends.
    #[serde(default, with = "base64_bytes_opt")]
    pub previous_sealed: Option<Vec<u8>>,
    /// When the first secret of this endpoint and environment was made.
    pub created_at: Timestamp,
    /// When the secret was last reissued.
    pub rotated_at: Option<Timestamp>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_owner_webhook_as_stored_before_subscriptions_is_subscription_1() {
        let stored = br#"{"url":"https://hooks.example/in","auth_header":"x-key",
            "auth_value_sealed":"AQID","enabled":false,"updated_at":1795000000000000}"#;
        let settings: WebhookSettingsRow = serde_json::from_slice(stored).unwrap();
        assert_eq!(settings.next_subscription_id, 2);
        let first = settings.first().unwrap();
        assert_eq!(first.id, 1);
        assert_eq!(first.url, "https://hooks.example/in");
        assert_eq!(first.auth_header.as_deref(), Some("x-key"));
        assert_eq!(first.auth_value_sealed, Some(vec![1, 2, 3]));
        assert!(!first.enabled);
        assert!(first.event_types.is_empty() && first.rate_limit.is_none());
        assert_eq!(first.created_at, Timestamp(1_795_000_000_000_000));
        // Written back, it reads as itself.
        let again: WebhookSettingsRow =
            serde_json::from_slice(&serde_json::to_vec(&settings).unwrap()).unwrap();
        assert_eq!(again, settings);
        assert!(serde_json::from_slice::<WebhookSettingsRow>(b"{\"url\":1}").is_err());
    }

    #[test]
    fn a_recovery_stored_before_it_waited_for_its_deliveries_reads_as_walked() {
        let stored = br#"{"since":1,"until":2,"requested_at":2,"position":9,"scheduled":3,
            "next_due":2,"finished_at":5}"#;
        let row: RecoveryRow = serde_json::from_slice(stored).unwrap();
        assert_eq!((row.walked_at, row.last), (Some(Timestamp(5)), None));
        assert!(!row.walking());
        let running = br#"{"since":1,"until":2,"requested_at":2,"position":0,"scheduled":0,
            "next_due":2,"finished_at":null}"#;
        let row: RecoveryRow = serde_json::from_slice(running).unwrap();
        assert!(row.walking());
    }

    #[test]
    fn an_empty_filter_takes_every_event() {
        let mut settings = WebhookSettingsRow::default();
        let row = |types: Vec<EventType>| SubscriptionRow {
            event_types: types,
            ..SubscriptionRow::new("https://hooks.example/in".into(), Timestamp(1))
        };
        assert_eq!(settings.add(row(Vec::new())).id, 1);
        assert_eq!(settings.add(row(vec![EventType::RecordDeleted])).id, 2);
        assert!(
            EventType::ALL
                .iter()
                .all(|t| settings.subscriptions[0].wants(*t))
        );
        assert!(settings.subscriptions[1].wants(EventType::RecordDeleted));
        assert!(!settings.subscriptions[1].wants(EventType::RecordCreated));
        for t in EventType::ALL {
            assert_eq!(EventType::parse(t.as_str()), Some(t));
            assert_eq!(serde_json::to_value(t).unwrap(), t.as_str());
        }
    }
}
