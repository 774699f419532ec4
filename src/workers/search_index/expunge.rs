//! Expunging deleted documents, for erasures (`SearchIndex::expunge_deleted`).
//!
//! tantivy only marks a deleted document in its segment: the document's postings (its
//! trigrams with their positions, from which its text can be partly rebuilt) stay in the
//! segment's files until a merge rewrites the segment. An expunge asks the indexer thread,
//! which owns the index writer, to apply the change log up to where it stood when asked,
//! commit, merge every segment holding deleted documents (one alone is rewritten too), commit
//! and publish the merged state, and remove the old segments' files. The merge runs on
//! tantivy's merge thread while the indexer goes on indexing; searches use the previous
//! snapshot until the merged one is published.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender, channel, sync_channel};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tantivy::index::SegmentId;
use tantivy::{FutureResult, Index, SegmentMeta};

use super::directory::MergePacing;
use super::index::IndexError;
use super::indexer::Notifier;
use crate::domain::error::{Error, Result as ServiceResult};
use crate::domain::search::ExpungeReport;
use crate::store::{self, Store};

/// How an expunge ended: its report, or what failed (one failure may answer several
/// requests, so as a message).
pub(super) type Answer = Result<ExpungeReport, String>;

pub(super) struct ExpungeRequest {
    asked_at: Instant,
    /// When the caller stops waiting (`None`: never).
    deadline: Option<Instant>,
    answer: SyncSender<Answer>,
}

impl ExpungeRequest {
    fn expired(&self) -> bool {
        self.deadline
            .is_some_and(|deadline| Instant::now() >= deadline)
    }

    fn answer(self, answer: &Answer) {
        let answer = answer.clone().map(|report| ExpungeReport {
            took: self.asked_at.elapsed(),
            ..report
        });
        // A caller past its timeout has stopped listening.
        let _ = self.answer.send(answer);
    }
}

/// The asking side, held by the index searches read.
pub(super) struct Expunger {
    requests: Sender<ExpungeRequest>,
    wake: Notifier,
}

/// The two ends of the requests' way to the indexer.
pub(super) fn expunge_channel(wake: Notifier) -> (Expunger, Receiver<ExpungeRequest>) {
    let (requests, received) = channel();
    (Expunger { requests, wake }, received)
}

impl Expunger {
    pub(super) fn expunge(&self, timeout: Duration) -> ServiceResult<ExpungeReport> {
        let asked_at = Instant::now();
        let (answer, answered) = sync_channel(1);
        let request = ExpungeRequest {
            asked_at,
            deadline: asked_at.checked_add(timeout),
            answer,
        };
        self.requests
            .send(request)
            .map_err(|_| Error::ShuttingDown)?;
        self.wake.changed();
        match answered.recv_timeout(timeout) {
            Ok(Ok(report)) => Ok(report),
            Ok(Err(failure)) => Err(Error::Internal(failure)),
            Err(RecvTimeoutError::Timeout) => Err(Error::Unavailable(format!(
                "the search index did not expunge its deleted documents within {timeout:?}"
            ))),
            Err(RecvTimeoutError::Disconnected) => Err(Error::ShuttingDown),
        }
    }
}

/// The indexer's side: the requests received and the merge under way for them.
pub(super) struct Expunges {
    requests: Receiver<ExpungeRequest>,
    /// The index folder, where no file of a rewritten segment may remain.
    dir: PathBuf,
    /// Requests received, each with the change-log sequence the index must have applied
    /// before its merge starts, oldest first.
    waiting: Vec<(u64, ExpungeRequest)>,
    merging: Option<Merging>,
    /// On while `merging` is: the merge threads pace themselves.
    pacing: MergePacing,
}

/// A merge under way and what it is for.
pub(super) struct Merging {
    requests: Vec<ExpungeRequest>,
    merge: FutureResult<Option<SegmentMeta>>,
    segments: usize,
    /// The deleted documents its segments held.
    docs: u64,
    /// Every segment this expunge set out to rewrite, in this attempt and any a merge of
    /// tantivy's own got ahead of: no file of theirs may remain.
    pub(super) old: Vec<SegmentId>,
}

/// Where a merge under way stands.
pub(super) enum MergeOutcome {
    Merged(Merging),
    /// Some of its segments were merged by tantivy's own merge policy first, into a segment
    /// that may hold the deleted documents still: to be started again.
    Overtaken(Merging),
    Failed(Merging, tantivy::TantivyError),
}

impl Merging {
    pub(super) fn report(&self) -> ExpungeReport {
        ExpungeReport {
            segments_merged: self.segments,
            docs_expunged: self.docs,
            took: Duration::ZERO,
        }
    }

    pub(super) fn answer(self, answer: &Answer) {
        answer_all(self.requests, answer);
    }

