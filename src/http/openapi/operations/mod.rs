//! Every operation of the API, documented once, one file per resource. To document a new
//! route of the table (`http::routes`): add its `Operation::new(Route::…)` to its resource's
//! list (tag, summary, access, query/header parameters, body, success response with an
//! example, and the error codes only it answers; method, path and id are the table's), then
//! give `tests/openapi.rs` a request for its success and for each of its error statuses; the
//! tests fail until both are done. Bodies are `schema_ref`s to schemas of `schemas/`, never
//! inline: client generators name their types after them (`tests/openapi.rs` checks it too).

mod account;
mod data;
mod endpoints;
mod server;
mod webhooks;

use serde_json::{Value, json};

use super::{In, Operation, Param, schema_ref};

/// A path parameter by its name in the templates.
pub fn path_param(name: &str) -> Param {
    let (name, description, schema): (&'static str, &'static str, Value) = match name {
        "slug" => (
            "slug",
            "The endpoint's slug, e.g. `orders-7k2m9x4q1w8p`.",
            json!({ "type": "string", "pattern": "^[a-z0-9-]+$" }),
        ),
        "record_id" => (
            "record_id",
            "A record id; a malformed one answers 400 `invalid_record_id`.",
            schema_ref("RecordId"),
        ),
        "environment" => (
            "environment",
            "`sandbox` or `production`.",
            schema_ref("Environment"),
        ),
        "token" => (
            "token",
            "The invitation token from the invitation link.",
            json!({ "type": "string" }),
        ),
        "subscription_id" => (
            "subscription_id",
            "A subscription id, `sub_1`, `sub_2`…; another form answers 400 \
             `invalid_parameter`.",
            json!({ "type": "string", "pattern": "^sub_[1-9][0-9]*$" }),
        ),
        "account_id" => (
            "account_id",
            "The collaborator's account id.",
            json!({ "type": "integer", "minimum": 0 }),
        ),
        _ => (
            "id",
            "The id of the resource the path names.",
            json!({ "type": "string" }),
        ),
    };
    Param {
        name,
        at: In::Path,
        required: true,
        description: description.into(),
        schema,
        sample: None,
    }
}

fn query(name: &'static str, description: impl Into<String>, schema: Value) -> Param {
    Param {
        name,
        at: In::Query,
        required: false,
        description: description.into(),
        schema,
        sample: None,
    }
}

fn header(name: &'static str, description: impl Into<String>) -> Param {
    Param {
        name,
        at: In::Header,
        required: false,
        description: description.into(),
        schema: json!({ "type": "string" }),
        sample: None,
    }
}

fn limit(default: usize, max: usize) -> Param {
    query(
        "limit",
        "Page size; out of range answers 400 `invalid_parameter`.",
        json!({ "type": "integer", "minimum": 1, "maximum": max, "default": default }),
    )
}

fn cursor() -> Param {
    query(
        "cursor",
        "The opaque `next_cursor` of the previous page; one from another listing answers 400 \
         `invalid_parameter`.",
        json!({ "type": "string" }),
    )
}

fn environment_query(description: &'static str) -> Param {
    query(
        "environment",
        description,
        json!({ "type": "string", "enum": ["sandbox", "production"], "default": "sandbox" }),
    )
}

fn with_sample(mut param: Param, sample: &'static str) -> Param {
    param.sample = Some(sample);
    param
}

/// The caller-webhook headers of the three writes.
fn webhook_headers(op: Operation) -> Operation {
    op.param(header(
        "X-Webhook-Callback",
        "An absolute http(s) URL (at most 2,048 characters) to send this write's webhook to \
         (a caller webhook, besides the owner's), without credentials (`user:password@` \
         answers 400 `invalid_webhook`: send them in `X-Webhook-Auth`). Required when either \
         header below is sent.",
    ))
    .param(header(
        "X-Webhook-Auth",
        "A value sent with the caller webhook in `X-Webhook-Auth-Header` (stored sealed).",
    ))
    .param(header(
        "X-Webhook-Auth-Header",
        "The header carrying `X-Webhook-Auth` (default `Authorization`); headers intake sets \
         itself (`Content-Type`, `webhook-*`, `User-Agent`…) and hop-by-hop or framing \
         headers (`Connection`, `Keep-Alive`, `Upgrade`, `TE`, `Trailer`, `Expect`, \
         `Proxy-*`) answer 400 `invalid_webhook`.",
    ))
    .error(400, &["invalid_webhook"])
}

const RECORD_ID: &str = "rec_01m80m0sfsv1yd0kcm7nw4m58e";
const CREATED_AT: &str = "2026-11-22T03:15:27.353008Z";

fn record_example() -> Value {
    json!({ "id": RECORD_ID, "payload": { "email": "ada@example.com", "total": 42.5 },
            "created_at": CREATED_AT, "updated_at": CREATED_AT })
}

