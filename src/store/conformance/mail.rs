//! The outbox (`store::mail`).

use crate::core::clock::Timestamp;
use crate::store::mail::PURGE_CHUNK;
use crate::store::{IdKind, MailRow, MailStatus, Store, StoreError, write};

pub(crate) fn mail(id: u64, created_at: i64) -> MailRow {
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
pub(crate) fn queue(store: &dyn Store, created_at: &[i64]) -> Vec<u64> {
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

pub(crate) fn set_status(store: &dyn Store, ids: &[u64], status: MailStatus) {
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

pub(crate) fn ids(rows: Vec<MailRow>) -> Vec<u64> {
    rows.iter().map(|r| r.id).collect()
}

pub fn mail_pages_go_newest_first_and_the_queue_oldest_first(store: &dyn Store) {
    let all = queue(store, &[10, 20, 30, 40, 50]);
    set_status(store, &[all[1]], MailStatus::Sent);
    set_status(store, &[all[3]], MailStatus::Failed);
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

pub fn purges_remove_finished_mail_created_before_the_cutoff_in_chunks(store: &dyn Store) {
    // More finished messages than one chunk, so the purge takes several commits.
    let old: Vec<i64> = (0..PURGE_CHUNK as i64 + 5).collect();
    let finished = queue(store, &old);
    let (sent, failed) = finished.split_at(PURGE_CHUNK / 2);
    set_status(store, sent, MailStatus::Sent);
    set_status(store, failed, MailStatus::Failed);
    let queued_old = queue(store, &[1, 2]);
    let recent = queue(store, &[5_000, 6_000]);
    set_status(store, &recent[..1], MailStatus::Sent);

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
