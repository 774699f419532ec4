//! The API test page of an endpoint, `/dashboard/endpoints/{slug}/test`: sandbox only.
//!
//! Three tabs: Quick Start (authorize with a sandbox key, then execute the data calls from the
//! browser), Guide (the workflows and the technical reference) and API Reference (one card
//! per data operation). The cards and the call forms are built from the endpoint's
//! own OpenAPI document ([`openapi::endpoint_document`]), code samples included, so the page
//! cannot disagree with `GET /api/v1/data/{slug}/openapi.json`.
//!
//! The key is checked by the server ([`authorize`]): a production key is refused whatever it
//! is, and a sandbox key must be one of this endpoint's. The page keeps the key in memory
//! only; the calls go to the real data API with it (`static/testpage.js`).

use askama::Template;
use http::StatusCode;
use serde_json::{Value, json};

use super::assets;
use super::endpoints::EndpointHead;
use super::page::{Failure, Layout, Outcome, render};
use super::visitor::{signed_in, user_form};
use crate::domain::error::Error;
use crate::http::app::App;
use crate::http::openapi::{self, DATA_TAG, EndpointInfo, WRITE_PAYLOAD, examples, schema_ref};
use crate::http::request::Request;
use crate::store::{Environment, Permission};

/// One parameter of an operation, as the document declares it.
pub struct ParamView {
    pub name: String,
    /// `path`, `query` or `header`.
    pub location: String,
    pub required: bool,
    pub description: Vec<Span>,
    /// The parameter's JSON Schema in a few words: type, format, range, default.
    pub schema: String,
    /// The value the call form starts with (query examples only: a path example names no
    /// real record).
    pub initial: String,
}

/// A request header every call of the operation sends.
pub struct HeaderView {
    pub name: &'static str,
    /// May hold [`examples::KEY_PLACEHOLDER`], which the page replaces by the authorized key.
    pub value: String,
    /// Other values the header may have instead (a batch's other media type).
    pub alternatives: Vec<String>,
}

/// The request body in one of the media types the operation takes.
pub struct BodyView {
    pub media_type: String,
    /// Its JSON Schema, indented.
    pub schema: String,
    /// The document's example: JSON indented, a text example (NDJSON's lines) as it is.
    pub example: Option<String>,
}

/// A piece of a document's description: plain text, or a `code` span.
pub struct Span {
    pub text: String,
    pub code: bool,
}

/// Splits a CommonMark description at its backtick code spans (the only markup the OpenAPI
/// document uses in running text); the template escapes each piece.
fn spans(value: &Value) -> Vec<Span> {
    value
        .as_str()
        .unwrap_or_default()
        .split('`')
        .enumerate()
        .filter(|(_, text)| !text.is_empty())
        .map(|(i, text)| Span {
            text: text.to_string(),
            code: i % 2 == 1,
        })
        .collect()
}

/// `integer, 1 to 30, default 10`: what a parameter's schema allows, for a reader.
fn schema_summary(schema: &Value) -> String {
    let mut parts = vec![match (schema["type"].as_str(), schema["format"].as_str()) {
        (Some(kind), Some(format)) => format!("{kind} ({format})"),
        (Some(kind), None) => kind.to_string(),
        (None, _) => "any".to_string(),
    }];
    let range =
        |min: &str, max: &str, unit: &str| match (schema[min].as_i64(), schema[max].as_i64()) {
            (Some(lo), Some(hi)) => Some(format!("{lo} to {hi}{unit}")),
            (Some(lo), None) => Some(format!("at least {lo}{unit}")),
            (None, Some(hi)) => Some(format!("at most {hi}{unit}")),
            (None, None) => None,
        };
    parts.extend(range("minimum", "maximum", ""));
    parts.extend(range("minLength", "maxLength", " characters"));
    if let Some(values) = schema["enum"].as_array() {
        let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        parts.push(format!("one of {}", values.join(", ")));
    }
    if !schema["default"].is_null() {
        parts.push(format!("default {}", schema["default"]));
    }
    parts.join(", ")
}

