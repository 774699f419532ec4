//! The indexer thread: follows the change log into the tantivy index from its own position,
//! commits what it applied with that position, publishes each commit as a [`Snapshot`], and
//! trims the log behind it.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

use tantivy::index::SegmentId;
use tantivy::indexer::LogMergePolicy;
use tantivy::{IndexReader, IndexWriter, ReloadPolicy, Term};

use super::directory::MergePacing;
use super::expunge::{
    Answer, ExpungeRequest, Expunges, MergeOutcome, answer_all, check_removed, expunge_channel,
    with_deleted_docs,
};
use super::index::{
    CommitState, DIR, DOC_OVERHEAD, Fields, IndexError, Opened, Published, StopPolicy, Taken,
    TantivyIndex, TantivyView, grown_stop_set, open_or_create, schema,
};
use crate::domain::search::tokenizer::{SharedStopSet, StopSet, fold_case, payload_text};
use crate::domain::search::{ExpungeReport, SearchIndex, Snapshot};
use crate::store::changes::Replay;
use crate::store::{self, Partition, Store};

/// Longest time between index commits while changes are pending.
const COMMIT_INTERVAL: Duration = Duration::from_secs(1);
/// Most changes read from the log per transaction.
const CHANGE_CHUNK: usize = 5_000;
/// About how many payload bytes one read of the log brings in: the next read takes as many
/// changes as the last one's records, at their average size, would fill (so 1 KB records are
/// read 1,000 at a time, not 5 MB at once).
const CHANGE_CHUNK_BYTES: usize = 1 << 20;
/// Changes applied before a commit even if [`COMMIT_INTERVAL`] has not passed, so that a
/// large backlog is published (and the tail searches must check stays short) as it goes.
const COMMIT_BATCH: usize = 50_000;
/// Snapshots younger than this keep their change-log tail.
const TRIM_LAG: Duration = Duration::from_secs(60);
/// Most change-log entries removed in one transaction: about a millisecond holding the write
/// lock, which the ingest writer may wait behind (20,000 held it for 6-16 ms, the erasure
/// benchmark's probe found; docs/src/benchmarks.md, "Erasure").
const TRIM_CHUNK: usize = 2_000;
/// Most transactions of one trim (after each commit of the index): 20,000 entries in all, as
/// the one transaction of the trim removed before.
const TRIM_CHUNKS: usize = 10;
/// Most text (bytes, plus [`DOC_OVERHEAD`] per document) handed to tantivy and not yet taken
/// up by its indexing thread; past it the indexer waits until half of it is taken.
const QUEUED_BYTES: u64 = 1 << 20;
/// Longest wait for the indexing thread before handing it one more document anyway (a stopped
/// thread shows as the error of that add).
const QUEUED_WAIT: Duration = Duration::from_secs(1);
/// Segment merges that run at once. tantivy's default of 4 let four merges each hold their
/// segments' term dictionaries and new postings in memory together (the peaks of RSS under
/// ingest); one at a time keeps up with the indexing thread, which makes the segments.
const MERGE_THREADS: usize = 1;
/// The most live documents a segment may hold and still be merged. tantivy's `LogMergePolicy`
/// merges at most eight segments of a size at once, so no segment grows past about 1M
/// documents: a merge holds its segments' term dictionaries and new postings in memory, so
/// this bounds what a merge takes whatever the index's size (with 250,000, merges of 2M
/// documents took the server's anonymous memory 20-25 MB past the default profile's bound at
/// 3M, 7M and 10M records; docs/src/benchmarks.md, "As the data grows"); and a search walks
/// the segments newest first and stops once its page is full (`TantivyView::newest_in_range`),
/// which only saves work when the old records are in segments of their own.
const MERGE_MAX_DOCS: usize = 125_000;
/// How often the outcome of an expunge's merge is looked at while it runs.
const EXPUNGE_POLL: Duration = Duration::from_millis(20);
/// Records between two progress lines of a rebuild.
const REBUILD_PROGRESS: u64 = 200_000;
/// The stop set is looked at again once the index has grown by this share since the last
/// look (or by the policy's `min_records`, if more): reading every term dictionary costs
/// tens of milliseconds on a large index.
const STOP_RECHECK_GROWTH: f64 = 0.25;

