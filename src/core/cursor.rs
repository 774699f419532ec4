//! Pagination: opaque cursors and the page-size rule shared by every listing.
//!
//! A cursor names a position in one partition's ordered range: a kind byte (which listing it
//! belongs to), the partition, and the `(time, tiebreak)` key of the last item returned,
//! base64url-encoded. Decoding checks the kind and the partition, so a cursor from another
//! endpoint, environment or listing is refused as invalid rather than silently misread.
//!
//! `core` knows no partition type: a cursor carries the partition's stored number
//! (`store::Partition::raw`), so cursors handed out before keep working.

use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// A `cursor` or `limit` parameter that cannot be used (the service error's
/// `invalid_parameter`).
#[derive(Debug, thiserror::Error)]
#[error("Invalid `{name}` parameter: {reason}.")]
pub struct InvalidParameter {
    pub name: &'static str,
    pub reason: String,
}

/// Which listing a cursor belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CursorKind {
    RecordList = b'l',
    /// A record page oldest first (the dashboard's record browser): its own kind, so a cursor
    /// of one order is refused by the other rather than read the wrong way.
    RecordListOldest = b'o',
    RequestLog = b'r',
    Search = b's',
    Poll = b'p',
    /// The outbox (`mail`): one partition, the tiebreak is the message id.
    Mail = b'm',
    /// Webhook deliveries of one partition: the tiebreak is the delivery id.
    Delivery = b'd',
    /// The change stream's event ids (`Last-Event-ID`): the tiebreak is the event's position
    /// in the store's event log, the time when its write was received.
    Stream = b'e',
}

const LEN: usize = 1 + 8 + 8 + 16;

/// A position: `(time key, tiebreak)` of the last item returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    pub time: u64,
    pub tiebreak: u128,
}

pub fn encode(kind: CursorKind, partition: u64, pos: Position) -> String {
    let mut buf = [0u8; LEN];
    buf[0] = kind as u8;
    buf[1..9].copy_from_slice(&partition.to_be_bytes());
    buf[9..17].copy_from_slice(&pos.time.to_be_bytes());
    buf[17..].copy_from_slice(&pos.tiebreak.to_be_bytes());
    URL_SAFE_NO_PAD.encode(buf)
}

/// The `cursor` parameter of a listing: 400 `invalid_parameter` for anything that is not a
/// cursor of this kind for this partition.
pub fn parse(kind: CursorKind, partition: u64, text: &str) -> Result<Position, InvalidParameter> {
    decode(kind, partition, text).ok_or_else(|| InvalidParameter {
        name: "cursor",
        reason: "it is not a cursor returned by this listing".into(),
    })
}

/// The `limit` parameter: `default` when absent, else an integer in `1..=max`.
pub fn limit_param(
    params: &HashMap<String, String>,
    default: usize,
    max: usize,
) -> Result<usize, InvalidParameter> {
    match params.get("limit") {
        None => Ok(default),
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(InvalidParameter {
                name: "limit",
                reason: format!("it must be an integer from 1 to {max}"),
            }),
        },
    }
}

/// `None` for anything that is not a cursor of this kind for this partition.
pub fn decode(kind: CursorKind, partition: u64, text: &str) -> Option<Position> {
    let bytes = URL_SAFE_NO_PAD.decode(text).ok()?;
    let buf: [u8; LEN] = bytes.try_into().ok()?;
    if buf[0] != kind as u8 || buf[1..9] != partition.to_be_bytes() {
        return None;
    }
    Some(Position {
        time: u64::from_be_bytes(buf[9..17].try_into().ok()?),
        tiebreak: u128::from_be_bytes(buf[17..].try_into().ok()?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_foreign_cursors() {
        let pos = Position {
            time: 1_700_000_000_000_000,
            tiebreak: 42,
        };
        let c = encode(CursorKind::RecordList, 6, pos);
        assert_eq!(decode(CursorKind::RecordList, 6, &c), Some(pos));
        assert_eq!(decode(CursorKind::RecordList, 7, &c), None);
        assert_eq!(decode(CursorKind::RequestLog, 6, &c), None);
        assert_eq!(decode(CursorKind::RecordListOldest, 6, &c), None);
        assert_eq!(decode(CursorKind::RecordList, 6, "garbage!"), None);
        assert_eq!(decode(CursorKind::RecordList, 6, ""), None);
        assert_eq!(decode(CursorKind::RecordList, 6, &c[1..]), None);
    }
}
