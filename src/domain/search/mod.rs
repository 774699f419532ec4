//! Search: case-insensitive substring match over a record's payload text.
//!
//! *Payload text* is the stored JSON of the payload (see `records`): compact, numbers as sent,
//! keys in the caller's order, strings unescaped. A record matches `q` when its folded payload
//! text contains the folded `q` ([`fold_case`]: per-character lower case). Keys, numbers and
//! punctuation count, so `132` finds `{"n":41329}` and a long id is found by its digits.
//!
//! How a search stays exact while the index lags behind writes:
//!
//! 1. Take the current index [`index::Snapshot`] (a searcher and the change-log sequence `S`
//!    it covers), then open one redb read transaction: the store as of now.
//! 2. The *tail*: every record of the partition changed after `S`, read from `CHANGES`. The
//!    snapshot knows nothing about them, so index hits for them are ignored and their current
//!    state is checked directly, newest first. During a write burst the tail can be hundreds
//!    of thousands of records long: one call checks at most [`MAX_SCANNED`] of them, and
//!    none once they alone fill the page; it then answers for the ids down to the last one it
//!    checked and no further (`next_cursor` continues below).
//! 3. Index hits outside the tail (and above where the tail check stopped), newest first, in
//!    rounds until enough are found.
//! 4. **redb decides:** every candidate is read from the store and kept only if it exists and
//!    its current payload really contains `q`. A stale index entry can never leak.
//!
//! A query whose rarest trigram is in a large share of the records ([`DENSE_SHARE`]) may match
//! densely: walking the store newest first then finds a page after a few records, sooner than
//! collecting every index match in time order (the plan PostgreSQL picks for such queries
//! too; tantivy would have to verify every one of tens of thousands of phrase matches). The
//! walk allocates nothing per record ([`matcher`]), is bounded by what a page needs at that
//! density ([`WALK_SLACK`], at most [`DENSE_SCAN`]) and gives up after a short probe when the
//! query is far sparser ([`PROBE_EXPECTED`]); if it has not filled the page, the index takes
//! over below the part it walked.
//!
//! While the index is being rebuilt there is no snapshot and the partition is scanned in the
//! store instead. Either way the work of one call is bounded: when the bound is reached the
//! page may hold fewer than `limit` records and `next_cursor` continues from where it stopped.

pub mod index;
mod matcher;
/// Public for the fuzz targets, which check that a query's trigrams are found in every text
/// that contains it.
pub mod tokenizer;

use std::collections::HashMap;
use std::time::Duration;

use redb::ReadOnlyTable;

use crate::core::clock::{Timestamp, parse_date_or_rfc3339};
use crate::core::cursor::{self, CursorKind, Position};
use crate::core::ids::RecordId;
use crate::domain::error::{Error, Result};
use crate::domain::records::{PageTail, Pagination, RecordsBody};
use crate::store::{CHANGES, RECORDS, RedbStore, decode_record, time_key};
pub use index::SearchIndex;
use matcher::Matcher;
pub use tokenizer::{fold_case, fold_case_into, payload_text};

pub const LIMIT_DEFAULT: usize = 10;
pub const LIMIT_MAX: usize = 30;
const Q_MIN_CHARS: usize = 3;
const Q_MAX_CHARS: usize = 200;
const DEFAULT_WINDOW: Duration = Duration::from_secs(30 * 86_400);
/// Most index rounds in one call.
const MAX_INDEX_ROUNDS: usize = 8;
/// Most records one call reads from the store to scan it (while the index is rebuilt) or to
/// check the unindexed tail.
const MAX_SCANNED: usize = 20_000;
/// Share of records containing a query's rarest trigram from which it may be dense.
const DENSE_SHARE: f64 = 0.02;
/// Most records the newest-first walk of a dense query examines.
const DENSE_SCAN: usize = 2_000;
/// The walk of a dense query examines this many times the records that would hold a page
/// if the query were as dense as its rarest trigram.
const WALK_SLACK: f64 = 4.0;
/// The walk of a dense query gives up after the records that would hold this many matches at
/// the density of its rarest trigram if it has found fewer than [`PROBE_MIN_FOUND`]. (At that
/// density, finding fewer than 2 where 8 are expected happens 0.3 % of the time.)
const PROBE_EXPECTED: f64 = 8.0;
const PROBE_MIN_FOUND: usize = 2;

/// A validated search request.
#[derive(Debug)]
pub struct SearchRequest {
    /// The folded query.
    q: String,
    /// Inclusive id bounds derived from the window and the cursor.
    lower: u128,
    upper: u128,
    limit: usize,
}

