//! The OpenAPI 3.1 description of the whole HTTP API, built from Rust.
//!
//! Every operation is declared once, in [`operations::all`], as an [`Operation`]: its route of
//! the table (`http::routes`: method, path template, id), who may call it ([`Access`]), its
//! parameters, request body, success response with an example, and the error codes that only
//! it can answer. The errors every caller of a kind can meet (a missing key, a suspended
//! account, an unknown slug, a bad body...) follow from `Access`, the path and the body, so
//! they are written once here ([`Operation::error_codes`]). From those declarations come:
//!
//! - [`document`]: the document served at `GET /api/v1/openapi.json`;
//! - [`endpoint_document`]: one endpoint's data API, its slug, required fields and JSON Schema
//!   filled in, with code samples (`x-codeSamples`), served at
//!   `GET /api/v1/data/{slug}/openapi.json`;
//! - [`examples`]: curl, JavaScript and Python snippets for the seven data operations.
//!
//! `tests/openapi.rs` keeps the document true: it checks it against the route table, calls
//! every operation and provokes every documented status over HTTP, and validates the bodies
//! against the documented schemas.

pub mod examples;
mod operations;
mod payload_schema;
mod render;
mod schemas;

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::domain::batch;
use crate::http::request::{MAX_DATA_BODY, MAX_MANAGE_BODY};
use crate::http::routes::Route;
use crate::store::{EndpointRow, Permission};

pub use operations::all as operations;
use render::operation_json;

/// Who may call an operation; decides its security requirement and the errors of
/// authentication and authorisation it can answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// No credentials.
    Public,
    /// An API key of the endpoint whose key holder has this permission (data calls).
    DataKey(Permission),
    /// An account token or session cookie (management calls).
    Account(Who),
    /// An API key of the endpoint (any permission), or the token or session of its owner or
    /// a collaborator.
    KeyOrMember,
    /// The invitation token in the path is the credential; a token or session is optional.
    Invitation,
    /// Open, unless `[operations] metrics_token` is set: then that token as a bearer.
    MetricsToken,
}

/// Which accounts may make a management call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    /// Any account, about itself.
    Any,
    /// The server's owner account (`intake init`).
    ServerOwner,
    /// The endpoint's owner or one of its collaborators.
    Member,
    /// The endpoint's owner (its collaborators get 403 `owner_only`).
    Owner,
}

/// Where a parameter goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum In {
    Path,
    Query,
    Header,
}

impl In {
    fn as_str(self) -> &'static str {
        match self {
            In::Path => "path",
            In::Query => "query",
            In::Header => "header",
        }
    }
}

/// One parameter. `sample` is the value code samples send (only parameters with one are
/// sent by them).
#[derive(Clone, Debug)]
pub struct Param {
    pub name: &'static str,
    pub at: In,
    pub required: bool,
    pub description: String,
    pub schema: Value,
    pub sample: Option<&'static str>,
}

/// What kind of request body, which decides its errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    /// A record payload (100 KB; required fields apply).
    Payload,
    /// A batch of record payloads: NDJSON or a JSON array (5 MiB, 1,000 records).
    Batch,
    /// A management body (64 KB) that must be sent.
    Json,
    /// A management body that may be left out entirely.
    OptionalJson,
}

#[derive(Clone, Debug)]
pub struct Body {
    pub kind: BodyKind,
    pub schema: Value,
    pub example: Value,
}

/// A response that is not an error: the success, and any other documented outcome.
#[derive(Clone, Debug)]
pub struct Success {
    pub status: u16,
    pub description: &'static str,
    /// `application/json` unless the operation answers text or a file.
    pub content_type: &'static str,
    pub schema: Value,
    pub example: Value,
    /// Other media types the same answer may come as (chosen by a parameter), each with its
    /// schema and an example.
    pub alternatives: Vec<(&'static str, Value, &'static str)>,
    /// A download: the answer names a file (`Content-Disposition`).
    pub file: bool,
}

