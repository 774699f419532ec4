//! The schemas of webhook subscriptions, deliveries and attempts, and the webhooks intake
//! sends (the document's `webhooks`).

use serde_json::{Value, json};

use super::*;

pub(super) fn webhook_schemas() -> Value {
    let mut mail_page = page_of("Mail");
    mail_page["properties"]["smtp_configured"] = json!({ "type": "boolean" });
    mail_page["required"] = json!(["data", "pagination", "smtp_configured"]);
    json!({
        "WebhookSecret": object(json!({
            "environment": schema_ref("Environment"),
            "secret": { "type": "string", "pattern": "^whsec_" },
            "created_at": time(),
            "rotated_at": time(),
            "previous_valid_until": time(),
        }), &["environment", "secret", "created_at"]),
        "EventType": string_enum(&["record.created", "record.replaced", "record.deleted"]),
        "Subscription": object(json!({
            "id": { "type": "string", "pattern": "^sub_[1-9][0-9]*$" },
            "environment": schema_ref("Environment"),
            "url": string(),
            "auth_header": nullable(string()),
            "auth_value_set": { "type": "boolean" },
            "enabled": { "type": "boolean" },
            "description": string(),
            "event_types": {
                "type": "array", "items": schema_ref("EventType"),
                "description": "The event types it gets; empty for all.",
            },
            "rate_limit": nullable(json!({ "type": "integer", "minimum": 1, "maximum": 10_000 })),
            "created_at": time(),
            "updated_at": time(),
            "health": schema_ref("SubscriptionHealth"),
            "auto_disabled_at": described(
                nullable(time()),
                "When the circuit breaker disabled it; `null` while enabled (switching it on \
                 again clears it) or when the owner disabled it.",
            ),
            "recovery": nullable(schema_ref("Recovery")),
        }), &["id", "environment", "url", "auth_header", "auth_value_set", "enabled",
              "description", "event_types", "rate_limit", "created_at", "updated_at", "health",
              "auto_disabled_at", "recovery"]),
        "SubscriptionHealth": object(json!({
            "last_success_at": nullable(time()),
            "last_failure_at": nullable(time()),
            "failing_since": described(
                nullable(time()),
                "The first failed attempt since the last success, or since the subscription \
                 was last switched on (enabling a disabled one clears it); `null` while the \
                 last attempt succeeded.",
            ),
            "failed_attempts": described(
                integer(),
                "Attempts that failed since the last success, or since the subscription was \
                 last switched on (enabling a disabled one sets it to 0).",
            ),
        }), &["last_success_at", "last_failure_at", "failing_since", "failed_attempts"]),
        "Recovery": object(json!({
            "environment": schema_ref("Environment"),
            "subscription": nullable(json!({ "type": "string", "pattern": "^sub_[1-9][0-9]*$" })),
            "state": described(
                string_enum(&["running", "scheduled", "finished"]),
                "`running` while it walks the window; `scheduled` once every delivery it takes \
                 is due, until the last of them has been attempted; then `finished`.",
            ),
            "since": time(),
            "until": described(
                time(),
                "The window's end (exclusive): the `until` asked for, or the time of the \
                 request when that is earlier or none was given.",
            ),
            "requested_at": time(),
            "scheduled": described(integer(), "Deliveries scheduled so far."),
            "finished_at": described(
                nullable(time()),
                "When its last scheduled delivery was attempted (or its walk ended, if it \
                 scheduled none); the recovery cooldown counts from here.",
            ),
        }), &["environment", "subscription", "state", "since", "until", "requested_at",
              "scheduled", "finished_at"]),
        "Marked": object(json!({ "marked": integer() }), &["marked"]),
        "TestEventResult": object(json!({
            "webhook_id": { "type": "string", "pattern": "^test_" },
            "delivery_id": { "type": "integer",
                             "description": "Its entry in the delivery log (`getDelivery`)." },
            "delivered": { "type": "boolean", "description": "Whether the receiver answered 2xx." },
            "status": nullable(json!({ "type": "integer", "minimum": 100, "maximum": 599 })),
            "response_body": nullable(json!({ "type": "string", "description": "The first 4 KiB of the receiver's answer." })),
            "error": nullable(json!({ "type": "string", "description": "Why there was no answer: timeout, connection, TLS, or the egress rule." })),
            "duration_ms": { "type": "number", "minimum": 0 },
            "request_body": { "type": "string", "description": "The JSON body sent." },
        }), &["webhook_id", "delivery_id", "delivered", "status", "response_body", "error",
              "duration_ms", "request_body"]),
        "SubscriptionList": object(json!({
            "environment": schema_ref("Environment"),
            "data": { "type": "array", "items": schema_ref("Subscription") },
        }), &["environment", "data"]),
        "Delivery": object(json!({
            "id": integer(),
            "record_id": { "anyOf": [schema_ref("RecordId"),
                                     { "type": "string", "pattern": "^test_[0-9a-z]{26}$" }],
                           "description": "The record whose write it reports; for a test \
                               event (`test`), its `test_…` id, which names no record." },
            "event": { "anyOf": [string_enum(&["record.created", "record.replaced",
                                              "record.deleted", "webhook.test"]),
                                 { "type": "null" }],
                       "description": "The event its body announces: a record's deliveries \
                           share their `webhook-id` (the record id), and this tells them apart. \
                           `null` only for a delivery made before deliveries kept it \
                           (its body said it), whose record was erased since." },
            "environment": schema_ref("Environment"),
            "kind": string_enum(&["owner", "caller"]),
            "subscription": nullable(json!({ "type": "string", "pattern": "^sub_[1-9][0-9]*$" })),
            "url": { "anyOf": [string(), { "type": "null" }],
                     "description": "Where it goes, as far as the caller may see it: in full \
                         (credentials masked) for the owner, and for a caller webhook's to the \
                         collaborator whose key made the write; a caller webhook's origin \
                         (`scheme://host:port`) for other collaborators; `null` for an owner \
                         subscription's seen by a collaborator." },
            "state": described(
                string_enum(&["pending", "delivered", "given_up", "skipped", "cancelled"]),
                "`cancelled`: its subscription was deleted with its pending deliveries \
                 cancelled; never attempted again unless redelivered.",
            ),
            "failing": { "type": "boolean",
                         "description": "Pending after at least one failed attempt (the log's `failing` state)." },
            "attempts": integer(),
            "max_attempts": integer(),
            "next_attempt_at": nullable(time()),
            "created_at": time(),
            "finished_at": nullable(time()),
            "withheld": { "type": "array", "items": string_enum(&["url", "body"]),
                          "description": "What the caller is not shown (empty for the owner): \
                              `url`, the URL is cut to its origin or `null` (in the delivery and \
                              every attempt); `body`, the body and every attempt's \
                              `response_body` are `null` (the caller lacks the `read` \
                              permission, or the endpoint is inactive)." },
            "erased": { "type": "boolean",
                        "description": "Its record was erased (`createErasure`): its `body` and \
                            every attempt's `response_body` are `null` for everyone, a pending \
                            delivery was given up, and it can never be sent again." },
            "test": { "type": "boolean",
                      "description": "A test event (`testSubscription`), logged with its one \
                          attempt: `delivered` on a 2xx, else `given_up`; never sent again." },
        }), &["id", "record_id", "event", "environment", "kind", "subscription", "url", "state",
              "failing", "attempts", "max_attempts", "next_attempt_at", "created_at",
              "finished_at", "withheld", "erased", "test"]),
        "DeliveryDetail": extends("Delivery", json!({
            "body": { "anyOf": [string(), { "type": "null" }],
                      "description": "The exact bytes every attempt sends; `null` when \
                          withheld (`withheld` holds `body`)." },
            "attempt_log": { "type": "array", "items": schema_ref("DeliveryAttempt") },
        }), &["body", "attempt_log"]),
        "DeliveryAttempt": object(json!({
            "attempt": integer(),
            "started_at": time(),
            "duration_ms": { "type": "number" },
            "url": { "anyOf": [string(), { "type": "null" }],
                     "description": "As the delivery's `url`." },
            "request_headers": { "type": "array", "items": {
                "type": "array", "prefixItems": [string(), string()], "minItems": 2, "maxItems": 2,
            } },
            "status": nullable(integer()),
            "error": nullable(string()),
            "response_body": { "anyOf": [string(), { "type": "null" }],
                               "description": "The start of the receiver's answer; `null` \
                                   without one, or when withheld (`withheld` holds `body`)." },
            "outcome": string_enum(&["delivered", "retry", "given_up"]),
        }), &["attempt", "started_at", "duration_ms", "url", "request_headers", "status",
              "error", "response_body", "outcome"]),
        "Mail": object(json!({
            "id": integer(),
            "kind": string(),
            "to": string(),
            "subject": string(),
            "status": string_enum(&["queued", "sent", "failed"]),
            "attempts": integer(),
            "last_error": nullable(string()),
            "created_at": time(),
            "next_attempt_at": nullable(time()),
            "sent_at": nullable(time()),
            "body": { "type": "string", "description": "In the single-message view only." },
        }), &["id", "kind", "to", "subject", "status", "attempts", "last_error", "created_at",
              "next_attempt_at", "sent_at"]),
        "MailPage": mail_page,
        "WebhookEvent": object(json!({
            "type": schema_ref("EventType"),
            "timestamp": { "type": "string", "format": "date-time", "description": "When the write was processed." },
            "data": schema_ref("WebhookEventData"),
        }), &["type", "timestamp", "data"]),
        "WebhookEventData": object(json!({
            "id": schema_ref("RecordId"),
            "endpoint": { "type": "string", "description": "The endpoint's slug." },
            "environment": schema_ref("Environment"),
            "created_at": time(),
            "payload": {
                "description": "The record's payload (the new one for `record.replaced`); \
                    absent for `record.deleted`.",
            },
        }), &["id", "endpoint", "environment", "created_at"]),
    })
}

