//! [`EventsStore`] on PostgreSQL: `record_events` and `record_event_trims`.
//!
//! Nodes commit ingest batches at the same time, so neither a sequence nor a time orders the
//! events the way their commits did: a transaction holding sequence 7 may commit after one
//! holding 8 is already read. An event's position is therefore `(xid, seq)`, the id of the
//! transaction that wrote it (`pg_current_xact_id()`) and its sequence, and a read only takes
//! the events of transactions below the oldest one still running in its snapshot
//! (`pg_snapshot_xmin(pg_current_snapshot())`, the transaction snapshot of the read): every one
//! of those has ended, so each transaction that commits later has an id at or above that
//! bound, and its events' positions are above every position handed out. A long transaction
//! anywhere in the database server delays the stream (it never loses or reorders an event).
//!
//! Positions are `xid << 64 | seq`. Transaction ids start at 3, so every position of this store
//! is at least `3 << 64`, and a position below that (one made by redb before `intake migrate`)
//! counts as trimmed: its reader must start again.

use super::records::{partitions_of, sql_limit};
use super::{Patience, PgStore, PgTx, big, big_partition, id_from_bytes, micros, unbig};
use crate::core::clock::Timestamp;
use crate::core::ids::RecordId;
use crate::store::endpoints::EndpointsRead;
use crate::store::events::{
    EventBounds, EventPage, EventsStore, PositionRanges, StoredEvent, kind_of_code,
};
use crate::store::{Partition, StoreError};

/// Below the first position this store can hand out (transaction id 3, the first normal one).
const FIRST_POSITION: u128 = 3 << 64;

/// The `(xid, seq)` columns of a position.
fn columns(position: u128) -> (i64, i64) {
    (big((position >> 64) as u64), big(position as u64))
}

fn position(xid: i64, seq: i64) -> u128 {
    (u128::from(unbig(xid)) << 64) | u128::from(unbig(seq))
}

/// The settled events' bound of a statement: the oldest transaction running in its snapshot.
const SETTLED: &str = "pg_snapshot_xmin(pg_current_snapshot())::text::bigint";

impl PgTx<'_> {
    fn event_trim(&self, partition: Partition) -> Result<u128, StoreError> {
        let row = self.query_opt(
            "SELECT xid, seq FROM record_event_trims WHERE partition = $1",
            &[&big_partition(partition)],
        )?;
        let trimmed = match row {
            Some(row) => position(row.try_get(0)?, row.try_get(1)?),
            None => 0,
        };
        Ok(trimmed.max(FIRST_POSITION - 1))
    }
}

impl PgTx<'_> {
    /// The positions of the transactions this read's snapshot sees committed although they are
    /// not settled yet: those from its oldest running transaction up to the first it does not
    /// see, but for those still running in it.
    fn committed_unsettled(&self) -> Result<PositionRanges, StoreError> {
        let row = self
            .query_opt(
                "SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint, \
                 ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(s) AS x ORDER BY 1) \
             FROM (SELECT pg_current_snapshot() AS s) AS snapshot",
                &[],
            )?
            .ok_or_else(|| StoreError::Corrupt("no snapshot".into()))?;
        let (xmin, xmax): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
        let running: Vec<i64> = row.try_get(2)?;
        Ok(seen_between(xmin, xmax, &running))
    }
}

/// The positions of the transactions from `xmin` up to `xmax` but those `running` (ascending).
fn seen_between(xmin: i64, xmax: i64, running: &[i64]) -> PositionRanges {
    let mut ranges = Vec::new();
    let mut from = xmin;
    for &xid in running.iter().chain([&xmax]) {
        if xid > from {
            ranges.push(position(from, 0)..position(xid, 0));
        }
        from = from.max(xid.saturating_add(1));
    }
    PositionRanges(ranges)
}

