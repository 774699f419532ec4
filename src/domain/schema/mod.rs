//! An endpoint's JSON Schema: checked when the owner saves it, compiled once per endpoint
//! version, and matched against every payload a create, replace or batch stores; and the dry
//! run that tries a schema on the newest stored records before the owner saves it.
//!
//! What is supported (docs/src/schemas.md says the same to users):
//! - Draft 2020-12, every keyword of its core, applicator, validation, unevaluated and
//!   format-assertion vocabularies. A `$schema` naming another draft is refused.
//! - `$ref` to the schema itself only (`#/$defs/…`, or an `$id`/`$anchor` inside it): nothing
//!   is ever fetched, from the network or from files.
//! - `format` is asserted, not only annotated (`email`, `date-time`, `uuid`, `ipv4`, `uri`, …);
//!   an unknown format is refused when the schema is saved, since a typo would check nothing.
//! - `pattern` uses the `regex` crate: linear time whatever the payload, so a pattern cannot
//!   be made to take seconds; look-around and back-references are refused when saved.
//! - Numbers are compared as written: `"maximum": 10` refuses
//!   `10.000000000000000000001`, and a 30-digit integer is compared exactly (serde_json's
//!   `arbitrary_precision` keeps each number's text).

mod tape;

use std::ops::Bound;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use self::tape::{Tape, TapeJson};
use crate::core::quiet_panic;
pub use crate::domain::error::Violation;
use crate::domain::error::{Error, Result};
use crate::store::records::ScanOrder;
use crate::store::{EndpointRow, Environment, Partition, Store};

/// The largest schema, as compact JSON text.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// The most violations a refusal lists.
pub const MAX_VIOLATIONS: usize = 20;
/// The draft intake validates, as `$schema` names it.
pub const DRAFT_URI: &str = "https://json-schema.org/draft/2020-12/schema";
/// How many violations are gathered before the first [`MAX_VIOLATIONS`] in document order are
/// picked: bounds the work a payload that breaks every rule can cause.
const VIOLATIONS_GATHERED: usize = 10_000;

/// What a schema says about a payload's top level, as far as a table and a form can use it:
/// its `properties` in the schema's order (each with the JSON types its `type` allows, empty
/// when it names none) and its `required` names. Nested rules, `$ref`s and combinators are
/// left to the validator.
#[derive(Debug, Default, PartialEq)]
pub struct TopLevel {
    pub properties: Vec<(String, Vec<String>)>,
    pub required: Vec<String>,
}

impl TopLevel {
    /// The top level of a stored schema (its text); empty for one that is not an object.
    pub fn of(schema: &str) -> TopLevel {
        let Ok(Value::Object(schema)) = serde_json::from_str::<Value>(schema) else {
            return TopLevel::default();
        };
        let names = |value: Option<&Value>| -> Vec<String> {
            match value {
                Some(Value::String(one)) => vec![one.clone()],
                Some(Value::Array(many)) => many
                    .iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
                _ => Vec::new(),
            }
        };
        let properties = match schema.get("properties") {
            Some(Value::Object(properties)) => properties
                .iter()
                .map(|(name, rule)| (name.clone(), names(rule.get("type"))))
                .collect(),
            _ => Vec::new(),
        };
        TopLevel {
            properties,
            required: names(schema.get("required")),
        }
    }
}

/// A compiled schema. A stored schema that no longer compiles (a validator upgrade that
/// reads a keyword differently) refuses every write with a 500 naming the problem, never
/// lets one through unchecked.
pub struct PayloadSchema {
    validator: std::result::Result<jsonschema::Validator<TapeJson>, String>,
}

impl std::fmt::Debug for PayloadSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PayloadSchema")
    }
}

/// Refuses every `$ref` that leaves the schema: intake never fetches one.
struct NoRetrieval;

