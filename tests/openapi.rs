//! The OpenAPI document against the route table and the real server: every route template
//! of `src/http/routes.rs` is documented with exactly its methods, the served documents are
//! valid OpenAPI 3.1 (`openapi-spec-validator`, installed by .ci/run), and every generated
//! code sample runs against the server with a real sandbox key.

use crate::common;

use std::collections::BTreeSet;
use std::process::Command;

use common::{TestServer, assert_status};
use intake::http::openapi::{self, examples};
use intake::http::routes::{Resolved, Route};
use serde_json::{Value, json};

/// Every path template of the route table (`intake::http::routes`), once.
fn route_templates() -> Vec<&'static str> {
    let mut templates: Vec<&'static str> = Vec::new();
    for route in Route::ALL {
        if !templates.contains(&route.template()) {
            templates.push(route.template());
        }
    }
    templates
}

#[test]
fn every_route_in_the_table_is_documented_with_its_methods() {
    let doc = openapi::document("http://127.0.0.1:8080");
    let paths = doc["paths"].as_object().unwrap();
    let templates = route_templates();
    assert!(templates.len() >= 40, "{templates:?}");
    for template in &templates {
        let concrete = template
            .replace("{environment}", "sandbox")
            .replace("{record_id}", "rec_01m80m0sfsv1yd0kcm7nw4m58e")
            .replace(['{', '}'], "");
        let Some(Resolved::Api(route)) = Resolved::resolve(&concrete) else {
            panic!("{concrete}");
        };
        assert_eq!(route.template, *template);
        let item = paths
            .get(*template)
            .unwrap_or_else(|| panic!("route {template} is missing from the OpenAPI document"));
        let documented: BTreeSet<String> = item
            .as_object()
            .unwrap()
            .keys()
            .map(|m| m.to_uppercase())
            .collect();
        let allowed: BTreeSet<String> = route.allowed().split(", ").map(String::from).collect();
        assert_eq!(documented, allowed, "methods of {template}");
    }
    assert_eq!(
        paths.len(),
        templates.len(),
        "documented paths that are not routes"
    );
}

/// What the subscription and recovery fields mean is said where a client generator reads it:
/// switching a subscription on again clears its failure streak (`failing_since`,
/// `failed_attempts`) and `auto_disabled_at`, and a recovery is `scheduled` until its last
/// delivery has been attempted.
#[test]
fn the_subscription_and_recovery_fields_say_what_resets_them_and_when_they_end() {
    let doc = openapi::document("http://127.0.0.1:8080");
    let schemas = &doc["components"]["schemas"];
    let said = |schema: &str, field: &str| {
        schemas[schema]["properties"][field]["description"]
            .as_str()
            .unwrap_or_else(|| panic!("{schema}.{field} has no description"))
            .to_string()
    };
    for field in ["failing_since", "failed_attempts"] {
        let text = said("SubscriptionHealth", field);
        assert!(text.contains("switched on"), "{field}: {text}");
    }
    assert!(said("Subscription", "auto_disabled_at").contains("switching it on"));
    let states = &schemas["Recovery"]["properties"]["state"]["enum"];
    assert_eq!(
        *states,
        serde_json::json!(["running", "scheduled", "finished"])
    );
    assert!(said("Recovery", "finished_at").contains("last scheduled delivery was attempted"));
}

