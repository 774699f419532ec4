//! The shared parts of the OpenAPI document: the schemas of every body the API sends or takes
//! (`components`), the security schemes, the tags, and the webhooks intake sends.

use serde_json::{Value, json};

mod webhooks;

use super::{schema_ref, thousands};
use crate::domain::accounts::{MAX_PASSWORD_CHARS, MIN_PASSWORD_CHARS};
use crate::domain::erasures::DRY_RUN_NEWEST;
use crate::domain::password_reset::TOKEN_PREFIX as RESET_TOKEN_PREFIX;
use crate::domain::schema::{
    CHECK_EXAMPLES, CHECK_LIMIT_DEFAULT, CHECK_LIMIT_MAX, MAX_SCHEMA_BYTES, MAX_VIOLATIONS,
};
use crate::domain::search::{Q_MAX_CHARS, Q_MIN_CHARS};
use crate::http::request::MAX_DATA_BODY;
use webhooks::webhook_schemas;
pub use webhooks::webhooks;

fn string() -> Value {
    json!({ "type": "string" })
}

/// An RFC 3339 time in UTC with microseconds, as intake writes them.
fn time() -> Value {
    json!({ "type": "string", "format": "date-time" })
}

fn nullable(schema: Value) -> Value {
    json!({ "anyOf": [schema, { "type": "null" }] })
}

/// `schema` with a `description`.
fn described(mut schema: Value, description: &str) -> Value {
    schema["description"] = json!(description);
    schema
}

fn string_enum(values: &[&str]) -> Value {
    json!({ "type": "string", "enum": values })
}

fn integer() -> Value {
    json!({ "type": "integer", "minimum": 0 })
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": properties, "required": required })
}

/// `base` with more properties: `allOf` of the two, which generators merge into one type (a
/// `$ref` with sibling `properties` loses the siblings in some of them).
fn extends(base: &str, properties: Value, required: &[&str]) -> Value {
    json!({ "allOf": [schema_ref(base), object(properties, required)] })
}

/// The items answered whole as `{"data": [item]}`, each named `<item>List`.
const LISTED: [&str; 8] = [
    "Account",
    "AuditEntry",
    "Collaborator",
    "Endpoint",
    "Invitation",
    "Notification",
    "SessionInfo",
    "Token",
];

/// The items answered a page at a time, each named `<item>Page`.
const PAGED: [&str; 3] = ["Record", "Delivery", "RequestLogEntry"];

/// `{"data": [item]}`.
fn list_of(item: &str) -> Value {
    object(
        json!({ "data": { "type": "array", "items": schema_ref(item) } }),
        &["data"],
    )
}

/// `{"data": [item], "pagination": {"next_cursor"?}}`.
fn page_of(item: &str) -> Value {
    object(
        json!({
            "data": { "type": "array", "items": schema_ref(item) },
            "pagination": schema_ref("Pagination"),
        }),
        &["data", "pagination"],
    )
}

/// The `errors` of a `schema_violation`.
fn schema_violations() -> Value {
    json!({
        "type": "array",
        "maxItems": MAX_VIOLATIONS,
        "description": format!("`schema_violation` only: the first {MAX_VIOLATIONS} violations, in document order."),
        "items": schema_ref("SchemaViolation"),
    })
}

/// How long an endpoint's records of `environment` are kept: as set (`nullable`, `null` for the
/// server's default) or in force.
fn retention_window(nullable: bool, environment: &str, minimum: &str) -> Value {
    json!({
        "type": if nullable { json!(["string", "null"]) } else { json!("string") },
        "pattern": "^[0-9]+(ms|s|m|h|d)$",
        "examples": ["7d"],
        "description": format!(
            "How long {environment} records are kept, as `30d`, `12h` or `90m`: at least \
             {minimum}, and at most the server's `[retention] max` when it sets one."
        ),
    })
}

