//! How a record is laid out in `RECORDS`: its `updated_at` and its payload, the payload
//! compressed with a zstd dictionary trained on the store's own records.
//!
//! Why a dictionary: records of ~1 KB of JSON share their keys and much of their shape, which
//! one record alone does not show a compressor. Per record, LZ4 saves 15 % of them and plain
//! zstd 37 % at 6.5 µs a record; zstd with a 64 KiB dictionary trained on 1,000 of them saves
//! 67 % at 2.8 µs and decompresses in 1 µs (`benches/payload_codec.rs`, docs/src/benchmarks.md
//! "Payload compression").
//!
//! Two layouts, told apart by the first byte:
//! - plain: `updated_at` (µs, 8 bytes BE) then the payload. Its first byte is the top byte of
//!   the time, 0x00 from 1970 to the year 4254 (0xFF before 1970). Every value written before
//!   the store had a dictionary, before compression existed, or that a dictionary did not
//!   shrink by an eighth, has it.
//! - compressed: [`COMPRESSED`], `updated_at` (8 bytes BE), then one zstd frame made with a
//!   dictionary of `PAYLOAD_DICTIONARIES`. The frame names its dictionary (zstd's dictionary
//!   id) and the payload's length.
//!
//! The dictionary is trained once the store holds enough records ([`PayloadCodec::due`]), on a
//! sample of the newest of each endpoint, off the write path (`workers::compression` asks), and
//! again if what is written later compresses much worse than the sample did; its sample leaves
//! out deleted endpoints' records. Each record names the dictionary it needs, so a running
//! store never removes one. A dictionary holds pieces of the records it was trained on:
//! `intake compact` (a stopped server) trains one afresh on the records the store holds then,
//! stores every record anew with it and removes the others
//! ([`RedbStore::recompress_records`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableError};
use zstd::zstd_safe::{self, CCtx, CDict, DCtx, DDict};

use super::{ENDPOINTS, PAYLOAD_DICTIONARIES, RECORDS, RedbStore, from_json, partitions_of};
use crate::core::clock::Timestamp;
use crate::store::compression::{PayloadDictionaries, TrainedDictionary};
use crate::store::{EndpointRow, StoreError, partition_endpoint};

/// First byte of a compressed value (see the module's documentation).
const COMPRESSED: u8 = 0x81;
/// Payloads shorter than this are stored plain: there is too little to save.
const COMPRESS_FROM: usize = 64;
/// The largest payload a compressed value may claim, so a damaged frame cannot make a read
/// allocate gigabytes (the data API takes payloads of at most 100 KB).
const MAX_PAYLOAD: u64 = 16 << 20;
/// zstd's level: with a dictionary, level 1 keeps 90 % of level 3's saving for 85 % of its CPU.
const LEVEL: i32 = 1;
/// A dictionary is learnt from at most this many records and bytes of payload...
const SAMPLE_RECORDS: usize = 2_000;
const SAMPLE_BYTES: usize = 2 << 20;
/// ... and only once the store holds this many bytes of them: fewer teach it little.
const MIN_SAMPLE_BYTES: usize = 256 << 10;
/// Payload bytes written plain after an attempt that found too little to learn from, before
/// the next attempt.
const RETRY_AFTER_PLAIN: u64 = 8 << 10;
/// The dictionary's size: a sixteenth of the sample, between these bounds.
const DICT_BYTES: (usize, usize) = (4 << 10, 64 << 10);
/// A new dictionary is trained when what was written with the current one, at least this many
/// bytes of payload, is stored at more than [`STALE_FACTOR`] times the share of its size that
/// the dictionary's own sample was.
const STALE_AFTER_BYTES: u64 = 64 << 20;
const STALE_FACTOR: f64 = 1.5;

/// The dictionary writes use now.
struct Encoder {
    id: u32,
    dict: CDict<'static>,
    /// Stored bytes per payload byte of the sample it was trained on.
    sample_share: f64,
}

