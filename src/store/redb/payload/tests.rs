use std::ops::Bound;

use super::recompress::RECOMPRESS_CHUNK;
use super::*;
use crate::core::ids::RecordId;
use crate::store::compression::PayloadDictionaries;
use crate::store::records::{
    NewRecord, RecordWrite, RecordsRead, RecordsStore, ScanOrder, plain_batch,
};
use crate::store::redb::ENDPOINTS;
use crate::store::{Partition, Store};

pub(super) const AT: Timestamp = Timestamp(1_795_000_000_123_456);

/// A varied ~700-byte JSON record: shared keys and shape, different values.
pub(super) fn payload(n: u64) -> Vec<u8> {
    let word = |k: u64| ["alpha", "bravo", "charlie", "delta", "echo", "fox"][(k % 6) as usize];
    format!(
        r#"{{"kind":"order","seq":{n},"customer":{{"name":"{} {}","email":"c{n}@example.com","city":"{}"}},"items":[{{"sku":"SKU-{}","qty":{},"unit_price":{}.{}}},{{"sku":"SKU-{}","qty":{},"unit_price":{}.99}}],"paid":{},"note":"{} {} {} {} {} parcel {} confirmed by driver {}","tags":["{}","{}"]}}"#,
        word(n),
        word(n / 7),
        word(n / 3),
        n * 7919 % 10_000,
        n % 5,
        n % 300,
        n % 100,
        n * 31 % 10_000,
        n % 3,
        n % 500,
        n % 2 == 0,
        word(n / 2),
        word(n / 5),
        word(n / 11),
        word(n + 1),
        word(n / 13),
        n * 13,
        word(n * 3),
        word(n / 17),
        word(n / 19),
    )
    .repeat(2)
    .into_bytes()
}

pub(super) fn create_records(store: &RedbStore, partition: Partition, from: u64, count: u64) {
    let writes: Vec<RecordWrite> = (from..from + count)
        .map(|n| RecordWrite::Create {
            partition,
            records: vec![NewRecord {
                id: RecordId(((AT.as_micros() as u128 + u128::from(n)) << 64) | 1),
                payload: payload(n),
            }],
            idempotency: None,
        })
        .collect();
    store.apply_batch(&plain_batch(&writes)).unwrap();
}

/// Every record of `partition`, oldest first, read through the store (the scrub tests use it too).
pub(in crate::store::redb) fn read_all(store: &RedbStore, partition: Partition) -> Vec<Vec<u8>> {
    read_in(Store::read(store).unwrap().as_ref(), partition)
}

/// Every record of `partition`, oldest first, as `snapshot` reads it.
pub(super) fn read_in(snapshot: &dyn RecordsRead, partition: Partition) -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    snapshot
        .record_page(
            partition,
            (Bound::Included(0), Bound::Included(u128::MAX)),
            ScanOrder::OldestFirst,
            usize::MAX,
            &mut |record| {
                all.push(record.payload.to_vec());
                Ok(())
            },
        )
        .unwrap();
    all
}

pub(super) fn stored_bytes(store: &RedbStore, partition: Partition) -> (usize, usize) {
    let txn = store.db.begin_read().unwrap();
    let records = txn.open_table(RECORDS).unwrap();
    let (mut compressed, mut plain) = (0, 0);
    for entry in records
        .range((partition.raw(), 0u128)..=(partition.raw(), u128::MAX))
        .unwrap()
    {
        let (_, value) = entry.unwrap();
        match value.value()[0] {
            COMPRESSED => compressed += value.value().len(),
            _ => plain += value.value().len(),
        }
    }
    (compressed, plain)
}

