//! The records table: a page of records as rows whose columns are the payload's top-level
//! fields (the schema's properties when the endpoint has a schema, else the keys the page's
//! records have), each cell a short text of its value. Values are read as the stored JSON
//! text (`RawValue`), never converted, so a number shows exactly as it was sent.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::domain::schema::TopLevel;

/// Columns shown before the column chooser: more are kept for the chooser, hidden at first.
pub const SHOWN_COLUMNS: usize = 12;
/// The most columns a page offers (a page whose records have more keys lists the rest on
/// the record page only).
pub const MAX_COLUMNS: usize = 60;
/// The longest text a cell shows, in characters, before it is cut with an ellipsis.
const CELL_CHARS: usize = 60;

/// The column key of a payload that is not an object (field columns are `field:{name}`).
const WHOLE_PAYLOAD: &str = "payload";

/// A column of the table.
pub struct Column {
    /// What the column chooser remembers it by.
    pub key: String,
    pub label: String,
    /// Whether it shows before the visitor chooses (the first [`SHOWN_COLUMNS`]).
    pub shown: bool,
}

/// One cell: its text and what kind of value it shows (a class for the stylesheet).
pub struct Cell {
    /// Its column's key.
    pub column: String,
    pub text: String,
    pub kind: &'static str,
    /// Whether the text was cut (the record page has all of it).
    pub cut: bool,
}

impl Cell {
    /// A cell of no column yet (the table gives it its column's key).
    fn new(text: String, kind: &'static str, cut: bool) -> Cell {
        Cell {
            column: String::new(),
            text,
            kind,
            cut,
        }
    }
}

/// One row: a record.
pub struct Row {
    pub id: String,
    pub created_at: String,
    /// Whether it was replaced after it was created.
    pub replaced: bool,
    /// One cell per column, in the columns' order.
    pub cells: Vec<Cell>,
}

/// The table of a page of records.
pub struct Table {
    pub columns: Vec<Column>,
    pub rows: Vec<Row>,
    /// How many of the page's top-level keys have no column (past [`MAX_COLUMNS`]).
    pub unlisted: usize,
}

/// A stored record as the page reads it.
pub struct Record<'a> {
    pub id: String,
    pub created_at: String,
    pub updated_at: String,
    pub payload: &'a RawValue,
}

/// A JSON object's members in their order, each value as its text (duplicates kept).
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for MembersVisitor<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Members<'a>, M::Error> {
                let mut members = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, &'de RawValue>()? {
                    members.push((key, value));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor(std::marker::PhantomData))
    }
}

/// The members of `payload` when it is an object.
fn members(payload: &RawValue) -> Option<Vec<(String, &RawValue)>> {
    if !payload.get().starts_with('{') {
        return None;
    }
    serde_json::from_str::<Members>(payload.get())
        .ok()
        .map(|m| m.0)
}

/// A value as a cell shows it: scalars as text (a string unquoted), an object or an array
/// by its size.
fn cell(value: &RawValue) -> Cell {
    let text = value.get();
    let count = |noun: &str, n: usize| format!("{n} {noun}{}", if n == 1 { "" } else { "s" });
    match text.as_bytes().first() {
        Some(b'{') => {
            let n = serde_json::from_str::<Members>(text).map_or(0, |m| m.0.len());
            let text = if n == 0 {
                "{}".to_string()
            } else {
                format!("{{{}}}", count("key", n))
            };
            Cell::new(text, "nested", false)
        }
        Some(b'[') => {
            let n = serde_json::from_str::<Vec<IgnoredAny>>(text).map_or(0, |items| items.len());
            let text = if n == 0 {
                "[]".to_string()
            } else {
                format!("[{}]", count("item", n))
            };
            Cell::new(text, "nested", false)
        }
        Some(b'"') => {
            let (text, cut) = shortened(&serde_json::from_str::<String>(text).unwrap_or_default());
            Cell::new(text, "text", cut)
        }
        Some(b't' | b'f' | b'n') => Cell::new(text.to_string(), "literal", false),
        _ => {
            let (text, cut) = shortened(text);
            Cell::new(text, "number", cut)
        }
    }
}

/// `text` cut to [`CELL_CHARS`] characters (at the last space in its final quarter when there
/// is one, so a word is not cut in half), with an ellipsis.
fn shortened(text: &str) -> (String, bool) {
    let Some((limit, _)) = text.char_indices().nth(CELL_CHARS) else {
        return (text.to_string(), false);
    };
    let head = &text[..limit];
    let quarter = head
        .char_indices()
        .nth(CELL_CHARS * 3 / 4)
        .map_or(0, |(i, _)| i);
    let cut = match head.rfind(char::is_whitespace) {
        Some(space) if space >= quarter => &head[..space],
        _ => head,
    };
    (format!("{}…", cut.trim_end()), true)
}