/// Client generators (openapi-python-client, @hey-api/openapi-ts: tests/clients) name a
/// type after each component schema and fall back to names made up from the operation, or to
/// an untyped value, for the rest. So in both documents every JSON body is a `$ref` (an error
/// response: `allOf` of `Error` narrowed to its codes), every object is a component of its
/// own, no schema uses `oneOf`, every `$ref` resolves, and the backup is a binary download.
#[test]
fn every_body_is_a_named_schema_a_generator_can_map() {
    let fields = vec!["email".to_string()];
    let endpoint = openapi::EndpointInfo {
        slug: "orders-7k2m9x4q1w8p",
        name: "Orders",
        description: None,
        required_fields: &fields,
        schema: None,
    };
    let whole = openapi::document("http://127.0.0.1:8080");
    let own = openapi::endpoint_document("http://127.0.0.1:8080", &endpoint);
    for doc in [&whole, &own] {
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        let mut bodies = Vec::new();
        let paths = doc["paths"].as_object().unwrap();
        for (path, item) in paths.iter().chain(doc["webhooks"].as_object().unwrap()) {
            for (method, op) in item.as_object().unwrap() {
                let at = format!("{method} {path}");
                for (media, content) in op["requestBody"]["content"]
                    .as_object()
                    .into_iter()
                    .flatten()
                {
                    // A text body (a batch as NDJSON) is a string to a generator.
                    if media == "application/json" {
                        bodies.push((format!("{at} request {media}"), &content["schema"]));
                    } else {
                        assert_eq!(content["schema"]["type"], "string", "{at} {media}");
                    }
                }
                for (status, response) in op["responses"].as_object().unwrap() {
                    for (media, content) in response["content"].as_object().into_iter().flatten() {
                        let schema = &content["schema"];
                        let json = media == "application/json";
                        // An error response narrows `Error` to its codes.
                        let named = match &schema["allOf"] {
                            Value::Array(all) if all.len() == 1 && !status.starts_with('2') => {
                                &all[0]
                            }
                            _ => schema,
                        };
                        if json {
                            bodies.push((format!("{at} {status} {media}"), named));
                        } else {
                            assert_eq!(schema["type"], "string", "{at} {status} {media}");
                        }
                    }
                }
            }
        }
        assert!(bodies.len() >= 7, "{bodies:?}");
        for (at, schema) in &bodies {
            let target = schema["$ref"]
                .as_str()
                .unwrap_or_else(|| panic!("{at}: inline {schema}"));
            let name = target.strip_prefix("#/components/schemas/").unwrap();
            assert!(
                schemas.contains_key(name),
                "{at}: {target} is not a component"
            );
        }
        for (name, schema) in schemas {
            assert_nested_objects_named(name, schema, true);
        }
        assert_refs_resolve(doc, doc);
    }
    let backup = &whole["paths"]["/api/v1/manage/backups"]["post"]["responses"]["200"];
    let schema = &backup["content"]["application/octet-stream"]["schema"];
    assert_eq!(schema["format"], "binary", "{backup}");
    assert_eq!(schema["contentMediaType"], "application/x-tar", "{backup}");
    let poll = &whole["components"]["schemas"]["PollPage"];
    assert_eq!(
        (&poll["minProperties"], &poll["maxProperties"]),
        (&2.into(), &2.into())
    );
    assert_eq!(
        own["components"]["schemas"]["WritePayload"]["required"],
        serde_json::json!(["email"])
    );
    // A batch's records are the endpoint's payloads in its own document: an array of them,
    // and their lines.
    let batch =
        &own["paths"]["/api/v1/data/orders-7k2m9x4q1w8p/batch"]["post"]["requestBody"]["content"];
    assert_eq!(
        batch["application/json"]["schema"]["$ref"],
        "#/components/schemas/BatchRecords"
    );
    assert_eq!(
        own["components"]["schemas"]["BatchRecords"]["items"]["$ref"],
        "#/components/schemas/WritePayload"
    );
    let records = &batch["application/json"]["example"];
    assert_eq!(*records, examples::batch(&fields));
    let lines = batch["application/x-ndjson"]["example"].as_str().unwrap();
    let parsed: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(Value::Array(parsed), *records);
    assert!(
        own["components"]["schemas"].get("Endpoint").is_none(),
        "management schemas"
    );
}

