//! Expunges over the real index and store: what is left of deleted records in the index's
//! files before and after, searches meanwhile, and how long one takes on a large index.

use std::time::{Duration, Instant};

use rand::Rng;
use rand::rngs::StdRng;
use tantivy::index::SegmentId;
use tantivy::schema::IndexRecordOption;
use tantivy::{DocSet, TERMINATED};

use super::{
    Bench, P, WORDS, brute_force, create, edit, id_at, payload, search_all, seeded, wait_indexed,
};
use crate::core::ids::RecordId;
use crate::domain::search::tokenizer::{StopSet, indexed_trigrams};
use crate::domain::search::{MAX_SCANNED, SearchIndex};
use crate::store::Store;
use crate::store::records::{NewRecord, RecordWrite};
use crate::workers::search_index::index::schema;
use crate::workers::search_index::{IndexerSettings, StopPolicy};

/// A word of the marked record whose trigrams are in no other record's text.
const MARKER: &str = "qjxvwk";

/// The trigram of `word` in the fewest documents of the committed index, and how many.
fn rarest_trigram(searcher: &tantivy::Searcher, word: &str) -> (tantivy::Term, u64) {
    let (_, fields) = schema();
    indexed_trigrams(word, &StopSet::default())
        .into_iter()
        .map(|gram| {
            let term = tantivy::Term::from_field_text(fields.text, gram);
            let docs = searcher.doc_freq(&term).expect("doc freq");
            (term, docs)
        })
        .min_by_key(|(_, docs)| *docs)
        .expect("a word of three characters or more")
}

/// The segments of `searcher` whose term dictionary holds `term`, each with its postings of
/// it: for every document listed, whether it is deleted.
fn postings_of(searcher: &tantivy::Searcher, term: &tantivy::Term) -> Vec<(SegmentId, Vec<bool>)> {
    let (_, fields) = schema();
    let mut held = Vec::new();
    for segment in searcher.segment_readers() {
        let inverted = segment.inverted_index(fields.text).expect("inverted index");
        if inverted.get_term_info(term).expect("term info").is_none() {
            continue;
        }
        let mut postings = inverted
            .read_postings(term, IndexRecordOption::Basic)
            .expect("postings")
            .expect("the postings of a term in the dictionary");
        let mut deleted = Vec::new();
        let mut doc = postings.doc();
        while doc != TERMINATED {
            deleted.push(segment.is_deleted(doc));
            doc = postings.advance();
        }
        held.push((segment.segment_id(), deleted));
    }
    held
}

/// The names of the files in `dir` of the segments `ids`.
fn files_of_segments(dir: &std::path::Path, ids: &[SegmentId]) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("index folder")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| ids.iter().any(|id| name.starts_with(&id.uuid_string())))
        .collect()
}

