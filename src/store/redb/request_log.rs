//! [`RequestLogStore`] on redb: `REQUEST_LOG` in `requests.redb`, keyed
//! `(partition, time_us, sequence)`, each entry in a compact binary layout ([`encode_entry`]).

use std::ops::Bound;

use redb::{ReadableDatabase, ReadableTable, Table};

use super::{REQUEST_LOG, RedbStore, from_json};
use crate::core::clock::Timestamp;
use crate::store::request_log::{EntryFilter, LogPage, LogPosition, RequestLogStore};
use crate::store::{
    Environment, KeyHolder, Partition, RequestLogRow, StoreError, time_from_key, time_key,
};

/// Entries deleted per transaction by a purge, so it never holds the writer for long.
const PURGE_CHUNK: usize = 10_000;

type Key = (u64, u64, u64);

impl RequestLogStore for RedbStore {
    fn append_requests(&self, entries: &[(Partition, RequestLogRow)]) -> Result<(), StoreError> {
        let txn = self.write()?;
        {
            let mut table = txn.open_table(REQUEST_LOG)?;
            for (partition, row) in entries {
                let time = time_key(row.time);
                let sequence = last_sequence(&table, *partition, time)?.saturating_add(1);
                table.insert(
                    (partition.raw(), time, sequence),
                    encode_entry(row).as_slice(),
                )?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn requests_page(
        &self,
        partition: Partition,
        before: Option<LogPosition>,
        limit: usize,
        filter: &EntryFilter,
    ) -> Result<LogPage, StoreError> {
        let mut lower = (partition.raw(), 0, 0);
        let mut upper = match before {
            Some(at) => Bound::Excluded((partition.raw(), at.time, at.sequence)),
            None => Bound::Included((partition.raw(), u64::MAX, u64::MAX)),
        };
        if let Some(time) = filter.pinned_time() {
            lower = (partition.raw(), time, 0);
            match before {
                Some(at) if at.time < time => {
                    return Ok(LogPage {
                        entries: Vec::new(),
                        next: None,
                    });
                }
                Some(at) if at.time == time => {}
                _ => upper = Bound::Included((partition.raw(), time, u64::MAX)),
            }
        }
        let txn = self.db.begin_read()?;
        let table = txn.open_table(REQUEST_LOG)?;
        let scan = table
            .range::<Key>((Bound::Included(lower), upper))?
            .rev()
            .zip(1..)
            .map(|(entry, number)| Ok((number, entry?)));
        LogPage::from_scan(scan, limit, filter, |(key, value)| {
            let (_, time, sequence) = key.value();
            let row = decode_entry(time, value.value())?;
            Ok((LogPosition { time, sequence }, row))
        })
    }

    fn purge_partition_requests(
        &self,
        partition: Partition,
        limit: usize,
    ) -> Result<usize, StoreError> {
        let txn = self.write()?;
        let removed = {
            let mut table = txn.open_table(REQUEST_LOG)?;
            let keys: Vec<Key> = table
                .range((partition.raw(), 0, 0)..=(partition.raw(), u64::MAX, u64::MAX))?
                .take(limit)
                .map(|e| e.map(|(k, _)| k.value()))
                .collect::<Result<_, _>>()?;
            for key in &keys {
                table.remove(*key)?;
            }
            keys.len()
        };
        txn.commit()?;
        Ok(removed)
    }

    fn purge_requests_before(&self, cutoff: Timestamp) -> Result<usize, StoreError> {
        let cut = time_key(cutoff);
        let mut total = 0;
        let mut next_partition = Some(0u64);
        while let Some(partition) = next_partition {
            // The first entry at or after this partition names the next partition to visit.
            let found = {
                let txn = self.db.begin_read()?;
                let table = txn.open_table(REQUEST_LOG)?;
                let first = table.range((partition, 0, 0)..)?.next().transpose()?;
                first.map(|(k, _)| k.value().0)
            };
            let Some(partition) = found else { break };
            loop {
                let txn = self.write()?;
                let removed = {
                    let mut table = txn.open_table(REQUEST_LOG)?;
                    let keys: Vec<Key> = table
                        .range((partition, 0, 0)..(partition, cut, 0))?
                        .take(PURGE_CHUNK)
                        .map(|e| e.map(|(k, _)| k.value()))
                        .collect::<Result<_, _>>()?;
                    for key in &keys {
                        table.remove(*key)?;
                    }
                    keys.len()
                };
                txn.commit()?;
                total += removed;
                if removed < PURGE_CHUNK {
                    break;
                }
            }
            next_partition = partition.checked_add(1);
        }
        Ok(total)
    }
}

/// The highest sequence among the entries of `partition` at `time`; 0 when there are none.
/// Numbering from the stored entries keeps positions unique across batches and restarts.
fn last_sequence(
    table: &Table<Key, &'static [u8]>,
    partition: Partition,
    time: u64,
) -> Result<u64, StoreError> {
    let last = table
        .range((partition.raw(), time, 0)..=(partition.raw(), time, u64::MAX))?
        .next_back()
        .transpose()?;
    Ok(last.map_or(0, |(key, _)| key.value().2))
}

/// First byte of an entry in the first binary layout, which ended with the key id. Entries of
/// earlier versions are JSON objects, which begin with `{`.
const BINARY: u8 = 0x01;
/// First byte of an entry in today's layout ([`encode_entry`]).
const BINARY_2: u8 = 0x02;

/// Which optional fields follow, in this order, in a [`BINARY_2`] entry.
const HAS_KEY_ID: u8 = 1;
const HAS_CODE: u8 = 2;
const HAS_MESSAGE: u8 = 4;
const HAS_CLIENT: u8 = 8;
const HAS_HOLDER: u8 = 16;
const HAS_RECORD_ID: u8 = 32;
const HAS_RECORD_COUNT: u8 = 64;

/// Encodes an entry: [`BINARY_2`], the status (u16 LE), the environment (0 sandbox, 1
/// production), the latency in µs (LEB128), the method, route and request id as
/// length-prefixed (LEB128) UTF-8, then a byte of `HAS_*` flags and the fields it names: key
/// id, code, message, client address and record id as text, the holder and the record count
/// as LEB128 numbers (holder 0 the owner, n + 1 collaborator n). The time is the key's. About 60 bytes for a successful call, where
/// the JSON of the first versions took 210: the log of every data call is most of
/// `requests.redb`.
fn encode_entry(row: &RequestLogRow) -> Vec<u8> {
    let texts = [
        row.key_id.as_deref(),
        row.code.as_deref(),
        row.message.as_deref(),
        row.client.as_deref(),
        row.record_id.as_deref(),
    ];
    let mut v = Vec::with_capacity(
        24 + row.method.len()
            + row.route.len()
            + row.request_id.len()
            + texts.iter().flatten().map(|t| t.len()).sum::<usize>(),
    );
    v.push(BINARY_2);
    v.extend_from_slice(&row.status.to_le_bytes());
    v.push(match row.environment {
        Environment::Sandbox => 0,
        Environment::Production => 1,
    });
    put_varint(&mut v, row.latency_us);
    for text in [&row.method, &row.route, &row.request_id] {
        put_text(&mut v, text);
    }
    let flags = [HAS_KEY_ID, HAS_CODE, HAS_MESSAGE, HAS_CLIENT, HAS_RECORD_ID]
        .iter()
        .zip(&texts)
        .filter(|(_, text)| text.is_some())
        .fold(0, |flags, (flag, _)| flags | flag)
        | if row.holder.is_some() { HAS_HOLDER } else { 0 }
        | if row.record_count.is_some() {
            HAS_RECORD_COUNT
        } else {
            0
        };
    v.push(flags);
    for text in texts.into_iter().flatten() {
        put_text(&mut v, text);
    }
    if let Some(holder) = row.holder {
        put_varint(
            &mut v,
            match holder {
                KeyHolder::Owner => 0,
                KeyHolder::Collaborator(id) => id.saturating_add(1),
            },
        );
    }
    if let Some(count) = row.record_count {
        put_varint(&mut v, u64::from(count));
    }
    v
}

/// Decodes an entry stored at `time` (the key's), in any layout.
fn decode_entry(time: u64, bytes: &[u8]) -> Result<RequestLogRow, StoreError> {
    let (layout, rest) = match bytes.split_first() {
        Some((&layout, rest)) if layout == BINARY || layout == BINARY_2 => (layout, rest),
        _ => return from_json(bytes),
    };
    let corrupt = || StoreError::Corrupt("request log entry".into());
    let mut reader = Reader(rest);
    let status = u16::from_le_bytes(*reader.take::<2>().ok_or_else(corrupt)?);
    let environment = match reader.take::<1>().ok_or_else(corrupt)? {
        [0] => Environment::Sandbox,
        [1] => Environment::Production,
        _ => return Err(corrupt()),
    };
    let latency_us = reader.varint().ok_or_else(corrupt)?;
    let method = reader.text().ok_or_else(corrupt)?;
    let route = reader.text().ok_or_else(corrupt)?;
    let request_id = reader.text().ok_or_else(corrupt)?;
    let flags = match layout {
        // The first layout: the key id, when bytes remain.
        BINARY if reader.0.is_empty() => 0,
        BINARY => HAS_KEY_ID,
        _ => {
            let [flags] = *reader.take::<1>().ok_or_else(corrupt)?;
            flags
        }
    };
    let mut optional = |flag: u8| match flags & flag {
        0 => Ok(None),
        _ => reader.text().map(Some).ok_or_else(corrupt),
    };
    let key_id = optional(HAS_KEY_ID)?;
    let code = optional(HAS_CODE)?;
    let message = optional(HAS_MESSAGE)?;
    let client = optional(HAS_CLIENT)?;
    let record_id = optional(HAS_RECORD_ID)?;
    let holder = match flags & HAS_HOLDER {
        0 => None,
        _ => Some(match reader.varint().ok_or_else(corrupt)? {
            0 => KeyHolder::Owner,
            n => KeyHolder::Collaborator(n - 1),
        }),
    };
    let record_count = match flags & HAS_RECORD_COUNT {
        0 => None,
        _ => Some(
            reader
                .varint()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(corrupt)?,
        ),
    };
    let known = HAS_KEY_ID
        | HAS_CODE
        | HAS_MESSAGE
        | HAS_CLIENT
        | HAS_HOLDER
        | HAS_RECORD_ID
        | HAS_RECORD_COUNT;
    if !reader.0.is_empty() || flags & !known != 0 {
        return Err(corrupt());
    }
    Ok(RequestLogRow {
        time: time_from_key(time),
        method,
        route,
        status,
        key_id,
        latency_us,
        environment,
        request_id,
        code,
        message,
        client,
        holder,
        record_id,
        record_count,
    })
}

fn put_text(v: &mut Vec<u8>, text: &str) {
    put_varint(v, text.len() as u64);
    v.extend_from_slice(text.as_bytes());
}

fn put_varint(v: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        v.push((n as u8) | 0x80);
        n >>= 7;
    }
    v.push(n as u8);
}

/// Reads an entry's fields in order; `None` when the bytes end early or are not valid.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<&[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(head)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let [byte] = *self.take::<1>()?;
            n |= u64::from(byte & 0x7F).checked_shl(shift)?;
            if byte & 0x80 == 0 {
                return Some(n);
            }
        }
        None
    }

    fn text(&mut self) -> Option<String> {
        let len = usize::try_from(self.varint()?).ok()?;
        if len > self.0.len() {
            return None;
        }
        let (text, rest) = self.0.split_at(len);
        self.0 = rest;
        String::from_utf8(text.to_vec()).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::clock::Timestamp;

    fn to_json(row: &RequestLogRow) -> Vec<u8> {
        super::super::to_json(row).unwrap()
    }

    fn row(key_id: Option<&str>, latency_us: u64) -> RequestLogRow {
        RequestLogRow {
            time: Timestamp(1_795_000_000_123_456),
            method: "POST".into(),
            route: "/api/v1/data/{slug}".into(),
            status: 202,
            key_id: key_id.map(Into::into),
            latency_us,
            environment: Environment::Production,
            request_id: "req_abcdefghjkmnpqrs".into(),
            code: None,
            message: None,
            client: None,
            holder: None,
            record_id: None,
            record_count: None,
        }
    }

    /// `row` as the first binary layout wrote it.
    fn first_layout(row: &RequestLogRow) -> Vec<u8> {
        let mut v = vec![BINARY];
        v.extend_from_slice(&row.status.to_le_bytes());
        v.push(1);
        put_varint(&mut v, row.latency_us);
        for text in [&row.method, &row.route, &row.request_id]
            .into_iter()
            .chain(row.key_id.as_ref())
        {
            put_text(&mut v, text);
        }
        v
    }

    fn failed(holder: Option<KeyHolder>) -> RequestLogRow {
        RequestLogRow {
            status: 403,
            code: Some("missing_permission_create".into()),
            message: Some("This key lacks the `create` permission.".into()),
            client: Some("2001:db8::7".into()),
            holder,
            ..row(Some("key_9"), 870)
        }
    }

    #[test]
    fn entries_round_trip_in_a_third_of_the_json() {
        for row in [
            row(Some("key_7f3k2m"), 1_234),
            row(None, 0),
            row(Some(""), u64::MAX),
        ] {
            let bytes = encode_entry(&row);
            assert_eq!(decode_entry(time_key(row.time), &bytes).unwrap(), row);
            let json = to_json(&row);
            assert!(
                bytes.len() * 3 < json.len() + 10,
                "{} vs {}",
                bytes.len(),
                json.len()
            );
        }
    }

    #[test]
    fn refused_calls_round_trip_with_code_message_client_and_holder() {
        for row in [
            failed(Some(KeyHolder::Collaborator(41))),
            failed(Some(KeyHolder::Owner)),
            failed(Some(KeyHolder::Collaborator(u64::MAX - 1))),
            failed(None),
        ] {
            let bytes = encode_entry(&row);
            assert_eq!(decode_entry(time_key(row.time), &bytes).unwrap(), row);
            // Less than the JSON, whose field names repeat in every entry.
            assert!(bytes.len() < to_json(&row).len());
        }
    }

    #[test]
    fn the_record_of_a_call_round_trips() {
        for (record_id, record_count) in [
            (Some("rec_000sgmfknygfjemjppggr9avqh"), None),
            (Some("rec_000sgmfknygfjemjppggr9avqh"), Some(1_000)),
            (None, None),
        ] {
            let row = RequestLogRow {
                record_id: record_id.map(Into::into),
                record_count,
                ..failed(Some(KeyHolder::Collaborator(3)))
            };
            let bytes = encode_entry(&row);
            assert_eq!(decode_entry(time_key(row.time), &bytes).unwrap(), row);
        }
    }

    #[test]
    fn entries_of_the_first_binary_layout_still_read() {
        for row in [row(Some("key_7f3k2m"), 1_234), row(None, 5)] {
            let bytes = first_layout(&row);
            assert_eq!(decode_entry(time_key(row.time), &bytes).unwrap(), row);
        }
    }

    #[test]
    fn json_entries_of_earlier_versions_still_read() {
        let row = row(Some("key_1"), 99);
        let json = to_json(&row);
        assert_eq!(decode_entry(0, &json).unwrap(), row);
    }

    #[test]
    fn damaged_entries_are_corrupt_errors() {
        let good = encode_entry(&row(Some("key_1"), 300));
        let mut bad_environment = good.clone();
        bad_environment[3] = 7;
        let mut bad_utf8 = good.clone();
        let last = bad_utf8.len() - 1;
        bad_utf8[last] = 0xFF;
        let trailing = [&good[..], &[0]].concat();
        let endless_varint = [&good[..4], &[0xFF; 11]].concat();
        let unknown_flag = [&good[..good.len() - 7], &[0x80]].concat();
        for bad in [
            &good[..1],
            &good[..6],
            &good[..good.len() - 1],
            &bad_environment,
            &bad_utf8,
            &trailing,
            &endless_varint,
            &unknown_flag,
        ] {
            assert!(
                matches!(decode_entry(0, bad), Err(StoreError::Corrupt(_))),
                "{bad:?}"
            );
        }
    }
}
