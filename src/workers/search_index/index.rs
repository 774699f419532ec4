//! The tantivy index: its schema, opening it, and the queries of a committed state
//! ([`TantivyView`], the `domain::search::IndexView` searches use).
//!
//! One document per stored record: its partition, its id (as bytes for deletes, and as two u64
//! fast fields: the high half is created_at, so ordering by it is ordering by time), and its
//! case-folded payload text tokenised into positional trigrams.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::time::Duration;

use tantivy::collector::{Collector, SegmentCollector};
use tantivy::columnar::Column;
use tantivy::query::{BooleanQuery, EnableScoring, Occur, PhraseQuery, Query, TermQuery};
use tantivy::schema::{
    BytesOptions, Field, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::Tokenizer;
use tantivy::{
    DocAddress, DocId, Index, IndexReader, Score, Searcher, SegmentOrdinal, SegmentReader, Term,
};

use super::directory::{IndexDirectory, MergePacing};
use super::expunge::Expunger;
use crate::domain::error::{Error, Result as ServiceResult};
use crate::domain::search::tokenizer::{
    SharedStopSet, StopSet, TrigramStream, TrigramTokenizer, indexed_trigrams, query_trigrams,
};
use crate::domain::search::{ExpungeReport, Hits, IndexView, SearchIndex, Snapshot};
use crate::store::{Partition, StoreError};

/// The index folder inside the data dir.
pub const DIR: &str = "search";
const TOKENIZER: &str = "trigram";

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
    #[error("search index folder {path}: files of rewritten segments are left: {files}")]
    FilesLeft { path: String, files: String },
}

/// A query the index cannot answer is the server's own failure.
impl From<IndexError> for Error {
    fn from(err: IndexError) -> Self {
        Error::Internal(err.to_string())
    }
}

#[derive(Clone, Copy)]
pub(super) struct Fields {
    pub(super) partition: Field,
    pub(super) id: Field,
    pub(super) id_hi: Field,
    pub(super) id_lo: Field,
    pub(super) text: Field,
}

pub(super) fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let text_options = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(TOKENIZER)
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let fields = Fields {
        partition: builder.add_u64_field("partition", NumericOptions::default().set_indexed()),
        id: builder.add_bytes_field("id", BytesOptions::default().set_indexed()),
        id_hi: builder.add_u64_field("id_hi", NumericOptions::default().set_fast()),
        id_lo: builder.add_u64_field("id_lo", NumericOptions::default().set_fast()),
        text: builder.add_text_field("text", text_options),
    };
    (builder.build(), fields)
}

/// A searcher and the id columns of each of its segments, opened once per snapshot: opening
/// a fast-field column decodes its whole block index, which repeated for every segment of
/// every query was most of the cost of a query that matches nothing.
pub struct TantivyView {
    searcher: Searcher,
    fields: Fields,
    /// The stop set committed with this state: trigrams its postings may lack.
    stop: Arc<StopSet>,
    /// Indexed by segment ordinal.
    ids: Vec<IdColumns>,
}

#[derive(Clone)]
struct IdColumns {
    /// The id's high half: created_at in microseconds.
    hi: Column<u64>,
    lo: Column<u64>,
}

impl TantivyView {
    pub(super) fn new(
        searcher: Searcher,
        fields: Fields,
        stop: Arc<StopSet>,
    ) -> Result<Self, IndexError> {
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
        Ok(TantivyView {
            searcher,
            fields,
            stop,
            ids,
        })
    }

    fn id_of(&self, addr: DocAddress) -> Option<u128> {
        let columns = self.ids.get(addr.segment_ord as usize)?;
        let hi = columns.hi.first(addr.doc_id)?;
        let lo = columns.lo.first(addr.doc_id)?;
        Some((u128::from(hi) << 64) | u128::from(lo))
    }
}

impl IndexView for TantivyView {
    fn rarest_share(&self, q: &str) -> ServiceResult<Option<f64>> {
        Ok(self.share_of_rarest(q)?)
    }

    fn query(
        &self,
        partition: Partition,
        q: &str,
        lower: u128,
        upper: u128,
        want: usize,
    ) -> ServiceResult<Hits> {
        Ok(self.hits(partition, q, lower, upper, want)?)
    }
}

impl TantivyView {
    fn share_of_rarest(&self, q: &str) -> Result<Option<f64>, IndexError> {
        let searcher = &self.searcher;
        let grams = indexed_trigrams(q, &self.stop);
        if grams.is_empty() {
            return Ok(None);
        }
        let docs = searcher.num_docs();
        if docs == 0 {
            return Ok(Some(0.0));
        }
        let mut rarest = docs;
        for gram in grams {
            let df = searcher.doc_freq(&Term::from_field_text(self.fields.text, gram))?;
            rarest = rarest.min(df);
        }
        Ok(Some(rarest as f64 / docs as f64))
    }