impl jsonschema::Retrieve for NoRetrieval {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> std::result::Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!(
            "`{uri}` is outside the schema; intake never fetches schemas, so `$ref` may only \
             point inside it (e.g. `#/$defs/address`)"
        )
        .into())
    }
}

impl PayloadSchema {
    /// Checks `schema` as the owner sends it and answers it compiled, with its text as stored
    /// (compact JSON); 400 `invalid_schema` naming the problem.
    pub fn parse(schema: &Value) -> Result<(PayloadSchema, String)> {
        let text = schema.to_string();
        if text.len() > MAX_SCHEMA_BYTES {
            return Err(Error::InvalidSchema(format!(
                "the schema is {} bytes as compact JSON; at most {MAX_SCHEMA_BYTES} are allowed",
                text.len()
            )));
        }
        if !schema.is_object() && !schema.is_boolean() {
            return Err(Error::InvalidSchema(
                "a schema is a JSON object (or `true` or `false`)".into(),
            ));
        }
        if let Some(draft) = schema.get("$schema") {
            let named = draft.as_str().map(|d| d.trim_end_matches('#'));
            if named != Some(DRAFT_URI) {
                return Err(Error::InvalidSchema(format!(
                    "`$schema` is {draft}; intake validates draft 2020-12: remove `$schema` or \
                     set it to \"{DRAFT_URI}\""
                )));
            }
        }
        let compiled = PayloadSchema::compile(schema)?;
        Ok((compiled, text))
    }

    /// Compiles a schema saved before (its stored text).
    pub fn from_stored(text: &str) -> PayloadSchema {
        let compiled = serde_json::from_str(text)
            .map_err(|e| format!("the stored schema is not JSON: {e}"))
            .and_then(|schema| {
                PayloadSchema::compile(&schema).map_err(|e| format!("the stored schema: {e}"))
            });
        match compiled {
            Ok(compiled) => compiled,
            Err(problem) => PayloadSchema {
                validator: Err(problem),
            },
        }
    }

    fn compile(schema: &Value) -> Result<PayloadSchema> {
        // A schema is the owner's input: a panic of the validator on one is a refusal.
        let built = quiet_panic::catch(|| {
            jsonschema::options_for::<TapeJson>()
                .with_draft(jsonschema::Draft::Draft202012)
                .with_retriever(NoRetrieval)
                .should_validate_formats(true)
                .should_ignore_unknown_formats(false)
                .with_pattern_options(jsonschema::PatternOptions::regex())
                .build(schema)
        })
        .map_err(|panic| Error::InvalidSchema(format!("the validator cannot read it ({panic})")))?;
        let validator = built.map_err(|e| Error::InvalidSchema(schema_problem(&e)))?;
        Ok(PayloadSchema {
            validator: Ok(validator),
        })
    }

    /// Whether `payload` (a payload text: one valid JSON document) matches; 400
    /// `schema_violation` with the first [`MAX_VIOLATIONS`] violations in document order.
    pub fn check(&self, payload: &[u8]) -> Result<()> {
        let violations = self.violations(payload)?;
        if violations.is_empty() {
            Ok(())
        } else {
            Err(Error::SchemaViolation(violations))
        }
    }

    /// The first [`MAX_VIOLATIONS`] violations of `payload`, in document order (a location
    /// before the ones inside it and after it; at one location, in the schema's order).
    pub fn violations(&self, payload: &[u8]) -> Result<Vec<Violation>> {
        // A payload is the caller's input: a panic of the validator on one is a 500 of this
        // request, never of the server.
        quiet_panic::catch(|| self.violations_of(payload))
            .unwrap_or_else(|panic| Err(Error::Internal(format!("schema validation: {panic}"))))
    }

