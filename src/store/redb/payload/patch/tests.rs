use super::super::tests::{
    AT, MARKER, MarkerSearch, Written, create_records, deleted_partition, dictionaries,
    holds_marker, may_hold, payload, read_all, read_in, record_id, with_writes_going_on,
};
use super::*;
use crate::core::ids::RecordId;
use crate::store::compression::PayloadDictionaries;
use crate::store::records::{NewRecord, RecordWrite, RecordsStore, plain_batch};
use crate::store::{Partition, Store};

/// A dictionary trained on `samples`.
fn trained(samples: &[Vec<u8>]) -> Vec<u8> {
    zstd::dict::from_samples(samples, 16 << 10).unwrap()
}

#[test]
fn a_patch_zeroes_what_no_kept_record_shares_and_every_occurrence_of_the_erased_text() {
    let marked = |n: u64| {
        format!(
            r#"{{"name":"{}","n":{n},"note":"asked us to call back"}}"#,
            String::from_utf8_lossy(MARKER)
        )
        .into_bytes()
    };
    let samples: Vec<Vec<u8>> = (0..1_000)
        .map(|n| if n % 4 == 0 { marked(n) } else { payload(n) })
        .collect();
    let dictionary = trained(&samples);
    let start = content_start(&dictionary).unwrap();
    assert!(start > 8 && start < dictionary.len(), "{start}");
    assert!(holds_marker(&dictionary[start..]), "it learnt the marker");
    let kept: Vec<Vec<u8>> = (0..1_000).filter(|n| n % 4 != 0).map(payload).collect();

    let patch = patched_with(&dictionary, &kept, b"no such text");
    assert_eq!(patch.len(), dictionary.len());
    assert_eq!(patch[..start], dictionary[..start], "the header stays");
    assert!(!holds_marker(&patch), "only erased records had the marker");
    // What the kept records share stays: each byte left is in a run of 8 one of them holds.
    let left = patch[start..].iter().filter(|b| **b != 0).count();
    assert!(left > (dictionary.len() - start) / 2, "{left}");
    let content = &patch[start..];
    for at in (0..content.len()).filter(|at| content[*at] != 0) {
        let covered = (at.saturating_sub(KEPT_RUN - 1)..=at)
            .filter(|from| from + KEPT_RUN <= content.len())
            .any(|from| {
                let run = &dictionary[start + from..start + from + KEPT_RUN];
                kept.iter().any(|r| r.windows(KEPT_RUN).any(|w| w == run))
            });
        assert!(covered, "byte {at} is in no kept run");
    }
    // A kept record holding the marker keeps it, unless the marker is what is erased: then
    // every occurrence goes, in either case.
    let kept_too: Vec<Vec<u8>> = kept.iter().cloned().chain([marked(1)]).collect();
    assert!(holds_marker(&patched_with(&dictionary, &kept_too, b"")));
    let erased = String::from_utf8_lossy(MARKER).to_uppercase();
    assert!(!holds_marker(&patched_with(
        &dictionary,
        &kept_too,
        erased.as_bytes()
    )));

    // What is not a dictionary is a clean error.
    for bad in [&b""[..], b"not a dictionary at all", &dictionary[..20]] {
        assert!(matches!(
            patched(bad, &kept, b"x"),
            Err(StoreError::Corrupt(_))
        ));
    }
}

fn patched_with(dictionary: &[u8], kept: &[Vec<u8>], erased: &[u8]) -> Vec<u8> {
    patched(dictionary, kept, erased).unwrap()
}

/// The payload of a record of the person an erasure is for.
fn marked_payload(n: u64) -> Vec<u8> {
    format!(
        r#"{{"name":"{0}","n":{n},"note":"{0} asked us to call back","pad":"{1}"}}"#,
        String::from_utf8_lossy(MARKER),
        "x".repeat(300)
    )
    .into_bytes()
}

/// A kept record that repeats some of what the marked ones say (not the marker): compressed
/// with the dictionary, it copies pieces of them, which the patch zeroes.
fn echoing_payload(n: u64) -> Vec<u8> {
    format!(
        r#"{{"n":{n},"note":"she asked us to call back","pad":"{}"}}"#,
        "x".repeat(200 + n as usize % 50)
    )
    .into_bytes()
}

/// Creates records `ns` of `partition`, their payloads made by `payload`, ids tagged `tag`.
fn write_records(
    store: &RedbStore,
    partition: Partition,
    tag: u128,
    ns: std::ops::Range<u64>,
    payload: fn(u64) -> Vec<u8>,
) {
    let writes: Vec<RecordWrite> = ns
        .map(|n| RecordWrite::Create {
            partition,
            records: vec![NewRecord {
                id: RecordId(record_id(n, tag)),
                payload: payload(n),
            }],
            idempotency: None,
        })
        .collect();
    store.apply_batch(&plain_batch(&writes)).unwrap();
}

