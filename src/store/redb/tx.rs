//! The redb transactions behind [`ReadTx`] and [`WriteTx`], and [`Store`] for [`RedbStore`].
//!
//! Every read is written once, against [`Tables`], which both a read snapshot and a write
//! transaction provide: a write transaction reads its own changes.

use redb::{Key, ReadOnlyTable, ReadableTable, Table, TableDefinition, Value, WriteTransaction};

use std::sync::Arc;

use super::payload::PayloadCodec;
use super::{ACCESS_VERSION, META, RedbStore, Snapshot, next_id, read_counter, write_counter};
use crate::core::clock::Timestamp;
use crate::store::{Effects, IdKind, ReadTx, Store, StoreError, StoreGauges, WriteTx};

/// Opens tables for reading: a read snapshot or a write transaction.
pub trait Tables {
    type Readable<'a, K: Key + 'static, V: Value + 'static>: redb::ReadableTable<K, V>
    where
        Self: 'a;

    fn open<K: Key + 'static, V: Value + 'static>(
        &self,
        table: TableDefinition<'static, K, V>,
    ) -> Result<Self::Readable<'_, K, V>, StoreError>;

    /// How the store's record values are laid out.
    fn codec(&self) -> &PayloadCodec;
}

/// A read snapshot.
pub struct RedbRead {
    pub(super) txn: Snapshot,
    pub(super) codec: Arc<PayloadCodec>,
    /// Counts a long snapshot as open while it is (see [`Store::long_read`]).
    pub(super) _long: Option<super::LongRead>,
}

impl Tables for RedbRead {
    type Readable<'a, K: Key + 'static, V: Value + 'static>
        = ReadOnlyTable<K, V>
    where
        Self: 'a;

    fn open<K: Key + 'static, V: Value + 'static>(
        &self,
        table: TableDefinition<'static, K, V>,
    ) -> Result<ReadOnlyTable<K, V>, StoreError> {
        Ok(self.txn.open_table(table)?)
    }

    fn codec(&self) -> &PayloadCodec {
        &self.codec
    }
}

/// A write transaction and what its changes will require after the commit.
pub struct RedbWrite<'t> {
    pub(super) txn: &'t WriteTransaction,
    pub(super) codec: &'t PayloadCodec,
    pub(super) effects: Effects,
}

impl<'t> RedbWrite<'t> {
    /// Typed changes inside the redb transaction `txn` of `store`.
    pub fn over(txn: &'t WriteTransaction, store: &'t RedbStore) -> RedbWrite<'t> {
        RedbWrite {
            txn,
            codec: &store.codec,
            effects: Effects::default(),
        }
    }

    /// Opens a table to change it.
    /// Reports `access_changed` and raises the access version in this transaction (once:
    /// the version only says "changed since").
    pub(super) fn access_changed(&mut self) -> Result<(), StoreError> {
        if !self.effects.access_changed {
            let version = read_counter(&self.txn.open_table(META)?, ACCESS_VERSION)?;
            write_counter(self.txn, ACCESS_VERSION, version + 1)?;
            self.effects.access_changed = true;
        }
        Ok(())
    }

    pub(super) fn table<K: Key + 'static, V: Value + 'static>(
        &self,
        table: TableDefinition<'static, K, V>,
    ) -> Result<Table<'_, K, V>, StoreError> {
        Ok(self.txn.open_table(table)?)
    }
}

impl Tables for RedbWrite<'_> {
    type Readable<'a, K: Key + 'static, V: Value + 'static>
        = Table<'a, K, V>
    where
        Self: 'a;

    fn open<K: Key + 'static, V: Value + 'static>(
        &self,
        table: TableDefinition<'static, K, V>,
    ) -> Result<Table<'_, K, V>, StoreError> {
        self.table(table)
    }

    fn codec(&self) -> &PayloadCodec {
        self.codec
    }
}

impl ReadTx for RedbRead {}
impl ReadTx for RedbWrite<'_> {}

impl WriteTx for RedbWrite<'_> {
    fn next_id(&mut self, kind: IdKind) -> Result<u64, StoreError> {
        let counter = match kind {
            IdKind::Account => "next_account_id",
            IdKind::Endpoint => "next_endpoint_id",
            IdKind::Invitation => "next_invitation_id",
            IdKind::Notification => "next_notification_id",
            IdKind::Audit => "next_audit_id",
            IdKind::Mail => "next_mail_id",
            IdKind::Erasure => "next_erasure_id",
        };
        next_id(self.txn, counter)
    }
}

impl Store for RedbStore {
    fn read(&self) -> Result<Box<dyn ReadTx + '_>, StoreError> {
        Ok(Box::new(RedbRead {
            txn: RedbStore::read(self)?,
            codec: self.codec.clone(),
            _long: None,
        }))
    }

    /// Counted while open: the pages it keeps are what the scrub of free space waits for.
    fn long_read(&self) -> Result<Box<dyn ReadTx + '_>, StoreError> {
        let long = self.long_read_begins();
        Ok(Box::new(RedbRead {
            txn: RedbStore::read(self)?,
            codec: self.codec.clone(),
            _long: Some(long),
        }))
    }

    fn write_with(
        &self,
        work: &mut dyn FnMut(&mut dyn WriteTx) -> Result<(), StoreError>,
    ) -> Result<Effects, StoreError> {
        let txn = self.write()?;
        let mut tx = RedbWrite::over(&txn, self);
        // Dropping an uncommitted redb transaction aborts it: a failed `work` writes nothing.
        work(&mut tx)?;
        let effects = tx.effects;
        txn.commit()?;
        Ok(effects)
    }

    fn shared_value(&self, name: &str, proposed: &[u8]) -> Result<Vec<u8>, StoreError> {
        let key = format!("shared.{name}");
        let txn = {
            let _writers = self.writers();
            self.db.begin_write()?
        };
        let stored = {
            let mut meta = txn.open_table(super::META)?;
            let stored = meta.get(key.as_str())?.map(|v| v.value().to_vec());
            match stored {
                Some(stored) => stored,
                None => {
                    meta.insert(key.as_str(), proposed)?;
                    proposed.to_vec()
                }
            }
        };
        txn.commit()?;
        Ok(stored)
    }

    fn check_writable(&self) -> Result<(), StoreError> {
        self.check_free_space()
    }

    fn gauges(&self, now: Timestamp) -> Result<StoreGauges, StoreError> {
        self.read_gauges(now)
    }

    fn change_log(&self) -> Option<&dyn crate::store::changes::ChangesStore> {
        Some(self)
    }

    fn cluster(&self) -> Option<&dyn crate::store::cluster::ClusterStore> {
        None
    }

    fn import(&self) -> Option<&dyn crate::store::transfer::Import> {
        None
    }

    fn backup_source(&self) -> Option<&dyn crate::store::backup::BackupSource> {
        Some(self)
    }

    fn payload_dictionaries(&self) -> Option<&dyn crate::store::compression::PayloadDictionaries> {
        Some(self)
    }

    fn scrub_free_space(&self) -> Result<Option<crate::store::ScrubReport>, StoreError> {
        Ok(Some(self.scrub_free_pages()?))
    }
}
