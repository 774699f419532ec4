//! Readiness (`GET /readyz`) and the live gauges of `GET /metrics`.
//!
//! Liveness (`/healthz`) needs nothing: answering proves the process serves. Readiness asks
//! whether a write would be acknowledged and a search would be current: the data dir takes a
//! synced write, the ingest writer is running and its latest commit succeeded, and the search
//! index is built and at most `[operations] ready_max_index_lag` change-log entries behind.

use std::io::Write as _;

use redb::{ReadableTable, ReadableTableMetadata};
use serde::Serialize;

use crate::core::metrics::State;
use crate::domain::error::Result;
use crate::http::app::App;
use crate::store::{
    DELIVERIES_DUE, LAST_CHANGE_SEQ, META, MailRow, MailStatus, OUTBOX, from_json, read_counter,
    time_key,
};

/// The file written and removed by the storage check.
const PROBE_FILE: &str = ".readyz-probe";

/// The answer of `GET /readyz`.
#[derive(Debug, Serialize)]
pub struct Readiness {
    pub ready: bool,
    pub checks: Vec<Check>,
}

/// One readiness check and, when it fails, why.
#[derive(Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl Check {
    fn new(name: &'static str, problem: Option<String>) -> Check {
        Check {
            name,
            ok: problem.is_none(),
            problem,
        }
    }
}

/// Runs every readiness check (blocking: it writes and syncs a file).
pub fn readiness(app: &App) -> Readiness {
    let checks = vec![
        Check::new("storage", storage_problem(app)),
        Check::new("ingest_writer", writer_problem(app)),
        Check::new("search_index", index_problem(app)),
    ];
    Readiness {
        ready: checks.iter().all(|c| c.ok),
        checks,
    }
}

fn storage_problem(app: &App) -> Option<String> {
    if app.ingest.last_commit_failed() {
        return Some("the latest write commit failed".into());
    }
    if let Err(err) = app.store.check_free_space() {
        return Some(format!("writes are refused: {err}"));
    }
    let path = app.config.data_dir.join(PROBE_FILE);
    let probe = std::fs::File::create(&path).and_then(|mut file| {
        file.write_all(b"ok")?;
        file.sync_all()
    });
    let removed = std::fs::remove_file(&path);
    match probe.and(removed) {
        Ok(()) => None,
        Err(err) => Some(format!("the data dir is not writable: {err}")),
    }
}

fn writer_problem(app: &App) -> Option<String> {
    (!app.ingest.writer_alive()).then(|| "the ingest writer has stopped".into())
}

fn index_problem(app: &App) -> Option<String> {
    let snapshot = app.search.snapshot();
    if snapshot.view.is_none() {
        return Some("the search index is being built".into());
    }
    let bound = app.config.operations.ready_max_index_lag;
    match index_lag(app) {
        Ok(lag) if lag <= bound => None,
        Ok(lag) => Some(format!(
            "the search index is {lag} changes behind (at most {bound} allowed)"
        )),
        Err(err) => Some(format!("cannot read the change log: {err}")),
    }
}

/// Change-log entries committed to the store and not yet covered by the index.
fn index_lag(app: &App) -> Result<u64> {
    let position = app.search.snapshot().position;
    let txn = app.store.read()?;
    let last = read_counter(&txn.open_table(META)?, LAST_CHANGE_SEQ)?;
    Ok(last.saturating_sub(position))
}

/// The gauges of `GET /metrics`, read now.
pub fn metrics_state(app: &App) -> Result<State> {
    let now = time_key(app.clock.now());
    let txn = app.store.read()?;
    let due = txn.open_table(DELIVERIES_DUE)?;
    let webhook_pending = due.len()?;
    let mut webhook_retry_backlog = 0;
    for entry in due.range((now.saturating_add(1), 0)..)? {
        entry?;
        webhook_retry_backlog += 1;
    }
    let (mut mail_queued, mut mail_sent, mut mail_failed) = (0, 0, 0);
    for entry in txn.open_table(OUTBOX)?.iter()? {
        let (_, row) = entry?;
        let row: MailRow = from_json(row.value())?;
        match row.status {
            MailStatus::Queued => mail_queued += 1,
            MailStatus::Sent => mail_sent += 1,
            MailStatus::Failed => mail_failed += 1,
        }
    }
    drop(txn);
    Ok(State {
        ingest_queue_depth: app.ingest.queue_depth(),
        webhook_pending,
        webhook_retry_backlog,
        mail_queued,
        mail_sent,
        mail_failed,
        search_index_lag: index_lag(app)?,
    })
}