/// How the indexer builds the index.
#[derive(Clone, Copy, Debug)]
pub struct IndexerSettings {
    /// Nice value of the indexing threads (0 to 19).
    pub nice: i32,
    /// Memory tantivy's writer may hold for documents not yet written into a segment.
    pub memory_bytes: usize,
    pub stop: StopPolicy,
}

/// Wakes the indexer after a commit of the write path; never blocks.
#[derive(Clone)]
pub struct Notifier(SyncSender<Signal>);

enum Signal {
    Changed,
    Shutdown,
}

impl Notifier {
    pub fn changed(&self) {
        // A full channel already holds a wake-up, which is all that is needed.
        if let Err(TrySendError::Disconnected(_)) = self.0.try_send(Signal::Changed) {
            log::debug!("search indexer is not running");
        }
    }

    /// Asks the indexer to commit what it has and stop.
    pub fn shutdown(&self) {
        let _ = self.0.send(Signal::Shutdown);
    }
}

pub struct IndexerThread(std::thread::JoinHandle<()>);

impl IndexerThread {
    pub fn join(self) {
        if self.0.join().is_err() {
            log::error!("the search indexer thread panicked");
        }
    }
}

/// Opens (or recreates) the index in `<data_dir>/search` and starts the indexer thread, which
/// rebuilds or catches up first.
///
/// The indexer thread runs at `nice` (0 to 19) and creates the index writer itself, so that
/// tantivy's indexing and merge threads, which inherit the nice value of the thread that
/// starts them, run at it too: under CPU contention indexing gives way to requests and
/// durable writes, and searches cover what it has not reached yet from the store.
pub fn start(
    data_dir: &Path,
    store: Arc<dyn Store>,
    settings: IndexerSettings,
) -> Result<(Arc<dyn SearchIndex>, Notifier, IndexerThread), IndexError> {
    let dir = data_dir.join(DIR);
    let pacing = MergePacing::default();
    let Opened {
        index,
        position,
        stop,
        taken,
    } = open_or_create(&dir, &pacing)?;
    let reader = index
        .reader_builder()
        .reload_policy(ReloadPolicy::Manual)
        .try_into()?;
    let (_, fields) = schema();
    let published = Arc::new(Published::starting());
    let needs_rebuild = match position {
        None => true,
        Some(p) => is_behind_the_log(store.as_ref(), p)?,
    };
    let (tx, rx) = sync_channel(1);
    let (expunger, expunge_requests) = expunge_channel(Notifier(tx.clone()));
    let expunges = Expunges::new(expunge_requests, &dir, pacing);
    let shared = Arc::new(TantivyIndex::new(published.clone(), expunger));
    let (started_tx, started_rx) = sync_channel(1);
    let handle = std::thread::Builder::new()
        .name("search-indexer".into())
        .spawn(move || {
            crate::core::background::lower_priority(settings.nice, "the search indexer");
            let options = tantivy::indexer::IndexWriterOptions::builder()
                .num_worker_threads(1)
                .memory_budget_per_thread(settings.memory_bytes)
                .num_merge_threads(MERGE_THREADS)
                .build();
            let writer = match index.writer_with_options(options) {
                Ok(writer) => writer,
                Err(err) => {
                    let _ = started_tx.send(Err(err));
                    return;
                }
            };
            let mut merges = LogMergePolicy::default();
            merges.set_max_docs_before_merge(MERGE_MAX_DOCS);
            writer.set_merge_policy(Box::new(merges));
            let _ = started_tx.send(Ok(()));
            let indexer = Indexer {
                store,
                writer,
                reader,
                fields,
                published,
                expunges,
                position: position.unwrap_or(0),
                committed: VecDeque::new(),
                committed_stop: stop.current(),
                stop,
                stop_policy: settings.stop,
                stop_checked_at: 0,
                committed_docs: 0,
                chunk: CHANGE_CHUNK_BYTES / 1024,
                held: MaybeHeld::default(),
                sent: taken.bytes(),
                taken,
            };
            indexer.run(needs_rebuild, &rx);
        })
        .map_err(|source| IndexError::Io {
            path: dir.display().to_string(),
            source,
        })?;
    let started = started_rx.recv().unwrap_or_else(|_| {
        Err(tantivy::TantivyError::SystemError(
            "the search indexer thread stopped before opening the index writer".into(),
        ))
    });
    if let Err(err) = started {
        let _ = handle.join();
        return Err(err.into());
    }
    Ok((shared, Notifier(tx), IndexerThread(handle)))
}

