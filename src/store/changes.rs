//! The change log: every applied write in commit order, read by the search indexer from its own position and trimmed once it is past.

pub trait ChangesStore {}