    fn hits(
        &self,
        partition: Partition,
        q: &str,
        lower: u128,
        upper: u128,
        want: usize,
    ) -> Result<Hits, IndexError> {
        let f = self.fields;
        let grams: Vec<(usize, Term)> = query_trigrams(q, &self.stop)
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
                    Term::from_field_u64(f.partition, partition.raw()),
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
            let top = self.newest_in_range(&query, lo_hi, up_hi, limit)?;
            let mut ids: Vec<u128> = top.iter().filter_map(|addr| self.id_of(*addr)).collect();
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

impl TantivyView {
    /// The `limit` documents matching `query` with the highest created_at in `[from_hi,
    /// to_hi]`, highest first. Segments are searched newest first (by the highest created_at
    /// they hold), and once `limit` are found, a segment holding nothing newer than the
    /// lowest of them is not searched: a query whose page fills from recent records costs
    /// what those records' segments cost, whatever the size of the index behind them.
    fn newest_in_range(
        &self,
        query: &dyn Query,
        from_hi: u64,
        to_hi: u64,
        limit: usize,
    ) -> Result<Vec<DocAddress>, IndexError> {
        let collector = NewestInRange {
            view: self,
            from_hi,
            to_hi,
            limit,
        };
        let weight = query.weight(EnableScoring::disabled_from_searcher(&self.searcher))?;
        let mut segments: Vec<(u64, u64, SegmentOrdinal)> = self
            .ids
            .iter()
            .zip(0..)
            .map(|(columns, ord)| (columns.hi.max_value(), columns.hi.min_value(), ord))
            .collect();
        segments.sort_unstable_by_key(|(newest, _, _)| Reverse(*newest));
        let mut best: Vec<(u64, DocAddress)> = Vec::new();
        for (newest, oldest, ord) in segments {
            if newest < from_hi || oldest > to_hi {
                continue;
            }
            if best.len() >= limit && best.last().is_some_and(|(lowest, _)| newest < *lowest) {
                break;
            }
            let reader = self.searcher.segment_reader(ord);
            let found = collector.collect_segment(weight.as_ref(), ord, reader)?;
            best = collector.merge_fruits(vec![best, found])?;
        }
        Ok(best.into_iter().map(|(_, addr)| addr).collect())
    }
}

/// The read side, shared with every search: the snapshot the indexer published last, and the
/// way to ask the indexer for an expunge.
pub struct TantivyIndex {
    published: Arc<Published>,
    expunger: Expunger,
}

impl SearchIndex for TantivyIndex {
    fn snapshot(&self) -> Arc<Snapshot> {
        self.published.current()
    }

    fn expunge_deleted(&self, timeout: Duration) -> ServiceResult<ExpungeReport> {
        self.expunger.expunge(timeout)
    }
}

impl TantivyIndex {
    pub(super) fn new(published: Arc<Published>, expunger: Expunger) -> TantivyIndex {
        TantivyIndex {
            published,
            expunger,
        }
    }
}

/// The snapshot the indexer published last. The indexer thread holds this and not the
/// [`TantivyIndex`], which holds a sender of the thread's signals (to wake it for an
/// expunge): the thread stops once every sender is gone.
pub(super) struct Published(RwLock<Arc<Snapshot>>);

impl Published {
    /// No view until the indexer publishes its first snapshot.
    pub(super) fn starting() -> Published {
        Published(RwLock::new(Arc::new(Snapshot {
            view: None,
            position: 0,
        })))
    }

    fn current(&self) -> Arc<Snapshot> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(super) fn publish(&self, snapshot: Snapshot) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(snapshot);
    }
}

/// The `limit` matching documents with the highest created_at in `[from_hi, to_hi]`, highest
/// first, read from the view's already open id columns.
struct NewestInRange<'a> {
    view: &'a TantivyView,
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
    type Fruit = Vec<(u64, DocAddress)>;
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

