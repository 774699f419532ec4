//! The scrub's tests: real store files, deleted records looked for as bytes.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::*;
use crate::core::clock::Timestamp;
use crate::core::ids::RecordId;
use crate::store::records::{NewRecord, RecordWrite, RecordsStore, plain_batch};
use crate::store::{Partition, Store};

/// What every deleted record holds, and no kept one.
const MARKER: &[u8] = b"ERASE-ME-";
const AT: i64 = 1_795_000_000_000_000;

const PARTITION: Partition = Partition::from_raw(6);

fn id(n: u64) -> RecordId {
    RecordId(((AT as u128 + u128::from(n)) << 64) | 1)
}

/// A ~700-byte record; `marked` ones are the ones deleted.
fn payload(n: u64, marked: bool, version: u32) -> Vec<u8> {
    let who = match marked {
        true => format!("ERASE-ME-{n}"),
        false => format!("keep-{n}"),
    };
    format!(
        r#"{{"n":{n},"v":{version},"who":"{who}","pad":"{}"}}"#,
        "p".repeat(600)
    )
    .into_bytes()
}

/// One record in ten: never two in a leaf, so each delete copies its leaf afresh. (redb
/// removes a second entry from a leaf copied in the same transaction in place, and the
/// bytes that frees stay in that live page, where no scrub of free pages reaches.)
fn marked(n: u64) -> bool {
    n % 10 == 0
}

fn apply(store: &RedbStore, writes: Vec<RecordWrite>) {
    for batch in writes.chunks(500) {
        store.apply_batch(&plain_batch(batch)).unwrap();
    }
}

/// `count` records (before the store has a payload dictionary, so stored plain), each
/// written twice so that older copies of their pages are free too.
fn store_with_records(path: &Path, count: u64) -> RedbStore {
    store_with_records_marked(path, count, marked)
}

/// [`store_with_records`], the records `marked` holds for carrying the marker.
fn store_with_records_marked(path: &Path, count: u64, marked: fn(u64) -> bool) -> RedbStore {
    let store = RedbStore::open(path, 4 << 20).unwrap();
    let create = |n| RecordWrite::Create {
        partition: PARTITION,
        records: vec![NewRecord {
            id: id(n),
            payload: payload(n, marked(n), 1),
        }],
        idempotency: None,
    };
    apply(&store, (0..count).map(create).collect());
    let replace = |n| RecordWrite::Replace {
        partition: PARTITION,
        id: id(n),
        updated_at: Timestamp(AT + 10_000_000),
        payload: payload(n, marked(n), 2),
    };
    apply(&store, (0..count).map(replace).collect());
    store
}

fn delete(store: &RedbStore, records: impl Iterator<Item = u64>) {
    let delete = |n| RecordWrite::Delete {
        partition: PARTITION,
        id: id(n),
        at: Timestamp(AT + 20_000_000),
    };
    apply(store, records.map(delete).collect());
}

/// [`store_with_records`], the marked ones then deleted.
fn store_with_deleted(path: &Path, count: u64) -> RedbStore {
    let store = store_with_records(path, count);
    delete(&store, (0..count).filter(|n| marked(*n)));
    store
}

/// How often the marker is in the file, read as bytes.
fn markers_in(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap();
    bytes
        .windows(MARKER.len())
        .filter(|window| *window == MARKER)
        .count()
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// Every record of the partition, read through the store.
fn records(store: &RedbStore) -> Vec<Vec<u8>> {
    crate::store::redb::payload::tests::read_all(store, PARTITION)
}

fn kept(count: u64) -> Vec<Vec<u8>> {
    (0..count)
        .filter(|n| !marked(*n))
        .map(|n| payload(n, false, 2))
        .collect()
}

fn filler_table_exists(store: &RedbStore) -> bool {
    !matches!(
        store.db.begin_read().unwrap().open_table(FILLER),
        Err(TableError::TableDoesNotExist(_))
    )
}

#[test]
fn a_scrub_leaves_no_byte_of_deleted_records_in_the_file_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("intake.redb");
    let store = store_with_deleted(&path, 3_000);
    assert!(
        markers_in(&path) > 0,
        "the deleted records are still in the file"
    );
    let before = file_len(&path);

    let report = Store::scrub_free_space(&store).unwrap().unwrap();

    assert!(report.complete(), "{report:?}");
    assert!(report.bytes_overwritten > 0 && report.transactions > 0);
    assert_eq!(markers_in(&path), 0);
    assert!(file_len(&path) <= before, "{} > {before}", file_len(&path));
    assert!(records(&store) == kept(3_000));
    assert!(!filler_table_exists(&store));
}

