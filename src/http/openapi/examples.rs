//! Code samples of the data operations (curl, JavaScript `fetch`, Python `requests`),
//! generated from the operations' declarations so they cannot disagree with the document:
//! the method and path come from the operation, the headers from its access and body, the
//! query from the parameters that carry a sample value, the body from the endpoint's
//! required fields.
//!
//! Every sample runs as it is (curl in a shell, the JavaScript as an ES module with top-level
//! await on Node 18+ or in a browser console, the Python with `requests`), prints the JSON
//! answer, and fails (non-zero exit) on a non-2xx answer. Without a key or record id they
//! carry the placeholders [`KEY_PLACEHOLDER`] and [`RECORD_ID_PLACEHOLDER`].

use serde_json::{Map, Value};

use super::{Access, BodyKind, DATA_TAG, In, Operation, operations};

pub const KEY_PLACEHOLDER: &str = "YOUR_SANDBOX_KEY";
pub const RECORD_ID_PLACEHOLDER: &str = "YOUR_RECORD_ID";
/// The value of each required field in an example payload; the search sample looks for it.
pub const EXAMPLE_VALUE: &str = "example";

/// What the samples are filled in with.
pub struct Context<'a> {
    /// Where the server is reached, without a trailing slash.
    pub base_url: &'a str,
    pub slug: &'a str,
    pub required_fields: &'a [String],
    /// The API key to put in the samples; `None`: [`KEY_PLACEHOLDER`].
    pub key: Option<&'a str>,
    /// The record the read, replace and delete samples name; `None`:
    /// [`RECORD_ID_PLACEHOLDER`].
    pub record_id: Option<&'a str>,
}

/// One code sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodeSample {
    /// As `x-codeSamples` names it: `Shell`, `JavaScript` or `Python`.
    pub lang: &'static str,
    /// `curl`, `fetch` or `requests`.
    pub label: &'static str,
    pub source: String,
}

/// The samples of one data operation.
#[derive(Clone, Debug)]
pub struct OperationSamples {
    pub operation_id: &'static str,
    pub method: &'static str,
    pub samples: Vec<CodeSample>,
}

/// The samples of the data operations, in the spec's order (create, then batch create, read
/// one, list, search, poll, replace, delete).
pub fn for_endpoint(context: &Context) -> Vec<OperationSamples> {
    operations()
        .into_iter()
        .filter(|op| op.tag == DATA_TAG)
        .map(|op| OperationSamples {
            operation_id: op.id,
            method: op.method,
            samples: for_operation(&op, context),
        })
        .collect()
}

/// An example payload: every required field set to [`EXAMPLE_VALUE`], or one `message` field
/// when there are none.
pub fn payload(required_fields: &[String]) -> Value {
    let fields: Vec<&str> = if required_fields.is_empty() {
        vec!["message"]
    } else {
        required_fields.iter().map(String::as_str).collect()
    };
    Value::Object(
        fields
            .into_iter()
            .map(|f| (f.to_string(), Value::String(EXAMPLE_VALUE.into())))
            .collect::<Map<_, _>>(),
    )
}

/// An example batch: two example payloads, as a JSON array.
pub fn batch(required_fields: &[String]) -> Value {
    let payload = payload(required_fields);
    Value::Array(vec![payload.clone(), payload])
}