/// Encodes and decodes record values; holds the store's dictionaries.
pub struct PayloadCodec {
    encoder: RwLock<Option<Arc<Encoder>>>,
    decoders: RwLock<HashMap<u32, Arc<DDict<'static>>>>,
    /// One compression context: values are encoded by the one write transaction at a time.
    cctx: Mutex<Option<CCtx<'static>>>,
    /// Decompression contexts, taken by a reader for one value and put back.
    dctxs: Mutex<Vec<DCtx<'static>>>,
    /// Payload bytes written plain for want of a dictionary since the last training attempt
    /// ([`RETRY_AFTER_PLAIN`] when the store opened with records and no dictionary): an attempt
    /// that found too little to learn from is tried again only once more has been written, not
    /// at every check of an idle store.
    plain_since_attempt: AtomicU64,
    /// Payload bytes compressed with the current encoder, and what they were stored in.
    written_in: AtomicU64,
    written_out: AtomicU64,
}

impl PayloadCodec {
    /// The codec of a store whose `PAYLOAD_DICTIONARIES` hold `dictionaries` (id, bytes), the
    /// current one last, with the share its sample was stored in; `records` is how many
    /// records the store holds.
    fn new(
        dictionaries: Vec<(u32, Vec<u8>)>,
        sample_share: f64,
        records: u64,
    ) -> Result<PayloadCodec, StoreError> {
        let mut decoders = HashMap::new();
        let mut encoder = None;
        for (id, bytes) in &dictionaries {
            decoders.insert(*id, Arc::new(ddict(bytes)?));
        }
        if let Some((id, bytes)) = dictionaries.last() {
            encoder = Some(Arc::new(Encoder {
                id: *id,
                dict: cdict(bytes)?,
                sample_share,
            }));
        }
        Ok(PayloadCodec {
            plain_since_attempt: AtomicU64::new(if encoder.is_none() && records > 0 {
                RETRY_AFTER_PLAIN
            } else {
                0
            }),
            encoder: RwLock::new(encoder),
            decoders: RwLock::new(decoders),
            cctx: Mutex::new(None),
            dctxs: Mutex::new(Vec::new()),
            written_in: AtomicU64::new(0),
            written_out: AtomicU64::new(0),
        })
    }

    /// Loads the dictionaries of `db` (none in a file without the table, `requests.redb`).
    pub(super) fn load(db: &impl ReadableDatabase) -> Result<PayloadCodec, StoreError> {
        let txn = db.begin_read()?;
        let table = match txn.open_table(PAYLOAD_DICTIONARIES) {
            Ok(table) => table,
            Err(TableError::TableDoesNotExist(_)) => return PayloadCodec::new(Vec::new(), 0.0, 0),
            Err(err) => return Err(err.into()),
        };
        let mut dictionaries = Vec::new();
        for entry in table.iter()? {
            let (id, bytes) = entry?;
            dictionaries.push((id.value(), bytes.value().to_vec()));
        }
        let records = match txn.open_table(RECORDS) {
            Ok(records) => records.len()?,
            Err(TableError::TableDoesNotExist(_)) => 0,
            Err(err) => return Err(err.into()),
        };
        // Ids are zstd's (random), so the table's order is not their age: the one writes use
        // is named in META.
        let current = match txn.open_table(super::META)?.get(CURRENT_DICTIONARY)? {
            Some(v) => Some(decode_current(v.value())?),
            None => None,
        };
        let mut sample_share = 0.0;
        if let Some((current, share)) = current {
            sample_share = share;
            let at = dictionaries
                .iter()
                .position(|(id, _)| *id == current)
                .ok_or_else(|| {
                    StoreError::Corrupt(format!("payload dictionary {current} is missing"))
                })?;
            let newest = dictionaries.remove(at);
            dictionaries.push(newest);
        }
        PayloadCodec::new(dictionaries, sample_share, records)
    }