/// One documented response.
pub struct ResponseView {
    pub status: String,
    pub description: Vec<Span>,
    pub example: Option<String>,
}

pub struct SampleView {
    /// `curl`, `fetch` or `requests`.
    pub label: String,
    pub lang: String,
    pub source: String,
}

impl SampleView {
    /// The highlighter's name of the sample's language.
    pub fn highlight(&self) -> &'static str {
        match self.label.as_str() {
            "fetch" => "javascript",
            "requests" => "python",
            _ => "bash",
        }
    }
}

/// One data operation: its card in the API Reference and its form in Quick Start.
pub struct OperationView {
    pub id: String,
    /// Upper case.
    pub method: String,
    pub summary: String,
    pub description: Vec<Span>,
    /// The path on this server, `{record_id}` left as a template.
    pub path: String,
    pub url: String,
    pub headers: Vec<HeaderView>,
    pub params: Vec<ParamView>,
    /// What the document says of the body: its media types and limits.
    pub body_description: Vec<Span>,
    /// The body in each media type the operation takes, in the document's order.
    pub bodies: Vec<BodyView>,
    /// The call form's initial body: the `application/json` example, as the page sends JSON.
    pub body_example: Option<String>,
    pub responses: Vec<ResponseView>,
    /// A read's: the endpoint's JSON Schema, which the `payload` of the records it answers
    /// follows.
    pub record_payload_schema: Option<String>,
    pub samples: Vec<SampleView>,
    /// The permission a collaboration key needs for it.
    pub permission: &'static str,
}

impl OperationView {
    /// Whether the call takes optional headers (the form tucks them away).
    pub fn has_header_params(&self) -> bool {
        self.params.iter().any(|p| p.location == "header")
    }
}

#[derive(Template)]
#[template(path = "dashboard/testpage.html")]
struct TestPage {
    layout: Layout,
    head: EndpointHead,
    version: &'static str,
    script: &'static str,
    key_placeholder: &'static str,
    record_id_placeholder: &'static str,
    operations: Vec<OperationView>,
}

/// `GET /dashboard/endpoints/{slug}/test`: the owner's and collaborators' (as the detail page).
pub fn page(app: &App, req: &Request, slug: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let head = EndpointHead::load(app, &user, slug, "test")?.viewing(Environment::Sandbox);
    let document = openapi::endpoint_document(
        &app.config.public_url(),
        &EndpointInfo {
            slug: &head.ep.slug,
            name: &head.ep.name,
            description: head.ep.description.as_deref(),
            required_fields: &head.ep.required_fields,
            schema: head.ep.schema.clone(),
        },
    );
    let page = TestPage {
        layout: user.layout(
            app,
            format!("{}: API test page", head.ep.name),
            "endpoints",
            req,
        ),
        version: env!("CARGO_PKG_VERSION"),
        script: assets::testpage_js_url(),
        key_placeholder: examples::KEY_PLACEHOLDER,
        record_id_placeholder: examples::RECORD_ID_PLACEHOLDER,
        operations: operation_views(&document, head.ep.schema.as_ref())?,
        head,
    };
    render(&page)
}