/// Parses `q`, `start`, `end`, `limit` and `cursor` for `partition`.
pub fn parse_request(
    params: &HashMap<String, String>,
    partition: u64,
    now: Timestamp,
) -> Result<SearchRequest> {
    let invalid = |name: &'static str, reason: &str| Error::InvalidParameter {
        name,
        reason: reason.to_string(),
    };
    let q = params
        .get("q")
        .ok_or_else(|| invalid("q", "it is required"))?;
    let chars = q.chars().count();
    if !(Q_MIN_CHARS..=Q_MAX_CHARS).contains(&chars) {
        return Err(invalid(
            "q",
            &format!("it must be {Q_MIN_CHARS} to {Q_MAX_CHARS} characters long"),
        ));
    }
    let date = |name: &'static str, default: Timestamp| match params.get(name) {
        None => Ok(default),
        Some(text) => parse_date_or_rfc3339(text)
            .ok_or_else(|| invalid(name, "it must be a date (YYYY-MM-DD) or an RFC 3339 time")),
    };
    let start = date("start", now.minus(DEFAULT_WINDOW))?;
    let end = date("end", now)?;
    if start > end {
        return Err(invalid("start", "it is after `end`"));
    }
    let limit = cursor::limit_param(params, LIMIT_DEFAULT, LIMIT_MAX)?;
    let lower = u128::from(time_key(start)) << 64;
    let mut upper = (u128::from(time_key(end)) << 64) | u128::from(u64::MAX);
    if let Some(text) = params.get("cursor") {
        let pos = cursor::parse(CursorKind::Search, partition, text)?;
        upper = upper.min(pos.tiebreak.saturating_sub(1));
        if pos.tiebreak == 0 {
            upper = 0;
        }
    }
    Ok(SearchRequest {
        q: fold_case(q),
        lower,
        upper,
        limit,
    })
}

/// Runs a search in partition `p`; see the module docs for how it stays exact.
pub fn search(
    store: &RedbStore,
    index: &SearchIndex,
    p: u64,
    request: &SearchRequest,
) -> Result<String> {
    search_within(store, index, p, request, MAX_SCANNED)
}

/// [`search`] with `budget` as the most records read from the store by a scan or from the
/// unindexed tail (tests use small budgets to reach the bounds with few records).
fn search_within(
    store: &RedbStore,
    index: &SearchIndex,
    p: u64,
    request: &SearchRequest,
    budget: usize,
) -> Result<String> {
    let SearchRequest {
        q,
        lower,
        upper,
        limit,
    } = request;
    if lower > upper {
        return page(p, Vec::new(), None);
    }
    let snapshot = index.snapshot();
    let txn = store.read()?;
    let records = txn.open_table(RECORDS)?;
    let want = limit + 1;

    let mut matcher = Matcher::new(q);
    let Some(view) = &snapshot.view else {
        return scan_store(&records, p, &mut matcher, *lower, *upper, *limit, budget);
    };
    let mut upper = *upper;
    let mut found: Vec<(u128, Vec<u8>)> = Vec::new();
    let share = index
        .rarest_share(view, q)
        .map_err(|e| Error::Internal(e.to_string()))?;
    if share >= DENSE_SHARE {
        // The store is exact on its own: whatever this walk covers needs no index. The walk
        // is sized for the densest the query can be, and gives up early when the first
        // records show it far sparser than that (a rare word made of common trigrams).
        let budget = ((WALK_SLACK * want as f64 / share) as usize).min(DENSE_SCAN);
        let probe = (PROBE_EXPECTED / share) as usize;
        let walk = walk_store(
            &records,
            p,
            &mut matcher,
            *lower,
            upper,
            want,
            |examined, found| examined == budget || (examined == probe && found < PROBE_MIN_FOUND),
        )?;
        found = walk.found;
        match walk.stopped_above {
            Some(stop) if found.len() < want => upper = stop - 1,
            _ => {
                let next = (found.len() > *limit).then(|| found[*limit - 1].0);
                found.truncate(*limit);
                return page(p, found, next);
            }
        }
    }

    // The tail: records changed after the snapshot, checked against the store directly,
    // newest first. Its length is how far the index is behind, which is unbounded during a
    // write burst, so at most `budget` of them are read: if that is not all, or once they
    // alone fill the page, this call answers only for ids at or above `tail_bound`, and asks
    // the index about those ids only.
    let mut tail = Vec::new();
    for entry in txn.open_table(CHANGES)?.range(snapshot.position + 1..)? {
        let (_, change) = entry?;
        let (partition, id) = change.value();
        if partition == p && (*lower..=upper).contains(&id) {
            tail.push(id);
        }
    }
    tail.sort_unstable_by(|a, b| b.cmp(a));
    tail.dedup();
    let from_walk = found.len();
    let mut tail_bound = None;
    for (checked, &id) in tail.iter().enumerate() {
        if checked == budget || found.len() - from_walk == want {
            // Every tail id above this one has been checked, and no other lies between.
            tail_bound = Some(id.saturating_add(1));
            break;
        }
        if let Some(view) = matching(&records, p, id, &mut matcher)? {
            found.push((id, view));
        }
    }
    let lower = tail_bound.map_or(*lower, |bound| bound.max(*lower));
    let in_tail = |id: &u128| tail.binary_search_by(|probe| id.cmp(probe)).is_ok();

    // Index hits outside the tail, newest first, until `want` of them are confirmed. A
    // trigram of `q` in no indexed record (share 0) means the index holds no match at all.
    let mut from_index = from_walk;
    let mut round_upper = upper;
    let mut stopped_at = tail_bound;
    let rounds = if share > 0.0 { MAX_INDEX_ROUNDS } else { 0 };
    for round in 0..rounds {
        let hits = index
            .query(view, p, q, lower, round_upper, want - from_index + 8)
            .map_err(|e| Error::Internal(e.to_string()))?;
        for &id in &hits.ids {
            if in_tail(&id) {
                continue;
            }
            if let Some(view) = matching(&records, p, id, &mut matcher)? {
                found.push((id, view));
                from_index += 1;
            }
        }
        if from_index >= want || hits.covered_down_to <= lower {
            break;
        }
        round_upper = hits.covered_down_to - 1;
        if round + 1 == MAX_INDEX_ROUNDS {
            // Everything at or above `covered_down_to` has been looked at; continue there.
            stopped_at = Some(hits.covered_down_to);
            break;
        }
    }
    found.sort_unstable_by_key(|(id, _)| std::cmp::Reverse(*id));
    if let Some(bound) = stopped_at {
        found.retain(|(id, _)| *id >= bound);
        if found.len() <= *limit {
            return page(p, found, Some(bound));
        }
    }
    let next = (found.len() > *limit).then(|| found[*limit - 1].0);
    found.truncate(*limit);
    page(p, found, next)
}