    /// Encodes a record value (see the module's documentation for the layouts).
    pub fn encode(&self, updated_at: Timestamp, payload: &[u8]) -> Result<Vec<u8>, StoreError> {
        let time = updated_at.as_micros().to_be_bytes();
        let encoder = self.current();
        match &encoder {
            Some(encoder) if payload.len() >= COMPRESS_FROM => {
                let head = 1 + time.len();
                let mut v = vec![0; head + zstd_safe::compress_bound(payload.len())];
                let mut cctx = self.cctx.lock().unwrap_or_else(PoisonError::into_inner);
                let cctx = match &mut *cctx {
                    Some(cctx) => cctx,
                    None => cctx.insert(
                        CCtx::try_create().ok_or_else(|| no_memory("a compression context"))?,
                    ),
                };
                let written = cctx.compress_using_cdict(&mut v[head..], payload, &encoder.dict);
                if let Ok(n) = written {
                    self.written_in
                        .fetch_add(payload.len() as u64, Ordering::Relaxed);
                    self.written_out.fetch_add(n as u64, Ordering::Relaxed);
                    if head + n <= payload.len() - payload.len() / 8 {
                        v[0] = COMPRESSED;
                        v[1..head].copy_from_slice(&time);
                        v.truncate(head + n);
                        return Ok(v);
                    }
                }
            }
            Some(_) => {}
            None => {
                self.plain_since_attempt
                    .fetch_add(payload.len() as u64, Ordering::Relaxed);
            }
        }
        let mut v = Vec::with_capacity(time.len() + payload.len());
        v.extend_from_slice(&time);
        v.extend_from_slice(payload);
        Ok(v)
    }

