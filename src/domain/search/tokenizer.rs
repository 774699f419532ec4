//! The positional trigram tokenizer, and the stop set of trigrams it leaves out.
//!
//! It emits every window of three characters with its character index as the token position.
//! A query for `q` then becomes a phrase of `q`'s trigrams at their offsets, which matches
//! exactly the texts that contain `q`. tantivy's own `NgramTokenizer` gives every gram position
//! 0, which cannot express that. Text is case-folded before it gets here ([`fold_case`]).
//!
//! **Stop trigrams.** A trigram found in a large share of the records (a JSON key every record
//! has, `"na`, `ame`) makes up a large part of the tokens indexed but narrows a query down
//! hardly at all. Once the indexer has seen one in that share it adds it to the [`StopSet`],
//! and records indexed from then on leave it out. The set only grows and is committed with the
//! index, so every trigram outside a committed state's set is in the postings of every record
//! of that state that contains it: a query built from such trigrams ([`query_trigrams`]) still
//! finds every record that contains it. A query made only of stop trigrams is answered by
//! walking the store (`search`).

use std::collections::HashSet;
use std::hash::BuildHasherDefault;
use std::sync::{Arc, RwLock};

use rustc_hash::FxHasher;
use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

pub use crate::core::text::{fold_case, fold_case_into, payload_text};

/// Trigrams left out of the index (see the module docs).
///
/// Tokenising asks about every window of every record, so an ASCII trigram (most of JSON) is
/// looked up in a bitmap of all 2^21 of them; others in a hash set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopSet {
    /// One bit per ASCII trigram ([`ascii_index`]); empty while the set is.
    ascii: Box<[u64]>,
    /// Every stop trigram, ASCII ones included (for listing them).
    all: HashSet<Box<str>, BuildHasherDefault<FxHasher>>,
}

/// Bits in [`StopSet::ascii`]: 7 bits per character.
const ASCII_TRIGRAMS: usize = 1 << 21;

/// The bit of an ASCII trigram.
fn ascii_index(gram: &[u8]) -> Option<usize> {
    match *gram {
        [a, b, c] if (a | b | c) < 0x80 => {
            Some((usize::from(a) << 14) | (usize::from(b) << 7) | usize::from(c))
        }
        _ => None,
    }
}

impl StopSet {
    pub fn contains(&self, gram: &str) -> bool {
        match ascii_index(gram.as_bytes()) {
            Some(bit) => self.contains_ascii(bit),
            None => self.all.contains(gram),
        }
    }

    /// Whether the ASCII trigram of bit `bit` ([`ascii_index`]) is in the set.
    fn contains_ascii(&self, bit: usize) -> bool {
        // Bounds-checked: the bitmap is empty while the set is.
        self.ascii
            .get(bit / 64)
            .is_some_and(|word| word & (1 << (bit % 64)) != 0)
    }

    pub fn len(&self) -> usize {
        self.all.len()
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// The trigrams, sorted (for a stable encoding).
    pub fn sorted(&self) -> Vec<&str> {
        let mut grams: Vec<&str> = self.all.iter().map(|g| &**g).collect();
        grams.sort_unstable();
        grams
    }
}

impl<S: Into<Box<str>>> FromIterator<S> for StopSet {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        let all: HashSet<Box<str>, BuildHasherDefault<FxHasher>> =
            iter.into_iter().map(Into::into).collect();
        let mut ascii = Vec::new();
        if !all.is_empty() {
            ascii = vec![0u64; ASCII_TRIGRAMS / 64];
            for bit in all.iter().filter_map(|g| ascii_index(g.as_bytes())) {
                ascii[bit / 64] |= 1 << (bit % 64);
            }
        }
        StopSet {
            ascii: ascii.into_boxed_slice(),
            all,
        }
    }
}

/// The stop set the tokenizer reads for each document; the indexer replaces it between
/// commits.
#[derive(Clone, Default)]
pub struct SharedStopSet(Arc<RwLock<Arc<StopSet>>>);

impl SharedStopSet {
    pub fn new(set: Arc<StopSet>) -> Self {
        SharedStopSet(Arc::new(RwLock::new(set)))
    }

    pub fn current(&self) -> Arc<StopSet> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn replace(&self, set: Arc<StopSet>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = set;
    }
}

/// The byte offset of every character of `text`, then its length.
fn char_starts(text: &str) -> Vec<usize> {
    text.char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(text.len()))
        .collect()
}

