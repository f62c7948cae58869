//! Redaction: removes what identifies an upstream (its host, brand words, our secret
//! for it) from messages that are passed on to clients. Every occurrence of every word
//! is found in the message first and only then is the result cut to its length, so no
//! part of a word survives at the cut or where two words overlap.

/// Longest message passed on to clients, in characters.
pub const MAX_MESSAGE_CHARS: usize = 500;

/// Longest part of a message that is read at all (an upstream may send megabytes).
const MAX_READ_BYTES: usize = 16 * 1024;

const MARKER: &str = "[redacted]";

/// The words one provider's messages are cleaned of.
#[derive(Debug, Default)]
pub struct Redactor {
    words: Vec<String>,
}

impl Redactor {
    pub fn new(words: impl IntoIterator<Item = String>) -> Self {
        let mut words: Vec<String> = words
            .into_iter()
            .map(|w| w.to_ascii_lowercase())
            // Short words would shred ordinary text; words inside the marker would loop.
            .filter(|w| w.len() >= 3 && !MARKER.contains(w.as_str()))
            .collect();
        words.sort_by_key(|w| std::cmp::Reverse(w.len()));
        words.dedup();
        Self { words }
    }

    /// `message` without any of the words (case-blind), at most [`MAX_MESSAGE_CHARS`].
    pub fn clean(&self, message: &str) -> String {
        let (text, end) = self.readable(message);
        let lower = text.to_ascii_lowercase();
        let mut spans: Vec<(usize, usize)> = Vec::new();
        for word in &self.words {
            let step = word.chars().next().map_or(1, char::len_utf8);
            let mut from = 0;
            while let Some(at) = lower[from..].find(word.as_str()) {
                spans.push((from + at, from + at + word.len()));
                from += at + step;
            }
        }
        spans.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
        for (start, stop) in spans {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(stop),
                _ => merged.push((start, stop)),
            }
        }
        let mut out = String::with_capacity(end.min(MAX_MESSAGE_CHARS * 2));
        let mut at = 0;
        for (start, stop) in merged {
            if start >= end {
                break;
            }
            out.push_str(&text[at..start]);
            out.push_str(MARKER);
            at = stop;
        }
        if at < end {
            out.push_str(&text[at..end]);
        }
        match out.char_indices().nth(MAX_MESSAGE_CHARS) {
            Some((cut, _)) => out[..cut].to_string(),
            None => out,
        }
    }

    /// The part of `message` that is read, and where its readable text ends: a message
    /// cut short loses its last characters too, which might start a word whose rest
    /// was cut away.
    fn readable<'m>(&self, message: &'m str) -> (&'m str, usize) {
        if message.len() <= MAX_READ_BYTES {
            return (message, message.len());
        }
        let text = &message[..message.floor_char_boundary(MAX_READ_BYTES)];
        let longest = self.words.first().map_or(0, String::len);
        let end = text.floor_char_boundary(text.len() - longest.min(text.len()));
        (text, end)
    }
}

/// Longest upstream word (a status word, a task id) written to the log as it is.
pub const MAX_LOGGED_CHARS: usize = 128;

/// An upstream word as the log shows it: at most [`MAX_LOGGED_CHARS`] characters, the
/// rest counted, so an upstream cannot flood the log through one field.
pub fn for_log(word: &str) -> std::borrow::Cow<'_, str> {
    match word.char_indices().nth(MAX_LOGGED_CHARS) {
        None => word.into(),
        Some((cut, _)) => format!("{}… ({} bytes)", &word[..cut], word.len()).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_brands_and_secrets_are_removed_case_blind() {
        let r = Redactor::new(["api.acme.example", "acme", "sk-live-123", "ab"].map(String::from));
        assert_eq!(
            r.clean("ACME at api.acme.example refused key sk-live-123: nsfw"),
            "[redacted] at [redacted] refused key [redacted]: nsfw"
        );
        // Two-letter words are kept: they would shred ordinary text.
        assert_eq!(r.clean("about"), "about");
        assert_eq!(r.clean(&"x".repeat(600)).len(), MAX_MESSAGE_CHARS);
    }

    #[test]
    fn a_secret_across_the_cut_leaves_nothing_behind() {
        let secret = "sk-live-0123456789abcdefghij";
        let r = Redactor::new([secret.to_string()]);
        for before in 470..=MAX_MESSAGE_CHARS {
            let message = format!("{}{secret} and more", "x".repeat(before));
            let clean = r.clean(&message);
            assert!(!clean.contains("sk-live"), "{before}: {clean}");
            assert!(clean.chars().count() <= MAX_MESSAGE_CHARS);
        }
        // A huge message: the secret far in, and one at the edge of what is read.
        let edge = format!("{}{secret}", "y".repeat(MAX_READ_BYTES - 10));
        assert!(!r.clean(&edge).contains("sk-li"));
    }

    #[test]
    fn logged_words_are_bounded() {
        assert_eq!(for_log("SUCCEEDED"), "SUCCEEDED");
        let long = "é".repeat(10_000);
        let logged = for_log(&long);
        assert!(logged.chars().count() < MAX_LOGGED_CHARS + 20, "{logged}");
        assert!(logged.ends_with("(20000 bytes)"), "{logged}");
    }

    #[test]
    fn overlapping_words_are_removed_whole() {
        let r = Redactor::new(["xab", "abcdef"].map(String::from));
        assert_eq!(r.clean("1 xabcdef 2"), "1 [redacted] 2");
        assert_eq!(r.clean("abcdef"), "[redacted]");
        assert_eq!(r.clean("ABCDEFxab!"), "[redacted]!");
        assert_eq!(r.clean("é abcdef é"), "é [redacted] é");
    }
}