    /// Decodes a record value into `(updated_at, payload)`. A compressed payload is
    /// decompressed into `scratch` (reused across the records of a scan); a plain one is
    /// borrowed from `value`.
    pub fn decode<'a>(
        &self,
        value: &'a [u8],
        scratch: &'a mut Vec<u8>,
    ) -> Result<(Timestamp, &'a [u8]), StoreError> {
        let corrupt = |what: &str| StoreError::Corrupt(format!("record value: {what}"));
        let (compressed, rest) = match value.split_first() {
            Some((&COMPRESSED, rest)) => (true, rest),
            _ => (false, value),
        };
        let (time, payload) = rest
            .split_first_chunk::<8>()
            .ok_or_else(|| corrupt("shorter than its header"))?;
        let updated_at = Timestamp(i64::from_be_bytes(*time));
        if !compressed {
            return Ok((updated_at, payload));
        }
        let id = zstd_safe::get_dict_id_from_frame(payload)
            .ok_or_else(|| corrupt("its frame names no dictionary"))?;
        let ddict = self
            .decoders
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id.get())
            .cloned()
            .ok_or_else(|| corrupt(&format!("its dictionary {id} is not in the store")))?;
        let len = match zstd_safe::get_frame_content_size(payload) {
            Ok(Some(len)) if len <= MAX_PAYLOAD => len as usize,
            _ => return Err(corrupt("its frame has no valid length")),
        };
        scratch.clear();
        scratch.resize(len, 0);
        let mut dctx = match self
            .dctxs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
        {
            Some(dctx) => dctx,
            None => DCtx::try_create().ok_or_else(|| no_memory("a decompression context"))?,
        };
        let result = dctx.decompress_using_ddict(scratch.as_mut_slice(), payload, &ddict);
        self.dctxs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(dctx);
        match result {
            Ok(n) if n == len => Ok((updated_at, scratch.as_slice())),
            _ => Err(corrupt("its compressed payload does not decompress")),
        }
    }

    fn current(&self) -> Option<Arc<Encoder>> {
        self.encoder
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether a dictionary should be trained now: the store has none and records were written
    /// plain since the last attempt (or it opened so), or the current one has grown stale (see
    /// [`STALE_FACTOR`]). Reads counters only.
    pub fn due(&self) -> bool {
        match self.current() {
            None => self.plain_since_attempt.load(Ordering::Relaxed) >= RETRY_AFTER_PLAIN,
            Some(encoder) => {
                let written_in = self.written_in.load(Ordering::Relaxed);
                let written_out = self.written_out.load(Ordering::Relaxed);
                written_in >= STALE_AFTER_BYTES
                    && written_out as f64 / written_in as f64 > encoder.sample_share * STALE_FACTOR
            }
        }
    }

    /// Makes `id` the dictionary of every write from now on.
    fn install(&self, id: u32, bytes: &[u8], sample_share: f64) -> Result<(), StoreError> {
        let encoder = Arc::new(Encoder {
            id,
            dict: cdict(bytes)?,
            sample_share,
        });
        self.decoders
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Arc::new(ddict(bytes)?));
        *self.encoder.write().unwrap_or_else(PoisonError::into_inner) = Some(encoder);
        self.written_in.store(0, Ordering::Relaxed);
        self.written_out.store(0, Ordering::Relaxed);
        self.plain_since_attempt.store(0, Ordering::Relaxed);
        Ok(())
    }

    /// The id of the dictionary writes use now.
    pub fn current_id(&self) -> Option<u32> {
        self.current().map(|encoder| encoder.id)
    }

    /// Writes store payloads plain from now on (the store has no dictionary left).
    fn uninstall(&self) {
        *self.encoder.write().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// The dictionary a record value is compressed with; `None` for a plain value (or one whose
/// frame names none, which decoding reports).
fn dictionary_of(value: &[u8]) -> Option<u32> {
    match value.split_first() {
        Some((&COMPRESSED, rest)) => rest
            .get(8..)
            .and_then(zstd_safe::get_dict_id_from_frame)
            .map(|id| id.get()),
        _ => None,
    }
}

/// `META` key of the dictionary writes use: its id (u32 BE) and the share of its size its
/// sample was stored in (f64 BE), which tells when it has gone stale.
const CURRENT_DICTIONARY: &str = "current_payload_dictionary";

fn encode_current(id: u32, sample_share: f64) -> [u8; 12] {
    let mut v = [0; 12];
    v[..4].copy_from_slice(&id.to_be_bytes());
    v[4..].copy_from_slice(&sample_share.to_be_bytes());
    v
}

fn decode_current(value: &[u8]) -> Result<(u32, f64), StoreError> {
    let corrupt = || StoreError::Corrupt("the current payload dictionary".into());
    let (id, share) = value.split_first_chunk::<4>().ok_or_else(corrupt)?;
    let share: [u8; 8] = share.try_into().map_err(|_| corrupt())?;
    Ok((u32::from_be_bytes(*id), f64::from_be_bytes(share)))
}

impl PayloadDictionaries for RedbStore {
    fn dictionary_due(&self) -> bool {
        self.codec.due()
    }

    /// Reads its sample from a snapshot and writes one small transaction.
    fn train_dictionary(&self) -> Result<Option<TrainedDictionary>, StoreError> {
        self.codec.plain_since_attempt.store(0, Ordering::Relaxed);
        let samples = self.payload_sample()?;
        let sample_bytes: usize = samples.iter().map(Vec::len).sum();
        if sample_bytes < MIN_SAMPLE_BYTES {
            return Ok(None);
        }
        let size = (sample_bytes / 16).clamp(DICT_BYTES.0, DICT_BYTES.1);
        let bytes = zstd::dict::from_samples(&samples, size).map_err(|err| {
            StoreError::Backend(format!("training a payload dictionary: {err}").into())
        })?;
        let id = zstd_safe::get_dict_id_from_dict(&bytes)
            .ok_or_else(|| StoreError::Backend("the trained dictionary has no id".into()))?
            .get();
        let sample_share = {
            let dict = cdict(&bytes)?;
            let mut cctx = CCtx::try_create().ok_or_else(|| no_memory("a compression context"))?;
            let mut out = Vec::new();
            let mut stored = 0;
            for sample in &samples {
                out.clear();
                out.resize(zstd_safe::compress_bound(sample.len()), 0);
                stored += cctx
                    .compress_using_cdict(out.as_mut_slice(), sample, &dict)
                    .unwrap_or(sample.len());
            }
            stored as f64 / sample_bytes as f64
        };
        let txn = self.write()?;
        {
            let mut table = txn.open_table(PAYLOAD_DICTIONARIES)?;
            let same = match table.get(id)? {
                // The same sample trains the same dictionary (a compaction of a store whose
                // records have not changed): it becomes current again.
                Some(stored) if stored.value() == bytes.as_slice() => true,
                // Another dictionary under the id: the store keeps the one it has.
                Some(_) => {
                    return Err(StoreError::Backend(
                        format!("payload dictionary id {id} is taken").into(),
                    ));
                }
                None => false,
            };
            if !same {
                table.insert(id, bytes.as_slice())?;
            }
            txn.open_table(super::META)?.insert(
                CURRENT_DICTIONARY,
                encode_current(id, sample_share).as_slice(),
            )?;
        }
        txn.commit()?;
        self.codec.install(id, &bytes, sample_share)?;
        Ok(Some(TrainedDictionary {
            id,
            bytes: bytes.len(),
            sample_records: samples.len(),
            sample_bytes,
            sample_share,
        }))
    }
}

/// Records looked at per transaction of [`RedbStore::compress_plain_records`].
const RECOMPRESS_CHUNK: usize = 2_000;

/// What [`RedbStore::recompress_records`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recompressed {
    /// Records stored anew (compressed with the new dictionary, or plain).
    pub records: u64,
    /// Dictionaries removed: no record names them any more.
    pub dictionaries_removed: usize,
}

