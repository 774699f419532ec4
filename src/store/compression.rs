//! Payload compression a store does itself: the redb store compresses each stored payload
//! with a zstd dictionary it trains on its own records (`store::redb::payload` has the
//! layouts and the reasons); `workers::compression` asks it, off the write path, when a new
//! dictionary is due.

use crate::store::StoreError;

/// A store that trains dictionaries on its own records to compress them.
pub trait PayloadDictionaries: Send + Sync {
    /// Whether a dictionary should be trained now: there is none and records were written
    /// since the last attempt (or the store opened with records), or what was written since
    /// the last one compresses much worse than its sample did.
    /// Cheap: counters only.
    fn dictionary_due(&self) -> bool;

    /// Trains a dictionary on a sample of the newest records of each endpoint and makes it the
    /// one writes use from now on. `None` while the store holds too few records to learn
    /// from. Takes a second or so; writes go on meanwhile.
    fn train_dictionary(&self) -> Result<Option<TrainedDictionary>, StoreError>;
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
