//! Periodic jobs (the expiry sweep, retention, the outbox purge) run once per period across
//! all the nodes of a shared store: each node keeps its own schedule, and a run goes ahead
//! only on the node that claims it in the store (`ClusterStore::claim_job`). On a store of one
//! node every run goes ahead.

use std::time::Duration;

use crate::core::clock::Timestamp;
use crate::store::Store;

/// Whether this node runs the job `name`, due at `now` every `period`. A claim lasts a little
/// less than the period, so the node whose schedule comes round first each period gets it
/// even if its timer fires a moment early. A store that cannot answer skips this run.
pub fn claim(store: &dyn Store, name: &str, now: Timestamp, period: Duration) -> bool {
    let Some(cluster) = store.cluster() else {
        return true;
    };
    match cluster.claim_job(name, now, period.mul_f64(0.9)) {
        Ok(claimed) => {
            if claimed {
                log::debug!("periodic job {name}: this node runs it this period");
            }
            claimed
        }
        Err(err) => {
            log::warn!("cannot claim the periodic job {name}: {err}");
            false
        }
    }
}
