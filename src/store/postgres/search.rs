//! Search on PostgreSQL: the records that contain the folded query (`records.folded LIKE`),
//! newest first, found in one of two ways chosen by how often the query matches:
//!
//! - **Walking** the newest records in id order, a bounded step at a time, testing each: cheap
//!   for a query many records match, whose page fills within a few thousand rows.
//! - **The trigram index** (`gin_trgm_ops` on `folded`): cheap for a query few records match,
//!   but its bitmap scan fetches every candidate in the id range before it can order them, so
//!   a query that one record in a hundred matches fetched 9,000 rows of 1M for a page (80-160
//!   ms) where a walk reads 3,500 (3-6 ms).
//!
//! For a query of three characters, one trigram, the planner cannot tell the two apart (its
//! estimate for `LIKE '%ump%'` is a guess): such a search walks first and keeps walking while
//! at least one row in [`DENSE_ENOUGH`] matches; once a step finds fewer, the rest of the range
//! is asked of the index. A longer query is planned by the planner ([`WALKED_UP_TO_CHARS`]).
//!
//! Each statement runs under a time limit inside a savepoint: a query the index cannot narrow
//! (say, made only of punctuation, which trigrams ignore) is cut off and reported
//! [`TextSearchEnd::TooSlow`], and the snapshot stays usable for the caller's bounded walk.

use tokio_postgres::error::SqlState;

use super::{PgTx, big_partition, id_bytes, id_from_bytes};
use crate::core::clock::Timestamp;
use crate::store::records::{SearchVisitor, TextSearch, TextSearchEnd};
use crate::store::{Partition, StoreError};

/// Rows fetched per statement from the index: a page needs at most 31, a visitor that rejects
/// some asks again.
const CHUNK: i64 = 64;

/// Rows of a search's first walking step; each next step walks twice as many, up to
/// [`LONGEST_WALK`]. Small, since a rare fragment pays for it before the index: about 1 ms on
/// 1M records (`zeb`, 7 matches, 1.0 ms before walking first, 2.1 ms after).
const FIRST_WALK: i64 = 500;
const LONGEST_WALK: i64 = 64_000;
/// A search keeps walking while at least one walked row in this many matches. Walking costs
/// about 1.5 µs a row, the index about 10-20 µs per candidate it fetches, all of them in the
/// range: at 1M records, walking to a page of 31 costs less than the index's fetches for
/// queries that match more than about one record in 500.
const DENSE_ENOUGH: i64 = 500;

/// The longest query that walks first: one of three characters is one trigram, which the index
/// cannot narrow beyond the trigram's own records, and whose share the planner cannot know. A
/// longer query's trigrams narrow each other, and the planner's choice served them better:
/// walking first cost rare words 1.5-2 ms more each (500 rows) and saved them nothing.
const WALKED_UP_TO_CHARS: usize = 3;

/// One walking step: of the newest `$5` records of the range, the matching ones, at most `$6`,
/// newest first, each with `hit` true, and the `$5`th record walked (the step's last, `walked`
/// = `$5`) whether it matches or not. A page of matches ends the step early, so a frequent
/// fragment reads about as many rows as it shows.
const WALK_STEP: &str = "SELECT id, updated_at, payload, hit, walked FROM ( \
         SELECT id, updated_at, payload, folded LIKE $4 AS hit, \
                row_number() OVER (ORDER BY id DESC) AS walked \
         FROM records WHERE partition = $1 AND id >= $2 AND id <= $3 \
         ORDER BY id DESC LIMIT $5) newest \
     WHERE hit OR walked = $5 ORDER BY id DESC LIMIT $6";

/// The most one statement may take before the search falls back to a bounded walk.
const STATEMENT_LIMIT_MS: u32 = 2_000;

/// `LIKE` pattern for "contains `folded_q`": its wildcards escaped, NUL (which `text` cannot
/// hold, and which the stored text has as a space) as a space.
fn contains_pattern(folded_q: &str) -> String {
    let mut pattern = String::with_capacity(folded_q.len() + 2);
    pattern.push('%');
    for c in folded_q.chars() {
        match c {
            '%' | '_' | '\\' => {
                pattern.push('\\');
                pattern.push(c);
            }
            '\0' => pattern.push(' '),
            c => pattern.push(c),
        }
    }
    pattern.push('%');
    pattern
}

fn is_timeout(err: &StoreError) -> bool {
    let StoreError::Backend(err) = err else {
        return false;
    };
    err.downcast_ref::<tokio_postgres::Error>()
        .and_then(|e| e.code())
        .is_some_and(|code| *code == SqlState::QUERY_CANCELED)
}