/// Most recently added ids [`MaybeHeld`] remembers one by one.
const RECENT_ADDS: usize = 4096;

/// Which records the index may hold a document of: those created no later than `floor`, and
/// the ids added lately. Writes commit in about the order they were received, not exactly
/// (concurrent requests), so "created after the newest document" alone took a few percent of
/// creates for possible replacements, each a delete queued until the commit. An id leaving the
/// recent set raises `floor` to its creation time, so every id ever added stays covered.
#[derive(Default)]
struct MaybeHeld {
    floor: u64,
    recent: std::collections::HashSet<u128>,
    order: VecDeque<u128>,
}

impl MaybeHeld {
    /// For an index whose newest document was created at `newest`.
    fn up_to(newest: u64) -> MaybeHeld {
        MaybeHeld {
            floor: newest,
            ..MaybeHeld::default()
        }
    }

    fn may_hold(&self, id: u128) -> bool {
        created_at(id) <= self.floor || self.recent.contains(&id)
    }

    fn added(&mut self, id: u128) {
        if created_at(id) <= self.floor || !self.recent.insert(id) {
            return;
        }
        self.order.push_back(id);
        if self.order.len() > RECENT_ADDS {
            if let Some(oldest) = self.order.pop_front() {
                self.recent.remove(&oldest);
                self.floor = self.floor.max(created_at(oldest));
            }
        }
    }
}

/// How many changes to read next, going by the payload sizes of those just read (`current`
/// again when there were none).
fn next_chunk(current: usize, changed: &[store::changes::ChangedRecord]) -> usize {
    if changed.is_empty() {
        return current;
    }
    let bytes: usize = changed
        .iter()
        .map(|c| c.payload.as_ref().map_or(0, Vec::len))
        .sum();
    let average = bytes.div_ceil(changed.len()).max(1);
    (CHANGE_CHUNK_BYTES / average).clamp(1, CHANGE_CHUNK)
}

/// The highest created_at in the index's id column (documents deleted but not yet merged away
/// included).
fn newest_created(searcher: &tantivy::Searcher) -> Result<u64, IndexError> {
    let mut newest = 0;
    for segment in searcher.segment_readers() {
        if segment.max_doc() > 0 {
            newest = newest.max(segment.fast_fields().u64("id_hi")?.max_value());
        }
    }
    Ok(newest)
}

/// A saved position the log can no longer continue from (trimmed past it, or a store older
/// than the index, as after a restore) means the index must be rebuilt.
fn is_behind_the_log(store: &dyn Store, position: u64) -> Result<bool, IndexError> {
    let log = store::change_log(store)?.change_log_bounds()?;
    Ok(position < log.trimmed_upto || position > log.last)
}

struct Indexer {
    store: Arc<dyn Store>,
    writer: IndexWriter,
    reader: IndexReader,
    fields: Fields,
    published: Arc<Published>,
    /// Expunges asked for, and the merge under way for them.
    expunges: Expunges,
    /// The change-log sequence applied to the writer so far.
    position: u64,
    /// Recent commits, oldest first: when and up to which sequence.
    committed: VecDeque<(Instant, u64)>,
    /// The stop set the tokenizer uses for documents added from now on. It only grows, and
    /// only between commits, so every commit's set holds every set its documents were
    /// indexed with.
    stop: SharedStopSet,
    /// The stop set of the last commit: what its snapshot's queries must avoid.
    committed_stop: Arc<StopSet>,
    stop_policy: StopPolicy,
    /// Documents in the index when the stop set was last looked at.
    stop_checked_at: u64,
    /// Documents in the index at the last commit.
    committed_docs: u64,
    /// Changes to read from the log next (see [`CHANGE_CHUNK_BYTES`]).
    chunk: usize,
    /// Which records the index may hold a document of, committed or not.
    held: MaybeHeld,
    /// What tantivy's indexing thread has taken up, and what was handed to it (in the same
    /// measure, see [`QUEUED_BYTES`]).
    taken: Arc<Taken>,
    sent: u64,
}

