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
//! out deleted endpoints' records. Each record names the dictionary it needs, so a dictionary
//! is only removed once every record is stored anew with another.
//!
//! A dictionary holds pieces of the records it was trained on, so it outlives their deletion.
//! Beside it, `DICTIONARY_SAMPLES` keeps what its sample could have held ([`DictionarySample`]),
//! which tells whether an erased record may be in it. An erasure takes such pieces out by
//! patching the dictionary (`patch`: the bytes no record the store keeps shares are zeroed, and
//! only the records that read differently with the patched one are stored anew);
//! [`RedbStore::recompress_records`] replaces them all: it trains a dictionary afresh on the
//! records the store holds then, stores every record anew with it and removes the others, in
//! `intake compact`, or in an erasure where a dictionary has no sample recorded.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock, Weak};

use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableError};
use zstd::zstd_safe::{self, CCtx, CDict, DCtx, DDict};

mod patch;
mod recompress;
mod training;

use training::DictionarySample;

use super::{DICTIONARY_SAMPLES, PAYLOAD_DICTIONARIES, RECORDS, RedbStore, from_json};
use crate::core::clock::Timestamp;
use crate::store::compression::Recompressed;
use crate::store::{Partition, StoreError};

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
    dict: Arc<CDict<'static>>,
    /// Stored bytes per payload byte of the sample it was trained on.
    sample_share: f64,
    /// While a patch of this dictionary is under way, or readers may still decode its values
    /// with what it held before: each value is decoded with that too, and stored plain where it
    /// reads differently, so that every value naming the dictionary reads the same with both.
    unpatched: Option<Unpatched>,
}

impl Encoder {
    /// This encoder with `dict` and `unpatched` instead.
    fn with(&self, dict: Arc<CDict<'static>>, unpatched: Option<Unpatched>) -> Arc<Encoder> {
        Arc::new(Encoder {
            id: self.id,
            dict,
            sample_share: self.sample_share,
            unpatched,
        })
    }
}

/// A dictionary the store holds, as readers decode with it.
struct Decoder {
    ddict: Arc<DDict<'static>>,
    /// What it held before a patch, while a snapshot that began before the patch may read a
    /// value only that reads right.
    unpatched: Option<Unpatched>,
}

/// A dictionary's content from before a patch (see `patch`). Every value that names the
/// dictionary reads right with it: those compressed before the patch were compressed with it,
/// and those compressed with the patched one since were checked against it
/// ([`Encoder::unpatched`]); the patched one reads right only the values the store holds
/// after the patch. So readers decode with it for as long as a snapshot from before may read.
#[derive(Clone)]
struct Unpatched {
    ddict: Arc<DDict<'static>>,
    /// The epoch the patch's commit ended: once no snapshot pins it, nothing reads a value
    /// from before. `None` while the patch is under way.
    ended: Option<Weak<Epoch>>,
}

impl Unpatched {
    fn live(&self) -> bool {
        self.ended
            .as_ref()
            .is_none_or(|epoch| epoch.strong_count() > 0)
    }
}