#[test]
fn a_trained_dictionary_compresses_later_writes_and_every_record_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("intake.redb");
    let store = RedbStore::open(&path, 1 << 20).unwrap();
    assert!(
        !store.dictionary_due(),
        "an empty store needs no dictionary"
    );
    create_records(&store, Partition::from_raw(7), 0, 20);
    assert!(store.dictionary_due());
    // 20 records are too few bytes to learn from: nothing changes.
    assert_eq!(store.train_dictionary(AT).unwrap(), None);
    assert_eq!(stored_bytes(&store, Partition::from_raw(7)).0, 0);

    create_records(&store, Partition::from_raw(7), 20, 380);
    create_records(&store, Partition::from_raw(9), 0, 100);
    let trained = store
        .train_dictionary(AT)
        .unwrap()
        .expect("enough to learn from");
    assert!(trained.sample_share < 0.5, "{trained:?}");
    assert_eq!(trained.sample_records, 500, "both endpoints are sampled");
    assert!(!store.dictionary_due());

    create_records(&store, Partition::from_raw(7), 400, 200);
    let (compressed, plain) = stored_bytes(&store, Partition::from_raw(7));
    let new_payload: usize = (400..600).map(|n| payload(n).len()).sum();
    assert!(
        compressed * 2 < new_payload,
        "{compressed} bytes stored for {new_payload}"
    );
    assert!(plain > 0, "records from before the dictionary stay plain");
    let expected: Vec<Vec<u8>> = (0..600).map(payload).collect();
    assert!(read_all(&store, Partition::from_raw(7)) == expected);

    // A reopened store reads both layouts and goes on compressing with the same dictionary.
    drop(store);
    let store = RedbStore::open(&path, 1 << 20).unwrap();
    assert_eq!(store.codec.current_id(), Some(trained.id));
    let kept = store.codec.current().unwrap().sample_share;
    assert_eq!(
        kept, trained.sample_share,
        "what tells a stale dictionary is kept"
    );
    assert!(!store.dictionary_due());
    create_records(&store, Partition::from_raw(7), 600, 10);
    let expected: Vec<Vec<u8>> = (0..610).map(payload).collect();
    assert!(read_all(&store, Partition::from_raw(7)) == expected);
    assert_eq!(store.gauges(Timestamp(0)).unwrap().payload_dictionaries, 1);
}

/// The ids and bytes of the store's dictionaries.
pub(super) fn dictionaries(store: &RedbStore) -> Vec<(u32, Vec<u8>)> {
    let txn = store.db.begin_read().unwrap();
    let table = txn.open_table(PAYLOAD_DICTIONARIES).unwrap();
    table
        .iter()
        .unwrap()
        .map(|e| {
            e.map(|(id, bytes)| (id.value(), bytes.value().to_vec()))
                .unwrap()
        })
        .collect()
}

/// Marks the endpoint of `partition` deleted, as a deletion does before its purge.
fn deleted_endpoint(store: &RedbStore, partition: Partition) {
    let id = partition.endpoint();
    let row = serde_json::json!({
        "id": id, "slug": "gone", "name": "Gone", "description": null,
        "required_fields": [], "active": true, "deployed": false, "deployed_at": null,
        "created_at": 1, "owner_id": 1, "sandbox_key_sealed": "", "production_key_sealed": "",
        "deleted_at": 2,
    });
    let txn = store.db.begin_write().unwrap();
    txn.open_table(ENDPOINTS)
        .unwrap()
        .insert(id, serde_json::to_vec(&row).unwrap().as_slice())
        .unwrap();
    txn.commit().unwrap();
}

pub(super) fn deleted_partition(store: &RedbStore, partition: Partition) {
    let txn = store.db.begin_write().unwrap();
    {
        let mut records = txn.open_table(RECORDS).unwrap();
        let keys: Vec<(u64, u128)> = records
            .range((partition.raw(), 0u128)..=(partition.raw(), u128::MAX))
            .unwrap()
            .map(|e| e.unwrap().0.value())
            .collect();
        for key in keys {
            records.remove(key).unwrap();
        }
    }
    txn.commit().unwrap();
}

