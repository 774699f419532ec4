//! Cursors: decoding never panics, accepts only its own kind and partition, and a decoded
//! cursor encodes back to the same text.
#![no_main]

use intake::cursor::{CursorKind, decode, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    for kind in [CursorKind::RecordList, CursorKind::RequestLog] {
        for partition in [0u64, 7] {
            if let Some(pos) = decode(kind, partition, text) {
                assert_eq!(encode(kind, partition, pos), text);
            }
        }
    }
});
