//! Search: `GET /api/v1/data/{slug}/search`.
//!
//! Black-box checks against the real binary: exact results (a brute-force
//! model of the matching rule over the records this test wrote), paging with
//! cursors, writes interleaved with searches, date windows, parameter
//! validation, authentication, environments, and an index folder that is
//! deleted or corrupted while the server is stopped.
//!
//! The matching rule under test: a record matches iff
//! `lower(payload_text)` contains `lower(q)`, where `payload_text` is
//! `serde_json::to_string(&record["payload"])` and
//! `lower(s) = s.chars().flat_map(char::to_lowercase).collect()`.
//!
//! Randomised tests use one fixed seed by default; set `SEARCH_TEST_SEED` to
//! try another. The seed is printed and named in every failure message.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};

const DEFAULT_SEED: u64 = 0x5EA2_C4ED_2025;

fn seed() -> u64 {
    let seed = match std::env::var("SEARCH_TEST_SEED") {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("SEARCH_TEST_SEED is not a u64: {s:?}")),
        Err(_) => DEFAULT_SEED,
    };
    eprintln!("search test seed: {seed} (rerun with SEARCH_TEST_SEED={seed})");
    seed
}

// ---------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------

/// The contract's per-character lower-casing.
fn lower(s: &str) -> String {
    s.chars().flat_map(char::to_lowercase).collect()
}

fn payload_text(payload: &Value) -> String {
    serde_json::to_string(payload).unwrap()
}

/// One record as the test believes the server holds it.
#[derive(Debug, Clone)]
struct Rec {
    created: (i64, u32),
    payload: Value,
    /// `lower(payload_text(payload))`.
    lowered: String,
}

impl Rec {
    fn new(created: (i64, u32), payload: Value) -> Rec {
        let lowered = lower(&payload_text(&payload));
        Rec {
            created,
            payload,
            lowered,
        }
    }
}

/// id -> record. Ids sort like (created_at, id), so iterating in reverse
/// gives the search order (newest first).
type Model = BTreeMap<String, Rec>;

