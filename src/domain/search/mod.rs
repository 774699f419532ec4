//! Search: case-insensitive substring match over a record's payload text.
//!
//! *Payload text* is the stored JSON of the payload (see `records`): compact, numbers as sent,
//! keys in the caller's order, strings unescaped. A record matches `q` when its folded payload
//! text contains the folded `q` ([`fold_case`]: per-character lower case). Keys, numbers and
//! punctuation count, so `132` finds `{"n":41329}` and a long id is found by its digits.
//!
//! How a search stays exact while the index lags behind writes:
//!
//! 1. Take the current index [`Snapshot`] (a searcher and the change-log sequence `S` it
//!    covers), then one read snapshot of the store: the store as of now.
//! 2. The *tail*: every record of the partition changed after `S`, read from the change log
//!    after the store's snapshot was taken, so it holds every change that snapshot has. The
//!    index knows nothing about them, so index hits for them are ignored and their current
//!    state is checked directly, newest first. During a write burst the tail can be hundreds
//!    of thousands of records long: one call checks at most [`MAX_SCANNED`] of them, and
//!    none once they alone fill the page; it then answers for the ids down to the last one it
//!    checked and no further (`next_cursor` continues below).
//! 3. Index hits outside the tail (and above where the tail check stopped), newest first, in
//!    rounds until enough are found.
//! 4. **The store decides:** every candidate is read from the store and kept only if it
//!    exists and its current payload really contains `q`. A stale index entry can never leak.
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
//! While the index is being rebuilt there is no snapshot, and a query made only of stop
//! trigrams (see [`tokenizer`]) gets nothing from it: the partition is scanned in the store
//! instead. Either way the work of one call is bounded: when the bound is reached the
//! page may hold fewer than `limit` records and `next_cursor` continues from where it stopped.

pub mod index;
mod matcher;
/// Public for the fuzz targets, which check that a query's trigrams are found in every text
/// that contains it.
pub mod tokenizer;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::time::Duration;

use crate::core::clock::{Timestamp, parse_date_or_rfc3339};
use crate::core::cursor::{self, CursorKind, Position};
use crate::core::ids::RecordId;
use crate::domain::error::{Error, Result};
use crate::domain::records::{PageTail, Pagination, RecordsBody};
use crate::store::records::{TextSearch, TextSearchEnd};
use crate::store::{Partition, ReadTx, Store, time_key};
pub use index::{ExpungeReport, Hits, IndexView, SearchIndex, Snapshot};
pub use matcher::Matcher;
pub use tokenizer::{fold_case, fold_case_into, payload_text};

pub const LIMIT_DEFAULT: usize = 10;
pub const LIMIT_MAX: usize = 30;
/// The length of a query `q`, in characters (the OpenAPI document says these too).
pub const Q_MIN_CHARS: usize = 3;
pub const Q_MAX_CHARS: usize = 200;
const DEFAULT_WINDOW: Duration = Duration::from_secs(30 * 86_400);
/// Most index rounds in one call.
const MAX_INDEX_ROUNDS: usize = 8;
/// Most records one call reads from the store to scan it (while the index is rebuilt) or to
/// check the unindexed tail.
pub(crate) const MAX_SCANNED: usize = 20_000;
/// Change-log entries read per call while collecting the unindexed tail.
const TAIL_CHUNK: usize = 5_000;
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
    partition: Partition,
    now: Timestamp,
) -> Result<SearchRequest> {
    let q = query_param(params)?.ok_or_else(|| Error::InvalidParameter {
        name: "q",
        reason: "it is required".into(),
    })?;
    let (lower, mut upper) = window_ids(params, Some(now.minus(DEFAULT_WINDOW)), Some(now))?;
    let limit = cursor::limit_param(params, LIMIT_DEFAULT, LIMIT_MAX)?;
    if let Some(text) = params.get("cursor") {
        let pos = cursor::parse(CursorKind::Search, partition.raw(), text)?;
        upper = upper.min(pos.tiebreak.saturating_sub(1));
        if pos.tiebreak == 0 {
            upper = 0;
        }
    }
    Ok(SearchRequest {
        q,
        lower,
        upper,
        limit,
    })
}

/// The `q` parameter, checked and folded (`None` when absent). Search and export read it
/// alike.
pub fn query_param(params: &HashMap<String, String>) -> Result<Option<String>> {
    let Some(q) = params.get("q") else {
        return Ok(None);
    };
    let chars = q.chars().count();
    if !(Q_MIN_CHARS..=Q_MAX_CHARS).contains(&chars) {
        return Err(Error::InvalidParameter {
            name: "q",
            reason: format!("it must be {Q_MIN_CHARS} to {Q_MAX_CHARS} characters long"),
        });
    }
    Ok(Some(fold_case(q)))
}