/// The request a sample makes.
struct Call {
    method: String,
    url: String,
    headers: Vec<(&'static str, String)>,
    body: Option<String>,
}

fn call(op: &Operation, context: &Context) -> Call {
    let key = context.key.unwrap_or(KEY_PLACEHOLDER);
    let record_id = context.record_id.unwrap_or(RECORD_ID_PLACEHOLDER);
    let mut url = format!(
        "{}{}",
        context.base_url,
        op.path
            .replace("{slug}", context.slug)
            .replace("{record_id}", record_id)
    );
    let query: Vec<String> = op
        .params
        .iter()
        .filter(|p| p.at == In::Query)
        .filter_map(|p| Some(format!("{}={}", p.name, p.sample?)))
        .collect();
    if !query.is_empty() {
        url = format!("{url}?{}", query.join("&"));
    }
    let mut headers = Vec::new();
    if matches!(op.access, Access::DataKey(_)) {
        headers.push(("Authorization", format!("Bearer {key}")));
    }
    let body = op.body.as_ref().map(|body| {
        headers.push(("Content-Type", "application/json".to_string()));
        match body.kind {
            // Two records as a JSON array: valid JSON, JavaScript and Python alike.
            BodyKind::Batch => batch(context.required_fields).to_string(),
            _ => payload(context.required_fields).to_string(),
        }
    });
    Call {
        method: op.method.to_uppercase(),
        url,
        headers,
        body,
    }
}

/// The curl, JavaScript and Python samples of one operation.
pub fn for_operation(op: &Operation, context: &Context) -> Vec<CodeSample> {
    let call = call(op, context);
    vec![
        CodeSample {
            lang: "Shell",
            label: "curl",
            source: curl(&call),
        },
        CodeSample {
            lang: "JavaScript",
            label: "fetch",
            source: javascript(&call),
        },
        CodeSample {
            lang: "Python",
            label: "requests",
            source: python(&call),
        },
    ]
}

/// A shell word in single quotes (a `'` inside becomes `'\''`).
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// A string literal valid in both JavaScript and Python: JSON's.
fn string_literal(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

fn curl(call: &Call) -> String {
    let mut lines = vec![format!("curl --fail-with-body -sS -X {}", call.method)];
    lines[0].push_str(&format!(" {}", shell_quote(&call.url)));
    for (name, value) in &call.headers {
        lines.push(format!("  -H {}", shell_quote(&format!("{name}: {value}"))));
    }
    if let Some(body) = &call.body {
        lines.push(format!("  --data-raw {}", shell_quote(body)));
    }
    lines.join(" \\\n") + "\n"
}

fn javascript(call: &Call) -> String {
    let mut out = format!(
        "const response = await fetch({}, {{\n  method: {},\n",
        string_literal(&call.url),
        string_literal(&call.method)
    );
    out.push_str("  headers: {\n");
    for (name, value) in &call.headers {
        out.push_str(&format!(
            "    {}: {},\n",
            string_literal(name),
            string_literal(value)
        ));
    }
    out.push_str("  },\n");
    if let Some(body) = &call.body {
        // A JSON text is a valid JavaScript expression.
        out.push_str(&format!("  body: JSON.stringify({body}),\n"));
    }
    out.push_str("});\n");
    out.push_str(
        "if (!response.ok) {\n  throw new Error(`HTTP ${response.status}: ${await response.text()}`);\n}\n",
    );
    out.push_str("console.log(JSON.stringify(await response.json()));\n");
    out
}

fn python(call: &Call) -> String {
    let mut out = format!(
        "import requests\n\nresponse = requests.request(\n    {},\n    {},\n    headers={{\n",
        string_literal(&call.method),
        string_literal(&call.url)
    );
    for (name, value) in &call.headers {
        out.push_str(&format!(
            "        {}: {},\n",
            string_literal(name),
            string_literal(value)
        ));
    }
    out.push_str("    },\n");
    if let Some(body) = &call.body {
        // The payload is an object of strings, so its JSON text is a Python dict literal.
        out.push_str(&format!("    json={body},\n"));
    }
    out.push_str("    timeout=30,\n)\n");
    out.push_str("if not response.ok:\n    raise SystemExit(f\"HTTP {response.status_code}: {response.text}\")\n");
    out.push_str("print(response.text)\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_quote_what_they_embed() {
        let fields = vec!["it's".to_string(), "say \"hi\"".to_string()];
        let context = Context {
            base_url: "http://127.0.0.1:8080",
            slug: "orders-7k2m9x4q1w8p",
            required_fields: &fields,
            key: None,
            record_id: None,
        };
        let samples = for_endpoint(&context);
        let ids: Vec<&str> = samples.iter().map(|s| s.operation_id).collect();
        assert_eq!(
            ids,
            [
                "createRecord",
                "createRecordBatch",
                "getRecord",
                "listRecords",
                "searchRecords",
                "exportRecords",
                "pollRecords",
                "replaceRecord",
                "deleteRecord"
            ]
        );
        let create = &samples[0].samples;
        assert_eq!(
            create[0].source,
            "curl --fail-with-body -sS -X POST 'http://127.0.0.1:8080/api/v1/data/orders-7k2m9x4q1w8p' \\\n  \
             -H 'Authorization: Bearer YOUR_SANDBOX_KEY' \\\n  -H 'Content-Type: application/json' \\\n  \
             --data-raw '{\"it'\\''s\":\"example\",\"say \\\"hi\\\"\":\"example\"}'\n"
        );
        assert!(
            create[2]
                .source
                .contains(r#"json={"it's":"example","say \"hi\"":"example"},"#)
        );
        let batch = &samples[1].samples[0].source;
        assert!(
            batch.contains("/api/v1/data/orders-7k2m9x4q1w8p/batch'"),
            "{batch}"
        );
        assert!(
            batch.contains(r#"--data-raw '[{"it'\''s":"example","#),
            "{batch}"
        );
        let read = &samples[2].samples[1].source;
        assert!(read.contains("/api/v1/data/orders-7k2m9x4q1w8p/YOUR_RECORD_ID\""));
        assert!(!read.contains("body:"));
        let search = &samples[4].samples[0].source;
        assert!(search.contains("/search?q=example&limit=10'"));
    }
}