/// A record id's high half: its created_at in microseconds.
fn created_at(id: u128) -> u64 {
    (id >> 64) as u64
}

impl Indexer {
    fn run(mut self, needs_rebuild: bool, signals: &Receiver<Signal>) {
        let ready = if needs_rebuild {
            self.rebuild()
        } else {
            newest_created(&self.reader.searcher())
                .map(|newest| self.held = MaybeHeld::up_to(newest))
                .and_then(|()| self.publish())
        };
        if let Err(err) = ready {
            log::error!("{err}; searches scan the store until the index recovers");
        }
        let mut last_commit = Instant::now();
        let mut since_commit = 0;
        let mut backlog = false;
        let mut stopping = false;
        while !stopping {
            // With a backlog, go on at once; otherwise wait for a write or the interval.
            let signal = if backlog {
                signals.try_recv().map_err(|e| match e {
                    std::sync::mpsc::TryRecvError::Empty => RecvTimeoutError::Timeout,
                    std::sync::mpsc::TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
                })
            } else if self.expunges.is_merging() {
                signals.recv_timeout(EXPUNGE_POLL)
            } else {
                signals.recv_timeout(COMMIT_INTERVAL)
            };
            match signal {
                Ok(Signal::Shutdown) | Err(RecvTimeoutError::Disconnected) => stopping = true,
                Ok(Signal::Changed) | Err(RecvTimeoutError::Timeout) => {}
            }
            // A commit is due after COMMIT_BATCH changes, or sooner when the stop set is due a
            // look: during a backlog the first look would otherwise wait for 50,000 records,
            // all indexed whole.
            let batch = self.commit_batch();
            let max = batch.saturating_sub(since_commit).max(1);
            let step = self.catch_up(max).and_then(|applied| {
                since_commit += applied;
                backlog = applied == max;
                let due =
                    last_commit.elapsed() >= COMMIT_INTERVAL || since_commit >= batch || stopping;
                if (since_commit > 0 || self.uncommitted()) && due {
                    last_commit = Instant::now();
                    since_commit = 0;
                    self.commit()?;
                    self.trim()?;
                }
                Ok(())
            });
            if let Err(err) = step {
                log::error!("{err}; retrying");
                std::thread::sleep(COMMIT_INTERVAL);
            }
            if !stopping && self.serve_expunges() {
                last_commit = Instant::now();
                since_commit = 0;
            }
        }
        if let Err(err) = self.writer.wait_merging_threads() {
            log::error!("search index merge at shutdown failed: {err}");
        }
    }

    /// Moves the expunges asked for on (see `expunge`): answers a finished merge, starts one
    /// for the requests whose changes the index has applied. Returns whether it committed.
    fn serve_expunges(&mut self) -> bool {
        self.expunges.receive(self.store.as_ref());
        let mut committed = false;
        let (requests, old) = match self.expunges.merge_outcome() {
            None => (self.expunges.ready(self.position), Vec::new()),
            Some(MergeOutcome::Merged(merging)) => {
                committed = true;
                let answer = self
                    .commit()
                    .and_then(|()| self.remove_old_files(&merging.old))
                    .map(|()| merging.report())
                    .map_err(|err| err.to_string());
                merging.answer(&answer);
                (self.expunges.ready(self.position), Vec::new())
            }
            Some(MergeOutcome::Overtaken(merging)) => merging.into_retry(),
            Some(MergeOutcome::Failed(merging, err)) => {
                merging.answer(&Err(IndexError::from(err).to_string()));
                (self.expunges.ready(self.position), Vec::new())
            }
        };
        if requests.is_empty() {
            return committed;
        }
        self.start_expunge(requests, old) || committed
    }

