//! The exact test behind every search result: does a payload text, folded, contain `q`?
//!
//! Every candidate the index proposes and every record a store walk passes goes through
//! [`Matcher::matches`], so it allocates nothing per record: payloads are folded with
//! [`fold_case_into`] into a reused buffer (ASCII runs in bulk) and searched with `memchr`.

use memchr::memmem::Finder;

use super::{fold_case_into, payload_text};

/// Tests payload texts against one folded query.
pub struct Matcher {
    finder: Finder<'static>,
    /// The folded payload being tested; kept to reuse its allocation.
    folded: String,
}

impl Matcher {
    /// A matcher for `q`, which is folded already.
    pub fn new(q: &str) -> Matcher {
        Matcher {
            finder: Finder::new(q.as_bytes()).into_owned(),
            folded: String::new(),
        }
    }

    /// Whether the folded `payload` (a stored payload text) contains the query.
    pub fn matches(&mut self, payload: &[u8]) -> bool {
        self.folded.clear();
        fold_case_into(&payload_text(payload), &mut self.folded);
        self.finder.find(self.folded.as_bytes()).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Folding by definition, without the bulk ASCII path.
    fn per_character(text: &str) -> String {
        text.chars().flat_map(char::to_lowercase).collect()
    }

    #[test]
    fn matches_like_folding_the_whole_text() {
        let payloads: [&[u8]; 6] = [
            br#"{"City":"BERLIN","n":41329}"#,
            "{\"name\":\"ÄRGER\"}".as_bytes(),
            // The Kelvin sign folds to an ASCII `k`.
            "{\"t\":\"300\u{212A}\"}".as_bytes(),
            b"",
            br#"{"a":"x"}"#,
            b"\xff\xfeabc",
        ];
        let queries = [
            "city",
            "berlin",
            "132",
            "ärger",
            "300k",
            "abc",
            "\"a\":\"x\"}",
            "zzz",
        ];
        for payload in payloads {
            let reference = per_character(&String::from_utf8_lossy(payload));
            for q in queries {
                let q = per_character(q);
                assert_eq!(
                    Matcher::new(&q).matches(payload),
                    reference.contains(&q),
                    "{q:?} in {reference:?}"
                );
            }
        }
    }

    #[test]
    fn one_matcher_serves_many_payloads() {
        let mut m = Matcher::new("abc");
        assert!(m.matches(b"xxABCxx"));
        assert!(!m.matches(b"ab"));
        assert!(m.matches("é abc".as_bytes()));
        assert!(!m.matches(b"xxABxCx"));
    }
}