    /// The requests still waited for, and the segments set out to rewrite so far.
    pub(super) fn into_retry(self) -> (Vec<ExpungeRequest>, Vec<SegmentId>) {
        let requests = self.requests.into_iter().filter(|r| !r.expired()).collect();
        (requests, self.old)
    }
}

impl Expunges {
    pub(super) fn new(
        requests: Receiver<ExpungeRequest>,
        dir: &Path,
        pacing: MergePacing,
    ) -> Expunges {
        Expunges {
            requests,
            dir: dir.to_path_buf(),
            waiting: Vec::new(),
            merging: None,
            pacing,
        }
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(super) fn is_merging(&self) -> bool {
        self.merging.is_some()
    }

    /// Takes the requests sent since the last call, each to wait for the changes logged up
    /// to now: at least all those logged before it was sent.
    pub(super) fn receive(&mut self, store: &dyn Store) {
        let received: Vec<ExpungeRequest> = self.requests.try_iter().collect();
        if received.is_empty() {
            return;
        }
        match store::change_log(store).and_then(|log| log.change_log_bounds()) {
            Ok(bounds) => {
                let last = bounds.last;
                self.waiting
                    .extend(received.into_iter().map(|request| (last, request)));
            }
            Err(err) => {
                let failure = Err(IndexError::from(err).to_string());
                for request in received {
                    request.answer(&failure);
                }
            }
        }
    }

    /// The requests whose changes the index has applied (it is at `position`), for a merge
    /// to start when none is under way; those whose caller stopped waiting are dropped.
    pub(super) fn ready(&mut self, position: u64) -> Vec<ExpungeRequest> {
        self.waiting.retain(|(_, request)| !request.expired());
        if self.merging.is_some() {
            return Vec::new();
        }
        let (ready, waiting) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|(needed, _)| *needed <= position);
        self.waiting = waiting;
        ready.into_iter().map(|(_, request)| request).collect()
    }

    pub(super) fn merge_started(
        &mut self,
        requests: Vec<ExpungeRequest>,
        merge: FutureResult<Option<SegmentMeta>>,
        segments: &[(SegmentId, u32)],
        mut old: Vec<SegmentId>,
    ) {
        old.extend(segments.iter().map(|(id, _)| *id));
        self.pacing.set(true);
        self.merging = Some(Merging {
            requests,
            merge,
            segments: segments.len(),
            docs: segments.iter().map(|(_, docs)| u64::from(*docs)).sum(),
            old,
        });
    }

    /// The outcome of the merge under way, once it has one.
    pub(super) fn merge_outcome(&mut self) -> Option<MergeOutcome> {
        let mut merging = self.merging.take()?;
        let mut context = Context::from_waker(Waker::noop());
        let outcome = Pin::new(&mut merging.merge).poll(&mut context);
        if outcome.is_ready() {
            self.pacing.set(false);
        }
        match outcome {
            Poll::Pending => {
                self.merging = Some(merging);
                None
            }
            Poll::Ready(Ok(_)) => Some(MergeOutcome::Merged(merging)),
            // What tantivy answers when a merge's segments are no longer in the index.
            Poll::Ready(Err(tantivy::TantivyError::InvalidArgument(_))) => {
                Some(MergeOutcome::Overtaken(merging))
            }
            Poll::Ready(Err(err)) => Some(MergeOutcome::Failed(merging, err)),
        }
    }
}

pub(super) fn answer_all(requests: Vec<ExpungeRequest>, answer: &Answer) {
    for request in requests {
        request.answer(answer);
    }
}

/// The committed segments holding deleted documents, and how many each holds.
pub(super) fn with_deleted_docs(index: &Index) -> Result<Vec<(SegmentId, u32)>, IndexError> {
    // Only ids are kept: a segment's files stay while anything holds its `SegmentMeta`.
    Ok(index
        .searchable_segment_metas()?
        .iter()
        .filter(|meta| meta.num_deleted_docs() > 0)
        .map(|meta| (meta.id(), meta.num_deleted_docs()))
        .collect())
}

/// Fails if a file of the segments `old` is left in `dir` (each is named by its segment's id).
pub(super) fn check_removed(dir: &Path, old: &[SegmentId]) -> Result<(), IndexError> {
    let path = || dir.display().to_string();
    let io = |source| IndexError::Io {
        path: path(),
        source,
    };
    let prefixes: Vec<String> = old.iter().map(SegmentId::uuid_string).collect();
    let mut left = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let name = entry
            .map_err(io)?
            .file_name()
            .to_string_lossy()
            .into_owned();
        if prefixes
            .iter()
            .any(|prefix| name.starts_with(prefix.as_str()))
        {
            left.push(name);
        }
    }
    if left.is_empty() {
        return Ok(());
    }
    Err(IndexError::FilesLeft {
        path: path(),
        files: left.join(", "),
    })
}