/// The window of `params`' `start` and `end` (each a date, `YYYY-MM-DD` at 00:00 UTC, or an
/// RFC 3339 time; both inclusive) as inclusive record-id bounds; an absent one is
/// `default_start` or `default_end` (`None`: unbounded). Search and export read it alike.
pub fn window_ids(
    params: &HashMap<String, String>,
    default_start: Option<Timestamp>,
    default_end: Option<Timestamp>,
) -> Result<(u128, u128)> {
    let date = |name: &'static str| {
        params
            .get(name)
            .map(|text| {
                parse_date_or_rfc3339(text).ok_or_else(|| Error::InvalidParameter {
                    name,
                    reason: "it must be a date (YYYY-MM-DD) or an RFC 3339 time".into(),
                })
            })
            .transpose()
    };
    let start = date("start")?.or(default_start);
    let end = date("end")?.or(default_end);
    if let (Some(start), Some(end)) = (start, end)
        && start > end
    {
        return Err(Error::InvalidParameter {
            name: "start",
            reason: "it is after `end`".into(),
        });
    }
    let lower = start.map_or(0, |start| u128::from(time_key(start)) << 64);
    let upper = end.map_or(u128::MAX, |end| {
        (u128::from(time_key(end)) << 64) | u128::from(u64::MAX)
    });
    Ok((lower, upper))
}

/// Runs a search in partition `p`; see the module docs for how it stays exact.
pub fn search(
    store: &dyn Store,
    index: Option<&dyn SearchIndex>,
    p: Partition,
    request: &SearchRequest,
) -> Result<String> {
    search_within(store, index, p, request, MAX_SCANNED)
}

/// The records of partition `p` with ids in `[lower, upper]` whose payload text contains the
/// folded query `q`, newest first, at most `limit`, by the rules of [`search`] (an erasure
/// finds what it removes this way).
pub fn matches(
    store: &dyn Store,
    index: Option<&dyn SearchIndex>,
    p: Partition,
    q: &str,
    (lower, upper): (u128, u128),
    limit: usize,
) -> Result<MatchPage> {
    let request = SearchRequest {
        q: q.to_string(),
        lower,
        upper,
        limit,
    };
    find_within(store, index, p, &request, MAX_SCANNED)
}

/// [`search`] with `budget` as the most records read from the store by a scan or from the
/// unindexed tail (tests use small budgets to reach the bounds with few records).
pub(crate) fn search_within(
    store: &dyn Store,
    index: Option<&dyn SearchIndex>,
    p: Partition,
    request: &SearchRequest,
    budget: usize,
) -> Result<String> {
    find_within(store, index, p, request, budget)?.json(p)
}