/// What a newest-first walk of the store found.
struct Walk {
    /// Matches, newest first.
    found: Vec<(u128, Vec<u8>)>,
    /// `Some(id)` when the walk stopped early: every record at or above `id` was examined.
    stopped_above: Option<u128>,
}

/// Walks the partition newest first until `want` matches, or until `stop(examined, found)`
/// says so (a budget of records, or a query turning out sparser than expected).
fn walk_store(
    records: &ReadOnlyTable<(u64, u128), &'static [u8]>,
    p: u64,
    matcher: &mut Matcher,
    lower: u128,
    upper: u128,
    want: usize,
    stop: impl Fn(usize, usize) -> bool,
) -> Result<Walk> {
    let mut found = Vec::new();
    for (examined, entry) in records.range((p, lower)..=(p, upper))?.rev().enumerate() {
        let (key, value) = entry?;
        let id = key.value().1;
        if found.len() == want || stop(examined, found.len()) {
            return Ok(Walk {
                found,
                stopped_above: Some(id + 1),
            });
        }
        if let Some(view) = copy_if_matching(value.value(), matcher)? {
            found.push((id, view));
        }
    }
    Ok(Walk {
        found,
        stopped_above: None,
    })
}

/// Answers from the store alone (while the index is rebuilt), `budget` records at most.
fn scan_store(
    records: &ReadOnlyTable<(u64, u128), &'static [u8]>,
    p: u64,
    matcher: &mut Matcher,
    lower: u128,
    upper: u128,
    limit: usize,
    budget: usize,
) -> Result<String> {
    let Walk {
        mut found,
        stopped_above,
    } = walk_store(
        records,
        p,
        matcher,
        lower,
        upper,
        limit + 1,
        |examined, _| examined == budget,
    )?;
    if found.len() > limit {
        let next = found[limit - 1].0;
        found.truncate(limit);
        return page(p, found, Some(next));
    }
    // Fewer than a page: the next page starts below what was examined, if anything is left.
    page(p, found, stopped_above)
}

/// The record if it exists in the partition and its payload text contains `q`.
fn matching(
    records: &ReadOnlyTable<(u64, u128), &'static [u8]>,
    p: u64,
    id: u128,
    matcher: &mut Matcher,
) -> Result<Option<Vec<u8>>> {
    match records.get((p, id))? {
        Some(value) => copy_if_matching(value.value(), matcher),
        None => Ok(None),
    }
}