#[test]
fn writes_go_on_during_a_scrub_and_find_room() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("intake.redb");
    let count = 20_000;
    let store = store_with_deleted(&path, count);
    assert!(markers_in(&path) > 0);
    let before = file_len(&path);
    let stop = AtomicBool::new(false);
    // The writer stops when the scrub ends or after this many records, whichever is first:
    // unbounded, a scrub slowed down by a busy machine let it write more than the file had
    // room for, and the file grew for the writes, not for the scrub. On an idle machine it
    // writes about 12,000 during the scrub.
    const MOST: u64 = 6_000;

    let (report, written) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut next = 1_000_000;
            while !stop.load(Ordering::SeqCst) && next < 1_000_000 + MOST {
                let writes: Vec<RecordWrite> = (next..next + 20)
                    .map(|n| RecordWrite::Create {
                        partition: PARTITION,
                        records: vec![NewRecord {
                            id: id(n),
                            payload: payload(n, false, 2),
                        }],
                        idempotency: None,
                    })
                    .collect();
                store.apply_batch(&plain_batch(&writes)).unwrap();
                next += 20;
            }
            next - 1_000_000
        });
        let report = Store::scrub_free_space(&store).unwrap().unwrap();
        stop.store(true, Ordering::SeqCst);
        (report, writer.join().unwrap())
    });

    assert!(report.complete(), "{report:?}");
    assert!(written > 0);
    assert_eq!(markers_in(&path), 0);
    assert!(file_len(&path) <= before, "{} > {before}", file_len(&path));
    let mut expected = kept(count);
    expected.extend((1_000_000..1_000_000 + written).map(|n| payload(n, false, 2)));
    assert!(records(&store) == expected);
}

#[test]
fn an_open_export_defers_the_scrub_and_a_snapshot_older_than_a_delete_keeps_its_pages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("intake.redb");
    let count = 3_000;
    let store = store_with_records(&path, count);
    delete(&store, (0..count).filter(|n| marked(*n) && n % 100 != 0));
    let before = file_len(&path);

    // A long snapshot (an export's) is open: the scrub does not begin.
    let export = Store::long_read(&store).unwrap();
    let report = Store::scrub_free_space(&store).unwrap().unwrap();
    assert!(
        report.held_by_snapshot && report.transactions == 0,
        "{report:?}"
    );
    drop(export);

    // A snapshot from before a delete still reads the deleted records, so the pages that
    // hold them are not free, nor is any the scrub frees: the end sees its reserve kept.
    let snapshot = store.read().unwrap();
    delete(&store, (0..count).step_by(100));
    let report = Store::scrub_free_space(&store).unwrap().unwrap();
    assert!(report.held_by_snapshot, "{report:?}");
    assert!(file_len(&path) <= before, "{} > {before}", file_len(&path));
    let still = snapshot.open_table(super::super::RECORDS).unwrap();
    let value = still.get((PARTITION.raw(), id(0).0)).unwrap().unwrap();
    assert!(value.value().windows(MARKER.len()).any(|w| w == MARKER));
    drop((value, still, snapshot));

    let report = Store::scrub_free_space(&store).unwrap().unwrap();
    assert!(report.complete(), "{report:?}");
    assert_eq!(markers_in(&path), 0);
    assert!(file_len(&path) <= before, "{} > {before}", file_len(&path));
    assert!(records(&store) == kept(count));
    assert!(!filler_table_exists(&store));
}

