//! The tantivy index behind search, and the indexer thread that keeps it up to date.
//!
//! One document per stored record: its partition, its id (as bytes for deletes, and as two u64
//! fast fields: the high half is created_at, so ordering by it is ordering by time), and its
//! case-folded payload text tokenised into positional trigrams.
//!
//! **Invariant.** Every index commit carries, as its payload, the change-log sequence it covers:
//! all changes up to that sequence are in the index, none after it. The indexer publishes each
//! commit as a [`Snapshot`] (searcher + sequence), so a search knows exactly which changes its
//! searcher has not seen yet: those after the snapshot's sequence, still in `CHANGES`. The
//! indexer trims `CHANGES` only up to the sequence of a snapshot published at least
//! [`TRIM_LAG`] ago, so a search never loses the tail it needs.
//!
//! redb is the source of truth: a missing, unreadable or out-of-date index folder is rebuilt
//! from `RECORDS` at start, in the background; until it is done, [`Snapshot::view`] is
//! `None` and searches scan the store instead.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use redb::{ReadableTable, ReadableTableMetadata};
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::columnar::Column;
use tantivy::query::{BooleanQuery, Occur, PhraseQuery, Query, TermQuery};
use tantivy::schema::{
    BytesOptions, Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::{
    DocAddress, DocId, Index, IndexReader, IndexWriter, ReloadPolicy, Score, Searcher,
    SegmentOrdinal, SegmentReader, Term,
};

use super::tokenizer::{TrigramTokenizer, covering_trigrams, fold_case, payload_text};
use crate::store::{
    CHANGES, CHANGES_TRIMMED_UPTO, LAST_CHANGE_SEQ, META, RECORDS, RedbStore, StoreError,
    decode_record, read_counter, write_counter,
};

/// The index folder inside the data dir.
pub const DIR: &str = "search";
const TOKENIZER: &str = "trigram";
/// Longest time between index commits while changes are pending.
const COMMIT_INTERVAL: Duration = Duration::from_secs(1);
/// Changes read from the log per transaction.
const CHANGE_CHUNK: usize = 5_000;
/// Changes applied before a commit even if [`COMMIT_INTERVAL`] has not passed, so that a
/// large backlog is published (and the tail searches must check stays short) as it goes.
const COMMIT_BATCH: usize = 50_000;
/// Snapshots younger than this keep their change-log tail.
const TRIM_LAG: Duration = Duration::from_secs(60);
/// Most change-log entries removed in one transaction (bounds time holding the write lock).
const TRIM_CHUNK: usize = 20_000;
const WRITER_HEAP_BYTES: usize = 50_000_000;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("search index: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("search index folder {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

macro_rules! redb_index_errors {
    ($($t:ty),*) => {$(
        impl From<$t> for IndexError {
            fn from(err: $t) -> Self {
                IndexError::Store(err.into())
            }
        }
    )*};
}
redb_index_errors!(
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

#[derive(Clone, Copy)]
struct Fields {
    partition: Field,
    id: Field,
    id_hi: Field,
    id_lo: Field,
    text: Field,
}

fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let text_options = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(TOKENIZER)
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let fields = Fields {
        partition: builder.add_u64_field("partition", NumericOptions::default().set_indexed()),
        id: builder.add_bytes_field("id", BytesOptions::default().set_indexed()),
        id_hi: builder.add_u64_field("id_hi", NumericOptions::default().set_indexed().set_fast()),
        id_lo: builder.add_u64_field("id_lo", NumericOptions::default().set_fast()),
        text: builder.add_text_field("text", text_options),
    };
    (builder.build(), fields)
}

/// A committed state of the index and the change-log sequence it covers.
pub struct Snapshot {
    /// `None` while the index is being rebuilt: search must scan the store.
    pub view: Option<IndexView>,
    pub position: u64,
}

/// A searcher and the id columns of each of its segments, opened once per snapshot: opening
/// a fast-field column decodes its whole block index, which repeated for every segment of
/// every query was most of the cost of a query that matches nothing.
pub struct IndexView {
    searcher: Searcher,
    /// Indexed by segment ordinal.
    ids: Vec<IdColumns>,
}

#[derive(Clone)]
struct IdColumns {
    /// The id's high half: created_at in microseconds.
    hi: Column<u64>,
    lo: Column<u64>,
}

impl IndexView {
    fn new(searcher: Searcher) -> Result<Self, IndexError> {
        let ids = searcher
            .segment_readers()
            .iter()
            .map(|segment| {
                let fast = segment.fast_fields();
                Ok(IdColumns {
                    hi: fast.u64("id_hi")?,
                    lo: fast.u64("id_lo")?,
                })
            })
            .collect::<Result<_, IndexError>>()?;
        Ok(IndexView { searcher, ids })
    }

    fn id_of(&self, addr: DocAddress) -> Option<u128> {
        let columns = self.ids.get(addr.segment_ord as usize)?;
        let hi = columns.hi.first(addr.doc_id)?;
        let lo = columns.lo.first(addr.doc_id)?;
        Some((u128::from(hi) << 64) | u128::from(lo))
    }
}

/// The read side, shared with every search.
pub struct SearchIndex {
    fields: Fields,
    snapshot: RwLock<Arc<Snapshot>>,
}

/// Ids found by one index query, newest first, and whether the index may hold more below.
pub struct Hits {
    pub ids: Vec<u128>,
    /// The lowest id the query fully covered: every match in `[covered_down_to, upper]` is in
    /// `ids`. Equal to the query's lower bound when the index has nothing more.
    pub covered_down_to: u128,
}

impl SearchIndex {
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn publish(&self, snapshot: Snapshot) {
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(snapshot);
    }

    /// The share of indexed records holding the rarest trigram of the folded query `q`: an
    /// upper bound on the share that contain `q` (exact for a 3-character query).
    pub fn rarest_share(&self, view: &IndexView, q: &str) -> Result<f64, IndexError> {
        let searcher = &view.searcher;
        let docs = searcher.num_docs();
        if docs == 0 {
            return Ok(0.0);
        }
        let mut rarest = docs;
        for (_, gram) in covering_trigrams(q) {
            let df = searcher.doc_freq(&Term::from_field_text(self.fields.text, gram))?;
            rarest = rarest.min(df);
        }
        Ok(rarest as f64 / docs as f64)
    }

    /// Records of `partition` with an id in `[lower, upper]` whose folded text contains the
    /// folded query `q`, newest first, at least `want` of them unless the range has fewer.
    pub fn query(
        &self,
        view: &IndexView,
        partition: u64,
        q: &str,
        lower: u128,
        upper: u128,
        want: usize,
    ) -> Result<Hits, IndexError> {
        let f = self.fields;
        let grams: Vec<(usize, Term)> = covering_trigrams(q)
            .into_iter()
            .map(|(offset, gram)| (offset, Term::from_field_text(f.text, gram)))
            .collect();
        let text_query: Box<dyn Query> = match grams.len() {
            0 => {
                return Ok(Hits {
                    ids: Vec::new(),
                    covered_down_to: lower,
                });
            }
            1 => Box::new(TermQuery::new(grams[0].1.clone(), IndexRecordOption::Basic)),
            _ => Box::new(PhraseQuery::new_with_offset(grams)),
        };
        let query = BooleanQuery::new(vec![
            (
                Occur::Must,
                Box::new(TermQuery::new(
                    Term::from_field_u64(f.partition, partition),
                    IndexRecordOption::Basic,
                )),
            ),
            (Occur::Must, text_query),
        ]);
        let (lo_hi, up_hi) = ((lower >> 64) as u64, (upper >> 64) as u64);
        // Ordered by created_at (the id's high half) only: hits that share the lowest
        // created_at of a full page may be cut arbitrarily, so that microsecond is not counted
        // as covered and the caller asks again from it.
        let mut limit = want.max(1) + 1;
        loop {
            let top = view.searcher.search(
                &query,
                &NewestInRange {
                    view,
                    from_hi: lo_hi,
                    to_hi: up_hi,
                    limit,
                },
            )?;
            let mut ids: Vec<u128> = top.iter().filter_map(|addr| view.id_of(*addr)).collect();
            ids.retain(|id| (lower..=upper).contains(id));
            ids.sort_unstable_by(|a, b| b.cmp(a));
            if top.len() < limit {
                return Ok(Hits {
                    ids,
                    covered_down_to: lower,
                });
            }
            let boundary_hi = ids.last().map_or(lo_hi, |id| (id >> 64) as u64);
            let keep = ids
                .iter()
                .filter(|id| (*id >> 64) as u64 > boundary_hi)
                .count();
            if keep > 0 {
                ids.truncate(keep);
                return Ok(Hits {
                    ids,
                    covered_down_to: (u128::from(boundary_hi) << 64) + (1u128 << 64),
                });
            }
            // A whole page in one microsecond: ask for more.
            limit *= 2;
        }
    }
}

/// The `limit` matching documents with the highest created_at in `[from_hi, to_hi]`, highest
/// first, read from the view's already open id columns.
struct NewestInRange<'a> {
    view: &'a IndexView,
    from_hi: u64,
    to_hi: u64,
    limit: usize,
}

struct NewestInSegment {
    hi: Column<u64>,
    segment_ord: SegmentOrdinal,
    from_hi: u64,
    to_hi: u64,
    limit: usize,
    /// The best `limit` so far; its top is the lowest of them.
    heap: BinaryHeap<Reverse<(u64, DocId)>>,
}

impl Collector for NewestInRange<'_> {
    type Fruit = Vec<DocAddress>;
    type Child = NewestInSegment;

    fn for_segment(
        &self,
        segment_ord: SegmentOrdinal,
        _segment: &SegmentReader,
    ) -> tantivy::Result<NewestInSegment> {
        let columns = self.view.ids.get(segment_ord as usize).ok_or_else(|| {
            tantivy::TantivyError::InternalError(format!("no id columns for segment {segment_ord}"))
        })?;
        Ok(NewestInSegment {
            hi: columns.hi.clone(),
            segment_ord,
            from_hi: self.from_hi,
            to_hi: self.to_hi,
            limit: self.limit,
            heap: BinaryHeap::with_capacity(self.limit + 1),
        })
    }

    fn requires_scoring(&self) -> bool {
        false
    }

    fn merge_fruits(
        &self,
        segments: Vec<Vec<(u64, DocAddress)>>,
    ) -> tantivy::Result<Vec<DocAddress>> {
        let mut all: Vec<(u64, DocAddress)> = segments.into_iter().flatten().collect();
        all.sort_unstable_by_key(|(hi, _)| Reverse(*hi));
        all.truncate(self.limit);
        Ok(all.into_iter().map(|(_, addr)| addr).collect())
    }
}

impl SegmentCollector for NewestInSegment {
    type Fruit = Vec<(u64, DocAddress)>;

    fn collect(&mut self, doc: DocId, _score: Score) {
        let Some(hi) = self.hi.first(doc) else {
            return;
        };
        if hi < self.from_hi || hi > self.to_hi {
            return;
        }
        if self.heap.len() == self.limit {
            match self.heap.peek() {
                Some(Reverse((lowest, _))) if hi > *lowest => {
                    self.heap.pop();
                }
                _ => return,
            }
        }
        self.heap.push(Reverse((hi, doc)));
    }

    fn harvest(self) -> Vec<(u64, DocAddress)> {
        let segment_ord = self.segment_ord;
        self.heap
            .into_iter()
            .map(|Reverse((hi, doc_id))| (hi, DocAddress::new(segment_ord, doc_id)))
            .collect()
    }
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
    store: Arc<RedbStore>,
    nice: i32,
) -> Result<(Arc<SearchIndex>, Notifier, IndexerThread), IndexError> {
    let dir = data_dir.join(DIR);
    let (index, position) = open_or_create(&dir)?;
    let reader = index
        .reader_builder()
        .reload_policy(ReloadPolicy::Manual)
        .try_into()?;
    let (_, fields) = schema();
    let shared = Arc::new(SearchIndex {
        fields,
        snapshot: RwLock::new(Arc::new(Snapshot {
            view: None,
            position: 0,
        })),
    });
    let needs_rebuild = match position {
        None => true,
        Some(p) => is_behind_the_log(&store, p)?,
    };
    let (tx, rx) = sync_channel(1);
    let (started_tx, started_rx) = sync_channel(1);
    let thread_shared = shared.clone();
    let handle = std::thread::Builder::new()
        .name("search-indexer".into())
        .spawn(move || {
            lower_priority(nice);
            let writer = match index.writer_with_num_threads(1, WRITER_HEAP_BYTES) {
                Ok(writer) => writer,
                Err(err) => {
                    let _ = started_tx.send(Err(err));
                    return;
                }
            };
            let _ = started_tx.send(Ok(()));
            let indexer = Indexer {
                store,
                writer,
                reader,
                fields,
                shared: thread_shared,
                position: position.unwrap_or(0),
                committed: VecDeque::new(),
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

/// Hands memory the indexing just freed back to the system (the server's allocator is
/// mimalloc). tantivy's indexing thread allocates a term table of about 8 MB for the first
/// document after a commit and frees it at the commit; mimalloc returns freed pages only when
/// the thread that freed them allocates again after a delay, which an idle indexing thread
/// never does, so an idle server kept ~8 MB more after its first write (docs/src/benchmarks.md).
/// The cost is a few milliseconds of page faults the next time the table is allocated, once
/// per commit at most, and only when the indexer has caught up.
fn return_freed_memory() {
    // SAFETY: mi_collect has no preconditions and may be called from any thread; where
    // mimalloc is not the global allocator (tests of the library) it has nothing to do.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// Sets the calling thread's nice value (Linux keeps one per thread; threads it starts
/// inherit it). Failing to is logged, not fatal: indexing then runs at normal priority.
fn lower_priority(nice: i32) {
    if nice == 0 {
        return;
    }
    if let Err(err) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice) {
        log::warn!("could not lower the search indexer's priority to nice {nice}: {err}");
    }
}

/// A saved position the log can no longer continue from (trimmed past it, or a store older
/// than the index, as after a restore) means the index must be rebuilt.
fn is_behind_the_log(store: &RedbStore, position: u64) -> Result<bool, IndexError> {
    let txn = store.read()?;
    let meta = txn.open_table(META)?;
    let trimmed = read_counter(&meta, CHANGES_TRIMMED_UPTO)?;
    let last = read_counter(&meta, LAST_CHANGE_SEQ)?;
    Ok(position < trimmed || position > last)
}

/// Opens the index and reads the position of its last commit; on any failure (missing,
/// corrupt, another schema) it starts over with an empty index and no position.
fn open_or_create(dir: &Path) -> Result<(Index, Option<u64>), IndexError> {
    match open_existing(dir) {
        Ok(opened) => return Ok(opened),
        Err(err) if dir.exists() => {
            log::warn!(
                "search index in {} is unusable ({err}); rebuilding it",
                dir.display()
            );
        }
        Err(_) => log::info!("no search index yet in {}; building it", dir.display()),
    }
    let io = |source| IndexError::Io {
        path: dir.display().to_string(),
        source,
    };
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(io)?;
    }
    std::fs::create_dir_all(dir).map_err(io)?;
    let index = Index::create_in_dir(dir, schema().0)?;
    register_tokenizer(&index);
    Ok((index, None))
}

fn open_existing(dir: &Path) -> Result<(Index, Option<u64>), IndexError> {
    let index = Index::open_in_dir(dir)?;
    if index.schema() != schema().0 {
        return Err(tantivy::TantivyError::SchemaError("schema changed".into()).into());
    }
    register_tokenizer(&index);
    // Opening a reader loads every segment: corrupt files show here.
    let reader: IndexReader = index.reader()?;
    let searcher = reader.searcher();
    for segment in searcher.segment_readers() {
        segment.fast_fields().u64("id_hi")?;
    }
    let position = index
        .load_metas()?
        .payload
        .and_then(|p| p.parse::<u64>().ok());
    Ok((index, position))
}

fn register_tokenizer(index: &Index) {
    index.tokenizers().register(TOKENIZER, TrigramTokenizer);
}

struct Indexer {
    store: Arc<RedbStore>,
    writer: IndexWriter,
    reader: IndexReader,
    fields: Fields,
    shared: Arc<SearchIndex>,
    /// The change-log sequence applied to the writer so far.
    position: u64,
    /// Recent commits, oldest first: when and up to which sequence.
    committed: VecDeque<(Instant, u64)>,
}

impl Indexer {
    fn run(mut self, needs_rebuild: bool, signals: &Receiver<Signal>) {
        let ready = if needs_rebuild {
            self.rebuild()
        } else {
            self.publish()
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
            } else {
                signals.recv_timeout(COMMIT_INTERVAL)
            };
            match signal {
                Ok(Signal::Shutdown) | Err(RecvTimeoutError::Disconnected) => stopping = true,
                Ok(Signal::Changed) | Err(RecvTimeoutError::Timeout) => {}
            }
            let step = self.catch_up(COMMIT_BATCH).and_then(|applied| {
                since_commit += applied;
                backlog = applied == COMMIT_BATCH;
                let due = last_commit.elapsed() >= COMMIT_INTERVAL
                    || since_commit >= COMMIT_BATCH
                    || stopping;
                if (since_commit > 0 || self.uncommitted()) && due {
                    last_commit = Instant::now();
                    since_commit = 0;
                    self.commit()?;
                    self.trim()?;
                    if !backlog {
                        return_freed_memory();
                    }
                }
                Ok(())
            });
            if let Err(err) = step {
                log::error!("{err}; retrying");
                std::thread::sleep(COMMIT_INTERVAL);
            }
        }
        if let Err(err) = self.writer.wait_merging_threads() {
            log::error!("search index merge at shutdown failed: {err}");
        }
    }

    /// Whether the writer holds changes not yet committed.
    fn uncommitted(&self) -> bool {
        self.committed.back().map(|(_, p)| *p) != Some(self.position)
    }

    /// Indexes every record from scratch.
    fn rebuild(&mut self) -> Result<(), IndexError> {
        let started = Instant::now();
        self.writer.delete_all_documents()?;
        let txn = self.store.read()?;
        let position = read_counter(&txn.open_table(META)?, LAST_CHANGE_SEQ)?;
        let records = txn.open_table(RECORDS)?;
        let total = records.len()?;
        log::info!("search index: rebuilding from {total} stored records");
        let mut done = 0u64;
        for entry in records.iter()? {
            let (key, value) = entry?;
            let (partition, id) = key.value();
            self.add(partition, id, value.value())?;
            done += 1;
            if done % 200_000 == 0 {
                log::info!("search index: rebuilt {done} of {total} records");
            }
        }
        drop(records);
        drop(txn);
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
            let txn = self.store.read()?;
            let changes = txn.open_table(CHANGES)?;
            let records = txn.open_table(RECORDS)?;
            let mut n = 0;
            for entry in changes
                .range(self.position + 1..)?
                .take(CHANGE_CHUNK.min(max - applied))
            {
                let (seq, change) = entry?;
                let (partition, id) = change.value();
                self.writer
                    .delete_term(Term::from_field_bytes(self.fields.id, &id.to_be_bytes()));
                if let Some(value) = records.get((partition, id))? {
                    self.add(partition, id, value.value())?;
                }
                self.position = seq.value();
                n += 1;
            }
            applied += n;
            if n == 0 {
                break;
            }
        }
        Ok(applied)
    }

    fn add(&mut self, partition: u64, id: u128, value: &[u8]) -> Result<(), IndexError> {
        let (_, payload) = decode_record(value)?;
        let text = fold_case(&payload_text(payload));
        let f = self.fields;
        let mut doc = tantivy::TantivyDocument::default();
        doc.add_u64(f.partition, partition);
        doc.add_bytes(f.id, &id.to_be_bytes());
        doc.add_u64(f.id_hi, (id >> 64) as u64);
        doc.add_u64(f.id_lo, id as u64);
        doc.add_text(f.text, &text);
        self.writer.add_document(doc)?;
        Ok(())
    }

    /// Commits with the covered position as payload and publishes the new snapshot.
    fn commit(&mut self) -> Result<(), IndexError> {
        let mut prepared = self.writer.prepare_commit()?;
        prepared.set_payload(&self.position.to_string());
        prepared.commit()?;
        self.committed.push_back((Instant::now(), self.position));
        self.publish()
    }

    fn publish(&mut self) -> Result<(), IndexError> {
        self.reader.reload()?;
        self.shared.publish(Snapshot {
            view: Some(IndexView::new(self.reader.searcher())?),
            position: self.position,
        });
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
        let txn = self.store.write()?;
        let mut removed_all = true;
        {
            let mut changes = txn.open_table(CHANGES)?;
            let doomed: Vec<u64> = changes
                .range(..=upto)?
                .take(TRIM_CHUNK)
                .map(|e| e.map(|(k, _)| k.value()))
                .collect::<Result<_, _>>()?;
            if doomed.len() == TRIM_CHUNK {
                removed_all = false;
            }
            for seq in &doomed {
                changes.remove(*seq)?;
            }
            if let Some(last) = doomed.last() {
                write_counter(&txn, CHANGES_TRIMMED_UPTO, *last)?;
            }
        }
        txn.commit()?;
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
