//! A payload text as the validator reads it, without building a `serde_json::Value`: one flat
//! tape of its values, in document order, whose strings and numbers point into the text.
//!
//! Checking a payload against its endpoint's schema parsed it into a `Value` first, and that
//! parse (a map per object, a `String` per key, string and number) was five sixths of the
//! check's cost; reading the tape is a single pass and a single allocation. The payload is the
//! normalised payload text (`records::payload`: valid, compact JSON), so the reader expects no
//! whitespace; anything else it does not expect makes [`Tape::read`] answer `None`.

use std::borrow::Cow;

use jsonschema::json::{Array, Json, JsonNumber, Node, NodeIdentity, Object};
use jsonschema::types::JsonType;
use serde_json::Value;

/// The JSON representation the payload validator is built for.
pub struct TapeJson;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Null,
    False,
    True,
    Number,
    /// A string whose text has no escape: the text between its quotes is the string.
    String,
    /// A string with an escape, decoded when it is read.
    EscapedString,
    Array,
    Object,
}

/// One value of the tape. An array's elements follow it; an object's members follow it, each
/// a key (a string entry) then its value.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    kind: Kind,
    /// The value's text: `text[start..end]`, quotes and brackets included.
    start: u32,
    end: u32,
    /// The index of the entry after this value and everything inside it.
    next: u32,
    /// Elements of an array, members of an object.
    len: u32,
}

/// A payload text read into a tape.
pub struct Tape<'t> {
    text: &'t str,
    entries: Vec<Entry>,
}

impl<'t> Tape<'t> {
    /// Reads compact JSON text; `None` if it is not that.
    pub fn read(text: &'t str) -> Option<Tape<'t>> {
        // Larger texts are refused long before: a payload is at most 100 KB.
        u32::try_from(text.len()).ok()?;
        let mut reader = Reader {
            bytes: text.as_bytes(),
            at: 0,
            entries: Vec::with_capacity(text.len() / 8 + 1),
        };
        reader.value()?;
        (reader.at == text.len()).then_some(Tape {
            text,
            entries: reader.entries,
        })
    }

    /// The whole payload.
    pub fn root(&self) -> TapeNode<'_> {
        TapeNode {
            text: self.text,
            entries: &self.entries,
            index: 0,
        }
    }
}

struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
    entries: Vec<Entry>,
}

