//! Request bodies: normalisation never panics, its output is valid JSON, normalising twice
//! changes nothing, and an accepted payload has every required field.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    let required: Vec<String> = match flags % 3 {
        0 => vec![],
        1 => vec!["a".into()],
        _ => vec!["a".into(), "b".into()],
    };
    if let Ok(normalized) = intake::records::normalize_payload(body, &required) {
        let again = intake::records::normalize_payload(&normalized, &required)
            .expect("a normalised payload must be accepted again");
        assert_eq!(again, normalized, "normalisation must be idempotent");
        if !required.is_empty() {
            let value: serde_json::Value = serde_json::from_slice(&normalized).unwrap();
            for field in &required {
                assert!(!value[field.as_str()].is_null());
            }
        }
    }
});
