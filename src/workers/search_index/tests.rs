//! Search over the real index and store: the planner of `domain::search` with a tail the
//! indexer has not reached.

mod expunge;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use crate::core::clock::{SystemClock, Timestamp};
use crate::core::ids::RecordId;
use crate::core::metrics::Metrics;
use crate::domain::handles::{Handles, Unattended};
use crate::domain::ingest::{Ingest, Write};
use crate::domain::search::{MAX_SCANNED, SearchIndex, fold_case, parse_request, search_within};
use crate::domain::webhooks::deliveries::Hooks;
use crate::store::records::{NewRecord, RecordWrite};
use crate::store::{Partition, Store};
use crate::workers::ingest_writer;
use crate::workers::search_index::{IndexerSettings, IndexerThread, StopPolicy};

/// The searched partition, and another whose records must never show up.
const P: Partition = Partition::from_raw(2);
const OTHER: Partition = Partition::from_raw(3);
const WORDS: [&str; 6] = ["zebra", "horse", "gamma", "delta", "omega", "Ärger"];

/// A temp data dir with a store and its ingest writer, as the tests write through.
struct Bench {
    dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    runtime: tokio::runtime::Runtime,
    ingest: Ingest,
    writer: ingest_writer::WriterThreads,
}

impl Bench {
    fn new() -> Bench {
        let dir = tempfile::tempdir().expect("temp dir");
        let store =
            crate::store::open_embedded(&dir.path().join("t.redb"), 1 << 22, 0).expect("store");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let handles = Handles::new(store.clone(), Arc::new(SystemClock), Arc::new(Unattended));
        let (ingest, writer) =
            ingest_writer::start(handles, Arc::new(Metrics::default()), Default::default(), 1)
                .expect("ingest writer");
        Bench {
            dir,
            store,
            runtime,
            ingest,
            writer,
        }
    }

    /// Applies writes through the ingest writer, all submitted at once so that they share
    /// commits.
    fn write(&self, ops: Vec<RecordWrite>) {
        let writes = ops.into_iter().map(|op| {
            let partition = op.partition();
            let hooks = Hooks {
                endpoint_slug: "search-test".into(),
                environment: partition.environment(),
                at: Timestamp(0),
                caller: None,
                trace: None,
            };
            self.ingest.submit(Write { record: op, hooks })
        });
        for outcome in self
            .runtime
            .block_on(futures_util::future::join_all(writes))
        {
            outcome.expect("write applied");
        }
    }

    /// Starts the indexer over the bench's data dir as the server runs it, with `stop` as its
    /// stop policy.
    fn start_index(
        &self,
        stop: StopPolicy,
    ) -> (Arc<dyn SearchIndex>, super::Notifier, IndexerThread) {
        let settings = IndexerSettings {
            nice: 0,
            memory_bytes: 15_000_000,
            stop,
        };
        super::start(self.dir.path(), self.store.clone(), settings).expect("index")
    }

    fn index_dir(&self) -> PathBuf {
        self.dir.path().join(super::index::DIR)
    }

    /// The index as last committed, with the state its commit carries, parsed and as stored
    /// (for messages).
    fn committed_index(&self) -> (tantivy::Index, super::index::CommitState, String) {
        let index = tantivy::Index::open_in_dir(self.index_dir()).expect("open");
        let stored = index.load_metas().expect("metas").payload.expect("payload");
        let state = serde_json::from_str(&stored).expect("commit state");
        (index, state, stored)
    }

    /// Shuts the ingest writer down and waits for its thread.
    fn finish(self) {
        self.runtime.block_on(self.ingest.shutdown());
        self.writer.join();
    }
}

/// A random seed, for the failure messages to name (a run is replayed from it), and its
/// generator.
fn seeded() -> (u64, StdRng) {
    let seed = rand::random::<u64>();
    (seed, StdRng::seed_from_u64(seed))
}

fn create(p: Partition, id: u128, payload: String) -> RecordWrite {
    RecordWrite::Create {
        partition: p,
        records: vec![NewRecord {
            id: RecordId(id),
            payload: payload.into_bytes(),
        }],
        idempotency: None,
    }
}

/// A replace (`Some` payload) or a delete.
fn edit(p: Partition, id: u128, payload: Option<String>) -> RecordWrite {
    match payload {
        Some(payload) => RecordWrite::Replace {
            partition: p,
            id: RecordId(id),
            updated_at: Timestamp((id >> 64) as i64),
            payload: payload.into_bytes(),
        },
        None => RecordWrite::Delete {
            partition: p,
            id: RecordId(id),
            at: Timestamp((id >> 64) as i64),
        },
    }
}

