//! Payload compression a store does itself: the redb store compresses each stored payload
//! with a zstd dictionary it trains on its own records (`store::redb::payload` has the
//! layouts and the reasons); `workers::compression` asks it, off the write path, when a new
//! dictionary is due.
//!
//! A dictionary holds raw pieces of the records it was trained on, so it outlives their
//! deletion: [`PayloadDictionaries::take_out_erased`] takes what only erased records held out
//! of them, on a running server.

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

    /// Takes out of every dictionary whose sample may have held an erased record (one of
    /// `partition` with an id in `ids`, inclusive) what only erased records held, on a running
    /// server: writes go on meanwhile. `erased` is the erasure's query; no dictionary keeps an
    /// occurrence of it. On redb, the dictionary is patched: the bytes of its content that no
    /// record it keeps of its sample shares are zeroed, and the few records that read
    /// differently without them are stored anew (a dictionary trained before samples were
    /// recorded may hold anything: then every dictionary is replaced and every record stored
    /// anew). Waits for a training under way: its sample may have been read before the
    /// records were erased.
    fn take_out_erased(
        &self,
        partition: Partition,
        ids: (u128, u128),
        erased: &str,
        now: Timestamp,
    ) -> Result<TakenOut, StoreError>;
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

/// What [`PayloadDictionaries::take_out_erased`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakenOut {
    /// No dictionary held anything only erased records had.
    Nothing,
    /// Dictionaries patched.
    Patched {
        dictionaries: usize,
        /// Bytes of their content zeroed.
        bytes_zeroed: usize,
        /// Records stored anew: those that read differently with the patched content.
        records: u64,
    },
    /// Every dictionary replaced (one may hold anything).
    Replaced(Recompressed),
}

impl TakenOut {
    /// This, and one more dictionary patched.
    pub fn and_patched(self, bytes_zeroed: usize, records: u64) -> TakenOut {
        match self {
            TakenOut::Patched {
                dictionaries,
                bytes_zeroed: zeroed,
                records: stored,
            } => TakenOut::Patched {
                dictionaries: dictionaries + 1,
                bytes_zeroed: zeroed + bytes_zeroed,
                records: stored + records,
            },
            _ => TakenOut::Patched {
                dictionaries: 1,
                bytes_zeroed,
                records,
            },
        }
    }
}

/// What replacing the dictionaries did (`intake compact`, or an erasure that had to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recompressed {
    /// Records stored anew (compressed with the new dictionary, or plain).
    pub records: u64,
    /// Dictionaries removed: no record names them any more.
    pub dictionaries_removed: usize,
}