/// An endpoint's JSON Schema setting, of one of these JSON types.
fn endpoint_schema(types: &[&str]) -> Value {
    json!({
        "type": types,
        "description": format!(
            "A JSON Schema (draft 2020-12) every payload must match, after `required_fields`; \
             at most {} bytes as compact JSON. `$ref` only inside the schema; `format` is \
             asserted; `pattern` is a linear-time regular expression (no look-around or \
             back-references); numbers are compared exactly as written. Changing it never \
             touches stored records.",
            thousands(MAX_SCHEMA_BYTES)
        ),
    })
}

fn permissions() -> Value {
    json!({ "type": "array", "items": schema_ref("Permission"), "uniqueItems": true })
}

/// How a payload is stored (docs/src/data-api.md, "Payloads are stored as sent"; `records`).
pub fn payload_storage() -> String {
    format!(
        "Stored and returned as sent, with one normalisation: whitespace between tokens is \
         removed, and strings are written with only the escapes JSON requires (`\\\"`, `\\\\` \
         and control characters), so `\"\\u00e9\"` comes back as `\"é\"`. Numbers keep their \
         exact text (`123456789012345678901234567890`, `1E2` and `-0` come back as sent), and so \
         do key order and repeated keys. Arrays and objects nest at most {} deep.",
        crate::domain::records::MAX_DEPTH
    )
}

/// A record payload of an endpoint with these required fields: any JSON when there are none,
/// else an object in which each is present and not `null`.
pub fn payload(required_fields: &[String]) -> Value {
    if required_fields.is_empty() {
        let description = format!(
            "Any JSON value, at most {} bytes of UTF-8.",
            thousands(MAX_DATA_BODY)
        );
        return json!({ "description": format!("{description} {}", payload_storage()) });
    }
    let properties: serde_json::Map<String, Value> = required_fields
        .iter()
        .map(|f| (f.clone(), json!({ "not": { "type": "null" } })))
        .collect();
    json!({
        "type": "object",
        "description": format!(
            "A JSON object with the endpoint's required fields present and not `null`; other \
             fields are kept as sent. {}",
            payload_storage()
        ),
        "properties": properties,
        "required": required_fields,
    })
}

pub fn tags() -> Value {
    json!([
        { "name": super::DATA_TAG, "description": "Records of one endpoint, with an API key." },
        { "name": super::STREAM_TAG, "description": "Each processed write of one endpoint, live, as Server-Sent Events, with an API key." },
        { "name": "Documentation", "description": "This document and each endpoint's own." },
        { "name": "Session", "description": "Dashboard login and the session cookie." },
        { "name": "Invitations", "description": "Invitation links, opened by the invitee." },
        { "name": "Account", "description": "The caller's own account, tokens and notifications." },
        { "name": "Endpoints", "description": "Endpoints, their deploy workflow, logs and usage." },
        { "name": "Collaborators", "description": "Invitations sent and collaborators of an endpoint." },
        { "name": "API keys", "description": "Rotating and revoking the default and collaboration keys." },
        { "name": "Webhooks", "description": "Owner webhooks, signing secrets and the delivery log." },
        { "name": "Administration", "description": "Accounts and the mail outbox (server owner)." },
        { "name": "Health", "description": "Liveness, readiness and metrics, for load balancers and Prometheus." },
    ])
}

pub fn components() -> Value {
    json!({
        "securitySchemes": {
            "apiKey": {
                "type": "http",
                "scheme": "bearer",
                "description": "An endpoint's API key: `tm_test_…` (sandbox data) or `tm_live_…` \
                    (production data, once deployed). The owner's default keys carry every \
                    permission; a collaboration key those its owner granted.",
            },
            "accountToken": {
                "type": "http",
                "scheme": "bearer",
                "description": "A personal account token, `itk_…` (`intake init` prints the \
                    owner's; `POST /api/v1/manage/tokens` makes more).",
            },
            "sessionCookie": {
                "type": "apiKey",
                "in": "cookie",
                "name": crate::domain::sessions::COOKIE,
                "description": "The dashboard's session cookie, set by `POST /api/v1/auth/login`. \
                    A management `GET` without `Authorization` whose `Accept` names \
                    `text/html`, a browser opening a link, is answered 303 to the dashboard \
                    page that shows the same thing (which asks a browser without a session to \
                    log in first); without `text/html`, a cookie-only read whose \
                    answer holds API keys or signing secrets (listEndpoints, getEndpoint, \
                    getWebhookSecret) is refused with 403 `token_required`. Changes made with \
                    the cookie alone must come from this server's own pages.",
            },
            "metricsToken": {
                "type": "http",
                "scheme": "bearer",
                "description": "`[operations] metrics_token` from the server's config, when set.",
            },
        },
        "headers": {
            "X-Request-Id": {
                "description": "The request's id (`req_…`), also in every error body and log line.",
                "schema": { "type": "string", "pattern": "^req_" },
            },
            "Retry-After": {
                "description": "Seconds to wait before trying again.",
                "schema": { "type": "integer", "minimum": 1 },
            },
            "Set-Cookie": {
                "description": "The session cookie: HttpOnly, SameSite=Strict, Secure over https.",
                "schema": string(),
            },
            "Content-Disposition": {
                "description": "`attachment` with the file name to save the download as.",
                "schema": string(),
            },
        },
        "schemas": schemas(),
    })
}

