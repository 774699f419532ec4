//! The search index behind `domain::search`: a tantivy index of every record's payload text
//! (`index`), the indexer thread that keeps it up to date (`indexer`), and the expunges that
//! make its deletes final for erasures (`expunge`).
//!
//! **Invariant.** Every index commit carries, as its payload, the change-log sequence it covers:
//! all changes up to that sequence are in the index, none after it. The indexer publishes each
//! commit as a `domain::search::Snapshot` (searcher + sequence), so a search knows exactly which
//! changes its searcher has not seen yet: those after the snapshot's sequence, still in the
//! change log. The indexer trims the log only up to the sequence of a snapshot published at
//! least `indexer::TRIM_LAG` ago, so a search never loses the tail it needs.
//!
//! The store is the source of truth: a missing, unreadable or out-of-date index folder is
//! rebuilt from the stored records at start, in the background; until it is done, the
//! snapshot has no view and searches scan the store instead.

mod directory;
mod expunge;
mod index;
mod indexer;
#[cfg(test)]
mod tests;

pub use index::{IndexError, StopPolicy};

/// Removes the index folder of a stopped server's `data_dir`, which the next start rebuilds
/// from the store; returns whether there was one. What `intake compact` does: until tantivy
/// merges a segment, it keeps the trigrams (with their positions) of the records deleted
/// from it.
pub fn remove_index(data_dir: &std::path::Path) -> std::io::Result<bool> {
    match std::fs::remove_dir_all(data_dir.join(index::DIR)) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err),
    }
}
pub use indexer::{IndexerSettings, IndexerThread, Notifier, start};