/// The trigrams covering `text` (already folded), as `(character offset, gram)`: one every
/// three characters plus the last window, so that together they pin every character.
pub fn covering_trigrams(text: &str) -> Vec<(usize, &str)> {
    query_trigrams(text, &StopSet::default())
}

/// The trigrams of `text` (already folded) outside `stop` that a query for it needs: as few
/// as cover every character some such trigram covers, as `(character offset, gram)`. Without
/// stop trigrams these are [`covering_trigrams`]; empty when every trigram is a stop trigram
/// (or `text` is shorter than three characters).
pub fn query_trigrams<'t>(text: &'t str, stop: &StopSet) -> Vec<(usize, &'t str)> {
    let starts = char_starts(text);
    let chars = starts.len() - 1;
    if chars < 3 {
        return Vec::new();
    }
    let last_window = chars - 3;
    let gram = |i: usize| &text[starts[i]..starts[i + 3]];
    let mut chosen = Vec::new();
    // The first character no chosen window covers yet.
    let mut uncovered = 0;
    while uncovered < chars {
        // Of the windows covering `uncovered`, the one reaching furthest that is indexed.
        let lowest = uncovered.saturating_sub(2);
        let highest = uncovered.min(last_window);
        match (lowest..=highest).rev().find(|&i| !stop.contains(gram(i))) {
            Some(i) => {
                chosen.push((i, gram(i)));
                uncovered = i + 3;
            }
            None => uncovered += 1,
        }
    }
    chosen
}

/// Every trigram of `text` (already folded) outside `stop`, each once.
pub fn indexed_trigrams<'t>(text: &'t str, stop: &StopSet) -> Vec<&'t str> {
    let starts = char_starts(text);
    let mut grams: Vec<&str> = starts
        .windows(4)
        .map(|w| &text[w[0]..w[3]])
        .filter(|gram| !stop.contains(gram))
        .collect();
    grams.sort_unstable();
    grams.dedup();
    grams
}

/// The tokenizer of the index's text field, leaving out the trigrams of its stop set.
#[derive(Clone, Default)]
pub struct TrigramTokenizer {
    stop: SharedStopSet,
}

impl TrigramTokenizer {
    pub fn new(stop: SharedStopSet) -> Self {
        TrigramTokenizer { stop }
    }
}

pub struct TrigramStream<'a> {
    text: &'a str,
    stop: Arc<StopSet>,
    /// Byte offset of the next window's first character.
    start: usize,
    /// Character index of that character.
    position: usize,
    token: Token,
}

/// The length in bytes of the character whose first byte is `lead`.
fn char_width(lead: u8) -> usize {
    // A character starts with a byte below 0x80 (one byte) or 0xc0-0xf7 (two to four).
    match lead {
        0..0x80 => 1,
        0x80..0xe0 => 2,
        0xe0..0xf0 => 3,
        _ => 4,
    }
}

/// The end of the three characters from byte `from` of `text`, if there are three.
fn window_end(text: &[u8], from: usize) -> Option<usize> {
    let mut end = from;
    for _ in 0..3 {
        end += char_width(*text.get(end)?);
    }
    Some(end).filter(|&end| end <= text.len())
}

impl Tokenizer for TrigramTokenizer {
    type TokenStream<'a> = TrigramStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> TrigramStream<'a> {
        TrigramStream {
            text,
            stop: self.stop.current(),
            start: 0,
            position: 0,
            token: Token::default(),
        }
    }
}