fn find_within(
    store: &dyn Store,
    index: Option<&dyn SearchIndex>,
    p: Partition,
    request: &SearchRequest,
    budget: usize,
) -> Result<MatchPage> {
    let SearchRequest {
        q,
        lower,
        upper,
        limit,
    } = request;
    if lower > upper {
        return page(Vec::new(), None);
    }
    // The index's state first, then the store's: every change between the two is in the tail,
    // which is read after both (see `unindexed_tail`).
    let snapshot = index.map(|index| index.snapshot());
    let read = store.read()?;
    let records = read.as_ref();
    let want = limit + 1;

    let mut matcher = Matcher::new(q);
    if let Some(text) = records.text_search() {
        return search_in_store(records, text, p, &mut matcher, request, budget);
    }
    let Some((view, snapshot)) = snapshot
        .as_ref()
        .and_then(|snapshot| Some((snapshot.view.as_ref()?, snapshot)))
    else {
        return scan_store(records, p, &mut matcher, *lower, *upper, *limit, budget);
    };
    let mut upper = *upper;
    let mut found: Vec<Found> = Vec::new();
    let Some(share) = view.rarest_share(q)? else {
        // Only stop trigrams: the index holds nothing that narrows `q` down.
        return scan_store(records, p, &mut matcher, *lower, upper, *limit, budget);
    };
    if share >= DENSE_SHARE {
        // The store is exact on its own: whatever this walk covers needs no index. The walk
        // is sized for the densest the query can be, and gives up early when the first
        // records show it far sparser than that (a rare word made of common trigrams).
        let budget = ((WALK_SLACK * want as f64 / share) as usize).min(DENSE_SCAN);
        let probe = (PROBE_EXPECTED / share) as usize;
        let walk = walk_store(
            records,
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
                let next = (found.len() > *limit).then(|| found[*limit - 1].id);
                found.truncate(*limit);
                return page(found, next);
            }
        }
    }

    // The tail: records changed after the snapshot, checked against the store directly,
    // newest first. Its length is how far the index is behind, which is unbounded during a
    // write burst, so at most `budget` of them are read: if that is not all, or once they
    // alone fill the page, this call answers only for ids at or above `tail_bound`, and asks
    // the index about those ids only.
    let tail = unindexed_tail(store, snapshot.position, p, *lower, upper)?;
    let from_walk = found.len();
    let tail_bound = check_tail(records, p, &tail, budget, want, &mut matcher, &mut found)?;
    let lower = tail_bound.map_or(*lower, |bound| bound.max(*lower));
    let in_tail = |id: &u128| tail.binary_search_by(|probe| id.cmp(probe)).is_ok();

    // Index hits outside the tail, newest first, until `want` of them are confirmed. A
    // trigram of `q` in no indexed record (share 0) means the index holds no match at all.
    let mut from_index = from_walk;
    let mut round_upper = upper;
    let mut stopped_at = tail_bound;
    let rounds = if share > 0.0 { MAX_INDEX_ROUNDS } else { 0 };
    for round in 0..rounds {
        let hits = view.query(p, q, lower, round_upper, want - from_index + 8)?;
        let candidates: Vec<u128> = hits.ids.iter().copied().filter(|id| !in_tail(id)).collect();
        let before = found.len();
        keep_matching(
            records,
            p,
            &candidates,
            &mut matcher,
            &mut found,
            usize::MAX,
        )?;
        from_index += found.len() - before;
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
    found.sort_unstable_by_key(|record| std::cmp::Reverse(record.id));
    if let Some(bound) = stopped_at {
        found.retain(|record| record.id >= bound);
        if found.len() <= *limit {
            return page(found, Some(bound));
        }
    }
    let next = (found.len() > *limit).then(|| found[*limit - 1].id);
    found.truncate(*limit);
    page(found, next)
}