impl TextSearch for PgTx<'_> {
    fn search_text(
        &self,
        partition: Partition,
        folded_q: &str,
        lower: u128,
        upper: u128,
        visit: &mut SearchVisitor<'_>,
    ) -> Result<TextSearchEnd, StoreError> {
        // The statement limit below is the search's own: the snapshot may wait that much
        // longer than a request's deadline.
        self.wait_longer(std::time::Duration::from_millis(u64::from(
            STATEMENT_LIMIT_MS,
        )));
        self.execute("SAVEPOINT text_search", &[])?;
        // A time limit, and a plan made for this pattern: the generic plan of the prepared
        // statement cannot see how selective the pattern is and walks the id range instead of
        // the trigram index (p50 91 ms against 2-5 ms on 1M records).
        self.execute(
            &format!(
                "SELECT set_config('statement_timeout', '{STATEMENT_LIMIT_MS}', true), \
                 set_config('plan_cache_mode', 'force_custom_plan', true)"
            ),
            &[],
        )?;
        let searched = self.search_chunks(partition, folded_q, lower, upper, visit);
        // Undoes the time limit (and, after a timeout, the failed statement) for the reads
        // that follow in this snapshot.
        self.execute("ROLLBACK TO SAVEPOINT text_search", &[])?;
        self.execute("RELEASE SAVEPOINT text_search", &[])?;
        match searched {
            Err(err) if is_timeout(&err) => Ok(TextSearchEnd::TooSlow),
            other => other,
        }
    }
}

/// How a walking step ended.
enum WalkEnd {
    /// It walked all its rows: the lowest id walked, and how many of them matched.
    Walked { lowest: u128, matched: i64 },
    /// A page of matches ended it early: the lowest id it showed.
    Filled { lowest: u128 },
    /// The range ended first.
    RangeDone,
    /// The visitor had what it wanted.
    Stopped,
}

impl PgTx<'_> {
    /// Shows the candidates of the range newest first: a query of one trigram walks first
    /// (see the module's doc), a longer one is left to the planner.
    fn search_chunks(
        &self,
        partition: Partition,
        folded_q: &str,
        lower: u128,
        mut upper: u128,
        visit: &mut SearchVisitor<'_>,
    ) -> Result<TextSearchEnd, StoreError> {
        let pattern = contains_pattern(folded_q);
        if folded_q.chars().count() > WALKED_UP_TO_CHARS {
            return self.index_chunks(partition, &pattern, lower, upper, visit);
        }
        let mut walk = FIRST_WALK;
        loop {
            match self.walk_step(partition, &pattern, lower, upper, walk, visit)? {
                WalkEnd::RangeDone | WalkEnd::Stopped => return Ok(TextSearchEnd::Done),
                WalkEnd::Walked { lowest, .. } | WalkEnd::Filled { lowest } if lowest <= lower => {
                    return Ok(TextSearchEnd::Done);
                }
                WalkEnd::Filled { lowest } => upper = lowest - 1,
                WalkEnd::Walked { lowest, matched } => {
                    upper = lowest - 1;
                    if matched * DENSE_ENOUGH < walk {
                        break;
                    }
                    walk = (walk * 2).min(LONGEST_WALK);
                }
            }
        }
        // Sparse: the index for the rest, and no walk for it whatever the planner estimates
        // (a walk of the whole range is what the index is there to avoid).
        self.execute(
            "SELECT set_config('enable_indexscan', 'off', true), \
             set_config('enable_seqscan', 'off', true)",
            &[],
        )?;
        self.index_chunks(partition, &pattern, lower, upper, visit)
    }

    /// Walks the newest `walk` records of the range ([`WALK_STEP`]), showing the matches to
    /// `visit` until it breaks.
    fn walk_step(
        &self,
        partition: Partition,
        pattern: &str,
        lower: u128,
        upper: u128,
        walk: i64,
        visit: &mut SearchVisitor<'_>,
    ) -> Result<WalkEnd, StoreError> {
        let rows = self.query(
            WALK_STEP,
            &[
                &big_partition(partition),
                &&id_bytes(lower)[..],
                &&id_bytes(upper)[..],
                &pattern,
                &walk,
                &CHUNK,
            ],
        )?;
        let (mut matched, mut last) = (0, None);
        for row in &rows {
            let id = id_from_bytes(row.try_get(0)?)?;
            last = Some(id);
            if row.try_get::<_, bool>(3)? {
                matched += 1;
                let payload: &[u8] = row.try_get(2)?;
                if visit(id, Timestamp(row.try_get(1)?), payload).is_break() {
                    return Ok(WalkEnd::Stopped);
                }
            }
            if row.try_get::<_, i64>(4)? == walk {
                return Ok(WalkEnd::Walked {
                    lowest: id,
                    matched,
                });
            }
        }
        Ok(match last {
            Some(lowest) if rows.len() as i64 == CHUNK => WalkEnd::Filled { lowest },
            _ => WalkEnd::RangeDone,
        })
    }

    /// Asks the trigram index for the range, [`CHUNK`] rows a statement, newest first.
    fn index_chunks(
        &self,
        partition: Partition,
        pattern: &str,
        lower: u128,
        mut upper: u128,
        visit: &mut SearchVisitor<'_>,
    ) -> Result<TextSearchEnd, StoreError> {
        let lower_key = id_bytes(lower);
        while lower <= upper {
            let upper_key = id_bytes(upper);
            let rows = self.query(
                "SELECT id, updated_at, payload FROM records
                 WHERE partition = $1 AND id >= $2 AND id <= $3 AND folded LIKE $4
                 ORDER BY id DESC LIMIT $5",
                &[
                    &big_partition(partition),
                    &&lower_key[..],
                    &&upper_key[..],
                    &pattern,
                    &CHUNK,
                ],
            )?;
            let mut last = None;
            for row in &rows {
                let id = id_from_bytes(row.try_get(0)?)?;
                let updated_at = Timestamp(row.try_get(1)?);
                let payload: &[u8] = row.try_get(2)?;
                if visit(id, updated_at, payload).is_break() {
                    return Ok(TextSearchEnd::Done);
                }
                last = Some(id);
            }
            match last {
                Some(id) if rows.len() as i64 == CHUNK && id > 0 => upper = id - 1,
                _ => break,
            }
        }
        Ok(TextSearchEnd::Done)
    }
}

