//! Payload compression a store does itself: the redb store compresses each stored payload
//! with a zstd dictionary it trains on its own records (`store::redb::payload` has the
//! layouts and the reasons); `workers::compression` asks it, off the write path, when a new
//! dictionary is due.
//!
//! A dictionary holds raw pieces of the records it was trained on, so it outlives their
//! deletion: [`PayloadDictionaries::may_hold`] tells whether an erased record may still be in
//! one, and [`PayloadDictionaries::replace_dictionaries`] takes it out, on a running server.

use crate::core::clock::Timestamp;
use crate::store::{Partition, StoreError};

/// A store that trains dictionaries on its own records to compress them.
pub trait PayloadDictionaries: Send + Sync {
    /// Whether a dictionary should be trained now: there is none and records were written
    /// since the last attempt (or the store opened with records), or what was written since
    /// the last one compresses much worse than its sample did.
    /// Cheap: counters only.
    fn dictionary_due(&self) -> bool;

    /// Trains a dictionary on a sample of the newest records of each endpoint and makes it the
    /// one writes use from now on; `now` is kept as its training time. `None` while the store
    /// holds too few records to learn from. Takes a second or so; writes go on meanwhile
    /// (another training or a replacement under way is waited for).
    fn train_dictionary(&self, now: Timestamp) -> Result<Option<TrainedDictionary>, StoreError>;

    /// Whether a dictionary the store keeps may have been trained on a record of `partition`
    /// whose id is in `ids` (inclusive): its sample took records of that partition in a range
    /// of ids that meets `ids`, or it was trained before samples were recorded. Asked after an
    /// erasure has committed, it also accounts for a training under way (it waits for it).
    fn may_hold(&self, partition: Partition, ids: (u128, u128)) -> Result<bool, StoreError>;

    /// Trains a dictionary afresh on the records the store holds now, stores every record
    /// anew with it and removes every other dictionary, so that no dictionary keeps pieces of
    /// records deleted or erased since it was trained. Safe on a running server: writes go on
    /// meanwhile, between its transactions of a few thousand records each (on redb, 200,000
    /// records of 500 bytes took 0.8 s, each transaction holding the write lock 17 ms at most).
    fn replace_dictionaries(&self, now: Timestamp) -> Result<Recompressed, StoreError>;
}

/// What training a dictionary did.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainedDictionary {
    /// zstd's id of the dictionary (every compressed value names it).
    pub id: u32,
    /// Its size in bytes.
    pub bytes: usize,
    pub sample_records: usize,
    pub sample_bytes: usize,
    /// Stored bytes per payload byte of the sample, compressed with it.
    pub sample_share: f64,
}

/// What [`PayloadDictionaries::replace_dictionaries`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recompressed {
    /// Records stored anew (compressed with the new dictionary, or plain).
    pub records: u64,
    /// Dictionaries removed: no record names them any more.
    pub dictionaries_removed: usize,
}
