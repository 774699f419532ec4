//! The positional trigram tokenizer.
//!
//! It emits every window of three characters with its character index as the token position.
//! A query for `q` then becomes a phrase of `q`'s trigrams at their offsets, which matches
//! exactly the texts that contain `q`. tantivy's own `NgramTokenizer` gives every gram position
//! 0, which cannot express that. Text is case-folded before it gets here ([`fold_case`]).

use std::borrow::Cow;

use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

/// Lower-cases the way search compares: character by character, without the context rules of
/// `str::to_lowercase` (such as Greek final sigma), so that a folded query is a substring of a
/// folded text whenever the query matches it.
pub fn fold_case(text: &str) -> String {
    let mut out = String::new();
    fold_case_into(text, &mut out);
    out
}

/// A stored payload as text. Payloads are stored as UTF-8, so this is a check; `str::from_utf8`
/// is several times faster at it than `String::from_utf8_lossy`, which only the damaged case
/// needs.
pub fn payload_text(payload: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(payload) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(payload),
    }
}

/// Appends [`fold_case`] of `text` to `out`: runs of ASCII are copied and lower-cased in
/// bulk, any other character goes through `char::to_lowercase` (a non-ASCII character can
/// fold to ASCII: the Kelvin sign folds to `k`).
pub fn fold_case_into(text: &str, out: &mut String) {
    out.reserve(text.len());
    let mut rest = text;
    loop {
        let run = rest
            .bytes()
            .position(|b| !b.is_ascii())
            .unwrap_or(rest.len());
        let (ascii, tail) = rest.split_at(run);
        let start = out.len();
        out.push_str(ascii);
        out[start..].make_ascii_lowercase();
        let mut chars = tail.chars();
        match chars.next() {
            Some(c) => out.extend(c.to_lowercase()),
            None => return,
        }
        rest = chars.as_str();
    }
}

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

    #[test]
    fn folds_case_per_character() {
        assert_eq!(fold_case("ÄRGER"), "ärger");
        assert_eq!(fold_case("ΣΑΣ"), "σασ");
        assert_eq!(fold_case("CITY"), "city");
    }

    #[test]
    fn payload_text_borrows_valid_utf8_and_replaces_damage() {
        assert!(matches!(
            payload_text("{\"ä\":1}".as_bytes()),
            Cow::Borrowed("{\"ä\":1}")
        ));
        assert_eq!(payload_text(b"ab\xffc"), "ab\u{FFFD}c");
    }

    #[test]
    fn folds_like_lowercasing_each_character() {
        let every_ascii: String = (0u8..128).map(char::from).collect();
        let texts = [
            every_ascii.as_str(),
            "",
            "{\"City\":\"BERLIN\",\"Ärger\":\"ÜBEL\"}",
            "300\u{212A} and \u{212A}ELVIN",
            "İSTANBUL ΣΑΣ ПРИВЕТ",
            "mixed 😀 EMOJI 😀",
            "ÄÖÜ",
        ];
        for text in texts {
            let per_character: String = text.chars().flat_map(char::to_lowercase).collect();
            assert_eq!(fold_case(text), per_character, "{text:?}");
            let mut appended = String::from("kept ");
            fold_case_into(text, &mut appended);
            assert_eq!(appended, format!("kept {per_character}"));
        }
    }
}