/// The data operations of an endpoint's document, in the spec's order; `payload_schema` is
/// the endpoint's JSON Schema, shown as the owner wrote it where the document has it as the
/// payload schema (there its `$defs` are component schemas of their own, which a card
/// showing one schema would leave as bare references).
fn operation_views(
    document: &Value,
    payload_schema: Option<&Value>,
) -> Result<Vec<OperationView>, Failure> {
    let server = document["servers"][0]["url"].as_str().unwrap_or_default();
    let no_paths = serde_json::Map::new();
    let paths = document["paths"].as_object().unwrap_or(&no_paths);
    openapi::operations()
        .into_iter()
        .filter(|op| op.tag == DATA_TAG)
        .map(|op| {
            paths
                .iter()
                .find_map(|(path, item)| {
                    let operation = &item[op.method];
                    (operation["operationId"] == op.id).then(|| {
                        operation_view(document, payload_schema, server, path, op.method, operation)
                    })
                })
                .ok_or_else(|| {
                    Failure::from(Error::Internal(format!(
                        "the endpoint document lacks {}",
                        op.id
                    )))
                })
        })
        .collect()
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// `schema`, or the component schema its `$ref` names: the cards show what a body or parameter
/// is, not the name the document gives it.
fn resolved<'a>(document: &'a Value, schema: &'a Value) -> &'a Value {
    schema["$ref"]
        .as_str()
        .and_then(|target| target.strip_prefix('#'))
        .and_then(|pointer| document.pointer(pointer))
        .unwrap_or(schema)
}

fn operation_view(
    document: &Value,
    payload_schema: Option<&Value>,
    server: &str,
    path: &str,
    method: &str,
    op: &Value,
) -> OperationView {
    let params: Vec<ParamView> = op["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let location = text(&p["in"]);
            ParamView {
                initial: match (location.as_str(), p["example"].as_str()) {
                    ("query", Some(example)) => example.to_string(),
                    _ => String::new(),
                },
                name: text(&p["name"]),
                required: p["required"] == true,
                description: spans(&p["description"]),
                schema: schema_summary(resolved(document, &p["schema"])),
                location,
            }
        })
        .collect();
    let no_content = serde_json::Map::new();
    let content = op["requestBody"]["content"]
        .as_object()
        .unwrap_or(&no_content);
    let write_payload = schema_ref(WRITE_PAYLOAD);
    let bodies: Vec<BodyView> = content
        .iter()
        .map(|(media_type, body)| BodyView {
            media_type: media_type.clone(),
            schema: match payload_schema {
                Some(schema) if body["schema"] == write_payload => pretty(schema),
                _ => pretty(resolved(document, &body["schema"])),
            },
            example: match &body["example"] {
                Value::Null => None,
                Value::String(text) => Some(text.clone()),
                example => Some(pretty(example)),
            },
        })
        .collect();
    let mut headers = vec![HeaderView {
        name: "Authorization",
        value: format!("Bearer {}", examples::KEY_PLACEHOLDER),
        alternatives: Vec::new(),
    }];
    let mut media_types: Vec<&String> = content.keys().collect();
    // JSON first: the call form and the code samples send it.
    media_types.sort_by_key(|m| *m != "application/json");
    if let Some((value, alternatives)) = media_types.split_first() {
        headers.push(HeaderView {
            name: "Content-Type",
            value: value.to_string(),
            alternatives: alternatives.iter().map(|m| m.to_string()).collect(),
        });
    }
    let responses = op["responses"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(status, response)| {
            let example = response["content"]
                .as_object()
                .and_then(|content| content.values().next())
                .map(|media| &media["example"])
                .filter(|example| !example.is_null());
            ResponseView {
                status: status.clone(),
                description: spans(&response["description"]),
                example: example.map(pretty),
            }
        })
        .collect();
    let samples = op["x-codeSamples"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| SampleView {
            label: text(&s["label"]),
            lang: text(&s["lang"]),
            source: text(&s["source"]),
        })
        .collect();
    let permission = match method {
        "post" => Permission::Create,
        "put" => Permission::Replace,
        "delete" => Permission::Delete,
        _ => Permission::Read,
    };
    OperationView {
        permission: permission.as_str(),
        id: text(&op["operationId"]),
        method: method.to_uppercase(),
        summary: text(&op["summary"]),
        description: spans(&op["description"]),
        url: format!("{server}{path}"),
        path: path.to_string(),
        headers,
        params,
        body_description: spans(&op["requestBody"]["description"]),
        body_example: content
            .get("application/json")
            .and_then(|body| body.get("example"))
            .map(pretty),
        bodies,
        responses,
        record_payload_schema: payload_schema
            .filter(|_| permission == Permission::Read)
            .map(pretty),
        samples,
    }
}