/// A copy of the stored value if its payload text contains `q`.
fn copy_if_matching(value: &[u8], matcher: &mut Matcher) -> Result<Option<Vec<u8>>> {
    let (_, payload) = decode_record(value)?;
    Ok(matcher.matches(payload).then(|| value.to_vec()))
}

/// The JSON of a page of `found` (stored values, newest first); `next_below` is the exclusive
/// upper id bound the next page starts from.
fn page(p: u64, found: Vec<(u128, Vec<u8>)>, next_below: Option<u128>) -> Result<String> {
    let next_cursor = next_below.map(|id| {
        cursor::encode(
            CursorKind::Search,
            p,
            Position {
                time: (id >> 64) as u64,
                tiebreak: id,
            },
        )
    });
    let mut body = RecordsBody::new(found.len());
    for (id, value) in &found {
        let (updated_at, payload) = decode_record(value)?;
        body.push(RecordId(*id), updated_at, payload)?;
    }
    body.finish(&PageTail {
        pagination: Pagination { next_cursor },
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use serde_json::Value;

    use super::*;
    use crate::core::ids::RecordId;
    use crate::store::{LAST_CHANGE_SEQ, META, encode_record, read_counter, write_counter};

    /// The searched partition, and another whose records must never show up.
    const P: u64 = 2;
    const OTHER: u64 = 3;
    const WORDS: [&str; 6] = ["zebra", "horse", "gamma", "delta", "omega", "Ärger"];

    /// Applies changes as the ingest writer does, in one commit: the record row (`None`
    /// deletes it) and an entry in the change log.
    fn write(store: &RedbStore, changes: &[(u64, u128, Option<String>)]) {
        let txn = store.write().expect("write transaction");
        let mut seq = read_counter(&txn.open_table(META).expect("meta"), LAST_CHANGE_SEQ)
            .expect("change counter");
        {
            let mut records = txn.open_table(RECORDS).expect("records");
            let mut log = txn.open_table(CHANGES).expect("changes");
            for (p, id, payload) in changes {
                match payload {
                    Some(text) => {
                        let updated = Timestamp((id >> 64) as i64);
                        let value = encode_record(updated, text.as_bytes());
                        records.insert((*p, *id), value.as_slice()).expect("insert");
                    }
                    None => {
                        records.remove((*p, *id)).expect("remove");
                    }
                }
                seq += 1;
                log.insert(seq, (*p, *id)).expect("log");
            }
        }
        write_counter(&txn, LAST_CHANGE_SEQ, seq).expect("counter");
        txn.commit().expect("commit");
    }

    fn payload(rng: &mut StdRng, n: usize, extra: &str) -> String {
        let a = WORDS[rng.random_range(0..WORDS.len())];
        let b = WORDS[rng.random_range(0..WORDS.len())];
        format!(r#"{{"n":{n},"text":"{a} and {b}","tag":"{extra}"}}"#)
    }

    /// Record ids created at `micros`, with random low bits as `RecordId::generate` makes.
    fn id_at(rng: &mut StdRng, micros: u128) -> u128 {
        (micros << 64) | u128::from(rng.random::<u64>())
    }

    /// Every record of `P` containing `q`, newest first, by reading the whole partition.
    fn brute_force(store: &RedbStore, q: &str) -> Vec<String> {
        let q = fold_case(q);
        let txn = store.read().expect("read");
        let records = txn.open_table(RECORDS).expect("records");
        let mut ids = Vec::new();
        for entry in records.range((P, 0)..=(P, u128::MAX)).expect("range").rev() {
            let (key, value) = entry.expect("entry");
            let (_, payload) = decode_record(value.value()).expect("record");
            if fold_case(&String::from_utf8_lossy(payload)).contains(&q) {
                ids.push(RecordId(key.value().1).to_string());
            }
        }
        ids
    }

    /// Pages through a search to its end; returns every id and the first page's JSON.
    fn search_all(
        store: &RedbStore,
        index: &SearchIndex,
        q: &str,
        limit: usize,
        budget: usize,
    ) -> (Vec<String>, Value) {
        let now = Timestamp(1_900_000_000 * 1_000_000);
        let mut params = HashMap::from([
            ("q".to_string(), q.to_string()),
            ("start".to_string(), "2000-01-01".to_string()),
            ("limit".to_string(), limit.to_string()),
        ]);
        let (mut ids, mut first) = (Vec::new(), None);
        for _ in 0..10_000 {
            let request = parse_request(&params, P, now).expect("valid request");
            let text = search_within(store, index, P, &request, budget).expect("search");
            let page: Value = serde_json::from_str(&text).expect("JSON page");
            let data = page["data"].as_array().expect("data");
            assert!(
                data.len() <= limit,
                "q={q:?}: {} records > limit {limit}",
                data.len()
            );
            ids.extend(
                data.iter()
                    .map(|r| r["id"].as_str().expect("id").to_string()),
            );
            let next = page["pagination"]["next_cursor"]
                .as_str()
                .map(str::to_string);
            first.get_or_insert(page);
            match next {
                Some(cursor) => params.insert("cursor".to_string(), cursor),
                None => return (ids, first.expect("a page")),
            };
        }
        panic!("q={q:?} limit {limit} budget {budget}: paging does not end");
    }

    /// A long unindexed tail (creates, replaces and deletes after the index's snapshot):
    /// with any budget, paging gives exactly the matches, newest first, with no duplicates or
    /// gaps; a call that runs out of budget answers with fewer records and a `next_cursor`.
    #[test]
    fn a_tail_longer_than_the_budget_pages_exactly() {
        let seed = rand::random::<u64>();
        let mut rng = StdRng::seed_from_u64(seed);
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Arc::new(RedbStore::open(&dir.path().join("t.redb"), 1 << 22).expect("store"));

        // Indexed: 80 records, and a few in the other partition.
        let base = 1_700_000_000_000_000u128;
        let old: Vec<u128> = (0..80).map(|i| id_at(&mut rng, base + i * 1000)).collect();
        let mut changes: Vec<_> = old
            .iter()
            .enumerate()
            .map(|(n, &id)| (P, id, Some(payload(&mut rng, n, "ancient"))))
            .collect();
        changes.extend((0..5).map(|n| {
            (
                OTHER,
                id_at(&mut rng, base + n),
                Some(payload(&mut rng, n as usize, "ancient")),
            )
        }));
        write(&store, &changes);
        let (index, notifier, indexer) =
            index::start(dir.path(), Arc::clone(&store), 0).expect("index");
        let deadline = Instant::now() + Duration::from_secs(60);
        while index.snapshot().view.is_none() || index.snapshot().position == 0 {
            assert!(Instant::now() < deadline, "the index was not built");
            std::thread::sleep(Duration::from_millis(10));
        }
        // The indexer stops: everything from here on stays in the tail.
        notifier.shutdown();
        indexer.join();

        // The tail: 150 creates (newer), replaces and deletes of old and new records, and
        // writes to the other partition, in a few commits.
        let fresh: Vec<u128> = (0..150)
            .map(|i| id_at(&mut rng, base + 1_000_000 + i * 1000))
            .collect();
        for chunk in fresh.chunks(50) {
            let changes: Vec<_> = chunk
                .iter()
                .enumerate()
                .map(|(n, &id)| (P, id, Some(payload(&mut rng, n, "fresh"))))
                .collect();
            write(&store, &changes);
        }
        let mut edits = Vec::new();
        for &id in old.iter().step_by(4).chain(fresh.iter().step_by(9)) {
            let edit = if rng.random_bool(0.4) {
                None
            } else {
                Some(payload(&mut rng, 7, "edited"))
            };
            edits.push((P, id, edit));
        }
        edits.push((
            OTHER,
            id_at(&mut rng, base + 2_000_000),
            Some(payload(&mut rng, 1, "fresh")),
        ));
        write(&store, &edits);

        for q in [
            "zebra", "ärger", "omega", "fresh", "ancient", "edited", "nomatchx", r#""n":1"#,
        ] {
            let expected = brute_force(&store, q);
            for (limit, budget) in [
                (1, 1),
                (3, 2),
                (10, 7),
                (4, 40),
                (30, 1000),
                (10, MAX_SCANNED),
            ] {
                let (ids, _) = search_all(&store, &index, q, limit, budget);
                assert_eq!(
                    ids, expected,
                    "seed {seed}: q={q:?} limit {limit} budget {budget}"
                );
            }
        }
        // The bound at work: with a budget of 5, a query with no match answers at once with
        // an empty page and a cursor below the part of the tail it checked.
        let (ids, first) = search_all(&store, &index, "nomatchx", 10, 5);
        assert!(ids.is_empty());
        assert_eq!(first["data"].as_array().map(Vec::len), Some(0));
        assert!(first["pagination"]["next_cursor"].is_string(), "{first}");
    }
}
