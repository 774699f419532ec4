//! Record ids: parsing never panics and accepts only the canonical spelling.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    if let Some(id) = intake::core::ids::RecordId::parse(text) {
        assert_eq!(id.to_string(), text);
    }
});