/// One operation: a method on a path template of the route table.
#[derive(Clone, Debug)]
pub struct Operation {
    /// Lower case, as OpenAPI writes it.
    pub method: &'static str,
    pub path: &'static str,
    pub id: &'static str,
    pub tag: &'static str,
    pub summary: &'static str,
    pub description: String,
    pub access: Access,
    /// Query and header parameters; path parameters follow from the template.
    pub params: Vec<Param>,
    pub body: Option<Body>,
    pub success: Success,
    /// Other non-error outcomes (such as `/readyz`'s 503 with the same body).
    pub also: Vec<Success>,
    /// The errors only this operation answers, on top of [`Operation::error_codes`]'s.
    pub errors: Vec<(u16, &'static [&'static str])>,
    /// OpenAPI links of the success response: (name, target operation id, its parameters as
    /// runtime expressions), so a client (and the stateful conformance run) can follow a
    /// create to the resource it made.
    pub links: Vec<(&'static str, &'static str, Value)>,
}

const JSON: &str = "application/json";
/// A file download. Generators map it to bytes (a named media type such as
/// `application/x-tar` is one that openapi-python-client cannot map: it leaves the response
/// out with a warning); the schema's `contentMediaType` says what the bytes are.
const BINARY: &str = "application/octet-stream";

/// The tag of the seven data operations.
pub const DATA_TAG: &str = "Data";
/// The change stream's tag: beside the data operations, outside an endpoint's own document.
pub const STREAM_TAG: &str = "Change stream";

/// A 200 answered as text of `content_type` (or of one of `alternatives`), a file when `file`.
fn text_success(
    description: &'static str,
    content_type: &'static str,
    example: &'static str,
    alternatives: Vec<(&'static str, Value, &'static str)>,
    file: bool,
) -> Success {
    Success {
        status: 200,
        description,
        content_type,
        schema: json!({ "type": "string" }),
        example: Value::String(example.into()),
        alternatives,
        file,
    }
}

/// `n` as the document writes numbers in prose: `102,400`.
pub fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut text = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            text.push(',');
        }
        text.push(digit);
    }
    text
}

/// A reference to a schema in `components`.
pub fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

impl Operation {
    /// The operation of `route`: its method, path and id are the route table's.
    pub fn new(route: Route) -> Operation {
        Operation {
            method: route.verb().lowercase(),
            path: route.template(),
            id: route.operation_id(),
            tag: "",
            summary: "",
            description: String::new(),
            access: Access::Public,
            params: Vec::new(),
            body: None,
            success: Success {
                status: 200,
                description: "",
                content_type: JSON,
                schema: json!({}),
                example: Value::Null,
                alternatives: Vec::new(),
                file: false,
            },
            also: Vec::new(),
            errors: Vec::new(),
            links: Vec::new(),
        }
    }

    pub fn tag(mut self, tag: &'static str) -> Self {
        self.tag = tag;
        self
    }

    pub fn summary(mut self, summary: &'static str, description: impl Into<String>) -> Self {
        self.summary = summary;
        self.description = description.into();
        self
    }

    pub fn access(mut self, access: Access) -> Self {
        self.access = access;
        self
    }

    pub fn param(mut self, param: Param) -> Self {
        self.params.push(param);
        self
    }

    pub fn body(mut self, kind: BodyKind, schema: Value, example: Value) -> Self {
        self.body = Some(Body {
            kind,
            schema,
            example,
        });
        self
    }

    pub fn ok(
        mut self,
        status: u16,
        description: &'static str,
        schema: Value,
        example: Value,
    ) -> Self {
        // A second `ok` would silently replace the first: other outcomes go in `also`.
        debug_assert!(
            self.success.description.is_empty(),
            "{}: one success",
            self.id
        );
        self.success = Success {
            status,
            description,
            content_type: JSON,
            schema,
            example,
            alternatives: Vec::new(),
            file: false,
        };
        self
    }

    /// The success is text of `content_type`, such as `example`.
    pub fn ok_text(
        mut self,
        description: &'static str,
        content_type: &'static str,
        example: &'static str,
    ) -> Self {
        self.success = text_success(description, content_type, example, Vec::new(), false);
        self
    }

    /// The success is a text file to download (`Content-Disposition`) as `content_type`, or
    /// as one of `alternatives`; each with its example.
    pub fn ok_download(
        mut self,
        description: &'static str,
        content_type: &'static str,
        example: &'static str,
        alternatives: Vec<(&'static str, Value, &'static str)>,
    ) -> Self {
        self.success = text_success(description, content_type, example, alternatives, true);
        self
    }