#[test]
fn compaction_compresses_every_record_with_a_dictionary_of_what_the_store_holds_now() {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(&dir.path().join("intake.redb"), 1 << 20).unwrap();
    let nothing = Recompressed {
        records: 0,
        dictionaries_removed: 0,
    };
    assert_eq!(store.recompress_records(AT).unwrap(), nothing);
    // More records than one transaction of the rewrite takes, all stored plain.
    let count = RECOMPRESS_CHUNK as u64 + 300;
    create_records(&store, Partition::from_raw(4), 0, count);
    let (compressed, plain) = stored_bytes(&store, Partition::from_raw(4));
    assert_eq!(compressed, 0);
    let done = store.recompress_records(AT).unwrap();
    assert_eq!(done.records, count);
    let (compressed, left_plain) = stored_bytes(&store, Partition::from_raw(4));
    assert_eq!(left_plain, 0);
    assert!(compressed * 2 < plain, "{plain} bytes became {compressed}");
    let expected: Vec<Vec<u8>> = (0..count).map(payload).collect();
    assert!(read_all(&store, Partition::from_raw(4)) == expected);

    // Another endpoint's records, with a word of their own, are learnt (and written with)
    // and then deleted: the next compaction trains on what is left, rewrites every record
    // and removes the dictionaries that held pieces of the deleted ones.
    let secret = b"zebra-crossing-secret";
    let writes: Vec<RecordWrite> = (0..400u64)
        .map(|n| RecordWrite::Create {
            partition: Partition::from_raw(6),
            records: vec![NewRecord {
                id: RecordId(((AT.as_micros() as u128 + u128::from(n)) << 64) | 2),
                payload: format!(
                    r#"{{"zebra-crossing-secret":{n},"pad":"{}"}}"#,
                    "z".repeat(900)
                )
                .into_bytes(),
            }],
            idempotency: None,
        })
        .collect();
    store.apply_batch(&plain_batch(&writes)).unwrap();
    store.train_dictionary(AT).unwrap().expect("trained");
    assert!(
        dictionaries(&store)
            .iter()
            .any(|(_, bytes)| bytes.windows(secret.len()).any(|w| w == secret)),
        "the dictionary learnt the other endpoint's records"
    );
    create_records(&store, Partition::from_raw(4), count, 100);
    // Deleted, not purged yet: a dictionary trained now leaves its records out.
    deleted_endpoint(&store, Partition::from_raw(6));
    store.train_dictionary(AT).unwrap().expect("trained");
    let current = store.codec.current_id();
    assert!(dictionaries(&store).iter().all(
        |(id, bytes)| Some(*id) != current || !bytes.windows(secret.len()).any(|w| w == secret)
    ));
    deleted_partition(&store, Partition::from_raw(6));
    let done = store.recompress_records(AT).unwrap();
    assert_eq!((done.records, done.dictionaries_removed), (count + 100, 2));
    let left = dictionaries(&store);
    assert_eq!(left.len(), 1);
    assert_eq!(Some(left[0].0), store.codec.current_id());
    assert!(!left[0].1.windows(secret.len()).any(|w| w == secret));
    let expected: Vec<Vec<u8>> = (0..count + 100).map(payload).collect();
    assert!(read_all(&store, Partition::from_raw(4)) == expected);
    // Nothing changed since: the same dictionary, nothing to do.
    assert_eq!(store.recompress_records(AT).unwrap(), nothing);

    // Too little left to learn from: every record plain, no dictionary kept.
    deleted_partition(&store, Partition::from_raw(4));
    create_records(&store, Partition::from_raw(4), 0, 3);
    let done = store.recompress_records(AT).unwrap();
    assert_eq!((done.records, done.dictionaries_removed), (3, 1));
    assert!(dictionaries(&store).is_empty());
    assert_eq!(stored_bytes(&store, Partition::from_raw(4)).0, 0);
    assert!(read_all(&store, Partition::from_raw(4)) == (0..3).map(payload).collect::<Vec<_>>());
}

#[test]
fn a_store_with_records_and_no_dictionary_wants_one_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("intake.redb");
    let store = RedbStore::open(&path, 1 << 20).unwrap();
    create_records(&store, Partition::from_raw(3), 0, 5);
    drop(store);
    let store = RedbStore::open(&path, 1 << 20).unwrap();
    assert!(store.dictionary_due());
}