    /// Commits what the index has applied (every change the requests wait for), then starts a
    /// merge of every segment holding deleted documents; with none, answers at once. `old`:
    /// the segments earlier attempts set out to rewrite. Returns whether it committed.
    fn start_expunge(&mut self, requests: Vec<ExpungeRequest>, old: Vec<SegmentId>) -> bool {
        let committed = self.uncommitted();
        let segments = if committed { self.commit() } else { Ok(()) }
            .and_then(|()| with_deleted_docs(self.writer.index()));
        let answer: Answer = match segments {
            Ok(segments) if !segments.is_empty() => {
                let ids: Vec<SegmentId> = segments.iter().map(|(id, _)| *id).collect();
                let merge = self.writer.merge(&ids);
                self.expunges.merge_started(requests, merge, &segments, old);
                return committed;
            }
            Ok(_) => self
                .remove_old_files(&old)
                .map(|()| ExpungeReport::default())
                .map_err(|err| err.to_string()),
            Err(err) => Err(err.to_string()),
        };
        answer_all(requests, &answer);
        committed
    }

    /// Removes the files no segment of the index uses any more, and checks that none of the
    /// segments `old` is left.
    fn remove_old_files(&mut self, old: &[SegmentId]) -> Result<(), IndexError> {
        self.writer.garbage_collect_files().wait()?;
        check_removed(self.expunges.dir(), old)
    }

    /// Whether the writer holds changes not yet committed.
    fn uncommitted(&self) -> bool {
        self.committed.back().map(|(_, p)| *p) != Some(self.position)
    }