/// A search answered by a store that searches its records itself (PostgreSQL): its candidates,
/// newest first, each checked here like an index hit, so the answer is exact whatever the
/// store's own matching; a query the store finds too slow is answered by a bounded walk.
fn search_in_store(
    records: &dyn ReadTx,
    text: &dyn TextSearch,
    p: Partition,
    matcher: &mut Matcher,
    request: &SearchRequest,
    budget: usize,
) -> Result<MatchPage> {
    let SearchRequest {
        q,
        lower,
        upper,
        limit,
    } = request;
    let want = limit + 1;
    let mut found: Vec<Found> = Vec::new();
    let end = text.search_text(p, q, *lower, *upper, &mut |id, updated_at, payload| {
        if matcher.matches(payload) {
            found.push(Found::copy(id, updated_at, payload));
            if found.len() == want {
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    })?;
    match end {
        TextSearchEnd::Done => {
            let next = (found.len() > *limit).then(|| found[*limit - 1].id);
            found.truncate(*limit);
            page(found, next)
        }
        TextSearchEnd::TooSlow => scan_store(records, p, matcher, *lower, *upper, *limit, budget),
    }
}

/// A record found to match: a copy of what the page shows of it.
struct Found {
    id: u128,
    updated_at: Timestamp,
    payload: Vec<u8>,
}

impl Found {
    fn copy(id: u128, updated_at: Timestamp, payload: &[u8]) -> Found {
        Found {
            id,
            updated_at,
            payload: payload.to_vec(),
        }
    }
}

/// The ids of partition `p` in `[lower, upper]` changed after `position`, newest first, each
/// once. Read after the store's snapshot was taken, it holds every change that snapshot has
/// and the index has not (and perhaps later ones, which the snapshot's check handles alike).
fn unindexed_tail(
    store: &dyn Store,
    position: u64,
    p: Partition,
    lower: u128,
    upper: u128,
) -> Result<Vec<u128>> {
    let mut tail = Vec::new();
    let mut after = position;
    loop {
        let entries = crate::store::change_log(store)?.changes_after(after, TAIL_CHUNK)?;
        tail.extend(
            entries
                .iter()
                .filter(|e| e.partition == p && (lower..=upper).contains(&e.record_id))
                .map(|e| e.record_id),
        );
        match entries.last() {
            Some(last) if entries.len() == TAIL_CHUNK => after = last.seq,
            _ => break,
        }
    }
    tail.sort_unstable_by(|a, b| b.cmp(a));
    tail.dedup();
    Ok(tail)
}

/// Checks the ids of `tail` (newest first) against the store, adding those that match to
/// `found`: at most `budget` ids, and none once `want` of them have matched. When that stops
/// it before the end of the tail, returns the bound it answers for: every tail id at or above
/// it has been checked, and no other lies between.
fn check_tail(
    records: &dyn ReadTx,
    p: Partition,
    tail: &[u128],
    budget: usize,
    want: usize,
    matcher: &mut Matcher,
    found: &mut Vec<Found>,
) -> Result<Option<u128>> {
    let checked = &tail[..tail.len().min(budget)];
    let last_kept = keep_matching(records, p, checked, matcher, found, want)?;
    let unchecked = match last_kept {
        Some(id) => checked
            .binary_search_by(|probe| id.cmp(probe))
            .map_or(checked.len(), |i| i + 1),
        None => checked.len(),
    };
    Ok(tail.get(unchecked).map(|id| id.saturating_add(1)))
}

/// Reads the records `ids` of partition `p` in order and adds those whose payload text contains
/// the query to `found`, until `most` have been added: then returns the id of the last one.
fn keep_matching(
    records: &dyn ReadTx,
    p: Partition,
    ids: &[u128],
    matcher: &mut Matcher,
    found: &mut Vec<Found>,
    most: usize,
) -> Result<Option<u128>> {
    let mut kept = 0;
    let mut last = None;
    records.visit_records(p, ids, &mut |id, updated_at, payload| {
        if !matcher.matches(payload) {
            return ControlFlow::Continue(());
        }
        found.push(Found::copy(id, updated_at, payload));
        kept += 1;
        if kept == most {
            last = Some(id);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    })?;
    Ok(last)
}

/// What a newest-first walk of the store found.
struct Walk {
    /// Matches, newest first.
    found: Vec<Found>,
    /// `Some(id)` when the walk stopped early: every record at or above `id` was examined.
    stopped_above: Option<u128>,
}

/// Walks the partition newest first until `want` matches, or until `stop(examined, found)`
/// says so (a budget of records, or a query turning out sparser than expected).
fn walk_store(
    records: &dyn ReadTx,
    p: Partition,
    matcher: &mut Matcher,
    lower: u128,
    upper: u128,
    want: usize,
    stop: impl Fn(usize, usize) -> bool,
) -> Result<Walk> {
    let mut found = Vec::new();
    let mut stopped_above = None;
    let mut examined = 0;
    records.visit_newest_first(p, lower, upper, &mut |id, updated_at, payload| {
        if found.len() == want || stop(examined, found.len()) {
            stopped_above = Some(id + 1);
            return ControlFlow::Break(());
        }
        examined += 1;
        if matcher.matches(payload) {
            found.push(Found::copy(id, updated_at, payload));
        }
        ControlFlow::Continue(())
    })?;
    Ok(Walk {
        found,
        stopped_above,
    })
}

/// Answers from the store alone (while the index is rebuilt, or for a query of stop
/// trigrams only), `budget` records at most.
fn scan_store(
    records: &dyn ReadTx,
    p: Partition,
    matcher: &mut Matcher,
    lower: u128,
    upper: u128,
    limit: usize,
    budget: usize,
) -> Result<MatchPage> {
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
        let next = found[limit - 1].id;
        found.truncate(limit);
        return page(found, Some(next));
    }
    // Fewer than a page: the next page starts below what was examined, if anything is left.
    page(found, stopped_above)
}

/// A page of `found` (newest first); `next_below` is the exclusive upper id bound the next page
/// starts from.
fn page(found: Vec<Found>, next_below: Option<u128>) -> Result<MatchPage> {
    Ok(MatchPage { found, next_below })
}

/// A page of matches, newest first.
pub struct MatchPage {
    found: Vec<Found>,
    /// The exclusive upper id bound the next page starts from; `None` on the last page.
    pub next_below: Option<u128>,
}

impl MatchPage {
    /// The ids of the matches, newest first.
    pub fn ids(&self) -> impl Iterator<Item = u128> + '_ {
        self.found.iter().map(|record| record.id)
    }

    /// The page as a search answers it, in partition `p`.
    fn json(self, p: Partition) -> Result<String> {
        let next_cursor = self.next_below.map(|id| {
            cursor::encode(
                CursorKind::Search,
                p.raw(),
                Position {
                    time: (id >> 64) as u64,
                    tiebreak: id,
                },
            )
        });
        let mut body = RecordsBody::new(self.found.len());
        for record in &self.found {
            body.push(RecordId(record.id), record.updated_at, &record.payload)?;
        }
        body.finish(&PageTail {
            pagination: Pagination { next_cursor },
        })
    }
}