/// No `oneOf`, and no object with `properties` below the top of a component schema (`top`:
/// the schema itself, or a member of its `allOf`).
fn assert_nested_objects_named(name: &str, schema: &Value, top: bool) {
    match schema {
        Value::Object(map) => {
            assert!(!map.contains_key("oneOf"), "{name}: oneOf");
            assert!(
                top || !map.contains_key("properties"),
                "{name}: an inline object {schema}"
            );
            for (key, inner) in map {
                match (key.as_str(), inner) {
                    ("properties", Value::Object(properties)) => properties
                        .values()
                        .for_each(|p| assert_nested_objects_named(name, p, false)),
                    ("allOf", _) => assert_nested_objects_named(name, inner, top),
                    _ => assert_nested_objects_named(name, inner, false),
                }
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|i| assert_nested_objects_named(name, i, top)),
        _ => {}
    }
}

fn assert_refs_resolve(doc: &Value, value: &Value) {
    match value {
        Value::Object(map) => {
            if let Some(target) = map.get("$ref").and_then(Value::as_str) {
                let pointer = target.strip_prefix('#').unwrap_or(target);
                assert!(doc.pointer(pointer).is_some(), "{target} does not resolve");
            }
            map.values().for_each(|v| assert_refs_resolve(doc, v));
        }
        Value::Array(items) => items.iter().for_each(|v| assert_refs_resolve(doc, v)),
        _ => {}
    }
}

fn validate_openapi(doc: &Value) {
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys\nfrom openapi_spec_validator import validate\nvalidate(json.load(sys.stdin))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(doc.to_string().as_bytes())?;
            child.wait_with_output()
        })
        .expect("run python3 (install openapi-spec-validator: see .ci/run)");
    assert!(
        out.status.success(),
        "not valid OpenAPI 3.1: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a sample; returns its stdout (the JSON answer), asserting it exited 0.
fn run_sample(sample: &examples::CodeSample) -> String {
    let out = match sample.lang {
        "Shell" => Command::new("sh").args(["-c", &sample.source]).output(),
        "JavaScript" => Command::new("node")
            .args(["--input-type=module", "-e", &sample.source])
            .output(),
        _ => Command::new("python3")
            .args(["-c", &sample.source])
            .output(),
    }
    .expect("run sample (curl, node, python3 with requests: see .ci/run)");
    assert!(
        out.status.success(),
        "{} sample failed: {}\n{}",
        sample.label,
        String::from_utf8_lossy(&out.stderr),
        sample.source
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn served_documents_are_valid_and_every_code_sample_runs() {
    let server = TestServer::start();
    let r = server.request("GET", "/api/v1/openapi.json", &[], None);
    assert_status(&r, 200);
    let doc = r.json();
    validate_openapi(&doc);

    let endpoint = server.create_endpoint("Orders", &["email", "it's"]);
    let slug = endpoint.slug.clone();
    let key = endpoint.sandbox_key.clone();
    let path = format!("/api/v1/data/{slug}/openapi.json");
    assert_eq!(
        server
            .request("GET", &path, &[], None)
            .error_code()
            .as_deref(),
        Some("missing_api_key")
    );
    let r = server.data("GET", &path, &key, None);
    assert_status(&r, 200);
    let endpoint_doc = r.json();
    validate_openapi(&endpoint_doc);
    let owner = server.manage("GET", &path, None);
    assert_status(&owner, 200);

    // The served samples are the generated ones with placeholders.
    let base_url = endpoint_doc["servers"][0]["url"]
        .as_str()
        .unwrap()
        .to_string();
    let fields = vec!["email".to_string(), "it's".to_string()];
    let placeholders = examples::for_endpoint(&examples::Context {
        base_url: &base_url,
        slug: &slug,
        required_fields: &fields,
        key: None,
        record_id: None,
    });
    for op in &placeholders {
        let path_key = endpoint_doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .find(|(_, item)| item[op.method]["operationId"] == op.operation_id)
            .map(|(_, item)| item[op.method]["x-codeSamples"].clone())
            .unwrap();
        let served: Vec<String> = path_key
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["source"].as_str().unwrap().to_string())
            .collect();
        let generated: Vec<String> = op.samples.iter().map(|s| s.source.clone()).collect();
        assert_eq!(served, generated, "{}", op.operation_id);
    }

    // Every sample, filled in with the real key and a record of its own, runs and has its effect.
    let base = server.base_url();
    for lang in 0..3 {
        let created =
            server.create_record(&slug, &key, &serde_json::json!({"email": "x", "it's": "y"}));
        let record_id = created["id"].as_str().unwrap().to_string();
        let samples = examples::for_endpoint(&examples::Context {
            base_url: &base,
            slug: &slug,
            required_fields: &fields,
            key: Some(&key),
            record_id: Some(&record_id),
        });
        for op in &samples {
            let sample = &op.samples[lang];
            let answer: Value = serde_json::from_str(run_sample(sample).trim())
                .unwrap_or_else(|e| panic!("{} {}: not JSON: {e}", sample.label, op.operation_id));
            match op.operation_id {
                "createRecord" => {
                    let id = answer["id"].as_str().unwrap();
                    let record = server.expect_record(&slug, &key, id);
                    assert_eq!(record["payload"], examples::payload(&fields));
                }
                "createRecordBatch" => {
                    let data = answer["data"].as_array().unwrap();
                    assert_eq!(data.len(), 2, "{answer}");
                    for entry in data {
                        let id = entry["id"].as_str().unwrap();
                        let record = server.expect_record(&slug, &key, id);
                        assert_eq!(record["payload"], examples::payload(&fields));
                    }
                }
                "getRecord" => assert_eq!(answer["id"], record_id.as_str()),
                "exportRecords" => {
                    let exported = answer.as_array().expect("a JSON array");
                    assert!(
                        exported.iter().any(|r| r["id"] == record_id.as_str()),
                        "{answer}"
                    );
                }
                "listRecords" | "searchRecords" => {
                    assert!(!answer["data"].as_array().unwrap().is_empty(), "{answer}")
                }
                "pollRecords" => assert!(answer["poll_cursor"].is_string(), "{answer}"),
                "replaceRecord" => {
                    let record = server.expect_record(&slug, &key, &record_id);
                    assert_eq!(record["payload"], examples::payload(&fields));
                }
                "deleteRecord" => assert_status(&server.get_record(&slug, &key, &record_id), 404),
                other => panic!("unexpected operation {other}"),
            }
        }
    }
}

/// The operation `id` of a document.
fn operation<'a>(doc: &'a Value, id: &str) -> &'a Value {
    doc["paths"]
        .as_object()
        .into_iter()
        .flat_map(|paths| paths.values())
        .flat_map(|item| item.as_object().into_iter().flat_map(|ops| ops.values()))
        .find(|op| op["operationId"] == id)
        .unwrap_or_else(|| panic!("no operation {id}"))
}

