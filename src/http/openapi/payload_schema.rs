//! An endpoint's JSON Schema as the payload schema of its own document: the schema moves
//! from the root of its own resource to `#/components/schemas/<name>`, so its local `$ref`s
//! are rewritten to where their targets now sit. The `$defs` at its root become component
//! schemas of their own (`Payload_<def>`), which client generators turn into named types.

use serde_json::{Map, Value, json};

use crate::core::config::percent_decode;

/// The prefix of the component schemas the root `$defs` become.
const DEF_PREFIX: &str = "Payload_";

/// Keywords whose value is data, not a schema: a `$ref` or `$id` key inside is not one.
const DATA_KEYWORDS: [&str; 5] = ["const", "enum", "default", "examples", "example"];
/// Keywords whose value maps names (which may be anything, `const` included) to schemas.
const SCHEMA_MAPS: [&str; 5] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// The component schemas of an endpoint whose JSON Schema is `schema`: `name` (the schema,
/// with the required fields added and a description) and one `Payload_<def>` per root `$defs`
/// entry whose name a component may have.
pub fn components(
    schema: &Value,
    required_fields: &[String],
    name: &str,
    storage: &str,
) -> Map<String, Value> {
    let mut payload = match schema {
        Value::Bool(true) => json!({}),
        Value::Bool(false) => json!({ "not": {} }),
        Value::Object(map) => Value::Object(map.clone()),
        // Saving refuses any other JSON as a schema.
        _ => json!({}),
    };
    let mut components = Map::new();
    let mut has_id = false;
    visit_schema(&mut payload, &mut |map| has_id |= map.contains_key("$id"));
    // With an `$id`, the schema (or a part of it) is a resource of its own whose `$ref`s are
    // resolved against that `$id`, wherever it sits: it is left as the owner wrote it, inline,
    // for rewriting its references would point them elsewhere.
    if !has_id {
        let defs = match payload.get_mut("$defs").map(Value::take) {
            Some(Value::Object(defs)) => defs,
            _ => Map::new(),
        };
        let (hoisted, kept): (Map<String, Value>, Map<String, Value>) = defs
            .into_iter()
            .partition(|(def, _)| is_component_name(def));
        if !kept.is_empty() {
            payload["$defs"] = Value::Object(kept);
        } else if let Value::Object(map) = &mut payload {
            map.remove("$defs");
        }
        let mut rewrite = |map: &mut Map<String, Value>| {
            for keyword in ["$ref", "$dynamicRef"] {
                if let Some(Value::String(target)) = map.get_mut(keyword)
                    && let Some(moved) = moved_ref(target, name, &hoisted)
                {
                    *target = moved;
                }
            }
        };
        visit_schema(&mut payload, &mut rewrite);
        for (def, schema) in &hoisted {
            let mut schema = schema.clone();
            visit_schema(&mut schema, &mut rewrite);
            components.insert(format!("{DEF_PREFIX}{def}"), schema);
        }
        // `$schema` belongs at the root of a resource; the document's dialect is 2020-12.
        if let Value::Object(map) = &mut payload {
            map.remove("$schema");
        }
    }
    let mut description = String::new();
    if let Some(own) = payload.get("description").and_then(Value::as_str) {
        description.push_str(own);
        description.push_str("\n\n");
    }
    description.push_str(
        "The endpoint's JSON Schema: every payload a create, replace or batch stores matches \
         it (records stored before it was set, or changed, may not).",
    );
    if !required_fields.is_empty() {
        let is_object = payload.get("type").and_then(Value::as_str) == Some("object");
        if is_object {
            let required = payload
                .as_object_mut()
                .map(|map| map.entry("required").or_insert_with(|| json!([])));
            if let Some(Value::Array(required)) = required {
                for field in required_fields {
                    if !required.iter().any(|r| r.as_str() == Some(field)) {
                        required.push(Value::String(field.clone()));
                    }
                }
            }
        }
        description.push_str(&format!(
            " The endpoint's required fields ({}) must also be present and not `null`.",
            required_fields
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    description.push(' ');
    description.push_str(storage);
    payload["description"] = Value::String(description);
    let mut all = Map::new();
    all.insert(name.to_string(), payload);
    all.extend(components);
    all
}

/// Whether `name` may name a component (`^[a-zA-Z0-9.\-_]+$`).
fn is_component_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// Where `target`, a reference inside the schema, points once the schema is the component
/// `name` and the `hoisted` defs are components of their own; `None` for a reference that
/// is not a JSON Pointer fragment (`#anchor`: anchors stay where they are).
fn moved_ref(target: &str, name: &str, hoisted: &Map<String, Value>) -> Option<String> {
    let pointer = target.strip_prefix('#')?;
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return None;
    }
    if let Some(rest) = pointer.strip_prefix("/$defs/") {
        let (segment, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let def = pointer_segment(segment);
        if hoisted.contains_key(&def) {
            return Some(format!("#/components/schemas/{DEF_PREFIX}{def}{tail}"));
        }
    }
    Some(format!("#/components/schemas/{name}{pointer}"))
}

/// A JSON Pointer segment of a URI fragment, decoded (`%xx`, then `~1` and `~0`).
fn pointer_segment(segment: &str) -> String {
    percent_decode(segment)
        .replace("~1", "/")
        .replace("~0", "~")
}

/// Calls `f` on every schema object of `schema`, itself included.
fn visit_schema(schema: &mut Value, f: &mut impl FnMut(&mut Map<String, Value>)) {
    match schema {
        Value::Object(map) => {
            f(map);
            for (keyword, value) in map.iter_mut() {
                if DATA_KEYWORDS.contains(&keyword.as_str()) {
                    continue;
                }
                match value {
                    Value::Object(named) if SCHEMA_MAPS.contains(&keyword.as_str()) => {
                        named.values_mut().for_each(|s| visit_schema(s, f))
                    }
                    Value::Array(items) => items.iter_mut().for_each(|s| visit_schema(s, f)),
                    other => visit_schema(other, f),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|s| visit_schema(s, f)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_defs_become_components_and_references_follow_them() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "required": ["email"],
            "properties": {
                "email": { "type": "string" },
                "items": { "type": "array", "items": { "$ref": "#/$defs/item" } },
                "const": { "$ref": "#/properties/email" },
                "odd": { "$ref": "#/$defs/a~1b" },
                "self": { "$ref": "#" },
                "tag": { "const": { "$ref": "#/$defs/item" } }
            },
            "$defs": {
                "item": { "type": "object", "properties": { "next": { "$ref": "#/$defs/item" } } },
                "a/b": { "type": "integer" }
            }
        });
        let fields = vec!["email".to_string(), "total".to_string()];
        let all = components(&schema, &fields, "WritePayload", "Stored as sent.");
        let payload = &all["WritePayload"];
        let base = "#/components/schemas/WritePayload";
        assert_eq!(payload["required"], json!(["email", "total"]));
        assert_eq!(payload.get("$schema"), None);
        assert_eq!(
            payload["properties"]["items"]["items"]["$ref"],
            "#/components/schemas/Payload_item"
        );
        assert_eq!(
            payload["properties"]["const"]["$ref"],
            format!("{base}/properties/email")
        );
        assert_eq!(
            payload["properties"]["odd"]["$ref"],
            format!("{base}/$defs/a~1b")
        );
        assert_eq!(payload["$defs"], json!({ "a/b": { "type": "integer" } }));
        assert_eq!(payload["properties"]["self"]["$ref"], base);
        // Data is not rewritten.
        assert_eq!(
            payload["properties"]["tag"]["const"]["$ref"],
            "#/$defs/item"
        );
        assert_eq!(
            all["Payload_item"]["properties"]["next"]["$ref"],
            "#/components/schemas/Payload_item"
        );
        let description = payload["description"].as_str().unwrap_or_default();
        assert!(description.contains("`total`"), "{description}");
        assert!(description.ends_with("Stored as sent."), "{description}");
    }

    #[test]
    fn a_schema_with_an_id_is_left_as_written() {
        let schema = json!({
            "$id": "https://example.com/order",
            "properties": { "item": { "$ref": "#/$defs/item" } },
            "$defs": { "item": { "type": "string" } }
        });
        let all = components(&schema, &[], "WritePayload", "");
        assert_eq!(all.len(), 1);
        assert_eq!(all["WritePayload"]["$defs"], schema["$defs"]);
        assert_eq!(
            all["WritePayload"]["properties"]["item"]["$ref"],
            "#/$defs/item"
        );
    }

    #[test]
    fn boolean_schemas_become_objects() {
        assert_eq!(
            components(&json!(false), &[], "P", "")["P"]["not"],
            json!({})
        );
    }
}