impl RedbStore {
    /// What `intake compact` does first, on a stopped server: trains a dictionary afresh on
    /// the records the store holds now (none while they are too few to learn from), stores
    /// every record that is not compressed with it anew (compressed with it, or plain where it
    /// would not shrink one or there is none), a transaction per [`RECOMPRESS_CHUNK`] records,
    /// and then removes every other dictionary, which no record names any more. A dictionary
    /// holds pieces of the records it was trained on, so this is what takes the pieces of
    /// records deleted since (a purged endpoint's) out of the store; it also compresses the
    /// records written before the store had a dictionary.
    pub fn recompress_records(&self) -> Result<Recompressed, StoreError> {
        let current = self.train_dictionary()?.map(|trained| trained.id);
        if current.is_none() {
            self.codec.uninstall();
        }
        let mut rewritten = 0;
        let mut from = (0u64, 0u128);
        loop {
            let txn = self.write()?;
            let mut records = txn.open_table(RECORDS)?;
            let mut stale = Vec::new();
            let mut next = None;
            let mut scratch = Vec::new();
            for (scanned, entry) in records.range(from..)?.enumerate() {
                let (key, value) = entry?;
                if scanned == RECOMPRESS_CHUNK {
                    next = Some(key.value());
                    break;
                }
                if dictionary_of(value.value()) != current {
                    let (time, payload) = self.codec.decode(value.value(), &mut scratch)?;
                    stale.push((key.value(), time, payload.to_vec()));
                }
            }
            for (key, time, payload) in stale {
                let value = self.codec.encode(time, &payload)?;
                records.insert(key, value.as_slice())?;
                rewritten += 1;
            }
            drop(records);
            txn.commit()?;
            match next {
                Some(key) => from = key,
                None => break,
            }
        }
        let txn = self.write()?;
        let removed = {
            let mut table = txn.open_table(PAYLOAD_DICTIONARIES)?;
            let ids: Vec<u32> = table
                .iter()?
                .map(|entry| entry.map(|(id, _)| id.value()))
                .collect::<Result<_, _>>()?;
            let others: Vec<u32> = ids.into_iter().filter(|id| Some(*id) != current).collect();
            for id in &others {
                table.remove(id)?;
            }
            if current.is_none() {
                txn.open_table(super::META)?.remove(CURRENT_DICTIONARY)?;
            }
            others.len()
        };
        txn.commit()?;
        Ok(Recompressed {
            records: rewritten,
            dictionaries_removed: removed,
        })
    }

    /// The newest payloads of each endpoint, in turn, up to [`SAMPLE_RECORDS`] and
    /// [`SAMPLE_BYTES`]; none of a deleted endpoint (its purge may not have reached them yet).
    fn payload_sample(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        let txn = self.db.begin_read()?;
        let records = txn.open_table(RECORDS)?;
        let endpoints = txn.open_table(ENDPOINTS)?;
        let mut partitions = Vec::new();
        for partition in partitions_of(&records)? {
            let deleted = match endpoints.get(partition_endpoint(partition))? {
                Some(row) => from_json::<EndpointRow>(row.value())?.deleted_at.is_some(),
                None => false,
            };
            if deleted {
                continue;
            }
            partitions.push(
                records
                    .range((partition, 0u128)..=(partition, u128::MAX))?
                    .rev(),
            );
        }
        let mut samples = Vec::new();
        let mut bytes = 0;
        let mut scratch = Vec::new();
        while !partitions.is_empty() {
            let mut exhausted = Vec::new();
            for (at, newest_first) in partitions.iter_mut().enumerate() {
                if samples.len() >= SAMPLE_RECORDS || bytes >= SAMPLE_BYTES {
                    return Ok(samples);
                }
                match newest_first.next() {
                    Some(entry) => {
                        let (_, value) = entry?;
                        let (_, payload) = self.codec.decode(value.value(), &mut scratch)?;
                        bytes += payload.len();
                        samples.push(payload.to_vec());
                    }
                    None => exhausted.push(at),
                }
            }
            for at in exhausted.into_iter().rev() {
                drop(partitions.remove(at));
            }
        }
        Ok(samples)
    }
}