impl Reader<'_> {
    fn push(&mut self, kind: Kind, start: usize) -> usize {
        self.entries.push(Entry {
            kind,
            start: start as u32,
            end: start as u32,
            next: 0,
            len: 0,
        });
        self.entries.len() - 1
    }

    fn finish(&mut self, index: usize, len: u32) {
        let (end, next) = (self.at as u32, self.entries.len() as u32);
        let entry = &mut self.entries[index];
        entry.end = end;
        entry.next = next;
        entry.len = len;
    }

    fn value(&mut self) -> Option<()> {
        let start = self.at;
        match *self.bytes.get(start)? {
            b'{' => self.container(Kind::Object, b'}'),
            b'[' => self.container(Kind::Array, b']'),
            b'"' => self.string(),
            b'n' => self.literal(Kind::Null, b"null"),
            b't' => self.literal(Kind::True, b"true"),
            b'f' => self.literal(Kind::False, b"false"),
            b'-' | b'0'..=b'9' => {
                let index = self.push(Kind::Number, start);
                let length = self.bytes[start..]
                    .iter()
                    .take_while(|b| matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
                    .count();
                self.at += length;
                self.finish(index, 0);
                Some(())
            }
            _ => None,
        }
    }

    fn literal(&mut self, kind: Kind, word: &[u8]) -> Option<()> {
        let index = self.push(kind, self.at);
        self.bytes.get(self.at..)?.starts_with(word).then_some(())?;
        self.at += word.len();
        self.finish(index, 0);
        Some(())
    }

    fn string(&mut self) -> Option<()> {
        let index = self.push(Kind::String, self.at);
        let mut at = self.at + 1;
        loop {
            let found = memchr::memchr2(b'"', b'\\', self.bytes.get(at..)?)?;
            at += found;
            if self.bytes[at] == b'"' {
                break;
            }
            self.entries[index].kind = Kind::EscapedString;
            // The escaped character, whatever it is, is no end of the string.
            at += 2;
        }
        self.at = at + 1;
        self.finish(index, 0);
        Some(())
    }

    fn container(&mut self, kind: Kind, close: u8) -> Option<()> {
        let index = self.push(kind, self.at);
        self.at += 1;
        let mut len = 0;
        if self.bytes.get(self.at) == Some(&close) {
            self.at += 1;
            self.finish(index, 0);
            return Some(());
        }
        loop {
            if kind == Kind::Object {
                self.string()?;
                (self.bytes.get(self.at) == Some(&b':')).then_some(())?;
                self.at += 1;
            }
            self.value()?;
            len += 1;
            match *self.bytes.get(self.at)? {
                b',' => self.at += 1,
                b if b == close => {
                    self.at += 1;
                    self.finish(index, len);
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

/// One value of a tape.
#[derive(Clone, Copy)]
pub struct TapeNode<'a> {
    text: &'a str,
    entries: &'a [Entry],
    index: u32,
}

impl<'a> TapeNode<'a> {
    fn entry(&self) -> Entry {
        self.entries[self.index as usize]
    }

    fn at(&self, index: u32) -> TapeNode<'a> {
        TapeNode { index, ..*self }
    }

    fn source(&self) -> &'a str {
        let e = self.entry();
        &self.text[e.start as usize..e.end as usize]
    }

    /// A string entry's text, decoded.
    fn string(&self) -> Option<Cow<'a, str>> {
        let source = self.source();
        match self.entry().kind {
            Kind::String => Some(Cow::Borrowed(&source[1..source.len() - 1])),
            Kind::EscapedString => serde_json::from_str::<String>(source).ok().map(Cow::Owned),
            _ => None,
        }
    }
}

impl Json for TapeJson {
    type Node<'a> = TapeNode<'a>;
    type PreparedKey = String;
    /// A one-string document: its text and its tape.
    type StringBuffer = (String, Vec<Entry>);

    fn prepare_key(key: &str) -> String {
        key.to_owned()
    }

    fn with_string_node<T>(
        buffer: &mut Self::StringBuffer,
        string: &str,
        f: impl FnOnce(TapeNode<'_>) -> T,
    ) -> T {
        let (text, entries) = buffer;
        text.clear();
        text.push_str(&Value::String(string.to_owned()).to_string());
        entries.clear();
        entries.push(Entry {
            kind: if text.contains('\\') {
                Kind::EscapedString
            } else {
                Kind::String
            },
            start: 0,
            end: text.len() as u32,
            next: 1,
            len: 0,
        });
        f(TapeNode {
            text,
            entries,
            index: 0,
        })
    }
}

impl<'a> Node<'a, TapeJson> for TapeNode<'a> {
    type Object = TapeObject<'a>;
    type Array = TapeArray<'a>;
    type Number = TapeNumber<'a>;

    fn as_object(&self) -> Option<TapeObject<'a>> {
        (self.entry().kind == Kind::Object).then_some(TapeObject(*self))
    }

    fn as_array(&self) -> Option<TapeArray<'a>> {
        (self.entry().kind == Kind::Array).then_some(TapeArray(*self))
    }

    fn as_string(&self) -> Option<Cow<'a, str>> {
        self.string()
    }

    fn as_number(&self) -> Option<TapeNumber<'a>> {
        (self.entry().kind == Kind::Number).then(|| TapeNumber(self.source()))
    }

    fn as_boolean(&self) -> Option<bool> {
        match self.entry().kind {
            Kind::True => Some(true),
            Kind::False => Some(false),
            _ => None,
        }
    }

    fn is_null(&self) -> bool {
        self.entry().kind == Kind::Null
    }

    fn json_type(&self) -> JsonType {
        match self.entry().kind {
            Kind::Null => JsonType::Null,
            Kind::False | Kind::True => JsonType::Boolean,
            Kind::Number => JsonType::Number,
            Kind::String | Kind::EscapedString => JsonType::String,
            Kind::Array => JsonType::Array,
            Kind::Object => JsonType::Object,
        }
    }

    fn to_value(&self) -> Cow<'a, Value> {
        // Cold: errors, annotations, `const`, `enum` and `uniqueItems`. The text was read as
        // JSON, so it parses; `Null` would only stand for a reader that let through what is not.
        Cow::Owned(serde_json::from_str(self.source()).unwrap_or(Value::Null))
    }

    fn identity(&self) -> Option<NodeIdentity> {
        Some(NodeIdentity::tagged(
            self.entries.as_ptr() as usize,
            self.index,
        ))
    }
}

