//! Payloads come back exactly as sent, after the documented normalisation
//! (docs/src/data-api.md): insignificant whitespace removed and string escapes decoded (except the ones JSON
//! requires, written the way serde_json writes them); numbers, key order and duplicate keys
//! exactly as sent.
//!
//! A seeded generator (`PAYLOAD_FIDELITY_SEED` picks another seed) writes random JSON
//! documents: integers past 2^64, long decimals, exponents in both cases and with signs,
//! negative zero, `\uXXXX` escapes in both cases (surrogate pairs included), escaped quotes,
//! backslashes and control characters, and random whitespace between tokens. The text each
//! must be stored as comes from an independent model here ([`Json::stored`]). The real binary
//! stores them (POST, or PUT over a placeholder), and the payload TEXT (taken with `RawValue`:
//! parsing into `Value` would round numbers through f64) must equal the model's in GET one,
//! list, search (for a 25-digit integer of the payload, so search matches the stored digits),
//! poll, the caller webhook's body, and GET one, list and search of a server restored from a
//! backup.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::backup::{Restored, assert_success, backup, restore};
use common::receiver::Receiver;
use common::*;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The generator's seed, unless `PAYLOAD_FIDELITY_SEED` sets another.
const SEED: u64 = 0x5eed_f1de;
const DOCUMENTS: usize = 40;
const CONFIG: &str = "[webhooks]\nallow_private_targets = true\n[poll]\nhold_back = \"0s\"\n";

// ---------------------------------------------------------------------------
// Generated documents and the model of their stored text
// ---------------------------------------------------------------------------

/// How one character of a generated string is written in the request.
#[derive(Clone, Copy)]
enum Spelling {
    Raw,
    /// `\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`.
    Short(char),
    /// `\uXXXX` (a surrogate pair past the BMP), hex digits in upper or lower case.
    Unicode {
        upper: bool,
    },
}

enum Json {
    /// `null`, `true`, `false` or a number, as sent.
    Token(String),
    Text(Vec<(char, Spelling)>),
    Array(Vec<Json>),
    /// Members in order; a key may repeat.
    Object(Vec<(Json, Json)>),
}

impl Json {
    /// The request text, with random insignificant whitespace around every token.
    fn sent(&self, rng: &mut StdRng, out: &mut String) {
        match self {
            Json::Token(text) => out.push_str(text),
            Json::Text(chars) => {
                out.push('"');
                for &(c, spelling) in chars {
                    push_spelled(c, spelling, out);
                }
                out.push('"');
            }
            Json::Array(items) => {
                out.push('[');
                for (n, item) in items.iter().enumerate() {
                    if n > 0 {
                        push_whitespace(rng, out);
                        out.push(',');
                    }
                    push_whitespace(rng, out);
                    item.sent(rng, out);
                    push_whitespace(rng, out);
                }
                out.push(']');
            }
            Json::Object(members) => {
                out.push('{');
                for (n, (key, value)) in members.iter().enumerate() {
                    if n > 0 {
                        out.push(',');
                    }
                    push_whitespace(rng, out);
                    key.sent(rng, out);
                    push_whitespace(rng, out);
                    out.push(':');
                    push_whitespace(rng, out);
                    value.sent(rng, out);
                    push_whitespace(rng, out);
                }
                out.push('}');
            }
        }
    }

    /// The text the payload must be stored as: compact, numbers and members as sent, every
    /// string written with the escapes JSON requires and no others.
    fn stored(&self, out: &mut String) {
        match self {
            Json::Token(text) => out.push_str(text),
            Json::Text(chars) => {
                out.push('"');
                for &(c, _) in chars {
                    push_required_escape(c, out);
                }
                out.push('"');
            }
            Json::Array(items) => {
                out.push('[');
                for (n, item) in items.iter().enumerate() {
                    if n > 0 {
                        out.push(',');
                    }
                    item.stored(out);
                }
                out.push(']');
            }
            Json::Object(members) => {
                out.push('{');
                for (n, (key, value)) in members.iter().enumerate() {
                    if n > 0 {
                        out.push(',');
                    }
                    key.stored(out);
                    out.push(':');
                    value.stored(out);
                }
                out.push('}');
            }
        }
    }
}

