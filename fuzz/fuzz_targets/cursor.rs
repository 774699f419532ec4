//! Cursors of the record list, the request log, search and poll.
//!
//! Properties: decoding never panics; a cursor is accepted only for its own kind and
//! partition, and a decoded cursor encodes back to the same text (so there is one spelling
//! per position); search and poll accept a `cursor` parameter exactly when it decodes.
#![no_main]

use std::collections::HashMap;

use intake::core::clock::Timestamp;
use intake::core::cursor::{CursorKind, decode, encode};
use intake::store::Partition;
use libfuzzer_sys::fuzz_target;

const KINDS: [CursorKind; 7] = [
    CursorKind::RecordList,
    CursorKind::RequestLog,
    CursorKind::Search,
    CursorKind::Poll,
    CursorKind::Mail,
    CursorKind::Delivery,
    CursorKind::Stream,
];
const PARTITIONS: [u64; 3] = [0, 7, u64::MAX];

fuzz_target!(|text: &str| {
    let mut accepted = 0;
    for kind in KINDS {
        for partition in PARTITIONS {
            if let Some(pos) = decode(kind, partition, text) {
                accepted += 1;
                assert_eq!(encode(kind, partition, pos), text);
            }
        }
    }
    assert!(accepted <= 1, "one cursor accepted for {accepted} listings");

    let params = HashMap::from([
        ("cursor".to_string(), text.to_string()),
        ("q".to_string(), "abc".to_string()),
    ]);
    for partition in PARTITIONS {
        let poll = intake::domain::poll::parse_request(&params, Partition::from_raw(partition));
        match decode(CursorKind::Poll, partition, text) {
            Some(pos) => {
                let (start, _) = poll.expect("a poll cursor is accepted by poll");
                assert_eq!(start, intake::domain::poll::Start::After(pos.tiebreak));
            }
            None => assert!(poll.is_err(), "poll accepted a foreign cursor"),
        }
        let search = intake::domain::search::parse_request(
            &params,
            Partition::from_raw(partition),
            Timestamp(1 << 52),
        );
        assert_eq!(
            search.is_ok(),
            decode(CursorKind::Search, partition, text).is_some(),
            "search must accept exactly its own cursors"
        );
    }
});