#[cfg(test)]
mod tests {
    use std::ops::ControlFlow;

    use super::{CHUNK, FIRST_WALK, contains_pattern};
    use crate::store::Partition;
    use crate::store::conformance::records::{apply, rid};
    use crate::store::postgres::{PgTx, test_node};
    use crate::store::records::{NewRecord, RecordWrite, TextSearch};

    #[test]
    fn walking_then_the_index_shows_every_match_once_newest_first() {
        // Newest first: CHUNK records that all match (a page ends the first step early), a
        // step of FIRST_WALK records whose last one alone matches (one in FIRST_WALK: dense
        // enough, the walk goes on), a step of twice as many whose last one alone matches (too
        // sparse: the index takes the rest), then one in seven matching, the first of them
        // right below the walk. Every match is shown once, newest first.
        let store = test_node();
        let partition = Partition::from_raw(2);
        let (chunk, walk) = (
            usize::try_from(CHUNK).unwrap(),
            usize::try_from(FIRST_WALK).unwrap(),
        );
        let total = 6 * walk;
        let first_step_end = total - chunk - walk;
        let second_step_end = first_step_end - 2 * walk;
        let matches = |n: usize| {
            n >= total - chunk
                || n == first_step_end
                || n == second_step_end
                || n == second_step_end - 1
                || (n < second_step_end && n % 7 == 0)
        };
        let records = (0..total)
            .map(|n| NewRecord {
                id: rid(1_000 + n as i64, 0),
                payload: format!(
                    "{{\"n\":{n},\"t\":\"{}\"}}",
                    if matches(n) { "x Qzk y" } else { "x qzl y" }
                )
                .into_bytes(),
            })
            .collect();
        apply(
            &store,
            &[RecordWrite::Create {
                partition,
                records,
                idempotency: None,
            }],
        );
        let expected: Vec<u128> = (0..total)
            .rev()
            .filter(|&n| matches(n))
            .map(|n| rid(1_000 + n as i64, 0).0)
            .collect();
        let tx = PgTx::read(&store).unwrap();
        let mut shown = Vec::new();
        tx.search_text(partition, "qzk", 0, u128::MAX, &mut |id, _, _| {
            shown.push(id);
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(shown, expected);
        // A range that ends inside the dense part and a visitor that stops early.
        let upper = rid(1_000 + (total - 10) as i64, 0).0;
        let mut shown = Vec::new();
        tx.search_text(partition, "qzk", 0, upper, &mut |id, _, _| {
            shown.push(id);
            if shown.len() == 5 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .unwrap();
        let below: Vec<u128> = expected
            .iter()
            .copied()
            .filter(|&id| id <= upper)
            .take(5)
            .collect();
        assert_eq!(shown, below);
    }

    #[test]
    fn wildcards_are_escaped_and_nul_is_a_space() {
        assert_eq!(contains_pattern("a%b_c\\d"), "%a\\%b\\_c\\\\d%");
        assert_eq!(contains_pattern("x\0y"), "%x y%");
    }
}