fn push_spelled(c: char, spelling: Spelling, out: &mut String) {
    match spelling {
        Spelling::Raw => out.push(c),
        Spelling::Short(letter) => {
            out.push('\\');
            out.push(letter);
        }
        Spelling::Unicode { upper } => {
            for unit in c.encode_utf16(&mut [0; 2]) {
                if upper {
                    out.push_str(&format!("\\u{unit:04X}"));
                } else {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
}

/// The one way the model writes a character: `"`, `\` and control characters escaped (the
/// short form where JSON has one, else `\u00xx`), everything else as the character itself.
fn push_required_escape(c: char, out: &mut String) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if c < ' ' => out.push_str(&format!("\\u{:04x}", c as u32)),
        c => out.push(c),
    }
}

fn push_whitespace(rng: &mut StdRng, out: &mut String) {
    for _ in 0..rng.random_range(0..3) {
        out.push(*[' ', '\t', '\n', '\r'].choose(rng).expect("not empty"));
    }
}

/// The numbers of the review that found the bug, among the random ones.
const REVIEW_NUMBERS: [&str; 8] = [
    "123456789012345678901234567890",
    "18446744073709551616",
    "1E2",
    "-0",
    "1.000",
    "0.1e-7",
    "-0.0",
    "1e400",
];

fn digits(rng: &mut StdRng, out: &mut String, n: usize) {
    for _ in 0..n {
        out.push(char::from(b'0' + rng.random_range(0..10)));
    }
}

/// A number token: optional minus, an integer part of up to 41 digits (no leading zero), an
/// optional fraction of up to 30 digits (trailing zeros too), an optional exponent.
fn number(rng: &mut StdRng) -> String {
    if rng.random_bool(0.15) {
        return REVIEW_NUMBERS.choose(rng).expect("not empty").to_string();
    }
    let mut text = String::new();
    if rng.random_bool(0.3) {
        text.push('-');
    }
    if rng.random_bool(0.2) {
        text.push('0');
    } else {
        text.push(char::from(b'1' + rng.random_range(0..9)));
        let more = rng.random_range(0..=40);
        digits(rng, &mut text, more);
    }
    if rng.random_bool(0.5) {
        text.push('.');
        let n = rng.random_range(1..=30);
        digits(rng, &mut text, n);
    }
    if rng.random_bool(0.4) {
        text.push(*['e', 'E'].choose(rng).expect("not empty"));
        if let Some(sign) = ["", "+", "-"].choose(rng) {
            text.push_str(sign);
        }
        let n = rng.random_range(1..=3);
        digits(rng, &mut text, n);
    }
    text
}

/// Characters worth writing in every spelling: plain ASCII, the two JSON requires escaped,
/// control characters, `/`, DEL, and non-ASCII in and past the BMP.
const CHARACTERS: [char; 22] = [
    'a', 'Z', '7', ' ', '/', '"', '\\', '\u{0}', '\u{8}', '\t', '\n', '\u{c}', '\r', '\u{1f}',
    '\u{7f}', 'é', 'Ж', '中', '\u{2028}', '\u{feff}', '😀', '𝄞',
];

fn short_escape(c: char) -> Option<char> {
    match c {
        '"' => Some('"'),
        '\\' => Some('\\'),
        '/' => Some('/'),
        '\u{8}' => Some('b'),
        '\u{c}' => Some('f'),
        '\n' => Some('n'),
        '\r' => Some('r'),
        '\t' => Some('t'),
        _ => None,
    }
}

fn spelling(rng: &mut StdRng, c: char) -> Spelling {
    let must_escape = c == '"' || c == '\\' || c < ' ';
    let short = short_escape(c).filter(|_| rng.random_bool(0.5));
    match short {
        Some(letter) => Spelling::Short(letter),
        None if must_escape || rng.random_bool(0.3) => Spelling::Unicode {
            upper: rng.random_bool(0.5),
        },
        None => Spelling::Raw,
    }
}

fn text(rng: &mut StdRng) -> Json {
    let len = rng.random_range(0..12);
    let chars = (0..len)
        .map(|_| {
            let c = *CHARACTERS.choose(rng).expect("not empty");
            (c, spelling(rng, c))
        })
        .collect();
    Json::Text(chars)
}

fn value(rng: &mut StdRng, depth: usize) -> Json {
    let kinds = if depth >= 3 { 3 } else { 5 };
    match rng.random_range(0..kinds) {
        0 => Json::Token(
            ["null", "true", "false"]
                .choose(rng)
                .expect("not empty")
                .to_string(),
        ),
        1 => Json::Token(number(rng)),
        2 => text(rng),
        3 => Json::Array(
            (0..rng.random_range(0..5))
                .map(|_| value(rng, depth + 1))
                .collect(),
        ),
        _ => Json::Object(members(rng, depth + 1)),
    }
}

/// Up to five members, sometimes repeating an earlier key.
fn members(rng: &mut StdRng, depth: usize) -> Vec<(Json, Json)> {
    let mut members: Vec<(Json, Json)> = Vec::new();
    for _ in 0..rng.random_range(0..6) {
        let key = match members.choose(rng) {
            Some((Json::Text(earlier), _)) if rng.random_bool(0.2) => Json::Text(earlier.clone()),
            _ => text(rng),
        };
        members.push((key, value(rng, depth)));
    }
    members
}

/// One test document: an object with random members and, somewhere among them, `"ref"` set
/// to the 25-digit integer `marker`.
struct Document {
    marker: String,
    sent: String,
    stored: String,
}

fn document(rng: &mut StdRng, n: usize) -> Document {
    let mut marker = format!("9{n:03}");
    digits(rng, &mut marker, 21);
    let mut members = members(rng, 1);
    let at = rng.random_range(0..=members.len());
    let key = Json::Text("ref".chars().map(|c| (c, Spelling::Raw)).collect());
    members.insert(at, (key, Json::Token(marker.clone())));
    let tree = Json::Object(members);
    let mut sent = String::new();
    push_whitespace(rng, &mut sent);
    tree.sent(rng, &mut sent);
    push_whitespace(rng, &mut sent);
    let mut stored = String::new();
    tree.stored(&mut stored);
    Document {
        marker,
        sent,
        stored,
    }
}

// ---------------------------------------------------------------------------
// Payload text out of responses and webhook bodies
// ---------------------------------------------------------------------------

#[derive(Deserialize)]
struct Record<'a> {
    id: String,
    #[serde(borrow)]
    payload: &'a RawValue,
}

/// A list, search or poll page.
#[derive(Deserialize)]
struct Page<'a> {
    #[serde(borrow)]
    data: Vec<Record<'a>>,
    pagination: Option<Pagination>,
    /// Poll's continuation while more records are there.
    next_cursor: Option<String>,
}

