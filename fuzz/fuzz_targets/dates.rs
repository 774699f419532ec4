//! Dates of `since` (poll) and `start` / `end` (search): `YYYY-MM-DD` or RFC 3339.
//!
//! Properties: parsing never panics; an accepted date formats (`to_rfc3339`, the format every
//! response uses) to text that parses back to the same instant; a bare date is midnight UTC
//! of that day; poll and search accept the parameter exactly when it parses.
#![no_main]

use std::collections::HashMap;

use intake::core::clock::{Timestamp, parse_date_or_rfc3339};
use intake::store::Partition;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let parsed = parse_date_or_rfc3339(text);
    if let Some(t) = parsed {
        let formatted = t.to_rfc3339();
        assert_eq!(
            parse_date_or_rfc3339(&formatted),
            Some(t),
            "{text:?} parsed to {t:?}, formatted as {formatted:?}"
        );
        if text.len() == 10 {
            assert_eq!(formatted, format!("{text}T00:00:00.000000Z"));
        }
    }

    let since = HashMap::from([("since".to_string(), text.to_string())]);
    assert_eq!(
        intake::domain::poll::parse_request(&since, Partition::from_raw(7)).is_ok(),
        parsed.is_some(),
        "poll `since`"
    );
    // The same text as both bounds is an empty-free window, never "start after end".
    let window = HashMap::from([
        ("q".to_string(), "abc".to_string()),
        ("start".to_string(), text.to_string()),
        ("end".to_string(), text.to_string()),
    ]);
    assert_eq!(
        intake::domain::search::parse_request(&window, Partition::from_raw(7), Timestamp(0))
            .is_ok(),
        parsed.is_some(),
        "search `start` and `end`"
    );
});