/// The schemas, in groups (one `json!` each would exceed the macro recursion limit). Every
/// request and response body of the document is one of them, by `$ref`, so that client
/// generators name each type after it (docs/src/clients.md).
fn schemas() -> Value {
    let mut all = serde_json::Map::new();
    for group in [
        data_schemas(),
        management_schemas(),
        key_schemas(),
        webhook_schemas(),
        request_schemas(),
        answer_schemas(),
    ] {
        if let Value::Object(map) = group {
            all.extend(map);
        }
    }
    for item in LISTED {
        all.insert(format!("{item}List"), list_of(item));
    }
    for item in PAGED {
        all.insert(format!("{item}Page"), page_of(item));
    }
    Value::Object(all)
}

fn data_schemas() -> Value {
    json!({
        "Error": object(json!({ "error": schema_ref("ErrorDetail") }), &["error"]),
        "ErrorDetail": object(json!({
            "code": { "type": "string", "description": "Stable: never renamed." },
            "message": { "type": "string", "description": "For humans; may change." },
            "request_id": { "type": "string" },
            "records": {
                "type": "array",
                "description": "`batch_invalid` only: each refused record of the batch.",
                "items": schema_ref("RecordRefusal"),
            },
            "errors": schema_violations(),
        }), &["code", "message", "request_id"]),
        "RecordRefusal": object(json!({
            "index": { "type": "integer", "minimum": 0, "description": "The record's place in the batch, from 0; blank NDJSON lines are not counted." },
            "code": { "type": "string", "description": "The code a single create of this record would have had." },
            "message": { "type": "string" },
            "errors": schema_violations(),
        }), &["index", "code", "message"]),
        "SchemaViolation": object(json!({
            "instance_path": { "type": "string", "description": "Where in the payload, as a JSON Pointer (`\"\"` for the whole payload)." },
            "keyword": { "type": "string", "description": "The schema keyword the payload breaks (`type`, `required`, `maximum`, …)." },
            "message": { "type": "string", "description": "What is wrong, in words; never quotes the payload's values." },
        }), &["instance_path", "keyword", "message"]),
        "RecordId": {
            "type": "string",
            "pattern": "^rec_[0-9a-hjkmnp-tv-z]{26}$",
            "description": "`rec_` and 26 characters of lower-case Crockford base32.",
        },
        "Payload": payload(&[]),
        "Permission": string_enum(&["create", "read", "replace", "delete"]),
        "Environment": string_enum(&["sandbox", "production"]),
        "Record": object(json!({
            "id": schema_ref("RecordId"),
            "payload": schema_ref("Payload"),
            "created_at": time(),
            "updated_at": time(),
        }), &["id", "payload", "created_at", "updated_at"]),
        "Accepted": object(json!({
            "id": schema_ref("RecordId"),
            "created_at": { "type": "string", "format": "date-time", "description": "Creates only." },
            "status": { "const": "accepted" },
        }), &["id", "status"]),
        "RecordExport": {
            "type": "array",
            "description": "An export as one JSON array (`format=json`).",
            "items": schema_ref("Record"),
        },
        "BatchRecords": {
            "type": "array",
            "description": "The records of a batch, as a JSON array.",
            "items": schema_ref("Payload"),
            "minItems": 1,
            "maxItems": crate::domain::batch::MAX_RECORDS,
        },
        "BatchAccepted": object(json!({
            "data": {
                "type": "array",
                "description": "One entry per record, in the order sent.",
                "items": schema_ref("BatchRecord"),
            },
        }), &["data"]),
        "BatchRecord": object(json!({
            "index": { "type": "integer", "minimum": 0 },
            "id": schema_ref("RecordId"),
            "created_at": time(),
        }), &["index", "id", "created_at"]),
        "Pagination": object(json!({
            "next_cursor": { "type": "string", "description": "Present only when more exist." },
        }), &[]),
        // Exactly one of the two cursors: `data` and one more property. Said with
        // `min/maxProperties` rather than a `oneOf` of `required`s, which client generators
        // cannot turn into a type (they answer an untyped value or `unknown`).
        "PollPage": {
            "type": "object",
            "description": "`data` and exactly one of `next_cursor` and `poll_cursor`.",
            "properties": {
                "data": { "type": "array", "items": schema_ref("Record") },
                "next_cursor": { "type": "string", "description": "A backlog remains: call again at once." },
                "poll_cursor": { "type": "string", "description": "Caught up: call again later." },
            },
            "required": ["data"],
            "additionalProperties": false,
            "minProperties": 2,
            "maxProperties": 2,
        },
        "Health": object(json!({ "status": { "const": "ok" } }), &["status"]),
        "Readiness": object(json!({
            "ready": { "type": "boolean" },
            "checks": { "type": "array", "items": schema_ref("ReadinessCheck") },
        }), &["ready", "checks"]),
        "ReadinessCheck": object(json!({
            "name": string_enum(&["storage", "ingest_writer", "search_index"]),
            "ok": { "type": "boolean" },
            "problem": { "type": "string", "description": "Why the check failed." },
        }), &["name", "ok"]),
        "OpenApiDocument": {
            "type": "object",
            "description": "An OpenAPI 3.1 document.",
            "properties": { "openapi": { "const": "3.1.0" } },
            "required": ["openapi", "info", "paths"],
        },
    })
}

