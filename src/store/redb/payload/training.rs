//! Training a dictionary: a sample of the newest records of each endpoint, zstd's trainer,
//! and what the sample could have held ([`DictionarySample`]), which tells an erasure whether
//! the dictionary may hold one of its records.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::*;
use crate::store::EndpointRow;
use crate::store::compression::{PayloadDictionaries, TakenOut, TrainedDictionary};
use crate::store::redb::{ENDPOINTS, partitions_of, to_json};

/// What a dictionary's sample could have held (a `DICTIONARY_SAMPLES` row).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct DictionarySample {
    /// When it was trained (last, when the same sample trained it again).
    pub(super) trained_at: Timestamp,
    /// Each partition sampled, in order.
    pub(super) partitions: Vec<SampledIds>,
}

/// The lowest and highest record id sampled from one partition. A partition's newest records
/// are sampled, so every record it held then between the two may be in the dictionary.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(super) struct SampledIds {
    pub(super) partition: Partition,
    pub(super) lowest: u128,
    pub(super) highest: u128,
}

impl DictionarySample {
    pub(super) fn meets(&self, partition: Partition, ids: (u128, u128)) -> bool {
        self.partitions.iter().any(|sampled| {
            sampled.partition == partition && sampled.lowest <= ids.1 && ids.0 <= sampled.highest
        })
    }

    /// Widens each partition's range by `other`'s, and adds its other partitions.
    fn merge(&mut self, other: &DictionarySample) {
        for theirs in &other.partitions {
            match self
                .partitions
                .iter_mut()
                .find(|ours| ours.partition == theirs.partition)
            {
                Some(ours) => {
                    ours.lowest = ours.lowest.min(theirs.lowest);
                    ours.highest = ours.highest.max(theirs.highest);
                }
                None => self.partitions.push(*theirs),
            }
        }
        self.partitions.sort_by_key(|sampled| sampled.partition);
    }
}

impl PayloadDictionaries for RedbStore {
    fn dictionary_due(&self) -> bool {
        self.codec.due()
    }

    fn train_dictionary(&self, now: Timestamp) -> Result<Option<TrainedDictionary>, StoreError> {
        let _training = self
            .codec
            .training
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.train(now)
    }

    fn take_out_erased(
        &self,
        partition: Partition,
        ids: (u128, u128),
        erased: &str,
        now: Timestamp,
    ) -> Result<TakenOut, StoreError> {
        RedbStore::take_out_erased(self, partition, ids, erased, now)
    }
}

impl RedbStore {
    /// Trains a dictionary and makes it current (see
    /// [`PayloadDictionaries::train_dictionary`]); the caller holds the training lock. Reads
    /// its sample from a snapshot and writes one small transaction.
    pub(super) fn train(&self, now: Timestamp) -> Result<Option<TrainedDictionary>, StoreError> {
        self.codec.plain_since_attempt.store(0, Ordering::Relaxed);
        let (samples, partitions) = self.payload_sample()?;
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
        let mut sample = DictionarySample {
            trained_at: now,
            partitions,
        };
        let txn = self.write()?;
        {
            let mut table = txn.open_table(PAYLOAD_DICTIONARIES)?;
            let mut samples = txn.open_table(DICTIONARY_SAMPLES)?;
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
            if same {
                // What it was trained on before stays possible; one trained before samples
                // were recorded stays without one (it may hold anything).
                let before: Option<DictionarySample> = match samples.get(id)? {
                    Some(before) => Some(from_json(before.value())?),
                    None => None,
                };
                if let Some(before) = before {
                    sample.merge(&before);
                    samples.insert(id, to_json(&sample)?.as_slice())?;
                }
            } else {
                table.insert(id, bytes.as_slice())?;
                samples.insert(id, to_json(&sample)?.as_slice())?;
            }
            txn.open_table(crate::store::redb::META)?.insert(
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

    /// The newest payloads of each endpoint, in turn, up to [`SAMPLE_RECORDS`] and
    /// [`SAMPLE_BYTES`], none of a deleted endpoint (its purge may not have reached them yet);
    /// with the ids sampled from each partition.
    fn payload_sample(&self) -> Result<(Vec<Vec<u8>>, Vec<SampledIds>), StoreError> {
        let txn = self.read()?;
        let records = txn.open_table(RECORDS)?;
        let endpoints = txn.open_table(ENDPOINTS)?;
        let mut partitions = Vec::new();
        for partition in partitions_of(&records)? {
            let deleted = match endpoints.get(partition.endpoint())? {
                Some(row) => from_json::<EndpointRow>(row.value())?.deleted_at.is_some(),
                None => false,
            };
            if deleted {
                continue;
            }
            partitions.push((
                partition,
                records
                    .range((partition.raw(), 0u128)..=(partition.raw(), u128::MAX))?
                    .rev(),
            ));
        }
        let mut samples = Vec::new();
        let mut sampled: BTreeMap<Partition, (u128, u128)> = BTreeMap::new();
        let mut bytes = 0;
        let mut scratch = Vec::new();
        'sampling: while !partitions.is_empty() {
            let mut exhausted = Vec::new();
            for (at, (partition, newest_first)) in partitions.iter_mut().enumerate() {
                if samples.len() >= SAMPLE_RECORDS || bytes >= SAMPLE_BYTES {
                    break 'sampling;
                }
                match newest_first.next() {
                    Some(entry) => {
                        let (key, value) = entry?;
                        let (_, payload) = self.codec.decode(value.value(), &mut scratch)?;
                        bytes += payload.len();
                        samples.push(payload.to_vec());
                        let id = key.value().1;
                        let ids = sampled.entry(*partition).or_insert((id, id));
                        *ids = (ids.0.min(id), ids.1.max(id));
                    }
                    None => exhausted.push(at),
                }
            }
            for at in exhausted.into_iter().rev() {
                drop(partitions.remove(at));
            }
        }
        let sampled = sampled
            .into_iter()
            .map(|(partition, (lowest, highest))| SampledIds {
                partition,
                lowest,
                highest,
            })
            .collect();
        Ok((samples, sampled))
    }
}