#[test]
fn a_dictionary_goes_stale_when_later_writes_compress_much_worse() {
    let codec = PayloadCodec::new(Vec::new(), 0.0, 0).unwrap();
    let samples: Vec<Vec<u8>> = (0..500).map(payload).collect();
    let bytes = zstd::dict::from_samples(&samples, 16 << 10).unwrap();
    codec.install(42, &bytes, 0.2).unwrap();
    assert!(!codec.due());
    // Bytes with no repeats compress at about their own size: 5× the sample's share.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<u8> = (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 32) as u8
        })
        .collect();
    for _ in 0..STALE_AFTER_BYTES / 4096 {
        let value = codec.encode(AT, &noise).unwrap();
        assert_ne!(value[0], COMPRESSED, "what does not shrink is stored plain");
    }
    assert!(codec.due());
}

#[test]
fn plain_values_of_earlier_versions_read_as_they_are() {
    let codec = PayloadCodec::new(Vec::new(), 0.0, 0).unwrap();
    // A payload whose first byte is the compressed tag: the tag only counts in front of
    // the time.
    for payload in [&br#"{"x":"y"}"#[..], &[COMPRESSED, b'{', b'}'][..]] {
        let value = [&AT.as_micros().to_be_bytes()[..], payload].concat();
        let mut scratch = Vec::new();
        assert_eq!(codec.decode(&value, &mut scratch).unwrap(), (AT, payload));
        assert_eq!(codec.encode(AT, payload).unwrap(), value);
    }
}

#[test]
fn damaged_values_are_corrupt_errors_never_panics() {
    let samples: Vec<Vec<u8>> = (0..500).map(payload).collect();
    let bytes = zstd::dict::from_samples(&samples, 16 << 10).unwrap();
    let codec = PayloadCodec::new(vec![(7, bytes.clone())], 0.3, 0).unwrap();
    let id = zstd_safe::get_dict_id_from_dict(&bytes).unwrap().get();
    let codec_with_id = PayloadCodec::new(vec![(id, bytes)], 0.3, 0).unwrap();
    let good = codec_with_id.encode(AT, &payload(1)).unwrap();
    assert_eq!(good[0], COMPRESSED);
    let mut scratch = Vec::new();
    assert_eq!(
        codec_with_id.decode(&good, &mut scratch).unwrap().1,
        payload(1)
    );
    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x5A;
    let cases: Vec<(&PayloadCodec, &[u8])> = vec![
        (&codec_with_id, &good[..5]),
        (&codec_with_id, &good[..12]),
        (&codec_with_id, &good[..good.len() - 3]),
        (&codec_with_id, &flipped),
        (&codec_with_id, &[0u8; 3]),
        // The dictionary it names is not in the store.
        (&codec, &good),
    ];
    for (codec, bad) in cases {
        let mut scratch = Vec::new();
        match codec.decode(bad, &mut scratch) {
            Err(StoreError::Corrupt(_)) => {}
            Ok((_, decoded)) => assert_ne!(decoded, payload(1), "{bad:?}"),
            Err(other) => panic!("{other:?}"),
        }
    }
}

/// What a record of the person an erasure is for says, often enough for a dictionary to learn.
pub(super) const MARKER: &[u8] = b"Philippa-Quarrington-Ashby";

pub(super) fn holds_marker(bytes: &[u8]) -> bool {
    bytes.windows(MARKER.len()).any(|w| w == MARKER)
}

pub(super) fn record_id(n: u64, tag: u128) -> u128 {
    ((AT.as_micros() as u128 + u128::from(n)) << 64) | tag
}

/// The tables of the store file that hold [`MARKER`], in a key or a value.
pub(super) struct MarkerSearch<'a> {
    pub(super) txn: &'a redb::ReadTransaction,
    pub(super) found: Vec<String>,
}

