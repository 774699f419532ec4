//! [`RequestLogStore`] on PostgreSQL: `request_log`, keyed `(partition, time, seq)` like
//! redb's `(partition, time_us, sequence)`; `seq` comes from the `request_log_ids` sequence, so
//! an entry goes after every entry appended before it.

use super::{Patience, PgStore, PgTx, big, big_partition, count, micros, row_json, to_json, unbig};
use crate::core::clock::Timestamp;
use crate::store::request_log::{
    EntryFilter, LogPage, LogPosition, PAGE_SCAN_LIMIT, RequestLogStore, StatusFilter,
};
use crate::store::{Partition, RequestLogRow, StoreError};

/// Entries deleted per transaction by a purge, so it never holds many rows for long.
const PURGE_CHUNK: usize = 10_000;

/// One page, the way redb's reads it: the entries before `($2, $3)` and at or after `$10`
/// newest first, at most
/// `$6` (`PAGE_SCAN_LIMIT` + 1) of them, numbered (`n`) and counted (`hits`: matches up to
/// and including each). Of those it returns, in order and at most `$9` (`limit` + 2), the
/// rows that decide the page: the first `$7` (`limit`) matches, every row from the `limit`-th
/// match on, and the rows numbered `$8` (`PAGE_SCAN_LIMIT`) and above. The rows left out are
/// non-matching ones a page passes over on its way to those, so reading the rows returned as
/// redb reads the whole range gives the same page, `next` included; and with the filter in
/// SQL, only those few rows leave the database. The filter's text conditions (`$11`…`$15`,
/// each `NULL` when not asked for) read the entry's JSON; an entry written before a field
/// existed lacks it and does not match it (`coalesce`: a missing field makes the condition
/// `NULL`, which must count as no match).
const PAGE: &str = "
SELECT time, seq, status, data, n FROM (
    SELECT time, seq, status, data, hit,
           row_number() OVER newest AS n,
           count(*) FILTER (WHERE hit) OVER newest AS hits
    FROM (SELECT time, seq, status, data, coalesce(
                 status BETWEEN $4 AND $5
                 AND ($11::text IS NULL OR convert_from(data, 'UTF8')::jsonb->>'code' = $11)
                 AND ($12::text IS NULL OR convert_from(data, 'UTF8')::jsonb->>'method' = $12)
                 AND ($13::text IS NULL
                      OR convert_from(data, 'UTF8')::jsonb->'holder' = $13::text::jsonb)
                 AND ($14::text IS NULL OR convert_from(data, 'UTF8')::jsonb->>'key_id' = $14)
                 AND ($15::text IS NULL
                      OR convert_from(data, 'UTF8')::jsonb->>'request_id' = $15), false) AS hit
          FROM request_log
          WHERE partition = $1 AND (time, seq) < ($2, $3) AND time >= $10
          ORDER BY time DESC, seq DESC
          LIMIT $6) AS scanned
    WINDOW newest AS (ORDER BY time DESC, seq DESC ROWS UNBOUNDED PRECEDING)
) AS counted
WHERE (hit AND hits <= $7) OR hits - hit::integer >= $7 OR n >= $8
ORDER BY time DESC, seq DESC
LIMIT $9";

/// The statuses `filter` passes, as an inclusive range of the `status` column.
fn status_range(filter: StatusFilter) -> (i32, i32) {
    match filter {
        StatusFilter::Any => (i32::MIN, i32::MAX),
        StatusFilter::Class(class) => {
            let low = i32::from(class) * 100;
            (low, low + 99)
        }
    }
}