impl EventsStore for PgStore {
    fn events_after(
        &self,
        partition: Partition,
        after: u128,
        limit: usize,
        max_bytes: usize,
    ) -> Result<EventPage, StoreError> {
        let tx = PgTx::read(self)?;
        let trimmed = tx.event_trim(partition)?;
        let (xid, seq) = columns(after);
        let rows = tx.query(
            &format!(
                "SELECT e.xid, e.seq, e.kind, e.record_id, e.at, r.updated_at, r.payload \
                 FROM record_events e LEFT JOIN records r \
                     ON r.partition = e.partition AND r.id = e.record_id \
                 WHERE e.partition = $1 AND (e.xid, e.seq) > ($2, $3) AND e.xid < {SETTLED} \
                 ORDER BY e.xid, e.seq LIMIT $4"
            ),
            &[&big_partition(partition), &xid, &seq, &sql_limit(limit)],
        )?;
        let mut page = EventPage {
            events: Vec::with_capacity(rows.len()),
            trimmed,
            // The same snapshot as the events (REPEATABLE READ).
            access_version: tx.access_version()?,
        };
        let mut bytes = 0;
        for row in rows {
            if bytes >= max_bytes && !page.events.is_empty() {
                break;
            }
            let record = match row.try_get::<_, Option<i64>>(5)? {
                Some(updated_at) => {
                    let payload: Vec<u8> = row.try_get(6)?;
                    bytes += payload.len();
                    Some((Timestamp(updated_at), payload))
                }
                None => None,
            };
            let kind = u8::try_from(row.try_get::<_, i16>(2)?)
                .map_err(|_| StoreError::Corrupt("event kind".into()))?;
            page.events.push(StoredEvent {
                position: position(row.try_get(0)?, row.try_get(1)?),
                kind: kind_of_code(kind)?,
                record_id: RecordId(id_from_bytes(row.try_get(3)?)?),
                at: Timestamp(row.try_get(4)?),
                record,
            });
        }
        Ok(page)
    }

    fn event_bounds(&self, partition: Partition) -> Result<EventBounds, StoreError> {
        let tx = PgTx::read(self)?;
        let trimmed = tx.event_trim(partition)?;
        let last = tx.query_opt(
            &format!(
                "SELECT xid, seq FROM record_events WHERE partition = $1 AND xid < {SETTLED} \
                 ORDER BY xid DESC, seq DESC LIMIT 1"
            ),
            &[&big_partition(partition)],
        )?;
        let last = match last {
            Some(row) => position(row.try_get(0)?, row.try_get(1)?),
            None => 0,
        };
        Ok(EventBounds {
            head: last.max(trimmed),
            trimmed,
            committed_above_head: tx.committed_unsettled()?,
        })
    }

    fn event_partitions(&self) -> Result<Vec<Partition>, StoreError> {
        partitions_of(&PgTx::read(self)?, "record_events")
    }