impl crate::store::redb::TableVisitor for MarkerSearch<'_> {
    fn visit<K: redb::Key + 'static, V: redb::Value + 'static>(
        &mut self,
        table: redb::TableDefinition<'static, K, V>,
    ) -> Result<(), StoreError> {
        use redb::TableHandle;
        for entry in self.txn.open_table(table)?.iter()? {
            let (key, value) = entry?;
            if holds_marker(K::as_bytes(&key.value()).as_ref())
                || holds_marker(V::as_bytes(&value.value()).as_ref())
            {
                self.found.push(table.name().to_string());
            }
        }
        Ok(())
    }
}

/// What [`with_writes_going_on`] wrote, into a partition before and one after those the
/// tests use.
pub(super) struct Written {
    /// Records written: `payload(n)` for each `n` below, in batches of 20, every other batch
    /// into [`EARLY`], the others into [`LATE`].
    count: u64,
}

const EARLY: Partition = Partition::from_raw(2);
const LATE: Partition = Partition::from_raw(12);

impl Written {
    /// Writes one batch more, as the writer did.
    pub(super) fn one_more(&mut self, store: &RedbStore) {
        let partition = if self.count % 40 == 0 { EARLY } else { LATE };
        create_records(store, partition, self.count, 20);
        self.count += 20;
    }

    /// Asserts that every record written reads back as written.
    pub(super) fn read_back(&self, store: &RedbStore) {
        let (mut early, mut late) = (Vec::new(), Vec::new());
        for n in (0..self.count).step_by(20) {
            let to = if n % 40 == 0 { &mut early } else { &mut late };
            to.extend((n..n + 20).map(payload));
        }
        assert!(read_all(store, EARLY) == early);
        assert!(read_all(store, LATE) == late);
        let (compressed, plain) = stored_bytes(store, LATE);
        assert!(compressed > 0 && plain == 0, "{compressed} / {plain}");
    }
}

/// Runs `work` while a writer creates records ([`Written`]), as ingest does on a running
/// server; asserts that some were written while it ran.
pub(super) fn with_writes_going_on<T: Send>(
    store: &RedbStore,
    work: impl FnOnce() -> T + Send,
) -> (T, Written) {
    let stop = std::sync::atomic::AtomicBool::new(false);
    let batches = AtomicU64::new(0);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut written = Written { count: 0 };
            while !stop.load(Ordering::Relaxed) {
                written.one_more(store);
                batches.fetch_add(1, Ordering::Relaxed);
            }
            written
        });
        while batches.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        let at_start = batches.load(Ordering::Relaxed);
        let done = work();
        let during = batches.load(Ordering::Relaxed) - at_start;
        stop.store(true, Ordering::Relaxed);
        let written = writer.join().unwrap();
        assert!(during > 0, "no write went on meanwhile");
        (done, written)
    })
}

/// Whether a dictionary of the store may have been trained on a record of `partition` with an
/// id in `ids`.
pub(super) fn may_hold(store: &RedbStore, partition: Partition, ids: (u128, u128)) -> bool {
    !store
        .dictionaries_meeting(partition, ids)
        .unwrap()
        .is_empty()
}

