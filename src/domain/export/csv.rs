//! CSV of an export (RFC 4180, UTF-8, CRLF, no BOM): the columns a header names, and one row
//! per record with each field's cell (see the module doc of `export` for the rules).

use std::borrow::Cow;
use std::fmt;
use std::ops::Bound;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::{COLUMN_SAMPLE, ExportRequest};
use crate::core::ids::RecordId;
use crate::domain::error::Result;
use crate::store::records::{RecordRef, ScanOrder};
use crate::store::{Partition, ReadTx, StoreError};

/// The top-level keys of the newest [`COLUMN_SAMPLE`] records of the window, in first-seen
/// order, newest first.
pub(super) fn sampled_columns(
    tx: &dyn ReadTx,
    partition: Partition,
    request: &ExportRequest,
) -> Result<Vec<Vec<String>>> {
    let mut seen: Vec<String> = Vec::new();
    let mut known = std::collections::HashSet::new();
    let ids = (
        Bound::Included(request.lower),
        Bound::Included(request.upper),
    );
    tx.record_page(
        partition,
        ids,
        ScanOrder::NewestFirst,
        COLUMN_SAMPLE,
        &mut |record| {
            // A payload that is not an object has no keys to offer.
            if let Ok(TopLevelKeys(keys)) = serde_json::from_slice(record.payload) {
                for key in keys {
                    if known.insert(key.clone()) {
                        seen.push(key);
                    }
                }
            }
            Ok(())
        },
    )?;
    Ok(seen.into_iter().map(|key| vec![key]).collect())
}

/// The keys of a JSON object in their order (values skipped).
struct TopLevelKeys(Vec<String>);

impl<'de> serde::Deserialize<'de> for TopLevelKeys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = TopLevelKeys;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<TopLevelKeys, A::Error> {
                let mut keys = Vec::new();
                while let Some((key, IgnoredAny)) = map.next_entry::<String, IgnoredAny>()? {
                    keys.push(key);
                }
                Ok(TopLevelKeys(keys))
            }
        }
        deserializer.deserialize_map(Keys)
    }
}

pub(super) fn csv_header(out: &mut String, columns: &[Vec<String>]) {
    out.push_str("id,created_at,updated_at");
    for column in columns {
        out.push(',');
        push_text_cell(out, &column.join("."));
    }
    out.push_str("\r\n");
}

/// One CSV row of `record`.
pub(super) fn csv_row(
    out: &mut String,
    record: RecordRef<'_>,
    columns: &[Vec<String>],
) -> std::result::Result<(), StoreError> {
    record.id.push_to(out);
    out.push(',');
    RecordId::created_at(record.id).push_rfc3339(out);
    out.push(',');
    record.updated_at.push_rfc3339(out);
    // A payload that is not an object has no fields: its cells are empty.
    let object: Option<Members<'_>> = if columns.is_empty() {
        None
    } else {
        serde_json::from_slice(record.payload).ok()
    };
    for path in columns {
        out.push(',');
        if let Some(value) = object.as_ref().and_then(|object| object.field(path)) {
            push_value_cell(out, value)?;
        }
    }
    out.push_str("\r\n");
    Ok(())
}

/// The members of a JSON object in their order, borrowed from its text: no copy of a value,
/// and none of a key without escapes.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'a> Members<'a> {
    /// The value at `path` (a dotted path descends into nested objects); of a key given twice,
    /// the last, as JSON parsers read it.
    fn field(&self, path: &[String]) -> Option<&'a RawValue> {
        let (first, rest) = path.split_first()?;
        let mut value = self.get(first)?;
        for name in rest {
            let nested: Members<'a> = serde_json::from_str(value.get()).ok()?;
            value = nested.get(name)?;
        }
        Some(value)
    }

    fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.0
            .iter()
            .rev()
            .find(|(key, _)| key == name)
            .map(|(_, value)| *value)
    }
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Members<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct MembersVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for MembersVisitor<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Members<'a>, A::Error> {
                let mut members = Vec::new();
                while let Some(Key(key)) = map.next_key::<Key<'a>>()? {
                    let value: &'a RawValue = map.next_value()?;
                    members.push((key, value));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor(std::marker::PhantomData))
    }
}

