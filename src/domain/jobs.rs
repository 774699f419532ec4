//! Periodic jobs (the expiry sweep, retention, the outbox purge, the purge of deleted
//! endpoints) run once per period across all the nodes of a shared store: each node keeps its
//! own schedule, and a run goes ahead only on the node that claims it in the store
//! (`ClusterStore::claim_job`). The run is that node's until it ends; should the node lose its
//! lease first (cut off from the database, or dead), the next node whose schedule asks takes
//! the run over, and the first node, back, finds it is no longer its own. The jobs delete only
//! what is past its time, so a run taken over never deletes anything the other would not.
//! On a store of one node every run goes ahead.

use std::time::Duration;

use crate::core::clock::Timestamp;
use crate::store::Store;
use crate::store::cluster::JobClaim;

/// How soon a schedule looks again at a job another node is running, to take the run over
/// once that node has lost its lease.
pub const LOOK_AGAIN: Duration = Duration::from_secs(5);

/// What a schedule's look at a due job came to.
pub struct Turn<T> {
    /// What the run gave, when this node ran the job.
    pub ran: Option<T>,
    /// When the schedule looks again: a period on, or [`LOOK_AGAIN`] while another node's
    /// run is under way.
    pub next: Timestamp,
}

/// Runs `job`, the periodic job `name` due on this node's schedule at `now` every `period`,
/// if this node is the one to run it, and records the run as ended. A store that cannot
/// answer skips this turn.
pub fn run<T>(
    store: &dyn Store,
    name: &str,
    now: Timestamp,
    period: Duration,
    job: impl FnOnce() -> T,
) -> Turn<T> {
    let Some(cluster) = store.cluster() else {
        return Turn {
            ran: Some(job()),
            next: now.plus(period),
        };
    };
    // A claim lasts a little less than the period, so the node whose schedule comes round
    // first each period gets it even if its timer fires a moment early.
    let claim = match cluster.claim_job(name, now, period.mul_f64(0.9)) {
        Ok(claim) => claim,
        Err(err) => {
            log::warn!("cannot claim the periodic job {name}: {err}");
            JobClaim::NotDue
        }
    };
    match claim {
        JobClaim::Claimed => {
            log::debug!("periodic job {name}: this node runs it this period");
            let ran = job();
            match cluster.finish_job(name) {
                Ok(true) => {}
                Ok(false) => log::warn!(
                    "periodic job {name}: this node lost its lease during the run, which \
                     another node has taken over"
                ),
                Err(err) => log::warn!("periodic job {name}: cannot record the run's end: {err}"),
            }
            Turn {
                ran: Some(ran),
                next: now.plus(period),
            }
        }
        JobClaim::NotDue => Turn {
            ran: None,
            next: now.plus(period),
        },
        JobClaim::Held => Turn {
            ran: None,
            next: now.plus(LOOK_AGAIN.min(period)),
        },
    }
}
