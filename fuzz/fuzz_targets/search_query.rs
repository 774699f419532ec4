//! The search query path: `q` validation, case folding and trigram extraction.
//!
//! Input: `prefix|q|suffix` (text without `|` is all `q`). Properties: `q` is accepted
//! exactly when it has 3 to 200 characters; folding is idempotent and per character, so the
//! folded `q` is a substring of the folded text around it; every covering trigram of the
//! folded `q` is emitted by the index tokenizer for the folded text at the same character
//! offset (so the phrase query finds every text containing `q`); and the covering trigrams
//! together cover every character of `q`.
#![no_main]

use std::collections::HashMap;

use intake::core::clock::Timestamp;
use intake::domain::search::fold_case;
use intake::domain::search::tokenizer::{TrigramTokenizer, covering_trigrams};
use intake::store::Partition;
use libfuzzer_sys::fuzz_target;
use tantivy::tokenizer::{TokenStream, Tokenizer};

fuzz_target!(|input: &str| {
    let mut parts = input.splitn(3, '|');
    let (prefix, q, suffix) = match (parts.next(), parts.next(), parts.next()) {
        (Some(p), Some(q), Some(s)) => (p, q, s),
        (Some(p), Some(q), None) => (p, q, ""),
        _ => ("", input, ""),
    };

    let chars = q.chars().count();
    let params = HashMap::from([("q".to_string(), q.to_string())]);
    let accepted =
        intake::domain::search::parse_request(&params, Partition::from_raw(7), Timestamp(1 << 52))
            .is_ok();
    assert_eq!(
        accepted,
        (3..=200).contains(&chars),
        "q of {chars} characters"
    );

    let folded_q = fold_case(q);
    assert_eq!(fold_case(&folded_q), folded_q, "folding must be idempotent");
    let folded_prefix = fold_case(prefix);
    let text = format!("{prefix}{q}{suffix}");
    let folded = fold_case(&text);
    assert_eq!(
        folded,
        format!("{folded_prefix}{folded_q}{}", fold_case(suffix))
    );
    assert!(folded.contains(&folded_q));

    let q_chars = folded_q.chars().count();
    let grams = covering_trigrams(&folded_q);
    if q_chars < 3 {
        assert!(grams.is_empty());
        return;
    }
    let mut covered = vec![false; q_chars];
    for &(offset, gram) in &grams {
        assert_eq!(gram.chars().count(), 3);
        covered[offset..offset + 3]
            .iter_mut()
            .for_each(|c| *c = true);
    }
    assert!(
        covered.iter().all(|c| *c),
        "trigrams must cover every character"
    );

    let mut emitted = HashMap::new();
    let mut tokenizer = TrigramTokenizer::default();
    let mut stream = tokenizer.token_stream(&folded);
    while stream.advance() {
        let token = stream.token();
        assert_eq!(&folded[token.offset_from..token.offset_to], token.text);
        emitted.insert(token.position, token.text.clone());
    }
    let base = folded_prefix.chars().count();
    for (offset, gram) in grams {
        assert_eq!(
            emitted.get(&(base + offset)).map(String::as_str),
            Some(gram),
            "trigram {gram:?} of q at {offset} not indexed at {}",
            base + offset
        );
    }
});