/// An endpoint's JSON Schema is the payload schema of its document: the body of the writes,
/// the `payload` of the records the reads answer; its `$defs` are named components; every
/// `$ref` resolves and the document stays valid OpenAPI 3.1.
#[test]
fn an_endpoint_schema_is_the_payload_schema_of_its_document() {
    let server = TestServer::start();
    let endpoint = server.create_endpoint("Orders", &["email"]);
    let schema = json!({
        "type": "object",
        "required": ["customer"],
        "properties": {
            "customer": {
                "type": "object",
                "properties": { "name": { "type": "string" }, "vip": { "type": "boolean" } },
                "required": ["name"]
            },
            "items": { "type": "array", "items": { "$ref": "#/$defs/item" } },
            "email": { "$ref": "#/properties/customer/properties/name" }
        },
        "$defs": {
            "item": { "type": "object", "properties": { "sku": { "type": "string" } } }
        }
    });
    let r = server.manage(
        "PATCH",
        &format!("/api/v1/manage/endpoints/{}", endpoint.slug),
        Some(&json!({ "schema": schema })),
    );
    assert_status(&r, 200);
    let path = format!("/api/v1/data/{}/openapi.json", endpoint.slug);
    let r = server.data("GET", &path, &endpoint.sandbox_key, None);
    assert_status(&r, 200);
    let doc = r.json();
    validate_openapi(&doc);
    assert_refs_resolve(&doc, &doc);

    let payload_ref = json!({ "$ref": "#/components/schemas/WritePayload" });
    let schemas = &doc["components"]["schemas"];
    let payload = &schemas["WritePayload"];
    assert_eq!(
        payload["properties"]["customer"],
        schema["properties"]["customer"]
    );
    assert_eq!(payload["required"], json!(["customer", "email"]));
    assert_eq!(
        payload["properties"]["items"]["items"]["$ref"],
        "#/components/schemas/Payload_item"
    );
    assert_eq!(
        payload["properties"]["email"]["$ref"],
        "#/components/schemas/WritePayload/properties/customer/properties/name"
    );
    assert_eq!(schemas["Payload_item"], schema["$defs"]["item"]);
    for id in ["createRecord", "replaceRecord"] {
        let body = &operation(&doc, id)["requestBody"]["content"]["application/json"];
        assert_eq!(body["schema"], payload_ref, "{id}");
    }
    assert_eq!(schemas["BatchRecords"]["items"], payload_ref);

    // Reads answer `Record`s (whole, in pages, in an export) whose payload is the schema.
    assert_eq!(schemas["Record"]["properties"]["payload"], payload_ref);
    assert!(
        schemas.get("Payload").is_none(),
        "the untyped payload is gone"
    );
    let answer = |id: &str| {
        operation(&doc, id)["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
            .clone()
    };
    assert_eq!(answer("getRecord"), "#/components/schemas/Record");
    assert_eq!(answer("exportRecords"), "#/components/schemas/RecordExport");
    assert_eq!(answer("pollRecords"), "#/components/schemas/PollPage");
    for page in ["RecordPage", "PollPage", "RecordExport"] {
        let items = schemas[page]["items"]
            .get("$ref")
            .or_else(|| schemas[page]["properties"]["data"]["items"].get("$ref"));
        assert_eq!(items, Some(&json!("#/components/schemas/Record")), "{page}");
    }

    // The whole API's document keeps any JSON.
    let whole = server
        .request("GET", "/api/v1/openapi.json", &[], None)
        .json();
    assert_eq!(
        whole["components"]["schemas"]["Record"]["properties"]["payload"]["$ref"],
        "#/components/schemas/Payload"
    );
}

/// The committed snapshot of the served documents: the whole API's and one endpoint's.
const SNAPSHOT: &str = "tests/fixtures/openapi.json";
const ENDPOINT_SNAPSHOT: &str = "tests/fixtures/openapi-endpoint.json";

/// The endpoint whose own document is compared with `ENDPOINT_SNAPSHOT`.
fn snapshot_endpoint_document() -> Value {
    let fields = vec!["email".to_string(), "it's".to_string()];
    let endpoint = openapi::EndpointInfo {
        slug: "orders-7k2m9x4q1w8p",
        name: "Orders",
        description: Some("Orders from the shop."),
        required_fields: &fields,
        schema: None,
    };
    openapi::endpoint_document("http://127.0.0.1:8080", &endpoint)
}

/// A snapshot as the server writes it: compact, with the running crate's version (the
/// snapshot, pretty-printed so that a change reads as a diff, leaves the version out).
fn served_form(path: &str, server_url: &Value) -> String {
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut snapshot: Value = serde_json::from_str(&text).unwrap();
    snapshot["info"]["version"] = env!("CARGO_PKG_VERSION").into();
    snapshot["servers"][0]["url"] = server_url.clone();
    serde_json::to_string(&snapshot).unwrap()
}

/// Where two texts first differ, with some context, for a readable failure.
fn first_difference(served: &str, expected: &str) -> String {
    let at = served
        .bytes()
        .zip(expected.bytes())
        .position(|(a, b)| a != b)
        .unwrap_or(served.len().min(expected.len()));
    let around = |s: &str| {
        String::from_utf8_lossy(&s.as_bytes()[at.saturating_sub(200)..(at + 200).min(s.len())])
            .into_owned()
    };
    format!(
        "first difference at byte {at}:\n served: {}\n snapshot: {}",
        around(served),
        around(expected)
    )
}

/// The served documents are byte for byte the committed snapshots (the server's URL, which is
/// its config's, and the crate version aside). They change only on purpose: write them anew
/// with `cargo test --test integration openapi::write_snapshots -- --ignored --exact`.
#[test]
fn the_served_documents_are_the_snapshot() {
    let server = TestServer::start();
    let r = server.request("GET", "/api/v1/openapi.json", &[], None);
    assert_status(&r, 200);
    let served = String::from_utf8(r.body.clone()).unwrap();
    let url = r.json()["servers"][0]["url"].clone();
    let expected = served_form(SNAPSHOT, &url);
    assert!(
        served == expected,
        "{}",
        first_difference(&served, &expected)
    );

    let own = serde_json::to_string(&snapshot_endpoint_document()).unwrap();
    let expected = served_form(ENDPOINT_SNAPSHOT, &"http://127.0.0.1:8080".into());
    assert!(own == expected, "{}", first_difference(&own, &expected));
}

/// Writes the snapshots of `the_served_documents_are_the_snapshot` from this build.
#[test]
#[ignore = "writes tests/fixtures/openapi*.json"]
fn write_snapshots() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let whole = openapi::document("http://127.0.0.1:8080");
    for (path, mut doc) in [
        (SNAPSHOT, whole),
        (ENDPOINT_SNAPSHOT, snapshot_endpoint_document()),
    ] {
        doc["info"]["version"] = "(the crate's version)".into();
        let text = serde_json::to_string_pretty(&doc).unwrap() + "\n";
        std::fs::write(root.join(path), text).unwrap();
    }
}
