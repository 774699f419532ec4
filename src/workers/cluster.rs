//! The heartbeat of a node on a shared store (PostgreSQL; see `store::cluster`): a thread that
//! every [`BEAT`] renews the node's lease with its poll low-water mark, clears the node's
//! access cache when another node changed who may call what, and drops the change-stream
//! frames this node keeps of a partition an erasure (run by whichever node) removes records
//! of. Not started on a store of one node.
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
use crate::domain::stream::Streams;
use crate::store::{ErasureState, Partition, Store, StoreError};

/// How often the node renews its lease, publishes its mark and looks for access changes.
pub const BEAT: Duration = Duration::from_millis(250);

/// What the heartbeat needs of the node.
pub struct Parts {
    pub store: Arc<dyn Store>,
    pub in_flight: Arc<InFlight>,
    pub clock: SharedClock,
    pub access_cache: AccessCache,
    pub streams: Streams,
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
        erasing: Vec::new(),
        erasures_seen: 0,
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
    /// The partitions of the erasures running at the last beat, and the highest erasure id
    /// seen: an erasure that started, or ended, since then may have removed records whose
    /// frames this node read meanwhile.
    erasing: Vec<Partition>,
    erasures_seen: u64,
}

impl Beat {
    fn beat(&mut self) -> Result<(), StoreError> {
        let Parts {
            store,
            in_flight,
            clock,
            access_cache,
            ..
        } = &self.parts;
        let Some(cluster) = store.cluster() else {
            return Ok(());
        };
        let (low_water, now) = in_flight.low_water_mark(clock.as_ref());
        cluster.publish_low_water(low_water, now)?;
        let snapshot = store.read()?;
        // Every node raises it in the commit of a change of access (`EndpointsRead`).
        let version = snapshot.access_version()?;
        if self.access_version.is_some_and(|seen| seen != version) {
            access_cache.invalidate();
        }
        self.access_version = Some(version);
        let followed = snapshot.erasures_to_follow(self.erasures_seen)?;
        drop(snapshot);
        let mut erasing: Vec<Partition> = followed.iter().map(|row| row.partition).collect();
        let dropped: Vec<Partition> = erasing.iter().chain(&self.erasing).copied().collect();
        if !dropped.is_empty() {
            self.parts.streams.erased(&dropped);
        }
        self.erasures_seen = followed
            .iter()
            .map(|row| row.id)
            .fold(self.erasures_seen, u64::max);
        erasing.retain(|p| {
            followed
                .iter()
                .any(|row| row.partition == *p && row.state == ErasureState::Running)
        });
        self.erasing = erasing;
        Ok(())
    }
}
