//! Config files: parsing arbitrary text never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let _ = intake::config::Config::parse(text);
});