fn management_schemas() -> Value {
    json!({
        "DeployRequest": object(json!({
            "requested_by": string(),
            "requested_at": time(),
            "note": nullable(string()),
        }), &["requested_by", "requested_at", "note"]),
        "DeployRejection": object(json!({
            "requested_by": string(),
            "rejected_at": time(),
            "note": nullable(string()),
        }), &["requested_by", "rejected_at", "note"]),
        "Endpoint": object(json!({
            "slug": string(),
            "name": string(),
            "description": nullable(string()),
            "required_fields": { "type": "array", "items": string() },
            "schema": endpoint_schema(&["object", "boolean", "null"]),
            "retention": schema_ref("RetentionSettings"),
            "effective_retention": schema_ref("RetentionWindows"),
            "active": { "type": "boolean" },
            "environment": schema_ref("Environment"),
            "deployed": { "type": "boolean" },
            "deployed_at": nullable(time()),
            "deploy_request": nullable(schema_ref("DeployRequest")),
            "last_rejection": nullable(schema_ref("DeployRejection")),
            "monthly_quota": nullable(integer()),
            "created_at": time(),
            "role": string_enum(&["owner", "collaborator"]),
            "permissions": permissions(),
            "sandbox_key": { "type": "string", "pattern": "^tm_test_" },
            "production_key": nullable(json!({ "type": "string", "pattern": "^tm_live_" })),
        }), &["slug", "name", "description", "required_fields", "schema", "retention",
              "effective_retention", "active", "environment",
              "deployed", "deployed_at", "deploy_request", "last_rejection", "monthly_quota",
              "created_at", "role",
              "permissions", "sandbox_key", "production_key"]),
        "Account": object(json!({
            "id": integer(),
            "email": string(),
            "role": string_enum(&["owner", "member"]),
            "suspended": { "type": "boolean" },
            "created_at": time(),
        }), &["id", "email", "role", "suspended", "created_at"]),
        "Session": object(json!({
            "account": schema_ref("Account"),
            "expires_at": time(),
        }), &["account", "expires_at"]),
        "Token": object(json!({
            "id": { "type": "string", "pattern": "^tok_" },
            "name": string(),
            "created_at": time(),
            "expires_at": nullable(time()),
            "expired": { "type": "boolean" },
        }), &["id", "name", "created_at", "expires_at", "expired"]),
        "SessionInfo": object(json!({
            "id": { "type": "string", "pattern": "^ses_" },
            "created_at": time(),
            "expires_at": time(),
            "current": { "type": "boolean", "description": "The session of this call." },
        }), &["id", "created_at", "expires_at", "current"]),
        "NewToken": extends("Token", json!({
            "token": { "type": "string", "pattern": "^itk_", "description": "Shown only this once." },
        }), &["token"]),
        "Notification": object(json!({
            "id": integer(),
            "kind": string(),
            "endpoint_slug": string(),
            "message": string(),
            "created_at": time(),
            "read": { "type": "boolean" },
            "read_at": nullable(time()),
            "resolution": nullable(string_enum(&[
                "approved", "rejected", "withdrawn", "deployed", "requested_again",
            ])),
            "resolved_at": nullable(time()),
        }), &["id", "kind", "endpoint_slug", "message", "created_at", "read", "read_at",
              "resolution", "resolved_at"]),
        "Invitation": object(json!({
            "id": integer(),
            "email": string(),
            "permissions": permissions(),
            "status": string_enum(&["pending", "accepted", "revoked", "expired"]),
            "created_at": time(),
            "expires_at": time(),
            "accept_url": nullable(string()),
            "mail_id": integer(),
        }), &["id", "email", "permissions", "status", "created_at", "expires_at", "accept_url", "mail_id"]),
        "InvitationPreview": object(json!({
            "endpoint_name": string(),
            "email": string(),
            "permissions": permissions(),
            "invited_by": string(),
            "expires_at": time(),
            "account_exists": { "type": "boolean" },
        }), &["endpoint_name", "email", "permissions", "invited_by", "expires_at", "account_exists"]),
        "Acceptance": object(json!({
            "account": schema_ref("Account"),
            "endpoint": schema_ref("Endpoint"),
        }), &["account", "endpoint"]),
        "Collaborator": object(json!({
            "account_id": integer(),
            "email": string(),
            "suspended": { "type": "boolean" },
            "permissions": permissions(),
            "added_at": time(),
            "sandbox_key_id": string(),
            "production_key_id": string(),
        }), &["account_id", "email", "suspended", "permissions", "added_at", "sandbox_key_id", "production_key_id"]),
        "AuditEntry": object(json!({
            "id": integer(),
            "time": time(),
            "actor": schema_ref("AuditActor"),
            "action": string(),
            "details": { "type": "object" },
        }), &["id", "time", "actor", "action", "details"]),
        "AuditActor": object(json!({ "id": integer(), "email": string() }), &["id", "email"]),
        "RequestLogEntry": object(json!({
            "time": time(),
            "method": string(),
            "route": string(),
            "status": integer(),
            "key_id": nullable(string()),
            "latency_ms": { "type": "number" },
            "environment": schema_ref("Environment"),
            "request_id": string(),
            "code": { "anyOf": [string(), { "type": "null" }],
                      "description": "The error code of an error response." },
            "message": { "anyOf": [string(), { "type": "null" }],
                         "description": "The error message, at most 200 characters." },
            "client": { "anyOf": [string(), { "type": "null" }],
                        "description": "The client's IP address (behind trusted proxies, the forwarded one)." },
            "holder": nullable(schema_ref("KeyHolder")),
            "record_id": { "anyOf": [string(), { "type": "null" }],
                           "description": "The record the call was about: the record a create made (or an idempotent replay answered), the path's record of a get, replace or delete, the first record of a batch. Null for a list, search, poll, export or stream, for a call refused before the record was known, and for entries logged before this field." },
            "record_count": { "anyOf": [integer(), { "type": "null" }],
                              "description": "For a batch, how many records it created (`record_id` is the first); null otherwise." },
        }), &["time", "method", "route", "status", "key_id", "latency_ms", "environment",
              "request_id", "code", "message", "client", "holder", "record_id", "record_count"]),
        "KeyHolder": {
            "description": "Who held the key of a call, kept when the call was logged (a replaced key's calls still name its holder).",
            "type": "object",
            "properties": {
                "kind": string_enum(&["owner", "collaborator"]),
                "account_id": nullable(integer()),
                "email": { "anyOf": [string(), { "type": "null" }],
                           "description": "The collaborator's e-mail address; null for the owner's default keys, a deleted account, and another collaborator's call seen by a collaborator." },
            },
            "required": ["kind", "account_id", "email"],
        },
        "Usage": object(json!({
            "monthly_quota": nullable(integer()),
            "months": { "type": "array", "items": schema_ref("UsageMonth") },
        }), &["monthly_quota", "months"]),
        "UsageMonth": object(json!({
            "month": { "type": "string", "pattern": "^[0-9]{4}-[0-9]{2}$" },
            "sandbox": integer(),
            "production": integer(),
        }), &["month", "sandbox", "production"]),
    })
}