fn endpoint_example() -> Value {
    json!({
        "slug": "orders-7k2m9x4q1w8p", "name": "Orders", "description": null,
        "required_fields": ["email"], "schema": null,
        "retention": { "sandbox": null, "production": null },
        "effective_retention": { "sandbox": "30d", "production": "60d" }, "active": true, "environment": "sandbox",
        "deployed": false, "deployed_at": null, "deploy_request": null, "last_rejection": null, "monthly_quota": null,
        "created_at": CREATED_AT, "role": "owner",
        "permissions": ["create", "read", "replace", "delete"],
        "sandbox_key": "tm_test_…", "production_key": "tm_live_…",
    })
}

fn account_example() -> Value {
    json!({ "id": 2, "email": "ada@example.com", "role": "member", "suspended": false,
            "created_at": CREATED_AT })
}

fn invitation_example() -> Value {
    json!({ "id": 1, "email": "ada@example.com", "permissions": ["create", "read"],
            "status": "pending", "created_at": CREATED_AT, "expires_at": "2026-11-29T03:15:27.353008Z",
            "accept_url": "http://127.0.0.1:8080/invitations/inv_…", "mail_id": 3 })
}

fn collaborator_example() -> Value {
    json!({ "account_id": 2, "email": "ada@example.com", "suspended": false,
            "permissions": ["create", "read"], "added_at": CREATED_AT,
            "sandbox_key_id": "key_3f9a…", "production_key_id": "key_8c1d…" })
}

fn delivery_example() -> Value {
    json!({ "id": 7, "record_id": RECORD_ID, "event": "record.created",
            "environment": "production", "kind": "owner",
            "subscription": "sub_1", "url": "https://example.com/hook",
            "state": "delivered", "failing": false, "attempts": 1, "max_attempts": 6,
            "next_attempt_at": null,
            "created_at": CREATED_AT, "finished_at": CREATED_AT, "withheld": [],
            "erased": false, "test": false })
}

fn subscription_example() -> Value {
    json!({ "id": "sub_1", "environment": "production", "url": "https://example.com/hook",
            "auth_header": "authorization", "auth_value_set": true, "enabled": true,
            "description": "Order sync", "event_types": ["record.created", "record.deleted"],
            "rate_limit": 50, "created_at": CREATED_AT, "updated_at": CREATED_AT,
            "health": { "last_success_at": CREATED_AT, "last_failure_at": null,
                        "failing_since": null, "failed_attempts": 0 },
            "auto_disabled_at": null, "recovery": null })
}

fn recovery_example(subscription: bool) -> Value {
    json!({ "environment": "production", "subscription": subscription.then_some("sub_1"),
            "state": "running", "since": "2026-11-20T00:00:00.000000Z", "until": CREATED_AT,
            "requested_at": CREATED_AT, "scheduled": 0, "finished_at": null })
}

fn secret_example() -> Value {
    json!({ "environment": "production", "secret": "whsec_…", "created_at": CREATED_AT })
}

fn mail_example() -> Value {
    json!({ "id": 1, "kind": "test", "to": "you@example.com", "subject": "intake test e-mail",
            "status": "sent", "attempts": 1, "last_error": null, "created_at": CREATED_AT,
            "next_attempt_at": null, "sent_at": CREATED_AT })
}

fn readiness_example(ready: bool) -> Value {
    let storage = match ready {
        true => json!({ "name": "storage", "ok": true }),
        false => json!({ "name": "storage", "ok": false,
                         "problem": "the data dir does not take a synced write: No space left on device" }),
    };
    json!({ "ready": ready, "checks": [storage,
        { "name": "ingest_writer", "ok": true }, { "name": "search_index", "ok": true }] })
}

/// Every operation, in the order the document lists them.
pub fn all() -> Vec<Operation> {
    let mut ops = data::data_operations();
    ops.push(data::stream_operation());
    ops.extend(server::documentation_operations());
    ops.extend(account::session_operations());
    ops.extend(account::account_operations());
    ops.extend(endpoints::endpoint_operations());
    ops.extend(endpoints::collaborator_operations());
    ops.extend(endpoints::key_operations());
    ops.extend(webhooks::webhook_operations());
    ops.extend(server::administration_operations());
    ops
}

#[cfg(test)]
mod tests {
    use crate::http::routes::Route;

    /// Every route of the table is documented by exactly one operation.
    #[test]
    fn every_route_has_one_operation() {
        let documented: Vec<&str> = super::all().iter().map(|op| op.id).collect();
        for route in Route::ALL {
            let times = documented
                .iter()
                .filter(|id| **id == route.operation_id())
                .count();
            assert_eq!(times, 1, "{route:?}");
        }
        assert_eq!(documented.len(), Route::ALL.len());
    }
}