#[derive(Deserialize)]
struct Pagination {
    next_cursor: Option<String>,
}

#[derive(Deserialize)]
struct WebhookBody<'a> {
    #[serde(borrow)]
    data: Record<'a>,
}

fn page(r: &Resp) -> Page<'_> {
    assert_status(r, 200);
    serde_json::from_slice(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.describe()))
}

/// Record id → payload text of every record on the pages `get(first)` starts, following
/// `next_cursor` (list's in `pagination`, poll's at the top) with `continue_at`.
fn payloads_of_pages(
    get: impl Fn(&str) -> Resp,
    first: &str,
    continue_at: impl Fn(&str) -> String,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut query = first.to_string();
    for _ in 0..100 {
        let r = get(&query);
        let page = page(&r);
        for record in &page.data {
            let repeated = out.insert(record.id.clone(), record.payload.get().to_string());
            assert!(repeated.is_none(), "{} shown twice", record.id);
        }
        let next = page
            .next_cursor
            .or(page.pagination.and_then(|p| p.next_cursor));
        match next {
            Some(cursor) => query = continue_at(&url_encode(&cursor)),
            None => return out,
        }
    }
    panic!("pagination does not end");
}

fn get_one_payload(get: impl Fn(&str) -> Resp, slug: &str, id: &str) -> String {
    let r = get(&format!("/api/v1/data/{slug}/{id}"));
    assert_status(&r, 200);
    let record: Record = serde_json::from_slice(&r.body).expect("a record");
    assert_eq!(record.id, id);
    record.payload.get().to_string()
}