/// An erasure's expunge: a deleted record's trigrams stay in its segment (postings and term
/// dictionary) until the expunge, which rewrites every segment with deleted documents (one
/// alone too), removes the old segments' files, and leaves searches exact, during it and
/// after; an expunge asked right after a delete waits until the indexer has applied it.
#[test]
fn an_expunge_removes_deleted_records_from_the_index_files() {
    let (seed, mut rng) = seeded();
    let bench = Bench::new();
    let store: &dyn Store = bench.store.as_ref();
    let (index, notifier, indexer) = bench.start_index(StopPolicy::NONE);

    // Four commits, so four segments; the marked record is in the first. All of the third's
    // records are deleted below (tantivy drops a segment with no live document itself).
    let base = 1_700_000_000_000_000u128;
    let mut batches: Vec<Vec<u128>> = Vec::new();
    for (batch, records) in [40u128, 40, 10, 40].into_iter().enumerate() {
        let ids: Vec<u128> = (0..records)
            .map(|i| id_at(&mut rng, base + batch as u128 * 1_000_000 + i * 1000))
            .collect();
        let writes = ids
            .iter()
            .enumerate()
            .map(|(n, &id)| match (batch, n) {
                (0, 7) => create(
                    P,
                    id,
                    format!(r#"{{"n":7,"text":"zebra {MARKER}","tag":"kept"}}"#),
                ),
                _ => create(P, id, payload(&mut rng, n, "kept")),
            })
            .collect();
        bench.write(writes);
        wait_indexed(store, index.as_ref(), &notifier);
        batches.push(ids);
    }
    let marked = batches[0][7];
    let tantivy_index = tantivy::Index::open_in_dir(bench.index_dir()).expect("open");
    let reader = tantivy_index
        .reader_builder()
        .reload_policy(tantivy::ReloadPolicy::Manual)
        .try_into()
        .expect("reader");
    let (marker_term, docs) = rarest_trigram(&reader.searcher(), MARKER);
    assert_eq!(docs, 1, "seed {seed}: the marker is in one record");

    let mut deleted = vec![marked, batches[0][3], batches[0][30], batches[1][12]];
    deleted.extend(&batches[2]);
    bench.write(deleted.iter().map(|&id| edit(P, id, None)).collect());
    wait_indexed(store, index.as_ref(), &notifier);

    // Deleted, yet still in the files: the marked record's segment holds the term, and its
    // postings the (deleted) document.
    reader.reload().expect("reload");
    let searcher = reader.searcher();
    let held = postings_of(&searcher, &marker_term);
    assert_eq!(
        held.iter()
            .map(|(_, docs)| docs.clone())
            .collect::<Vec<_>>(),
        vec![vec![true]],
        "seed {seed}: the marker's postings before expunging"
    );
    let holding: Vec<SegmentId> = held.iter().map(|(id, _)| *id).collect();
    let with_deletes: Vec<SegmentId> = searcher
        .segment_readers()
        .iter()
        .filter(|segment| segment.num_deleted_docs() > 0)
        .map(|segment| segment.segment_id())
        .collect();
    assert!(
        holding.iter().all(|id| with_deletes.contains(id)),
        "seed {seed}"
    );
    let deleted_docs: u64 = searcher
        .segment_readers()
        .iter()
        .map(|segment| u64::from(segment.num_deleted_docs()))
        .sum();
    assert!(deleted_docs > 0, "seed {seed}");
    assert!(!files_of_segments(&bench.index_dir(), &with_deletes).is_empty());
    drop(searcher);

    // Searches during the expunge give what the store holds.
    let queries = ["zebra", MARKER, "ärger", "kept", "a and g"];
    let expected: Vec<Vec<String>> = queries.iter().map(|q| brute_force(store, q)).collect();
    let exact = |index: &dyn SearchIndex| {
        for (q, expected) in queries.iter().zip(&expected) {
            let (found, _) = search_all(store, index, q, 7, MAX_SCANNED);
            assert_eq!(&found, expected, "seed {seed}: q={q:?}");
        }
    };
    let expunged = std::sync::atomic::AtomicBool::new(false);
    let report = std::thread::scope(|scope| {
        let searching = scope.spawn(|| {
            loop {
                let done = expunged.load(std::sync::atomic::Ordering::SeqCst);
                exact(index.as_ref());
                if done {
                    break;
                }
            }
        });
        let report = index.expunge_deleted(Duration::from_secs(60));
        expunged.store(true, std::sync::atomic::Ordering::SeqCst);
        searching.join().expect("searches");
        report.expect("expunge")
    });
    assert_eq!(
        report.segments_merged,
        with_deletes.len(),
        "seed {seed}: {report:?}"
    );
    assert_eq!(
        report.docs_expunged, deleted_docs,
        "seed {seed}: {report:?}"
    );

    reader.reload().expect("reload");
    let searcher = reader.searcher();
    assert_eq!(
        postings_of(&searcher, &marker_term),
        Vec::new(),
        "seed {seed}: a segment still holds the marker's term"
    );
    assert_eq!(searcher.doc_freq(&marker_term).expect("doc freq"), 0);
    for segment in searcher.segment_readers() {
        assert_eq!(segment.num_deleted_docs(), 0, "seed {seed}");
        assert_eq!(segment.max_doc(), segment.num_docs(), "seed {seed}");
    }
    let live: u64 = batches.iter().map(|b| b.len() as u64).sum::<u64>() - deleted.len() as u64;
    assert_eq!(searcher.num_docs(), live, "seed {seed}");
    assert_eq!(
        files_of_segments(&bench.index_dir(), &with_deletes),
        Vec::<String>::new(),
        "seed {seed}: files of the rewritten segments are left"
    );
    exact(index.as_ref());
    drop(searcher);

    // Asked right after a delete, an expunge covers it; the index takes writes after.
    let second = batches[3][5];
    bench.write(vec![
        edit(
            P,
            second,
            Some(format!(r#"{{"n":5,"text":"{MARKER} again","tag":"kept"}}"#)),
        ),
        create(
            P,
            id_at(&mut rng, base + 9_000_000),
            payload(&mut rng, 1, "later"),
        ),
    ]);
    wait_indexed(store, index.as_ref(), &notifier);
    bench.write(vec![edit(P, second, None)]);
    let report = index
        .expunge_deleted(Duration::from_secs(60))
        .expect("expunge");
    assert!(report.docs_expunged >= 2, "seed {seed}: {report:?}");
    reader.reload().expect("reload");
    let searcher = reader.searcher();
    assert_eq!(
        postings_of(&searcher, &marker_term),
        Vec::new(),
        "seed {seed}: the second marked record's term is left"
    );
    assert_eq!(
        search_all(store, index.as_ref(), MARKER, 10, MAX_SCANNED).0,
        Vec::<String>::new()
    );
    assert_eq!(
        search_all(store, index.as_ref(), "later", 10, MAX_SCANNED).0,
        brute_force(store, "later")
    );
    // Nothing deleted since: nothing to rewrite.
    let report = index
        .expunge_deleted(Duration::from_secs(60))
        .expect("expunge");
    assert_eq!((report.segments_merged, report.docs_expunged), (0, 0));

    notifier.shutdown();
    indexer.join();
    bench.finish();
}

/// A measurement, not a check: how long an expunge takes after deleting 1 % of an index of
/// small records (`EXPUNGE_RECORDS` of them, 1,000,000 unless set), spread over a year and
/// deleted at random in a hundred commits, with the server's default index settings. Run in
/// release: `cargo test --release --lib expunge_after_deleting -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: minutes to build its index"]
fn expunge_after_deleting_one_percent_of_many_records() {
    let records: u128 = std::env::var("EXPUNGE_RECORDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let (seed, mut rng) = seeded();
    let bench = Bench::new();
    let store: &dyn Store = bench.store.as_ref();
    let config = crate::core::config::SearchConfig::default();
    let settings = IndexerSettings {
        nice: 0,
        memory_bytes: config.index_memory_mb * 1_000_000,
        stop: StopPolicy {
            share: config.stop_share,
            min_records: config.stop_min_records,
        },
    };
    let (index, notifier, indexer) =
        crate::workers::search_index::start(bench.dir.path(), bench.store.clone(), settings)
            .expect("index");

    let started = Instant::now();
    let base = 1_700_000_000_000_000u128;
    let spacing = 365 * 86_400 * 1_000_000 / records;
    let mut ids = Vec::new();
    let letters = |rng: &mut StdRng, n: usize| -> String {
        (0..n)
            .map(|_| rng.random_range(b'a'..=b'z') as char)
            .collect()
    };
    for chunk in 0..records.div_ceil(10_000) {
        let writes = (0..10)
            .map(|part| {
                let records = (0..1_000)
                    .map(|i| {
                        let n = chunk * 10_000 + part * 1_000 + i;
                        let id = id_at(&mut rng, base + n * spacing);
                        ids.push(id);
                        let payload = format!(
                            r#"{{"n":{n},"name":"{} {}","email":"{}@example.com","text":"{}"}}"#,
                            letters(&mut rng, 6),
                            letters(&mut rng, 8),
                            letters(&mut rng, 7),
                            WORDS[rng.random_range(0..WORDS.len())],
                        );
                        NewRecord {
                            id: RecordId(id),
                            payload: payload.into_bytes(),
                        }
                    })
                    .collect();
                RecordWrite::Create {
                    partition: P,
                    records,
                    idempotency: None,
                }
            })
            .collect();
        bench.write(writes);
    }
    wait_indexed(store, index.as_ref(), &notifier);
    let built = started.elapsed();

    let deleted = ids.len() / 100;
    for _ in 0..deleted {
        let last = ids.len() - 1;
        ids.swap(rng.random_range(0..=last), last);
    }
    let doomed = ids.split_off(ids.len() - deleted);
    for part in doomed.chunks(deleted.div_ceil(100)) {
        bench.write(part.iter().map(|&id| edit(P, id, None)).collect());
        wait_indexed(store, index.as_ref(), &notifier);
    }
    // Let tantivy's own merges end: the index as a server leaves it when idle.
    let segments = || {
        tantivy::Index::open_in_dir(bench.index_dir())
            .expect("open")
            .searchable_segment_metas()
            .expect("metas")
    };
    let mut stable = (segments().len(), Instant::now());
    while stable.1.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(500));
        let now = segments().len();
        if now != stable.0 {
            stable = (now, Instant::now());
        }
    }
    let before = segments();
    let before_deleted: u64 = before.iter().map(|s| u64::from(s.num_deleted_docs())).sum();
    let report = index
        .expunge_deleted(Duration::from_secs(3600))
        .expect("expunge");
    let after = segments();
    println!(
        "seed {seed}: {} records indexed in {:.1} s; {deleted} deleted; segments before: {} \
         ({} with deleted documents, {} deleted documents); expunge: {report:?}; segments \
         after: {} ({} documents)",
        records,
        built.as_secs_f64(),
        before.len(),
        before.iter().filter(|s| s.num_deleted_docs() > 0).count(),
        before_deleted,
        after.len(),
        after.iter().map(|s| u64::from(s.num_docs())).sum::<u64>(),
    );
    assert_eq!(report.docs_expunged, before_deleted, "seed {seed}");
    notifier.shutdown();
    indexer.join();
    bench.finish();
}
