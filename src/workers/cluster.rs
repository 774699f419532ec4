//! The heartbeat of a node on a shared store (PostgreSQL; see `store::cluster`): a thread that
//! every [`BEAT`] renews the node's lease with its poll low-water mark, and clears the node's
//! access cache when another node changed who may call what. Not started on a store of one
//! node.
//!
//! Revocation is therefore cluster-wide within one beat plus one read: a key deleted, a
//! collaborator removed or an account suspended through any node is refused by every node
//! well within a second.

use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::core::clock::SharedClock;
use crate::domain::endpoints::AccessCache;
use crate::domain::poll::InFlight;
use crate::store::{Store, StoreError};

/// How often the node renews its lease, publishes its mark and looks for access changes.
pub const BEAT: Duration = Duration::from_millis(250);

/// What the heartbeat needs of the node.
pub struct Parts {
    pub store: Arc<dyn Store>,
    pub in_flight: Arc<InFlight>,
    pub clock: SharedClock,
    pub access_cache: AccessCache,
}

/// The running heartbeat; [`Heartbeat::stop`] ends the node's lease.
pub struct Heartbeat {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

/// Joins the cluster (before the node takes any write) and starts the heartbeat; `None` on a
/// store of one node.
pub fn start(parts: Parts) -> Result<Option<Heartbeat>, StoreError> {
    if parts.store.cluster().is_none() {
        return Ok(None);
    }
    let mut beat = Beat {
        parts,
        access_version: None,
    };
    beat.beat()?;
    let (stop, stopped) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("heartbeat".into())
        .spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(BEAT) {
                if let Err(err) = beat.beat() {
                    log::warn!("cluster heartbeat failed: {err}");
                }
            }
            if let Some(cluster) = beat.parts.store.cluster()
                && let Err(err) = cluster.leave()
            {
                log::warn!("cannot leave the cluster: {err}");
            }
        })
        .map_err(|e| StoreError::Backend(Box::new(e)))?;
    Ok(Some(Heartbeat { stop, thread }))
}

impl Heartbeat {
    /// Stops the heartbeat and ends the node's lease; call after the ingest writer has
    /// committed its last batch.
    pub fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

struct Beat {
    parts: Parts,
    access_version: Option<u64>,
}

impl Beat {
    fn beat(&mut self) -> Result<(), StoreError> {
        let Parts {
            store,
            in_flight,
            clock,
            access_cache,
        } = &self.parts;
        let Some(cluster) = store.cluster() else {
            return Ok(());
        };
        let (low_water, now) = in_flight.low_water_mark(clock.as_ref());
        cluster.publish_low_water(low_water, now)?;
        // Every node raises it in the commit of a change of access (`EndpointsRead`).
        let version = store.read()?.access_version()?;
        if self.access_version.is_some_and(|seen| seen != version) {
            access_cache.invalidate();
        }
        self.access_version = Some(version);
        Ok(())
    }
}
