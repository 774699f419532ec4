//! `intake compact`'s share of the payload layout: training a dictionary afresh and storing
//! every record anew with it, so that no dictionary keeps pieces of records deleted since.

use super::*;

/// Records looked at per transaction of [`RedbStore::recompress_records`].
pub(super) const RECOMPRESS_CHUNK: usize = 2_000;

/// What [`RedbStore::recompress_records`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recompressed {
    /// Records stored anew (compressed with the new dictionary, or plain).
    pub records: u64,
    /// Dictionaries removed: no record names them any more.
    pub dictionaries_removed: usize,
}

impl RedbStore {
    /// What `intake compact` does first, on a stopped server: trains a dictionary afresh on
    /// the records the store holds now (none while they are too few to learn from), stores
    /// every record that is not compressed with it anew (compressed with it, or plain where it
    /// would not shrink one or there is none), a transaction per [`RECOMPRESS_CHUNK`] records,
    /// and then removes every other dictionary, which no record names any more. A dictionary
    /// holds pieces of the records it was trained on, so this is what takes the pieces of
    /// records deleted since (a purged endpoint's) out of the store; it also compresses the
    /// records written before the store had a dictionary.
    pub fn recompress_records(&self) -> Result<Recompressed, StoreError> {
        let current = self.train_dictionary()?.map(|trained| trained.id);
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
            if current.is_none() {
                txn.open_table(crate::store::redb::META)?
                    .remove(CURRENT_DICTIONARY)?;
            }
            others.len()
        };
        txn.commit()?;
        Ok(Recompressed {
            records: rewritten,
            dictionaries_removed: removed,
        })
    }
}