#[test]
fn replacing_the_dictionaries_while_writes_go_on_takes_every_erased_piece_out() {
    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(&dir.path().join("intake.redb"), 1 << 22).unwrap();
    let (kept, marked, unsampled) = (
        Partition::from_raw(4),
        Partition::from_raw(6),
        Partition::from_raw(8),
    );
    // More of `kept` than a sample takes: its oldest records are left out.
    create_records(&store, kept, 0, 3_000);
    let marked_writes: Vec<RecordWrite> = (0..300u64)
        .map(|n| RecordWrite::Create {
            partition: marked,
            records: vec![NewRecord {
                id: RecordId(record_id(n, 2)),
                payload: format!(
                    r#"{{"name":"{0}","n":{n},"note":"{0} asked us to call back","pad":"{1}"}}"#,
                    String::from_utf8_lossy(MARKER),
                    "x".repeat(300)
                )
                .into_bytes(),
            }],
            idempotency: None,
        })
        .collect();
    store.apply_batch(&plain_batch(&marked_writes)).unwrap();
    let old = store.train_dictionary(AT).unwrap().expect("trained").id;
    assert!(
        dictionaries(&store)
            .iter()
            .any(|(id, bytes)| *id == old && holds_marker(bytes)),
        "the dictionary learnt the marked records"
    );
    assert!(may_hold(
        &store,
        marked,
        (record_id(0, 2), record_id(299, 2))
    ));
    assert!(may_hold(
        &store,
        marked,
        (record_id(150, 2), record_id(150, 2))
    ));
    assert!(may_hold(&store, kept, (record_id(2_999, 1), u128::MAX)));
    assert!(!may_hold(&store, kept, (0, record_id(100, 1))));
    assert!(!may_hold(&store, marked, (record_id(300, 2), u128::MAX)));
    assert!(!may_hold(&store, unsampled, (0, u128::MAX)));

    // Records compressed with the old dictionary, and a snapshot that reads them after it is
    // gone from the store.
    create_records(&store, kept, 3_000, 500);
    let expected: Vec<Vec<u8>> = (0..3_500).map(payload).collect();
    let before = Store::read(&store).unwrap();
    deleted_partition(&store, marked);

    let (done, written) = with_writes_going_on(&store, || store.recompress_records(AT).unwrap());
    assert_eq!(done.dictionaries_removed, 1);
    assert!(done.records >= 3_500, "{done:?}");

    let left = dictionaries(&store);
    let current = store.codec.current_id();
    assert_eq!(left.len(), 1);
    assert_eq!(Some(left[0].0), current);
    assert_ne!(left[0].0, old);
    assert!(!holds_marker(&left[0].1));
    let txn = store.db.begin_read().unwrap();
    let samples: Vec<u32> = txn
        .open_table(DICTIONARY_SAMPLES)
        .unwrap()
        .iter()
        .unwrap()
        .map(|entry| entry.unwrap().0.value())
        .collect();
    assert_eq!(
        samples,
        vec![left[0].0],
        "the old dictionary's sample went with it"
    );
    let mut search = MarkerSearch {
        txn: &txn,
        found: Vec::new(),
    };
    crate::store::redb::visit_main_tables(&mut search).unwrap();
    assert!(search.found.is_empty(), "{:?}", search.found);
    // Every record, also those written while the chunks went by, names the new dictionary.
    for entry in txn.open_table(RECORDS).unwrap().iter().unwrap() {
        let (_, value) = entry.unwrap();
        let named = dictionary_of(value.value());
        assert!(named.is_none() || named == current, "{named:?}");
    }
    drop(txn);
    assert!(!may_hold(&store, marked, (0, u128::MAX)));

    assert!(read_all(&store, kept) == expected);
    assert!(read_all(&store, marked).is_empty());
    written.read_back(&store);

    // The snapshot from before still reads what the old dictionary compressed; once it ends,
    // the codec lets go of it.
    assert!(read_in(before.as_ref(), kept) == expected);
    assert!(store.codec.decoder(old).is_some());
    drop(before);
    assert!(store.codec.decoder(old).is_none());

    // A dictionary without a sample (trained by an earlier intake) may hold anything.
    let txn = store.db.begin_write().unwrap();
    txn.open_table(DICTIONARY_SAMPLES)
        .unwrap()
        .remove(left[0].0)
        .unwrap();
    txn.commit().unwrap();
    assert!(may_hold(&store, unsampled, (0, 1)));
    // So an erasure replaces every dictionary rather than patch one.
    match store
        .take_out_erased(unsampled, (0, 1), "anything", AT)
        .unwrap()
    {
        crate::store::compression::TakenOut::Replaced(done) => {
            assert_eq!(done.dictionaries_removed, 1)
        }
        other => panic!("{other:?}"),
    }
}

