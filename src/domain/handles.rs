//! The handles every service is given (never the whole server state): the store, the clock,
//! and the one after-commit path.

use std::sync::Arc;

use crate::core::clock::{SharedClock, Timestamp};
use crate::domain::error::Result;
use crate::store::{self, Effects, Store, WriteTx};

/// What happens after a commit: wake the workers and clear the caches its [`Effects`] name.
/// The server wires one implementation to the mail worker, the dispatcher, the access cache,
/// the search indexer and the change streams, and every writer uses it: services through
/// [`Handles::write`], the ingest writer, the purges (see [`Handles::committed`]). The other
/// nodes of a shared store learn of a change from the store itself (the heartbeat).
pub trait AfterCommit: Send + Sync {
    fn committed(&self, effects: Effects);
}

/// The store, the clock and the after-commit path; cheap to clone.
#[derive(Clone)]
pub struct Handles {
    pub store: Arc<dyn Store>,
    pub clock: SharedClock,
    after_commit: Arc<dyn AfterCommit>,
}

impl Handles {
    pub fn new(
        store: Arc<dyn Store>,
        clock: SharedClock,
        after_commit: Arc<dyn AfterCommit>,
    ) -> Handles {
        Handles {
            store,
            clock,
            after_commit,
        }
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Runs `work` in one durable write transaction, then carries out what the commit requires:
    /// the only way services write, so no change forgets to wake a worker or clear a cache.
    pub fn write<T>(&self, work: impl FnMut(&mut dyn WriteTx) -> Result<T>) -> Result<T> {
        let (value, effects) = store::write(self.store.as_ref(), work)?;
        self.after_commit.committed(effects);
        Ok(value)
    }

    /// Carries out what a commit made outside [`Handles::write`] requires: the ingest
    /// writer's group commits and the purges' chunks, which the store commits itself.
    pub fn committed(&self, effects: Effects) {
        self.after_commit.committed(effects);
    }
}

/// The after-commit path of a store that no worker or cache follows (a stopped server's data
/// dir opened by a tool or a test): nothing to do.
pub struct Unattended;

impl AfterCommit for Unattended {
    fn committed(&self, _: Effects) {}
}
