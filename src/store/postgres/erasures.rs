//! [`ErasuresRead`] and [`ErasuresWrite`] on PostgreSQL: `erasures` (migration 0006), whose
//! `endpoint_id`, `running` and `created_at` columns follow the row's.

use super::{PgTx, big, micros, row_json, to_json};
use crate::core::clock::Timestamp;
use crate::store::erasures::{ErasuresRead, ErasuresWrite};
use crate::store::{ErasureRow, ErasureState, StoreError};

impl ErasuresRead for PgTx<'_> {
    fn erasure(&self, id: u64) -> Result<Option<ErasureRow>, StoreError> {
        self.query_opt("SELECT data FROM erasures WHERE id = $1", &[&big(id)])?
            .map(|row| row_json(&row, 0))
            .transpose()
    }

    fn endpoint_erasures(&self, endpoint_id: u64) -> Result<Vec<ErasureRow>, StoreError> {
        self.query(
            "SELECT data FROM erasures WHERE endpoint_id = $1 ORDER BY id DESC",
            &[&big(endpoint_id)],
        )?
        .iter()
        .map(|row| row_json(row, 0))
        .collect()
    }

    fn running_erasures(&self) -> Result<Vec<ErasureRow>, StoreError> {
        self.query("SELECT data FROM erasures WHERE running ORDER BY id", &[])?
            .iter()
            .map(|row| row_json(row, 0))
            .collect()
    }

    fn erasures_since(&self, at: Timestamp) -> Result<Vec<ErasureRow>, StoreError> {
        self.query(
            "SELECT data FROM erasures WHERE created_at >= $1 ORDER BY id",
            &[&micros(at)],
        )?
        .iter()
        .map(|row| row_json(row, 0))
        .collect()
    }
}

impl ErasuresWrite for PgTx<'_> {
    fn put_erasure(&mut self, row: &ErasureRow) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO erasures (id, endpoint_id, running, created_at, data)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (id) DO UPDATE SET running = EXCLUDED.running, data = EXCLUDED.data",
            &[
                &big(row.id),
                &big(row.partition.endpoint()),
                &(row.state == ErasureState::Running),
                &micros(row.created_at),
                &to_json(row)?,
            ],
        )?;
        Ok(())
    }
}
