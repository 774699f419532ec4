//! [`EventsStore`] on redb: `EVENTS` and `EVENTS_TRIMMED`.
//!
//! An event's position is the sequence of its change-log entry, taken by the one writer in
//! the write transaction, so every snapshot holds a prefix of the positions: every event a
//! snapshot shows is settled.

use redb::{ReadableTable, WriteTransaction};

use super::{
    ACCESS_VERSION, EVENTS, EVENTS_TRIMMED, META, RECORDS, RedbStore, partitions_of, read_counter,
};
use crate::core::ids::RecordId;
use crate::store::events::{
    EventBounds, EventPage, EventsStore, PositionRanges, StoredEvent, kind_of_code,
};
use crate::store::{Partition, StoreError, time_from_key, time_key};

/// A position as the sequence it is on redb: a position above every sequence (one made by
/// another store) is past every event.
fn sequence(position: u128) -> u64 {
    u64::try_from(position).unwrap_or(u64::MAX)
}

fn trimmed(trims: &impl ReadableTable<u64, u64>, partition: Partition) -> Result<u128, StoreError> {
    Ok(trims
        .get(partition.raw())?
        .map_or(0, |v| u128::from(v.value())))
}

impl EventsStore for RedbStore {
    fn events_after(
        &self,
        partition: Partition,
        after: u128,
        limit: usize,
        max_bytes: usize,
    ) -> Result<EventPage, StoreError> {
        let txn = self.read()?;
        let events = txn.open_table(EVENTS)?;
        let records = txn.open_table(RECORDS)?;
        let mut page = EventPage {
            events: Vec::new(),
            trimmed: trimmed(&txn.open_table(EVENTS_TRIMMED)?, partition)?,
            access_version: read_counter(&txn.open_table(META)?, ACCESS_VERSION)?,
        };
        let Some(from) = sequence(after).checked_add(1) else {
            return Ok(page);
        };
        let mut bytes = 0;
        let mut scratch = Vec::new();
        for entry in events.range((partition.raw(), from)..=(partition.raw(), u64::MAX))? {
            if page.events.len() >= limit || (bytes >= max_bytes && !page.events.is_empty()) {
                break;
            }
            let (key, value) = entry?;
            let (kind, record_id, at) = value.value();
            let record = match records.get((partition.raw(), record_id))? {
                Some(stored) => {
                    let (updated_at, payload) = self.codec.decode(stored.value(), &mut scratch)?;
                    bytes += payload.len();
                    Some((updated_at, payload.to_vec()))
                }
                None => None,
            };
            page.events.push(StoredEvent {
                position: u128::from(key.value().1),
                kind: kind_of_code(kind)?,
                record_id: RecordId(record_id),
                at: time_from_key(at),
                record,
            });
        }
        Ok(page)
    }

    fn event_bounds(&self, partition: Partition) -> Result<EventBounds, StoreError> {
        let txn = self.read()?;
        let last = txn
            .open_table(EVENTS)?
            .range((partition.raw(), 0)..=(partition.raw(), u64::MAX))?
            .next_back()
            .transpose()?
            .map_or(0, |(key, _)| u128::from(key.value().1));
        let trimmed = trimmed(&txn.open_table(EVENTS_TRIMMED)?, partition)?;
        // One writer commits at a time, in position order: every committed event is settled.
        Ok(EventBounds {
            head: last.max(trimmed),
            trimmed,
            committed_above_head: PositionRanges::default(),
        })
    }

    fn event_partitions(&self) -> Result<Vec<Partition>, StoreError> {
        partitions_of(&self.read()?.open_table(EVENTS)?)
    }

    fn purge_events_before(
        &self,
        partition: Partition,
        cutoff: crate::core::clock::Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let txn = self.write()?;
        let purged = purge(&txn, partition, time_key(cutoff), limit)?;
        txn.commit()?;
        Ok(purged)
    }
}