    fn purge_events_before(
        &self,
        partition: Partition,
        cutoff: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let (purged, _) = self.write_unit_within(Patience::Maintenance, |tx| {
            // The trim mark rises to the highest position purged: every position above it
            // still has all its later events.
            let row = tx.query_opt(
                "WITH gone AS ( \
                     DELETE FROM record_events WHERE (partition, xid, seq) IN ( \
                         SELECT partition, xid, seq FROM record_events \
                         WHERE partition = $1 AND at < $2 ORDER BY xid, seq LIMIT $3) \
                     RETURNING xid, seq \
                 ), top AS ( \
                     SELECT xid, seq FROM gone ORDER BY xid DESC, seq DESC LIMIT 1 \
                 ), mark AS ( \
                     INSERT INTO record_event_trims (partition, xid, seq) \
                     SELECT $1, xid, seq FROM top \
                     ON CONFLICT (partition) DO UPDATE SET xid = EXCLUDED.xid, seq = EXCLUDED.seq \
                     WHERE (record_event_trims.xid, record_event_trims.seq) \
                         < (EXCLUDED.xid, EXCLUDED.seq) \
                 ) SELECT count(*) FROM gone",
                &[
                    &big_partition(partition),
                    &micros(cutoff),
                    &sql_limit(limit),
                ],
            )?;
            match row {
                Some(row) => Ok(unbig(row.try_get(0)?)),
                None => Ok(0),
            }
        })?;
        usize::try_from(purged).map_err(|_| StoreError::Corrupt("purged event count".into()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Barrier;

    use super::super::{PgStore, test_node};
    use super::{FIRST_POSITION, position, seen_between};
    use crate::core::clock::Timestamp;
    use crate::core::ids::RecordId;
    use crate::store::Partition;
    use crate::store::events::{EventsStore, PositionRanges, StoredEvent};
    use crate::store::records::{ChangeKind, NewRecord, RecordWrite, RecordsStore, plain_batch};

    fn create(store: &PgStore, partition: Partition, n: u128) {
        let write = RecordWrite::Create {
            partition,
            records: vec![NewRecord {
                id: RecordId((1_000 << 64) | n),
                payload: format!("{{\"n\":{n}}}").into_bytes(),
            }],
            idempotency: None,
        };
        store.apply_batch(&plain_batch(&[write])).unwrap();
    }

    /// The events of `partition` once `count` have settled: a test running beside this one
    /// may hold a transaction open for a moment, which holds every event back.
    fn settled(store: &PgStore, partition: Partition, count: usize) -> Vec<StoredEvent> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let events = store
                .events_after(partition, 0, 10, 1 << 20)
                .unwrap()
                .events;
            if events.len() >= count || std::time::Instant::now() > deadline {
                assert_eq!(events.len(), count);
                return events;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    #[test]
    fn no_event_is_handed_out_while_an_older_transaction_runs() {
        let store = test_node();
        let (began, release) = (Barrier::new(2), Barrier::new(2));
        let mut committed_above_head = PositionRanges::default();
        std::thread::scope(|scope| {
            let older = scope.spawn(|| {
                store.write_unit(|tx| {
                    tx.query("SELECT pg_current_xact_id()", &[])?;
                    began.wait();
                    release.wait();
                    Ok(())
                })
            });
            began.wait();
            // This batch commits while an older transaction still runs: a later commit of
            // that one could take a position below its event, so the event waits.
            create(&store, Partition::from_raw(41), 1);
            let page = store.events_after(Partition::from_raw(41), 0, 10, 1 << 20);
            let bounds = store.event_bounds(Partition::from_raw(41));
            release.wait();
            older.join().unwrap().unwrap();
            assert_eq!(page.unwrap().events, []);
            let bounds = bounds.unwrap();
            assert_eq!(bounds.head, FIRST_POSITION - 1);
            committed_above_head = bounds.committed_above_head;
        });
        let events = settled(&store, Partition::from_raw(41), 1);
        // The bounds read while it waited knew it had committed.
        assert!(committed_above_head.contains(events[0].position));
        assert!(!committed_above_head.contains(FIRST_POSITION - 1));
        assert_eq!(events[0].kind, ChangeKind::Created);
        assert_eq!(events[0].record.as_ref().unwrap().1, b"{\"n\":1}");
        assert!(events[0].position >= FIRST_POSITION);
        assert_eq!(
            store.event_bounds(Partition::from_raw(41)).unwrap().head,
            events[0].position
        );
    }

    #[test]
    fn the_committed_unsettled_are_those_seen_but_not_running() {
        let at = |xid: i64| position(xid, 0);
        assert_eq!(seen_between(10, 10, &[]), PositionRanges(vec![]));
        assert_eq!(
            seen_between(10, 20, &[10, 13, 14]),
            PositionRanges(vec![at(11)..at(13), at(15)..at(20)])
        );
        assert_eq!(
            seen_between(10, 15, &[10, 14]),
            PositionRanges(std::iter::once(at(11)..at(14)).collect())
        );
        let mut ranges = seen_between(10, 20, &[10, 13]);
        assert!(ranges.contains(at(12) + 5) && !ranges.contains(at(13) + 5));
        ranges.forget_through(at(14));
        assert_eq!(
            ranges,
            PositionRanges(std::iter::once(at(14)..at(20)).collect())
        );
        ranges.forget_through(at(20) - 1);
        assert_eq!(ranges, PositionRanges(vec![]));
    }

    #[test]
    fn purging_raises_the_trim_mark_over_what_it_removed() {
        let store = test_node();
        for n in 1..=3 {
            create(&store, Partition::from_raw(42), n);
        }
        let all = settled(&store, Partition::from_raw(42), 3);
        assert!(
            store
                .event_partitions()
                .unwrap()
                .contains(&Partition::from_raw(42))
        );
        // Every event was received at time 1000 µs (its record id's): a cutoff after it purges
        // two (the limit), then the last.
        assert_eq!(
            store
                .purge_events_before(Partition::from_raw(42), Timestamp(1_001), 2)
                .unwrap(),
            2
        );
        assert_eq!(
            store.event_bounds(Partition::from_raw(42)).unwrap().trimmed,
            all[1].position
        );
        let rest = store
            .events_after(Partition::from_raw(42), all[1].position, 10, 1 << 20)
            .unwrap();
        assert_eq!(rest.events, all[2..]);
        assert_eq!(rest.trimmed, all[1].position);
        assert_eq!(
            store
                .purge_events_before(Partition::from_raw(42), Timestamp(1_000), 10)
                .unwrap(),
            0
        );
        assert_eq!(
            store
                .purge_events_before(Partition::from_raw(42), Timestamp(1_001), 10)
                .unwrap(),
            1
        );
        let bounds = store.event_bounds(Partition::from_raw(42)).unwrap();
        assert_eq!(
            (bounds.head, bounds.trimmed),
            (all[2].position, all[2].position)
        );
        // A position of another store (redb's are below 2^64) counts as trimmed.
        assert!(store.event_bounds(Partition::from_raw(7)).unwrap().trimmed > u128::from(u64::MAX));
    }
}