impl RequestLogStore for PgStore {
    fn append_requests(&self, entries: &[(Partition, RequestLogRow)]) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut partitions = Vec::with_capacity(entries.len());
        let mut times = Vec::with_capacity(entries.len());
        let mut statuses = Vec::with_capacity(entries.len());
        let mut data = Vec::with_capacity(entries.len());
        for (partition, row) in entries {
            partitions.push(big_partition(*partition));
            times.push(micros(row.time));
            statuses.push(i32::from(row.status));
            data.push(to_json(row)?);
        }
        // One statement; sorting by the entries' order before `nextval` runs (PostgreSQL
        // evaluates a volatile select list after the sort) numbers them in that order.
        self.write_unit(|tx| {
            tx.execute(
                "INSERT INTO request_log (partition, time, seq, status, data)
                 SELECT partition, time, nextval('request_log_ids'), status, data
                 FROM unnest($1::bigint[], $2::bigint[], $3::integer[], $4::bytea[])
                     WITH ORDINALITY AS entry(partition, time, status, data, n)
                 ORDER BY n",
                &[&partitions, &times, &statuses, &data],
            )
        })?;
        Ok(())
    }

    fn requests_page(
        &self,
        partition: Partition,
        before: Option<LogPosition>,
        limit: usize,
        filter: &EntryFilter,
    ) -> Result<LogPage, StoreError> {
        // Without `before`, from past the newest possible position (no time or sequence
        // reaches i64::MAX).
        let (mut time, mut seq) =
            before.map_or((i64::MAX, i64::MAX), |at| (big(at.time), big(at.sequence)));
        let mut oldest = 0;
        if let Some(pinned) = filter.pinned_time().map(big) {
            oldest = pinned;
            if time > pinned {
                (time, seq) = (pinned, i64::MAX);
            }
        }
        let (low, high) = status_range(filter.status);
        let holder = filter.holder.as_ref().map(to_json).transpose()?;
        let holder = holder
            .map(String::from_utf8)
            .transpose()
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let tx = PgTx::read(self)?;
        let rows = tx.query(
            PAGE,
            &[
                &big_partition(partition),
                &time,
                &seq,
                &low,
                &high,
                &count(PAGE_SCAN_LIMIT.saturating_add(1)),
                &count(limit),
                &count(PAGE_SCAN_LIMIT),
                &count(limit.saturating_add(2)),
                &oldest,
                &filter.code,
                &filter.method,
                &holder,
                &filter.key_id,
                &filter.request_id,
            ],
        )?;
        // The rows that decide the page (see `PAGE`), numbered by their place in the scan.
        let scan = rows.iter().map(|row| {
            let n: i64 = row.try_get(4)?;
            // row_number() counts from 1.
            Ok((usize::try_from(n).unwrap_or(0), row))
        });
        LogPage::from_scan(scan, limit, filter, |row| {
            let position = LogPosition {
                time: unbig(row.try_get(0)?),
                sequence: unbig(row.try_get(1)?),
            };
            Ok((position, row_json(row, 3)?))
        })
    }

    fn purge_partition_requests(
        &self,
        partition: Partition,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let (removed, _) = self.write_unit_within(Patience::Maintenance, |tx| {
            tx.execute(
                "DELETE FROM request_log WHERE ctid = ANY(ARRAY(
                     SELECT ctid FROM request_log WHERE partition = $1 LIMIT $2))",
                &[&big_partition(partition), &count(limit)],
            )
        })?;
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }

    fn purge_requests_before(&self, cutoff: Timestamp) -> Result<usize, StoreError> {
        let mut total = 0;
        loop {
            let (removed, _) = self.write_unit_within(Patience::Maintenance, |tx| {
                tx.execute(
                    "DELETE FROM request_log WHERE ctid = ANY(ARRAY(
                         SELECT ctid FROM request_log WHERE time < $1 ORDER BY time LIMIT $2))",
                    &[&micros(cutoff), &count(PURGE_CHUNK)],
                )
            })?;
            let removed = usize::try_from(removed).unwrap_or(usize::MAX);
            total += removed;
            if removed < PURGE_CHUNK {
                return Ok(total);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Barrier;

    use super::super::test_store;
    use super::PURGE_CHUNK;
    use crate::core::clock::Timestamp;
    use crate::store::request_log::{
        EntryFilter, LogPosition, PAGE_SCAN_LIMIT, RequestLogStore, StatusFilter,
    };
    use crate::store::{Environment, KeyHolder, Partition, RequestLogRow};

    fn entry(time: i64, status: u16, request_id: String) -> RequestLogRow {
        // Errors name a code and a holder; some calls are writes.
        let failed = status >= 400;
        RequestLogRow {
            time: Timestamp(time),
            method: if time % 4 == 0 { "POST" } else { "GET" }.into(),
            route: "/v1/records".into(),
            status,
            key_id: failed.then(|| format!("key_{}", time % 2)),
            latency_us: 10,
            environment: Environment::Sandbox,
            request_id,
            code: failed.then(|| format!("code_{status}")),
            message: failed.then(|| "no".into()),
            client: Some("192.0.2.1".into()),
            holder: failed.then_some(match time % 3 {
                0 => KeyHolder::Owner,
                n => KeyHolder::Collaborator(n as u64),
            }),
            // Writes that succeeded name their record; every eighth, a batch's.
            record_id: (!failed && time % 4 == 0).then(|| format!("rec_{time}")),
            record_count: (!failed && time % 8 == 0).then_some(3),
        }
    }

    fn status(filter: StatusFilter) -> EntryFilter {
        EntryFilter {
            status: filter,
            ..EntryFilter::default()
        }
    }

    /// Every page of `partition` from the newest on, as request ids and the id of the entry
    /// `next` names (looked up in `names`).
    fn walk(
        log: &dyn RequestLogStore,
        partition: Partition,
        limit: usize,
        filter: &EntryFilter,
        names: &HashMap<(u64, u64), String>,
    ) -> Vec<(Vec<String>, Option<String>)> {
        let mut pages = Vec::new();
        let mut before = None;
        loop {
            let page = log.requests_page(partition, before, limit, filter).unwrap();
            let next = page.next.map(|at| names[&(at.time, at.sequence)].clone());
            let ids = page
                .entries
                .into_iter()
                .map(|(_, r)| r.request_id)
                .collect();
            pages.push((ids, next));
            assert!(pages.len() < 10_000, "a walk that does not end");
            match page.next {
                Some(at) => before = Some(at),
                None => return pages,
            }
        }
    }

    /// Every entry of `partition`, newest first, by position.
    fn positions(log: &dyn RequestLogStore, partition: Partition) -> Vec<(LogPosition, String)> {
        let mut all = Vec::new();
        let mut before = None;
        loop {
            let page = log
                .requests_page(partition, before, 1000, &EntryFilter::default())
                .unwrap();
            all.extend(page.entries.into_iter().map(|(at, r)| (at, r.request_id)));
            match page.next {
                Some(at) => before = Some(at),
                None => return all,
            }
        }
    }

    fn names(all: &[(LogPosition, String)]) -> HashMap<(u64, u64), String> {
        all.iter()
            .map(|(at, id)| ((at.time, at.sequence), id.clone()))
            .collect()
    }

    #[test]
    fn every_field_of_an_entry_reads_back_from_both_stores() {
        let dir = tempfile::tempdir().unwrap();
        let redb =
            crate::store::redb::RedbStore::open_request_log(&dir.path().join("r.redb"), 1 << 20)
                .unwrap();
        let pg = test_store();
        let partition = Partition::from_raw(11);
        // A refused call, a single write and a batch (the last two name their records).
        let rows: Vec<RequestLogRow> = [(1_000_003, 403), (1_000_004, 202), (1_000_008, 202)]
            .into_iter()
            .map(|(time, status)| entry(time, status, format!("rb-{time}")))
            .collect();
        assert!(rows[1].record_id.is_some() && rows[2].record_count.is_some());
        let entries: Vec<_> = rows.iter().map(|row| (partition, row.clone())).collect();
        let log: [&dyn RequestLogStore; 2] = [&redb, &pg];
        for log in log {
            log.append_requests(&entries).unwrap();
            let page = log
                .requests_page(partition, None, 10, &EntryFilter::default())
                .unwrap();
            let read: Vec<RequestLogRow> = page.entries.into_iter().map(|(_, r)| r).rev().collect();
            assert_eq!(read, rows);
        }
    }

    #[test]
    fn pages_are_the_pages_redb_reads() {
        // The same log in both stores; the positions differ (redb numbers each time's entries
        // from 1, PostgreSQL from one sequence), the pages must not.
        let dir = tempfile::tempdir().unwrap();
        let redb =
            crate::store::redb::RedbStore::open_request_log(&dir.path().join("r.redb"), 1 << 20)
                .unwrap();
        let pg = test_store();
        let total = PAGE_SCAN_LIMIT + 300;
        let mut entries = Vec::new();
        for i in 0..total {
            // 5xx only among the oldest and newest hundred: a filtered page in between reads
            // the scan limit and ends early.
            let edge = i < 100 || i >= total - 100;
            let status = match i {
                _ if edge && i % 10 == 0 => 503,
                _ if i % 3 == 0 => 404,
                _ if i % 50 == 0 => 301,
                _ => 200,
            };
            // Three entries per time, so positions within one time matter.
            let time = 1_000_000 + (i / 3) as i64;
            entries.push((
                Partition::from_raw(7),
                entry(time, status, format!("r7-{i}")),
            ));
            if i % 40 == 0 {
                entries.push((Partition::from_raw(6), entry(time, 200, format!("r6-{i}"))));
                entries.push((Partition::from_raw(8), entry(time, 500, format!("r8-{i}"))));
            }
        }
        for batch in entries.chunks(97) {
            redb.append_requests(batch).unwrap();
            pg.append_requests(batch).unwrap();
        }
        for partition in [6, 7, 8, 9].map(Partition::from_raw) {
            let from_redb = positions(&redb, partition);
            let from_pg = positions(&pg, partition);
            let ids = |all: &[(LogPosition, String)]| -> Vec<String> {
                all.iter().map(|(_, id)| id.clone()).collect()
            };
            assert_eq!(ids(&from_pg), ids(&from_redb), "partition {partition}");
        }
        let redb_names = names(&positions(&redb, Partition::from_raw(7)));
        let pg_names = names(&positions(&pg, Partition::from_raw(7)));
        assert_eq!(pg_names.len(), total);
        let filters = [
            status(StatusFilter::Any),
            status(StatusFilter::Class(2)),
            status(StatusFilter::Class(3)),
            status(StatusFilter::Class(4)),
            status(StatusFilter::Class(5)),
            status(StatusFilter::Class(1)),
            EntryFilter {
                code: Some("code_503".into()),
                ..EntryFilter::default()
            },
            EntryFilter {
                method: Some("POST".into()),
                status: StatusFilter::Class(4),
                ..EntryFilter::default()
            },
            EntryFilter {
                holder: Some(KeyHolder::Collaborator(2)),
                ..EntryFilter::default()
            },
            EntryFilter {
                holder: Some(KeyHolder::Owner),
                key_id: Some("key_1".into()),
                ..EntryFilter::default()
            },
            EntryFilter {
                request_id: Some("r7-150".into()),
                ..EntryFilter::default()
            },
        ];
        for filter in &filters {
            for limit in [0, 1, 7, 50, 1000, 6000] {
                if limit == 1 && *filter == EntryFilter::default() {
                    continue;
                }
                let expected = walk(&redb, Partition::from_raw(7), limit, filter, &redb_names);
                let got = walk(&pg, Partition::from_raw(7), limit, filter, &pg_names);
                for (n, (got, expected)) in got.iter().zip(&expected).enumerate() {
                    assert_eq!(got, expected, "{filter:?}, limit {limit}, page {n}");
                }
                assert_eq!(got.len(), expected.len(), "{filter:?}, limit {limit}");
            }
        }
        // The 5xx page that meets the scan limit ends early, with where to read on.
        let page = pg
            .requests_page(
                Partition::from_raw(7),
                None,
                1000,
                &status(StatusFilter::Class(5)),
            )
            .unwrap();
        assert_eq!(page.entries.len(), 10);
        assert!(page.next.is_some());
    }

    #[test]
    fn a_request_id_with_its_time_is_found_past_the_scan_limit() {
        let dir = tempfile::tempdir().unwrap();
        let redb =
            crate::store::redb::RedbStore::open_request_log(&dir.path().join("r.redb"), 1 << 20)
                .unwrap();
        let pg = test_store();
        let at = |i: usize| Timestamp(1_000_000 + i as i64 * 10);
        let ids: Vec<String> = (0..PAGE_SCAN_LIMIT + 50)
            .map(|i| crate::core::ids::new_request_id(at(i)))
            .collect();
        let entries: Vec<_> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (Partition::from_raw(3), entry(at(i).0, 200, id.clone())))
            .collect();
        for batch in entries.chunks(1000) {
            redb.append_requests(batch).unwrap();
            pg.append_requests(batch).unwrap();
        }
        let log: [&dyn RequestLogStore; 2] = [&redb, &pg];
        for log in log {
            // The oldest entry, beyond the scan limit from the newest.
            let filter = EntryFilter {
                request_id: Some(ids[0].clone()),
                ..EntryFilter::default()
            };
            let page = log
                .requests_page(Partition::from_raw(3), None, 10, &filter)
                .unwrap();
            let found: Vec<&str> = page
                .entries
                .iter()
                .map(|(_, r)| r.request_id.as_str())
                .collect();
            assert_eq!(found, [ids[0].as_str()]);
            assert_eq!(page.next, None);
            // From a cursor past it, or in another partition, nothing.
            let (position, _) = page.entries[0];
            let none = log
                .requests_page(Partition::from_raw(3), Some(position), 10, &filter)
                .unwrap();
            assert!(none.entries.is_empty() && none.next.is_none());
            assert!(
                log.requests_page(Partition::from_raw(4), None, 10, &filter)
                    .unwrap()
                    .entries
                    .is_empty()
            );
            // An id without a time is looked for in the bounded scan only.
            let filter = EntryFilter {
                request_id: Some("req_0f3k9x2m4n8p1q7r".into()),
                ..EntryFilter::default()
            };
            let page = log
                .requests_page(Partition::from_raw(3), None, 10, &filter)
                .unwrap();
            assert!(page.entries.is_empty());
            assert!(page.next.is_some(), "the scan limit ends the page");
        }
    }

    #[test]
    fn entries_of_one_time_keep_their_order_within_and_across_appends() {
        let pg = test_store();
        let batch = |from: usize| -> Vec<(Partition, RequestLogRow)> {
            (from..from + 3)
                .map(|i| (Partition::from_raw(1), entry(500, 200, format!("e{i}"))))
                .collect()
        };
        pg.append_requests(&batch(0)).unwrap();
        pg.append_requests(&[]).unwrap();
        pg.append_requests(&batch(3)).unwrap();
        let any = EntryFilter::default();
        let page = pg
            .requests_page(Partition::from_raw(1), None, 4, &any)
            .unwrap();
        let ids: Vec<&str> = page
            .entries
            .iter()
            .map(|(_, r)| r.request_id.as_str())
            .collect();
        assert_eq!(ids, ["e5", "e4", "e3", "e2"]);
        // `before` is exclusive; the last page has no `next`.
        let rest = pg
            .requests_page(Partition::from_raw(1), page.next, 4, &any)
            .unwrap();
        let ids: Vec<&str> = rest
            .entries
            .iter()
            .map(|(_, r)| r.request_id.as_str())
            .collect();
        assert_eq!(ids, ["e1", "e0"]);
        assert!(rest.next.is_none());
        // A page that ends exactly at the oldest entry has no `next` either.
        let exact = pg
            .requests_page(Partition::from_raw(1), None, 6, &any)
            .unwrap();
        assert_eq!(exact.entries.len(), 6);
        assert!(exact.next.is_none());
    }

    #[test]
    fn concurrent_appends_all_land_in_their_order() {
        let pg = test_store();
        const BATCHES: usize = 30;
        let barrier = Barrier::new(2);
        std::thread::scope(|scope| {
            for node in 0..2 {
                let (pg, barrier) = (&pg, &barrier);
                scope.spawn(move || {
                    barrier.wait();
                    for b in 0..BATCHES {
                        let batch: Vec<_> = (0..5)
                            .map(|i| {
                                (
                                    Partition::from_raw(1),
                                    entry(700, 200, format!("n{node}-{}", b * 5 + i)),
                                )
                            })
                            .collect();
                        pg.append_requests(&batch).unwrap();
                    }
                });
            }
        });
        let all = positions(&pg, Partition::from_raw(1));
        assert_eq!(all.len(), 2 * BATCHES * 5);
        for node in 0..2 {
            // Newest first: each node's entries count down.
            let mine: Vec<String> = all
                .iter()
                .map(|(_, id)| id.clone())
                .filter(|id| id.starts_with(&format!("n{node}-")))
                .collect();
            let expected: Vec<String> = (0..BATCHES * 5)
                .rev()
                .map(|i| format!("n{node}-{i}"))
                .collect();
            assert_eq!(mine, expected);
        }
    }

    #[test]
    fn purges_remove_older_entries_of_every_partition_in_chunks() {
        let pg = test_store();
        // More old entries than one chunk.
        let old: Vec<_> = (0..PURGE_CHUNK + 10)
            .map(|i| {
                (
                    Partition::from_raw((i % 3) as u64),
                    entry(100 + (i % 50) as i64, 200, format!("o{i}")),
                )
            })
            .collect();
        pg.append_requests(&old).unwrap();
        let new: Vec<_> = (0..3u64)
            .map(|p| (Partition::from_raw(p), entry(150, 200, format!("n{p}"))))
            .collect();
        pg.append_requests(&new).unwrap();
        // Older than the cutoff, not at it.
        assert_eq!(pg.purge_requests_before(Timestamp(100)).unwrap(), 0);
        assert_eq!(
            pg.purge_requests_before(Timestamp(150)).unwrap(),
            PURGE_CHUNK + 10
        );
        for p in 0..3 {
            let left: Vec<String> = positions(&pg, Partition::from_raw(p))
                .into_iter()
                .map(|(_, id)| id)
                .collect();
            assert_eq!(left, [format!("n{p}")]);
        }
        assert_eq!(pg.purge_requests_before(Timestamp(151)).unwrap(), 3);
    }
}