/// A varied ~500-byte JSON record.
fn small_payload(n: u64) -> Vec<u8> {
    let word = |k: u64| ["alpha", "bravo", "charlie", "delta", "echo", "fox"][(k % 6) as usize];
    format!(
        r#"{{"kind":"order","seq":{n},"customer":{{"name":"{} {}","email":"c{n}@example.com","city":"{}","phone":"+44 20 7946 {:04}"}},"items":[{{"sku":"SKU-{}","qty":{},"unit_price":{}.{:02}}},{{"sku":"SKU-{}","qty":{},"unit_price":{}.99}}],"paid":{},"currency":"GBP","address":{{"street":"{} {} Road","town":"{}ton","postcode":"SW{} {}AB"}},"status":"{}","channel":"web","note":"{} {} {} parcel {} confirmed by driver {} at depot {}","tags":["{}","{}","{}"]}}"#,
        word(n),
        word(n / 7),
        word(n / 3),
        n * 37 % 10_000,
        n * 7919 % 10_000,
        n % 5,
        n % 300,
        n % 100,
        n * 31 % 10_000,
        n % 3,
        n % 500,
        n % 2 == 0,
        n % 200,
        word(n / 29),
        word(n / 31),
        n % 20,
        n % 9,
        ["shipped", "pending", "returned"][(n % 3) as usize],
        word(n / 2),
        word(n / 5),
        word(n / 11),
        n * 13,
        word(n * 3),
        n % 17,
        word(n / 17),
        word(n / 19),
        word(n / 23),
    )
    .into_bytes()
}

/// How long `recompress_records` takes on 200,000 records of ~500 bytes, and how long a
/// writer meanwhile waits for the write lock (at most about one chunk's transaction). A
/// measure, not a check: `cargo test --release --lib -- --ignored --nocapture
/// replacing_the_dictionaries_of_200k_records`.
#[test]
#[ignore = "a measure, for a release build"]
fn replacing_the_dictionaries_of_200k_records() {
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    let store = RedbStore::open(&dir.path().join("intake.redb"), 64 << 20).unwrap();
    let mut payload_bytes = 0;
    for batch in 0..200u64 {
        let writes: Vec<RecordWrite> = (batch * 1_000..(batch + 1) * 1_000)
            .map(|n| {
                let payload = small_payload(n);
                payload_bytes += payload.len();
                RecordWrite::Create {
                    partition: Partition::from_raw(2 + n % 50),
                    records: vec![NewRecord {
                        id: RecordId(record_id(n, 1)),
                        payload,
                    }],
                    idempotency: None,
                }
            })
            .collect();
        store.apply_batch(&plain_batch(&writes)).unwrap();
        // The first 20,000 stored plain, the others compressed with a dictionary.
        if batch == 19 {
            store.train_dictionary(AT).unwrap().expect("trained");
        }
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (done, took, mut waits) = std::thread::scope(|scope| {
        // A writer committing a small transaction every millisecond, as ingest does under load.
        let writer = scope.spawn(|| {
            let mut waits = Vec::new();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let asked = Instant::now();
                let txn = store.write().unwrap();
                waits.push(asked.elapsed());
                n += 1;
                crate::store::redb::write_counter(&txn, "measure_probe", n).unwrap();
                txn.commit().unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
            waits
        });
        let started = Instant::now();
        let done = store.recompress_records(AT).unwrap();
        let took = started.elapsed();
        stop.store(true, Ordering::Relaxed);
        (done, took, writer.join().unwrap())
    });
    waits.sort();
    let at = |share: f64| waits[((waits.len() - 1) as f64 * share) as usize];
    eprintln!(
        "{} records ({} bytes of payload, {} per record): {done:?} in {took:?}; the writer \
         committed {} times meanwhile, waiting for the lock {:?} at the median, {:?} at the \
         99th percentile, {:?} at most",
        200_000,
        payload_bytes,
        payload_bytes / 200_000,
        waits.len(),
        at(0.5),
        at(0.99),
        at(1.0),
    );
    assert_eq!(done.records, 200_000);
}
