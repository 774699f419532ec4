//! Patching a dictionary: taking out of it what only erased records held, and storing anew
//! only the few records that read differently without it.
//!
//! A dictionary's content is pieces of the records of its sample (zstd's trainer picks segments
//! that recur among them), after a header of statistics (its id, entropy tables and repeat
//! offsets) that holds no text. [`patched`] zeroes each byte of the content that lies in no run
//! of [`KEPT_RUN`] bytes that a record of the sample the store still holds has too, and every
//! occurrence of the erased text; the header stays. A value compressed with the dictionary
//! reads differently with the patched one only where it copied a zeroed byte: after erasing
//! 10,000 of 1,000,000 records of the search benchmark's generator (one address in each), 170
//! of the dictionary's 61,877 bytes were zeroed and 0.4 % of the other records read
//! differently; a run of 12 bytes zeroed 247 and made 5 % differ, one of 16, 22 %. Records
//! compressed with the patched dictionary are as small as with the whole one (the zeroed bytes
//! were pieces only the erased records shared).
//!
//! [`RedbStore::take_out_erased`] patches a dictionary in place, under its id, so no value
//! naming it has to be rewritten for its id:
//! 1. writes compress with the patched content from then on, each value checked to read the
//!    same with the content from before (stored plain where not, which a JSON text, free of
//!    NUL bytes, never needs: it cannot copy a zeroed byte);
//! 2. every record naming the dictionary is decoded with both contents, and those that differ
//!    are stored anew (compressed with the patched one, checked the same way);
//! 3. one commit puts the patched content in the store in place of the other. Every value
//!    naming the dictionary then reads the same with both, so the content from before stays
//!    what readers decode with while a snapshot from before the commit may read (one of them
//!    reads the values step 2 replaced), and writes stay checked against it until then
//!    ([`Unpatched`]).
//!
//! A crash before step 3 leaves the content from before in the store, which reads every value
//! right; the erasure, resumed, patches again.

use super::*;
use crate::store::compression::TakenOut;

/// Bytes of a dictionary's content survive a patch only inside a run of this many that a kept
/// record of its sample holds too.
const KEPT_RUN: usize = 8;

/// Kept records of a sample read to patch its dictionary, at most: a sample takes at most
/// [`SAMPLE_RECORDS`], but its ranges of ids may hold more after a training that merged two.
const KEPT_RECORDS: usize = SAMPLE_RECORDS * 4;

/// `dictionary` with every byte of its content zeroed that lies in no run of [`KEPT_RUN`]
/// bytes found in one of `kept`, and every byte of each occurrence of `erased` (ASCII letters
/// in either case). Its header (id, entropy tables) stays as it is.
pub(super) fn patched(
    dictionary: &[u8],
    kept: &[Vec<u8>],
    erased: &[u8],
) -> Result<Vec<u8>, StoreError> {
    let start = content_start(dictionary)?;
    let content = &dictionary[start..];
    let mut covered = vec![false; content.len()];
    if content.len() >= KEPT_RUN {
        // Every run of the content, with where it starts, sorted to be looked up.
        let mut runs: Vec<(u64, u32)> = content
            .windows(KEPT_RUN)
            .enumerate()
            .map(|(at, run)| (run_key(run), at as u32))
            .collect();
        runs.sort_unstable();
        for record in kept {
            for run in record.windows(KEPT_RUN) {
                let key = run_key(run);
                let first = runs.partition_point(|(k, _)| *k < key);
                for &(_, at) in runs[first..].iter().take_while(|(k, _)| *k == key) {
                    let at = at as usize;
                    covered[at..at + KEPT_RUN].fill(true);
                }
            }
        }
    }
    if !erased.is_empty() && erased.len() <= content.len() {
        for at in 0..=content.len() - erased.len() {
            if content[at..at + erased.len()].eq_ignore_ascii_case(erased) {
                covered[at..at + erased.len()].fill(false);
            }
        }
    }
    let mut out = dictionary.to_vec();
    for (byte, covered) in out[start..].iter_mut().zip(covered) {
        if !covered {
            *byte = 0;
        }
    }
    Ok(out)
}