/// Encodes and decodes record values; holds the store's dictionaries.
pub struct PayloadCodec {
    encoder: RwLock<Option<Arc<Encoder>>>,
    /// The dictionaries the store holds.
    decoders: RwLock<HashMap<u32, Decoder>>,
    /// The epoch read snapshots beginning now pin (see [`PayloadCodec::pin`]).
    epoch: RwLock<Arc<Epoch>>,
    /// The epochs ended by removals, while a snapshot pins them: where a dictionary the store
    /// no longer holds is found.
    ended: Mutex<Vec<Weak<Epoch>>>,
    /// Held by whoever trains or replaces dictionaries: one at a time, so the dictionary a
    /// replacement trains stays the one writes use until it has removed the others.
    training: Mutex<()>,
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
            decoders.insert(
                *id,
                Decoder {
                    ddict: Arc::new(ddict(bytes)?),
                    unpatched: None,
                },
            );
        }
        if let Some((id, bytes)) = dictionaries.last() {
            encoder = Some(Arc::new(Encoder {
                id: *id,
                dict: Arc::new(cdict(bytes)?),
                sample_share,
                unpatched: None,
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
            epoch: RwLock::new(Arc::new(Epoch::default())),
            ended: Mutex::new(Vec::new()),
            training: Mutex::new(()),
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
                    if head + n <= payload.len() - payload.len() / 8
                        && self.reads_alike_unpatched(encoder, &v[head..head + n], payload)?
                    {
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
            .decoder(id.get())
            .ok_or_else(|| corrupt(&format!("its dictionary {id} is not in the store")))?;
        self.decompress(payload, &ddict, scratch)?;
        Ok((updated_at, scratch.as_slice()))
    }

    /// Decompresses `frame` with `ddict` into `out`.
    fn decompress(
        &self,
        frame: &[u8],
        ddict: &DDict<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), StoreError> {
        let corrupt = |what: &str| StoreError::Corrupt(format!("record value: {what}"));
        let len = match zstd_safe::get_frame_content_size(frame) {
            Ok(Some(len)) if len <= MAX_PAYLOAD => len as usize,
            _ => return Err(corrupt("its frame has no valid length")),
        };
        out.clear();
        out.resize(len, 0);
        let mut dctx = match self
            .dctxs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
        {
            Some(dctx) => dctx,
            None => DCtx::try_create().ok_or_else(|| no_memory("a decompression context"))?,
        };
        let result = dctx.decompress_using_ddict(out.as_mut_slice(), frame, ddict);
        self.dctxs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(dctx);
        match result {
            Ok(n) if n == len => Ok(()),
            _ => Err(corrupt("its compressed payload does not decompress")),
        }
    }

    /// Whether `frame`, just compressed by `encoder` from `payload`, reads as `payload` with
    /// what the encoder's dictionary held before a patch, as long as readers may use that
    /// ([`Encoder::unpatched`]). Lets go of that content once nothing reads with it.
    fn reads_alike_unpatched(
        &self,
        encoder: &Encoder,
        frame: &[u8],
        payload: &[u8],
    ) -> Result<bool, StoreError> {
        match &encoder.unpatched {
            None => Ok(true),
            Some(unpatched) if unpatched.live() => {
                let mut out = Vec::new();
                Ok(self.decompress(frame, &unpatched.ddict, &mut out).is_ok() && out == payload)
            }
            Some(_) => {
                self.settle();
                Ok(true)
            }
        }
    }

    /// The dictionary `id`: one the store holds, or one removed since a snapshot that may
    /// still read records compressed with it began.
    fn decoder(&self, id: u32) -> Option<Arc<DDict<'static>>> {
        let mut settle = false;
        let held = self
            .decoders
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .map(|decoder| match &decoder.unpatched {
                Some(unpatched) if unpatched.live() => unpatched.ddict.clone(),
                Some(_) => {
                    settle = true;
                    decoder.ddict.clone()
                }
                None => decoder.ddict.clone(),
            });
        if settle {
            self.settle();
        }
        held.or_else(|| {
            self.ended
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .filter_map(Weak::upgrade)
                .find_map(|epoch| epoch.end.get()?.removed.get(&id).cloned())
        })
    }

    /// Keeps in memory, for as long as the pin lives, every dictionary removed from now on.
    /// Taken before a read snapshot begins: a dictionary removed after the snapshot began may
    /// still compress records it reads, and one removed before it did compresses none (the
    /// removal's commit comes after every record is stored anew, and [`PayloadCodec::forget`]
    /// after that commit).
    pub(super) fn pin(&self) -> DictionaryPin {
        DictionaryPin {
            _epoch: self
                .epoch
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }

    /// Forgets the dictionaries `ids`, after the commit that removed them from the store: they
    /// go from memory with the last snapshot that began before it.
    fn forget(&self, ids: &[u32]) {
        if ids.is_empty() {
            return;
        }
        // What readers decode each with now: what it held before a patch, while that may be
        // read, reads every value naming it right.
        let removed: HashMap<u32, Arc<DDict<'static>>> = ids
            .iter()
            .filter_map(|id| Some((*id, self.decoder(*id)?)))
            .collect();
        self.end_epoch(removed);
        // Only now: a reader that no longer finds one among the held finds it in the epoch
        // just ended.
        let mut held = self
            .decoders
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        for id in ids {
            held.remove(id);
        }
    }

    /// Ends the current epoch, with the dictionaries `removed` by the commit just made; returns
    /// it, which lives as long as a snapshot that began in it (or before).
    fn end_epoch(&self, removed: HashMap<u32, Arc<DDict<'static>>>) -> Weak<Epoch> {
        let mut epoch = self.epoch.write().unwrap_or_else(PoisonError::into_inner);
        let next = Arc::new(Epoch::default());
        // Only here, under the epoch's write lock, is an epoch ended, and only the current
        // one: it has no end yet.
        let _ = epoch.end.set(EpochEnd {
            removed,
            _next: next.clone(),
        });
        let ended = Arc::downgrade(&epoch);
        let mut ended_list = self.ended.lock().unwrap_or_else(PoisonError::into_inner);
        ended_list.retain(|epoch| epoch.strong_count() > 0);
        ended_list.push(ended.clone());
        *epoch = next;
        ended
    }

    /// Lets go of what dictionaries held before a patch once no snapshot from before it is
    /// left: readers decode with the patched ones, and writes no longer check against it.
    fn settle(&self) {
        let dead = |unpatched: &Option<Unpatched>| unpatched.as_ref().is_some_and(|u| !u.live());
        for decoder in self
            .decoders
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .values_mut()
        {
            if dead(&decoder.unpatched) {
                decoder.unpatched = None;
            }
        }
        let mut encoder = self.encoder.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(current) = encoder.as_ref()
            && dead(&current.unpatched)
        {
            *encoder = Some(current.with(current.dict.clone(), None));
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
            dict: Arc::new(cdict(bytes)?),
            sample_share,
            unpatched: None,
        });
        self.decoders
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                id,
                Decoder {
                    ddict: Arc::new(ddict(bytes)?),
                    unpatched: None,
                },
            );
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

/// The time between two removals of dictionaries. A read snapshot pins the one it began in
/// ([`PayloadCodec::pin`]), which keeps the dictionaries removed at its end, and at every
/// later one, in memory.
#[derive(Default)]
struct Epoch {
    end: OnceLock<EpochEnd>,
}

struct EpochEnd {
    /// The dictionaries removed.
    removed: HashMap<u32, Arc<DDict<'static>>>,
    /// The epoch after, kept with this one: a snapshot that pins this one may need what later
    /// removals take too.
    _next: Arc<Epoch>,
}

/// A read snapshot's hold on the dictionaries removed after it began (see
/// [`PayloadCodec::pin`]).
pub struct DictionaryPin {
    _epoch: Arc<Epoch>,
}

/// The dictionary a record value is compressed with; `None` for a plain value (or one whose
/// frame names none, which decoding reports).
fn dictionary_of(value: &[u8]) -> Option<u32> {
    frame_of(value)
        .and_then(zstd_safe::get_dict_id_from_frame)
        .map(|id| id.get())
}

/// The compressed frame of a record value, `None` for a plain one.
fn frame_of(value: &[u8]) -> Option<&[u8]> {
    match value.split_first() {
        Some((&COMPRESSED, rest)) => rest.get(8..),
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
pub(super) mod tests;