/// An object of a tape.
pub struct TapeObject<'a>(TapeNode<'a>);

/// The members of an object, in the order written.
pub struct Members<'a> {
    node: TapeNode<'a>,
    /// The next member's key.
    at: u32,
    left: u32,
}

impl<'a> Iterator for Members<'a> {
    type Item = (Cow<'a, str>, TapeNode<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let key = self.node.at(self.at);
        let value = self.node.at(self.at + 1);
        self.at = value.entry().next;
        Some((key.string().unwrap_or_default(), value))
    }
}

impl<'a> Object<'a, TapeJson> for TapeObject<'a> {
    type Node = TapeNode<'a>;
    type MemberName = Cow<'a, str>;
    type MembersIter = Members<'a>;

    fn len(&self) -> usize {
        self.0.entry().len as usize
    }

    fn get(&self, key: &String) -> Option<TapeNode<'a>> {
        // The last of repeated keys counts, as serde_json reads them.
        let mut found = None;
        for (name, value) in self.members() {
            if name == key.as_str() {
                found = Some(value);
            }
        }
        found
    }

    fn members(&self) -> Members<'a> {
        Members {
            node: self.0,
            at: self.0.index + 1,
            left: self.0.entry().len,
        }
    }
}

/// An array of a tape.
pub struct TapeArray<'a>(TapeNode<'a>);

/// The elements of an array, in order.
pub struct Elements<'a> {
    node: TapeNode<'a>,
    at: u32,
    left: u32,
}

impl<'a> Iterator for Elements<'a> {
    type Item = TapeNode<'a>;

    fn next(&mut self) -> Option<TapeNode<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let element = self.node.at(self.at);
        self.at = element.entry().next;
        Some(element)
    }
}

impl<'a> Array<'a, TapeJson> for TapeArray<'a> {
    type Node = TapeNode<'a>;
    type ElementsIter = Elements<'a>;

    fn len(&self) -> usize {
        self.0.entry().len as usize
    }

    fn elements(&self) -> Elements<'a> {
        Elements {
            node: self.0,
            at: self.0.index + 1,
            left: self.0.entry().len,
        }
    }
}

/// A number of a tape: its text, exactly as written.
#[derive(Clone, Copy)]
pub struct TapeNumber<'a>(&'a str);