/// The table of `records`; `schema` is the endpoint's, when it has one with properties.
pub fn table(records: &[Record<'_>], schema: Option<&TopLevel>) -> Table {
    let parsed: Vec<Option<Vec<(String, &RawValue)>>> =
        records.iter().map(|r| members(r.payload)).collect();
    let mut names: Vec<String> = Vec::new();
    let mut unlisted = 0;
    match schema.filter(|s| !s.properties.is_empty()) {
        Some(schema) => {
            names.extend(
                schema
                    .properties
                    .iter()
                    .take(MAX_COLUMNS)
                    .map(|(name, _)| name.clone()),
            );
            unlisted = schema.properties.len().saturating_sub(MAX_COLUMNS);
        }
        None => {
            let mut seen = std::collections::HashSet::new();
            for (name, _) in parsed.iter().flatten().flatten() {
                if seen.insert(name.as_str()) {
                    if names.len() < MAX_COLUMNS {
                        names.push(name.clone());
                    } else {
                        unlisted += 1;
                    }
                }
            }
        }
    }
    let whole = parsed.iter().any(Option::is_none);
    let mut columns: Vec<Column> = names
        .iter()
        .map(|name| Column {
            key: format!("field:{name}"),
            label: name.clone(),
            shown: false,
        })
        .collect();
    if whole {
        columns.push(Column {
            key: WHOLE_PAYLOAD.to_string(),
            label: "payload".to_string(),
            shown: false,
        });
    }
    for column in columns.iter_mut().take(SHOWN_COLUMNS) {
        column.shown = true;
    }
    let rows = records
        .iter()
        .zip(&parsed)
        .map(|(record, members)| {
            let mut cells: Vec<Cell> = names
                .iter()
                .map(|name| {
                    let value = members
                        .as_ref()
                        .and_then(|m| m.iter().find(|(key, _)| key == name));
                    match value {
                        Some((_, value)) => cell(value),
                        None => Cell::new(String::new(), "absent", false),
                    }
                })
                .collect();
            if whole {
                cells.push(match members {
                    None => cell(record.payload),
                    Some(_) => Cell::new(String::new(), "absent", false),
                });
            }
            for (cell, column) in cells.iter_mut().zip(&columns) {
                cell.column.clone_from(&column.key);
            }
            Row {
                id: record.id.clone(),
                created_at: record.created_at.clone(),
                replaced: record.updated_at != record.created_at,
                cells,
            }
        })
        .collect();
    Table {
        columns,
        rows,
        unlisted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_string()).unwrap()
    }

    #[test]
    fn cells_show_scalars_as_stored_and_nested_values_by_size() {
        let texts = |text: &str| cell(&raw(text)).text;
        assert_eq!(
            texts("123456789012345678901234567890"),
            "123456789012345678901234567890"
        );
        assert_eq!(texts("1E2"), "1E2");
        assert_eq!(texts(r#""Jürgen \"J\"""#), "Jürgen \"J\"");
        assert_eq!(texts("true"), "true");
        assert_eq!(texts("null"), "null");
        assert_eq!(texts(r#"{"a":1,"b":{"c":2},"d":3}"#), "{3 keys}");
        assert_eq!(texts(r#"{"a":1}"#), "{1 key}");
        assert_eq!(texts("{}"), "{}");
        assert_eq!(texts("[1,[2,3],4,5,6]"), "[5 items]");
        assert_eq!(texts("[]"), "[]");
        let long = format!("\"{}\"", "word ".repeat(30));
        let shown = cell(&raw(&long));
        assert!(shown.cut);
        assert!(shown.text.ends_with("word…"), "{}", shown.text);
        assert!(shown.text.chars().count() <= CELL_CHARS + 1);
        let unbroken = format!("\"{}\"", "é".repeat(100));
        assert_eq!(
            cell(&raw(&unbroken)).text,
            format!("{}…", "é".repeat(CELL_CHARS))
        );
    }

    #[test]
    fn columns_are_the_schemas_properties_or_the_pages_keys() {
        let payloads = [raw(r#"{"b":1,"a":2}"#), raw(r#"{"c":3,"a":4}"#), raw("[1]")];
        let records: Vec<Record> = payloads
            .iter()
            .enumerate()
            .map(|(i, payload)| Record {
                id: format!("rec_{i}"),
                created_at: "t".into(),
                updated_at: "t".into(),
                payload,
            })
            .collect();
        let labels = |t: &Table| {
            t.columns
                .iter()
                .map(|c| c.label.clone())
                .collect::<Vec<_>>()
        };
        let t = table(&records, None);
        assert_eq!(labels(&t), ["b", "a", "c", "payload"]);
        let cells = |row: &Row| row.cells.iter().map(|c| c.text.clone()).collect::<Vec<_>>();
        assert_eq!(cells(&t.rows[0]), ["1", "2", "", ""]);
        assert_eq!(cells(&t.rows[2]), ["", "", "", "[1 item]"]);
        let schema = TopLevel::of(r#"{"properties":{"a":{},"z":{}}}"#);
        let t = table(&records, Some(&schema));
        assert_eq!(labels(&t), ["a", "z", "payload"]);
        assert_eq!(cells(&t.rows[1]), ["4", "", ""]);
    }

    #[test]
    fn a_page_with_many_keys_shows_the_first_and_offers_the_rest() {
        let wide = format!(
            "{{{}}}",
            (0..MAX_COLUMNS + 5)
                .map(|i| format!("\"k{i}\":{i}"))
                .collect::<Vec<_>>()
                .join(",")
        );
        let payload = raw(&wide);
        let record = Record {
            id: "rec".into(),
            created_at: "t".into(),
            updated_at: "t".into(),
            payload: &payload,
        };
        let t = table(&[record], None);
        assert_eq!(t.columns.len(), MAX_COLUMNS);
        assert_eq!(t.unlisted, 5);
        assert_eq!(t.columns.iter().filter(|c| c.shown).count(), SHOWN_COLUMNS);
    }
}