    /// Indexes every record from scratch.
    fn rebuild(&mut self) -> Result<(), IndexError> {
        let started = Instant::now();
        self.writer.delete_all_documents()?;
        let store = self.store.clone();
        let mut rebuild = Rebuild {
            indexer: self,
            total: 0,
            done: 0,
            position: 0,
            failed: None,
        };
        store::change_log(store.as_ref())?.replay(&mut rebuild)?;
        let Rebuild {
            done,
            position,
            failed,
            ..
        } = rebuild;
        if let Some(err) = failed {
            return Err(err);
        }
        self.position = position;
        self.commit()?;
        log::info!(
            "search index rebuilt: {done} records in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }

    /// Applies at most `max` changes logged after `position`; returns how many.
    fn catch_up(&mut self, max: usize) -> Result<usize, IndexError> {
        let mut applied = 0;
        while applied < max {
            let changed = store::change_log(self.store.as_ref())?
                .changed_records_after(self.position, self.chunk.min(max - applied))?;
            self.chunk = next_chunk(self.chunk, &changed);
            for change in &changed {
                let (partition, id) = (change.entry.partition, change.entry.record_id);
                // No delete for a record the index cannot hold (a create is most changes,
                // and each queued delete holds memory and is looked up in every segment at
                // the commit).
                if self.held.may_hold(id) {
                    self.writer
                        .delete_term(Term::from_field_bytes(self.fields.id, &id.to_be_bytes()));
                }
                if let Some(payload) = &change.payload {
                    self.add(partition, id, payload)?;
                }
                self.position = change.entry.seq;
            }
            applied += changed.len();
            if changed.is_empty() {
                break;
            }
        }
        Ok(applied)
    }

    /// Adds the document of a stored record.
    fn add(&mut self, partition: Partition, id: u128, payload: &[u8]) -> Result<(), IndexError> {
        self.held.added(id);
        let text = fold_case(&payload_text(payload));
        let f = self.fields;
        let mut doc = tantivy::TantivyDocument::default();
        doc.add_u64(f.partition, partition.raw());
        doc.add_bytes(f.id, &id.to_be_bytes());
        doc.add_u64(f.id_hi, created_at(id));
        doc.add_u64(f.id_lo, id as u64);
        doc.add_text(f.text, &text);
        self.writer.add_document(doc)?;
        self.sent += text.len() as u64 + DOC_OVERHEAD;
        if self.sent.saturating_sub(self.taken.bytes()) > QUEUED_BYTES {
            self.taken
                .wait_for(self.sent - QUEUED_BYTES / 2, QUEUED_WAIT);
        }
        Ok(())
    }

    /// Commits with the covered position and the stop set as payload, publishes the new
    /// snapshot, and grows the stop set if the index has grown enough to look again.
    fn commit(&mut self) -> Result<(), IndexError> {
        self.commit_state(Some(self.position))?;
        self.committed.push_back((Instant::now(), self.position));
        self.publish()?;
        self.grow_stop_set()
    }

    /// A commit part of the way through a rebuild: no position (a restart rebuilds again),
    /// nothing published; what it is for is the stop set it lets the rest of the rebuild use.
    fn rebuild_checkpoint(&mut self) -> Result<(), IndexError> {
        self.commit_state(None)?;
        self.reader.reload()?;
        self.grow_stop_set()
    }

    fn commit_state(&mut self, position: Option<u64>) -> Result<(), IndexError> {
        // Read before the commit: every document in it was tokenised with this set or a
        // smaller one (the set changes only in this thread, after commits).
        let stop = self.stop.current();
        let mut prepared = self.writer.prepare_commit()?;
        prepared.set_payload(&CommitState::encode(position, &stop));
        prepared.commit()?;
        // The commit waited for the indexing thread to take every document up.
        self.sent = self.taken.bytes();
        self.committed_stop = stop;
        Ok(())
    }

    fn publish(&mut self) -> Result<(), IndexError> {
        self.reader.reload()?;
        self.published.publish(Snapshot {
            view: Some(Box::new(TantivyView::new(
                self.reader.searcher(),
                self.fields,
                self.committed_stop.clone(),
            )?)),
            position: self.position,
        });
        Ok(())
    }

    /// The index's size at which the stop set is looked at next.
    fn next_stop_look(&self) -> u64 {
        let step = ((self.stop_checked_at as f64 * STOP_RECHECK_GROWTH) as u64)
            .max(self.stop_policy.min_records)
            .max(1);
        self.stop_checked_at.saturating_add(step)
    }

    /// Changes to apply before the next commit: [`COMMIT_BATCH`], or fewer to reach the next
    /// look at the stop set.
    fn commit_batch(&self) -> usize {
        let until_look = self.next_stop_look().saturating_sub(self.committed_docs);
        COMMIT_BATCH.min(usize::try_from(until_look).unwrap_or(usize::MAX).max(1))
    }

    /// Adds the trigrams now in more than the policy's share of the documents to the stop set
    /// documents from now on are tokenised with (committed with the next commit).
    fn grow_stop_set(&mut self) -> Result<(), IndexError> {
        let searcher = self.reader.searcher();
        let docs = searcher.num_docs();
        self.committed_docs = docs;
        let policy = self.stop_policy;
        if docs < self.next_stop_look() {
            return Ok(());
        }
        self.stop_checked_at = docs;
        let current = self.stop.current();
        if let Some(grown) = grown_stop_set(&searcher, self.fields.text, &current, policy)? {
            log::info!(
                "search index: {} stop trigrams (in more than {:.0} % of {docs} records)",
                grown.len(),
                policy.share * 100.0
            );
            self.stop.replace(Arc::new(grown));
        }
        Ok(())
    }

    /// Drops change-log entries that no search can still need (see the module docs).
    fn trim(&mut self) -> Result<(), IndexError> {
        let mut upto = None;
        while let Some((at, position)) = self.committed.front() {
            if at.elapsed() < TRIM_LAG || self.committed.len() == 1 {
                break;
            }
            upto = Some(*position);
            self.committed.pop_front();
        }
        let Some(upto) = upto else { return Ok(()) };
        let log = store::change_log(self.store.as_ref())?;
        let mut removed_all = false;
        for _ in 0..TRIM_CHUNKS {
            let started = Instant::now();
            if log.trim_changes(upto, TRIM_CHUNK)? < TRIM_CHUNK {
                removed_all = true;
                break;
            }
            // As long as the transaction took: the ingest writer gets the lock in between.
            std::thread::sleep(started.elapsed());
        }
        if !removed_all {
            // Come back to the rest at the next commit.
            let due = Instant::now()
                .checked_sub(TRIM_LAG)
                .unwrap_or_else(Instant::now);
            self.committed.push_front((due, upto));
        }
        Ok(())
    }
}

/// A rebuild fed by [`Store::replay`]: every record into the writer, with progress in the log.
struct Rebuild<'a> {
    indexer: &'a mut Indexer,
    total: u64,
    done: u64,
    /// The change-log sequence the replayed records cover.
    position: u64,
    /// Why the rebuild stopped early.
    failed: Option<IndexError>,
}

impl Replay for Rebuild<'_> {
    fn begin(&mut self, records: u64, position: u64) {
        self.total = records;
        self.position = position;
        log::info!("search index: rebuilding from {records} stored records");
    }

