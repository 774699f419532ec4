//! The mail thread: sends due messages, applies the retry schedule, purges old ones.
//!
//! It sleeps on a condition variable for at most [`TICK`] of real time. On a wake-up from
//! [`super::Mailer::wake`] it scans the outbox; on a tick it scans only when the earliest
//! retry it knows of is due by the injected clock, so tests move time instead of waiting for
//! the schedule. Each attempt runs outside any transaction; its outcome is written in a small
//! write transaction of its own. The thread's writes queue no mail, so they need no
//! after-commit work and go to the store directly.

use std::ops::ControlFlow;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

use super::smtp::{Outcome, Sender};
use crate::core::clock::{Clock, Timestamp};
use crate::domain::mail::{KEEP_FINISHED, MAX_ATTEMPTS, RETRY_DELAYS};
use crate::store::{self, MailRow, MailStatus, Store, StoreError};

/// How often (by the server's clock) finished messages are purged.
const PURGE_EVERY: Duration = Duration::from_secs(3600);
/// Longest real-time sleep between looks at the clock.
const TICK: Duration = Duration::from_secs(1);
/// Queued messages read at a time.
const QUEUED_PAGE: usize = 256;
/// How long this node's claim on an e-mail holds on a shared store: one SMTP exchange, with
/// room to spare; a node that dies mid-send leaves the message to the others after it.
const CLAIM_HOLD: Duration = Duration::from_secs(120);
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
pub(crate) fn run(store: &dyn Store, clock: &dyn Clock, sender: Option<&Sender>, signal: &Signal) {
    if sender.is_none() {
        match count_queued(store) {
            Ok(0) => {}
            Ok(n) => {
                log::info!("mail: {n} e-mails are queued and wait for [smtp] to be configured")
            }
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
            let turn = crate::domain::jobs::run(store, "outbox_purge", now, PURGE_EVERY, || {
                store.purge_mail(now.minus(KEEP_FINISHED))
            });
            next_purge = turn.next;
            match turn.ran {
                None | Some(Ok(0)) => {}
                Some(Ok(n)) => {
                    log::info!("mail: purged {n} sent or failed e-mails older than 30 days")
                }
                Some(Err(err)) => log::error!("mail: purge failed: {err}"),
            }
        }
        match signal.wait(TICK) {
            Wake::Stop => return,
            Wake::Woken => scan = true,
            Wake::Tick => scan = false,
        }
    }
}

/// Runs `each` on every queued message, oldest first, reading them a page at a time.
fn for_each_queued(
    store: &dyn Store,
    mut each: impl FnMut(MailRow) -> Result<ControlFlow<()>, StoreError>,
) -> Result<(), StoreError> {
    let mut after = 0;
    loop {
        let page = store.read()?.queued_mail(after, QUEUED_PAGE)?;
        let last_page = page.len() < QUEUED_PAGE;
        for row in page {
            after = row.id;
            if each(row)?.is_break() {
                return Ok(());
            }
        }
        if last_page {
            return Ok(());
        }
    }
}

fn count_queued(store: &dyn Store) -> Result<usize, StoreError> {
    let mut count = 0;
    for_each_queued(store, |_| {
        count += 1;
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(count)
}

/// `next_due`, made `t` if that is earlier.
fn keep_earliest(next_due: &mut Option<Timestamp>, t: Timestamp) {
    *next_due = Some(next_due.map_or(t, |due| due.min(t)));
}

/// Attempts every queued message that is due; returns when the next one will be.
fn deliver_due(
    store: &dyn Store,
    clock: &dyn Clock,
    sender: &Sender,
    signal: &Signal,
) -> Result<Option<Timestamp>, StoreError> {
    let now = clock.now();
    let mut next_due: Option<Timestamp> = None;
    for_each_queued(store, |row| {
        if row.next_attempt_at > now {
            keep_earliest(&mut next_due, row.next_attempt_at);
            return Ok(ControlFlow::Continue(()));
        }
        if signal.stopping() {
            return Ok(ControlFlow::Break(()));
        }
        // On a shared store another node may be sending it.
        if let Some(cluster) = store.cluster()
            && !cluster.claim_mail(row.id, CLAIM_HOLD)?
        {
            return Ok(ControlFlow::Continue(()));
        }
        let outcome = sender.send(&row, clock.now());
        let Some(row) = record_attempt(store, row.id, &outcome, clock.now())? else {
            return Ok(ControlFlow::Continue(()));
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
            keep_earliest(&mut next_due, row.next_attempt_at);
        }
        Ok(ControlFlow::Continue(()))
    })?;
    Ok(next_due)
}

/// Writes the outcome of an attempt on the row; returns the updated row (`None` if it is
/// gone, which only a concurrent purge of a finished row could cause).
fn record_attempt(
    store: &dyn Store,
    id: u64,
    outcome: &Outcome,
    now: Timestamp,
) -> Result<Option<MailRow>, StoreError> {
    let (row, _) = store::write(store, |tx| {
        let Some(mut row) = tx.mail(id)? else {
            return Ok::<_, StoreError>(None);
        };
        after_attempt(&mut row, outcome, now);
        tx.put_mail(&row)?;
        Ok(Some(row))
    })?;
    Ok(row)
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
fn note_unsent(store: &dyn Store) -> Result<(), StoreError> {
    let mut fresh = Vec::new();
    for_each_queued(store, |row| {
        if row.last_error.as_deref() != Some(NO_SMTP) {
            fresh.push(row);
        }
        Ok(ControlFlow::Continue(()))
    })?;
    if fresh.is_empty() {
        return Ok(());
    }
    for row in &mut fresh {
        log::info!(
            "mail {} not sent (no [smtp] configured): to {}, subject {:?}",
            row.id,
            row.to,
            row.subject
        );
        row.last_error = Some(NO_SMTP.to_string());
    }
    store::write(store, |tx| {
        for row in &fresh {
            tx.put_mail(row)?;
        }
        Ok::<_, StoreError>(())
    })?;
    Ok(())
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
        let opened = crate::store::open_embedded(&dir.path().join("t.redb"), 1 << 20, 0).unwrap();
        let store: &dyn Store = opened.as_ref();
        let old = Timestamp(1_000_000);
        let cutoff = old.plus(Duration::from_secs(1));
        let rows = [
            (1, MailStatus::Sent, old),
            (2, MailStatus::Failed, old),
            (3, MailStatus::Queued, old),
            (4, MailStatus::Sent, cutoff),
        ];
        store::write(store, |tx| {
            for (id, status, created_at) in rows {
                let row = MailRow {
                    id,
                    status,
                    created_at,
                    ..queued_row()
                };
                tx.put_mail(&row)?;
            }
            Ok::<_, StoreError>(())
        })
        .unwrap();
        assert_eq!(store.purge_mail(cutoff).unwrap(), 2);
        let left: Vec<u64> = store
            .read()
            .unwrap()
            .queued_mail(0, 10)
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(left, [3]);
        let snapshot = store.read().unwrap();
        assert!(snapshot.mail(4).unwrap().is_some());
        assert!(snapshot.mail(1).unwrap().is_none());
    }
}
