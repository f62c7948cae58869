//! Redaction of any message with any words: bounded, never a panic, and no word left
//! in the result, whole or cut at the length limit.

use mediagate::providers::redact::{MAX_MESSAGE_CHARS, Redactor};
use proptest::prelude::*;

proptest! {
    #[test]
    fn no_word_survives(
        words in prop::collection::vec("[a-zA-Z0-9.-]{3,30}", 0..6),
        pieces in prop::collection::vec("\\PC{0,80}", 0..12),
        cut in 0usize..700,
    ) {
        let r = Redactor::new(words.clone());
        // Messages built of the words and other text, the words in any case.
        let mut message = String::new();
        for (i, piece) in pieces.iter().enumerate() {
            message.push_str(piece);
            if let Some(w) = words.get(i % words.len().max(1)) {
                message.push_str(&if i % 2 == 0 { w.to_uppercase() } else { w.clone() });
            }
        }
        let message: String = message.chars().skip(cut % 7).collect();
        let clean = r.clean(&message);
        prop_assert!(clean.chars().count() <= MAX_MESSAGE_CHARS);
        let lower = clean.to_ascii_lowercase();
        for w in &words {
            let w = w.to_ascii_lowercase();
            if "[redacted]".contains(w.as_str()) {
                continue;
            }
            prop_assert!(!lower.contains(&w), "{w} in {clean}");
        }
    }

    #[test]
    fn any_message_any_words(words in prop::collection::vec("\\PC{0,20}", 0..5), message in "\\PC{0,2000}") {
        let clean = Redactor::new(words).clean(&message);
        prop_assert!(clean.chars().count() <= MAX_MESSAGE_CHARS);
    }
}

/// A secret that straddles the length cut leaves no prefix (found by the fuzzer's
/// predecessor: the message used to be cut before it was cleaned).
#[test]
fn regression_secret_across_the_cut() {
    let secret = "sk-live-abcdefghijklmnop";
    let r = Redactor::new([secret.to_string()]);
    let message = format!("{}{secret}", "x".repeat(MAX_MESSAGE_CHARS - 5));
    assert!(!r.clean(&message).contains("sk-li"));
}
