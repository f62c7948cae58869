//! Redaction: removes what identifies an upstream (its host, brand words, our secret
//! for it) from messages that are passed on to clients.

/// Longest message passed on to clients.
const MAX_MESSAGE_CHARS: usize = 500;

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
            .filter(|w| w.len() >= 3 && !"[redacted]".contains(w.as_str()))
            .collect();
        // Longest first, so a host is removed before a brand word inside it.
        words.sort_by_key(|w| std::cmp::Reverse(w.len()));
        words.dedup();
        Self { words }
    }

    pub fn clean(&self, message: &str) -> String {
        let mut out: String = message.chars().take(MAX_MESSAGE_CHARS).collect();
        for word in &self.words {
            let mut lower = out.to_ascii_lowercase();
            while let Some(at) = lower.find(word.as_str()) {
                out.replace_range(at..at + word.len(), "[redacted]");
                lower = out.to_ascii_lowercase();
            }
        }
        out
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
}