/// The payload texts `get` serves, as GET one, list, and a search for each document's marker
/// (which must find that record alone), are the expected ones.
fn assert_served(
    get: impl Fn(&str) -> Resp + Copy,
    slug: &str,
    expected: &BTreeMap<String, &Document>,
    server: &str,
) {
    let one = expected
        .keys()
        .map(|id| (id.clone(), get_one_payload(get, slug, id)))
        .collect();
    assert_payloads(&one, expected, &format!("{server}: GET one"));
    let listed = payloads_of_pages(
        |query| get(&format!("/api/v1/data/{slug}?{query}")),
        "limit=30",
        |cursor| format!("limit=30&cursor={cursor}"),
    );
    assert_payloads(&listed, expected, &format!("{server}: list"));
    for (id, doc) in expected {
        let found = payloads_of_pages(
            |query| get(&format!("/api/v1/data/{slug}/search?{query}")),
            &format!("q={}", doc.marker),
            |cursor| format!("q={}&cursor={cursor}", doc.marker),
        );
        let want = BTreeMap::from([(id.clone(), *doc)]);
        let what = format!("{server}: search for {}", doc.marker);
        assert_payloads(&found, &want, &what);
    }
}

#[track_caller]
fn assert_payloads(
    seen: &BTreeMap<String, String>,
    expected: &BTreeMap<String, &Document>,
    what: &str,
) {
    assert_eq!(
        seen.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "{what}: the records"
    );
    for (id, doc) in expected {
        assert_eq!(seen[id], doc.stored, "{what}: {id}, sent as {:?}", doc.sent);
    }
}

// ---------------------------------------------------------------------------
// The test
// ---------------------------------------------------------------------------

#[test]
fn payload_text_is_the_sent_text_less_the_documented_normalisation_everywhere() {
    let seed = std::env::var("PAYLOAD_FIDELITY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    eprintln!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut server = TestServer::start_with_config(CONFIG);
    let ep = server.create_endpoint("fidelity", &[]);
    let (slug, key) = (ep.slug.as_str(), ep.sandbox_key.as_str());
    let receiver = Receiver::start();
    let callback = receiver.url("/hook");
    let auth = format!("Bearer {key}");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("X-Webhook-Callback", callback.as_str()),
    ];
    let collection = format!("/api/v1/data/{slug}");

    // Id → document. Every third document replaces a placeholder (PUT), the others are
    // created with it (POST); only that write asks for the caller webhook.
    let mut expected: BTreeMap<String, &Document> = BTreeMap::new();
    let documents: Vec<Document> = (0..DOCUMENTS).map(|n| document(&mut rng, n)).collect();
    for (n, doc) in documents.iter().enumerate() {
        let id = if n % 3 == 2 {
            let placeholder = server.create_record(slug, key, &serde_json::json!({}));
            let id = placeholder["id"].as_str().expect("id").to_string();
            let r = server.request(
                "PUT",
                &format!("{collection}/{id}"),
                &headers,
                Some(doc.sent.as_bytes()),
            );
            assert_status(&r, 202);
            id
        } else {
            let r = server.request("POST", &collection, &headers, Some(doc.sent.as_bytes()));
            assert_status(&r, 202);
            r.json()["id"].as_str().expect("id").to_string()
        };
        expected.insert(id, doc);
    }

    let get = |path: &str| server.data("GET", path, key, None);
    assert_served(get, slug, &expected, "live");
    let polled = payloads_of_pages(
        |query| get(&format!("{collection}/poll?{query}")),
        "since=2000-01-01&limit=30",
        |cursor| format!("cursor={cursor}&limit=30"),
    );
    assert_payloads(&polled, &expected, "poll");
    let webhooks: BTreeMap<String, String> = receiver
        .wait_for(DOCUMENTS, Duration::from_secs(60))
        .iter()
        .map(|request| {
            let body: WebhookBody = serde_json::from_slice(&request.body)
                .unwrap_or_else(|e| panic!("{e}: {}", request.body_text()));
            (body.data.id, body.data.payload.get().to_string())
        })
        .collect();
    assert_payloads(&webhooks, &expected, "caller webhook");

    if redb_only("backup archives hold redb's file") {
        return;
    }
    let archives = tempfile::tempdir().expect("tempdir");
    let archive = archives.path().join("backup.tar");
    assert_success(&backup(&server, &archive));
    server.sigterm_and_wait();
    let data = archives.path().join("restored");
    assert_success(&restore(&archive, &data, false));
    let restored = Restored::start(&data);
    assert_served(|path| restored.get(path, key), slug, &expected, "restored");
    restored.stop();
}