#[test]
fn too_few_free_pages_for_a_reserve_are_all_taken_by_the_last_commits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("intake.redb");
    let store = store_with_records(&path, 3_000);
    let mut scrub = Scrub::new(&store).unwrap();
    // Every free page but a few taken, as a file with little churn has; then a few
    // deletes free the pages that held them.
    let free = scrub.probe(0, u64::MAX).unwrap().unwrap();
    assert!(scrub.commit(free - ROOM - 4).unwrap());
    let deleted = [1_000, 1_500, 2_000, 2_500];
    delete(&store, deleted.into_iter());
    let in_file = |path: &Path| {
        let bytes = std::fs::read(path).unwrap();
        deleted
            .iter()
            .map(|n| format!("\"who\":\"ERASE-ME-{n}\""))
            .filter(|who| bytes.windows(who.len()).any(|w| w == who.as_bytes()))
            .count()
    };
    assert!(in_file(&path) > 0);
    let before = file_len(&path);

    assert!(matches!(scrub.finish().unwrap(), End::NoReserve));
    assert_eq!(file_len(&path), before);
    assert!(matches!(scrub.finish_small().unwrap(), End::Done));
    assert!(scrub.clear().unwrap());

    assert_eq!(in_file(&path), 0);
    let expected: Vec<Vec<u8>> = (0..3_000)
        .filter(|n| !deleted.contains(n))
        .map(|n| payload(n, marked(n), 2))
        .collect();
    assert!(records(&store) == expected);
}

#[test]
fn an_interrupted_scrub_s_filler_is_deleted_by_the_next_and_left_out_of_a_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("intake.redb");
    let store = store_with_deleted(&path, 1_000);
    let interrupted = |store: &RedbStore| {
        let mut scrub = Scrub::new(store).unwrap();
        assert!(scrub.commit(100).unwrap());
        assert!(filler_table_exists(store));
    };
    interrupted(&store);
    assert!(Store::scrub_free_space(&store).unwrap().unwrap().complete());
    assert!(!filler_table_exists(&store));
    assert_eq!(markers_in(&path), 0);

    interrupted(&store);
    drop(store);
    crate::store::redb::compact_file(&path).unwrap();
    let store = RedbStore::open(&path, 4 << 20).unwrap();
    assert!(!filler_table_exists(&store));
    // Compacted, the file has next to no free page: the last commits take what there is.
    assert!(Store::scrub_free_space(&store).unwrap().unwrap().complete());
    assert!(!filler_table_exists(&store));
    // The next delete grows it (redb doubles a full file), and the scrub has room again.
    delete(&store, (0..1_000).filter(|n| n % 10 == 5));
    let before = file_len(&path);
    assert!(Store::scrub_free_space(&store).unwrap().unwrap().complete());
    assert!(file_len(&path) <= before);
    let expected: Vec<Vec<u8>> = (0..1_000)
        .filter(|n| !marked(*n) && n % 10 != 5)
        .map(|n| payload(n, false, 2))
        .collect();
    assert!(records(&store) == expected);
}

