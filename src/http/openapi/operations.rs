//! Every operation of the API, declared once. To document a new route: add its
//! [`Operation`] to [`all`] (method, the route table's path template, id, tag, summary,
//! access, query/header parameters, body, success response with an example, and the error
//! codes only it answers), then give `tests/openapi.rs` a request for its success and for
//! each of its error statuses; the test fails until both are done. Bodies are `schema_ref`s
//! to schemas of `schemas.rs`, never inline: client generators name their types after them
//! (`tests/openapi.rs` checks it too).

use serde_json::{Value, json};

use super::{Access, BodyKind, DATA_TAG, In, Operation, Param, STREAM_TAG, Who, schema_ref};
use crate::domain::{mail, poll, records, search, webhooks};
use crate::store::Permission;
use crate::workers::request_log;

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
        description,
        schema,
        sample: None,
    }
}

fn query(name: &'static str, description: &'static str, schema: Value) -> Param {
    Param {
        name,
        at: In::Query,
        required: false,
        description,
        schema,
        sample: None,
    }
}

fn header(name: &'static str, description: &'static str) -> Param {
    Param {
        name,
        at: In::Header,
        required: false,
        description,
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
        "required_fields": ["email"], "active": true, "environment": "sandbox",
        "deployed": false, "deployed_at": null, "deploy_request": null, "monthly_quota": null,
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
    json!({ "id": 7, "record_id": RECORD_ID, "environment": "production", "kind": "owner",
            "subscription": "sub_1", "url": "https://example.com/hook",
            "state": "delivered", "failing": false, "attempts": 1, "max_attempts": 6,
            "next_attempt_at": null,
            "created_at": CREATED_AT, "finished_at": CREATED_AT, "withheld": [] })
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
    let mut ops = data_operations();
    ops.push(stream_operation());
    ops.extend(documentation_operations());
    ops.extend(session_operations());
    ops.extend(account_operations());
    ops.extend(endpoint_operations());
    ops.extend(collaborator_operations());
    ops.extend(key_operations());
    ops.extend(webhook_operations());
    ops.extend(administration_operations());
    ops
}

/// The parameters of a link from a record's creation to an operation on that record.
fn record_link() -> Value {
    json!({ "slug": "$request.path.slug", "record_id": "$response.body#/id" })
}

/// The seven data operations, in the spec's order.
fn data_operations() -> Vec<Operation> {
    let data = |method, path, id| Operation::new(method, path, id).tag(DATA_TAG);
    vec![
        webhook_headers(
            data("post", "/api/v1/data/{slug}", "createRecord")
                .summary(
                    "Create a record",
                    "Stores the payload durably (fsync) before answering 202. A retry with the \
                     same `Idempotency-Key` and payload within 24 hours returns the original \
                     answer and creates nothing.",
                )
                .access(Access::DataKey(Permission::Create))
                .param(header(
                    "Idempotency-Key",
                    "1 to 255 printable ASCII characters, scoped to the endpoint and environment; \
                     the same key with another payload answers 409 `idempotency_key_conflict`.",
                ))
                .body(
                    BodyKind::Payload,
                    schema_ref("Payload"),
                    json!({ "email": "ada@example.com", "total": 42.5 }),
                )
                .ok(
                    202,
                    "Stored; the record can be read at once.",
                    schema_ref("Accepted"),
                    json!({ "id": RECORD_ID, "created_at": CREATED_AT, "status": "accepted" }),
                ),
        )
        .error(400, &["invalid_idempotency_key"])
        .error(409, &["idempotency_key_conflict"])
        .link("GetRecord", "getRecord", record_link())
        .link("ReplaceRecord", "replaceRecord", record_link())
        .link("DeleteRecord", "deleteRecord", record_link()),
        data("get", "/api/v1/data/{slug}/{record_id}", "getRecord")
            .summary("Read one record", "The record with its payload as stored.")
            .access(Access::DataKey(Permission::Read))
            .ok(200, "The record.", schema_ref("Record"), record_example())
            .error(404, &["record_not_found"]),
        data("get", "/api/v1/data/{slug}", "listRecords")
            .summary(
                "List records, newest first",
                "Ordered by `(created_at, id)`, newest first; follow `pagination.next_cursor` \
                 until it is absent. Paging never repeats or skips a record.",
            )
            .access(Access::DataKey(Permission::Read))
            .param(with_sample(
                limit(records::LIST_LIMIT_DEFAULT, records::LIST_LIMIT_MAX),
                "10",
            ))
            .param(cursor())
            .ok(
                200,
                "One page of records.",
                schema_ref("RecordPage"),
                json!({ "data": [record_example()], "pagination": { "next_cursor": "…" } }),
            )
            .error(400, &["invalid_parameter"]),
        data("get", "/api/v1/data/{slug}/search", "searchRecords")
            .summary(
                "Search records by payload text",
                "Case-insensitive substring match against the stored payload text (compact \
                 JSON with numbers as sent, keys included), newest first, exact whatever the \
                 index says. A page can hold fewer than `limit` records and still carry a \
                 `next_cursor`.",
            )
            .access(Access::DataKey(Permission::Read))
            .param(Param {
                required: true,
                sample: Some(super::examples::EXAMPLE_VALUE),
                ..query(
                    "q",
                    "The text to find: 3 to 200 characters.",
                    json!({ "type": "string", "minLength": 3, "maxLength": 200 }),
                )
            })
            .param(query(
                "start",
                "Window start, inclusive: `YYYY-MM-DD` (UTC midnight) or RFC 3339; default 30 \
                 days before now.",
                json!({ "type": "string" }),
            ))
            .param(query(
                "end",
                "Window end, inclusive: `YYYY-MM-DD` or RFC 3339; default now. `start` after \
                 `end` answers 400 `invalid_parameter`.",
                json!({ "type": "string" }),
            ))
            .param(with_sample(
                limit(search::LIMIT_DEFAULT, search::LIMIT_MAX),
                "10",
            ))
            .param(cursor())
            .ok(
                200,
                "One page of matching records.",
                schema_ref("RecordPage"),
                json!({ "data": [record_example()], "pagination": {} }),
            )
            .error(400, &["invalid_parameter"]),
        data("get", "/api/v1/data/{slug}/poll", "pollRecords")
            .summary(
                "Poll created records, oldest first",
                "A gap-free feed. Without `since` and `cursor` it subscribes from now (empty \
                 `data`, a `poll_cursor`). Each answer holds `next_cursor` (call again at once) \
                 or `poll_cursor` (caught up: call again later). `since` and `cursor` together \
                 answer 400 `invalid_parameter`.",
            )
            .access(Access::DataKey(Permission::Read))
            .param(query(
                "since",
                "Start at this instant: `YYYY-MM-DD` (UTC midnight) or RFC 3339.",
                json!({ "type": "string" }),
            ))
            .param(cursor())
            .param(with_sample(
                limit(poll::LIMIT_DEFAULT, poll::LIMIT_MAX),
                "100",
            ))
            .ok(
                200,
                "Records created after the position, oldest first.",
                schema_ref("PollPage"),
                json!({ "data": [record_example()], "poll_cursor": "…" }),
            )
            .error(400, &["invalid_parameter"]),
        webhook_headers(
            data("put", "/api/v1/data/{slug}/{record_id}", "replaceRecord")
                .summary(
                    "Replace a record",
                    "Replaces the whole payload; `id` and `created_at` stay, `updated_at` \
                     changes. Durable before the 202.",
                )
                .access(Access::DataKey(Permission::Replace))
                .body(
                    BodyKind::Payload,
                    schema_ref("Payload"),
                    json!({ "email": "ada@example.com", "total": 40 }),
                )
                .ok(
                    202,
                    "Replaced.",
                    schema_ref("Accepted"),
                    json!({ "id": RECORD_ID, "status": "accepted" }),
                ),
        )
        .error(404, &["record_not_found"]),
        webhook_headers(
            data("delete", "/api/v1/data/{slug}/{record_id}", "deleteRecord")
                .summary(
                    "Delete a record",
                    "Durable before the 202; a later read answers 404.",
                )
                .access(Access::DataKey(Permission::Delete))
                .ok(
                    202,
                    "Deleted.",
                    schema_ref("Accepted"),
                    json!({ "id": RECORD_ID, "status": "accepted" }),
                ),
        )
        .error(404, &["record_not_found"]),
    ]
}

/// The change stream: beside the data operations, not one of the seven (an endpoint's own
/// document and its test page show those).
fn stream_operation() -> Operation {
    Operation::new("get", "/api/v1/data/{slug}/stream", "streamRecords")
        .tag(STREAM_TAG)
        .summary(
            "Stream changes (Server-Sent Events)",
            "Each processed create, replace and delete of this environment as an event, in \
             commit order: `id` (resume with it), `event` (`record.created`, \
             `record.replaced`, `record.deleted`) and `data`, the webhook body. Without \
             `Last-Event-ID` (or `cursor`) it starts from now; with it, every later event \
             follows once, in order. A comment line goes out after `[stream] heartbeat` (15 s) \
             without an event. A reader that leaves its buffer full for `[stream] \
             slow_reader_timeout` (30 s) gets a `stream.error` event (`stream_reader_too_slow`) \
             and is disconnected. The key is checked again whenever access changes and at \
             every heartbeat: once it no longer allows the stream (replaced past its grace \
             period, revoked, its read permission removed, its account suspended, the endpoint \
             deactivated or deleted), no later event is sent and the stream ends with a \
             `stream.error` event carrying the code a data call with the key would get \
             (`invalid_api_key`, `missing_permission_read`, …). A key holder holds at most \
             `[stream] max_per_key` (10) streams of an endpoint environment (429 \
             `too_many_streams`), a server at most `[stream] max_total` (503 \
             `streams_at_capacity`). Counted once as a data call.",
        )
        .access(Access::DataKey(Permission::Read))
        .param(header(
            "Last-Event-ID",
            "The id of the last event received: the stream continues after it. An id older \
             than the events kept answers 410 `stream_cursor_expired`.",
        ))
        .param(query(
            "cursor",
            "An event id, used when `Last-Event-ID` is absent (the header wins).",
            json!({ "type": "string" }),
        ))
        .ok_text(
            "An open stream of events (`text/event-stream`).",
            "text/event-stream",
            "retry: 1000\n: stream open\n\nid: ZQAAAAAAAAACAAZhN0sd3zEAAAAAAAAAAAAAAAAAAAAB\n\
             event: record.created\ndata: {\"type\":\"record.created\",\"timestamp\":\"2026-11-22T08:00:00.000000Z\",\
             \"data\":{\"id\":\"rec_000sgkejrxvwrk2r1qt58rqhjy\",\"endpoint\":\"orders-7k2m9x4q1w8p\",\
             \"environment\":\"sandbox\",\"created_at\":\"2026-11-22T08:00:00.000000Z\",\
             \"payload\":{\"email\":\"ada@example.com\"}}}\n\n",
        )
        .error(400, &["invalid_parameter"])
        .error(410, &["stream_cursor_expired"])
        .error(429, &["too_many_streams"])
        .error(503, &["streams_at_capacity"])
}

fn documentation_operations() -> Vec<Operation> {
    vec![
        Operation::new("get", "/api/v1/openapi.json", "getOpenApi")
            .tag("Documentation")
            .summary(
                "This document",
                "The OpenAPI 3.1 document of the whole API.",
            )
            .ok(
                200,
                "The document.",
                schema_ref("OpenApiDocument"),
                json!({ "openapi": "3.1.0", "info": {}, "paths": {} }),
            ),
        Operation::new(
            "get",
            "/api/v1/data/{slug}/openapi.json",
            "getEndpointOpenApi",
        )
        .tag("Documentation")
        .summary(
            "One endpoint's data API",
            "The seven data operations on this endpoint's own paths, its payload schema with \
             its required fields, and code samples (`x-codeSamples`: curl, JavaScript, Python) \
             with the placeholders `YOUR_SANDBOX_KEY` and `YOUR_RECORD_ID`. Readable with any \
             key of the endpoint that a data call would accept (any permission), or the \
             token or session of its owner or a collaborator. Not counted as a data call.",
        )
        .access(Access::KeyOrMember)
        .ok(
            200,
            "The endpoint's document.",
            schema_ref("OpenApiDocument"),
            json!({ "openapi": "3.1.0", "info": {}, "paths": {} }),
        ),
        Operation::new("get", "/healthz", "health")
            .tag("Health")
            .summary("Liveness", "Answers while the server runs.")
            .ok(
                200,
                "Running.",
                schema_ref("Health"),
                json!({ "status": "ok" }),
            ),
        Operation::new("get", "/readyz", "ready")
            .tag("Health")
            .summary(
                "Readiness",
                "200 when the server can take writes, else 503, with each check: `storage` \
                 (the latest ingest commit succeeded and the data dir takes a synced write), \
                 `ingest_writer` (the writer thread runs), `search_index` (built, and at most \
                 `[operations] ready_max_index_lag` change-log entries behind).",
            )
            .ok(
                200,
                "Ready.",
                schema_ref("Readiness"),
                readiness_example(true),
            )
            .also(
                503,
                "Not ready: the failed checks carry a `problem`.",
                schema_ref("Readiness"),
                readiness_example(false),
            ),
        Operation::new("get", "/metrics", "metrics")
            .tag("Health")
            .summary(
                "Prometheus metrics",
                "The Prometheus text exposition format 0.0.4: requests by route, method and \
                 status, latencies, ingest batches and commits, search index lag, webhook \
                 attempts and backlog, the mail outbox (docs/src/operations.md). Open unless \
                 `[operations] metrics_token` is set; then that token is the bearer.",
            )
            .access(Access::MetricsToken)
            .ok_text(
                "The metrics.",
                "text/plain; version=0.0.4; charset=utf-8",
                "# TYPE intake_ingest_queue_depth gauge\nintake_ingest_queue_depth 0\n",
            ),
    ]
}

fn session_operations() -> Vec<Operation> {
    vec![
        Operation::new("post", "/api/v1/auth/login", "login")
            .tag("Session")
            .summary(
                "Log in",
                "Checks e-mail and password and sets the session cookie. Failed logins are \
                 limited per account at one client address and per client address (429 with \
                 `Retry-After`, even for the right password); another address is not \
                 affected.",
            )
            .body(
                BodyKind::Json,
                schema_ref("LoginRequest"),
                json!({ "email": "ada@example.com", "password": "correct horse battery" }),
            )
            .ok(
                200,
                "Logged in; `Set-Cookie` carries the session.",
                schema_ref("Session"),
                json!({ "account": account_example(), "expires_at": "2026-11-23T03:15:27.353008Z" }),
            )
            .error(401, &["invalid_credentials"])
            .error(403, &["account_suspended"])
            .error(429, &["too_many_login_attempts"]),
        Operation::new("post", "/api/v1/auth/logout", "logout")
            .tag("Session")
            .summary(
                "Log out",
                "Ends the session of the cookie sent, if any, and clears the cookie; from \
                 another origin (`Origin`, `Sec-Fetch-Site`) 403 `cross_site_request`.",
            )
            .ok(
                200,
                "Logged out.",
                schema_ref("LoggedOut"),
                json!({ "logged_out": true }),
            )
            .error(403, &["cross_site_request"]),
        Operation::new("get", "/api/v1/auth/session", "getSession")
            .tag("Session")
            .summary(
                "Who is logged in",
                "The account of the session cookie (or token).",
            )
            .access(Access::Account(Who::Any))
            .ok(
                200,
                "The account.",
                schema_ref("Account"),
                account_example(),
            ),
        Operation::new("get", "/api/v1/invitations/{token}", "getInvitation")
            .tag("Invitations")
            .summary(
                "What an invitation offers",
                "The token is the credential.",
            )
            .access(Access::Invitation)
            .ok(
                200,
                "The invitation.",
                schema_ref("InvitationPreview"),
                json!({ "endpoint_name": "Orders", "email": "ada@example.com",
                        "permissions": ["create", "read"], "invited_by": "owner@example.com",
                        "expires_at": CREATED_AT, "account_exists": false }),
            )
            .error(404, &["invitation_not_found"])
            .error(
                410,
                &[
                    "invitation_expired",
                    "invitation_revoked",
                    "invitation_already_accepted",
                ],
            ),
        Operation::new(
            "post",
            "/api/v1/invitations/{token}/accept",
            "acceptInvitation",
        )
        .tag("Invitations")
        .summary(
            "Accept an invitation",
            "Logged in (token or cookie): accepts for that account, whose e-mail must be the \
             invited one. Not logged in: `{\"password\"}` (10 to 1024 characters) creates the \
             invited account and logs it in (`Set-Cookie`).",
        )
        .access(Access::Invitation)
        .body(
            BodyKind::OptionalJson,
            schema_ref("AcceptInvitationRequest"),
            json!({ "password": "correct horse battery" }),
        )
        .ok(
            200,
            "Accepted: the account and the endpoint as it now sees it.",
            schema_ref("Acceptance"),
            json!({ "account": account_example(), "endpoint": endpoint_example() }),
        )
        .error(401, &["invalid_token", "session_expired", "login_required"])
        .error(403, &["account_suspended", "invitation_for_other_account"])
        .error(404, &["invitation_not_found"])
        .error(409, &["conflict"])
        .error(
            410,
            &[
                "invitation_expired",
                "invitation_revoked",
                "invitation_already_accepted",
            ],
        ),
    ]
}

fn account_operations() -> Vec<Operation> {
    let any = |method, path, id| {
        Operation::new(method, path, id)
            .tag("Account")
            .access(Access::Account(Who::Any))
    };
    let token = json!({ "id": "tok_9f2c4e1a7b3d5f60", "name": "ci", "created_at": CREATED_AT });
    let notification = json!({ "id": 4, "kind": "deployed", "endpoint_slug": "orders-7k2m9x4q1w8p",
        "message": "Orders was deployed.", "created_at": CREATED_AT, "read": false, "read_at": null });
    vec![
        any("get", "/api/v1/manage/account", "getAccount")
            .summary("The caller's account", "")
            .ok(200, "The account.", schema_ref("Account"), account_example()),
        any("post", "/api/v1/manage/account/password", "changePassword")
            .summary(
                "Change the password",
                "The new password has 10 to 1024 characters. Every other session of the \
                 account ends (the one making the change stays; with a token, all end); \
                 personal API tokens stay valid.",
            )
            .body(
                BodyKind::Json,
                schema_ref("PasswordChangeRequest"),
                json!({ "current_password": "old password", "new_password": "a new long password" }),
            )
            .ok(200, "Changed.", schema_ref("Account"), account_example())
            .error(401, &["invalid_credentials"]),
        any("get", "/api/v1/manage/tokens", "listTokens")
            .summary("The caller's tokens", "Never the tokens themselves.")
            .ok(200, "The tokens.", schema_ref("TokenList"), json!({ "data": [token] })),
        any("post", "/api/v1/manage/tokens", "createToken")
            .summary("Create a token", "The response holds `token`, shown only this once.")
            .body(
                BodyKind::Json,
                schema_ref("TokenRequest"),
                json!({ "name": "ci" }),
            )
            .ok(201, "Created.", schema_ref("NewToken"), {
                let mut t = token.clone();
                t["token"] = json!("itk_…");
                t
            }),
        any("delete", "/api/v1/manage/tokens/{id}", "revokeToken")
            .summary("Revoke a token", "It stops working at once.")
            .ok(
                200,
                "Revoked.",
                schema_ref("RevokedToken"),
                json!({ "id": "tok_9f2c4e1a7b3d5f60", "revoked": true }),
            )
            .error(404, &["token_not_found"]),
        any("get", "/api/v1/manage/notifications", "listNotifications")
            .summary("The caller's notifications", "Newest first.")
            .param(query(
                "unread",
                "`true`: unread ones only.",
                json!({ "type": "string", "enum": ["true", "false"] }),
            ))
            .ok(200, "The notifications.", schema_ref("NotificationList"), json!({ "data": [notification] }))
            .error(400, &["invalid_parameter"]),
        any("post", "/api/v1/manage/notifications/read-all", "markAllNotificationsRead")
            .summary("Mark every notification read", "Answers how many were unread.")
            .ok(200, "How many were marked.", schema_ref("Marked"), json!({ "marked": 3 })),
        any("post", "/api/v1/manage/notifications/{id}/read", "markNotificationRead")
            .summary("Mark a notification read", "")
            .ok(200, "The notification.", schema_ref("Notification"), {
                let mut n = notification.clone();
                n["read"] = json!(true);
                n["read_at"] = json!(CREATED_AT);
                n
            })
            .error(404, &["notification_not_found"]),
    ]
}

fn endpoint_operations() -> Vec<Operation> {
    let op = |method, path, id, who| {
        Operation::new(method, path, id)
            .tag("Endpoints")
            .access(Access::Account(who))
    };
    let deploy_note = |op: Operation| {
        op.body(
            BodyKind::OptionalJson,
            schema_ref("DeployNoteRequest"),
            json!({ "note": "Ready for production." }),
        )
    };
    vec![
        op("get", "/api/v1/manage/endpoints", "listEndpoints", Who::Any)
            .summary("The caller's endpoints", "Those it owns or collaborates on.")
            .ok(200, "The endpoints.", schema_ref("EndpointList"), json!({ "data": [endpoint_example()] })),
        op("post", "/api/v1/manage/endpoints", "createEndpoint", Who::ServerOwner)
            .summary(
                "Create an endpoint",
                "Names are 1 to 100 characters, different from the owner's other endpoints' \
                 (compared trimmed and case-insensitively: 409 `endpoint_name_taken`); at most \
                 50 required fields, each a top-level field name of 1 to 200 characters.",
            )
            .body(
                BodyKind::Json,
                schema_ref("EndpointRequest"),
                json!({ "name": "Orders", "required_fields": ["email"] }),
            )
            .ok(201, "Created, with its keys.", schema_ref("Endpoint"), endpoint_example())
            .error(409, &["endpoint_name_taken"])
            .link("GetEndpoint", "getEndpoint", json!({ "slug": "$response.body#/slug" })),
        op("get", "/api/v1/manage/endpoints/{slug}", "getEndpoint", Who::Member)
            .summary("One endpoint", "With the caller's own keys.")
            .ok(200, "The endpoint.", schema_ref("Endpoint"), endpoint_example()),
        op("patch", "/api/v1/manage/endpoints/{slug}", "updateEndpoint", Who::Owner)
            .summary(
                "Change an endpoint",
                "Only the fields sent change; `description: null` clears it, `monthly_quota: \
                 null` returns to the server default, `active: false` refuses data calls. \
                 `name`, `required_fields` or `active` sent as `null` leave that field \
                 unchanged.",
            )
            .body(
                BodyKind::Json,
                schema_ref("EndpointPatchRequest"),
                json!({ "description": "Web shop orders", "monthly_quota": 100000 }),
            )
            .ok(200, "The endpoint.", schema_ref("Endpoint"), endpoint_example())
            .error(409, &["endpoint_name_taken"]),
        op("delete", "/api/v1/manage/endpoints/{slug}", "deleteEndpoint", Who::Owner)
            .summary(
                "Delete an endpoint",
                "At once: the endpoint is gone from every list and call (404 \
                 `endpoint_not_found`, its keys 401), its keys, collaborators, invitations, \
                 webhook subscriptions and signing secrets are deleted. Then in the \
                 background: its records (both environments, and so its search results), \
                 change-stream events, deliveries and attempts, request log and usage counts. \
                 The audit log stays, with an `endpoint.deleted` entry, readable by the owner \
                 at `GET …/audit`; the slug is never given again.",
            )
            .ok(
                200,
                "Deleted.",
                schema_ref("DeletedEndpoint"),
                json!({ "slug": "orders-7k2m9x4q1w8p", "deleted": true, "deleted_at": CREATED_AT }),
            ),
        op("post", "/api/v1/manage/endpoints/{slug}/deploy", "deployEndpoint", Who::Owner)
            .summary(
                "Deploy",
                "Production keys work from now on; approves a pending request. Idempotent.",
            )
            .ok(200, "The endpoint.", schema_ref("Endpoint"), endpoint_example()),
        deploy_note(op(
            "post",
            "/api/v1/manage/endpoints/{slug}/deploy-request",
            "requestDeploy",
            Who::Member,
        ))
        .summary(
            "Ask the owner to deploy",
            "For collaborators: 409 `conflict` for the owner, when deployed, or while one is \
             pending.",
        )
        .ok(201, "Requested.", schema_ref("Endpoint"), endpoint_example())
        .error(409, &["conflict"]),
        op(
            "post",
            "/api/v1/manage/endpoints/{slug}/deploy-request/approve",
            "approveDeploy",
            Who::Owner,
        )
        .summary("Approve the pending deploy request", "")
        .ok(200, "Deployed.", schema_ref("Endpoint"), endpoint_example())
        .error(404, &["deploy_request_not_found"]),
        deploy_note(op(
            "post",
            "/api/v1/manage/endpoints/{slug}/deploy-request/reject",
            "rejectDeploy",
            Who::Owner,
        ))
        .summary(
            "Reject the pending deploy request",
            "The note is passed on to the requester.",
        )
        .ok(200, "Rejected.", schema_ref("Endpoint"), endpoint_example())
        .error(404, &["deploy_request_not_found"]),
        op("get", "/api/v1/manage/endpoints/{slug}/requests", "listRequests", Who::Member)
            .summary(
                "The request log",
                "Data calls on the endpoint, newest first, only those that pass every filter \
                 given. A page reads at most 5,000 entries; a filtered page may hold fewer than \
                 `limit` and still have a `next_cursor`. A `request_id` made by this version \
                 (it carries its time) is found wherever it is in the log.",
            )
            .param(environment_query("Which environment's calls."))
            .param(limit(request_log::LIST_LIMIT_DEFAULT, request_log::LIST_LIMIT_MAX))
            .param(cursor())
            .param(query(
                "status",
                "Only responses of this status class.",
                json!({ "type": "string", "enum": ["1xx", "2xx", "3xx", "4xx", "5xx"] }),
            ))
            .param(query(
                "code",
                "Only error responses with this error code.",
                json!({ "type": "string", "pattern": "^[a-z_]{1,64}$" }),
            ))
            .param(query(
                "method",
                "Only calls with this method (any case).",
                json!({ "type": "string", "enum": ["GET", "POST", "PUT", "DELETE"] }),
            ))
            .param(query(
                "holder",
                "Only calls with a key of this holder: `owner` (the endpoint's default keys) \
                 or a collaborator's account id.",
                json!({ "type": "string", "pattern": "^(owner|[0-9]+)$" }),
            ))
            .param(query(
                "key_id",
                "Only calls with this key.",
                json!({ "type": "string", "pattern": "^key_" }),
            ))
            .param(query(
                "request_id",
                "Only the call with this request id (the `X-Request-Id` header and the \
                 `request_id` of an error body).",
                json!({ "type": "string", "pattern": "^req_" }),
            ))
            .ok(
                200,
                "One page.",
                schema_ref("RequestLogEntryPage"),
                json!({ "data": [{ "time": CREATED_AT, "method": "POST", "route": "/api/v1/data/{slug}",
                    "status": 403, "key_id": "key_3f9a0c1d2e4b5a69", "latency_ms": 1.92,
                    "environment": "sandbox", "request_id": "req_1mfk8r2w4q0d3c9y7hx5pk",
                    "code": "missing_permission_create",
                    "message": "This key lacks the `create` permission; the endpoint owner manages permissions.",
                    "client": "203.0.113.9",
                    "holder": { "kind": "collaborator", "account_id": 7, "email": "dev@example.com" } }],
                    "pagination": {} }),
            )
            .error(400, &["invalid_parameter"]),
        op("get", "/api/v1/manage/endpoints/{slug}/audit", "listAudit", Who::Owner)
            .summary("The audit log", "Every change, newest first.")
            .param(limit(50, 200))
            .param(query(
                "before",
                "Entries older than this entry id.",
                json!({ "type": "integer", "minimum": 0 }),
            ))
            .ok(
                200,
                "Entries.",
                schema_ref("AuditEntryList"),
                json!({ "data": [{ "id": 3, "time": CREATED_AT,
                    "actor": { "id": 1, "email": "owner@example.com" },
                    "action": "endpoint.deployed", "details": {} }] }),
            )
            .error(400, &["invalid_parameter"]),
        op("get", "/api/v1/manage/endpoints/{slug}/usage", "getUsage", Who::Owner)
            .summary("Data calls per month", "Newest month first.")
            .ok(
                200,
                "Usage.",
                schema_ref("Usage"),
                json!({ "monthly_quota": null, "months": [{ "month": "2026-11", "sandbox": 120, "production": 0 }] }),
            ),
    ]
}

fn collaborator_operations() -> Vec<Operation> {
    let owner = |method, path, id| {
        Operation::new(method, path, id)
            .tag("Collaborators")
            .access(Access::Account(Who::Owner))
    };
    vec![
        owner(
            "get",
            "/api/v1/manage/endpoints/{slug}/invitations",
            "listInvitations",
        )
        .summary("Invitations sent", "")
        .ok(
            200,
            "Invitations.",
            schema_ref("InvitationList"),
            json!({ "data": [invitation_example()] }),
        ),
        owner(
            "post",
            "/api/v1/manage/endpoints/{slug}/invitations",
            "createInvitation",
        )
        .summary(
            "Invite a collaborator",
            "Sends the link by e-mail (through the outbox) and shows it while pending.",
        )
        .body(
            BodyKind::Json,
            schema_ref("InvitationRequest"),
            json!({ "email": "ada@example.com", "permissions": ["create", "read"] }),
        )
        .ok(
            201,
            "Invited.",
            schema_ref("Invitation"),
            invitation_example(),
        )
        .error(409, &["conflict"])
        .link(
            "RevokeInvitation",
            "revokeInvitation",
            json!({ "slug": "$request.path.slug", "id": "$response.body#/id" }),
        ),
        owner(
            "delete",
            "/api/v1/manage/endpoints/{slug}/invitations/{id}",
            "revokeInvitation",
        )
        .summary("Revoke a pending invitation", "")
        .ok(200, "Revoked.", schema_ref("Invitation"), {
            let mut i = invitation_example();
            i["status"] = json!("revoked");
            i["accept_url"] = Value::Null;
            i
        })
        .error(404, &["invitation_not_found"])
        .error(409, &["conflict"]),
        owner(
            "get",
            "/api/v1/manage/endpoints/{slug}/collaborators",
            "listCollaborators",
        )
        .summary("Collaborators", "")
        .ok(
            200,
            "Collaborators.",
            schema_ref("CollaboratorList"),
            json!({ "data": [collaborator_example()] }),
        ),
        owner(
            "patch",
            "/api/v1/manage/endpoints/{slug}/collaborators/{account_id}",
            "updateCollaborator",
        )
        .summary(
            "Change a collaborator's permissions",
            "Applies to their keys at once.",
        )
        .body(
            BodyKind::Json,
            schema_ref("PermissionsRequest"),
            json!({ "permissions": ["read"] }),
        )
        .ok(
            200,
            "The collaborator.",
            schema_ref("Collaborator"),
            collaborator_example(),
        )
        .error(404, &["collaborator_not_found"]),
        owner(
            "delete",
            "/api/v1/manage/endpoints/{slug}/collaborators/{account_id}",
            "removeCollaborator",
        )
        .summary(
            "Remove a collaborator",
            "Their keys stop working at once (401).",
        )
        .ok(
            200,
            "Removed.",
            schema_ref("RemovedCollaborator"),
            json!({ "account_id": 2, "removed": true }),
        )
        .error(404, &["collaborator_not_found"]),
    ]
}

fn key_operations() -> Vec<Operation> {
    let op = |method, path, id, who| {
        Operation::new(method, path, id)
            .tag("API keys")
            .access(Access::Account(who))
    };
    let state = || {
        json!({ "environment": "sandbox", "collaborator_id": null, "key_id": "key_8c1d2e3f4a5b6c7d",
                "previous_key_id": "key_3f9a0c1d2e4b5a69", "previous_valid_until": CREATED_AT })
    };
    let rotated = || {
        let mut r = state();
        r["key"] = json!("tm_test_…");
        r
    };
    let revoked = || {
        let mut r = state();
        r["previous_key_id"] = Value::Null;
        r["previous_valid_until"] = Value::Null;
        r
    };
    let rotate = |path, id, who, whose: &str| {
        op("post", path, id, who)
            .summary(
                "Rotate an API key",
                format!(
                    "Issues a new key for {whose} at once and answers it. The replaced key keeps \
                     working until `previous_valid_until` (`grace_period_seconds`, 0 to 7 days; \
                     0 or no body revokes it at once), then gets 401 `invalid_api_key`. A \
                     rotation during a grace period ends the older replaced key at once. A \
                     collaborator's own production key can be rotated only once the endpoint is \
                     deployed (403 `endpoint_not_deployed`). An `environment` other than \
                     `sandbox` or `production` matches no route (404 `route_not_found`)."
                ),
            )
            .body(
                BodyKind::OptionalJson,
                schema_ref("KeyRotationRequest"),
                json!({ "grace_period_seconds": 86400 }),
            )
            .ok(200, "The new key.", schema_ref("ApiKeyRotation"), rotated())
            .error(400, &["invalid_request"])
            .error(403, &["endpoint_not_deployed"])
            .error(404, &["route_not_found"])
    };
    let revoke =
        |path, id, who, whose: &str| {
            op("post", path, id, who)
            .summary(
                "Revoke a replaced key now",
                format!(
                    "Ends the grace period of {whose} replaced by the last rotation: it gets 401 \
                     from now on. 404 `previous_key_not_found` when no grace period runs; an \
                     `environment` other than `sandbox` or `production` matches no route (404 \
                     `route_not_found`)."
                ),
            )
            .ok(200, "The key's state.", schema_ref("ApiKeyState"), revoked())
            .error(403, &["endpoint_not_deployed"])
            .error(404, &["previous_key_not_found", "route_not_found"])
        };
    let own = "the caller's own key (the owner's default key, a collaborator's collaboration key)";
    let theirs = "a collaborator's key (the owner's call; a collaborator uses `…/keys/…`)";
    vec![
        rotate(
            "/api/v1/manage/endpoints/{slug}/keys/{environment}/rotate",
            "rotateKey",
            Who::Member,
            own,
        ),
        revoke(
            "/api/v1/manage/endpoints/{slug}/keys/{environment}/revoke-previous",
            "revokePreviousKey",
            Who::Member,
            own,
        ),
        rotate(
            "/api/v1/manage/endpoints/{slug}/collaborators/{account_id}/keys/{environment}/rotate",
            "rotateCollaboratorKey",
            Who::Owner,
            theirs,
        )
        .error(404, &["collaborator_not_found"]),
        revoke(
            "/api/v1/manage/endpoints/{slug}/collaborators/{account_id}/keys/{environment}/revoke-previous",
            "revokePreviousCollaboratorKey",
            Who::Owner,
            theirs,
        )
        .error(404, &["collaborator_not_found"]),
    ]
}

fn webhook_operations() -> Vec<Operation> {
    let op = |method, path, id, who| {
        Operation::new(method, path, id)
            .tag("Webhooks")
            .access(Access::Account(who))
    };
    let owner_hook = "/api/v1/manage/endpoints/{slug}/webhooks/{environment}";
    let subscriptions = "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions";
    let subscription =
        "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions/{subscription_id}";
    let recover = "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions/\
                   {subscription_id}/recover";
    let callers = "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/caller-recovery";
    let test = "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions/\
                {subscription_id}/test";
    let bad_environment: &[&str] = &["invalid_parameter"];
    let settings_rules = "`auth_value` is sent in `auth_header` (default `Authorization`), \
        stored sealed and never shown again. A `url` with credentials (`user:password@`), \
        hop-by-hop or framing header names (`Connection`, `Keep-Alive`, `Upgrade`, `TE`, \
        `Trailer`, `Expect`, `Proxy-*`) as `auth_header`, an unknown event type, a \
        `rate_limit` outside 1 to 10,000 deliveries a second and a `description` over 200 \
        characters or on several lines answer 400 `invalid_webhook`. Changes apply to writes \
        made afterwards; a disabled subscription's deliveries are logged as `skipped`.";
    vec![
        op("get", owner_hook, "getOwnerWebhook", Who::Owner)
            .summary(
                "The owner webhook of an environment",
                "The environment's first subscription (the spec's owner webhook). Another \
                 `environment` answers 400 `invalid_parameter`.",
            )
            .ok(200, "The webhook.", schema_ref("Subscription"), subscription_example())
            .error(400, bad_environment)
            .error(404, &["webhook_not_found"]),
        op("put", owner_hook, "setOwnerWebhook", Who::Owner)
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
        op("patch", owner_hook, "changeOwnerWebhook", Who::Owner)
            .summary(
                "Change or pause the owner webhook",
                "Changes the fields given of the first subscription (`{\"enabled\": false}` pauses it); \
                 `null` removes `auth_value` or `rate_limit`.",
            )
            .body(BodyKind::Json, schema_ref("SubscriptionPatchRequest"), json!({ "enabled": false }))
            .ok(200, "The webhook.", schema_ref("Subscription"), subscription_example())
            .error(400, &["invalid_parameter", "invalid_webhook", "webhook_target_refused"])
            .error(404, &["webhook_not_found"]),
        op("delete", owner_hook, "deleteOwnerWebhook", Who::Owner)
            .summary(
                "Remove the owner webhook",
                "Removes the first subscription (the next one becomes first). Deliveries \
                 already made keep their target.",
            )
            .ok(
                200,
                "Removed.",
                schema_ref("RemovedWebhook"),
                json!({ "environment": "production", "removed": true }),
            )
            .error(400, bad_environment)
            .error(404, &["webhook_not_found"]),
        op("get", subscriptions, "listSubscriptions", Who::Owner)
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
        op("post", subscriptions, "createSubscription", Who::Owner)
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
        op("get", subscription, "getSubscription", Who::Owner)
            .summary("One subscription", "")
            .ok(200, "The subscription.", schema_ref("Subscription"), subscription_example())
            .error(400, bad_environment)
            .error(404, &["subscription_not_found"]),
        op("patch", subscription, "changeSubscription", Who::Owner)
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
        op("post", recover, "recoverSubscription", Who::Owner)
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
                 `Retry-After`.",
            )
            .body(BodyKind::Json, schema_ref("RecoveryRequest"), json!({ "since": "2026-11-20T00:00:00Z" }))
            .ok(202, "The recovery, started.", schema_ref("Recovery"), recovery_example(true))
            .error(400, &["invalid_parameter"])
            .error(404, &["subscription_not_found"])
            .error(409, &["conflict"])
            .error(429, &["recovery_cooldown"]),
        op("post", test, "testSubscription", Who::Owner)
            .summary(
                "Send a test event",
                "Signs and sends one `webhook.test` event to the subscription's URL now, \
                 exactly as a delivery would be sent (same headers, secret, timeout and egress \
                 rule), and answers with what the receiver said: 200 also when the receiver \
                 refused or could not be reached (`delivered` false, `status` or `error` says \
                 why). Its `webhook-id` starts with `test_`. Nothing is stored or retried, and \
                 the subscription's health is left alone.",
            )
            .ok(200, "The receiver's answer.", schema_ref("TestEventResult"), json!({
                "webhook_id": "test_4k2m9x4q1w8pz3n5b7c6d1f0gh",
                "delivered": true,
                "status": 204,
                "response_body": "",
                "error": null,
                "duration_ms": 41.7,
                "request_body": "{\"type\":\"webhook.test\",\"timestamp\":\"2026-11-27T10:00:00.000000Z\",\"data\":{\"id\":\"test_4k2m9x4q1w8pz3n5b7c6d1f0gh\",\"endpoint\":\"orders-7k2m9x4q1w8p\",\"environment\":\"sandbox\",\"created_at\":\"2026-11-27T10:00:00.000000Z\",\"payload\":{\"message\":\"A test event from intake: your receiver is reachable and can verify the signature.\"}}}",
            }))
            .error(400, bad_environment)
            .error(404, &["subscription_not_found"]),
        op("get", callers, "getCallerRecovery", Who::Owner)
            .summary("The latest recovery of the caller webhooks", "")
            .ok(200, "The recovery.", schema_ref("Recovery"), recovery_example(false))
            .error(400, bad_environment)
            .error(404, &["recovery_not_found"]),
        op("post", callers, "recoverCallerWebhooks", Who::Owner)
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
        op("delete", subscription, "deleteSubscription", Who::Owner)
            .summary(
                "Delete a subscription",
                "Deliveries already made keep their target; its id is not given again.",
            )
            .ok(
                200,
                "Removed.",
                schema_ref("RemovedSubscription"),
                json!({ "id": "sub_2", "environment": "production", "removed": true }),
            )
            .error(400, bad_environment)
            .error(404, &["subscription_not_found"]),
        op("get", "/api/v1/manage/endpoints/{slug}/deliveries", "listDeliveries", Who::Member)
            .summary(
                "The delivery log",
                "Of one environment, or of one record; newest first. Every member sees every \
                 delivery, each as far as they may: the owner all of it; a collaborator an \
                 owner subscription's `url` never (`null`: subscriptions are the owner's), a \
                 caller webhook's in full only when their own key made the write (its origin \
                 otherwise), and the body and receivers' answers (`getDelivery`) only with the \
                 `read` permission while the endpoint is active. `withheld` names what is not \
                 shown.",
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
                 after a failed attempt), `delivered`, `given_up`, `skipped`.",
                json!({ "type": "string",
                        "enum": ["pending", "failing", "delivered", "given_up", "skipped"] }),
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
        op("get", "/api/v1/manage/endpoints/{slug}/deliveries/{id}", "getDelivery", Who::Member)
            .summary(
                "One delivery",
                "With the body sent and every attempt, as far as the caller may see them (see \
                 `listDeliveries`): without the `read` permission, or while the endpoint is \
                 inactive, a collaborator gets `body` and every attempt's `response_body` as \
                 `null`, with `body` in `withheld`.",
            )
            .ok(200, "The delivery.", schema_ref("DeliveryDetail"), {
                let mut d = delivery_example();
                d["body"] = json!("{\"type\":\"record.created\",…}");
                d["attempt_log"] = json!([]);
                d
            })
            .error(404, &["delivery_not_found"]),
        op(
            "post",
            "/api/v1/manage/endpoints/{slug}/deliveries/{id}/redeliver",
            "redeliver",
            Who::Owner,
        )
        .summary(
            "Send a given-up delivery again",
            "A fresh attempt budget, the first attempt at once; 409 `conflict` unless given up.",
        )
        .ok(200, "The delivery.", schema_ref("Delivery"), delivery_example())
        .error(404, &["delivery_not_found"])
        .error(409, &["conflict"]),
        op(
            "post",
            "/api/v1/manage/endpoints/{slug}/deliveries/{id}/retry",
            "retryDelivery",
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
            "get",
            "/api/v1/manage/endpoints/{slug}/webhook-secrets/{environment}",
            "getWebhookSecret",
            Who::Member,
        )
        .summary(
            "A webhook signing secret",
            "Another `environment` matches no route (404 `route_not_found`).",
        )
        .ok(200, "The secret.", schema_ref("WebhookSecret"), secret_example())
        .error(404, &["route_not_found"]),
        op(
            "post",
            "/api/v1/manage/endpoints/{slug}/webhook-secrets/{environment}/reissue",
            "reissueWebhookSecret",
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

fn administration_operations() -> Vec<Operation> {
    let op = |method, path, id| {
        Operation::new(method, path, id)
            .tag("Administration")
            .access(Access::Account(Who::ServerOwner))
    };
    vec![
        op("get", "/api/v1/manage/accounts", "listAccounts")
            .summary("Every account", "")
            .ok(
                200,
                "Accounts.",
                schema_ref("AccountList"),
                json!({ "data": [account_example()] }),
            ),
        op("get", "/api/v1/manage/accounts/{id}", "getAccountById")
            .summary("One account", "")
            .ok(
                200,
                "The account.",
                schema_ref("Account"),
                account_example(),
            )
            .error(404, &["account_not_found"]),
        op("patch", "/api/v1/manage/accounts/{id}", "updateAccount")
            .summary(
                "Suspend or reinstate a member",
                "A suspended account cannot log in; its tokens, sessions and keys get 403 \
                 `account_suspended`. The owner account cannot be suspended (409).",
            )
            .body(
                BodyKind::Json,
                schema_ref("AccountPatchRequest"),
                json!({ "suspended": true }),
            )
            .ok(
                200,
                "The account.",
                schema_ref("Account"),
                account_example(),
            )
            .error(404, &["account_not_found"])
            .error(409, &["conflict"]),
        op("get", "/api/v1/manage/mail", "listMail")
            .summary("The mail outbox", "Newest first, without bodies.")
            .param(limit(mail::LIST_LIMIT_DEFAULT, mail::LIST_LIMIT_MAX))
            .param(cursor())
            .ok(
                200,
                "One page.",
                schema_ref("MailPage"),
                json!({ "data": [mail_example()], "pagination": {}, "smtp_configured": true }),
            )
            .error(400, &["invalid_parameter"]),
        op("get", "/api/v1/manage/mail/{id}", "getMail")
            .summary("One e-mail, with its body", "A non-numeric id answers 400.")
            .ok(200, "The e-mail.", schema_ref("Mail"), {
                let mut m = mail_example();
                m["body"] = json!("…");
                m
            })
            .error(400, &["invalid_parameter"])
            .error(404, &["mail_not_found"]),
        op("post", "/api/v1/manage/mail/test", "sendTestMail")
            .summary(
                "Queue a test e-mail",
                "To `to`, by default (absent or `null`) the calling account's address.",
            )
            .body(
                BodyKind::OptionalJson,
                schema_ref("TestMailRequest"),
                json!({ "to": "you@example.com" }),
            )
            .ok(
                202,
                "Queued.",
                schema_ref("QueuedMail"),
                json!({ "id": 1, "status": "queued" }),
            ),
        op("post", "/api/v1/manage/backups", "createBackup")
            .summary(
                "Take a backup",
                "A consistent copy of the store taken while the server runs (every write \
                 acknowledged before the call is in it), with the key-encryption key, as a tar \
                 archive; `intake backup --to FILE` calls this and `intake restore` reads it \
                 (docs/src/operations.md, \"Backups\"). Keep it as secret as the data dir. \
                 A server whose store is PostgreSQL takes none: 409 `conflict`, whose message \
                 points to pg_dump.",
            )
            .ok_file(
                "The backup archive, `intake-backup.tar` (intake-backup.json, master.key, \
                 intake.redb).",
                "application/x-tar",
            )
            .error(409, &["conflict"]),
    ]
}