/// Removes the oldest events of `partition` up to the first received at or after `cutoff`
/// (at most `limit`) and raises the trim mark over them.
fn purge(
    txn: &WriteTransaction,
    partition: Partition,
    cutoff: u64,
    limit: usize,
) -> Result<usize, StoreError> {
    let mut events = txn.open_table(EVENTS)?;
    let mut doomed = Vec::new();
    for entry in events.range((partition.raw(), 0)..=(partition.raw(), u64::MAX))? {
        let (key, value) = entry?;
        if doomed.len() >= limit || value.value().2 >= cutoff {
            break;
        }
        doomed.push(key.value().1);
    }
    let Some(&last) = doomed.last() else {
        return Ok(0);
    };
    for seq in &doomed {
        events.remove((partition.raw(), *seq))?;
    }
    txn.open_table(EVENTS_TRIMMED)?
        .insert(partition.raw(), last)?;
    Ok(doomed.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::clock::Timestamp;
    use crate::store::records::{ChangeKind, NewRecord, RecordWrite, RecordsStore, plain_batch};

    fn apply(store: &RedbStore, writes: &[RecordWrite]) {
        store.apply_batch(&plain_batch(writes)).unwrap();
    }

    fn rid(micros: u128, n: u128) -> RecordId {
        RecordId((micros << 64) | n)
    }

    #[test]
    fn events_follow_the_commits_and_purges_raise_the_trim_mark() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(&dir.path().join("t.redb"), 1 << 20).unwrap();
        let create = |partition, n| RecordWrite::Create {
            partition,
            records: vec![NewRecord {
                id: rid(1_000, n),
                payload: format!("{{\"n\":{n}}}").into_bytes(),
            }],
            idempotency: None,
        };
        apply(
            &store,
            &[
                create(Partition::from_raw(1), 1),
                create(Partition::from_raw(2), 1),
                create(Partition::from_raw(1), 2),
            ],
        );
        apply(
            &store,
            &[
                RecordWrite::Replace {
                    partition: Partition::from_raw(1),
                    id: rid(1_000, 1),
                    updated_at: Timestamp(2_000),
                    payload: b"{\"n\":10}".to_vec(),
                },
                RecordWrite::Delete {
                    partition: Partition::from_raw(1),
                    id: rid(1_000, 2),
                    at: Timestamp(3_000),
                },
                // Refused: the record does not exist. No event.
                RecordWrite::Delete {
                    partition: Partition::from_raw(1),
                    id: rid(1_000, 9),
                    at: Timestamp(3_000),
                },
            ],
        );
        let page = store
            .events_after(Partition::from_raw(1), 0, 10, 1 << 20)
            .unwrap();
        let seen: Vec<_> = page
            .events
            .iter()
            .map(|e| (e.kind, e.record_id, e.at, e.record.clone()))
            .collect();
        let now = |payload: &[u8]| Some((Timestamp(2_000), payload.to_vec()));
        assert_eq!(
            seen,
            [
                (
                    ChangeKind::Created,
                    rid(1_000, 1),
                    Timestamp(1_000),
                    now(b"{\"n\":10}")
                ),
                (ChangeKind::Created, rid(1_000, 2), Timestamp(1_000), None),
                (
                    ChangeKind::Replaced,
                    rid(1_000, 1),
                    Timestamp(2_000),
                    now(b"{\"n\":10}")
                ),
                (ChangeKind::Deleted, rid(1_000, 2), Timestamp(3_000), None),
            ]
        );
        let positions: Vec<u128> = page.events.iter().map(|e| e.position).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
        // Limits: by count, and by payload bytes (at least one event).
        assert_eq!(
            store
                .events_after(Partition::from_raw(1), 0, 2, 1 << 20)
                .unwrap()
                .events
                .len(),
            2
        );
        assert_eq!(
            store
                .events_after(Partition::from_raw(1), 0, 10, 1)
                .unwrap()
                .events
                .len(),
            1
        );
        assert_eq!(
            store.event_partitions().unwrap(),
            [1, 2].map(Partition::from_raw)
        );
        assert_eq!(
            store.event_bounds(Partition::from_raw(1)).unwrap(),
            EventBounds {
                head: positions[3],
                trimmed: 0,
                committed_above_head: PositionRanges::default(),
            }
        );

        // Everything received before 2 000 µs goes: the two creates.
        assert_eq!(
            store
                .purge_events_before(Partition::from_raw(1), Timestamp(2_000), 10)
                .unwrap(),
            2
        );
        let bounds = store.event_bounds(Partition::from_raw(1)).unwrap();
        assert_eq!((bounds.head, bounds.trimmed), (positions[3], positions[1]));
        let rest = store
            .events_after(Partition::from_raw(1), positions[1], 10, 1 << 20)
            .unwrap();
        assert_eq!(rest.trimmed, positions[1]);
        assert_eq!(rest.events.len(), 2);
        assert_eq!(
            store
                .purge_events_before(Partition::from_raw(1), Timestamp(2_000), 10)
                .unwrap(),
            0
        );
        // The other partition is untouched.
        assert_eq!(
            store
                .events_after(Partition::from_raw(2), 0, 10, 1 << 20)
                .unwrap()
                .events
                .len(),
            1
        );
    }

    #[test]
    fn an_event_page_carries_the_access_version_of_its_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(&dir.path().join("t.redb"), 1 << 20).unwrap();
        let version = || {
            store
                .events_after(Partition::from_raw(1), 0, 10, 1 << 20)
                .unwrap()
                .access_version
        };
        assert_eq!(version(), 0);
        // Two changes of access in one commit raise it once.
        let ((), effects) = crate::store::write(&store, |tx| {
            tx.delete_api_key(&[1; 32])?;
            tx.delete_collaborator(1, 2)
        })
        .unwrap();
        assert!(effects.access_changed);
        assert_eq!(version(), 1);
        // Record writes leave it alone.
        apply(
            &store,
            &[RecordWrite::Create {
                partition: Partition::from_raw(1),
                records: vec![NewRecord {
                    id: rid(1_000, 1),
                    payload: b"{}".to_vec(),
                }],
                idempotency: None,
            }],
        );
        assert_eq!(version(), 1);
        crate::store::write::<_, StoreError>(&store, |tx| tx.delete_api_key(&[2; 32])).unwrap();
        assert_eq!(version(), 2);
    }
}
