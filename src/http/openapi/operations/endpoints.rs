//! Endpoints, their collaborators and invitations, and API keys.

use serde_json::{Value, json};

use super::{
    CREATED_AT, RECORD_ID, collaborator_example, cursor, endpoint_example, environment_query,
    invitation_example, limit, query,
};
use crate::domain::endpoints::{MAX_FIELD_NAME_CHARS, MAX_NAME_CHARS, MAX_REQUIRED_FIELDS};
use crate::domain::schema::{CHECK_EXAMPLES, CHECK_LIMIT_DEFAULT, CHECK_LIMIT_MAX};
use crate::http::openapi::{Access, BodyKind, Operation, Who, schema_ref};
use crate::http::routes::Route;
use crate::workers::request_log;

pub(super) fn endpoint_operations() -> Vec<Operation> {
    let op = |route, who| {
        Operation::new(route)
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
        op(Route::ListEndpoints, Who::Any)
            .summary("The caller's endpoints", "Those it owns or collaborates on.")
            .ok(200, "The endpoints.", schema_ref("EndpointList"), json!({ "data": [endpoint_example()] }))
            .error(403, &["token_required"]),
        op(Route::CreateEndpoint, Who::ServerOwner)
            .summary(
                "Create an endpoint",
                format!(
                    "Names are 1 to {MAX_NAME_CHARS} characters, different from the owner's \
                     other endpoints' (compared trimmed and case-insensitively: 409 \
                     `endpoint_name_taken`); at most {MAX_REQUIRED_FIELDS} required fields, each \
                     a top-level field name of 1 to {MAX_FIELD_NAME_CHARS} characters."
                ),
            )
            .body(
                BodyKind::Json,
                schema_ref("EndpointRequest"),
                json!({ "name": "Orders", "required_fields": ["email"] }),
            )
            .ok(201, "Created, with its keys.", schema_ref("Endpoint"), endpoint_example())
            .error(400, &["invalid_schema"])
            .error(409, &["endpoint_name_taken"])
            .link("GetEndpoint", "getEndpoint", json!({ "slug": "$response.body#/slug" })),
        op(Route::GetEndpoint, Who::Member)
            .summary("One endpoint", "With the caller's own keys.")
            .ok(200, "The endpoint.", schema_ref("Endpoint"), endpoint_example())
            .error(403, &["token_required"]),
        op(Route::UpdateEndpoint, Who::Owner)
            .summary(
                "Change an endpoint",
                "Only the fields sent change; `description: null` clears it, `monthly_quota: \
                 null` returns to the server default, `active: false` refuses data calls, \
                 `schema: null` removes the schema (a new schema applies to writes from the \
                 next one on and never touches stored records: try it first with \
                 `POST …/schema/check`), `retention` sets how long each environment's records \
                 are kept within the server's bounds (a shortened window is purged in the \
                 background within a minute; `null` returns to the server's default). `name`, \
                 `required_fields` or `active` sent as `null` leave that field unchanged.",
            )
            .body(
                BodyKind::Json,
                schema_ref("EndpointPatchRequest"),
                json!({ "description": "Web shop orders", "monthly_quota": 100000 }),
            )
            .ok(200, "The endpoint.", schema_ref("Endpoint"), endpoint_example())
            .error(400, &["invalid_schema"])
            .error(409, &["endpoint_name_taken"]),
        op(Route::CheckSchema, Who::Owner)
            .summary(
                "Try a schema on stored records",
                format!(
                    "A dry run before saving a schema: how many of the newest `limit` records \
                     (1 to {CHECK_LIMIT_MAX}, default {CHECK_LIMIT_DEFAULT}) of `environment` \
                     (default: the endpoint's current one) it would refuse, with the newest \
                     {CHECK_EXAMPLES} failing ones and their first violations. Changes nothing."
                ),
            )
            .body(
                BodyKind::Json,
                schema_ref("SchemaCheckRequest"),
                json!({ "schema": { "type": "object", "required": ["email"],
                    "properties": { "email": { "type": "string", "format": "email" } } },
                    "limit": 1000 }),
            )
            .ok(
                200,
                "What the schema would refuse.",
                schema_ref("SchemaCheckReport"),
                json!({ "environment": "production", "checked": 1000, "failed": 1,
                    "examples": [{ "id": RECORD_ID,
                        "errors": [{ "instance_path": "/email", "keyword": "format",
                            "message": "value is not a \"email\"" }] }] }),
            )
            .error(400, &["invalid_schema", "invalid_parameter"]),
        op(Route::CreateErasure, Who::Owner)
            .summary(
                "Erase one person's data",
                "Erasure of every record of `environment` whose payload text contains `q` \
                 (case-insensitive, as search matches) and was created in the window, from \
                 every copy intake keeps: the record, its webhook deliveries' bodies and \
                 attempts' response bodies (the deliveries stay, marked `erased`), its \
                 change-stream events' payloads, its search index entries and, on the embedded \
                 store, a payload dictionary that may hold pieces of it and the file's free \
                 pages. `dry_run` only counts (200). Otherwise it runs \
                 in the background (202), resumed after a restart: follow it at `getErasure`. \
                 The audit log records who asked, when, the window, the counts and a keyed \
                 hash of `q`, never `q` itself. Backups taken before still hold the records.",
            )
            .body(
                BodyKind::Json,
                schema_ref("ErasureRequest"),
                json!({ "environment": "production", "q": "ada@example.com", "dry_run": true }),
            )
            .ok(202, "The erasure, running.", schema_ref("Erasure"), erasure_example("running"))
            .also(200, "A dry run's count.", schema_ref("ErasureCount"),
                json!({ "matched": 3, "newest": [RECORD_ID] }))
            .error(400, &["invalid_parameter"])
            .error(409, &["conflict"]),
        op(Route::ListErasures, Who::Owner)
            .summary("The endpoint's erasures", "Newest first, both environments.")
            .ok(200, "The erasures.", schema_ref("ErasureList"),
                json!({ "data": [erasure_example("finished")] })),
        op(Route::GetErasure, Who::Owner)
            .summary("One erasure", "Its progress: `matched`, `erased`, `state`.")
            .ok(200, "The erasure.", schema_ref("Erasure"), erasure_example("finished"))
            .error(404, &["erasure_not_found"]),
        op(Route::DeleteEndpoint, Who::Owner)
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
        op(Route::DeployEndpoint, Who::Owner)
            .summary(
                "Deploy",
                "Production keys work from now on; approves a pending request. Idempotent.",
            )
            .ok(200, "The endpoint.", schema_ref("Endpoint"), endpoint_example()),
        deploy_note(op(
            Route::RequestDeploy,
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
            Route::ApproveDeploy,
            Who::Owner,
        )
        .summary("Approve the pending deploy request", "")
        .ok(200, "Deployed.", schema_ref("Endpoint"), endpoint_example())
        .error(404, &["deploy_request_not_found"]),
        deploy_note(op(
            Route::RejectDeploy,
            Who::Owner,
        ))
        .summary(
            "Reject the pending deploy request",
            "The note is passed on to the requester.",
        )
        .ok(200, "Rejected.", schema_ref("Endpoint"), endpoint_example())
        .error(404, &["deploy_request_not_found"]),
        op(Route::WithdrawDeploy, Who::Member)
            .summary(
                "Withdraw the pending deploy request",
                "Only the collaborator who asked (403 `requester_only`; the owner rejects \
                 instead). The endpoint stays in the sandbox, the owner's notification about \
                 the request is marked read and resolved `withdrawn`, and the audit log records \
                 `deploy.withdrawn`.",
            )
            .ok(200, "Withdrawn.", schema_ref("Endpoint"), endpoint_example())
            .error(403, &["requester_only"])
            .error(404, &["deploy_request_not_found"]),
        op(Route::ListRequests, Who::Member)
            .summary(
                "The request log",
                "Data calls on the endpoint, newest first, only those that pass every filter \
                 given. A page reads at most 5,000 entries; a filtered page may hold fewer than \
                 `limit` and still have a `next_cursor`. A `request_id` made by this version \
                 (it carries its time) is found wherever it is in the log. Each entry names \
                 the record the call was about (`record_id`, and for a batch its first record \
                 and `record_count`). No request or response body is kept: of an error, its \
                 `code` and `message`.",
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
                    "holder": { "kind": "collaborator", "account_id": 7, "email": "dev@example.com" },
                    "record_id": null, "record_count": null }],
                    "pagination": {} }),
            )
            .error(400, &["invalid_parameter"]),
        op(Route::ListAudit, Who::Owner)
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
        op(Route::GetUsage, Who::Owner)
            .summary("Data calls per month", "Newest month first.")
            .ok(
                200,
                "Usage.",
                schema_ref("Usage"),
                json!({ "monthly_quota": null, "months": [{ "month": "2026-11", "sandbox": 120, "production": 0 }] }),
            ),
    ]
}