fn key_schemas() -> Value {
    let state = json!({
        "environment": schema_ref("Environment"),
        "collaborator_id": { "anyOf": [integer(), { "type": "null" }],
            "description": "The collaborator holding the key; null for the endpoint's default key." },
        "key_id": string(),
        "previous_key_id": { "anyOf": [string(), { "type": "null" }],
            "description": "The replaced key, while its grace period runs." },
        "previous_valid_until": { "anyOf": [time(), { "type": "null" }],
            "description": "When the replaced key stops working (401 afterwards)." },
    });
    let state_required = [
        "environment",
        "collaborator_id",
        "key_id",
        "previous_key_id",
        "previous_valid_until",
    ];
    let mut rotation = state.clone();
    rotation["key"] = json!({ "type": "string", "pattern": "^tm_(test|live)_",
        "description": "The new key: shown in this answer, sealed in the store." });
    let mut rotation_required = state_required.to_vec();
    rotation_required.push("key");
    json!({
        "KeyRotationRequest": {
            "type": "object",
            "additionalProperties": false,
            "properties": { "grace_period_seconds": {
                "type": "integer", "minimum": 0, "maximum": crate::domain::api_keys::MAX_GRACE.as_secs(),
                "default": 0,
                "description": "How long the replaced key keeps working; 0 revokes it at once.",
            } },
        },
        "ApiKeyState": object(state, &state_required),
        "DeletedEndpoint": object(json!({
            "slug": string(),
            "deleted": { "const": true },
            "deleted_at": time(),
        }), &["slug", "deleted", "deleted_at"]),
        "ApiKeyRotation": object(rotation, &rotation_required),
    })
}

