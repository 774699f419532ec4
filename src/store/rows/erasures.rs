//! Erasures: an owner's request to remove every record of a partition whose payload contains
//! a text, from every copy intake keeps (`domain::erasures`).

use serde::{Deserialize, Serialize};

use super::*;

/// Where an erasure is, as its owner sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErasureState {
    Running,
    Finished,
    Failed,
}

/// The step a running erasure is at; each is resumed after a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErasureStep {
    /// Counting the matching records (`matched`).
    Counting,
    /// Removing them, newest first, below `resume_below`.
    Erasing,
    /// Making the removal final where copies outlive a delete: a payload dictionary...
    Sealing,
    /// ... the search index's segments and the store file's free pages (again, while an open
    /// read keeps some).
    Scrubbing,
    /// Nothing left to do.
    Done,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErasureRow {
    pub id: u64,
    pub partition: Partition,
    /// The keyed hash (hex) of the folded query: what the audit log and this row keep of it
    /// once the erasure is done.
    pub query_hash: String,
    /// The folded query, sealed, while the erasure runs (it must be searched for again after a
    /// restart); removed when it ends.
    #[serde(default, with = "base64_bytes_opt")]
    pub query_sealed: Option<Vec<u8>>,
    /// The window of record ids it covers (inclusive; the end is at most its creation).
    pub lower: u128,
    pub upper: u128,
    /// Whether erased records get the usual `record.deleted` webhook and stream event.
    pub notify: bool,
    pub state: ErasureState,
    pub step: ErasureStep,
    /// Records found matching when it was counted.
    pub matched: u64,
    /// Records removed so far.
    pub erased: u64,
    /// The lowest and highest id of the records removed so far: where copies beside the
    /// records (a payload dictionary's sample) may have taken them from.
    #[serde(default)]
    pub erased_ids: Option<(u128, u128)>,
    /// While erasing: every matching record at or above this id is removed.
    pub resume_below: u128,
    pub created_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    /// The owner who asked for it.
    pub created_by: u64,
    /// Why it failed.
    pub error: Option<String>,
}

impl ErasureRow {
    /// Counts a step that removed `count` records, `ids` the lowest and highest of them, and
    /// left every match at or above `resume_below` removed: the rule both backends apply.
    pub fn count_step(&mut self, count: u64, ids: Option<(u128, u128)>, resume_below: u128) {
        self.erased += count;
        self.resume_below = resume_below;
        if let Some((low, high)) = ids {
            self.erased_ids = Some(match self.erased_ids {
                Some((was_low, was_high)) => (was_low.min(low), was_high.max(high)),
                None => (low, high),
            });
        }
    }
}