fn run_key(run: &[u8]) -> u64 {
    let mut key = [0; KEPT_RUN];
    key.copy_from_slice(run);
    u64::from_le_bytes(key)
}

/// Where a dictionary's content begins, after its header.
fn content_start(dictionary: &[u8]) -> Result<usize, StoreError> {
    // SAFETY: ZDICT_getDictHeaderSize reads at most `dictionary.len()` bytes from the pointer
    // (zdict.h), and keeps neither; the slice outlives the call. zstd-safe has no wrapper.
    let size =
        unsafe { zstd_sys::ZDICT_getDictHeaderSize(dictionary.as_ptr().cast(), dictionary.len()) };
    // SAFETY: a pure function of its argument.
    if unsafe { zstd_sys::ZDICT_isError(size) } != 0 || size > dictionary.len() {
        return Err(StoreError::Corrupt(
            "a payload dictionary's header does not parse".into(),
        ));
    }
    Ok(size)
}

/// A dictionary of the store that may hold an erased record, with what its sample was.
pub(super) struct Meeting {
    id: u32,
    bytes: Vec<u8>,
    /// `None`: trained by an intake that recorded no samples, it may hold anything.
    sample: Option<DictionarySample>,
}

impl RedbStore {
    /// Takes out of every dictionary whose sample may have held an erased record (one of
    /// `partition` with an id in `ids`, inclusive) what only erased records held: the bytes
    /// that no record it keeps of that sample shares, and every occurrence of `erased` (the
    /// erasure's query); see the module's documentation. Where a dictionary was trained before
    /// samples were recorded, it replaces them all instead ([`RedbStore::recompress_records`]).
    /// Waits for a training under way: its sample may have been read before the records were
    /// erased, and its dictionary not committed yet.
    pub fn take_out_erased(
        &self,
        partition: Partition,
        ids: (u128, u128),
        erased: &str,
        now: Timestamp,
    ) -> Result<TakenOut, StoreError> {
        let _training = self
            .codec
            .training
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let meeting = self.dictionaries_meeting(partition, ids)?;
        if meeting.iter().any(|held| held.sample.is_none()) {
            return Ok(TakenOut::Replaced(self.replace_all(now)?));
        }
        let mut taken = TakenOut::Nothing;
        for held in meeting {
            let Some(sample) = &held.sample else { continue };
            let kept = self.kept_of(sample)?;
            let patched = patched(&held.bytes, &kept, erased.as_bytes())?;
            let zeroed = held
                .bytes
                .iter()
                .zip(&patched)
                .filter(|(was, now)| was != now)
                .count();
            if zeroed == 0 {
                continue;
            }
            let records = self.patch_dictionary(held.id, &patched)?;
            taken = taken.and_patched(zeroed, records);
        }
        Ok(taken)
    }

    /// The dictionaries of the store whose sample may have held a record of `partition` with
    /// an id in `ids`: its sample took records of that partition in a range of ids that meets
    /// `ids`, or it was trained before samples were recorded.
    pub(super) fn dictionaries_meeting(
        &self,
        partition: Partition,
        ids: (u128, u128),
    ) -> Result<Vec<Meeting>, StoreError> {
        let txn = self.read()?;
        let samples = txn.open_table(DICTIONARY_SAMPLES)?;
        let mut meeting = Vec::new();
        for entry in txn.open_table(PAYLOAD_DICTIONARIES)?.iter()? {
            let (id, bytes) = entry?;
            let sample = match samples.get(id.value())? {
                Some(sample) => Some(from_json::<DictionarySample>(sample.value())?),
                None => None,
            };
            if sample
                .as_ref()
                .is_none_or(|sample| sample.meets(partition, ids))
            {
                meeting.push(Meeting {
                    id: id.value(),
                    bytes: bytes.value().to_vec(),
                    sample,
                });
            }
        }
        Ok(meeting)
    }