    fn violations_of(&self, payload: &[u8]) -> Result<Vec<Violation>> {
        let validator = self
            .validator
            .as_ref()
            .map_err(|e| Error::Internal(e.clone()))?;
        let not_json = || Error::Internal("a checked payload is not compact JSON".into());
        let text = std::str::from_utf8(payload).map_err(|_| not_json())?;
        let tape = Tape::read(text).ok_or_else(not_json)?;
        if validator.is_valid(tape.root()) {
            return Ok(Vec::new());
        }
        // The rest is the refusal's: where each violation is in the document is read from
        // the payload as a `Value`.
        let instance: Value = serde_json::from_str(text).map_err(|_| not_json())?;
        let mut found: Vec<(Vec<usize>, Violation)> = validator
            .iter_errors(tape.root())
            .take(VIOLATIONS_GATHERED)
            .map(|error| {
                // Masked: the value is left out (`value is not of type "integer"`), so no
                // copy of a payload's data reaches an error body or the request log.
                let violation = Violation {
                    instance_path: error.instance_path().to_string(),
                    keyword: error.kind().keyword().to_string(),
                    message: error.masked().to_string(),
                };
                (
                    document_position(&instance, &violation.instance_path),
                    violation,
                )
            })
            .collect();
        // Stable: at one location the schema's order stays.
        found.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(found
            .into_iter()
            .take(MAX_VIOLATIONS)
            .map(|(_, violation)| violation)
            .collect())
    }
}

/// Body of `POST /api/v1/manage/endpoints/{slug}/schema/check`: a schema to try on the
/// newest stored records before saving it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaCheck {
    pub schema: Value,
    /// How many of the newest records to check: 1 to [`CHECK_LIMIT_MAX`], 1,000 if absent.
    #[serde(default)]
    pub limit: Option<usize>,
    /// Whose records: the endpoint's current environment if absent (production once
    /// deployed, sandbox before).
    #[serde(default)]
    pub environment: Option<Environment>,
}

/// The most records one check reads.
pub const CHECK_LIMIT_MAX: usize = 10_000;
pub const CHECK_LIMIT_DEFAULT: usize = 1_000;
/// How many failing records a check's report shows, and how many violations of each.
pub const CHECK_EXAMPLES: usize = 5;

/// What a schema check found.
#[derive(Debug, Serialize)]
pub struct SchemaCheckReport {
    pub environment: Environment,
    /// Records read: the newest `limit`, or fewer if the environment holds fewer.
    pub checked: usize,
    /// How many of them the schema would refuse.
    pub failed: usize,
    /// The newest failing records (at most [`CHECK_EXAMPLES`]), each with its first
    /// violations in document order.
    pub examples: Vec<FailingRecord>,
}

#[derive(Debug, Serialize)]
pub struct FailingRecord {
    pub id: String,
    pub errors: Vec<Violation>,
}

/// Checks `check.schema` against the newest stored records of `endpoint` (whose owner asks:
/// `Endpoints::owned_row`). Changes nothing: saving a schema never touches stored records
/// either.
pub fn check_stored(
    store: &dyn Store,
    endpoint: &EndpointRow,
    check: SchemaCheck,
) -> Result<SchemaCheckReport> {
    let limit = match check.limit {
        None => CHECK_LIMIT_DEFAULT,
        Some(n) if (1..=CHECK_LIMIT_MAX).contains(&n) => n,
        Some(_) => {
            return Err(Error::InvalidParameter {
                name: "limit",
                reason: format!("must be 1 to {CHECK_LIMIT_MAX}"),
            });
        }
    };
    let (schema, _) = PayloadSchema::parse(&check.schema)?;
    let environment = check.environment.unwrap_or(if endpoint.deployed {
        Environment::Production
    } else {
        Environment::Sandbox
    });
    let mut report = SchemaCheckReport {
        environment,
        checked: 0,
        failed: 0,
        examples: Vec::new(),
    };
    let mut failure = Ok(());
    store.read()?.record_page(
        Partition::new(endpoint.id, environment),
        (Bound::Unbounded, Bound::Unbounded),
        ScanOrder::NewestFirst,
        limit,
        &mut |record| {
            report.checked += 1;
            match schema.violations(record.payload) {
                Ok(violations) if violations.is_empty() => {}
                Ok(mut violations) => {
                    report.failed += 1;
                    if report.examples.len() < CHECK_EXAMPLES {
                        violations.truncate(CHECK_EXAMPLES);
                        report.examples.push(FailingRecord {
                            id: record.id.to_string(),
                            errors: violations,
                        });
                    }
                }
                Err(e) if failure.is_ok() => failure = Err(e),
                Err(_) => {}
            }
            Ok(())
        },
    )?;
    failure?;
    Ok(report)
}