    /// The success is a file download of `media_type` (`application/octet-stream` on the wire,
    /// with a `Content-Disposition` file name).
    pub fn ok_file(mut self, description: &'static str, media_type: &'static str) -> Self {
        self.success = Success {
            status: 200,
            description,
            content_type: BINARY,
            schema: json!({ "type": "string", "format": "binary", "contentMediaType": media_type }),
            example: Value::Null,
            alternatives: Vec::new(),
            file: true,
        };
        self
    }

    /// Another outcome that is not an error, answered as JSON.
    pub fn also(
        mut self,
        status: u16,
        description: &'static str,
        schema: Value,
        example: Value,
    ) -> Self {
        self.also.push(Success {
            status,
            description,
            content_type: JSON,
            schema,
            example,
            alternatives: Vec::new(),
            file: false,
        });
        self
    }

    pub fn error(mut self, status: u16, codes: &'static [&'static str]) -> Self {
        self.errors.push((status, codes));
        self
    }

    /// A link from the success response to operation `target` with these `parameters`.
    pub fn link(mut self, name: &'static str, target: &'static str, parameters: Value) -> Self {
        self.links.push((name, target, parameters));
        self
    }

    /// The path parameters, in the order of the template.
    pub fn path_params(&self) -> Vec<Param> {
        self.path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .map(operations::path_param)
            .collect()
    }

    /// Every error status this operation can answer with its stable codes: the ones that
    /// follow from its access, path and body, then its own. 5xx answers (storage trouble,
    /// shutting down) are the 500 and 503 responses of every operation.
    pub fn error_codes(&self) -> BTreeMap<u16, Vec<&'static str>> {
        let mut codes: BTreeMap<u16, Vec<&'static str>> = BTreeMap::new();
        let mut add = |status: u16, list: &[&'static str]| {
            let entry = codes.entry(status).or_default();
            for code in list {
                if !entry.contains(code) {
                    entry.push(code);
                }
            }
        };
        let has_slug = self.path.contains("{slug}");
        match self.access {
            Access::Public | Access::Invitation => {}
            Access::MetricsToken => add(401, &["invalid_metrics_token"]),
            Access::DataKey(permission) => {
                add(401, &["missing_api_key", "invalid_api_key"]);
                add(
                    403,
                    &[
                        "endpoint_inactive",
                        "account_suspended",
                        "endpoint_not_deployed",
                        missing_permission(permission),
                    ],
                );
                add(404, &["endpoint_not_found"]);
                add(429, &["usage_limit_exceeded"]);
            }
            Access::Account(who) => {
                add(401, &["missing_token", "invalid_token", "session_expired"]);
                add(403, &["account_suspended"]);
                match who {
                    Who::ServerOwner => add(403, &["server_owner_only"]),
                    Who::Owner => add(403, &["owner_only"]),
                    Who::Any | Who::Member => {}
                }
                if has_slug {
                    add(404, &["endpoint_not_found"]);
                }
            }
            Access::KeyOrMember => {
                add(
                    401,
                    &[
                        "missing_api_key",
                        "invalid_api_key",
                        "invalid_token",
                        "session_expired",
                    ],
                );
                add(
                    403,
                    &[
                        "endpoint_inactive",
                        "account_suspended",
                        "endpoint_not_deployed",
                    ],
                );
                add(404, &["endpoint_not_found"]);
            }
        }
        // A session cookie authorises a change only from this server's own pages.
        if matches!(self.access, Access::Account(_) | Access::Invitation) && self.method != "get" {
            add(403, &["cross_site_request"]);
        }
        if self.path.contains("{record_id}") {
            add(400, &["invalid_record_id"]);
        }
        if let Some(body) = &self.body {
            match body.kind {
                BodyKind::Payload => add(
                    400,
                    &["invalid_json", "missing_required_field", "schema_violation"],
                ),
                BodyKind::Batch => {
                    add(
                        400,
                        &[
                            "batch_invalid",
                            "batch_empty",
                            "invalid_json",
                            "invalid_request",
                        ],
                    );
                    add(413, &["batch_too_large"]);
                }
                BodyKind::Json | BodyKind::OptionalJson => {
                    add(400, &["invalid_json", "invalid_request"])
                }
            }
            add(413, &["payload_too_large"]);
            add(415, &["unsupported_media_type"]);
        }
        for (status, list) in &self.errors {
            add(*status, list);
        }
        codes
    }
}

