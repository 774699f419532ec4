//! [`MailRead`], [`MailWrite`] and [`MailStore`] on PostgreSQL: `outbox`, whose `status` and
//! `created_at` columns follow the row's.

use super::{Patience, PgStore, PgTx, big, count, micros, row_json, to_json};
use crate::core::clock::Timestamp;
use crate::store::mail::{MailRead, MailStore, MailWrite, PURGE_CHUNK};
use crate::store::{MailRow, MailStatus, StoreError};

/// The `status` column of a message: its status as the row's JSON spells it.
fn status_column(status: MailStatus) -> &'static str {
    match status {
        MailStatus::Queued => "queued",
        MailStatus::Sent => "sent",
        MailStatus::Failed => "failed",
    }
}

impl MailRead for PgTx<'_> {
    fn mail(&self, id: u64) -> Result<Option<MailRow>, StoreError> {
        self.query_opt("SELECT data FROM outbox WHERE id = $1", &[&big(id)])?
            .map(|row| row_json(&row, 0))
            .transpose()
    }

    fn mail_page(&self, before: Option<u64>, limit: usize) -> Result<Vec<MailRow>, StoreError> {
        let rows = match before {
            Some(before) => self.query(
                "SELECT data FROM outbox WHERE id < $1 ORDER BY id DESC LIMIT $2",
                &[&big(before), &count(limit)],
            )?,
            None => self.query(
                "SELECT data FROM outbox ORDER BY id DESC LIMIT $1",
                &[&count(limit)],
            )?,
        };
        rows.iter().map(|row| row_json(row, 0)).collect()
    }

    fn queued_mail(&self, after: u64, limit: usize) -> Result<Vec<MailRow>, StoreError> {
        self.query(
            "SELECT data FROM outbox WHERE status = 'queued' AND id > $1 ORDER BY id LIMIT $2",
            &[&big(after), &count(limit)],
        )?
        .iter()
        .map(|row| row_json(row, 0))
        .collect()
    }
}

impl MailWrite for PgTx<'_> {
    fn insert_mail(&mut self, row: &MailRow) -> Result<(), StoreError> {
        self.put_mail(row)?;
        self.effects.mail_queued = true;
        Ok(())
    }

    fn put_mail(&mut self, row: &MailRow) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO outbox (id, status, created_at, data) VALUES ($1, $2, $3, $4)
             ON CONFLICT (id) DO UPDATE
                 SET status = EXCLUDED.status, created_at = EXCLUDED.created_at,
                     data = EXCLUDED.data",
            &[
                &big(row.id),
                &status_column(row.status),
                &micros(row.created_at),
                &to_json(row)?,
            ],
        )?;
        Ok(())
    }
}

impl MailStore for PgStore {
    fn purge_mail(&self, cutoff: Timestamp) -> Result<usize, StoreError> {
        // A chunk per commit, oldest first, so no transaction holds many rows.
        let mut total = 0;
        loop {
            let (removed, _) = self.write_unit_within(Patience::Maintenance, |tx| {
                tx.execute(
                    "DELETE FROM outbox WHERE id = ANY(ARRAY(
                         SELECT id FROM outbox WHERE status <> 'queued' AND created_at < $1
                         ORDER BY created_at LIMIT $2))",
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
    use super::super::{PgTx, test_store};
    use crate::core::clock::Timestamp;
    use crate::store::conformance::mail::{queue, set_status};
    use crate::store::{MailStatus, write};

    #[test]
    fn the_status_and_age_columns_follow_the_row() {
        let store = test_store();
        let all = queue(&store, &[10, 20]);
        set_status(&store, &all[..1], MailStatus::Sent);
        write(&store, |tx| {
            // A put may move a message back to the queue (and change its age).
            let mut row = tx.mail(all[1])?.unwrap();
            row.status = MailStatus::Failed;
            row.created_at = Timestamp(25);
            tx.put_mail(&row)
        })
        .unwrap();
        let tx = PgTx::read(&store).unwrap();
        let columns: Vec<(String, i64)> = tx
            .query("SELECT status, created_at FROM outbox ORDER BY id", &[])
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(columns, [("sent".into(), 10), ("failed".into(), 25)]);
    }
}