/// What the server says about a key offered on the test page.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Authorized,
    Refused(&'static str),
}

const PRODUCTION_KEY: &str = "This is a production key (tm_live_…). The test page works in the \
    sandbox only and never touches production data: use a sandbox key (tm_test_…) from the \
    endpoint's Sandbox tab.";
const OTHER_ENDPOINT: &str = "This sandbox key belongs to another endpoint. Use a sandbox key \
    of this endpoint (its Sandbox tab shows yours).";
const NOT_A_KEY: &str = "This is not a valid API key. Copy the sandbox key (tm_test_…) from the \
    endpoint's Sandbox tab.";
const INACTIVE: &str = "This endpoint is inactive: data calls are refused with 403 until its \
    owner switches it on again.";
const SUSPENDED: &str = "The account holding this key is suspended: its calls are refused.";

/// Whether `key` may be used on the test page of `slug`: only a sandbox key of this endpoint
/// that a data call would accept. A production key is refused by its prefix before it is even
/// looked up, so that no production key is ever tried; the stored environment decides the rest.
fn verdict(app: &App, slug: &str, key: &str) -> Result<Verdict, Error> {
    if key.starts_with(Environment::Production.key_prefix()) {
        return Ok(Verdict::Refused(PRODUCTION_KEY));
    }
    Ok(
        match app.endpoints.authorize_any_data_key(Some(key), slug) {
            Ok(access) if access.environment == Environment::Sandbox => Verdict::Authorized,
            // Keys carry their environment's prefix, but the stored environment is what counts.
            Ok(_) => Verdict::Refused(PRODUCTION_KEY),
            Err(Error::EndpointNotFound) => Verdict::Refused(OTHER_ENDPOINT),
            Err(Error::MissingApiKey | Error::InvalidApiKey) => Verdict::Refused(NOT_A_KEY),
            Err(Error::EndpointInactive) => Verdict::Refused(INACTIVE),
            Err(Error::AccountSuspended) => Verdict::Refused(SUSPENDED),
            Err(other) => return Err(other),
        },
    )
}

