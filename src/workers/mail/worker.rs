//! The mail thread: sends due messages, applies the retry schedule, purges old ones.
//!
//! It sleeps on a condition variable for at most [`TICK`] of real time. On a wake-up from
//! [`super::Mailer::wake`] it scans the outbox; on a tick it scans only when the earliest
//! retry it knows of is due by the injected clock, so tests move time instead of waiting for
//! the schedule. Each attempt runs outside any transaction; its outcome is written in a small
//! write transaction of its own.

use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use redb::ReadableTable;

use super::smtp::{Outcome, Sender};
use crate::core::clock::{Clock, Timestamp};
use crate::store::{MailRow, MailStatus, OUTBOX, RedbStore, StoreError, from_json, to_json};

/// Waits between attempts after a transient failure: 1 min, 5 min, 30 min, 2 h, 6 h.
pub const RETRY_DELAYS: [Duration; 5] = [
    Duration::from_secs(60),
    Duration::from_secs(300),
    Duration::from_secs(1800),
    Duration::from_secs(7200),
    Duration::from_secs(21_600),
];
/// Attempts in all before a message is `failed`.
pub const MAX_ATTEMPTS: u32 = RETRY_DELAYS.len() as u32 + 1;
/// How long sent and failed messages are kept (by `created_at`); queued ones are kept.
pub const KEEP_FINISHED: Duration = Duration::from_secs(30 * 86_400);
/// How often (by the server's clock) finished messages are purged.
const PURGE_EVERY: Duration = Duration::from_secs(3600);
/// Longest real-time sleep between looks at the clock.
const TICK: Duration = Duration::from_secs(1);
/// Most rows deleted per purge transaction.
const PURGE_CHUNK: usize = 1000;
/// `last_error` of a message waiting for `[smtp]`.
pub(crate) const NO_SMTP: &str =
    "no SMTP server is configured; add an [smtp] section to the config file and restart";

/// Wake-up and stop flags shared by the handles and the thread.
#[derive(Default)]
pub(crate) struct Signal {
    flags: Mutex<Flags>,
    changed: Condvar,
}

#[derive(Default)]
struct Flags {
    woken: bool,
    stopping: bool,
}

enum Wake {
    Woken,
    Tick,
    Stop,
}

impl Signal {
    pub(crate) fn wake(&self) {
        self.flags().woken = true;
        self.changed.notify_one();
    }

    pub(crate) fn stop(&self) {
        self.flags().stopping = true;
        self.changed.notify_one();
    }

    fn stopping(&self) -> bool {
        self.flags().stopping
    }