/// The request bodies of the management API (`KeyRotationRequest` is with the keys'
/// schemas; a record payload is `Payload`).
fn request_schemas() -> Value {
    let nullable_string = || json!({ "type": ["string", "null"] });
    let new_password = json!({
        "type": "string",
        "minLength": MIN_PASSWORD_CHARS,
        "maxLength": MAX_PASSWORD_CHARS,
    });
    json!({
        "LoginRequest": closed(json!({ "email": string(), "password": string() }),
                               &["email", "password"]),
        "AcceptInvitationRequest": closed(json!({ "password": string() }), &[]),
        "PasswordChangeRequest": closed(json!({
            "current_password": string(),
            "new_password": new_password,
        }), &["current_password", "new_password"]),
        "TokenRequest": closed(json!({
            "name": { "type": "string", "minLength": 1, "maxLength": 100 },
            "expires_at": {
                "type": ["string", "null"],
                "description": "RFC 3339 or YYYY-MM-DD (midnight UTC), in the future; \
                                absent or null: the token does not expire.",
            },
        }), &["name"]),
        "PasswordResetRequest": closed(json!({ "email": string() }), &["email"]),
        "PasswordResetCompletion": closed(json!({
            "token": { "type": "string", "pattern": format!("^{RESET_TOKEN_PREFIX}") },
            "new_password": new_password,
        }), &["token", "new_password"]),
        "EndpointRequest": closed(json!({
            "name": string(),
            "description": nullable_string(),
            "required_fields": { "type": "array", "items": string() },
            "schema": endpoint_schema(&["object", "boolean"]),
        }), &["name"]),
        "EndpointPatchRequest": closed(json!({
            "name": nullable_string(),
            "description": nullable_string(),
            "required_fields": { "type": ["array", "null"], "items": string() },
            "schema": endpoint_schema(&["object", "boolean", "null"]),
            "retention": {
                "anyOf": [schema_ref("RetentionSettings"), { "type": "null" }],
                "description": "Only the environments present change; `null` (for one, or for both) returns to the server's default.",
            },
            "active": { "type": ["boolean", "null"] },
            "monthly_quota": { "type": ["integer", "null"], "minimum": 1 },
        }), &[]),
        "RetentionSettings": closed(json!({
            "sandbox": retention_window(true, "sandbox", "1d"),
            "production": retention_window(true, "production", "60d"),
        }), &[]),
        "RetentionWindows": object(json!({
            "sandbox": retention_window(false, "sandbox", "1d"),
            "production": retention_window(false, "production", "60d"),
        }), &["sandbox", "production"]),
        "SchemaCheckRequest": closed(json!({
            "schema": endpoint_schema(&["object", "boolean"]),
            "limit": { "type": "integer", "minimum": 1, "maximum": CHECK_LIMIT_MAX, "default": CHECK_LIMIT_DEFAULT },
            "environment": schema_ref("Environment"),
        }), &["schema"]),
        "SchemaCheckReport": object(json!({
            "environment": schema_ref("Environment"),
            "checked": { "type": "integer", "minimum": 0, "description": "Records read: the newest `limit`, or fewer." },
            "failed": { "type": "integer", "minimum": 0, "description": "How many of them the schema would refuse." },
            "examples": {
                "type": "array",
                "maxItems": CHECK_EXAMPLES,
                "description": format!("The newest failing records, at most {CHECK_EXAMPLES}."),
                "items": schema_ref("FailingRecord"),
            },
        }), &["environment", "checked", "failed", "examples"]),
        "FailingRecord": object(json!({
            "id": schema_ref("RecordId"),
            "errors": {
                "type": "array",
                "maxItems": CHECK_EXAMPLES,
                "description": format!("Its first {CHECK_EXAMPLES} violations, in document order."),
                "items": schema_ref("SchemaViolation"),
            },
        }), &["id", "errors"]),
        "ErasureRequest": closed(json!({
            "environment": schema_ref("Environment"),
            "q": { "type": "string", "minLength": Q_MIN_CHARS, "maxLength": Q_MAX_CHARS,
                   "description": "The text to erase: every record whose payload text contains it, case-insensitively, as search matches it." },
            "start": described(string(), "The window's start: a date (`YYYY-MM-DD`, 00:00 UTC) or an RFC 3339 time. Default: the first record."),
            "end": described(string(), "The window's end (inclusive), at most now. Default: now."),
            "dry_run": { "type": "boolean", "default": false,
                         "description": "Only count the matches (200 `ErasureCount`); nothing is erased." },
            "notify": { "type": "boolean", "default": true,
                        "description": "Send each erased record's `record.deleted` webhooks and change-stream event, so that copies downstream can follow." },
            "expected": { "type": "integer", "minimum": 0,
                          "description": "The count a dry run answered: the erasure starts only while exactly that many records match (else 409 `conflict`, nothing erased)." },
        }), &["environment", "q"]),
        "ErasureCount": object(json!({
            "matched": integer(),
            "newest": { "type": "array", "maxItems": DRY_RUN_NEWEST, "items": schema_ref("RecordId"),
                        "description": "The newest matches, newest first." },
        }), &["matched", "newest"]),
        "Erasure": object(json!({
            "id": { "type": "string", "pattern": "^era_[1-9][0-9]*$" },
            "environment": schema_ref("Environment"),
            "state": described(string_enum(&["running", "finished", "failed"]),
                "`finished` once every match is erased from every copy intake keeps (records, delivery and attempt bodies, change-stream frames, the search index, the store's free pages)."),
            "matched": described(integer(), "The matches counted when it started (0 until counted)."),
            "erased": described(integer(), "Records erased so far."),
            "notify": { "type": "boolean" },
            "start": nullable(time()),
            "end": time(),
            "created_at": time(),
            "finished_at": nullable(time()),
            "error": nullable(string()),
        }), &["id", "environment", "state", "matched", "erased", "notify", "start", "end",
              "created_at", "finished_at", "error"]),
        "ErasureList": list_of("Erasure"),
        "DeployNoteRequest": closed(json!({ "note": nullable_string() }), &[]),
        "InvitationRequest": closed(json!({ "email": string(), "permissions": permissions_list() }),
                                    &["email", "permissions"]),
        "PermissionsRequest": closed(json!({ "permissions": permissions_list() }), &["permissions"]),
        "SubscriptionRequest": subscription_settings(&["url"]),
        "SubscriptionPatchRequest": subscription_settings(&[]),
        "RecoveryRequest": closed(json!({
            "since": { "type": "string", "description": "RFC 3339, or a date (midnight UTC)." },
            "until": { "type": ["string", "null"],
                       "description": "RFC 3339, or a date; absent, null or later than now: now." },
        }), &["since"]),
        "AccountPatchRequest": closed(json!({ "suspended": { "type": "boolean" } }), &["suspended"]),
        "TestMailRequest": closed(json!({ "to": nullable_string() }), &[]),
    })
}