impl TokenStream for TrigramStream<'_> {
    fn advance(&mut self) -> bool {
        let bytes = self.text.as_bytes();
        let (i, from, to) = loop {
            let from = self.start;
            // Most windows of JSON are three ASCII bytes: no decoding, a bitmap lookup.
            let (to, stopped) = match bytes.get(from..from + 3).and_then(ascii_index) {
                Some(bit) => (from + 3, self.stop.contains_ascii(bit)),
                None => {
                    let Some(to) = window_end(bytes, from) else {
                        return false;
                    };
                    (to, self.stop.contains(&self.text[from..to]))
                }
            };
            let i = self.position;
            self.start = from + char_width(bytes[from]);
            self.position += 1;
            if !stopped {
                break (i, from, to);
            }
        };
        self.token.offset_from = from;
        self.token.offset_to = to;
        self.token.position = i;
        self.token.position_length = 1;
        self.token.text.clear();
        self.token.text.push_str(&self.text[from..to]);
        true
    }

    fn token(&self) -> &Token {
        &self.token
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grams(text: &str) -> Vec<(usize, String)> {
        grams_without(text, &[])
    }

    fn grams_without(text: &str, stop: &[&str]) -> Vec<(usize, String)> {
        let stop = StopSet::from_iter(stop.iter().copied());
        let mut tokenizer = TrigramTokenizer::new(SharedStopSet::new(Arc::new(stop)));
        let mut stream = tokenizer.token_stream(text);
        let mut out = Vec::new();
        while stream.advance() {
            out.push((stream.token().position, stream.token().text.clone()));
        }
        out
    }

    #[test]
    fn emits_every_window_at_its_character_position() {
        assert_eq!(
            grams("äbcd"),
            vec![(0, "äbc".to_string()), (1, "bcd".to_string())]
        );
        assert!(grams("ab").is_empty());
        assert_eq!(grams("{\"a").len(), 1);
    }

    #[test]
    fn covering_trigrams_pin_every_character() {
        assert_eq!(covering_trigrams("abc"), vec![(0, "abc")]);
        assert_eq!(covering_trigrams("abcd"), vec![(0, "abc"), (1, "bcd")]);
        assert_eq!(
            covering_trigrams("abcdefg"),
            vec![(0, "abc"), (3, "def"), (4, "efg")]
        );
        assert_eq!(covering_trigrams("abcdef"), vec![(0, "abc"), (3, "def")]);
        assert!(covering_trigrams("ab").is_empty());
    }

    #[test]
    fn stop_trigrams_are_left_out_at_their_positions() {
        assert_eq!(
            grams_without("abcde", &["bcd"]),
            vec![(0, "abc".to_string()), (2, "cde".to_string())]
        );
        assert!(grams_without("abc", &["abc"]).is_empty());
        assert_eq!(
            grams_without("aé€😀b", &["é€😀"]),
            vec![(0, "aé€".to_string()), (2, "€😀b".to_string())]
        );
        assert!(StopSet::from_iter(["abc"]).contains("abc"));
        assert!(!StopSet::from_iter(["abc"]).contains("abd"));
        assert!(StopSet::from_iter(["é€😀"]).contains("é€😀"));
    }

    /// The streaming tokenizer emits exactly the windows `indexed_trigrams` reads, at their
    /// character positions, for texts of one- to four-byte characters.
    #[test]
    fn tokens_are_every_window_outside_the_stop_set() {
        use rand::{Rng, SeedableRng};
        let alphabet = ['a', 'b', '"', ':', 'é', '€', '😀', ' '];
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..2000 {
            let len = rng.random_range(0..12);
            let text: String = (0..len)
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect();
            let starts = char_starts(&text);
            let windows: Vec<(usize, String)> = starts
                .windows(4)
                .enumerate()
                .map(|(i, w)| (i, text[w[0]..w[3]].to_string()))
                .collect();
            let stop: Vec<&str> = windows
                .iter()
                .filter(|_| rng.random_bool(0.3))
                .map(|(_, g)| g.as_str())
                .collect();
            let expected: Vec<(usize, String)> = windows
                .iter()
                .filter(|(_, g)| !stop.contains(&g.as_str()))
                .cloned()
                .collect();
            assert_eq!(
                grams_without(&text, &stop),
                expected,
                "{text:?} without {stop:?}"
            );
        }
    }

    #[test]
    fn query_trigrams_cover_what_indexed_trigrams_can() {
        let stop = StopSet::from_iter(["def", "cde"]);
        // "abcdefg": windows abc bcd cde def efg; c..e need bcd (covers b-d), e by efg.
        assert_eq!(
            query_trigrams("abcdefg", &stop),
            vec![(0, "abc"), (1, "bcd"), (4, "efg")]
        );
        let all = StopSet::from_iter(["abc", "bcd"]);
        assert!(query_trigrams("abcd", &all).is_empty());
        assert_eq!(
            query_trigrams("abcdefg", &StopSet::default()),
            covering_trigrams("abcdefg")
        );
        assert_eq!(
            indexed_trigrams("abcabcd", &StopSet::from_iter(["bca"])),
            vec!["abc", "bcd", "cab"]
        );
    }
}