fn missing_permission(permission: Permission) -> &'static str {
    match permission {
        Permission::Create => "missing_permission_create",
        Permission::Read => "missing_permission_read",
        Permission::Replace => "missing_permission_replace",
        Permission::Delete => "missing_permission_delete",
    }
}

/// The whole API, with `base_url` as its server.
pub fn document(base_url: &str) -> Value {
    let mut paths = Map::new();
    for op in operations() {
        let item = paths
            .entry(op.path)
            .or_insert_with(|| Value::Object(Map::new()));
        item[op.method] = operation_json(&op, &op.path_params());
    }
    json!({
        "openapi": "3.1.0",
        "info": info("intake API", API_DESCRIPTION),
        "servers": [{ "url": base_url }],
        "tags": schemas::tags(),
        "paths": paths,
        "webhooks": schemas::webhooks(),
        "components": schemas::components(),
    })
}

/// What an endpoint's own document is built from.
pub struct EndpointInfo<'a> {
    pub slug: &'a str,
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub required_fields: &'a [String],
    /// The endpoint's JSON Schema, if it has one.
    pub schema: Option<Value>,
}

impl<'a> EndpointInfo<'a> {
    /// An endpoint's document as its row describes it (a stored schema that is not JSON is
    /// left out: writes answer 500 then, and the document says "any JSON").
    pub fn of(endpoint: &'a EndpointRow) -> EndpointInfo<'a> {
        EndpointInfo {
            slug: &endpoint.slug,
            name: &endpoint.name,
            description: endpoint.description.as_deref(),
            required_fields: &endpoint.required_fields,
            schema: endpoint
                .schema
                .as_deref()
                .and_then(|text| serde_json::from_str(text).ok()),
        }
    }
}

/// One endpoint's data API: the seven data operations on its own paths (no `{slug}`), its
/// payload schema (its JSON Schema if it has one, with its required fields), and
/// `x-codeSamples` (curl, JavaScript, Python) with a placeholder key and record id.
pub fn endpoint_document(base_url: &str, endpoint: &EndpointInfo) -> Value {
    let mut paths = Map::new();
    let context = examples::Context {
        base_url,
        slug: endpoint.slug,
        required_fields: endpoint.required_fields,
        key: None,
        record_id: None,
    };
    for op in operations().into_iter().filter(|op| op.tag == DATA_TAG) {
        let path = op.path.replace("{slug}", endpoint.slug);
        let params: Vec<Param> = op
            .path_params()
            .into_iter()
            .filter(|p| p.name != "slug")
            .collect();
        let mut value = operation_json(&op, &params);
        if let Some(content) = value.pointer_mut("/requestBody/content") {
            match op.body.as_ref().map(|body| body.kind) {
                // The records' schema is this endpoint's (`BatchRecords` below).
                Some(BodyKind::Batch) => {
                    let records = examples::batch(endpoint.required_fields);
                    content["application/x-ndjson"]["example"] = ndjson(&records);
                    content["application/json"]["example"] = records;
                }
                _ => {
                    content["application/json"]["schema"] = schema_ref(WRITE_PAYLOAD);
                    content["application/json"]["example"] =
                        examples::payload(endpoint.required_fields);
                }
            }
        }
        value["x-codeSamples"] = examples::for_operation(&op, &context)
            .iter()
            .map(|s| json!({ "lang": s.lang, "label": s.label, "source": s.source }))
            .collect();
        let item = paths
            .entry(path)
            .or_insert_with(|| Value::Object(Map::new()));
        item[op.method] = value;
    }
    let mut description = format!(
        "The data API of the endpoint `{}` ({}). {}",
        endpoint.slug, endpoint.name, ENDPOINT_DESCRIPTION
    );
    if let Some(text) = endpoint.description {
        description = format!("{text}\n\n{description}");
    }
    if !endpoint.required_fields.is_empty() {
        description.push_str(&format!(
            "\n\nRequired fields of every payload: {}.",
            endpoint
                .required_fields
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut document = json!({
        "openapi": "3.1.0",
        "info": info(&format!("{} (intake data API)", endpoint.name), &description),
        "servers": [{ "url": base_url }],
        "tags": [schemas::tags()[0].clone()],
        "paths": paths,
        "webhooks": schemas::webhooks(),
        "components": schemas::components(),
    });
    let all = std::mem::take(&mut document["components"]["schemas"]);
    let mut used = Map::new();
    match &endpoint.schema {
        None => {
            used.insert(
                WRITE_PAYLOAD.into(),
                schemas::payload(endpoint.required_fields),
            );
        }
        Some(schema) => {
            used.extend(payload_schema::components(
                schema,
                endpoint.required_fields,
                WRITE_PAYLOAD,
                &schemas::payload_storage(),
            ));
            // The records that reads answer carry this endpoint's payloads (the whole
            // document's `Record` keeps any JSON).
            if let Some(record) = all.get(RECORD) {
                let mut record = record.clone();
                record["properties"]["payload"] = schema_ref(WRITE_PAYLOAD);
                used.insert(RECORD.into(), record);
            }
        }
    }
    // A batch's records are this endpoint's payloads too.
    if let Some(batch) = all.get(BATCH_RECORDS) {
        let mut batch = batch.clone();
        batch["items"] = schema_ref(WRITE_PAYLOAD);
        used.insert(BATCH_RECORDS.into(), batch);
    }
    let mut pending = schema_refs(&document);
    pending.extend(used.values().flat_map(schema_refs));
    while let Some(name) = pending.pop() {
        if used.contains_key(&name) {
            continue;
        }
        if let Some(schema) = all.get(&name) {
            pending.extend(schema_refs(schema));
            used.insert(name, schema.clone());
        }
    }
    // The management API's schemas stay out: a client generated from this document has the
    // types of the data API only.
    document["components"]["schemas"] = Value::Object(used);
    document
}

/// The body schema of the writes in an endpoint's own document: the payload with that
/// endpoint's required fields, or its JSON Schema (then also the payload of its records).
pub const WRITE_PAYLOAD: &str = "WritePayload";
/// A stored record, as reads answer it.
const RECORD: &str = "Record";
/// The array body of a batch: of `Payload`s in the whole document, of `WritePayload`s in an
/// endpoint's.
const BATCH_RECORDS: &str = "BatchRecords";

/// A batch's records (a JSON array) as the lines of an NDJSON body.
fn ndjson(records: &Value) -> Value {
    match records.as_array() {
        Some(records) => Value::String(records.iter().map(|r| format!("{r}\n")).collect()),
        None => Value::Null,
    }
}

/// The names of the component schemas `value` refers to, directly.
fn schema_refs(value: &Value) -> Vec<String> {
    match value {
        Value::Object(map) => map
            .iter()
            .flat_map(|(key, inner)| match (key.as_str(), inner.as_str()) {
                ("$ref", Some(target)) => target
                    .strip_prefix("#/components/schemas/")
                    .map(String::from)
                    .into_iter()
                    .collect(),
                _ => schema_refs(inner),
            })
            .collect(),
        Value::Array(items) => items.iter().flat_map(schema_refs).collect(),
        _ => Vec::new(),
    }
}

const API_DESCRIPTION: &str = "intake's data API (records: create, read one, list, search, \
poll, replace, delete) and management API (endpoints, keys, collaborators, invitations, \
deploy, notifications, audit, usage, webhooks, mail, accounts, tokens, sessions). Every \
error is `{\"error\": {\"code\", \"message\", \"request_id\"}}` with a stable `code`; each \
response below lists the codes it can carry. Every response has an `X-Request-Id` header. \
A method a path does not list answers 405 `method_not_allowed` with an `Allow` header; an \
unknown path 404 `route_not_found`.";

const ENDPOINT_DESCRIPTION: &str = "Authenticate with `Authorization: Bearer <API key>`: a \
sandbox key (`tm_test_…`) works on sandbox data, a production key (`tm_live_…`) on \
production data once the endpoint is deployed. Each operation carries code samples \
(`x-codeSamples`: curl, JavaScript, Python) with the placeholders `YOUR_SANDBOX_KEY` and \
`YOUR_RECORD_ID`.";

fn info(title: &str, description: &str) -> Value {
    json!({
        "title": title,
        "version": env!("CARGO_PKG_VERSION"),
        "description": description,
        "license": { "name": "MIT", "identifier": "MIT" },
    })
}
