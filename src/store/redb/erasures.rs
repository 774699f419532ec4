//! [`ErasuresRead`] and [`ErasuresWrite`] on redb: `ERASURES`, a handful of rows per endpoint,
//! read whole.

use redb::ReadableTable;

use super::tx::{RedbWrite, Tables};
use super::{ERASURES, from_json, to_json};
use crate::core::clock::Timestamp;
use crate::store::erasures::{ErasuresRead, ErasuresWrite};
use crate::store::{ErasureRow, ErasureState, StoreError};

/// The erasures `keep` selects, in id order.
fn erasures_where(
    tables: &impl Tables,
    keep: impl Fn(&ErasureRow) -> bool,
) -> Result<Vec<ErasureRow>, StoreError> {
    let mut rows = Vec::new();
    for entry in tables.open(ERASURES)?.iter()? {
        let row: ErasureRow = from_json(entry?.1.value())?;
        if keep(&row) {
            rows.push(row);
        }
    }
    Ok(rows)
}

impl<T: Tables> ErasuresRead for T {
    fn erasure(&self, id: u64) -> Result<Option<ErasureRow>, StoreError> {
        match self.open(ERASURES)?.get(id)? {
            Some(value) => Ok(Some(from_json(value.value())?)),
            None => Ok(None),
        }
    }

    fn endpoint_erasures(&self, endpoint_id: u64) -> Result<Vec<ErasureRow>, StoreError> {
        let mut rows = erasures_where(self, |row| row.partition.endpoint() == endpoint_id)?;
        rows.reverse();
        Ok(rows)
    }

    fn running_erasures(&self) -> Result<Vec<ErasureRow>, StoreError> {
        erasures_where(self, |row| row.state == ErasureState::Running)
    }

    fn erasures_to_follow(&self, after: u64) -> Result<Vec<ErasureRow>, StoreError> {
        erasures_where(self, |row| {
            row.state == ErasureState::Running || row.id > after
        })
    }

    fn erasures_since(&self, at: Timestamp) -> Result<Vec<ErasureRow>, StoreError> {
        erasures_where(self, |row| row.created_at >= at)
    }
}

impl ErasuresWrite for RedbWrite<'_> {
    fn put_erasure(&mut self, row: &ErasureRow) -> Result<(), StoreError> {
        self.table(ERASURES)?
            .insert(row.id, to_json(row)?.as_slice())?;
        Ok(())
    }
}
