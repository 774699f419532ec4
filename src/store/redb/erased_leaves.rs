//! The leaves that held an erased value, written anew from their live entries before the scrub
//! of free pages (`scrub.rs`), so that no page in use keeps a byte of it.
//!
//! redb copies a page to change it, building the copy from the page's live entries, except in
//! two cases that keep old bytes in a page still in use (read in redb 4.5,
//! `tree_store/btree_mutator.rs` and `btree_base.rs`):
//! - A leaf the transaction already copied is changed in place: a value removed or made shorter
//!   there moves the entries after it over it, and the leaf's end keeps what they moved from
//!   (with a leaf's last entry, the value itself).
//! - A value replaced by one of the same length is patched into a byte-for-byte copy of the
//!   leaf, unused end included, so what an earlier transaction left there is carried on.
//!
//! Either way the bytes stay in the leaf whose keys cover the value's key (a leaf only loses
//! keys by a split or merge, which builds new pages), until that leaf is built anew. So an
//! erasure's step lists each key it erased in `ERASED_KEYS`, in its own transaction, and
//! [`RedbStore::rebuild_erased_leaves`] later takes a live entry of the leaf covering each key
//! out and puts it back: taken out of a leaf committed before, it makes redb build the leaf anew
//! from the entries that stay; put back, it changes nothing. The listed keys go in the same
//! transaction, so an interrupted rebuild is taken up again by the next scrub.

use std::time::Instant;

use redb::{Key, ReadableTable, Table, WriteTransaction};

use super::{DELIVERIES, DELIVERY_ATTEMPTS, ERASED_KEYS, RECORDS, RedbStore};
use crate::core::ids::RecordId;
use crate::store::{Partition, StoreError};

/// The first part of an `ERASED_KEYS` key: the table the erased value was in.
const RECORD: u8 = 0;
const DELIVERY: u8 = 1;
const ATTEMPT: u8 = 2;

/// Listed keys rebuilt a transaction: each takes up to two entries out and back, a few
/// milliseconds for a batch, so the ingest writer waits little behind one; after each the
/// rebuild pauses twice as long (`core::background::yield_write_lock`).
const REBUILD_BATCH: usize = 128;

/// `ERASED_KEYS` in an erasure step's transaction.
pub(super) struct ErasedKeys<'txn> {
    table: Table<'txn, (u8, u64, u128), ()>,
}

impl<'txn> ErasedKeys<'txn> {
    pub(super) fn open(txn: &'txn WriteTransaction) -> Result<ErasedKeys<'txn>, StoreError> {
        Ok(ErasedKeys {
            table: txn.open_table(ERASED_KEYS)?,
        })
    }

    /// A record removed from `RECORDS`.
    pub(super) fn record(&mut self, partition: Partition, id: RecordId) -> Result<(), StoreError> {
        self.list((RECORD, partition.raw(), id.0))
    }

    /// A delivery's row in `DELIVERIES` whose body was emptied.
    pub(super) fn delivery(&mut self, delivery_id: u64) -> Result<(), StoreError> {
        self.list((DELIVERY, delivery_id, 0))
    }

    /// An attempt's row in `DELIVERY_ATTEMPTS` whose response body was emptied.
    pub(super) fn attempt(&mut self, delivery_id: u64, attempt: u32) -> Result<(), StoreError> {
        self.list((ATTEMPT, delivery_id, u128::from(attempt)))
    }

    fn list(&mut self, key: (u8, u64, u128)) -> Result<(), StoreError> {
        self.table.insert(key, ())?;
        Ok(())
    }
}

impl RedbStore {
    /// Builds anew the leaf covering each key in `ERASED_KEYS`, and empties it (see the
    /// module's documentation).
    pub(super) fn rebuild_erased_leaves(&self) -> Result<(), StoreError> {
        if self.table_is_empty(ERASED_KEYS)? {
            return Ok(());
        }
        loop {
            let started = Instant::now();
            let txn = self.write()?;
            let rebuilt = {
                let mut listed = txn.open_table(ERASED_KEYS)?;
                let keys: Vec<(u8, u64, u128)> = listed
                    .iter()?
                    .take(REBUILD_BATCH)
                    .map(|entry| entry.map(|(key, _)| key.value()))
                    .collect::<Result<_, _>>()?;
                let mut records = txn.open_table(RECORDS)?;
                let mut deliveries = txn.open_table(DELIVERIES)?;
                let mut attempts = txn.open_table(DELIVERY_ATTEMPTS)?;
                for &key in &keys {
                    match key {
                        (RECORD, partition, id) => rebuild_leaf_of(&mut records, (partition, id))?,
                        (DELIVERY, id, _) => rebuild_leaf_of(&mut deliveries, id)?,
                        (ATTEMPT, id, attempt) => {
                            let attempt = u32::try_from(attempt).map_err(|_| {
                                StoreError::Corrupt(format!("erased attempt {id}/{attempt}"))
                            })?;
                            rebuild_leaf_of(&mut attempts, (id, attempt))?
                        }
                        (table, _, _) => {
                            return Err(StoreError::Corrupt(format!(
                                "erased key of unknown table {table}"
                            )));
                        }
                    }
                    listed.remove(key)?;
                }
                keys.len()
            };
            if rebuilt == 0 {
                txn.abort()?;
                return Ok(());
            }
            txn.commit()?;
            crate::core::background::yield_write_lock(started.elapsed());
        }
    }

    /// Whether `table` has no entry, read without taking the writers' turn.
    pub(super) fn table_is_empty<K: Key + 'static, V: redb::Value + 'static>(
        &self,
        table: redb::TableDefinition<'static, K, V>,
    ) -> Result<bool, StoreError> {
        use redb::{ReadableDatabase, ReadableTableMetadata};
        match self.db.begin_read()?.open_table(table) {
            Ok(table) => Ok(table.is_empty()?),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(true),
            Err(err) => Err(err.into()),
        }
    }
}

/// Builds anew the leaf of `table` whose keys cover `key`: the entry at `key` if there is one,
/// else the ones before and after it (one of them is in that leaf), is taken out and put back.
fn rebuild_leaf_of<K>(table: &mut Table<'_, K, &'static [u8]>, key: K) -> Result<(), StoreError>
where
    K: for<'a> Key<SelfType<'a> = K> + Copy + PartialEq + 'static,
{
    let after = match table.range(key..)?.next() {
        Some(entry) => Some(entry?.0.value()),
        None => None,
    };
    let mut live = Vec::with_capacity(2);
    if after != Some(key) {
        if let Some(entry) = table.range(..key)?.next_back() {
            live.push(entry?.0.value());
        }
    }
    live.extend(after);
    for neighbour in live {
        let value = match table.remove(neighbour)? {
            Some(value) => value.value().to_vec(),
            None => continue,
        };
        table.insert(neighbour, value.as_slice())?;
    }
    Ok(())
}
