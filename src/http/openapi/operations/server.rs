//! The server's own operations: the OpenAPI documents, health, metrics and administration.

use serde_json::json;

use super::{account_example, cursor, limit, mail_example, readiness_example};
use crate::domain::mail;
use crate::http::openapi::{Access, BodyKind, Operation, Who, schema_ref};
use crate::http::routes::Route;

pub(super) fn documentation_operations() -> Vec<Operation> {
    vec![
        Operation::new(Route::GetOpenApi)
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
        Operation::new(Route::GetEndpointOpenApi)
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
        Operation::new(Route::Health)
            .tag("Health")
            .summary("Liveness", "Answers while the server runs.")
            .ok(
                200,
                "Running.",
                schema_ref("Health"),
                json!({ "status": "ok" }),
            ),
        Operation::new(Route::Ready)
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
        Operation::new(Route::Metrics)
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

pub(super) fn administration_operations() -> Vec<Operation> {
    let op = |route| {
        Operation::new(route)
            .tag("Administration")
            .access(Access::Account(Who::ServerOwner))
    };
    vec![
        op(Route::ListAccounts).summary("Every account", "").ok(
            200,
            "Accounts.",
            schema_ref("AccountList"),
            json!({ "data": [account_example()] }),
        ),
        op(Route::GetAccountById)
            .summary("One account", "")
            .ok(
                200,
                "The account.",
                schema_ref("Account"),
                account_example(),
            )
            .error(404, &["account_not_found"]),
        op(Route::UpdateAccount)
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
        op(Route::ListMail)
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
        op(Route::GetMail)
            .summary("One e-mail, with its body", "A non-numeric id answers 400.")
            .ok(200, "The e-mail.", schema_ref("Mail"), {
                let mut m = mail_example();
                m["body"] = json!("…");
                m
            })
            .error(400, &["invalid_parameter"])
            .error(404, &["mail_not_found"]),
        op(Route::SendTestMail)
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
        op(Route::CreateBackup)
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
