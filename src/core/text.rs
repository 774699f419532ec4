//! Text helpers of search's matching: the payload as text and per-character case folding.
//! They live at the bottom layer so that a store which searches its records itself (see
//! `store::records::searchable_text`) folds exactly as search does.

use std::borrow::Cow;

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

#[cfg(test)]
mod tests {
    use super::*;

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
