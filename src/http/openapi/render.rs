//! One operation written as OpenAPI JSON: its parameters, body, responses (every error code
//! it can answer, by status) and security requirement.

use serde_json::{Map, Value, json};

use super::*;

/// The operation object of `op`, with these path parameters.
pub(super) fn operation_json(op: &Operation, path_params: &[Param]) -> Value {
    let mut value = json!({
        "operationId": op.id,
        "tags": [op.tag],
        "summary": op.summary,
        "description": op.description,
        "security": security(op.access),
    });
    let params: Vec<Value> = path_params
        .iter()
        .chain(&op.params)
        .map(param_json)
        .collect();
    if !params.is_empty() {
        value["parameters"] = Value::Array(params);
    }
    if let Some(body) = &op.body {
        let limit = thousands(match body.kind {
            BodyKind::Payload => MAX_DATA_BODY,
            BodyKind::Batch => batch::MAX_BODY_BYTES,
            BodyKind::Json | BodyKind::OptionalJson => MAX_MANAGE_BODY,
        });
        value["requestBody"] = match body.kind {
            BodyKind::Batch => json!({
                "required": true,
                "description": format!(
                    "At most {limit} bytes and {} records, each at most {} bytes: \
                     `application/x-ndjson` (one JSON document per line; blank lines are \
                     skipped) or `application/json` (one array), optionally with \
                     `; charset=utf-8`.",
                    thousands(batch::MAX_RECORDS),
                    thousands(MAX_DATA_BODY),
                ),
                "content": {
                    "application/x-ndjson": {
                        "schema": { "type": "string", "description": "One record per line." },
                        "example": ndjson(&body.example),
                    },
                    "application/json": { "schema": body.schema, "example": body.example },
                },
            }),
            _ => json!({
                "required": body.kind != BodyKind::OptionalJson,
                "description": format!(
                    "`application/json` (optionally `; charset=utf-8`), at most {limit} bytes."
                ),
                "content": { "application/json": { "schema": body.schema, "example": body.example } },
            }),
        };
    }
    let mut responses = Map::new();
    for outcome in std::iter::once(&op.success).chain(&op.also) {
        let mut media = json!({ "schema": outcome.schema });
        if !outcome.example.is_null() {
            media["example"] = outcome.example.clone();
        }
        let mut response = json!({
            "description": outcome.description,
            "headers": { "X-Request-Id": { "$ref": "#/components/headers/X-Request-Id" } },
            "content": { outcome.content_type: media },
        });
        for (media_type, schema, example) in &outcome.alternatives {
            let example = match *media_type {
                JSON => serde_json::from_str(example).unwrap_or(Value::Null),
                _ => Value::String((*example).to_string()),
            };
            response["content"][*media_type] = json!({ "schema": schema, "example": example });
        }
        if op.id == "login" || op.id == "acceptInvitation" {
            response["headers"]["Set-Cookie"] =
                json!({ "$ref": "#/components/headers/Set-Cookie" });
        }
        if outcome.file {
            response["headers"]["Content-Disposition"] =
                json!({ "$ref": "#/components/headers/Content-Disposition" });
        }
        if outcome.status == op.success.status && !op.links.is_empty() {
            let links: Map<String, Value> = op
                .links
                .iter()
                .map(|(name, target, parameters)| {
                    let link = json!({ "operationId": target, "parameters": parameters });
                    ((*name).to_string(), link)
                })
                .collect();
            response["links"] = Value::Object(links);
        }
        responses.insert(outcome.status.to_string(), response);
    }
    let mut own_unavailable = Vec::new();
    for (status, codes) in op.error_codes() {
        if status == 503 {
            // Joined with the server-side 503s below.
            own_unavailable = codes;
            continue;
        }
        responses.insert(status.to_string(), error_response(status, &codes));
    }
    // Server-side trouble, listed by status rather than as `default` so that a client (and
    // the conformance run, tests/conformance) can tell an undocumented status from these.
    // `/readyz` documents its own 503.
    responses
        .entry("500")
        .or_insert_with(|| error_response(500, &["internal_error"]));
    responses.entry("503").or_insert_with(|| {
        let mut codes = vec![
            "storage_unavailable",
            "storage_full",
            "shutting_down",
            "server_busy",
        ];
        codes.extend(&own_unavailable);
        let mut unavailable = error_response(503, &codes);
        let own: String = own_unavailable
            .iter()
            .map(|code| format!(", `{code}`"))
            .collect();
        unavailable["description"] = json!(format!(
            "Error codes: `storage_unavailable`, `storage_full` (the data dir's disk is below \
             `[storage] min_free_mb`), `shutting_down`, `server_busy` (request bodies already \
             hold `[http] body_memory_mb`; the body was not read){own}. The request was not \
             processed (but a write whose commit got no answer from the database may have \
             been stored: retry it with the same `Idempotency-Key`): retry with backoff after \
             `Retry-After`."
        ));
        unavailable
    });
    // A body that does not arrive within `[http] body_timeout`.
    if value.get("requestBody").is_some() {
        responses
            .entry("408")
            .or_insert_with(|| error_response(408, &["request_timeout"]));
    }
    value["responses"] = Value::Object(responses);
    value
}

fn security(access: Access) -> Value {
    match access {
        Access::Public => json!([]),
        Access::DataKey(_) => json!([{ "apiKey": [] }]),
        Access::Account(_) => json!([{ "accountToken": [] }, { "sessionCookie": [] }]),
        Access::KeyOrMember => {
            json!([{ "apiKey": [] }, { "accountToken": [] }, { "sessionCookie": [] }])
        }
        Access::Invitation => json!([{}, { "accountToken": [] }, { "sessionCookie": [] }]),
        Access::MetricsToken => json!([{}, { "metricsToken": [] }]),
    }
}

fn param_json(p: &Param) -> Value {
    let mut value = json!({
        "name": p.name,
        "in": p.at.as_str(),
        "required": p.required,
        "description": p.description,
        "schema": p.schema,
    });
    if let Some(sample) = p.sample {
        value["example"] = Value::String(sample.into());
    }
    value
}

/// An error response carrying one of `codes`: the `Error` schema narrowed to them.
fn error_response(status: u16, codes: &[&str]) -> Value {
    let mut headers = json!({ "X-Request-Id": { "$ref": "#/components/headers/X-Request-Id" } });
    if status == 429 || status == 503 {
        headers["Retry-After"] = json!({ "$ref": "#/components/headers/Retry-After" });
    }
    let mut example = json!({ "error": {
        "code": codes.first(),
        "message": "A sentence for humans saying what was wrong.",
        "request_id": "req_0f3k9x2m4n8p1q7r",
    } });
    if codes.first() == Some(&"batch_invalid") {
        example["error"]["message"] =
            "The record at index 1 was refused: The payload is missing the required field \
             `email`. Nothing was stored."
                .into();
        example["error"]["records"] = json!([{
            "index": 1,
            "code": "missing_required_field",
            "message": "The payload is missing the required field `email`.",
        }]);
    }
    json!({
        "description": format!(
            "Error codes: {}.",
            codes.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
        ),
        "headers": headers,
        "content": { "application/json": {
            "schema": {
                "allOf": [schema_ref("Error")],
                "properties": { "error": { "properties": { "code": { "enum": codes } } } },
            },
            "example": example,
        } },
    })
}