/// An inclusive created_at window, in (seconds, nanoseconds) since the epoch.
#[derive(Debug, Clone, Default)]
struct Window {
    start: Option<(i64, u32)>,
    end: Option<(i64, u32)>,
    /// The query parameters that express it (empty: server defaults).
    params: Vec<(&'static str, String)>,
}

fn expected_ids(model: &Model, q: &str, w: &Window) -> Vec<String> {
    let lq = lower(q);
    model
        .iter()
        .rev()
        .filter(|(_, r)| w.start.is_none_or(|s| r.created >= s))
        .filter(|(_, r)| w.end.is_none_or(|e| r.created <= e))
        .filter(|(_, r)| r.lowered.contains(&lq))
        .map(|(id, _)| id.clone())
        .collect()
}

/// POSTs `payload`; returns (id, record).
fn create(s: &TestServer, ep: &Endpoint, key: &str, payload: &Value) -> (String, Rec) {
    let v = s.create_record(&ep.slug, key, payload);
    let id = v["id"]
        .as_str()
        .unwrap_or_else(|| panic!("POST response lacks id: {v}"))
        .to_string();
    (id, Rec::new(ts(&v["created_at"]), payload.clone()))
}

/// Runs `f` over `items` on `threads` threads (item `i` on thread
/// `i % threads`, so the items are worked on roughly in order); returns the
/// results in item order.
fn parallel<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(usize, &T) -> R + Sync,
) -> Vec<R> {
    let f = &f;
    let mut results: Vec<(usize, R)> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                sc.spawn(move || {
                    (t..items.len())
                        .step_by(threads)
                        .map(|i| (i, f(i, &items[i])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("worker thread panicked"))
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

/// POSTs every payload from `threads` threads at once (group commit keeps
/// this fast); returns (id, record) in payload order.
fn create_all(
    s: &TestServer,
    ep: &Endpoint,
    payloads: &[Value],
    threads: usize,
) -> Vec<(String, Rec)> {
    parallel(payloads, threads, |_, p| create(s, ep, &ep.sandbox_key, p))
}

/// [`create_all`] with 3 threads, as a model.
fn create_many(s: &TestServer, ep: &Endpoint, payloads: &[Value]) -> Model {
    let model: Model = create_all(s, ep, payloads, 3).into_iter().collect();
    assert_eq!(model.len(), payloads.len(), "duplicate record ids");
    model
}

// ---------------------------------------------------------------------------
// Calling search
// ---------------------------------------------------------------------------

fn search_path(slug: &str, params: &[(&str, &str)]) -> String {
    let q: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{k}={}", url_encode(v)))
        .collect();
    if q.is_empty() {
        format!("/api/v1/data/{slug}/search")
    } else {
        format!("/api/v1/data/{slug}/search?{}", q.join("&"))
    }
}

fn search(s: &TestServer, slug: &str, key: &str, params: &[(&str, &str)]) -> Resp {
    s.data("GET", &search_path(slug, params), key, None)
}

/// The next_cursor of a 200 search or list body, if any.
fn next_cursor(v: &Value) -> Option<String> {
    match v.pointer("/pagination/next_cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => Some(c.clone()),
        Some(other) => panic!("next_cursor is not a string: {other} in {v}"),
    }
}

fn id_of(r: &Value) -> String {
    r["id"]
        .as_str()
        .unwrap_or_else(|| panic!("record without string id: {r}"))
        .to_string()
}

/// Checks one page's shape: `data` array of at most `limit` well-formed
/// records in strictly decreasing id order. Returns the records.
#[track_caller]
fn check_page(v: &Value, limit: usize, ctx: &str) -> Vec<Value> {
    let data = v["data"]
        .as_array()
        .unwrap_or_else(|| panic!("{ctx}: search response lacks a data array: {v}"))
        .clone();
    assert!(
        v["pagination"].is_object(),
        "{ctx}: search response lacks a pagination object: {v}"
    );
    assert!(
        data.len() <= limit,
        "{ctx}: page holds {} records, more than limit {limit}",
        data.len()
    );
    for r in &data {
        let id = id_of(r);
        assert!(is_record_id(&id), "{ctx}: malformed id {id:?}");
        assert!(
            r.get("payload").is_some(),
            "{ctx}: record lacks payload: {r}"
        );
        ts(&r["created_at"]);
        ts(&r["updated_at"]);
    }
    for w in data.windows(2) {
        assert!(
            id_of(&w[0]) > id_of(&w[1]),
            "{ctx}: page not newest first: {} then {}",
            w[0]["id"],
            w[1]["id"]
        );
    }
    data
}

/// Follows next_cursor until there is none. Returns every record and the
/// number of pages.
#[track_caller]
fn search_all(
    s: &TestServer,
    slug: &str,
    key: &str,
    q: &str,
    limit: usize,
    extra: &[(&str, String)],
    ctx: &str,
) -> (Vec<Value>, usize) {
    let limit_s = limit.to_string();
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    let mut seen_cursors = HashSet::new();
    let mut pages = 0;
    loop {
        let mut params: Vec<(&str, &str)> = vec![("q", q), ("limit", &limit_s)];
        for (k, v) in extra {
            params.push((k, v.as_str()));
        }
        if let Some(c) = &cursor {
            params.push(("cursor", c.as_str()));
        }
        let r = search(s, slug, key, &params);
        assert_eq!(
            r.status,
            200,
            "{ctx}: search page {pages} (q={q:?}, limit {limit}): {}",
            r.describe()
        );
        let v = r.json();
        out.extend(check_page(&v, limit, ctx));
        pages += 1;
        match next_cursor(&v) {
            Some(c) => {
                assert!(
                    seen_cursors.insert(c.clone()),
                    "{ctx}: q={q:?}: the server returned the same cursor twice: {c}"
                );
                cursor = Some(c);
            }
            None => break,
        }
        assert!(
            pages < 5000,
            "{ctx}: q={q:?}: pagination does not terminate"
        );
    }
    (out, pages)
}

/// Searches (following cursors) and asserts the exact expected ids in order,
/// no duplicates, and that every returned record carries the model's payload
/// and created_at.
#[allow(clippy::too_many_arguments)]
#[track_caller]
fn assert_search_exact(
    s: &TestServer,
    ep_slug: &str,
    key: &str,
    model: &Model,
    q: &str,
    limit: usize,
    w: &Window,
    ctx: &str,
) -> usize {
    let expected = expected_ids(model, q, w);
    let (records, pages) = search_all(s, ep_slug, key, q, limit, &w.params, ctx);
    let got: Vec<String> = records.iter().map(id_of).collect();
    let unique: HashSet<&String> = got.iter().collect();
    assert_eq!(
        unique.len(),
        got.len(),
        "{ctx}: q={q:?} limit {limit} window {:?}: duplicates in {got:?}",
        w.params
    );
    if got != expected {
        let got_set: HashSet<&String> = got.iter().collect();
        let exp_set: HashSet<&String> = expected.iter().collect();
        let missing: Vec<_> = expected.iter().filter(|i| !got_set.contains(i)).collect();
        let extra: Vec<_> = got.iter().filter(|i| !exp_set.contains(i)).collect();
        let describe = |id: &String| match model.get(id) {
            Some(r) => format!("{id} {}", payload_text(&r.payload)),
            None => format!("{id} (not in the model: deleted or never written)"),
        };
        panic!(
            "{ctx}: q={q:?} (lower {:?}) limit {limit} window {:?}, {pages} pages\n\
             expected {} ids, got {}\n\
             missing (should match): {:#?}\n\
             extra (should not match): {:#?}\n\
             same set, wrong order: {}",
            lower(q),
            w.params,
            expected.len(),
            got.len(),
            missing
                .iter()
                .take(5)
                .map(|i| describe(i))
                .collect::<Vec<_>>(),
            extra
                .iter()
                .take(5)
                .map(|i| describe(i))
                .collect::<Vec<_>>(),
            missing.is_empty() && extra.is_empty(),
        );
    }
    for r in &records {
        let id = id_of(r);
        let m = &model[&id];
        assert_eq!(
            r["payload"], m.payload,
            "{ctx}: q={q:?}: record {id} returned with a stale or wrong payload"
        );
        assert_eq!(
            ts(&r["created_at"]),
            m.created,
            "{ctx}: q={q:?}: record {id} has the wrong created_at"
        );
    }
    pages
}

/// Searches expecting the ids of `model` that match (default window).
#[track_caller]
fn assert_default_search(s: &TestServer, slug: &str, key: &str, model: &Model, q: &str, ctx: &str) {
    assert_search_exact(s, slug, key, model, q, 30, &Window::default(), ctx);
}

/// Whether the error message names `param` as a word.
fn names_param(resp: &Resp, param: &str) -> bool {
    error_message(resp)
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|w| w == param)
}

#[track_caller]
fn assert_invalid_parameter(resp: &Resp, param: &str, what: &str) {
    assert_eq!(resp.status, 400, "{what}: {}", resp.describe());
    assert_error(resp, 400, "invalid_parameter");
    assert!(
        names_param(resp, param),
        "{what}: the message must name `{param}`: {}",
        resp.text()
    );
}

// ---------------------------------------------------------------------------
// Time helpers
// ---------------------------------------------------------------------------

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// RFC 3339 for `t` shown at UTC offset `offset_min` minutes (`Z` for 0),
/// with six fractional digits.
fn fmt_ts(t: (i64, u32), offset_min: i32) -> String {
    let local = t.0 + i64::from(offset_min) * 60;
    let (y, mo, d) = civil_from_days(local.div_euclid(86_400));
    let sod = local.rem_euclid(86_400);
    let off = if offset_min == 0 {
        "Z".to_string()
    } else {
        let sign = if offset_min < 0 { '-' } else { '+' };
        let a = offset_min.unsigned_abs();
        format!("{sign}{:02}:{:02}", a / 60, a % 60)
    };
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{:06}{off}",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60,
        t.1 / 1000
    )
}

/// `YYYY-MM-DD` of `t` in UTC, and that day's UTC midnight.
fn utc_date(t: (i64, u32)) -> (String, (i64, u32)) {
    let days = t.0.div_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    (format!("{y:04}-{m:02}-{d:02}"), (days * 86_400, 0))
}

/// One microsecond later / earlier.
fn plus_micro(t: (i64, u32)) -> (i64, u32) {
    if t.1 + 1000 >= 1_000_000_000 {
        (t.0 + 1, t.1 + 1000 - 1_000_000_000)
    } else {
        (t.0, t.1 + 1000)
    }
}

fn minus_micro(t: (i64, u32)) -> (i64, u32) {
    if t.1 < 1000 {
        (t.0 - 1, t.1 + 1_000_000_000 - 1000)
    } else {
        (t.0, t.1 - 1000)
    }
}

fn window(start: Option<((i64, u32), String)>, end: Option<((i64, u32), String)>) -> Window {
    let mut w = Window::default();
    if let Some((t, text)) = start {
        w.start = Some(t);
        w.params.push(("start", text));
    }
    if let Some((t, text)) = end {
        w.end = Some(t);
        w.params.push(("end", text));
    }
    w
}

// ---------------------------------------------------------------------------
// Random payloads and queries
// ---------------------------------------------------------------------------

/// Words for keys and string values: ASCII, numbers as text, punctuation,
/// JSON-escaped characters, and Unicode whose case mapping is interesting
/// (ß, ẞ, final sigma, İ, the Kelvin sign, ligatures, title case).
const WORDS: &[&str] = &[
    "alpha",
    "Beta",
    "GAMMA",
    "delta",
    "city",
    "City",
    "CITY",
    "zebra",
    "Zebra",
    "order",
    "id",
    "name",
    "total",
    "132",
    "41329",
    "-7",
    "3.25",
    "ärger",
    "ÄRGER",
    "Öl",
    "über",
    "straße",
    "STRASSE",
    "GROẞ",
    "café",
    "CAFÉ",
    "naïve",
    "λόγος",
    "ΛΌΓΟΣ",
    "Σοφία",
    "αβγ",
    "東京",
    "日本語",
    "数据",
    "🚀",
    "🎉ok",
    "👍🏽",
    "a-b_c",
    "x/y",
    "50%",
    "a&b",
    "q=1",
    "#tag",
    "+plus",
    "semi;colon",
    "comma,sep",
    "quo\"te",
    "back\\slash",
    "tab\tx",
    "new\nline",
    "İstanbul",
    "\u{212A}elvin",
    "ǅemal",
    "ﬁle",
    "ÅNGSTRÖM",
    "é",
    "ss",
    "",
];

fn rand_word(rng: &mut StdRng) -> String {
    (*WORDS.choose(rng).unwrap()).to_string()
}

fn rand_string(rng: &mut StdRng) -> String {
    let n = rng.random_range(1..=3);
    let sep = *[" ", "", "-", " / "].choose(rng).unwrap();
    (0..n).map(|_| rand_word(rng)).collect::<Vec<_>>().join(sep)
}

fn rand_number(rng: &mut StdRng) -> Value {
    match rng.random_range(0..6) {
        0 => json!(rng.random_range(-1000..1000)),
        1 => json!(rng.random_range(0..100_000)),
        2 => json!(*[41329, 132, -132, 0, 320, 1_000_000].choose(rng).unwrap()),
        3 => json!(f64::from(rng.random_range(-100_000..100_000)) / 100.0),
        4 => json!(
            *[0.5, -0.25, 3.25, 1e21, 1.5e-7, -132.32]
                .choose(rng)
                .unwrap()
        ),
        _ => json!(rng.random_range(-50..50) as f64 + 0.125),
    }
}

fn rand_value(rng: &mut StdRng, depth: u32) -> Value {
    let leaf = depth >= 3 || rng.random_bool(0.55);
    if leaf {
        return match rng.random_range(0..10) {
            0..=4 => Value::String(rand_string(rng)),
            5..=7 => rand_number(rng),
            8 => Value::Bool(rng.random_bool(0.5)),
            _ => Value::Null,
        };
    }
    if rng.random_bool(0.5) {
        let n = rng.random_range(0..=4);
        Value::Array((0..n).map(|_| rand_value(rng, depth + 1)).collect())
    } else {
        let keys = rng.random_range(0..=4);
        Value::Object(rand_object(rng, depth + 1, keys))
    }
}

fn rand_object(rng: &mut StdRng, depth: u32, keys: usize) -> Map<String, Value> {
    let mut m = Map::new();
    for _ in 0..keys {
        let k = if rng.random_bool(0.7) {
            rand_word(rng)
        } else {
            rand_string(rng)
        };
        m.insert(k, rand_value(rng, depth));
    }
    m
}

fn rand_payload(rng: &mut StdRng) -> Value {
    match rng.random_range(0..20) {
        // A few non-object payloads.
        0 => json!([rand_value(rng, 1), rand_value(rng, 1)]),
        1 => Value::String(rand_string(rng)),
        2 => rand_number(rng),
        // Long payloads, so 200-character queries have something to cut from.
        3..=5 => {
            let mut m = rand_object(rng, 1, 2);
            let n = rng.random_range(20..45);
            m.insert(
                "long".to_string(),
                Value::Array((0..n).map(|_| Value::String(rand_string(rng))).collect()),
            );
            Value::Object(m)
        }
        _ => {
            let n = rng.random_range(1..=5);
            Value::Object(rand_object(rng, 0, n))
        }
    }
}

/// A random substring of `text` of `len` characters (None if too short).
fn substring(rng: &mut StdRng, text: &str, len: usize) -> Option<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() < len {
        return None;
    }
    let at = rng.random_range(0..=chars.len() - len);
    Some(chars[at..at + len].iter().collect())
}

/// Upper-cases some characters. With `keep_len`, only where that yields one
/// character (so the length stays put).
fn random_case(rng: &mut StdRng, s: &str, keep_len: bool) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if rng.random_bool(0.35) {
            let up: Vec<char> = c.to_uppercase().collect();
            if !keep_len || up.len() == 1 {
                out.extend(up);
                continue;
            }
        }
        out.push(c);
    }
    out
}