/// The webhooks intake sends after a write is processed, one per event type.
pub fn webhooks() -> Value {
    let events = [
        ("record.created", "A record was created."),
        (
            "record.replaced",
            "A record's payload was replaced (the body carries the new one).",
        ),
        (
            "record.deleted",
            "A record was deleted (the body carries no payload).",
        ),
    ];
    let header = |name: &str, description: &str| {
        json!({ "name": name, "in": "header", "required": true, "description": description,
                "schema": string() })
    };
    let mut out = serde_json::Map::new();
    for (kind, summary) in events {
        let example = json!({
            "type": kind,
            "timestamp": "2026-11-22T09:00:00.123456Z",
            "data": {
                "id": "rec_01m80m0sfsv1yd0kcm7nw4m58e",
                "endpoint": "orders-7k2m9x4q1w8p",
                "environment": "production",
                "created_at": "2026-11-22T09:00:00.120000Z",
                "payload": { "email": "ada@example.com" },
            },
        });
        let mut example = example;
        if kind == "record.deleted"
            && let Some(data) = example["data"].as_object_mut()
        {
            data.remove("payload");
        }
        out.insert(kind.into(), json!({ "post": {
            "operationId": format!("webhook_{}", kind.replace('.', "_")),
            "tags": ["Webhooks"],
            "summary": summary,
            "description": "Sent to the owner webhook of the record's environment and to the \
                caller webhook the write asked for (`X-Webhook-Callback`), each a separate \
                delivery with its own retries, signed following Standard Webhooks with the \
                environment's signing secret. Any 2xx is success; 5xx (but 501, 505), 429, 3xx, \
                timeouts (15 s) and connection errors are retried (production 6 attempts, \
                sandbox 4); other answers give up.",
            "parameters": [
                header("webhook-id", "The record id: the same on every attempt and on every write \
                    to the record; deduplicate on it with the body's `type` and `timestamp`."),
                header("webhook-timestamp", "Unix seconds of this attempt."),
                header("webhook-signature", "Space-separated `v1,<base64 HMAC-SHA256>` entries over \
                    `{webhook-id}.{webhook-timestamp}.{body}`; two during a secret changeover."),
                header("User-Agent", "`svc-Webhook/<version>`."),
                header("X-svc-Record-Id", "The record id."),
                header("X-svc-Delivery-Attempt", "1, 2, …"),
            ],
            "requestBody": { "required": true, "content": { "application/json": {
                "schema": schema_ref("WebhookEvent"), "example": example,
            } } },
            "responses": { "2XX": { "description": "Received (not necessarily processed)." } },
        } }));
    }
    Value::Object(out)
}
