//! The positional trigram tokenizer.
//!
//! It emits every window of three characters with its character index as the token position.
//! A query for `q` then becomes a phrase of `q`'s trigrams at their offsets, which matches
//! exactly the texts that contain `q`. tantivy's own `NgramTokenizer` gives every gram position
//! 0, which cannot express that. Text is case-folded before it gets here ([`fold_case`]).

use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

pub use crate::core::text::{fold_case, fold_case_into, payload_text};

/// The trigrams covering `text` (already folded), as `(character offset, gram)`: one every
/// three characters plus the last window, so that together they pin every character.
pub fn covering_trigrams(text: &str) -> Vec<(usize, &str)> {
    let starts: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(text.len()))
        .collect();
    let chars = starts.len() - 1;
    if chars < 3 {
        return Vec::new();
    }
    let mut offsets: Vec<usize> = (0..=chars - 3).step_by(3).collect();
    if offsets.last() != Some(&(chars - 3)) {
        offsets.push(chars - 3);
    }
    offsets
        .into_iter()
        .map(|i| (i, &text[starts[i]..starts[i + 3]]))
        .collect()
}

#[derive(Clone, Default)]
pub struct TrigramTokenizer;

pub struct TrigramStream<'a> {
    text: &'a str,
    /// Byte offset of every character, then the text's length.
    starts: Vec<usize>,
    next: usize,
    token: Token,
}

impl Tokenizer for TrigramTokenizer {
    type TokenStream<'a> = TrigramStream<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> TrigramStream<'a> {
        let starts = text
            .char_indices()
            .map(|(i, _)| i)
            .chain(std::iter::once(text.len()))
            .collect();
        TrigramStream {
            text,
            starts,
            next: 0,
            token: Token::default(),
        }
    }
}

impl TokenStream for TrigramStream<'_> {
    fn advance(&mut self) -> bool {
        let i = self.next;
        if i + 3 >= self.starts.len() {
            return false;
        }
        self.next += 1;
        let (from, to) = (self.starts[i], self.starts[i + 3]);
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
        let mut tokenizer = TrigramTokenizer;
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
}