/// An object of exactly these properties (a request body: another field answers 400).
fn closed(properties: Value, required: &[&str]) -> Value {
    let mut schema = object(properties, required);
    schema["additionalProperties"] = json!(false);
    schema
}

fn permissions_list() -> Value {
    json!({ "type": "array", "items": schema_ref("Permission") })
}

/// A subscription's settings: all of them (`POST`, `PUT`: `url` required), or the ones to
/// change (`PATCH`, where `null` removes an optional one).
fn subscription_settings(required: &[&str]) -> Value {
    closed(
        json!({
            "url": string(),
            "auth_header": nullable(string()),
            "auth_value": nullable(string()),
            "enabled": { "type": "boolean", "default": true },
            "description": { "type": "string", "maxLength": 200, "default": "" },
            "event_types": { "type": "array", "items": schema_ref("EventType"), "default": [],
                             "description": "Empty for every event type." },
            "rate_limit": nullable(json!({ "type": "integer", "minimum": 1, "maximum": 10_000 })),
        }),
        required,
    )
}

/// The small answers of single management calls.
fn answer_schemas() -> Value {
    json!({
        "LoggedOut": object(json!({ "logged_out": { "const": true } }), &["logged_out"]),
        "PasswordResetRequested": object(json!({ "requested": { "const": true } }),
                                         &["requested"]),
        "SessionsEnded": object(json!({ "ended": integer() }), &["ended"]),
        "RevokedToken": object(json!({ "id": string(), "revoked": { "const": true } }),
                               &["id", "revoked"]),
        "RemovedCollaborator": object(json!({
            "account_id": { "type": "integer" },
            "removed": { "const": true },
        }), &["account_id", "removed"]),
        "RemovedWebhook": object(json!({
            "environment": schema_ref("Environment"),
            "removed": { "const": true },
            "pending": string_enum(&["cancel", "keep"]),
            "cancelled": { "type": "integer", "minimum": 0,
                           "description": "Its pending deliveries cancelled (0 with `keep`)." },
        }), &["environment", "removed", "pending", "cancelled"]),
        "RemovedSubscription": object(json!({
            "id": string(),
            "environment": schema_ref("Environment"),
            "removed": { "const": true },
            "pending": string_enum(&["cancel", "keep"]),
            "cancelled": { "type": "integer", "minimum": 0,
                           "description": "Its pending deliveries cancelled (0 with `keep`)." },
        }), &["id", "environment", "removed", "pending", "cancelled"]),
        "QueuedMail": object(json!({
            "id": { "type": "integer" },
            "status": { "const": "queued" },
        }), &["id", "status"]),
    })
}