    /// The payloads of the records the store still holds among those `sample` may have taken.
    fn kept_of(&self, sample: &DictionarySample) -> Result<Vec<Vec<u8>>, StoreError> {
        let txn = self.read()?;
        let records = txn.open_table(RECORDS)?;
        let mut kept = Vec::new();
        let mut scratch = Vec::new();
        for sampled in &sample.partitions {
            let raw = sampled.partition.raw();
            for entry in records
                .range((raw, sampled.lowest)..=(raw, sampled.highest))?
                .rev()
            {
                if kept.len() == KEPT_RECORDS {
                    return Ok(kept);
                }
                let (_, value) = entry?;
                kept.push(self.codec.decode(value.value(), &mut scratch)?.1.to_vec());
            }
        }
        Ok(kept)
    }

    /// Puts `patched` in place of dictionary `id`'s content (steps 1-3 of the module's
    /// documentation); returns how many records were stored anew.
    fn patch_dictionary(&self, id: u32, patched: &[u8]) -> Result<u64, StoreError> {
        let before = self
            .codec
            .decoder(id)
            .ok_or_else(|| StoreError::Corrupt(format!("payload dictionary {id} is missing")))?;
        let after = Arc::new(ddict(patched)?);
        let previous = self.codec.begin_patch(id, patched, &before)?;
        let stored = (|| -> Result<u64, StoreError> {
            // Every write begun before the patched content was installed has committed once
            // the lock is free: the scan below sees its record.
            self.write()?.abort()?;
            let (mut was, mut now) = (Vec::new(), Vec::new());
            let stored = self.store_anew(&mut |value| {
                let Some(frame) = frame_of(value).filter(|_| dictionary_of(value) == Some(id))
                else {
                    return false;
                };
                // A value that does not read now is left as it is: it reads no worse.
                if self.codec.decompress(frame, &before, &mut was).is_err() {
                    return false;
                }
                self.codec.decompress(frame, &after, &mut now).is_err() || was != now
            })?;
            let txn = self.write()?;
            txn.open_table(PAYLOAD_DICTIONARIES)?.insert(id, patched)?;
            txn.commit()?;
            Ok(stored)
        })();
        match stored {
            Ok(stored) => {
                self.codec.end_patch(id, after, before);
                Ok(stored)
            }
            Err(err) => {
                self.codec.abandon_patch(id, previous);
                Err(err)
            }
        }
    }
}

impl PayloadCodec {
    /// Step 1 of a patch of dictionary `id`: if writes use it, they compress with the
    /// `patched` content from now on, each value checked against `before`. Returns the encoder
    /// from before, for [`PayloadCodec::abandon_patch`].
    fn begin_patch(
        &self,
        id: u32,
        patched: &[u8],
        before: &Arc<DDict<'static>>,
    ) -> Result<Option<Arc<Encoder>>, StoreError> {
        let mut encoder = self.encoder.write().unwrap_or_else(PoisonError::into_inner);
        let previous = encoder.clone();
        if let Some(current) = previous.as_ref().filter(|current| current.id == id) {
            *encoder = Some(current.with(
                Arc::new(cdict(patched)?),
                Some(Unpatched {
                    ddict: before.clone(),
                    ended: None,
                }),
            ));
        }
        Ok(previous)
    }

    /// After the commit of a patch of dictionary `id`: readers decode with `after` once no
    /// snapshot from before the commit is left, and with `before` until then.
    fn end_patch(&self, id: u32, after: Arc<DDict<'static>>, before: Arc<DDict<'static>>) {
        let unpatched = Unpatched {
            ddict: before,
            ended: Some(self.end_epoch(HashMap::new())),
        };
        self.decoders
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                id,
                Decoder {
                    ddict: after,
                    unpatched: Some(unpatched.clone()),
                },
            );
        let mut encoder = self.encoder.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(current) = encoder.as_ref().filter(|current| current.id == id) {
            *encoder = Some(current.with(current.dict.clone(), Some(unpatched)));
        }
    }

    /// A patch that failed before its commit: writes use the encoder from before it again
    /// (the values compressed meanwhile read right with it, which they were checked against).
    fn abandon_patch(&self, id: u32, previous: Option<Arc<Encoder>>) {
        let mut encoder = self.encoder.write().unwrap_or_else(PoisonError::into_inner);
        if encoder.as_ref().is_some_and(|current| current.id == id) {
            *encoder = previous;
        }
    }
}

#[cfg(test)]
mod tests;