fn payload(rng: &mut StdRng, n: usize, extra: &str) -> String {
    let a = WORDS[rng.random_range(0..WORDS.len())];
    let b = WORDS[rng.random_range(0..WORDS.len())];
    format!(r#"{{"n":{n},"text":"{a} and {b}","tag":"{extra}"}}"#)
}

/// Record ids created at `micros`, with random low bits as `RecordId::generate` makes.
fn id_at(rng: &mut StdRng, micros: u128) -> u128 {
    (micros << 64) | u128::from(rng.random::<u64>())
}

/// Every record of `P` containing `q`, newest first, by reading the whole partition.
fn brute_force(store: &dyn Store, q: &str) -> Vec<String> {
    let q = fold_case(q);
    let mut ids = Vec::new();
    store
        .read()
        .expect("read")
        .visit_newest_first(P, 0, u128::MAX, &mut |id, _, payload| {
            if fold_case(&String::from_utf8_lossy(payload)).contains(&q) {
                ids.push(RecordId(id).to_string());
            }
            ControlFlow::Continue(())
        })
        .expect("records");
    ids
}

/// Pages through a search to its end; returns every id and the first page's JSON.
fn search_all(
    store: &dyn Store,
    index: &dyn SearchIndex,
    q: &str,
    limit: usize,
    budget: usize,
) -> (Vec<String>, Value) {
    let now = Timestamp(1_900_000_000 * 1_000_000);
    let mut params = HashMap::from([
        ("q".to_string(), q.to_string()),
        ("start".to_string(), "2000-01-01".to_string()),
        ("limit".to_string(), limit.to_string()),
    ]);
    let (mut ids, mut first) = (Vec::new(), None);
    for _ in 0..10_000 {
        let request = parse_request(&params, P, now).expect("valid request");
        let text = search_within(store, Some(index), P, &request, budget).expect("search");
        let page: Value = serde_json::from_str(&text).expect("JSON page");
        let data = page["data"].as_array().expect("data");
        assert!(
            data.len() <= limit,
            "q={q:?}: {} records > limit {limit}",
            data.len()
        );
        ids.extend(
            data.iter()
                .map(|r| r["id"].as_str().expect("id").to_string()),
        );
        let next = page["pagination"]["next_cursor"]
            .as_str()
            .map(str::to_string);
        first.get_or_insert(page);
        match next {
            Some(cursor) => params.insert("cursor".to_string(), cursor),
            None => return (ids, first.expect("a page")),
        };
    }
    panic!("q={q:?} limit {limit} budget {budget}: paging does not end");
}

/// A long unindexed tail (creates, replaces and deletes after the index's snapshot):
/// with any budget, paging gives exactly the matches, newest first, with no duplicates or
/// gaps; a call that runs out of budget answers with fewer records and a `next_cursor`.
#[test]
fn a_tail_longer_than_the_budget_pages_exactly() {
    let (seed, mut rng) = seeded();
    let bench = Bench::new();
    let store: &dyn Store = bench.store.as_ref();

    // Indexed: 80 records, and a few in the other partition.
    let base = 1_700_000_000_000_000u128;
    let old: Vec<u128> = (0..80).map(|i| id_at(&mut rng, base + i * 1000)).collect();
    let mut writes: Vec<_> = old
        .iter()
        .enumerate()
        .map(|(n, &id)| create(P, id, payload(&mut rng, n, "ancient")))
        .collect();
    writes.extend((0..5).map(|n| {
        create(
            OTHER,
            id_at(&mut rng, base + n),
            payload(&mut rng, n as usize, "ancient"),
        )
    }));
    bench.write(writes);
    let (index, notifier, indexer) = bench.start_index(StopPolicy::NONE);
    let deadline = Instant::now() + Duration::from_secs(60);
    while index.snapshot().view.is_none() || index.snapshot().position == 0 {
        assert!(Instant::now() < deadline, "the index was not built");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The indexer stops: everything from here on stays in the tail.
    notifier.shutdown();
    indexer.join();

    // The tail: 150 creates (newer), replaces and deletes of old and new records, and
    // writes to the other partition, in a few commits.
    let fresh: Vec<u128> = (0..150)
        .map(|i| id_at(&mut rng, base + 1_000_000 + i * 1000))
        .collect();
    for chunk in fresh.chunks(50) {
        let writes: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(n, &id)| create(P, id, payload(&mut rng, n, "fresh")))
            .collect();
        bench.write(writes);
    }
    let mut edits = Vec::new();
    for &id in old.iter().step_by(4).chain(fresh.iter().step_by(9)) {
        let payload = if rng.random_bool(0.4) {
            None
        } else {
            Some(payload(&mut rng, 7, "edited"))
        };
        edits.push(edit(P, id, payload));
    }
    edits.push(create(
        OTHER,
        id_at(&mut rng, base + 2_000_000),
        payload(&mut rng, 1, "fresh"),
    ));
    bench.write(edits);

    for q in [
        "zebra", "ärger", "omega", "fresh", "ancient", "edited", "nomatchx", r#""n":1"#,
    ] {
        let expected = brute_force(store, q);
        for (limit, budget) in [
            (1, 1),
            (3, 2),
            (10, 7),
            (4, 40),
            (30, 1000),
            (10, MAX_SCANNED),
        ] {
            let (ids, _) = search_all(store, index.as_ref(), q, limit, budget);
            assert_eq!(
                ids, expected,
                "seed {seed}: q={q:?} limit {limit} budget {budget}"
            );
        }
    }
    // The bound at work: with a budget of 5, a query with no match answers at once with
    // an empty page and a cursor below the part of the tail it checked.
    let (ids, first) = search_all(store, index.as_ref(), "nomatchx", 10, 5);
    assert!(ids.is_empty());
    assert_eq!(first["data"].as_array().map(Vec::len), Some(0));
    assert!(first["pagination"]["next_cursor"].is_string(), "{first}");

    bench.finish();
}

/// Segments are searched newest first and left out once a page is full. Three commits make
/// three segments whose times overlap: the first holds old records and the newest one, the
/// second records newer than the first's old ones, the third only older ones. Every page size
/// still gets the newest matches of them all, and what the query covered holds every match
/// in it.
#[test]
fn a_page_takes_the_newest_matches_of_segments_whose_times_overlap() {
    let (seed, mut rng) = seeded();
    let bench = Bench::new();
    let store: &dyn Store = bench.store.as_ref();
    let no_stop = StopPolicy {
        share: 1.0,
        min_records: u64::MAX,
    };
    let (index, notifier, indexer) = bench.start_index(no_stop);
    let base = 1_700_000_000_000_000u128;
    let commits: [Vec<u128>; 3] = [
        (10..20).chain([100]).collect(),
        (50..60).collect(),
        (1..6).collect(),
    ];
    let mut created = Vec::new();
    for times in &commits {
        let ids: Vec<u128> = times
            .iter()
            .map(|&t| id_at(&mut rng, base + t * 1000))
            .collect();
        bench.write(
            ids.iter()
                .enumerate()
                .map(|(n, &id)| create(P, id, format!(r#"{{"n":{n},"text":"zebra"}}"#)))
                .collect(),
        );
        wait_indexed(store, index.as_ref(), &notifier);
        created.extend(ids);
    }
    let segments = tantivy::Index::open_in_dir(bench.index_dir())
        .and_then(|index| index.reader())
        .map(|reader| reader.searcher().segment_readers().len())
        .expect("segments");
    assert!(segments >= 3, "seed {seed}: {segments} segments");
    created.sort_unstable_by(|a, b| b.cmp(a));
    let snapshot = index.snapshot();
    let view = snapshot.view.as_ref().expect("an index view");
    for want in [1, 3, 11, 12, 30] {
        let hits = view.query(P, "zebra", 0, u128::MAX, want).expect("query");
        let covered: Vec<u128> = created
            .iter()
            .copied()
            .filter(|&id| id >= hits.covered_down_to)
            .collect();
        assert_eq!(hits.ids, covered, "seed {seed}: want {want}");
        assert_eq!(
            hits.ids[..],
            created[..hits.ids.len()],
            "seed {seed}: want {want}"
        );
        assert!(
            hits.ids.len() >= want.min(created.len()),
            "seed {seed}: want {want}"
        );
    }
    notifier.shutdown();
    indexer.join();
    bench.finish();
}

/// Waits until the index covers every change logged so far.
fn wait_indexed(store: &dyn Store, index: &dyn SearchIndex, notifier: &super::Notifier) {
    let last = crate::store::change_log(store)
        .expect("change log")
        .change_log_bounds()
        .expect("bounds")
        .last;
    notifier.changed();
    let deadline = Instant::now() + Duration::from_secs(60);
    while index.snapshot().view.is_none() || index.snapshot().position < last {
        assert!(Instant::now() < deadline, "the index did not catch up");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Stop trigrams: with a policy that makes the JSON keys and the common words stop trigrams
/// after a few records, searches over records indexed before, during and after the set grew
/// (some replaced or deleted since) give exactly what a scan of the store gives, for random
/// substrings of the payloads (many made only of stop trigrams) and for words in none; the set
/// is committed with the index, survives a restart, and later records leave it out.
#[test]
fn stop_trigrams_keep_searches_exact() {
    let (seed, mut rng) = seeded();
    let bench = Bench::new();
    let store: &dyn Store = bench.store.as_ref();
    let policy = StopPolicy {
        share: 0.2,
        min_records: 20,
    };
    let (index, notifier, indexer) = bench.start_index(policy);

    let base = 1_700_000_000_000_000u128;
    let mut ids = Vec::new();
    for batch in 0..12u128 {
        let fresh: Vec<u128> = (0..30)
            .map(|i| id_at(&mut rng, base + batch * 100_000 + i * 1000))
            .collect();
        let mut writes: Vec<_> = fresh
            .iter()
            .enumerate()
            .map(|(n, &id)| create(P, id, payload(&mut rng, n * 37 + batch as usize, "tag")))
            .collect();
        // Edits of earlier records, indexed under a smaller stop set.
        for &id in ids.iter().skip(batch as usize).step_by(11) {
            let replaced = rng.random_bool(0.5).then(|| payload(&mut rng, 5, "edited"));
            writes.push(edit(P, id, replaced));
        }
        bench.write(writes);
        wait_indexed(store, index.as_ref(), &notifier);
        ids.extend(fresh);
    }

    let check = |index: &dyn SearchIndex, rng: &mut StdRng| {
        let mut texts = Vec::new();
        store
            .read()
            .expect("read")
            .visit_newest_first(P, 0, u128::MAX, &mut |_, _, payload| {
                texts.push(fold_case(&String::from_utf8_lossy(payload)));
                ControlFlow::Continue(())
            })
            .expect("records");
        let mut queries: Vec<String> = ["zebra", "ärger", "\"text\"", "edited", "nomatchx", "d ga"]
            .into_iter()
            .map(str::to_string)
            .collect();
        for _ in 0..40 {
            let text: Vec<char> = texts[rng.random_range(0..texts.len())].chars().collect();
            let len = rng.random_range(3..12).min(text.len());
            let from = rng.random_range(0..=text.len() - len);
            queries.push(text[from..from + len].iter().collect());
        }
        for q in &queries {
            let expected = brute_force(store, q);
            for (limit, budget) in [(3, 7), (10, MAX_SCANNED)] {
                let (found, _) = search_all(store, index, q, limit, budget);
                assert_eq!(
                    found, expected,
                    "seed {seed}: q={q:?} limit {limit} budget {budget}"
                );
            }
        }
    };
    check(index.as_ref(), &mut rng);

    notifier.shutdown();
    indexer.join();
    // The committed set: the keys' trigrams are in it, and the newest records left them out.
    let (tantivy_index, state, metas_payload) = bench.committed_index();
    assert!(
        state.stop.iter().any(|g| g == "tex"),
        "seed {seed}: {metas_payload}"
    );
    assert!(
        !state.stop.iter().any(|g| g == "nom"),
        "seed {seed}: {metas_payload}"
    );
    let searcher = tantivy_index.reader().expect("reader").searcher();
    let (_, fields) = super::index::schema();
    let with_key = searcher
        .doc_freq(&tantivy::Term::from_field_text(fields.text, "tex"))
        .expect("doc freq");
    assert!(
        with_key < searcher.num_docs() / 2,
        "seed {seed}: {with_key} of {} records indexed \"tex\"",
        searcher.num_docs()
    );

    // After a restart the committed set is used as it was, and replacing or deleting records
    // indexed before it removes their old documents.
    let (index, notifier, indexer) = bench.start_index(policy);
    wait_indexed(store, index.as_ref(), &notifier);
    let mut existing = Vec::new();
    store
        .read()
        .expect("read")
        .visit_newest_first(P, 0, u128::MAX, &mut |id, _, _| {
            existing.push(id);
            ControlFlow::Continue(())
        })
        .expect("records");
    let edits: Vec<_> = existing
        .iter()
        .step_by(7)
        .map(|&id| {
            edit(
                P,
                id,
                rng.random_bool(0.5).then(|| payload(&mut rng, 9, "later")),
            )
        })
        .collect();
    bench.write(edits);
    wait_indexed(store, index.as_ref(), &notifier);
    check(index.as_ref(), &mut rng);
    notifier.shutdown();
    indexer.join();
    let mut live = 0;
    store
        .read()
        .expect("read")
        .visit_newest_first(P, 0, u128::MAX, &mut |_, _, _| {
            live += 1;
            ControlFlow::Continue(())
        })
        .expect("records");
    let searcher = tantivy_index.reader().expect("reader").searcher();
    assert_eq!(
        searcher.num_docs(),
        live,
        "seed {seed}: one document per record"
    );

    // A rebuild from the store takes up the stop set along the way, and stays exact.
    drop((searcher, tantivy_index));
    std::fs::remove_dir_all(bench.index_dir()).expect("remove the index");
    let (index, notifier, indexer) = bench.start_index(policy);
    wait_indexed(store, index.as_ref(), &notifier);
    check(index.as_ref(), &mut rng);
    notifier.shutdown();
    indexer.join();
    let (_, state, metas_payload) = bench.committed_index();
    assert!(
        state.stop.iter().any(|g| g == "tex"),
        "seed {seed}: {metas_payload}"
    );
    bench.finish();
}