    fn record(&mut self, partition: Partition, record_id: u128, payload: &[u8]) -> ControlFlow<()> {
        let added = self.indexer.add(partition, record_id, payload);
        self.done += 1;
        if self.done % REBUILD_PROGRESS == 0 {
            log::info!(
                "search index: rebuilt {} of {} records",
                self.done,
                self.total
            );
        }
        let checkpoint = match added {
            Ok(()) if self.done >= self.indexer.next_stop_look() => {
                self.indexer.rebuild_checkpoint()
            }
            other => other,
        };
        if let Err(err) = checkpoint {
            self.failed = Some(err);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::{CHANGE_CHUNK, MaybeHeld, RECENT_ADDS, next_chunk};
    use crate::store::Partition;
    use crate::store::changes::{ChangeEntry, ChangedRecord};

    fn changed(sizes: &[Option<usize>]) -> Vec<ChangedRecord> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, size)| ChangedRecord {
                entry: ChangeEntry {
                    seq: i as u64,
                    partition: Partition::from_raw(1),
                    record_id: i as u128,
                },
                payload: size.map(|n| vec![b'x'; n]),
            })
            .collect()
    }

    #[test]
    fn a_read_of_the_change_log_brings_in_about_a_mebibyte_of_payloads() {
        assert_eq!(next_chunk(7, &changed(&[Some(1024), Some(1024)])), 1024);
        assert_eq!(
            next_chunk(7, &changed(&[Some(2048), None])),
            1024,
            "deletes weigh nothing"
        );
        assert_eq!(next_chunk(7, &changed(&[Some(50)])), CHANGE_CHUNK);
        assert_eq!(next_chunk(7, &changed(&[None])), CHANGE_CHUNK);
        assert_eq!(next_chunk(7, &changed(&[Some(4 << 20)])), 1);
        assert_eq!(next_chunk(7, &[]), 7, "an empty read keeps the size");
    }

    /// Every id ever added stays "may hold", however far out of creation order ids come and
    /// however many there are; an id created after all of them and never added does not.
    #[test]
    fn every_added_id_may_be_held_and_a_newer_unseen_one_is_not() {
        let mut rng = StdRng::seed_from_u64(22);
        let id = |created: u64, n: u64| (u128::from(created) << 64) | u128::from(n);
        let mut held = MaybeHeld::up_to(1_000);
        let mut added = Vec::new();
        for n in 0..(3 * RECENT_ADDS as u64) {
            // Creation times advance with some disorder, as concurrent writes commit.
            let created = 2_000 + n * 10 - rng.random_range(0..200);
            let record = id(created, n);
            held.added(record);
            added.push(record);
            if n % 97 == 0 {
                held.added(id(500, n)); // older than the index's newest document
            }
        }
        assert!(added.iter().all(|&r| held.may_hold(r)));
        assert!(
            held.may_hold(id(999, 1)),
            "older than the index's newest document"
        );
        let newest = 2_000 + 3 * RECENT_ADDS as u64 * 10;
        assert!(!held.may_hold(id(newest + 1, u64::MAX)));
        assert!(held.recent.len() <= RECENT_ADDS && held.order.len() <= RECENT_ADDS);
        // Fewer than all: ids out of order but never added are not taken for held ones.
        let unseen = (0..1000u64)
            .filter(|k| !held.may_hold(id(newest - 5_000 + k, u64::MAX - k)))
            .count();
        assert!(unseen > 0, "the recent set should rule some unseen ids out");
    }
}