    fn flags(&self) -> std::sync::MutexGuard<'_, Flags> {
        // The flags are two booleans: a panic elsewhere cannot leave them inconsistent.
        self.flags.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait(&self, timeout: Duration) -> Wake {
        let mut flags = self.flags();
        if !flags.woken && !flags.stopping {
            flags = self
                .changed
                .wait_timeout(flags, timeout)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if flags.stopping {
            Wake::Stop
        } else if std::mem::take(&mut flags.woken) {
            Wake::Woken
        } else {
            Wake::Tick
        }
    }
}

/// The thread's loop, until [`Signal::stop`].
pub(crate) fn run(store: &RedbStore, clock: &dyn Clock, sender: Option<&Sender>, signal: &Signal) {
    if sender.is_none() {
        match queued(store) {
            Ok(rows) if !rows.is_empty() => log::info!(
                "mail: {} e-mails are queued and wait for [smtp] to be configured",
                rows.len()
            ),
            Ok(_) => {}
            Err(err) => log::error!("mail: cannot read the outbox: {err}"),
        }
    }
    let mut scan = true;
    let mut next_due: Option<Timestamp> = None;
    let mut next_purge = clock.now();
    loop {
        let now = clock.now();
        if scan || next_due.is_some_and(|due| due <= now) {
            let scanned = match sender {
                Some(sender) => deliver_due(store, clock, sender, signal),
                None => note_unsent(store).map(|()| None),
            };
            next_due = scanned.unwrap_or_else(|err| {
                log::error!("mail: cannot read or update the outbox: {err}");
                Some(now)
            });
        }
        if next_purge <= now {
            next_purge = now.plus(PURGE_EVERY);
            match purge(store, now.minus(KEEP_FINISHED)) {
                Ok(0) => {}
                Ok(n) => log::info!("mail: purged {n} sent or failed e-mails older than 30 days"),
                Err(err) => log::error!("mail: purge failed: {err}"),
            }
        }
        match signal.wait(TICK) {
            Wake::Stop => return,
            Wake::Woken => scan = true,
            Wake::Tick => scan = false,
        }
    }
}

/// Queued rows, oldest first.
fn queued(store: &RedbStore) -> Result<Vec<MailRow>, StoreError> {
    let txn = store.read()?;
    let table = txn.open_table(OUTBOX)?;
    let mut rows = Vec::new();
    for entry in table.iter()? {
        let (_, value) = entry?;
        let row: MailRow = from_json(value.value())?;
        if row.status == MailStatus::Queued {
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Attempts every queued message that is due; returns when the next one will be.
fn deliver_due(
    store: &RedbStore,
    clock: &dyn Clock,
    sender: &Sender,
    signal: &Signal,
) -> Result<Option<Timestamp>, StoreError> {
    let now = clock.now();
    let mut next_due: Option<Timestamp> = None;
    let mut later = |t: Timestamp| next_due = Some(next_due.map_or(t, |due| due.min(t)));
    for row in queued(store)? {
        if row.next_attempt_at > now {
            later(row.next_attempt_at);
            continue;
        }
        if signal.stopping() {
            break;
        }
        let outcome = sender.send(&row, clock.now());
        let Some(row) = record_attempt(store, row.id, &outcome, clock.now())? else {
            continue;
        };
        match &outcome {
            Outcome::Sent => log::info!("mail {} sent to {}", row.id, row.to),
            Outcome::Transient(err) if row.status == MailStatus::Queued => log::warn!(
                "mail {} to {}: attempt {} failed ({err}); next attempt at {}",
                row.id,
                row.to,
                row.attempts,
                row.next_attempt_at.to_rfc3339()
            ),
            Outcome::Transient(err) | Outcome::Permanent(err) => log::warn!(
                "mail {} to {} failed after {} attempt(s): {err}",
                row.id,
                row.to,
                row.attempts
            ),
        }
        if row.status == MailStatus::Queued {
            later(row.next_attempt_at);
        }
    }
    Ok(next_due)
}

/// Writes the outcome of an attempt on the row; returns the updated row (`None` if it is
/// gone, which only a concurrent purge of a finished row could cause).
fn record_attempt(
    store: &RedbStore,
    id: u64,
    outcome: &Outcome,
    now: Timestamp,
) -> Result<Option<MailRow>, StoreError> {
    let txn = store.write()?;
    let row = {
        let mut table = txn.open_table(OUTBOX)?;
        let mut row: MailRow = match table.get(id)? {
            Some(value) => from_json(value.value())?,
            None => return Ok(None),
        };
        after_attempt(&mut row, outcome, now);
        table.insert(id, to_json(&row)?.as_slice())?;
        row
    };
    txn.commit()?;
    Ok(Some(row))
}

/// The retry policy: what an attempt's outcome does to the row.
pub(crate) fn after_attempt(row: &mut MailRow, outcome: &Outcome, now: Timestamp) {
    row.attempts = row.attempts.saturating_add(1);
    match outcome {
        Outcome::Sent => {
            row.status = MailStatus::Sent;
            row.sent_at = Some(now);
            row.last_error = None;
        }
        Outcome::Permanent(err) => {
            row.status = MailStatus::Failed;
            row.last_error = Some(err.clone());
        }
        Outcome::Transient(err) => {
            row.last_error = Some(err.clone());
            let delay = usize::try_from(row.attempts - 1)
                .ok()
                .and_then(|i| RETRY_DELAYS.get(i));
            match delay {
                Some(delay) if row.attempts < MAX_ATTEMPTS => {
                    row.next_attempt_at = now.plus(*delay);
                }
                _ => row.status = MailStatus::Failed,
            }
        }
    }
}

/// Without `[smtp]`: logs each queued message once (recipient and subject, never the body)
/// and marks it with [`NO_SMTP`]; it stays queued.
fn note_unsent(store: &RedbStore) -> Result<(), StoreError> {
    let fresh: Vec<MailRow> = queued(store)?
        .into_iter()
        .filter(|row| row.last_error.as_deref() != Some(NO_SMTP))
        .collect();
    if fresh.is_empty() {
        return Ok(());
    }
    let txn = store.write()?;
    {
        let mut table = txn.open_table(OUTBOX)?;
        for mut row in fresh {
            log::info!(
                "mail {} not sent (no [smtp] configured): to {}, subject {:?}",
                row.id,
                row.to,
                row.subject
            );
            row.last_error = Some(NO_SMTP.to_string());
            table.insert(row.id, to_json(&row)?.as_slice())?;
        }
    }
    txn.commit()?;
    Ok(())
}

/// Deletes sent and failed messages created before `cutoff`; returns how many.
fn purge(store: &RedbStore, cutoff: Timestamp) -> Result<usize, StoreError> {
    let expired: Vec<u64> = {
        let txn = store.read()?;
        let table = txn.open_table(OUTBOX)?;
        let mut ids = Vec::new();
        for entry in table.iter()? {
            let (key, value) = entry?;
            let row: MailRow = from_json(value.value())?;
            if row.status != MailStatus::Queued && row.created_at < cutoff {
                ids.push(key.value());
            }
        }
        ids
    };
    for chunk in expired.chunks(PURGE_CHUNK) {
        let txn = store.write()?;
        {
            let mut table = txn.open_table(OUTBOX)?;
            for id in chunk {
                table.remove(*id)?;
            }
        }
        txn.commit()?;
    }
    Ok(expired.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued_row() -> MailRow {
        MailRow {
            id: 1,
            kind: "test".into(),
            to: "a@example.com".into(),
            subject: "s".into(),
            body: "b".into(),
            status: MailStatus::Queued,
            attempts: 0,
            last_error: None,
            created_at: Timestamp(0),
            next_attempt_at: Timestamp(0),
            sent_at: None,
        }
    }

    #[test]
    fn transient_failures_follow_the_schedule_then_fail() {
        let mut row = queued_row();
        let mut now = Timestamp(1_000_000);
        for delay in RETRY_DELAYS {
            after_attempt(&mut row, &Outcome::Transient("451 later".into()), now);
            assert_eq!(row.status, MailStatus::Queued);
            assert_eq!(row.next_attempt_at, now.plus(delay));
            assert_eq!(row.last_error.as_deref(), Some("451 later"));
            now = row.next_attempt_at;
        }
        assert_eq!(row.attempts, 5);
        after_attempt(&mut row, &Outcome::Transient("451 still".into()), now);
        assert_eq!(row.status, MailStatus::Failed);
        assert_eq!(row.attempts, MAX_ATTEMPTS);
        assert_eq!(row.attempts, 6);
        assert_eq!(row.last_error.as_deref(), Some("451 still"));
    }

    #[test]
    fn permanent_failure_is_final_and_success_clears_the_error() {
        let mut row = queued_row();
        after_attempt(&mut row, &Outcome::Permanent("550 no".into()), Timestamp(5));
        assert_eq!(row.status, MailStatus::Failed);
        assert_eq!(row.attempts, 1);
        assert_eq!(row.last_error.as_deref(), Some("550 no"));

        let mut row = queued_row();
        after_attempt(&mut row, &Outcome::Transient("451".into()), Timestamp(5));
        after_attempt(&mut row, &Outcome::Sent, Timestamp(7));
        assert_eq!(row.status, MailStatus::Sent);
        assert_eq!(row.attempts, 2);
        assert_eq!(row.sent_at, Some(Timestamp(7)));
        assert_eq!(row.last_error, None);
    }

    #[test]
    fn purge_keeps_queued_and_recent_messages() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(&dir.path().join("t.redb"), 1 << 20).unwrap();
        let old = Timestamp(1_000_000);
        let cutoff = old.plus(Duration::from_secs(1));
        let rows = [
            (1, MailStatus::Sent, old),
            (2, MailStatus::Failed, old),
            (3, MailStatus::Queued, old),
            (4, MailStatus::Sent, cutoff),
        ];
        let txn = store.write().unwrap();
        {
            let mut table = txn.open_table(OUTBOX).unwrap();
            for (id, status, created_at) in rows {
                let row = MailRow {
                    id,
                    status,
                    created_at,
                    ..queued_row()
                };
                table.insert(id, to_json(&row).unwrap().as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
        assert_eq!(purge(&store, cutoff).unwrap(), 2);
        let left: Vec<u64> = queued(&store).unwrap().iter().map(|r| r.id).collect();
        assert_eq!(left, [3]);
        let txn = store.read().unwrap();
        let table = txn.open_table(OUTBOX).unwrap();
        assert!(table.get(4).unwrap().is_some());
        assert!(table.get(1).unwrap().is_none());
    }
}