impl JsonNumber for TapeNumber<'_> {
    fn as_u64(&self) -> Option<u64> {
        self.0.parse().ok()
    }

    fn as_i64(&self) -> Option<i64> {
        self.0.parse().ok()
    }

    fn as_f64(&self) -> Option<f64> {
        self.0.parse().ok()
    }

    fn as_str(&self) -> Cow<'_, str> {
        Cow::Borrowed(self.0)
    }

    fn to_number(&self) -> Cow<'_, serde_json::Number> {
        // The text was read as a JSON number; zero would only stand for a reader that let
        // through what is not.
        Cow::Owned(
            self.0
                .parse()
                .unwrap_or_else(|_| serde_json::Number::from(0)),
        )
    }

    fn is_integer(&self) -> bool {
        // Written without a fraction or exponent, it is an integer; otherwise (`1.0`, `1e2`)
        // its value decides.
        !self.0.contains(['.', 'e', 'E'])
            || <serde_json::Number as JsonNumber>::is_integer(&self.to_number())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<Kind> {
        Tape::read(text)
            .unwrap()
            .entries
            .iter()
            .map(|e| e.kind)
            .collect()
    }

    #[test]
    fn compact_json_reads_into_a_tape_in_document_order() {
        assert_eq!(
            kinds(r#"{"a":[1,"x\"y",null],"b":{},"c":true}"#),
            [
                Kind::Object,
                Kind::String,
                Kind::Array,
                Kind::Number,
                Kind::EscapedString,
                Kind::Null,
                Kind::String,
                Kind::Object,
                Kind::String,
                Kind::True
            ]
        );
        let tape = Tape::read(r#"{"a":[1,"x\"y",null],"a":2}"#).unwrap();
        let root = tape.root().as_object().unwrap();
        assert_eq!(root.len(), 2);
        let a = root.get(&"a".to_string()).unwrap();
        assert_eq!(
            a.as_number().unwrap().as_str(),
            "2",
            "the last of repeated keys"
        );
        let (_, first) = root.members().next().unwrap();
        let items: Vec<TapeNode> = first.as_array().unwrap().elements().collect();
        assert_eq!(items.len(), 3);
        assert_eq!(items[1].as_string().as_deref(), Some("x\"y"));
        assert_eq!(
            items[1].to_value(),
            Cow::<Value>::Owned(Value::from("x\"y"))
        );
    }

    /// The tape answers as serde_json's `Value` does, keyword by keyword.
    #[test]
    fn the_tape_validates_as_a_value_does() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "s": { "type": "string", "minLength": 2, "maxLength": 3, "pattern": "^a" },
                "n": { "type": "integer", "minimum": 0, "exclusiveMaximum": 100, "multipleOf": 5 },
                "x": { "type": "number", "maximum": 1.5 },
                "e": { "enum": ["a\"b", 1, null, { "k": [1] }] },
                "c": { "const": { "a": 1.0 } },
                "u": { "type": "array", "uniqueItems": true, "items": { "type": ["string", "number"] } },
                "o": { "type": "object", "required": ["a"], "additionalProperties": false,
                       "properties": { "a": { "type": "boolean" } } },
                "d": { "type": "string", "format": "date-time" },
                "p": { "propertyNames": { "pattern": "^[a-z]+$" } }
            },
            "required": ["s"]
        });
        let build_tape = jsonschema::options_for::<TapeJson>()
            .should_validate_formats(true)
            .build(&schema)
            .unwrap();
        let build_value = jsonschema::options()
            .should_validate_formats(true)
            .build(&schema)
            .unwrap();
        for text in [
            r#"{"s":"ab"}"#,
            r#"{"s":"b"}"#,
            r#"{"s":"a\u00e9"}"#,
            r#"{"s":"abcd"}"#,
            r#"{"s":"ab","n":10}"#,
            r#"{"s":"ab","n":10.0}"#,
            r#"{"s":"ab","n":1e1}"#,
            r#"{"s":"ab","n":12}"#,
            r#"{"s":"ab","n":100}"#,
            r#"{"s":"ab","n":-5}"#,
            r#"{"s":"ab","x":1.5}"#,
            r#"{"s":"ab","x":1.50000000000000000001}"#,
            r#"{"s":"ab","e":"a\"b"}"#,
            r#"{"s":"ab","e":{"k":[1.0]}}"#,
            r#"{"s":"ab","e":2}"#,
            r#"{"s":"ab","c":{"a":1}}"#,
            r#"{"s":"ab","c":{"a":2}}"#,
            r#"{"s":"ab","u":["a",1,"b"]}"#,
            r#"{"s":"ab","u":["a",1,1.0]}"#,
            r#"{"s":"ab","u":["a",true]}"#,
            r#"{"s":"ab","o":{"a":true}}"#,
            r#"{"s":"ab","o":{"a":true,"b":1}}"#,
            r#"{"s":"ab","o":{}}"#,
            r#"{"s":"ab","d":"2026-11-28T10:00:00Z"}"#,
            r#"{"s":"ab","d":"noon"}"#,
            r#"{"s":"ab","p":{"ok":1,"Not":2}}"#,
            r#"{"s":"ab","p":{"ok":1}}"#,
            r#"[1,2]"#,
            r#""just text""#,
        ] {
            let tape = Tape::read(text).unwrap();
            let value: Value = serde_json::from_str(text).unwrap();
            assert_eq!(
                build_tape.is_valid(tape.root()),
                build_value.is_valid(&value),
                "{text}"
            );
            let from_tape: Vec<String> = build_tape
                .iter_errors(tape.root())
                .map(|e| e.instance_path().to_string())
                .collect();
            let from_value: Vec<String> = build_value
                .iter_errors(&value)
                .map(|e| e.instance_path().to_string())
                .collect();
            assert_eq!(from_tape, from_value, "{text}");
        }
    }

    #[test]
    fn what_is_not_compact_json_is_refused() {
        for text in [
            "",
            "{",
            "[1,]",
            "{\"a\" :1}",
            "[1] ",
            "nul",
            "\"abc",
            "{1:2}",
            "[1 2]",
        ] {
            assert!(Tape::read(text).is_none(), "{text:?}");
        }
    }
}