    /// The newest `limit` of the segments' matches, newest first, each with its created_at.
    fn merge_fruits(
        &self,
        segments: Vec<Vec<(u64, DocAddress)>>,
    ) -> tantivy::Result<Vec<(u64, DocAddress)>> {
        let mut all: Vec<(u64, DocAddress)> = segments.into_iter().flatten().collect();
        all.sort_unstable_by_key(|(hi, _)| Reverse(*hi));
        all.truncate(self.limit);
        Ok(all)
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

/// What a commit records beside the index (its payload): the change-log position it covers
/// (none while a rebuild is under way) and its stop set.
#[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct CommitState {
    pub(super) position: Option<u64>,
    #[serde(default)]
    pub(super) stop: Vec<String>,
}

impl CommitState {
    pub(super) fn encode(position: Option<u64>, stop: &StopSet) -> String {
        let state = CommitState {
            position,
            stop: stop.sorted().into_iter().map(str::to_string).collect(),
        };
        // Serialising a struct of a number and strings cannot fail.
        serde_json::to_string(&state).unwrap_or_default()
    }

    /// Also reads the bare position earlier versions wrote (no stop set).
    fn decode(payload: &str) -> CommitState {
        if let Ok(position) = payload.parse::<u64>() {
            return CommitState {
                position: Some(position),
                stop: Vec::new(),
            };
        }
        serde_json::from_str(payload).unwrap_or_default()
    }
}

/// An opened index, its tokenizer's stop set (the committed one) and the position its last
/// commit covers.
pub(super) struct Opened {
    pub(super) index: Index,
    pub(super) position: Option<u64>,
    pub(super) stop: SharedStopSet,
    pub(super) taken: Arc<Taken>,
}

/// How much of the text handed to tantivy its indexing thread has taken up: its tokenizer
/// runs once per document (one text value each) on that thread. tantivy queues up to 10,000
/// documents ahead of that thread (about 20 MB of 1 KB records) and has no setting for it, so
/// the indexer counts what it sent and waits on this to keep the queue short.
pub(super) struct Taken {
    /// Bytes of text taken, plus [`DOC_OVERHEAD`] per document.
    bytes: AtomicU64,
    /// What a waiting indexer waits for `bytes` to reach; `u64::MAX` when none waits.
    awaited: AtomicU64,
    lock: Mutex<()>,
    reached: Condvar,
}

/// What a queued document holds beside its text (tantivy's document nodes, the other fields),
/// roughly; counted so that many tiny documents are bounded too.
pub(super) const DOC_OVERHEAD: u64 = 256;

impl Taken {
    pub(super) fn new() -> Self {
        Taken {
            bytes: AtomicU64::new(0),
            awaited: AtomicU64::new(u64::MAX),
            lock: Mutex::new(()),
            reached: Condvar::new(),
        }
    }

    pub(super) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::SeqCst)
    }

    fn took(&self, text: &str) {
        let now = self
            .bytes
            .fetch_add(text.len() as u64 + DOC_OVERHEAD, Ordering::SeqCst)
            + text.len() as u64
            + DOC_OVERHEAD;
        if now >= self.awaited.load(Ordering::SeqCst) {
            // Taking the lock orders this wake-up after the waiter's check (it holds the lock
            // from its check until it waits).
            let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
            self.reached.notify_all();
        }
    }

    /// Waits until `bytes` reaches `target`, or `timeout` passes (a stopped indexing thread
    /// then shows as an error of the next add).
    pub(super) fn wait_for(&self, target: u64, timeout: Duration) {
        let guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.awaited.store(target, Ordering::SeqCst);
        let _ = self
            .reached
            .wait_timeout_while(guard, timeout, |_| self.bytes() < target)
            .unwrap_or_else(PoisonError::into_inner);
        self.awaited.store(u64::MAX, Ordering::SeqCst);
    }
}

/// The trigram tokenizer, counting what tantivy's indexing thread takes up into [`Taken`].
#[derive(Clone)]
struct CountingTokenizer {
    inner: TrigramTokenizer,
    taken: Arc<Taken>,
}

impl Tokenizer for CountingTokenizer {
    type TokenStream<'a> = TrigramStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> TrigramStream<'a> {
        self.taken.took(text);
        self.inner.token_stream(text)
    }
}

