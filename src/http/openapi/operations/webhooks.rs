//! Webhooks: the owner's subscriptions, their recovery, deliveries and signing secrets.

use serde_json::json;

use super::{
    CREATED_AT, cursor, delivery_example, environment_query, limit, query, recovery_example,
    secret_example, subscription_example,
};
use crate::domain::webhooks;
use crate::http::openapi::{Access, BodyKind, Operation, Who, schema_ref};
use crate::http::routes::Route;

pub(super) fn webhook_operations() -> Vec<Operation> {
    let op = |route, who| {
        Operation::new(route)
            .tag("Webhooks")
            .access(Access::Account(who))
    };
    let bad_environment: &[&str] = &["invalid_parameter"];
    let pending = || {
        query(
            "pending",
            "What becomes of its deliveries still pending: `cancel` (the default) marks them \
             `cancelled` in the delivery log in the same commit, never attempted again (an \
             attempt in flight still ends and is logged; a 2xx makes that delivery \
             `delivered`), and each can be redelivered (`redeliver`); `keep` leaves them to run \
             on their schedule, to the URL they were made with. Anything else is 400 \
             `invalid_parameter`.",
            json!({ "type": "string", "enum": ["cancel", "keep"], "default": "cancel" }),
        )
    };
    let settings_rules = "`auth_value` is sent in `auth_header` (default `Authorization`), \
        stored sealed and never shown again. A `url` with credentials (`user:password@`), \
        hop-by-hop or framing header names (`Connection`, `Keep-Alive`, `Upgrade`, `TE`, \
        `Trailer`, `Expect`, `Proxy-*`) as `auth_header`, an unknown event type, a \
        `rate_limit` outside 1 to 10,000 deliveries a second and a `description` over 200 \
        characters or on several lines answer 400 `invalid_webhook`. Changes apply to writes \
        made afterwards; a disabled subscription's deliveries are logged as `skipped`.";
    vec![
        op(Route::GetOwnerWebhook, Who::Owner)
            .summary(
                "The owner webhook of an environment",
                "The environment's first subscription (the spec's owner webhook). Another \
                 `environment` answers 400 `invalid_parameter`.",
            )
            .ok(200, "The webhook.", schema_ref("Subscription"), subscription_example())
            .error(400, bad_environment)
            .error(404, &["webhook_not_found"]),
        op(Route::SetOwnerWebhook, Who::Owner)
            .summary(
                "Set the owner webhook",
                format!(
                    "Replaces the environment's first subscription, or makes it when there is \
                     none. {settings_rules}"
                ),
            )
            .body(
                BodyKind::Json,
                schema_ref("SubscriptionRequest"),
                json!({ "url": "https://example.com/hook", "auth_value": "Bearer s3cret" }),
            )
            .ok(200, "The webhook.", schema_ref("Subscription"), subscription_example())
            .error(400, &["invalid_parameter", "invalid_webhook", "webhook_target_refused"]),
        op(Route::ChangeOwnerWebhook, Who::Owner)
            .summary(
                "Change or pause the owner webhook",
                "Changes the fields given of the first subscription (`{\"enabled\": false}` pauses it); \
                 `null` removes `auth_value` or `rate_limit`.",
            )
            .body(BodyKind::Json, schema_ref("SubscriptionPatchRequest"), json!({ "enabled": false }))
            .ok(200, "The webhook.", schema_ref("Subscription"), subscription_example())
            .error(400, &["invalid_parameter", "invalid_webhook", "webhook_target_refused"])
            .error(404, &["webhook_not_found"]),
        op(Route::DeleteOwnerWebhook, Who::Owner)
            .summary(
                "Remove the owner webhook",
                "Removes the first subscription (the next one becomes first), and cancels its \
                 pending deliveries unless `pending=keep`; deliveries kept go on to the target \
                 they were made with.",
            )
            .param(pending())
            .ok(
                200,
                "Removed.",
                schema_ref("RemovedWebhook"),
                json!({ "environment": "production", "removed": true, "pending": "cancel",
                        "cancelled": 3 }),
            )
            .error(400, bad_environment)
            .error(404, &["webhook_not_found"]),
        op(Route::ListSubscriptions, Who::Owner)
            .summary(
                "The subscriptions of an environment",
                "Every subscription, first one first: each write makes a delivery for every \
                 subscription whose `event_types` take it.",
            )
            .ok(
                200,
                "The subscriptions.",
                schema_ref("SubscriptionList"),
                json!({ "environment": "production", "data": [subscription_example()] }),
            )
            .error(400, bad_environment),
        op(Route::CreateSubscription, Who::Owner)
            .summary(
                "Add a subscription",
                format!(
                    "At most 20 per endpoint and environment (409 `conflict`); ids are \
                     `sub_1`, `sub_2`… in the order they are made and never given again. \
                     {settings_rules}"
                ),
            )
            .body(
                BodyKind::Json,
                schema_ref("SubscriptionRequest"),
                json!({ "url": "https://example.com/hook", "event_types": ["record.created"],
                        "description": "Order sync", "rate_limit": 50 }),
            )
            .ok(201, "The subscription.", schema_ref("Subscription"), subscription_example())
            .error(400, &["invalid_parameter", "invalid_webhook", "webhook_target_refused"])
            .error(409, &["conflict"]),
        op(Route::GetSubscription, Who::Owner)
            .summary("One subscription", "")
            .ok(200, "The subscription.", schema_ref("Subscription"), subscription_example())
            .error(400, bad_environment)
            .error(404, &["subscription_not_found"]),
        op(Route::ChangeSubscription, Who::Owner)
            .summary(
                "Change a subscription",
                format!(
                    "Changes the fields given; `null` removes `auth_value` or `rate_limit`. \
                     {settings_rules}"
                ),
            )
            .body(
                BodyKind::Json,
                schema_ref("SubscriptionPatchRequest"),
                json!({ "event_types": [], "rate_limit": null }),
            )
            .ok(200, "The subscription.", schema_ref("Subscription"), subscription_example())
            .error(400, &["invalid_parameter", "invalid_webhook", "webhook_target_refused"])
            .error(404, &["subscription_not_found"]),
        op(Route::RecoverSubscription, Who::Owner)
            .summary(
                "Send a subscription's failed deliveries again",
                "Schedules a fresh attempt for every given-up or skipped delivery of the \
                 subscription made from `since` until `until` (default, and at most, the time \
                 of the request), in the order they were made, paced by its `rate_limit`. The \
                 walk runs in the background: the subscription's `recovery` shows its progress \
                 (`running`, then `scheduled` until its last delivery has been attempted, then \
                 `finished`). One at a time per subscription: 409 `conflict` while one is \
                 running or scheduled. Once it has finished, another whose window overlaps its \
                 window is refused for the recovery cooldown (`[webhooks] recovery_cooldown`, \
                 10 minutes by default, from its `finished_at`): 429 `recovery_cooldown` with \
                 `Retry-After`. Deliveries the retention purge has removed (finished, and made \
                 before the environment's retention window) are not in the log to be sent \
                 again: a window reaching before it finds none of them.",
            )
            .body(BodyKind::Json, schema_ref("RecoveryRequest"), json!({ "since": "2026-11-20T00:00:00Z" }))
            .ok(202, "The recovery, started.", schema_ref("Recovery"), recovery_example(true))
            .error(400, &["invalid_parameter"])
            .error(404, &["subscription_not_found"])
            .error(409, &["conflict"])
            .error(429, &["recovery_cooldown"]),
        op(Route::TestSubscription, Who::Owner)
            .summary(
                "Send a test event",
                "Signs and sends one `webhook.test` event to the subscription's URL now, \
                 exactly as a delivery would be sent (same headers, secret, timeout and egress \
                 rule), and answers with what the receiver said: 200 also when the receiver \
                 refused or could not be reached (`delivered` false, `status` or `error` says \
                 why). Its `webhook-id` starts with `test_`. It is logged in the delivery log, \
                 marked as a test (`test`, event `webhook.test`), with its one attempt; it is \
                 never retried or redelivered, and the subscription's health is left alone.",
            )
            .ok(200, "The receiver's answer.", schema_ref("TestEventResult"), json!({
                "webhook_id": "test_4k2m9x4q1w8pz3n5b7c6d1f0gh",
                "delivery_id": 8,
                "delivered": true,
                "status": 204,
                "response_body": "",
                "error": null,
                "duration_ms": 41.7,
                "request_body": "{\"type\":\"webhook.test\",\"timestamp\":\"2026-11-27T10:00:00.000000Z\",\"data\":{\"id\":\"test_4k2m9x4q1w8pz3n5b7c6d1f0gh\",\"endpoint\":\"orders-7k2m9x4q1w8p\",\"environment\":\"sandbox\",\"created_at\":\"2026-11-27T10:00:00.000000Z\",\"payload\":{\"message\":\"A test event from intake: your receiver is reachable and can verify the signature.\"}}}",
            }))
            .error(400, bad_environment)
            .error(404, &["subscription_not_found"]),
        op(Route::GetCallerRecovery, Who::Owner)
            .summary("The latest recovery of the caller webhooks", "")
            .ok(200, "The recovery.", schema_ref("Recovery"), recovery_example(false))
            .error(400, bad_environment)
            .error(404, &["recovery_not_found"]),
        op(Route::RecoverCallerWebhooks, Who::Owner)
            .summary(
                "Send the caller webhooks' failed deliveries again",
                "Like a subscription's recovery, for every given-up caller-webhook delivery of \
                 the environment made in the window (\"redeliver all failed since T\"): the \
                 window ends at the request at the latest, one at a time per environment (409 \
                 `conflict` while one is running or scheduled), and another over an \
                 overlapping window waits for the recovery cooldown after one has finished \
                 (429 `recovery_cooldown` with `Retry-After`).",
            )
            .body(BodyKind::Json, schema_ref("RecoveryRequest"), json!({ "since": "2026-11-20T00:00:00Z" }))
            .ok(202, "The recovery, started.", schema_ref("Recovery"), recovery_example(false))
            .error(400, &["invalid_parameter"])
            .error(409, &["conflict"])
            .error(429, &["recovery_cooldown"]),
        op(Route::DeleteSubscription, Who::Owner)
            .summary(
                "Delete a subscription",
                "Cancels its pending deliveries unless `pending=keep` (deliveries kept go on to \
                 the target they were made with); its id is not given again.",
            )
            .param(pending())
            .ok(
                200,
                "Removed.",
                schema_ref("RemovedSubscription"),
                json!({ "id": "sub_2", "environment": "production", "removed": true,
                        "pending": "cancel", "cancelled": 3 }),
            )
            .error(400, bad_environment)
            .error(404, &["subscription_not_found"]),
        op(Route::ListDeliveries, Who::Member)
            .summary(
                "The delivery log",
                "Of one environment, or of one record; newest first. Every member sees every \
                 delivery, each as far as they may: the owner all of it; a collaborator an \
                 owner subscription's `url` never (`null`: subscriptions are the owner's), a \
                 caller webhook's in full only when their own key made the write (its origin \
                 otherwise), and the body and receivers' answers (`getDelivery`) only with the \
                 `read` permission while the endpoint is active. `withheld` names what is not \
                 shown. A delivery is kept for its environment's retention window (`[retention]`, \
                 counted from its `created_at`), then removed with its attempts by the hourly \
                 retention purge once it has finished (a pending one when it finishes).",
            )
            .param(environment_query("Which environment's deliveries."))
            .param(query("record_id", "Only this record's deliveries.", schema_ref("RecordId")))
            .param(query(
                "subscription",
                "Only this subscription's deliveries (`sub_N`). With any filter, a page reads \
                 at most 10,000 deliveries: it may hold fewer than `limit` with a \
                 `next_cursor` to go on.",
                json!({ "type": "string", "pattern": "^sub_[1-9][0-9]*$" }),
            ))
            .param(query(
                "state",
                "Only deliveries in this state: `pending` (no attempt yet), `failing` (pending \
                 after a failed attempt), `delivered`, `given_up`, `skipped`, `cancelled`.",
                json!({ "type": "string",
                        "enum": ["pending", "failing", "delivered", "given_up", "skipped",
                                 "cancelled"] }),
            ))
            .param(query(
                "kind",
                "Only owner-subscription or caller-webhook deliveries.",
                json!({ "type": "string", "enum": ["owner", "caller"] }),
            ))
            .param(query(
                "url",
                "Only deliveries whose URL as the caller is shown it (credentials masked; only \
                 the origin, or nothing, where it is withheld) contains this text, in any \
                 case: a URL the caller may not see is never matched.",
                json!({ "type": "string", "maxLength": 2048 }),
            ))
            .param(limit(webhooks::log::LIST_LIMIT_DEFAULT, webhooks::log::LIST_LIMIT_MAX))
            .param(cursor())
            .ok(200, "One page.", schema_ref("DeliveryPage"), json!({ "data": [delivery_example()], "pagination": {} }))
            .error(400, &["invalid_parameter", "invalid_record_id"]),
        op(Route::GetDelivery, Who::Member)
            .summary(
                "One delivery",
                "With the body sent and every attempt, as far as the caller may see them (see \
                 `listDeliveries`): without the `read` permission, or while the endpoint is \
                 inactive, a collaborator gets `body` and every attempt's `response_body` as \
                 `null`, with `body` in `withheld`. 404 `delivery_not_found` also once the \
                 retention purge has removed it (see `listDeliveries`).",
            )
            .ok(200, "The delivery.", schema_ref("DeliveryDetail"), {
                let mut d = delivery_example();
                d["body"] = json!("{\"type\":\"record.created\",…}");
                d["attempt_log"] = json!([]);
                d
            })
            .error(404, &["delivery_not_found"]),
        op(
            Route::Redeliver,
            Who::Owner,
        )
        .summary(
            "Send a given-up delivery again",
            "A fresh attempt budget, the first attempt at once; 409 `conflict` unless given up, \
             skipped or cancelled.",
        )
        .ok(200, "The delivery.", schema_ref("Delivery"), delivery_example())
        .error(404, &["delivery_not_found"])
        .error(409, &["conflict"]),
        op(
            Route::RetryDelivery,
            Who::Owner,
        )
        .summary(
            "Attempt a pending delivery now",
            "Brings the next attempt of a pending (or failing) delivery forward to now. While \
             an attempt is in flight the request is kept: when that attempt ends without \
             delivering or giving up, the next one is due at once instead of after the retry \
             schedule's wait. It counts as one of the delivery's attempts: the budget is not \
             reset (to send a given-up delivery again, redeliver it). Recorded in the audit \
             log as `delivery.retried`. 409 `conflict` unless pending.",
        )
        .ok(200, "The delivery, due now.", schema_ref("Delivery"), {
            let mut d = delivery_example();
            d["state"] = json!("pending");
            d["failing"] = json!(true);
            d["attempts"] = json!(3);
            d["next_attempt_at"] = json!(CREATED_AT);
            d["finished_at"] = json!(null);
            d
        })
        .error(404, &["delivery_not_found"])
        .error(409, &["conflict"]),
        op(
            Route::GetWebhookSecret,
            Who::Member,
        )
        .summary(
            "A webhook signing secret",
            "Another `environment` matches no route (404 `route_not_found`).",
        )
        .ok(200, "The secret.", schema_ref("WebhookSecret"), secret_example())
        .error(403, &["token_required"])
        .error(404, &["route_not_found"]),
        op(
            Route::ReissueWebhookSecret,
            Who::Owner,
        )
        .summary(
            "Reissue a signing secret",
            "The previous secret keeps signing (second signature) for 24 hours; another \
             `environment` matches no route (404 `route_not_found`).",
        )
        .ok(200, "The new secret.", schema_ref("WebhookSecret"), secret_example())
        .error(404, &["route_not_found"]),
    ]
}
