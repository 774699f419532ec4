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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopSet(HashSet<Box<str>, BuildHasherDefault<FxHasher>>);

impl StopSet {
    pub fn contains(&self, gram: &str) -> bool {
        !self.0.is_empty() && self.0.contains(gram)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The trigrams, sorted (for a stable encoding).
    pub fn sorted(&self) -> Vec<&str> {
        let mut grams: Vec<&str> = self.0.iter().map(|g| &**g).collect();
        grams.sort_unstable();
        grams
    }
}

impl<S: Into<Box<str>>> FromIterator<S> for StopSet {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        StopSet(iter.into_iter().map(Into::into).collect())
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
    /// Byte offset of every character, then the text's length.
    starts: Vec<usize>,
    next: usize,
    token: Token,
}

impl Tokenizer for TrigramTokenizer {
    type TokenStream<'a> = TrigramStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> TrigramStream<'a> {
        TrigramStream {
            text,
            stop: self.stop.current(),
            starts: char_starts(text),
            next: 0,
            token: Token::default(),
        }
    }
}

impl TokenStream for TrigramStream<'_> {
    fn advance(&mut self) -> bool {
        let (i, from, to) = loop {
            let i = self.next;
            if i + 3 >= self.starts.len() {
                return false;
            }
            self.next += 1;
            let (from, to) = (self.starts[i], self.starts[i + 3]);
            if !self.stop.contains(&self.text[from..to]) {
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