/// Where `pointer` is in `document`, as the index of each step within its object (in the
/// order written) or array: sorting by it is document order, a location before the ones
/// inside it.
fn document_position(document: &Value, pointer: &str) -> Vec<usize> {
    let mut position = Vec::new();
    let mut at = document;
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        let next = match at {
            Value::Object(map) => map
                .iter()
                .enumerate()
                .find(|(_, (key, _))| **key == token)
                .map(|(i, (_, value))| (i, value)),
            Value::Array(items) => token
                .parse::<usize>()
                .ok()
                .and_then(|i| items.get(i).map(|value| (i, value))),
            _ => None,
        };
        match next {
            Some((i, value)) => {
                position.push(i);
                at = value;
            }
            None => break,
        }
    }
    position
}

/// What is wrong with a schema, from the validator's refusal to compile it.
fn schema_problem(error: &jsonschema::ValidationError<'_>) -> String {
    let at = error.instance_path().to_string();
    let what = error.to_string();
    if at.is_empty() {
        what
    } else {
        format!("{what} (at `{at}` in the schema)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(text: &str) -> PayloadSchema {
        let value: Value = serde_json::from_str(text).unwrap();
        PayloadSchema::parse(&value).unwrap().0
    }

    fn refusal(text: &str) -> String {
        let value: Value = serde_json::from_str(text).unwrap();
        match PayloadSchema::parse(&value) {
            Err(Error::InvalidSchema(problem)) => problem,
            other => panic!("expected invalid_schema for {text}, got {other:?}"),
        }
    }

    #[test]
    fn the_top_level_keeps_the_schemas_order() {
        let top = TopLevel::of(
            r#"{"type":"object","required":["sku","qty"],"properties":{"sku":{"type":"string"},"qty":{"type":["integer","null"]},"meta":{}}}"#,
        );
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            top.properties,
            vec![
                ("sku".to_string(), names(&["string"])),
                ("qty".to_string(), names(&["integer", "null"])),
                ("meta".to_string(), Vec::new()),
            ]
        );
        assert_eq!(top.required, names(&["sku", "qty"]));
        assert_eq!(TopLevel::of("true"), TopLevel::default());
    }

    #[test]
    fn numbers_are_compared_exactly_as_written() {
        let s = schema(r#"{"maximum": 123456789012345678901234567890}"#);
        assert!(s.check(b"123456789012345678901234567890").is_ok());
        assert!(s.check(b"123456789012345678901234567891").is_err());
        // Through f64 both would be 1.2345678901234568e29.
        let s = schema(r#"{"maximum": 10}"#);
        assert!(s.check(b"10.000000000000000000001").is_err());
        assert!(s.check(b"10.0").is_ok());
        let s = schema(r#"{"multipleOf": 0.1}"#);
        assert!(s.check(b"0.3").is_ok());
    }

    #[test]
    fn violations_come_in_document_order_with_keyword_and_words() {
        let s = schema(
            r#"{"type":"object","properties":{
                "a":{"type":"string"},"b":{"type":"integer"},"c":{"type":"array","items":{"minimum":0}}}}"#,
        );
        let v = s.violations(br#"{"c":[1,-1,-2],"b":"x","a":3}"#).unwrap();
        let paths: Vec<&str> = v.iter().map(|v| v.instance_path.as_str()).collect();
        assert_eq!(paths, ["/c/1", "/c/2", "/b", "/a"]);
        assert_eq!(v[2].keyword, "type");
        assert_eq!(v[0].keyword, "minimum");
        assert!(v[2].message.contains("integer"), "{}", v[2].message);
        match s.check(br#"{"a":3}"#) {
            Err(Error::SchemaViolation(list)) => assert_eq!(list.len(), 1),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn at_most_twenty_violations_are_listed() {
        let s = schema(r#"{"items":{"type":"string"}}"#);
        let payload = format!("[{}]", vec!["1"; 50].join(","));
        let v = s.violations(payload.as_bytes()).unwrap();
        assert_eq!(v.len(), MAX_VIOLATIONS);
        assert_eq!(v[0].instance_path, "/0");
        assert_eq!(v[19].instance_path, "/19");
    }

    #[test]
    fn messages_never_quote_the_payload() {
        let s = schema(r#"{"properties":{"email":{"format":"email"},"n":{"enum":[1,2]}}}"#);
        let v = s
            .violations(br#"{"email":"ada-lovelace","n":"secret-ish"}"#)
            .unwrap();
        assert_eq!(v.len(), 2);
        for violation in &v {
            assert!(!violation.message.contains("ada-lovelace"), "{violation:?}");
            assert!(!violation.message.contains("secret-ish"), "{violation:?}");
        }
    }

    #[test]
    fn formats_are_asserted() {
        let s = schema(r#"{"format":"email"}"#);
        assert!(s.check(br#""ada@example.com""#).is_ok());
        assert!(s.check(br#""not an address""#).is_err());
        let s = schema(r#"{"format":"date-time"}"#);
        assert!(s.check(br#""2026-11-28T10:00:00Z""#).is_ok());
        assert!(s.check(br#""yesterday""#).is_err());
    }

    #[test]
    fn local_refs_work_and_nothing_is_fetched() {
        let s = schema(
            r##"{"$defs":{"pos":{"type":"integer","minimum":1}},"properties":{"n":{"$ref":"#/$defs/pos"}}}"##,
        );
        assert!(s.check(br#"{"n":2}"#).is_ok());
        assert!(s.check(br#"{"n":0}"#).is_err());
        let problem = refusal(r#"{"$ref":"https://example.com/schema.json"}"#);
        assert!(problem.contains("never fetches"), "{problem}");
        let problem = refusal(r#"{"$ref":"file:///etc/passwd"}"#);
        assert!(problem.contains("never fetches"), "{problem}");
    }

    #[test]
    fn bad_schemas_are_refused_with_the_problem_named() {
        assert!(refusal(r#"{"type":"strng"}"#).contains("strng"));
        assert!(refusal(r#"{"minimum":"ten"}"#).contains("ten"));
        assert!(refusal(r#"{"format":"emial"}"#).contains("emial"));
        assert!(refusal(r#"{"pattern":"(?=a)b"}"#).contains("(?=a)b"));
        assert!(
            refusal(r#"{"$schema":"http://json-schema.org/draft-07/schema#"}"#).contains("2020-12")
        );
        assert!(refusal("[1]").contains("JSON object"));
        let huge = format!(r#"{{"description":"{}"}}"#, "x".repeat(MAX_SCHEMA_BYTES));
        assert!(refusal(&huge).contains("at most"));
        // The draft's own URI is welcome, with or without the empty fragment.
        schema(r#"{"$schema":"https://json-schema.org/draft/2020-12/schema#"}"#);
        schema("true");
    }

    #[test]
    fn patterns_run_in_linear_time() {
        let s = schema(r#"{"pattern":"^(a+)+$"}"#);
        let payload = format!("\"{}b\"", "a".repeat(50_000));
        assert!(s.check(payload.as_bytes()).is_err());
    }
}
