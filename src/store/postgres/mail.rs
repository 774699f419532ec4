//! [`MailRead`], [`MailWrite`] and [`MailStore`] on PostgreSQL: `outbox`, whose `status` and
//! `created_at` columns follow the row's.

use super::{Patience, PgStore, PgTx, big, count, micros, row_json, to_json};
use crate::core::clock::Timestamp;
use crate::store::mail::{MailRead, MailStore, MailWrite};
use crate::store::{MailRow, MailStatus, StoreError};

/// Most messages removed per purge transaction.
const PURGE_CHUNK: usize = 1000;

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
    use super::super::{PgStore, PgTx, test_store};
    use super::PURGE_CHUNK;
    use crate::core::clock::Timestamp;
    use crate::store::mail::MailStore;
    use crate::store::{IdKind, MailRow, MailStatus, Store, StoreError, write};

    fn mail(id: u64, created_at: i64) -> MailRow {
        MailRow {
            id,
            kind: "test".into(),
            to: "a@x.test".into(),
            subject: format!("mail {id}"),
            body: "body".into(),
            status: MailStatus::Queued,
            attempts: 0,
            last_error: None,
            created_at: Timestamp(created_at),
            next_attempt_at: Timestamp(created_at),
            sent_at: None,
        }
    }

    /// Queues one message per `created_at`, in order; returns their ids.
    fn queue(store: &PgStore, created_at: &[i64]) -> Vec<u64> {
        let (ids, effects) = write(store, |tx| {
            let mut ids = Vec::new();
            for at in created_at {
                let id = tx.next_id(IdKind::Mail)?;
                tx.insert_mail(&mail(id, *at))?;
                ids.push(id);
            }
            Ok::<_, StoreError>(ids)
        })
        .unwrap();
        assert_eq!(effects.mail_queued, !created_at.is_empty());
        assert!(!effects.access_changed && !effects.deliveries_due);
        ids
    }

    fn set_status(store: &PgStore, ids: &[u64], status: MailStatus) {
        let ((), effects) = write(store, |tx| {
            for id in ids {
                let mut row = tx.mail(*id)?.unwrap();
                row.status = status;
                row.attempts += 1;
                tx.put_mail(&row)?;
                assert_eq!(tx.mail(*id)?.unwrap().status, status);
            }
            Ok::<_, StoreError>(())
        })
        .unwrap();
        assert!(!effects.mail_queued);
    }

    fn ids(rows: Vec<MailRow>) -> Vec<u64> {
        rows.iter().map(|r| r.id).collect()
    }

    #[test]
    fn mail_pages_go_newest_first_and_the_queue_oldest_first() {
        let store = test_store();
        let all = queue(&store, &[10, 20, 30, 40, 50]);
        set_status(&store, &[all[1]], MailStatus::Sent);
        set_status(&store, &[all[3]], MailStatus::Failed);
        let read = store.read().unwrap();
        assert_eq!(read.mail(all[1]).unwrap().unwrap().attempts, 1);
        assert!(read.mail(all[4] + 1).unwrap().is_none());
        assert_eq!(
            ids(read.mail_page(None, 10).unwrap()),
            [all[4], all[3], all[2], all[1], all[0]]
        );
        assert_eq!(ids(read.mail_page(None, 2).unwrap()), [all[4], all[3]]);
        assert_eq!(
            ids(read.mail_page(Some(all[3]), 2).unwrap()),
            [all[2], all[1]]
        );
        assert_eq!(ids(read.mail_page(Some(all[0]), 2).unwrap()), [0u64; 0]);
        assert_eq!(ids(read.mail_page(None, 0).unwrap()), [0u64; 0]);
        assert_eq!(
            ids(read.queued_mail(0, 10).unwrap()),
            [all[0], all[2], all[4]]
        );
        assert_eq!(ids(read.queued_mail(0, 2).unwrap()), [all[0], all[2]]);
        assert_eq!(ids(read.queued_mail(all[0], 10).unwrap()), [all[2], all[4]]);
        assert_eq!(ids(read.queued_mail(all[4], 10).unwrap()), [0u64; 0]);
    }

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

    #[test]
    fn purges_remove_finished_mail_created_before_the_cutoff_in_chunks() {
        let store = test_store();
        // More finished messages than one chunk, so the purge takes several commits.
        let old: Vec<i64> = (0..PURGE_CHUNK as i64 + 5).collect();
        let finished = queue(&store, &old);
        let (sent, failed) = finished.split_at(PURGE_CHUNK / 2);
        set_status(&store, sent, MailStatus::Sent);
        set_status(&store, failed, MailStatus::Failed);
        let queued_old = queue(&store, &[1, 2]);
        let recent = queue(&store, &[5_000, 6_000]);
        set_status(&store, &recent[..1], MailStatus::Sent);

        // Created before the cutoff, not at it.
        assert_eq!(store.purge_mail(Timestamp(0)).unwrap(), 0);
        assert_eq!(store.purge_mail(Timestamp(1)).unwrap(), 1);
        assert_eq!(
            store.purge_mail(Timestamp(5_000)).unwrap(),
            finished.len() - 1
        );
        let read = store.read().unwrap();
        let left = ids(read.mail_page(None, 10).unwrap());
        assert_eq!(left, [recent[1], recent[0], queued_old[1], queued_old[0]]);
        drop(read);
        assert_eq!(store.purge_mail(Timestamp(i64::MAX)).unwrap(), 1);
    }
}