/// An erasure's step removes records side by side in one transaction, so redb changes their
/// leaves in place after the first copy, which keeps bytes of removed values in pages still
/// in use: the scrub builds those leaves anew first (`erased_leaves`).
#[test]
fn an_erasure_of_records_side_by_side_leaves_nothing_in_pages_still_in_use() {
    // Runs of two in five: a leaf (five or six records) often ends with a run, and one
    // removed in place after the other leaves its value past the leaf's new end.
    fn erased(n: u64) -> bool {
        n % 5 >= 3
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("intake.redb");
    let count = 2_000;
    let store = store_with_records_marked(&path, count, erased);
    crate::store::write(&store, |tx| {
        tx.put_erasure(&crate::store::conformance::erasures::erasure(1, PARTITION))
    })
    .unwrap();
    // As the erasure job does: newest first, a hundred a step.
    let newest_first: Vec<RecordId> = (0..count).rev().filter(|n| erased(*n)).map(id).collect();
    for step in newest_first.chunks(100) {
        let erase = RecordWrite::Erase {
            partition: PARTITION,
            ids: step.to_vec(),
            at: Timestamp(AT + 20_000_000),
            notify: false,
            erasure: 1,
            resume_below: step[step.len() - 1].0,
        };
        apply(&store, vec![erase]);
    }
    assert!(markers_in(&path) > 0);

    let report = Store::scrub_free_space(&store).unwrap().unwrap();

    assert!(report.complete(), "{report:?}");
    assert_eq!(markers_in(&path), 0);
    let kept: Vec<Vec<u8>> = (0..count)
        .filter(|n| !erased(*n))
        .map(|n| payload(n, false, 2))
        .collect();
    assert!(records(&store) == kept);
    assert!(store.table_is_empty(super::super::ERASED_KEYS).unwrap());
}

/// Records of every size (some over several pages), a quarter of them deleted over a few
/// rounds, the file scrubbed twice on the way: each scrub leaves none of the deleted
/// bytes, whatever the free pages look like.
#[test]
fn records_of_every_size_deleted_over_rounds_leave_nothing_behind() {
    for seed in 1..=3u64 {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut random = move |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("intake.redb");
        let store = RedbStore::open(&path, 4 << 20).unwrap();
        let mut live = std::collections::BTreeMap::new();
        let mut doomed = Vec::new();
        let mut n = 0;
        for round in 0..4 {
            let mut writes = Vec::new();
            for _ in 0..200 + random(1_500) {
                let size = match random(10) {
                    0 => 4_000 + random(20_000),
                    1..=3 => 20 + random(200),
                    _ => 200 + random(1_500),
                };
                let who = match random(4) {
                    0 => "ERASE-ME-",
                    _ => "keep-",
                };
                let payload = format!("{who}{n}-{}", "q".repeat(size as usize)).into_bytes();
                if who == "ERASE-ME-" {
                    doomed.push(n);
                }
                writes.push(RecordWrite::Create {
                    partition: PARTITION,
                    records: vec![NewRecord {
                        id: id(n),
                        payload: payload.clone(),
                    }],
                    idempotency: None,
                });
                live.insert(n, payload);
                n += 1;
            }
            apply(&store, writes);
            // One delete a transaction (see `marked`), half of them now, the rest before
            // the scrub.
            let (now, later): (Vec<u64>, Vec<u64>) = doomed
                .drain(..)
                .partition(|_| round % 2 == 1 || random(2) == 0);
            doomed = later;
            for record in now {
                delete(&store, std::iter::once(record));
                live.remove(&record);
            }
            if round % 2 == 1 {
                let before = file_len(&path);
                let report = Store::scrub_free_space(&store).unwrap().unwrap();
                assert!(report.complete(), "seed {seed}, round {round}: {report:?}");
                assert_eq!(markers_in(&path), 0, "seed {seed}, round {round}");
                assert!(file_len(&path) <= before);
            }
        }
        assert!(records(&store) == live.into_values().collect::<Vec<_>>());
    }
}

/// The figures for the documentation: a store with about 100 MB of free pages (200,000
/// records of 400 bytes written, then deleted), scrubbed while a writer adds a record at a
/// time; how long it took, the file's size before and after, and the longest a write
/// waited.
#[test]
#[ignore = "a measurement: cargo test --release --lib store::redb::scrub::tests::measure -- --ignored --nocapture"]
fn measure_a_scrub_of_100_mb_of_free_pages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("intake.redb");
    let store = RedbStore::open(&path, 256 << 20).unwrap();
    let count = 200_000;
    let create = |n, marked| RecordWrite::Create {
        partition: PARTITION,
        records: vec![NewRecord {
            id: id(n),
            payload: payload(n, marked, 1)[..400].to_vec(),
        }],
        idempotency: None,
    };
    let all: Vec<u64> = (0..count).collect();
    for batch in all.chunks(2_000) {
        apply(&store, batch.iter().map(|n| create(*n, true)).collect());
    }
    for batch in all.chunks(2_000) {
        delete(&store, batch.iter().copied());
    }
    let before = file_len(&path);
    let stop = AtomicBool::new(false);
    let started = std::time::Instant::now();
    let (report, waits) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut waits = Vec::new();
            let mut n = count;
            while !stop.load(Ordering::SeqCst) {
                let asked = std::time::Instant::now();
                apply(&store, vec![create(n, false)]);
                waits.push(asked.elapsed());
                n += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            waits
        });
        let report = Store::scrub_free_space(&store).unwrap().unwrap();
        stop.store(true, Ordering::SeqCst);
        (report, writer.join().unwrap())
    });
    let took = started.elapsed();
    let mut sorted = waits.clone();
    sorted.sort();
    println!(
        "scrub: {took:?}, {report:?}; file {before} -> {} bytes; {} writes meanwhile, \
         median {:?}, longest {:?}",
        file_len(&path),
        waits.len(),
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
    );
    assert!(report.complete());
    assert_eq!(markers_in(&path), 0);
}
