//! Search: case-insensitive substring match over a record's payload text.
//!
//! *Payload text* is the stored, normalised JSON of the payload (see `records`): compact, keys
//! in the caller's order, strings unescaped. A record matches `q` when its folded payload text
//! contains the folded `q` ([`fold_case`]: per-character lower case). Keys, numbers and
//! punctuation count, so `132` finds `{"n":41329}`.
//!
//! How a search stays exact while the index lags behind writes:
//!
//! 1. Take the current index [`index::Snapshot`] (a searcher and the change-log sequence `S`
//!    it covers), then open one redb read transaction: the store as of now.
//! 2. The *tail*: every record of the partition changed after `S`, read from `CHANGES`. The
//!    snapshot knows nothing about them, so index hits for them are ignored and their current
//!    state is checked directly.
//! 3. Index hits outside the tail, newest first, in rounds until enough are found.
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

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use redb::ReadOnlyTable;

use crate::clock::{Timestamp, parse_date_or_rfc3339};
use crate::cursor::{self, CursorKind, Position};
use crate::endpoints::DataAccess;
use crate::error::{Error, Result};
use crate::ids::RecordId;
use crate::records::{PageTail, Pagination, RecordsBody};
use crate::storage::{CHANGES, RECORDS, Store, decode_record, time_key};
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
/// Most records one call examines when it has to scan the store.
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

/// Runs a search; see the module docs for how it stays exact.
pub fn search(
    store: &Store,
    index: &SearchIndex,
    access: &DataAccess,
    request: &SearchRequest,
) -> Result<String> {
    let p = access.partition;
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
        return scan_store(
            &records,
            p,
            &mut matcher,
            *lower,
            *upper,
            *limit,
            MAX_SCANNED,
        );
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

    // The tail: records changed after the snapshot, checked against the store directly.
    let mut tail = HashSet::new();
    for entry in txn.open_table(CHANGES)?.range(snapshot.position + 1..)? {
        let (_, change) = entry?;
        let (partition, id) = change.value();
        if partition == p && (*lower..=upper).contains(&id) {
            tail.insert(id);
        }
    }
    let from_walk = found.len();
    for &id in &tail {
        if let Some(view) = matching(&records, p, id, &mut matcher)? {
            found.push((id, view));
        }
    }

    // Index hits outside the tail, newest first, until `want` of them are confirmed. A
    // trigram of `q` in no indexed record (share 0) means the index holds no match at all.
    let mut from_index = from_walk;
    let mut round_upper = upper;
    let mut stopped_at = None;
    let rounds = if share > 0.0 { MAX_INDEX_ROUNDS } else { 0 };
    for round in 0..rounds {
        let hits = index
            .query(view, p, q, *lower, round_upper, want - from_index + 8)
            .map_err(|e| Error::Internal(e.to_string()))?;
        for &id in &hits.ids {
            if tail.contains(&id) {
                continue;
            }
            if let Some(view) = matching(&records, p, id, &mut matcher)? {
                found.push((id, view));
                from_index += 1;
            }
        }
        if from_index >= want || hits.covered_down_to <= *lower {
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
        body.push(RecordId(*id), value)?;
    }
    body.finish(&PageTail {
        pagination: Pagination { next_cursor },
    })
}
