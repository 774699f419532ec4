//! Readiness (`GET /readyz`) and the live gauges of `GET /metrics`.
//!
//! Liveness (`/healthz`) needs nothing: answering proves the process serves. Readiness asks
//! whether a write would be acknowledged and a search would be current: the data dir takes a
//! synced write, the store knows of nothing that refuses writes (`Store::check_writable`,
//! which never waits for a database server), the ingest writer is running and its latest
//! commit succeeded, and the search index is built and at most
//! `[operations] ready_max_index_lag` change-log entries behind.

use std::io::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::core::clock::Timestamp;
use crate::core::metrics::State;
use crate::domain::error::Result;
use crate::domain::search::SearchIndex;
use crate::store::Store;

/// The file written and removed by the storage check.
const PROBE_FILE: &str = ".readyz-probe";

/// What readiness and the gauges look at: the running server's parts, and the ingest writer's
/// state as its caller read it just now.
pub struct Vitals<'a> {
    pub store: &'a dyn Store,
    /// The search index beside the store, if there is one (see `domain::search`).
    pub index: Option<&'a dyn SearchIndex>,
    pub writer: WriterState,
    pub data_dir: &'a Path,
}

/// The ingest writer's state.
#[derive(Clone, Copy, Debug)]
pub struct WriterState {
    /// Whether the writer thread still takes writes.
    pub alive: bool,
    /// Whether its latest commit failed.
    pub last_commit_failed: bool,
    /// Writes queued and not yet taken.
    pub queue_depth: usize,
}

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

/// Runs every readiness check (blocking: it writes and syncs a file). The index may be at
/// most `max_index_lag` change-log entries behind.
pub fn readiness(vitals: &Vitals<'_>, max_index_lag: u64) -> Readiness {
    let checks = vec![
        Check::new("storage", storage_problem(vitals)),
        Check::new("ingest_writer", writer_problem(vitals.writer)),
        Check::new("search_index", index_problem(vitals, max_index_lag)),
    ];
    Readiness {
        ready: checks.iter().all(|c| c.ok),
        checks,
    }
}

fn storage_problem(vitals: &Vitals<'_>) -> Option<String> {
    if vitals.writer.last_commit_failed {
        return Some("the latest write commit failed".into());
    }
    if let Err(err) = vitals.store.check_writable() {
        return Some(format!("writes are refused: {err}"));
    }
    let path = vitals.data_dir.join(PROBE_FILE);
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

fn writer_problem(writer: WriterState) -> Option<String> {
    (!writer.alive).then(|| "the ingest writer has stopped".into())
}

fn index_problem(vitals: &Vitals<'_>, bound: u64) -> Option<String> {
    // A store that searches its records itself is always current.
    let snapshot = vitals.index?.snapshot();
    if snapshot.view.is_none() {
        return Some("the search index is being built".into());
    }
    match index_lag(vitals) {
        Ok(lag) if lag <= bound => None,
        Ok(lag) => Some(format!(
            "the search index is {lag} changes behind (at most {bound} allowed)"
        )),
        Err(err) => Some(format!("cannot read the change log: {err}")),
    }
}

/// Change-log entries committed to the store and not yet covered by the index.
fn index_lag(vitals: &Vitals<'_>) -> Result<u64> {
    let Some(index) = vitals.index else {
        return Ok(0);
    };
    let position = index.snapshot().position;
    let last = crate::store::change_log(vitals.store)?
        .change_log_bounds()?
        .last;
    Ok(last.saturating_sub(position))
}

/// The gauges of `GET /metrics`, read now; `request_body_kib` and `streams_open` are the
/// HTTP layer's.
pub fn metrics_state(
    vitals: &Vitals<'_>,
    now: Timestamp,
    request_body_kib: u64,
    streams_open: u64,
) -> Result<State> {
    let gauges = vitals.store.gauges(now)?;
    Ok(State {
        ingest_queue_depth: vitals.writer.queue_depth,
        webhook_pending: gauges.webhook_pending,
        webhook_retry_backlog: gauges.webhook_retry_backlog,
        mail_queued: gauges.mail_queued,
        mail_sent: gauges.mail_sent,
        mail_failed: gauges.mail_failed,
        search_index_lag: index_lag(vitals)?,
        request_body_kib,
        payload_dictionaries: gauges.payload_dictionaries,
        streams_open,
    })
}