fn cdict(bytes: &[u8]) -> Result<CDict<'static>, StoreError> {
    CDict::try_create(bytes, LEVEL).ok_or_else(|| no_memory("a compression dictionary"))
}

fn ddict(bytes: &[u8]) -> Result<DDict<'static>, StoreError> {
    DDict::try_create(bytes).ok_or_else(|| no_memory("a decompression dictionary"))
}

fn no_memory(what: &str) -> StoreError {
    StoreError::Backend(format!("zstd could not allocate {what}").into())
}

#[cfg(test)]
mod tests {
    use std::ops::Bound;

    use super::*;
    use crate::core::ids::RecordId;
    use crate::store::Store;
    use crate::store::records::{RecordWrite, RecordsStore, ScanOrder, plain_batch};

    const AT: Timestamp = Timestamp(1_795_000_000_123_456);

    /// A varied ~700-byte JSON record: shared keys and shape, different values.
    fn payload(n: u64) -> Vec<u8> {
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

    fn create_records(store: &RedbStore, partition: u64, from: u64, count: u64) {
        let writes: Vec<RecordWrite> = (from..from + count)
            .map(|n| RecordWrite::Create {
                partition,
                id: RecordId(((AT.as_micros() as u128 + u128::from(n)) << 64) | 1),
                payload: payload(n),
                idempotency: None,
            })
            .collect();
        store.apply_batch(&plain_batch(&writes)).unwrap();
    }

    /// Every record of `partition`, oldest first, as `(seq, payload)`, read through the store.
    fn read_all(store: &RedbStore, partition: u64) -> Vec<Vec<u8>> {
        let mut all = Vec::new();
        Store::read(store)
            .unwrap()
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

    fn stored_bytes(store: &RedbStore, partition: u64) -> (usize, usize) {
        let txn = store.db.begin_read().unwrap();
        let records = txn.open_table(RECORDS).unwrap();
        let (mut compressed, mut plain) = (0, 0);
        for entry in records
            .range((partition, 0u128)..=(partition, u128::MAX))
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
        create_records(&store, 7, 0, 20);
        assert!(store.dictionary_due());
        // 20 records are too few bytes to learn from: nothing changes.
        assert_eq!(store.train_dictionary().unwrap(), None);
        assert_eq!(stored_bytes(&store, 7).0, 0);

        create_records(&store, 7, 20, 380);
        create_records(&store, 9, 0, 100);
        let trained = store
            .train_dictionary()
            .unwrap()
            .expect("enough to learn from");
        assert!(trained.sample_share < 0.5, "{trained:?}");
        assert_eq!(trained.sample_records, 500, "both endpoints are sampled");
        assert!(!store.dictionary_due());

        create_records(&store, 7, 400, 200);
        let (compressed, plain) = stored_bytes(&store, 7);
        let new_payload: usize = (400..600).map(|n| payload(n).len()).sum();
        assert!(
            compressed * 2 < new_payload,
            "{compressed} bytes stored for {new_payload}"
        );
        assert!(plain > 0, "records from before the dictionary stay plain");
        let expected: Vec<Vec<u8>> = (0..600).map(payload).collect();
        assert!(read_all(&store, 7) == expected);

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
        create_records(&store, 7, 600, 10);
        let expected: Vec<Vec<u8>> = (0..610).map(payload).collect();
        assert!(read_all(&store, 7) == expected);
        assert_eq!(store.gauges(Timestamp(0)).unwrap().payload_dictionaries, 1);
    }

    /// The ids and bytes of the store's dictionaries.
    fn dictionaries(store: &RedbStore) -> Vec<(u32, Vec<u8>)> {
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
    fn deleted_endpoint(store: &RedbStore, partition: u64) {
        let id = partition_endpoint(partition);
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

    fn deleted_partition(store: &RedbStore, partition: u64) {
        let txn = store.db.begin_write().unwrap();
        {
            let mut records = txn.open_table(RECORDS).unwrap();
            let keys: Vec<(u64, u128)> = records
                .range((partition, 0u128)..=(partition, u128::MAX))
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
        assert_eq!(store.recompress_records().unwrap(), nothing);
        // More records than one transaction of the rewrite takes, all stored plain.
        let count = RECOMPRESS_CHUNK as u64 + 300;
        create_records(&store, 4, 0, count);
        let (compressed, plain) = stored_bytes(&store, 4);
        assert_eq!(compressed, 0);
        let done = store.recompress_records().unwrap();
        assert_eq!(done.records, count);
        let (compressed, left_plain) = stored_bytes(&store, 4);
        assert_eq!(left_plain, 0);
        assert!(compressed * 2 < plain, "{plain} bytes became {compressed}");
        let expected: Vec<Vec<u8>> = (0..count).map(payload).collect();
        assert!(read_all(&store, 4) == expected);

        // Another endpoint's records, with a word of their own, are learnt (and written with)
        // and then deleted: the next compaction trains on what is left, rewrites every record
        // and removes the dictionaries that held pieces of the deleted ones.
        let secret = b"zebra-crossing-secret";
        let writes: Vec<RecordWrite> = (0..400u64)
            .map(|n| RecordWrite::Create {
                partition: 6,
                id: RecordId(((AT.as_micros() as u128 + u128::from(n)) << 64) | 2),
                payload: format!(
                    r#"{{"zebra-crossing-secret":{n},"pad":"{}"}}"#,
                    "z".repeat(900)
                )
                .into_bytes(),
                idempotency: None,
            })
            .collect();
        store.apply_batch(&plain_batch(&writes)).unwrap();
        store.train_dictionary().unwrap().expect("trained");
        assert!(
            dictionaries(&store)
                .iter()
                .any(|(_, bytes)| bytes.windows(secret.len()).any(|w| w == secret)),
            "the dictionary learnt the other endpoint's records"
        );
        create_records(&store, 4, count, 100);
        // Deleted, not purged yet: a dictionary trained now leaves its records out.
        deleted_endpoint(&store, 6);
        store.train_dictionary().unwrap().expect("trained");
        let current = store.codec.current_id();
        assert!(
            dictionaries(&store)
                .iter()
                .all(|(id, bytes)| Some(*id) != current
                    || !bytes.windows(secret.len()).any(|w| w == secret))
        );
        deleted_partition(&store, 6);
        let done = store.recompress_records().unwrap();
        assert_eq!((done.records, done.dictionaries_removed), (count + 100, 2));
        let left = dictionaries(&store);
        assert_eq!(left.len(), 1);
        assert_eq!(Some(left[0].0), store.codec.current_id());
        assert!(!left[0].1.windows(secret.len()).any(|w| w == secret));
        let expected: Vec<Vec<u8>> = (0..count + 100).map(payload).collect();
        assert!(read_all(&store, 4) == expected);
        // Nothing changed since: the same dictionary, nothing to do.
        assert_eq!(store.recompress_records().unwrap(), nothing);

        // Too little left to learn from: every record plain, no dictionary kept.
        deleted_partition(&store, 4);
        create_records(&store, 4, 0, 3);
        let done = store.recompress_records().unwrap();
        assert_eq!((done.records, done.dictionaries_removed), (3, 1));
        assert!(dictionaries(&store).is_empty());
        assert_eq!(stored_bytes(&store, 4).0, 0);
        assert!(read_all(&store, 4) == (0..3).map(payload).collect::<Vec<_>>());
    }

    #[test]
    fn a_store_with_records_and_no_dictionary_wants_one_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("intake.redb");
        let store = RedbStore::open(&path, 1 << 20).unwrap();
        create_records(&store, 3, 0, 5);
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
}
