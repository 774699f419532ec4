//! The exact test behind every search result: does a payload text, folded, contain `q`?
//!
//! Every candidate the index proposes and every record a store walk passes goes through
//! [`Matcher::matches`], so it allocates nothing per record. Pure-ASCII payloads (the common
//! case) are folded byte by byte into a reused buffer: for ASCII text [`fold_case`] is ASCII
//! lower case. Any other payload is folded with [`fold_case`] itself, because a non-ASCII
//! character can fold to ASCII (`K`, the Kelvin sign, folds to `k`).

use memchr::memmem::Finder;

use super::fold_case;

/// Tests payload texts against one folded query.
pub struct Matcher {
    finder: Finder<'static>,
    /// The folded payload being tested; kept to reuse its allocation.
    folded: Vec<u8>,
}

impl Matcher {
    /// A matcher for `q`, which is folded already.
    pub fn new(q: &str) -> Matcher {
        Matcher {
            finder: Finder::new(q.as_bytes()).into_owned(),
            folded: Vec::new(),
        }
    }

    /// Whether the folded `payload` (a stored payload text) contains the query.
    pub fn matches(&mut self, payload: &[u8]) -> bool {
        self.folded.clear();
        if payload.is_ascii() {
            self.folded
                .extend(payload.iter().map(u8::to_ascii_lowercase));
        } else {
            self.folded
                .extend_from_slice(fold_case(&String::from_utf8_lossy(payload)).as_bytes());
        }
        self.finder.find(&self.folded).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let reference = fold_case(&String::from_utf8_lossy(payload));
            for q in queries {
                let q = fold_case(q);
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