/// Opens the index and reads the state of its last commit; on any failure (missing, corrupt,
/// another schema) it starts over with an empty index, no position and no stop set.
pub(super) fn open_or_create(dir: &Path, pacing: &MergePacing) -> Result<Opened, IndexError> {
    match open_existing(dir, pacing) {
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
    let index = Index::create(
        IndexDirectory::open(dir, pacing).map_err(tantivy::TantivyError::from)?,
        schema().0,
        tantivy::IndexSettings::default(),
    )?;
    let (stop, taken) = register_tokenizer(&index, StopSet::default());
    Ok(Opened {
        index,
        position: None,
        stop,
        taken,
    })
}

fn open_existing(dir: &Path, pacing: &MergePacing) -> Result<Opened, IndexError> {
    let index =
        Index::open(IndexDirectory::open(dir, pacing).map_err(tantivy::TantivyError::from)?)?;
    if index.schema() != schema().0 {
        return Err(tantivy::TantivyError::SchemaError("schema changed".into()).into());
    }
    // Opening a reader loads every segment: corrupt files show here.
    let reader: IndexReader = index.reader()?;
    let searcher = reader.searcher();
    for segment in searcher.segment_readers() {
        segment.fast_fields().u64("id_hi")?;
    }
    let state = index
        .load_metas()?
        .payload
        .map(|p| CommitState::decode(&p))
        .unwrap_or_default();
    let (stop, taken) = register_tokenizer(&index, StopSet::from_iter(state.stop));
    Ok(Opened {
        index,
        position: state.position,
        stop,
        taken,
    })
}

fn register_tokenizer(index: &Index, stop: StopSet) -> (SharedStopSet, Arc<Taken>) {
    let shared = SharedStopSet::new(Arc::new(stop));
    let taken = Arc::new(Taken::new());
    index.tokenizers().register(
        TOKENIZER,
        CountingTokenizer {
            inner: TrigramTokenizer::new(shared.clone()),
            taken: taken.clone(),
        },
    );
    (shared, taken)
}

/// When trigrams become stop trigrams (see `domain::search::tokenizer`).
#[derive(Clone, Copy, Debug)]
pub struct StopPolicy {
    /// A trigram in more than this share of the indexed records becomes one.
    pub share: f64,
    /// No stop trigrams before the index holds this many records (a small index is cheap to
    /// keep whole, and a share of a few records says little).
    pub min_records: u64,
}

impl StopPolicy {
    /// Every trigram is indexed.
    pub const NONE: StopPolicy = StopPolicy {
        share: 1.0,
        min_records: u64::MAX,
    };
}

/// `current` and every trigram of the text field in more than `policy.share` of the
/// documents of `searcher`, if that adds any. Reads every segment's term dictionary of the
/// field (deleted documents still count: a share, not an exact figure, is needed).
pub(super) fn grown_stop_set(
    searcher: &Searcher,
    text: Field,
    current: &StopSet,
    policy: StopPolicy,
) -> Result<Option<StopSet>, IndexError> {
    let docs: u64 = searcher
        .segment_readers()
        .iter()
        .map(|segment| u64::from(segment.max_doc()))
        .sum();
    if docs < policy.min_records.max(1) {
        return Ok(None);
    }
    let mut freq: rustc_hash::FxHashMap<Vec<u8>, u64> = Default::default();
    for segment in searcher.segment_readers() {
        let inverted = segment.inverted_index(text)?;
        let mut terms = inverted
            .terms()
            .stream()
            .map_err(tantivy::TantivyError::from)?;
        while terms.advance() {
            *freq.entry(terms.key().to_vec()).or_default() += u64::from(terms.value().doc_freq);
        }
    }
    let floor = (policy.share * docs as f64) as u64;
    let added: Vec<String> = freq
        .into_iter()
        .filter(|(_, df)| *df > floor)
        .filter_map(|(gram, _)| String::from_utf8(gram).ok())
        .filter(|gram| !current.contains(gram))
        .collect();
    if added.is_empty() {
        return Ok(None);
    }
    let mut grown: Vec<String> = current.sorted().into_iter().map(str::to_string).collect();
    grown.extend(added);
    Ok(Some(StopSet::from_iter(grown)))
}

#[cfg(test)]
mod taken_tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{DOC_OVERHEAD, Taken};

    #[test]
    fn a_wait_ends_when_the_indexing_thread_has_taken_enough() {
        let taken = Arc::new(Taken::new());
        let target = 3 * (3 + DOC_OVERHEAD);
        let indexing = {
            let taken = taken.clone();
            std::thread::spawn(move || {
                for _ in 0..3 {
                    taken.took("abc");
                }
            })
        };
        // Far longer than the test may take: returning at the timeout would fail below only
        // if the thread had not run in all that time.
        taken.wait_for(target, Duration::from_secs(60));
        assert!(taken.bytes() >= target);
        indexing.join().expect("indexing thread");
        assert_eq!(taken.bytes(), target);
    }

    #[test]
    fn a_wait_nothing_answers_ends_at_its_timeout() {
        let taken = Taken::new();
        taken.wait_for(1, Duration::from_millis(10));
        assert_eq!(taken.bytes(), 0);
    }
}