#[test]
fn an_erasure_patches_the_dictionary_in_place_while_writes_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("intake.redb");
    let store = RedbStore::open(&path, 1 << 22).unwrap();
    let (kept, marked, echoing) = (
        Partition::from_raw(4),
        Partition::from_raw(6),
        Partition::from_raw(8),
    );
    create_records(&store, kept, 0, 3_000);
    write_records(&store, marked, 2, 0..300, marked_payload);
    let id = store.train_dictionary(AT).unwrap().expect("trained").id;
    assert!(holds_marker(&dictionaries(&store)[0].1));
    // Records compressed with the dictionary, and a snapshot that reads them after the patch.
    create_records(&store, kept, 3_000, 500);
    write_records(&store, echoing, 3, 0..200, echoing_payload);
    let expected: Vec<Vec<u8>> = (0..3_500).map(payload).collect();
    let echoed: Vec<Vec<u8>> = (0..200).map(echoing_payload).collect();
    let before = Store::read(&store).unwrap();
    deleted_partition(&store, marked);
    let erased_ids = (record_id(0, 2), record_id(299, 2));
    assert!(may_hold(&store, marked, erased_ids));

    // Ingest goes on meanwhile.
    let (taken, mut written) = with_writes_going_on(&store, || {
        store
            .take_out_erased(marked, erased_ids, "nobody in particular", AT)
            .unwrap()
    });
    let TakenOut::Patched {
        dictionaries: 1,
        bytes_zeroed,
        records,
    } = taken
    else {
        panic!("{taken:?}");
    };
    assert!(bytes_zeroed > 0);
    // Only records that copied what the marked ones had are stored anew: the echoing ones.
    assert!((1..=200).contains(&records), "{records} stored anew");

    // The one dictionary is patched in place, under its id, and holds no marker; nor does
    // any table of the store.
    let left = dictionaries(&store);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].0, id);
    assert_eq!(store.codec.current_id(), Some(id));
    assert!(!holds_marker(&left[0].1));
    {
        let txn = store.db.begin_read().unwrap();
        let mut search = MarkerSearch {
            txn: &txn,
            found: Vec::new(),
        };
        crate::store::redb::visit_main_tables(&mut search).unwrap();
        assert!(search.found.is_empty(), "{:?}", search.found);
    }

    // Every record reads as written: those from before, those stored anew, those written
    // meanwhile (compressed with the patched content, not plain).
    let all_read = |store: &RedbStore, written: &Written| {
        assert!(read_all(store, kept) == expected);
        assert!(read_all(store, echoing) == echoed);
        assert!(read_all(store, marked).is_empty());
        written.read_back(store);
    };
    all_read(&store, &written);

    // The snapshot from before reads what the dictionary compressed before the patch, some of
    // which the patched content reads differently; once it ends, the codec lets go of that.
    let read_before = |partition| read_in(before.as_ref(), partition);
    assert!(read_before(kept) == expected);
    assert!(read_before(echoing) == echoed);
    assert_eq!(read_before(marked).len(), 300);
    let unpatched = |store: &RedbStore| {
        store.codec.decoders.read().unwrap()[&id]
            .unpatched
            .is_some()
            || store.codec.current().unwrap().unpatched.is_some()
    };
    assert!(unpatched(&store));
    drop(before);
    store.codec.decoder(id);
    assert!(!unpatched(&store));
    written.one_more(&store);
    all_read(&store, &written);

    // Patching again finds nothing more to take out; the store reads the same reopened.
    assert_eq!(
        store
            .take_out_erased(marked, erased_ids, "nobody in particular", AT)
            .unwrap(),
        TakenOut::Nothing
    );
    drop(store);
    let store = RedbStore::open(&path, 1 << 22).unwrap();
    all_read(&store, &written);
    assert!(!holds_marker(&dictionaries(&store)[0].1));
}

#[test]
fn a_write_during_a_patch_is_stored_plain_where_the_content_from_before_reads_it_differently() {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(&dir.path().join("intake.redb"), 1 << 22).unwrap();
    let partition = Partition::from_raw(4);
    create_records(&store, partition, 0, 2_000);
    let id = store.train_dictionary(AT).unwrap().expect("trained").id;
    let bytes = dictionaries(&store)[0].1.clone();
    // Content from before that reads nothing right (all of it zeroed): a compressed value
    // would read differently with it, so the write is stored plain.
    let start = content_start(&bytes).unwrap();
    let mut blank = bytes.clone();
    blank[start..].fill(0);
    let before = Arc::new(ddict(&blank).unwrap());
    let previous = store.codec.begin_patch(id, &bytes, &before).unwrap();
    let value = store.codec.encode(AT, &payload(1)).unwrap();
    assert_ne!(value[0], COMPRESSED, "stored plain");
    // With content from before that reads it the same, it is compressed.
    let same = Arc::new(ddict(&bytes).unwrap());
    store.codec.abandon_patch(id, previous);
    store.codec.begin_patch(id, &bytes, &same).unwrap();
    assert_eq!(store.codec.encode(AT, &payload(1)).unwrap()[0], COMPRESSED);
    let mut scratch = Vec::new();
    assert_eq!(
        store.codec.decode(&value, &mut scratch).unwrap().1,
        payload(1).as_slice()
    );
}
