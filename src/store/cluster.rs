//! What the nodes sharing one store (PostgreSQL) tell each other through it: that they are
//! alive, how far their creates have got, which of them runs a periodic job, and that access
//! rights changed. A store of one node (redb) has none of this (`Store::cluster` is `None`).
//!
//! **The poll invariant across nodes.** Each node stamps creates on its own clock and commits
//! them in its own order, so a record could otherwise appear below a cursor a consumer has
//! already passed. Every node therefore publishes a *low-water mark* under a lease: a time
//! below which it will never commit another create (the oldest create it has in flight, or its
//! clock when it has none). A poll shows only records below the lowest mark of the nodes whose
//! lease is live (the other nodes' published marks, [`ClusterStore::visibility_floor`], and
//! the polled node's current one). A node whose lease lapses (it died, or lost the database
//! for longer than a lease) is no longer waited for, so it must never commit a create stamped
//! before it joins again: the store refuses its batches while its lease is not live with a
//! margin, and refuses creates stamped before its latest join. A killed node thus holds the
//! feed back by at most one lease.
//!
//! Leases compare the database's clock with itself: nodes whose clocks disagree still agree on
//! them. Marks are on each node's clock, which is what its stamps are on.

use std::net::IpAddr;
use std::time::Duration;

use crate::core::clock::Timestamp;
use crate::store::{Partition, StoreError};

/// What [`ClusterStore::claim_job`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobClaim {
    /// The run is this node's.
    Claimed,
    /// Another node has run it this period, or this node has.
    NotDue,
    /// Another node's run is under way (its lease is live).
    Held,
}

/// The failed-login limits (`[accounts]`), as the shared count applies them.
#[derive(Clone, Copy, Debug)]
pub struct LoginLimits {
    pub per_account: u32,
    pub per_address: u32,
    pub window: Duration,
}

pub trait ClusterStore: Send + Sync {
    /// Renews this node's lease and publishes `low_water` as its mark; the first call, and the
    /// first after the lease lapsed, joins the cluster anew with `now` (its clock) as both its
    /// mark and the time its creates must be stamped after.
    fn publish_low_water(&self, low_water: Timestamp, now: Timestamp) -> Result<(), StoreError>;

    /// Ends this node's lease (a clean shutdown): the others stop waiting for it at once.
    fn leave(&self) -> Result<(), StoreError>;

    /// The lowest mark of the other nodes whose lease is live: none of them will commit a
    /// create stamped below it. `None` when no other node is live. This node's own mark is
    /// left out: the caller bounds a poll by its own in-flight creates, which are current,
    /// while the mark it published is up to a heartbeat old.
    fn visibility_floor(&self) -> Result<Option<Timestamp>, StoreError>;

    /// Claims the run of the periodic job `name` that is due at `now`, for one node per
    /// `period` across the cluster; the run is this node's until [`ClusterStore::finish_job`].
    /// A run whose node's lease lapsed before it finished is taken over by the next node to
    /// ask, whatever the period. Times are the nodes' own (the injected clock), as for every
    /// schedule.
    fn claim_job(
        &self,
        name: &str,
        now: Timestamp,
        period: Duration,
    ) -> Result<JobClaim, StoreError>;

    /// Ends this node's run of `name`: `false` when it was no longer this node's (its lease
    /// lapsed and another node took the run over).
    fn finish_job(&self, name: &str) -> Result<bool, StoreError>;

    /// Claims the pending webhook delivery `id` for this node for `hold` (its attempt and the
    /// commit of its outcome): `false` when another node holds it. A node that dies with a
    /// claim leaves it to the others once `hold` has passed; the dispatcher's attempt numbers
    /// keep an outcome from being recorded twice.
    fn claim_delivery(&self, id: u64, hold: Duration) -> Result<bool, StoreError>;

    /// Books a start of a delivery of the rate-limited `subscription` (partition, number) at
    /// `now` across the cluster: its starts at least `interval_us` apart on average, at most
    /// `tolerance_us` ahead of that pace (`workers::dispatcher::pacing`, which keeps the same
    /// pace on one node). `Err` says when it may start.
    fn pace(
        &self,
        subscription: (Partition, u32),
        interval_us: i64,
        tolerance_us: i64,
        now: Timestamp,
    ) -> Result<Result<(), Timestamp>, StoreError>;

    /// Claims the queued e-mail `id` for this node for `hold`, like
    /// [`ClusterStore::claim_delivery`].
    fn claim_mail(&self, id: u64, hold: Duration) -> Result<bool, StoreError>;

    /// Counts a login attempt of `email` from `address` (as limited: see
    /// `domain::sessions`) at `now` as failed and returns its slot, in one atomic step; or,
    /// while the pair or the address is at its limit within the window, the time it may try
    /// again.
    fn reserve_login(
        &self,
        email: &str,
        address: Option<IpAddr>,
        now: Timestamp,
        limits: LoginLimits,
    ) -> Result<Result<u64, Timestamp>, StoreError>;

    /// The attempt in `slot` had the right password: the pair starts afresh, the address gets
    /// this one slot back.
    fn login_succeeded(
        &self,
        slot: u64,
        email: &str,
        address: Option<IpAddr>,
    ) -> Result<(), StoreError>;
}
