//! The data operations (an endpoint's records) and the change stream.

use serde_json::{Value, json};

use super::{
    CREATED_AT, RECORD_ID, cursor, header, limit, query, record_example, webhook_headers,
    with_sample,
};
use crate::domain::{poll, records, search};
use crate::http::openapi::{
    Access, BodyKind, DATA_TAG, Operation, Param, STREAM_TAG, examples, schema_ref,
};
use crate::http::routes::Route;
use crate::store::Permission;

/// The parameters of a link from a record's creation to an operation on that record.
fn record_link() -> Value {
    json!({ "slug": "$request.path.slug", "record_id": "$response.body#/id" })
}

/// The seven data operations, in the spec's order, with batch ingest after the create.
pub(super) fn data_operations() -> Vec<Operation> {
    let data = |route| Operation::new(route).tag(DATA_TAG);
    vec![
        webhook_headers(
            data(Route::CreateRecord)
                .summary(
                    "Create a record",
                    "Stores the payload durably (fsync) before answering 202. A retry with the \
                     same `Idempotency-Key` and payload within 24 hours returns the original \
                     answer and creates nothing.",
                )
                .access(Access::DataKey(Permission::Create))
                .param(header(
                    "Idempotency-Key",
                    format!(
                        "1 to {} printable ASCII characters, scoped to the endpoint and \
                         environment; the same key with another payload answers 409 \
                         `idempotency_key_conflict`.",
                        records::IDEMPOTENCY_KEY_MAX
                    ),
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
        webhook_headers(
            data(Route::CreateRecordBatch)
                .summary(
                    "Create records in a batch",
                    "Up to 1,000 records in one request, each held to every rule of a single \
                     create. All or nothing: if any record is refused the answer is 400 \
                     `batch_invalid` listing each refused record (`error.records`) and nothing \
                     is stored; otherwise every record is stored durably in one commit before \
                     the 202, which lists the new ids in the order sent. Each record gets its \
                     own webhooks and change-stream event, in that order. One \
                     `Idempotency-Key` covers the whole batch. The monthly quota counts \
                     records: a batch that would pass it is refused whole with 429; a refused \
                     batch counts nothing.",
                )
                .access(Access::DataKey(Permission::Create))
                .param(header(
                    "Idempotency-Key",
                    format!(
                        "1 to {} printable ASCII characters, for the whole batch: a retry with \
                         the same records within 24 hours answers the same ids and \
                         `created_at`s; other records, or a key used by a single create, \
                         answer 409 `idempotency_key_conflict`.",
                        records::IDEMPOTENCY_KEY_MAX
                    ),
                ))
                .body(
                    BodyKind::Batch,
                    schema_ref("BatchRecords"),
                    json!([
                        { "email": "ada@example.com", "total": 42.5 },
                        { "email": "grace@example.com", "total": 7 }
                    ]),
                )
                .ok(
                    202,
                    "Every record stored; the ids in the order sent.",
                    schema_ref("BatchAccepted"),
                    json!({ "data": [
                        { "index": 0, "id": RECORD_ID, "created_at": CREATED_AT },
                        { "index": 1, "id": "rec_01m80m0sfsv1ye3q7k2w0c9kxa", "created_at": CREATED_AT }
                    ] }),
                ),
        )
        .error(400, &["invalid_idempotency_key"])
        .error(409, &["idempotency_key_conflict"]),
        data(Route::GetRecord)
            .summary("Read one record", "The record with its payload as stored.")
            .access(Access::DataKey(Permission::Read))
            .ok(200, "The record.", schema_ref("Record"), record_example())
            .error(404, &["record_not_found"]),
        data(Route::ListRecords)
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
        data(Route::SearchRecords)
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
                sample: Some(examples::EXAMPLE_VALUE),
                ..query(
                    "q",
                    format!(
                        "The text to find: {} to {} characters.",
                        search::Q_MIN_CHARS,
                        search::Q_MAX_CHARS
                    ),
                    json!({ "type": "string", "minLength": search::Q_MIN_CHARS,
                            "maxLength": search::Q_MAX_CHARS }),
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
        data(Route::ExportRecords)
            .summary(
                "Export records",
                "Every record of the window (all of them by default), or only those whose \
                 payload contains `q`, as NDJSON (the default), CSV or one JSON array, \
                 streamed with chunked encoding from one snapshot: the answer is the same \
                 however long it takes to read, and writes made after it began are not in it. \
                 The key is checked again while the export runs: an export whose key, read \
                 permission or endpoint goes away ends with a cut answer (no final chunk). \
                 CSV: `id,created_at,updated_at`, then one column per field (`fields`, else \
                 the top-level keys of the newest 1,000 records of the window); numbers as \
                 stored, null and missing fields empty, objects and arrays as JSON text, and a \
                 text that begins with `=`, `+`, `-`, `@`, a tab or a carriage return prefixed \
                 with `'` (so a spreadsheet does not run it as a formula).",
            )
            .access(Access::DataKey(Permission::Read))
            .param(with_sample(
                query(
                    "format",
                    "`ndjson` (default), `csv` or `json`.",
                    json!({ "type": "string", "enum": ["ndjson", "csv", "json"] }),
                ),
                "json",
            ))
            .param(query(
                "start",
                "Window start, inclusive: `YYYY-MM-DD` (UTC midnight) or RFC 3339; default: \
                 the first record.",
                json!({ "type": "string" }),
            ))
            .param(query(
                "end",
                "Window end, inclusive: `YYYY-MM-DD` or RFC 3339; default: the last record.",
                json!({ "type": "string" }),
            ))
            .param(query(
                "q",
                format!(
                    "Only records whose payload text contains this ({} to {} characters, \
                     case-insensitive, as search matches).",
                    search::Q_MIN_CHARS,
                    search::Q_MAX_CHARS
                ),
                json!({ "type": "string" }),
            ))
            .param(query(
                "order",
                "`asc` (oldest first, the default) or `desc`.",
                json!({ "type": "string", "enum": ["asc", "desc"] }),
            ))
            .param(query(
                "fields",
                "CSV only: comma-separated dotted paths (`email,address.city`), the columns \
                 after `id,created_at,updated_at`.",
                json!({ "type": "string" }),
            ))
            .ok_download(
                "The records, one per line (NDJSON), as CSV, or as one JSON array; \
                 `Content-Disposition` names a file after the slug and the window.",
                "application/x-ndjson",
                "{\"id\":\"rec_01m80m0sfsv1yd0kcm7nw4m58e\",\"payload\":{\"email\":\"ada@example.com\"},\
                 \"created_at\":\"2026-11-22T08:00:00.000000Z\",\"updated_at\":\"2026-11-22T08:00:00.000000Z\"}\n",
                vec![
                    (
                        "text/csv",
                        json!({ "type": "string" }),
                        "id,created_at,updated_at,email\r\nrec_01m80m0sfsv1yd0kcm7nw4m58e,\
                         2026-11-22T08:00:00.000000Z,2026-11-22T08:00:00.000000Z,ada@example.com\r\n",
                    ),
                    (
                        "application/json",
                        schema_ref("RecordExport"),
                        "[{\"id\":\"rec_01m80m0sfsv1yd0kcm7nw4m58e\",\"payload\":{\"email\":\"ada@example.com\"},\
                         \"created_at\":\"2026-11-22T08:00:00.000000Z\",\"updated_at\":\"2026-11-22T08:00:00.000000Z\"}]",
                    ),
                ],
            )
            .error(400, &["invalid_parameter"]),
        data(Route::PollRecords)
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
            data(Route::ReplaceRecord)
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
            data(Route::DeleteRecord)
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
pub(super) fn stream_operation() -> Operation {
    Operation::new(Route::StreamRecords)
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
