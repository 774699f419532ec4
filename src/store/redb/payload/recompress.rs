//! Replacing the dictionaries: training one afresh and storing every record anew with it, so
//! that no dictionary keeps pieces of records deleted or erased since. One function does it in
//! `intake compact` and, on a running server, in an erasure that has to (`patch`); the loop
//! that stores records anew serves a patch too.

use redb::Durability;

use super::*;

/// Records looked at per round of [`RedbStore::recompress_records`]: read and compressed anew
/// from a snapshot, outside redb's one write lock, then stored in a short transaction that
/// the ingest writer waits behind (see `tests::replacing_the_dictionaries_of_200k_records`).
pub(super) const RECOMPRESS_CHUNK: usize = 500;

/// The share of a core (%) a dictionary's patch takes while it reads records to find those
/// that read differently (`core::background::pace`).
const PATCH_SCAN_SHARE: u32 = 50;

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
    ///   commits, so taking the lock once after installing it waits for every such write, and
    ///   the snapshots read after see their records; every later write compresses with the
    ///   new dictionary (or stores plain);
    /// - a record is stored anew only while it still holds what the snapshot read, so a write
    ///   since (with the new dictionary) is never undone;
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
        self.replace_all(now)
    }

    /// [`RedbStore::recompress_records`], for a caller that holds the training lock.
    pub(super) fn replace_all(&self, now: Timestamp) -> Result<Recompressed, StoreError> {
        let current = self.train(now)?.map(|trained| trained.id);
        if current.is_none() {
            self.codec.uninstall();
        }
        // Every write begun before the dictionary was installed has committed once the lock
        // is free.
        self.write()?.abort()?;
        // Not durable on their own: the removal's commit below is, and makes every one before
        // it so. Until then the older dictionaries stay, so a record a crash takes back to one
        // is still read, and the next replacement stores it anew.
        let rewritten = self.store_anew(&mut |value| dictionary_of(value) != current)?;
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

    /// Stores anew, compressed with the dictionary writes use (or plain), every record whose
    /// value `stale` picks, [`RECOMPRESS_CHUNK`] records a transaction, none durable on its
    /// own; returns how many. A record written since it was read stays as written.
    pub(super) fn store_anew(
        &self,
        stale: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<u64, StoreError> {
        let mut rewritten = 0;
        let mut from = Some((0u64, 0u128));
        let mut pending = Vec::new();
        while let Some(start) = from {
            let (anew, next) = self.compress_anew(start, stale)?;
            pending.extend(anew);
            from = next;
            // Few picked (a patch's): gathered over rounds into one transaction. A round that
            // only read (decoding each record twice, for a patch) holds the thread to half a
            // core: the CPU it takes from requests shows in their p99 on a small machine, more
            // so beside the search index's merge.
            if pending.len() < RECOMPRESS_CHUNK && from.is_some() || pending.is_empty() {
                crate::core::background::pace(PATCH_SCAN_SHARE);
                continue;
            }
            let started = std::time::Instant::now();
            let mut txn = self.write()?;
            txn.set_durability(Durability::None)
                .map_err(|err| StoreError::Backend(err.into()))?;
            {
                let mut records = txn.open_table(RECORDS)?;
                for (key, was, value) in pending.drain(..) {
                    // A write since the snapshot stored it anew (with the current dictionary,
                    // or with an older one when it began before that was installed): it stays.
                    if records
                        .get(key)?
                        .is_some_and(|now| now.value() == was.as_slice())
                    {
                        records.insert(key, value.as_slice())?;
                        rewritten += 1;
                    }
                }
            }
            txn.commit()?;
            crate::core::background::yield_write_lock(started.elapsed());
        }
        Ok(rewritten)
    }

    /// The records from `from` on, [`RECOMPRESS_CHUNK`] at most, whose value `stale` picks,
    /// read from a snapshot: each key with its value then and compressed anew; and where the
    /// next round starts.
    #[allow(clippy::type_complexity)]
    fn compress_anew(
        &self,
        from: (u64, u128),
        stale: &mut dyn FnMut(&[u8]) -> bool,
    ) -> Result<(Vec<((u64, u128), Vec<u8>, Vec<u8>)>, Option<(u64, u128)>), StoreError> {
        // Read first and compress after: a snapshot keeps every page freed while it is open
        // from being used again, so it is held for the reading only. The dictionaries these
        // records name stay until the replacement ends.
        let (read, next) = {
            let snapshot = self.read()?;
            let records = snapshot.open_table(RECORDS)?;
            let mut read = Vec::new();
            let mut next = None;
            for (scanned, entry) in records.range(from..)?.enumerate() {
                let (key, value) = entry?;
                if scanned == RECOMPRESS_CHUNK {
                    next = Some(key.value());
                    break;
                }
                if stale(value.value()) {
                    read.push((key.value(), value.value().to_vec()));
                }
            }
            (read, next)
        };
        let mut scratch = Vec::new();
        let mut stale = Vec::with_capacity(read.len());
        for (key, was) in read {
            let (time, payload) = self.codec.decode(&was, &mut scratch)?;
            let anew = self.codec.encode(time, payload)?;
            stale.push((key, was, anew));
        }
        Ok((stale, next))
    }
}