/// An object's key, borrowed unless it holds an escape.
struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct KeyVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for KeyVisitor<'a> {
            type Value = Key<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, key: &'de str) -> std::result::Result<Key<'a>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }
            fn visit_str<E>(self, key: &str) -> std::result::Result<Key<'a>, E> {
                Ok(Key(Cow::Owned(key.to_string())))
            }
        }
        deserializer.deserialize_str(KeyVisitor(std::marker::PhantomData))
    }
}

/// A cell for a stored JSON value (see the module doc).
fn push_value_cell(out: &mut String, value: &RawValue) -> std::result::Result<(), StoreError> {
    let text = value.get();
    match text.as_bytes().first() {
        Some(b'"') => match text.get(1..text.len() - 1) {
            // Without an escape, the string's text is what lies between its quotes.
            Some(inner) if !inner.contains('\\') => push_text_cell(out, inner),
            _ => {
                let decoded: String = serde_json::from_str(text)
                    .map_err(|e| StoreError::Corrupt(format!("a stored string: {e}")))?;
                push_text_cell(out, &decoded);
            }
        },
        Some(b'n') => {}
        // Numbers, true and false as stored; objects and arrays as their JSON text.
        _ => push_field(out, "", text),
    }
    Ok(())
}

/// A text cell: prefixed with `'` if a spreadsheet would read it as a formula.
fn push_text_cell(out: &mut String, text: &str) {
    let guard = if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        "'"
    } else {
        ""
    };
    push_field(out, guard, text);
}

/// `prefix` and `text` as one CSV field: quoted (with its quotes doubled) when it holds a
/// quote, a comma or a line break.
fn push_field(out: &mut String, prefix: &str, text: &str) {
    if !text.contains(['"', ',', '\r', '\n']) {
        out.push_str(prefix);
        out.push_str(text);
        return;
    }
    out.push('"');
    out.push_str(prefix);
    for (n, part) in text.split('"').enumerate() {
        if n > 0 {
            out.push_str("\"\"");
        }
        out.push_str(part);
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::clock::Timestamp;

    fn cells(payload: &str, columns: &[&str]) -> String {
        let columns: Vec<Vec<String>> = columns
            .iter()
            .map(|c| c.split('.').map(str::to_string).collect())
            .collect();
        let mut out = String::new();
        let record = RecordRef {
            id: RecordId(1 << 64),
            updated_at: Timestamp(1),
            payload: payload.as_bytes(),
        };
        csv_row(&mut out, record, &columns).unwrap();
        let row = out.strip_suffix("\r\n").unwrap();
        // Past id, created_at and updated_at.
        row.splitn(4, ',').nth(3).unwrap_or_default().to_string()
    }

    #[test]
    fn cells_keep_numbers_as_stored_and_guard_formulas() {
        let payload = r#"{"n":1.50,"big":12345678901234567890123,"neg":-5,"t":true,"f":false,"z":null,"s":"a,\"b\"","f1":"=SUM(A1)","f2":"-1","f3":"@x","f4":"\tx","o":{"city":"Kraków","n":[1,2]},"a":[1,"x"]}"#;
        assert_eq!(
            cells(payload, &["n", "big", "neg", "t", "f", "z", "missing"]),
            "1.50,12345678901234567890123,-5,true,false,,"
        );
        assert_eq!(cells(payload, &["s"]), r#""a,""b""""#);
        assert_eq!(cells(payload, &["f1", "f2", "f3"]), "'=SUM(A1),'-1,'@x");
        assert_eq!(cells(payload, &["f4"]), "'\tx");
        assert_eq!(
            cells(payload, &["o.city", "o.n", "a", "o.missing", "s.x"]),
            r#"Kraków,"[1,2]","[1,""x""]",,"#
        );
        assert_eq!(cells("[1,2]", &["a"]), "");
    }
}