/// `POST …/test/authorize` (CSRF-checked form): the page's Authorize button with `key`, or
/// its "Use my sandbox key" button with `mine=1` (the viewer's own sandbox key: the owner's
/// default key, a collaborator's collaboration key). Answers 200 with `{"authorized": true,
/// "permissions": […]}` (and `"key"` for `mine`) or `{"authorized": false, "message": …}`: a
/// refused key is an answer, not a failed request. Nothing is stored and no key is logged.
pub async fn authorize(app: &App, req: &mut Request, slug: &str) -> Outcome {
    let user = signed_in(app, req)?;
    // Only a member of the endpoint may ask (strangers get the detail page's 404).
    let endpoint = app.endpoints.get(&user.account, slug)?;
    let form = user_form(app, req, &user).await?;
    let mine = form.checked("mine");
    let key = match mine {
        true => endpoint.sandbox_key.clone(),
        false => form.text("key").trim().to_string(),
    };
    let answer = match verdict(app, slug, &key)? {
        Verdict::Authorized => {
            let permissions: Vec<&str> = app
                .endpoints
                .key_permissions(&key, slug)?
                .into_iter()
                .map(Permission::as_str)
                .collect();
            let mut answer = json!({ "authorized": true, "permissions": permissions });
            if mine {
                answer["key"] = json!(key);
            }
            answer
        }
        Verdict::Refused(message) => json!({ "authorized": false, "message": message }),
    };
    Ok(crate::http::reply::json(StatusCode::OK, &answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_read_as_words_and_code_spans_are_kept_apart() {
        let limit =
            serde_json::json!({"type": "integer", "minimum": 1, "maximum": 30, "default": 10});
        assert_eq!(schema_summary(&limit), "integer, 1 to 30, default 10");
        let q = serde_json::json!({"type": "string", "minLength": 3, "maxLength": 200});
        assert_eq!(schema_summary(&q), "string, 3 to 200 characters");
        let env = serde_json::json!({"type": "string", "format": "date", "enum": ["a", "b"]});
        assert_eq!(schema_summary(&env), "string (date), one of \"a\", \"b\"");
        let text = serde_json::json!("Send `since` or `cursor`, not both.");
        let got: Vec<(String, bool)> = spans(&text).into_iter().map(|s| (s.text, s.code)).collect();
        assert_eq!(
            got,
            [
                ("Send ".to_string(), false),
                ("since".to_string(), true),
                (" or ".to_string(), false),
                ("cursor".to_string(), true),
                (", not both.".to_string(), false),
            ]
        );
    }

    #[test]
    fn cards_follow_the_endpoint_document() {
        let fields = vec!["email".to_string()];
        let document = openapi::endpoint_document(
            "http://127.0.0.1:8080",
            &EndpointInfo {
                slug: "orders-7k2m9x4q1w8p",
                name: "Orders",
                description: None,
                required_fields: &fields,
                schema: None,
            },
        );
        let views = operation_views(&document, None).unwrap_or_default();
        let methods: Vec<&str> = views.iter().map(|v| v.method.as_str()).collect();
        assert_eq!(
            methods,
            [
                "POST", "POST", "GET", "GET", "GET", "GET", "GET", "PUT", "DELETE"
            ]
        );
        let read = &views[2];
        assert_eq!(
            read.url,
            "http://127.0.0.1:8080/api/v1/data/orders-7k2m9x4q1w8p/{record_id}"
        );
        assert_eq!(read.params[0].name, "record_id");
        assert_eq!(read.params[0].initial, "");
        // The `RecordId` component the parameter refers to.
        assert!(
            read.params[0].schema.starts_with("string"),
            "{}",
            read.params[0].schema
        );
        let search = &views[4];
        let q = search.params.iter().find(|p| p.name == "q");
        assert!(q.is_some_and(|q| q.required && q.initial == examples::EXAMPLE_VALUE));
        let create = &views[0];
        assert_eq!(create.bodies.len(), 1);
        assert_eq!(create.bodies[0].media_type, "application/json");
        assert!(create.bodies[0].schema.contains("email"));
        assert_eq!(create.headers.len(), 2);
        assert!(create.headers[1].alternatives.is_empty());
        assert_eq!(create.samples.len(), 3);
        assert!(create.samples[0].source.contains(examples::KEY_PLACEHOLDER));
        assert!(create.responses.iter().any(|r| r.status == "202"));
        // A batch takes NDJSON too: the card shows both, the form and samples send JSON.
        let batch = &views[1];
        let media_types: Vec<&str> = batch.bodies.iter().map(|b| b.media_type.as_str()).collect();
        assert_eq!(media_types, ["application/x-ndjson", "application/json"]);
        assert_eq!(batch.headers[1].value, "application/json");
        assert_eq!(batch.headers[1].alternatives, ["application/x-ndjson"]);
        // The form's body is an array of this endpoint's payloads, as the batch takes.
        let form = batch.body_example.as_deref().unwrap_or_default();
        assert!(
            form.starts_with('[') && form.contains("\"email\""),
            "{form}"
        );
        assert!(batch.bodies[1].schema.contains("\"array\""));
        let lines = batch.bodies[0].example.as_deref().unwrap_or_default();
        assert!(
            lines.ends_with("}\n") && lines.lines().count() == 2,
            "{lines}"
        );
        assert!(
            batch
                .body_description
                .iter()
                .any(|s| s.text.contains("1,000 records"))
        );
    }
}
