//! Replacing the dictionaries: training one afresh and storing every record anew with it, so
//! that no dictionary keeps pieces of records deleted or erased since. One function does it on
//! a running server ([`PayloadDictionaries::replace_dictionaries`]) and in `intake compact`.

use std::time::Duration;

use super::*;

/// Records looked at per transaction of [`RedbStore::recompress_records`]. Each transaction
/// holds redb's one write lock, which the ingest writer waits for: 3,000 records of 500 bytes
/// stored anew hold it for 10 ms, 17 ms at most, of which the durable commit is 3 ms (a release
/// build on a shared 2-core machine; `tests::replacing_the_dictionaries_of_200k_records`).
pub(super) const RECOMPRESS_CHUNK: usize = 3_000;

/// Pause after each of those transactions. redb's write lock is not fair: without it the next
/// transaction takes the lock again before a writer woken by the release gets it, and a writer
/// waited up to 365 ms instead of 15.
const BETWEEN_CHUNKS: Duration = Duration::from_millis(1);

impl RedbStore {
    /// Trains a dictionary afresh on the records the store holds now (none while they are too
    /// few to learn from), stores every record that is not compressed with it anew
    /// (compressed with it, or plain where it would not shrink one or there is none), a
    /// transaction per [`RECOMPRESS_CHUNK`] records, and then removes every other dictionary,
    /// which no record names any more, with its sample. A dictionary holds pieces of the
    /// records it was trained on, so this is what takes the pieces of records deleted since
    /// out of the store; it also compresses the records written before the store had a
    /// dictionary.
    ///
    /// Safe while writes go on (a running server's ingest):
    /// - it holds the training lock throughout, so the dictionary it trains stays the one
    ///   writes use until the end, and is the one kept;
    /// - a write that began before that dictionary was installed holds the write lock until it
    ///   commits, so it commits before the first chunk begins, and the chunks see its records;
    ///   every later write compresses with the new dictionary (or stores plain);
    /// - so once the last chunk has committed no record names another dictionary, and the
    ///   removal commits after it;
    /// - a snapshot from before the removal may still read a record compressed with a removed
    ///   dictionary: the codec keeps it in memory until the last such snapshot ends
    ///   ([`PayloadCodec::pin`]).
    pub fn recompress_records(&self, now: Timestamp) -> Result<Recompressed, StoreError> {
        let _training = self
            .codec
            .training
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let current = self.train(now)?.map(|trained| trained.id);
        if current.is_none() {
            self.codec.uninstall();
        }
        let mut rewritten = 0;
        let mut from = (0u64, 0u128);
        loop {
            let txn = self.write()?;
            let mut records = txn.open_table(RECORDS)?;
            let mut stale = Vec::new();
            let mut next = None;
            let mut scratch = Vec::new();
            for (scanned, entry) in records.range(from..)?.enumerate() {
                let (key, value) = entry?;
                if scanned == RECOMPRESS_CHUNK {
                    next = Some(key.value());
                    break;
                }
                if dictionary_of(value.value()) != current {
                    let (time, payload) = self.codec.decode(value.value(), &mut scratch)?;
                    stale.push((key.value(), time, payload.to_vec()));
                }
            }
            for (key, time, payload) in stale {
                let value = self.codec.encode(time, &payload)?;
                records.insert(key, value.as_slice())?;
                rewritten += 1;
            }
            drop(records);
            txn.commit()?;
            match next {
                Some(key) => from = key,
                None => break,
            }
            std::thread::sleep(BETWEEN_CHUNKS);
        }
        let txn = self.write()?;
        let removed = {
            let mut table = txn.open_table(PAYLOAD_DICTIONARIES)?;
            let ids: Vec<u32> = table
                .iter()?
                .map(|entry| entry.map(|(id, _)| id.value()))
                .collect::<Result<_, _>>()?;
            let others: Vec<u32> = ids.into_iter().filter(|id| Some(*id) != current).collect();
            for id in &others {
                table.remove(id)?;
            }
            // Every sample but the current dictionary's: also one left by an older intake,
            // which removed dictionaries without their samples.
            let mut samples = txn.open_table(DICTIONARY_SAMPLES)?;
            let sampled: Vec<u32> = samples
                .iter()?
                .map(|entry| entry.map(|(id, _)| id.value()))
                .collect::<Result<_, _>>()?;
            for id in sampled.iter().filter(|id| Some(**id) != current) {
                samples.remove(id)?;
            }
            if current.is_none() {
                txn.open_table(crate::store::redb::META)?
                    .remove(CURRENT_DICTIONARY)?;
            }
            others
        };
        txn.commit()?;
        self.codec.forget(&removed);
        Ok(Recompressed {
            records: rewritten,
            dictionaries_removed: removed.len(),
        })
    }
}