pub(super) fn collaborator_operations() -> Vec<Operation> {
    let owner = |route| {
        Operation::new(route)
            .tag("Collaborators")
            .access(Access::Account(Who::Owner))
    };
    vec![
        owner(Route::ListInvitations)
            .summary("Invitations sent", "")
            .ok(
                200,
                "Invitations.",
                schema_ref("InvitationList"),
                json!({ "data": [invitation_example()] }),
            ),
        owner(Route::CreateInvitation)
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
        owner(Route::RevokeInvitation)
            .summary("Revoke a pending invitation", "")
            .ok(200, "Revoked.", schema_ref("Invitation"), {
                let mut i = invitation_example();
                i["status"] = json!("revoked");
                i["accept_url"] = Value::Null;
                i
            })
            .error(404, &["invitation_not_found"])
            .error(409, &["conflict"]),
        owner(Route::ListCollaborators)
            .summary("Collaborators", "")
            .ok(
                200,
                "Collaborators.",
                schema_ref("CollaboratorList"),
                json!({ "data": [collaborator_example()] }),
            ),
        owner(Route::UpdateCollaborator)
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
        owner(Route::RemoveCollaborator)
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

pub(super) fn key_operations() -> Vec<Operation> {
    let op = |route, who| {
        Operation::new(route)
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
    let rotate = |route, who, whose: &str| {
        op(route, who)
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
        |route, who, whose: &str| {
            op(route, who)
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
        rotate(Route::RotateKey, Who::Member, own),
        revoke(Route::RevokePreviousKey, Who::Member, own),
        rotate(Route::RotateCollaboratorKey, Who::Owner, theirs)
            .error(404, &["collaborator_not_found"]),
        revoke(Route::RevokePreviousCollaboratorKey, Who::Owner, theirs)
            .error(404, &["collaborator_not_found"]),
    ]
}

fn erasure_example(state: &str) -> Value {
    let finished = state == "finished";
    json!({ "id": "era_1", "environment": "production", "state": state,
            "matched": 3, "erased": if finished { 3 } else { 0 }, "notify": true,
            "start": null, "end": CREATED_AT, "created_at": CREATED_AT,
            "finished_at": if finished { Some(CREATED_AT) } else { None }, "error": null })
}