fn rand_query(rng: &mut StdRng, texts: &[String]) -> String {
    loop {
        let text = texts.choose(rng).unwrap();
        let q = match rng.random_range(0..20) {
            // Substrings, random case.
            0..=9 => {
                let len = rng.random_range(3..=25);
                substring(rng, text, len).map(|q| random_case(rng, &q, false))
            }
            // Exactly 3 characters.
            10..=11 => substring(rng, text, 3).map(|q| random_case(rng, &q, true)),
            // Exactly 200 characters.
            12..=13 => {
                let long: Vec<&String> =
                    texts.iter().filter(|t| t.chars().count() >= 200).collect();
                let t = long.choose(rng).expect("no payload of 200+ characters");
                substring(rng, t, 200).map(|q| random_case(rng, &q, true))
            }
            // Matches nothing (most likely; the model decides).
            14..=15 => Some(format!(
                "{}~{}~{}",
                rand_word(rng),
                rng.random_range(0..1_000_000),
                rand_word(rng)
            )),
            // A vocabulary word in another case.
            16..=17 => {
                let word = rand_word(rng);
                Some(random_case(rng, &word, false))
            }
            // JSON punctuation and literals.
            _ => Some(
                (*[
                    "\":[", "},{", "\":-", "null", "TRUE", "false}", "\":\"", "],\"", "\\\"",
                    "\\n", "\":{\"", ".25", "e21", "1.5e-7", "[[]]",
                ]
                .choose(rng)
                .unwrap())
                .to_string(),
            ),
        };
        if let Some(q) = q {
            let n = q.chars().count();
            if (3..=200).contains(&n) {
                return q;
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 1. Property test: random payloads, random queries, exact results
// ---------------------------------------------------------------------------

#[test]
fn random_queries_return_exactly_the_brute_force_matches_in_order() {
    random_queries_are_exact(TestServer::start(), 0);
}

/// The same with stop trigrams from the 50th record on: the JSON keys and the frequent
/// words of the generator go out of the index while the records are written, so records
/// indexed before and after, and queries made only of stop trigrams, are all checked.
#[test]
fn random_queries_stay_exact_with_stop_trigrams() {
    let s = TestServer::start_with_config("[search]\nstop_share = 0.1\nstop_min_records = 50\n");
    random_queries_are_exact(s, 0x5);
}

fn random_queries_are_exact(s: TestServer, seed_salt: u64) {
    let seed = seed();
    let ctx = format!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed ^ seed_salt);
    let ep = s.create_endpoint("props", &[]);

    let payloads: Vec<Value> = (0..300).map(|_| rand_payload(&mut rng)).collect();
    let started = Instant::now();
    // One writer, so creation order (and so which records a window picked
    // by position holds) depends on the seed only.
    let created = create_all(&s, &ep, &payloads, 1);
    let model: Model = created.iter().cloned().collect();
    assert_eq!(model.len(), payloads.len(), "duplicate record ids");
    eprintln!("{ctx}: 300 records written in {:?}", started.elapsed());
    // The expected order relies on ids sorting like created_at.
    let by_id: Vec<(i64, u32)> = model.values().map(|r| r.created).collect();
    assert!(
        by_id.windows(2).all(|w| w[0] <= w[1]),
        "record ids do not sort like created_at"
    );

    // The server returns exactly what was sent (so the model's payload text
    // is the server's payload text).
    let (listed, _) = s.list_all(&ep.slug, &ep.sandbox_key, 30);
    assert_eq!(listed.len(), model.len());
    for r in &listed {
        let id = id_of(r);
        assert_eq!(r["payload"], model[&id].payload, "{ctx}: record {id}");
        assert_eq!(
            payload_text(&r["payload"]),
            payload_text(&model[&id].payload)
        );
    }

    // In generation order, so the queries depend on the seed only.
    let texts: Vec<String> = payloads.iter().map(payload_text).collect();
    assert!(
        texts.iter().filter(|t| t.chars().count() >= 200).count() >= 5,
        "{ctx}: too few long payloads"
    );
    let times: Vec<(i64, u32)> = created.iter().map(|(_, r)| r.created).collect();
    let offsets = [0, 120, -330, 840, -720, 345];

    let started = Instant::now();
    let mut total_pages = 0;
    let mut nonempty = 0;
    for i in 0..150 {
        let q = rand_query(&mut rng, &texts);
        let limit = rng.random_range(1..=30);
        // A third of the queries get an explicit window, bounded by actual
        // created_at values (inclusive ends) shown at random offsets, or a
        // bare date.
        let w = if rng.random_bool(0.33) {
            let a = *times.choose(&mut rng).unwrap();
            let b = *times.choose(&mut rng).unwrap();
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let start = match rng.random_range(0..4) {
                0 => None,
                1 => Some((utc_date(lo).1, utc_date(lo).0)),
                _ => Some((lo, fmt_ts(lo, *offsets.choose(&mut rng).unwrap()))),
            };
            let end = match rng.random_range(0..3) {
                0 => None,
                _ => Some((hi, fmt_ts(hi, *offsets.choose(&mut rng).unwrap()))),
            };
            window(start, end)
        } else {
            Window::default()
        };
        let qctx = format!("{ctx}, query #{i}");
        if !expected_ids(&model, &q, &w).is_empty() {
            nonempty += 1;
        }
        total_pages +=
            assert_search_exact(&s, &ep.slug, &ep.sandbox_key, &model, &q, limit, &w, &qctx);
    }
    eprintln!(
        "{ctx}: 150 queries ({nonempty} with matches), {total_pages} pages in {:?}",
        started.elapsed()
    );
    assert!(
        nonempty >= 75,
        "{ctx}: the generator produced too few matching queries ({nonempty})"
    );
}

// ---------------------------------------------------------------------------
// 2. PUT and DELETE interleaved with searches
// ---------------------------------------------------------------------------

const TARGETS: &[&str] = &["zebra", "ärger", "Σοφία", "132", "東京都"];

#[test]
fn searches_right_after_put_and_delete_see_the_new_state_only() {
    let seed = seed();
    let ctx = format!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed ^ 0x2);
    let s = TestServer::start();
    let ep = s.create_endpoint("churn", &[]);
    let key = ep.sandbox_key.clone();

    let payloads: Vec<Value> = (0..80)
        .map(|i| {
            let word = TARGETS[i % TARGETS.len()];
            json!({"i": i, "w": word, "x": rand_value(&mut rng, 2)})
        })
        .collect();
    let mut model = create_many(&s, &ep, &payloads);
    let queries = [
        "ZEBRA",
        "ÄRGER",
        "σοφία",
        "132",
        "東京都",
        "\"w\":\"",
        "\"i\":1",
    ];
    for q in queries {
        assert_default_search(&s, &ep.slug, &key, &model, q, &format!("{ctx}, initial"));
    }

    for round in 0..6 {
        let rctx = format!("{ctx}, round {round}");
        let ids: Vec<String> = model.keys().cloned().collect();
        // Replace some records: their word changes, so they stop matching
        // one query and start matching another.
        for id in ids.choose_multiple(&mut rng, 6) {
            let word = *TARGETS.choose(&mut rng).unwrap();
            let payload = json!({"w": word, "round": round, "r": rng.random_range(0..1000)});
            assert_status(&s.put_record(&ep.slug, &key, id, &payload), 202);
            let created = model[id].created;
            model.insert(id.clone(), Rec::new(created, payload));
        }
        // Delete some.
        let ids: Vec<String> = model.keys().cloned().collect();
        for id in ids.choose_multiple(&mut rng, 3) {
            assert_status(&s.delete_record(&ep.slug, &key, id), 202);
            model.remove(id);
        }
        // Search at once, no waiting.
        for q in queries {
            assert_default_search(&s, &ep.slug, &key, &model, q, &rctx);
        }
        // A new record, then at once a search that only it matches, plus a
        // PUT straight after a POST.
        let unique = format!("fresh-{round}-{}", rng.random_range(0..1_000_000));
        let (id, rec) = create(&s, &ep, &key, &json!({"w": unique, "n": round}));
        model.insert(id.clone(), rec);
        assert_default_search(&s, &ep.slug, &key, &model, &unique, &rctx);
        let renamed = format!("renamed-{round}-{}", rng.random_range(0..1_000_000));
        let payload = json!({"w": renamed});
        assert_status(&s.put_record(&ep.slug, &key, &id, &payload), 202);
        let created = model[&id].created;
        model.insert(id.clone(), Rec::new(created, payload));
        assert_default_search(&s, &ep.slug, &key, &model, &unique, &rctx);
        assert_default_search(&s, &ep.slug, &key, &model, &renamed, &rctx);
        // And deleting it right away.
        assert_status(&s.delete_record(&ep.slug, &key, &id), 202);
        model.remove(&id);
        assert_default_search(&s, &ep.slug, &key, &model, &renamed, &rctx);
        // Small pages too.
        assert_search_exact(
            &s,
            &ep.slug,
            &key,
            &model,
            "\"w\":\"",
            rng.random_range(1..=7),
            &Window::default(),
            &rctx,
        );
    }
}

// ---------------------------------------------------------------------------
// 3. Paging while writes continue
// ---------------------------------------------------------------------------

#[test]
fn paging_sees_every_pre_existing_match_once_in_order_while_writes_continue() {
    let seed = seed();
    let ctx = format!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed ^ 0x3);
    let s = TestServer::start();
    let ep = s.create_endpoint("paging", &[]);
    let key = ep.sandbox_key.clone();

    let payloads: Vec<Value> = (0..90)
        .map(|i| {
            if i % 3 == 0 {
                json!({"i": i, "animal": "horse"})
            } else {
                json!({"i": i, "animal": "Zebra", "n": rng.random_range(0..100)})
            }
        })
        .collect();
    let model = create_many(&s, &ep, &payloads);
    let before = expected_ids(&model, "zebra", &Window::default());
    assert_eq!(before.len(), 60);

    // Of the pre-existing matches, some get deleted or replaced while the
    // pages are being read (only ones not yet returned).
    let mut deleted: HashSet<String> = HashSet::new();
    let mut unmatched: HashSet<String> = HashSet::new();
    let mut replaced: BTreeMap<String, Value> = BTreeMap::new();
    let mut new_ids: HashSet<String> = HashSet::new();

    let limit = 4;
    let mut cursor: Option<String> = None;
    let mut got: Vec<Value> = Vec::new();
    let mut pages = 0;
    loop {
        let limit_s = limit.to_string();
        let mut params = vec![("q", "zebra"), ("limit", limit_s.as_str())];
        if let Some(c) = &cursor {
            params.push(("cursor", c.as_str()));
        }
        let r = search(&s, &ep.slug, &key, &params);
        assert_status(&r, 200);
        let v = r.json();
        got.extend(check_page(&v, limit, &ctx));
        pages += 1;
        assert!(pages < 1000, "{ctx}: pagination does not terminate");

        // Between pages: new matching records (newer than everything).
        for _ in 0..2 {
            let (id, _) = create(&s, &ep, &key, &json!({"animal": "zebra", "new": true}));
            new_ids.insert(id);
        }
        // And changes to pre-existing matches that have not been returned.
        let seen: HashSet<String> = got.iter().map(id_of).collect();
        let pending: Vec<&String> = before
            .iter()
            .filter(|id| !seen.contains(*id) && !deleted.contains(*id) && !unmatched.contains(*id))
            .collect();
        if pages % 3 == 1 && pending.len() > 3 {
            let id = (*pending.choose(&mut rng).unwrap()).clone();
            match pages % 9 {
                1 => {
                    assert_status(&s.delete_record(&ep.slug, &key, &id), 202);
                    deleted.insert(id);
                }
                4 => {
                    let p = json!({"animal": "horse", "was": "stripes"});
                    assert_status(&s.put_record(&ep.slug, &key, &id, &p), 202);
                    unmatched.insert(id);
                }
                _ => {
                    let p = json!({"animal": "ZEBRA", "replaced": pages});
                    assert_status(&s.put_record(&ep.slug, &key, &id, &p), 202);
                    replaced.insert(id, p);
                }
            }
        }
        match next_cursor(&v) {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }

    let ids: Vec<String> = got.iter().map(id_of).collect();
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(
        unique.len(),
        ids.len(),
        "{ctx}: duplicates across pages: {ids:?}"
    );
    let expected: Vec<String> = before
        .iter()
        .filter(|id| !deleted.contains(*id) && !unmatched.contains(*id))
        .cloned()
        .collect();
    let old_in_pages: Vec<String> = ids
        .iter()
        .filter(|id| !new_ids.contains(*id))
        .cloned()
        .collect();
    assert_eq!(
        old_in_pages, expected,
        "{ctx}: pre-existing matches across {pages} pages (deleted {deleted:?}, replaced to non-matching {unmatched:?})"
    );
    for r in &got {
        let id = id_of(r);
        if let Some(p) = replaced.get(&id) {
            assert_eq!(
                &r["payload"], p,
                "{ctx}: record {id} returned with its old payload"
            );
        } else if !new_ids.contains(&id) {
            assert_eq!(r["payload"], model[&id].payload, "{ctx}: record {id}");
        }
    }
    eprintln!(
        "{ctx}: {pages} pages, {} records ({} written during paging)",
        ids.len(),
        new_ids.len()
    );
}

// ---------------------------------------------------------------------------
// 4. The index folder deleted or corrupted while the server is stopped
// ---------------------------------------------------------------------------

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A fixed set of queries with exact expectations, default window.
/// Stops the server gracefully, which commits the index, and starts it again: the index
/// then holds every record written before.
fn restart_with_index_committed(s: &mut TestServer) {
    let st = s.sigterm_and_wait();
    assert!(st.success(), "SIGTERM exit status {st:?}");
    s.restart();
}

fn check_queries(s: &TestServer, ep: &Endpoint, model: &Model, queries: &[String], ctx: &str) {
    for (i, q) in queries.iter().enumerate() {
        let limit = [30, 9, 4][i % 3];
        assert_search_exact(
            s,
            &ep.slug,
            &ep.sandbox_key,
            model,
            q,
            limit,
            &Window::default(),
            ctx,
        );
    }
}

#[test]
fn deleted_or_corrupted_index_folder_is_rebuilt_and_answers_stay_exact() {
    if redb_only("PostgreSQL searches in the database: there is no index folder") {
        return;
    }
    let seed = seed();
    let ctx = format!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed ^ 0x4);
    let mut s = TestServer::start();
    let ep = s.create_endpoint("rebuild", &[]);

    let payloads: Vec<Value> = (0..200).map(|_| rand_payload(&mut rng)).collect();
    let mut model = create_many(&s, &ep, &payloads);
    // In generation order, so the queries depend on the seed only.
    let texts: Vec<String> = payloads.iter().map(payload_text).collect();
    let mut queries: Vec<String> = (0..8).map(|_| rand_query(&mut rng, &texts)).collect();
    queries.extend(["zebra", "CITY", "ÄRGER", "\":\""].map(String::from));
    check_queries(&s, &ep, &model, &queries, &format!("{ctx}, before restart"));

    // Stop, delete the index folder, start again.
    let st = s.sigterm_and_wait();
    assert!(st.success(), "SIGTERM exit status {st:?}");
    let index_dir = s.data_dir().join("search");
    assert!(
        index_dir.is_dir(),
        "{} does not exist after a graceful stop; the index must live there",
        index_dir.display()
    );
    std::fs::remove_dir_all(&index_dir).unwrap();
    let from = s.log.len();
    s.restart();
    // At once: the rebuild may be running.
    check_queries(
        &s,
        &ep,
        &model,
        &queries,
        &format!("{ctx}, right after restart without index"),
    );
    // Writes during the rebuild are found too.
    for i in 0..5 {
        let (id, rec) = create(
            &s,
            &ep,
            &ep.sandbox_key,
            &json!({"after": "restart", "zebra": i}),
        );
        model.insert(id, rec);
    }
    let some: Vec<String> = model.keys().take(4).cloned().collect();
    for id in &some {
        assert_status(&s.delete_record(&ep.slug, &ep.sandbox_key, id), 202);
        model.remove(id);
    }
    check_queries(
        &s,
        &ep,
        &model,
        &queries,
        &format!("{ctx}, writes during rebuild"),
    );

    let deadline = Duration::from_secs(30);
    let line = s.log.wait_for(
        from,
        deadline,
        |l| l.contains("search index rebuilt"),
        || false,
    );
    // How many searches ran before the rebuild finished (informational: the
    // "exact while rebuilding" checks above only mean something if some did).
    let during = s.log.lines()[from..]
        .iter()
        .take_while(|l| !l.contains("search index rebuilt"))
        .filter(|l| l.contains("/search 200"))
        .count();
    eprintln!("{ctx}: {during} searches answered before `search index rebuilt` was logged");
    assert!(
        line.is_some(),
        "{ctx}: no `search index rebuilt` log line within {deadline:?} of the restart\n--- log ---\n{}",
        s.log.lines()[from..].join("\n")
    );
    assert!(
        index_dir.is_dir(),
        "the rebuilt index is not in {}",
        index_dir.display()
    );
    check_queries(&s, &ep, &model, &queries, &format!("{ctx}, after rebuild"));

    // Stop again and corrupt every file of the index.
    let st = s.sigterm_and_wait();
    assert!(st.success(), "SIGTERM exit status {st:?}");
    let files = files_under(&index_dir);
    assert!(
        !files.is_empty(),
        "the index folder {} holds no files",
        index_dir.display()
    );
    for f in &files {
        let len = std::fs::metadata(f)
            .map(|m| m.len())
            .unwrap_or(0)
            .clamp(64, 1 << 20);
        let garbage: Vec<u8> = (0..len).map(|_| rng.random::<u8>()).collect();
        std::fs::write(f, garbage).unwrap();
    }
    let from = s.log.len();
    s.restart();
    let cctx = format!(
        "{ctx}, after restart with {} corrupted index files",
        files.len()
    );
    check_queries(&s, &ep, &model, &queries, &cctx);
    for i in 0..5 {
        let (id, rec) = create(
            &s,
            &ep,
            &ep.sandbox_key,
            &json!({"after": "corruption", "city": i}),
        );
        model.insert(id, rec);
    }
    let some: Vec<String> = model.keys().rev().skip(3).take(3).cloned().collect();
    for id in &some {
        let payload = json!({"put": "after corruption", "zebra": true});
        assert_status(&s.put_record(&ep.slug, &ep.sandbox_key, id, &payload), 202);
        let created = model[id].created;
        model.insert(id.clone(), Rec::new(created, payload));
    }
    check_queries(&s, &ep, &model, &queries, &format!("{cctx}, after writes"));
    // Whatever the server did with the corrupt files, it still answers
    // exactly once it says the index is rebuilt (if it says so).
    if s.log
        .wait_for(
            from,
            Duration::from_secs(5),
            |l| l.contains("search index rebuilt"),
            || false,
        )
        .is_some()
    {
        check_queries(&s, &ep, &model, &queries, &format!("{cctx}, after rebuild"));
    }
}

/// Many records changed behind the index at once: the index still holds
/// their old text (the restart below starts from a committed index that has
/// them all), so one call may stop early with a short page and a cursor.
/// Following the cursors must still give exactly the current matches.
#[test]
fn many_changes_behind_the_index_still_give_exact_pages() {
    let seed = seed();
    let ctx = format!("seed {seed}");
    let mut s = TestServer::start();
    let ep = s.create_endpoint("stale", &[]);
    let payloads: Vec<Value> = (0..260)
        .map(|i| {
            if i % 13 == 0 {
                json!({"i": i, "animal": "horse"})
            } else {
                json!({"i": i, "animal": "zebra", "stripes": i % 7})
            }
        })
        .collect();
    let mut model = create_many(&s, &ep, &payloads);
    restart_with_index_committed(&mut s);

    // Replace (to non-matching) or delete the 200 newest zebras from 8
    // writers, the newest last, then search at once: the index is at most
    // about a commit interval behind, so the newest changes are likely still
    // in its "tail" while it returns the old text for them.
    let zebras = expected_ids(&model, "zebra", &Window::default());
    let victims: Vec<String> = zebras[..200].iter().rev().cloned().collect();
    let started = Instant::now();
    let changed: Vec<(String, Option<Value>)> = parallel(&victims, 8, |n, id| {
        if n % 3 == 0 {
            assert_status(&s.delete_record(&ep.slug, &ep.sandbox_key, id), 202);
            (id.clone(), None)
        } else {
            let p = json!({"animal": "horse", "n": n});
            assert_status(&s.put_record(&ep.slug, &ep.sandbox_key, id, &p), 202);
            (id.clone(), Some(p))
        }
    });
    eprintln!("{ctx}: 200 changes in {:?}", started.elapsed());
    for (id, p) in changed {
        match p {
            Some(p) => {
                let created = model[&id].created;
                model.insert(id, Rec::new(created, p));
            }
            None => {
                model.remove(&id);
            }
        }
    }
    // At once.
    for (q, limit) in [
        ("zebra", 1),
        ("ZEBRA", 3),
        ("horse", 7),
        ("\"animal\":\"zebra\"", 30),
        ("\"animal\":\"", 30),
    ] {
        let w = Window::default();
        let n = expected_ids(&model, q, &w).len();
        let pages = assert_search_exact(&s, &ep.slug, &ep.sandbox_key, &model, q, limit, &w, &ctx);
        eprintln!(
            "{ctx}: q={q:?} limit {limit}: {n} matches in {pages} pages (at least {} needed)",
            n.div_ceil(limit).max(1)
        );
    }
}

/// The planner's two ways to a page, each with its hand-over: a query whose
/// trigrams are in every record but which is itself rare (the store walk gives
/// up after a short probe and the index answers below it), and a query in
/// about a third of the records (the walk fills pages, and the index takes
/// over where a walk's budget ends).
#[test]
fn rare_words_of_common_trigrams_and_dense_words_page_exactly() {
    let ctx = "planner";
    let mut s = TestServer::start();
    let ep = s.create_endpoint("planner", &[]);
    // The oldest records hold the rare word; every later one holds its
    // trigrams in other words, and a third of them hold "tracking".
    let mut model = create_many(
        &s,
        &ep,
        &[
            json!({"note": "parcelrefund one"}),
            json!({"note": "PARCELREFUND two"}),
        ],
    );
    let common: Vec<Value> = (0..240)
        .map(|i| {
            let word = if i % 3 == 0 { "tracking" } else { "tracing" };
            json!({"note": format!("parcel {i} refund"), "k": word})
        })
        .collect();
    model.extend(create_many(&s, &ep, &common));
    model.extend(create_many(
        &s,
        &ep,
        &[json!({"note": "parcelrefund three"})],
    ));
    restart_with_index_committed(&mut s);
    for (q, limit) in [
        ("parcelrefund", 1),
        ("parcelrefund", 10),
        ("tracking", 3),
        ("tracking", 30),
        ("parcel", 30),
    ] {
        let w = Window::default();
        let n = expected_ids(&model, q, &w).len();
        assert!(n > 0, "{q:?} has no matches");
        assert_search_exact(&s, &ep.slug, &ep.sandbox_key, &model, q, limit, &w, ctx);
    }
    assert_eq!(
        expected_ids(&model, "parcelrefund", &Window::default()).len(),
        3
    );
    assert_eq!(
        expected_ids(&model, "tracking", &Window::default()).len(),
        80
    );
}

// ---------------------------------------------------------------------------
// 5. Parameters, windows, cursors, authentication, environments
// ---------------------------------------------------------------------------

#[test]
fn q_must_be_3_to_200_characters_counted_as_unicode_characters() {
    let s = TestServer::start();
    let ep = s.create_endpoint("params", &[]);
    let key = &ep.sandbox_key;
    let (id, rec) = create(
        &s,
        &ep,
        key,
        &json!({"w": "äöüäöü", "e": "😀😀😀", "a": "x".repeat(250)}),
    );
    let model: Model = [(id, rec)].into_iter().collect();

    let bad: Vec<(String, &str)> = vec![
        ("ab".into(), "2 characters"),
        ("32".into(), "2 digits"),
        ("x".repeat(201), "201 characters"),
        ("ä".repeat(201), "201 two-byte characters"),
        ("😀😀".into(), "2 emoji (8 bytes)"),
        ("ä".into(), "1 two-byte character"),
        (String::new(), "empty"),
    ];
    for (q, what) in &bad {
        let r = search(&s, &ep.slug, key, &[("q", q)]);
        assert_invalid_parameter(&r, "q", what);
    }
    let r = s.data("GET", &search_path(&ep.slug, &[]), key, None);
    assert_invalid_parameter(&r, "q", "missing q");
    let r = search(&s, &ep.slug, key, &[("limit", "5")]);
    assert_invalid_parameter(&r, "q", "missing q with limit");

    // Lengths counted in characters, not bytes.
    for q in ["äöü", "😀😀😀", "ÄÖÜ", "xxx"] {
        assert_default_search(&s, &ep.slug, key, &model, q, &format!("q={q:?}"));
    }
    let two_hundred = "x".repeat(200);
    assert_default_search(&s, &ep.slug, key, &model, &two_hundred, "200 x");
    let long_multibyte = "ä".repeat(200);
    assert_default_search(
        &s,
        &ep.slug,
        key,
        &model,
        &long_multibyte,
        "200 ä (400 bytes)",
    );
    let long_emoji = "😀".repeat(200);
    assert_default_search(
        &s,
        &ep.slug,
        key,
        &model,
        &long_emoji,
        "200 emoji (800 bytes)",
    );
}

#[test]
fn limit_and_cursor_are_validated_like_list() {
    let s = TestServer::start();
    let a = s.create_endpoint("a", &[]);
    let b = s.create_endpoint("b", &[]);
    s.deploy(&a.slug);
    let mut model = Model::new();
    for i in 0..40 {
        let (id, rec) = create(&s, &a, &a.sandbox_key, &json!({"i": i, "w": "cursor-test"}));
        model.insert(id, rec);
        create(
            &s,
            &a,
            &a.production_key,
            &json!({"i": i, "w": "cursor-test"}),
        );
        create(&s, &b, &b.sandbox_key, &json!({"i": i, "w": "cursor-test"}));
    }
    let key = &a.sandbox_key;
    for l in ["0", "31", "x", "-1", "", "1.5", "99999999999999999999"] {
        let r = search(&s, &a.slug, key, &[("q", "cursor"), ("limit", l)]);
        assert_invalid_parameter(&r, "limit", &format!("limit={l:?}"));
    }
    // Default limit 10; 1 and 30 accepted.
    let r = search(&s, &a.slug, key, &[("q", "cursor")]);
    assert_status(&r, 200);
    let v = r.json();
    assert_eq!(
        v["data"].as_array().map(Vec::len),
        Some(10),
        "default limit: {v}"
    );
    assert!(
        next_cursor(&v).is_some(),
        "40 matches, 10 returned: next_cursor expected: {v}"
    );
    for l in [1, 30] {
        let r = search(
            &s,
            &a.slug,
            key,
            &[("q", "cursor"), ("limit", &l.to_string())],
        );
        assert_status(&r, 200);
        let n = r.json()["data"].as_array().map(Vec::len).unwrap_or(0);
        assert!(n <= l, "limit {l}: {n} records");
    }
    assert_search_exact(
        &s,
        &a.slug,
        key,
        &model,
        "CURSOR-TEST",
        30,
        &Window::default(),
        "limit 30",
    );
    assert_search_exact(
        &s,
        &a.slug,
        key,
        &model,
        "cursor-test",
        1,
        &Window::default(),
        "limit 1",
    );

    let cursor_of = |r: Resp| {
        assert_status(&r, 200);
        next_cursor(&r.json()).unwrap_or_else(|| panic!("no next_cursor: {}", r.text()))
    };
    let own = cursor_of(search(&s, &a.slug, key, &[("q", "cursor"), ("limit", "3")]));
    let r = search(
        &s,
        &a.slug,
        key,
        &[("q", "cursor"), ("limit", "3"), ("cursor", &own)],
    );
    assert_status(&r, 200);

    let list_cursor = cursor_of(s.list(&a.slug, key, "limit=3"));
    let other_endpoint = cursor_of(search(
        &s,
        &b.slug,
        &b.sandbox_key,
        &[("q", "cursor"), ("limit", "3")],
    ));
    let other_env = cursor_of(search(
        &s,
        &a.slug,
        &a.production_key,
        &[("q", "cursor"), ("limit", "3")],
    ));
    let truncated = own[..own.len() - 2].to_string();
    let cases = [
        ("garbage", "garbage".to_string()),
        ("AAAA", "AAAA".to_string()),
        ("binary", "\u{0}\u{1}".to_string()),
        ("empty", String::new()),
        ("truncated", truncated),
        ("a list cursor", list_cursor),
        ("another endpoint's search cursor", other_endpoint),
        ("production's search cursor", other_env),
    ];
    for (what, c) in &cases {
        let r = search(&s, &a.slug, key, &[("q", "cursor"), ("cursor", c)]);
        assert_invalid_parameter(&r, "cursor", what);
    }
    // And a search cursor is no list cursor.
    let r = s.list(&a.slug, key, &format!("cursor={}", url_encode(&own)));
    assert_invalid_parameter(&r, "cursor", "a search cursor passed to list");
}

#[test]
fn start_and_end_windows_are_inclusive_and_parse_dates_and_offsets() {
    let s = TestServer::start();
    let ep = s.create_endpoint("windows", &[]);
    let key = &ep.sandbox_key;
    let mut model = Model::new();
    for i in 0..12 {
        let (id, rec) = create(&s, &ep, key, &json!({"w": "window", "i": i}));
        model.insert(id, rec);
    }
    let times: Vec<(i64, u32)> = model.values().map(|r| r.created).collect();
    let q = "WINDOW";
    let check = |w: Window, what: &str| {
        assert_search_exact(&s, &ep.slug, key, &model, q, 30, &w, what);
    };

    // Defaults: the last 30 days, so recent records are found.
    check(Window::default(), "default window");
    assert_eq!(expected_ids(&model, q, &Window::default()).len(), 12);
    // Far in the past: nothing. No upper bound on the range.
    let none = window(
        Some(((915_148_800, 0), "1999-01-01".into())),
        Some(((946_684_800, 0), "2000-01-01".into())),
    );
    check(none, "1999-01-01 .. 2000-01-01");
    check(
        window(Some(((915_148_800, 0), "1999-01-01".into())), None),
        "start=1999-01-01 only",
    );
    check(
        window(
            Some(((0, 0), "1970-01-01".into())),
            Some(((32_503_680_000, 0), "3000-01-01".into())),
        ),
        "1970 .. 3000",
    );

    // A bare date is UTC midnight; RFC 3339 with an offset is the same instant.
    let first = times[0];
    let (today, midnight) = utc_date(first);
    check(
        window(Some((midnight, today.clone())), None),
        "start=today (bare)",
    );
    check(
        window(None, Some((midnight, today.clone()))),
        "end=today (bare) is midnight, not end of day",
    );
    for off in [120, -330, 840, -720] {
        let text = fmt_ts(midnight, off);
        check(
            window(Some((midnight, text.clone())), None),
            &format!("start={text}"),
        );
        check(
            window(None, Some((midnight, text.clone()))),
            &format!("end={text}"),
        );
    }
    let r = search(&s, &ep.slug, key, &[("q", q), ("start", "2020-01-01")]);
    let r2 = search(
        &s,
        &ep.slug,
        key,
        &[("q", q), ("start", "2020-01-01T02:00:00+02:00")],
    );
    assert_status(&r, 200);
    assert_status(&r2, 200);
    assert_eq!(r.json()["data"], r2.json()["data"]);
    // 2020-01-01T02:00:00+02:00 is 2020-01-01T00:00:00Z exactly: as the end of
    // a window starting there, it holds only that instant.
    let r = search(
        &s,
        &ep.slug,
        key,
        &[
            ("q", q),
            ("start", "2020-01-01"),
            ("end", "2020-01-01T02:00:00+02:00"),
        ],
    );
    assert_status(&r, 200);
    assert_eq!(r.json()["data"], json!([]));

    // Inclusive ends, to the microsecond, at any offset.
    let mid = times[5];
    for off in [0, 120, -330] {
        check(
            window(Some((mid, fmt_ts(mid, off))), Some((mid, fmt_ts(mid, off)))),
            &format!("start=end=created_at at offset {off}"),
        );
        assert_eq!(
            expected_ids(
                &model,
                q,
                &window(Some((mid, String::new())), Some((mid, String::new())))
            )
            .len(),
            1
        );
        let after = plus_micro(mid);
        check(
            window(Some((after, fmt_ts(after, off))), None),
            &format!("start one microsecond after a record, offset {off}"),
        );
        let before = minus_micro(mid);
        check(
            window(None, Some((before, fmt_ts(before, off)))),
            &format!("end one microsecond before a record, offset {off}"),
        );
        let lo = times[2];
        let hi = times[9];
        check(
            window(Some((lo, fmt_ts(lo, off))), Some((hi, fmt_ts(hi, -off)))),
            &format!("records 2..=9, offsets {off} / {}", -off),
        );
    }

    // Bad windows.
    let bad = [
        ("start", "2020-13-01"),
        ("start", "2021-02-29"),
        ("start", "yesterday"),
        ("start", "2020-01-01T00:00:00"),
        ("start", "2020-01-01T25:00:00Z"),
        ("start", "01/02/2020"),
        ("start", ""),
        ("end", "2020-1-1"),
        ("end", "2020-01-01T00:00:00+2"),
        ("end", "not a date"),
    ];
    for (param, value) in bad {
        let r = search(&s, &ep.slug, key, &[("q", q), (param, value)]);
        assert_invalid_parameter(&r, param, &format!("{param}={value:?}"));
    }
    let r = search(
        &s,
        &ep.slug,
        key,
        &[("q", q), ("start", "2020-01-02"), ("end", "2020-01-01")],
    );
    assert_error(&r, 400, "invalid_parameter");
    assert!(
        names_param(&r, "start") || names_param(&r, "end"),
        "start after end: the message must name start or end: {}",
        r.text()
    );
    // The default end is now, so a start in the future alone is after it.
    let r = search(&s, &ep.slug, key, &[("q", q), ("start", "2999-01-01")]);
    assert_error(&r, 400, "invalid_parameter");
    let t = times[3];
    let r = search(
        &s,
        &ep.slug,
        key,
        &[
            ("q", q),
            ("start", &fmt_ts(plus_micro(t), 0)),
            ("end", &fmt_ts(t, 0)),
        ],
    );
    assert_error(&r, 400, "invalid_parameter");
    // Same instant in two offsets is not "after".
    let r = search(
        &s,
        &ep.slug,
        key,
        &[
            ("q", q),
            ("start", &fmt_ts(t, 300)),
            ("end", &fmt_ts(t, -300)),
        ],
    );
    assert_status(&r, 200);
}

#[test]
fn auth_errors_and_environments_never_mix() {
    let s = TestServer::start();
    let ep = s.create_endpoint("auth", &[]);
    let other = s.create_endpoint("other", &[]);
    let path = search_path(&ep.slug, &[("q", "zebra")]);

    // 401 without a key (also when q is missing: auth is checked first).
    assert_error(&s.request("GET", &path, &[], None), 401, "missing_api_key");
    let bare = search_path(&ep.slug, &[]);
    assert_error(&s.request("GET", &bare, &[], None), 401, "missing_api_key");
    let r = s.request(
        "GET",
        &path,
        &[("Authorization", "Basic dXNlcjpwYXNz")],
        None,
    );
    assert_error(&r, 401, "missing_api_key");
    assert_error(
        &search(&s, &ep.slug, "tm_test_doesnotexist", &[("q", "zebra")]),
        401,
        "invalid_api_key",
    );
    // A key of another endpoint.
    assert_error(
        &search(&s, &ep.slug, &other.sandbox_key, &[("q", "zebra")]),
        404,
        "endpoint_not_found",
    );
    assert_error(
        &search(&s, "no-such-slug", &ep.sandbox_key, &[("q", "zebra")]),
        404,
        "endpoint_not_found",
    );
    // Production key before deploy: 403, before any parameter check.
    assert_error(
        &search(&s, &ep.slug, &ep.production_key, &[("q", "zebra")]),
        403,
        "endpoint_not_deployed",
    );
    assert_error(
        &search(&s, &ep.slug, &ep.production_key, &[("q", "ab")]),
        403,
        "endpoint_not_deployed",
    );

    // Sandbox and production never mix.
    let mut sandbox = Model::new();
    for i in 0..5 {
        let (id, rec) = create(
            &s,
            &ep,
            &ep.sandbox_key,
            &json!({"env": "sandbox", "animal": "zebra", "i": i}),
        );
        sandbox.insert(id, rec);
    }
    s.deploy(&ep.slug);
    let mut production = Model::new();
    for i in 0..4 {
        let (id, rec) = create(
            &s,
            &ep,
            &ep.production_key,
            &json!({"env": "production", "animal": "Zebra", "i": i}),
        );
        production.insert(id, rec);
    }
    for i in 0..3 {
        create(
            &s,
            &other,
            &other.sandbox_key,
            &json!({"env": "sandbox", "animal": "zebra", "i": i}),
        );
    }
    for q in ["ZEBRA", "\"env\":", "sandbox", "production"] {
        assert_default_search(&s, &ep.slug, &ep.sandbox_key, &sandbox, q, "sandbox key");
        assert_default_search(
            &s,
            &ep.slug,
            &ep.production_key,
            &production,
            q,
            "production key",
        );
    }
    // Changes in one environment do not leak into the other.
    let sid = sandbox.keys().next().unwrap().clone();
    let payload = json!({"env": "sandbox", "animal": "production-like"});
    assert_status(
        &s.put_record(&ep.slug, &ep.sandbox_key, &sid, &payload),
        202,
    );
    let created = sandbox[&sid].created;
    sandbox.insert(sid.clone(), Rec::new(created, payload));
    let pid = production.keys().next().unwrap().clone();
    assert_status(&s.delete_record(&ep.slug, &ep.production_key, &pid), 202);
    production.remove(&pid);
    for q in ["ZEBRA", "production", "sandbox"] {
        assert_default_search(
            &s,
            &ep.slug,
            &ep.sandbox_key,
            &sandbox,
            q,
            "sandbox key after writes",
        );
        assert_default_search(
            &s,
            &ep.slug,
            &ep.production_key,
            &production,
            q,
            "production key after writes",
        );
    }

    // An inactive endpoint is 403 for search too.
    s.patch_endpoint(&ep.slug, &json!({"active": false}));
    for key in [&ep.sandbox_key, &ep.production_key] {
        assert_error(
            &search(&s, &ep.slug, key, &[("q", "zebra")]),
            403,
            "endpoint_inactive",
        );
    }
    s.patch_endpoint(&ep.slug, &json!({"active": true}));
    assert_default_search(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        &sandbox,
        "zebra",
        "reactivated",
    );
}

// ---------------------------------------------------------------------------
// 6. The specification's examples
// ---------------------------------------------------------------------------

#[test]
fn spec_examples_digits_keys_and_unicode_case() {
    let s = TestServer::start();
    let ep = s.create_endpoint("examples", &[]);
    let key = &ep.sandbox_key;
    let mut model = Model::new();
    for p in [
        json!({"n": 41329}),
        json!({"city": "x"}),
        json!({"w": "ärger"}),
        json!({"a": 1}),
        json!({"w": "straße"}),
        json!({"w": "λόγος"}),
        json!({"w": "İstanbul"}),
        json!({"w": "\u{212A}elvin"}),
        json!({"other": "nothing here"}),
    ] {
        let (id, rec) = create(&s, &ep, key, &p);
        model.insert(id, rec);
    }
    let ids_for = |q: &str| -> Vec<String> {
        let (records, _) = search_all(&s, &ep.slug, key, q, 10, &[], q);
        records.iter().map(id_of).collect()
    };
    let id_with = |p: Value| -> String {
        model
            .iter()
            .find(|(_, r)| r.payload == p)
            .map(|(id, _)| id.clone())
            .unwrap()
    };

    // "searching 32 also matches 132": digits inside numbers.
    assert_eq!(
        ids_for("132"),
        vec![id_with(json!({"n": 41329}))],
        "132 in 41329"
    );
    // Keys are text too, case-insensitively.
    assert_eq!(
        ids_for("CITY"),
        vec![id_with(json!({"city": "x"}))],
        "CITY finds the key city"
    );
    // Case-insensitive beyond ASCII.
    assert_eq!(
        ids_for("ÄRGER"),
        vec![id_with(json!({"w": "ärger"}))],
        "ÄRGER finds ärger"
    );
    // JSON punctuation counts.
    assert_eq!(
        ids_for("\"a\":1"),
        vec![id_with(json!({"a": 1}))],
        "\"a\":1"
    );
    assert_eq!(
        ids_for("{\"a\":1}"),
        vec![id_with(json!({"a": 1}))],
        "{{\"a\":1}}"
    );
    // A two-character q is refused.
    assert_invalid_parameter(&search(&s, &ep.slug, key, &[("q", "32")]), "q", "q=32");

    // The rule is per-character lower-casing, nothing more: every one of
    // these is decided by the model (ß does not equal ss; a final sigma is
    // not σ; İ lowers to i + combining dot; the Kelvin sign lowers to k).
    for q in [
        "STRASSE",
        "STRAẞE",
        "straße",
        "ΛΌΓΟΣ",
        "λόγοσ",
        "ΛΌΓΟς",
        "İSTANBUL",
        "ist",
        "i\u{307}st",
        "KELVIN",
        "\u{212A}ELVIN",
        "kel",
    ] {
        assert_default_search(&s, &ep.slug, key, &model, q, &format!("q={q:?}"));
    }
    // Spot checks of what the model says, so the rule is visible here.
    assert_eq!(expected_ids(&model, "STRAẞE", &Window::default()).len(), 1);
    assert_eq!(expected_ids(&model, "STRASSE", &Window::default()).len(), 0);
    assert_eq!(expected_ids(&model, "ΛΌΓΟς", &Window::default()).len(), 1);
    assert_eq!(expected_ids(&model, "kel", &Window::default()).len(), 1);
    assert_eq!(expected_ids(&model, "ist", &Window::default()).len(), 0);
}

/// A query whose trigrams are all common but whose phrase is rare: search walks the newest
/// records in the store first (the dense plan), runs out of its walking budget (2,000 records)
/// without a match, and must hand over to the index for the older part, in one page.
#[test]
fn dense_trigrams_with_rare_matches_are_found_past_the_store_walk() {
    let mut s = TestServer::start();
    let ep = s.create_endpoint("dense", &[]);
    let rare: Vec<Value> = (0..10)
        .map(|i| json!({"i": i, "t": "abc the rare one"}))
        .collect();
    // Every trigram of "abc the" is in these, but never the whole phrase.
    let common: Vec<Value> = (0..2_300)
        .map(|i| json!({"i": i, "t": "abc x the xabc xthe"}))
        .collect();
    let rare_ids: Vec<String> = create_all(&s, &ep, &rare, 2)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    create_all(&s, &ep, &common, 4);
    // A graceful stop commits the index, so after the restart every record is indexed.
    assert!(s.sigterm_and_wait().success());
    s.restart();
    let (found, pages) = search_all(
        &s,
        &ep.slug,
        &ep.sandbox_key,
        "ABC THE",
        30,
        &[],
        "dense query, rare phrase",
    );
    let mut expected = rare_ids.clone();
    expected.sort_unstable_by(|a, b| b.cmp(a));
    let got: Vec<String> = found.iter().map(id_of).collect();
    assert_eq!(got, expected, "every rare match, newest first");
    assert_eq!(pages, 1, "10 matches fit one page of 30");
}
