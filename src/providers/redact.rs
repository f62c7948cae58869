//! Redaction: removes what identifies an upstream (its host, brand words, our secret
//! for it) from messages that are passed on to clients or written to the log. Every
//! occurrence of every word is found in the message first and only then is the result
//! cut to its length, so no part of a word survives at the cut or where two words
//! overlap. Of a secret, no part long enough to narrow a guess survives either: any
//! run of [`SECRET_RUN`] characters of it, and any masked form (`sk-ab…****wxyz`)
//! showing some of it.

use std::collections::HashSet;

/// Longest message passed on to clients, in characters.
pub const MAX_MESSAGE_CHARS: usize = 500;

/// Longest part of a message that is read at all (an upstream may send megabytes).
const MAX_READ_BYTES: usize = 16 * 1024;

/// Characters of a secret that may not appear together in a message.
pub const SECRET_RUN: usize = 8;

/// Characters of a secret next to a mask that make the masked word one of ours.
const MASKED_RUN: usize = 4;

const MARKER: &str = "[redacted]";

/// What stands for a secret in a URL, where brackets would need escaping.
const URL_MARKER: &str = "REDACTED";

/// The words one provider's messages are cleaned of.
#[derive(Debug, Default)]
pub struct Redactor {
    words: Vec<String>,
    /// Every [`SECRET_RUN`]-byte run of every secret, lowercased.
    secret_runs: HashSet<[u8; SECRET_RUN]>,
    /// The secrets, lowercased, for masked forms.
    secrets: Vec<String>,
}

impl Redactor {
    /// `words` are removed where they appear whole; `secrets` also in part.
    pub fn new(
        words: impl IntoIterator<Item = String>,
        secrets: impl IntoIterator<Item = String>,
    ) -> Self {
        let secrets: Vec<String> = secrets
            .into_iter()
            .map(|s| s.to_ascii_lowercase())
            .filter(|s| !s.is_empty())
            .collect();
        let mut words: Vec<String> = words
            .into_iter()
            .map(|w| w.to_ascii_lowercase())
            .chain(secrets.iter().cloned())
            // Short words would shred ordinary text; words inside the marker would loop.
            .filter(|w| w.len() >= 3 && !MARKER.contains(w.as_str()))
            .collect();
        words.sort_by_key(|w| std::cmp::Reverse(w.len()));
        words.dedup();
        let secret_runs = secrets
            .iter()
            .flat_map(|s| s.as_bytes().windows(SECRET_RUN))
            .filter_map(|w| w.try_into().ok())
            .collect();
        Self {
            words,
            secret_runs,
            secrets,
        }
    }

    /// `message` without any of the words (case-blind), at most [`MAX_MESSAGE_CHARS`].
    pub fn clean(&self, message: &str) -> String {
        let (text, end) = self.readable(message);
        let lower = text.to_ascii_lowercase();
        let mut spans = self.secret_spans(&lower);
        for word in &self.words {
            let step = word.chars().next().map_or(1, char::len_utf8);
            let mut from = 0;
            while let Some(at) = lower[from..].find(word.as_str()) {
                spans.push((from + at, from + at + word.len()));
                from += at + step;
            }
        }
        let out = replace(text, end, spans, MARKER);
        match out.char_indices().nth(MAX_MESSAGE_CHARS) {
            Some((cut, _)) => out[..cut].to_string(),
            None => out,
        }
    }

    /// `url` without our secret, whole or in part (a result URL that carries it in its
    /// query); hosts and brand words stay, since the URL must still lead somewhere.
    pub fn clean_url(&self, url: &str) -> String {
        if self.secrets.is_empty() {
            return url.to_string();
        }
        let lower = url.to_ascii_lowercase();
        let mut spans = self.secret_spans(&lower);
        for secret in &self.secrets {
            spans.extend(
                lower
                    .match_indices(secret.as_str())
                    .map(|(at, s)| (at, at + s.len())),
            );
        }
        if spans.is_empty() {
            return url.to_string();
        }
        replace(url, url.len(), spans, URL_MARKER)
    }

    /// An upstream word as the log shows it: cleaned as a client's message is, then at
    /// most [`MAX_LOGGED_CHARS`] characters with the rest counted, so an upstream can
    /// neither flood the log through one field nor have our secret written there.
    pub fn for_log(&self, word: &str) -> String {
        let clean = self.clean(word);
        match clean.char_indices().nth(MAX_LOGGED_CHARS) {
            None => clean,
            Some((cut, _)) => format!("{}… ({} bytes)", &clean[..cut], word.len()),
        }
    }

    /// Where `lower` shows part of a secret: runs of [`SECRET_RUN`] of its characters,
    /// and whole words that mask the rest of it.
    fn secret_spans(&self, lower: &str) -> Vec<(usize, usize)> {
        let mut spans = Vec::new();
        if self.secrets.is_empty() {
            return spans;
        }
        let bytes = lower.as_bytes();
        for (at, run) in bytes.windows(SECRET_RUN).enumerate() {
            if <[u8; SECRET_RUN]>::try_from(run).is_ok_and(|run| self.secret_runs.contains(&run)) {
                spans.push((at, at + SECRET_RUN));
            }
        }
        let mut start = 0;
        for (at, c) in lower.char_indices().chain([(lower.len(), ' ')]) {
            if is_word_end(c) {
                // A sentence's full stop is not part of the word.
                let word = lower[start..at].trim_end_matches(['.', '!']);
                if self.shows_masked_secret(word) {
                    spans.push((start, start + word.len()));
                }
                start = at + c.len_utf8();
            }
        }
        spans
    }

    /// `sk-ab12****wxyz`, `up-key-…cdef`: a word with a mask in it, next to which stand
    /// [`MASKED_RUN`] characters of a secret.
    fn shows_masked_secret(&self, word: &str) -> bool {
        let mut parts = word.split(is_mask);
        if parts.clone().count() < 2 {
            return false;
        }
        parts.any(|part| part.len() >= MASKED_RUN && self.secrets.iter().any(|s| s.contains(part)))
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

/// What ends a word that may be a masked secret: spaces and the punctuation around
/// quoted values (`key 'sk-…abcd',`).
fn is_word_end(c: char) -> bool {
    c.is_whitespace() || "'\"`,;:()[]{}<>=&?".contains(c)
}

/// The characters that stand for the hidden part of a masked secret.
fn is_mask(c: char) -> bool {
    matches!(c, '*' | '•' | '…' | '·')
}

/// `text` up to `end` with every span (byte offsets, in any order, overlapping or
/// not) replaced by `marker`; spans are widened to whole characters.
fn replace(text: &str, end: usize, mut spans: Vec<(usize, usize)>, marker: &str) -> String {
    spans.sort_unstable();
    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
    for (start, stop) in spans {
        let (start, stop) = (
            text.floor_char_boundary(start),
            text.ceil_char_boundary(stop),
        );
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
        out.push_str(marker);
        at = stop;
    }
    if at < end {
        out.push_str(&text[at..end]);
    }
    out
}

/// Longest upstream word (a status word, a task id) written to the log as it is.
pub const MAX_LOGGED_CHARS: usize = 128;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_brands_and_secrets_are_removed_case_blind() {
        let r = Redactor::new(
            ["api.acme.example", "acme", "ab"].map(String::from),
            ["sk-live-123".to_string()],
        );
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
        let r = Redactor::new([], [secret.to_string()]);
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
    fn logged_words_are_bounded_and_cleaned() {
        let r = Redactor::new(
            ["acme".to_string()],
            ["up-key-0123456789abcdef".to_string()],
        );
        assert_eq!(r.for_log("SUCCEEDED"), "SUCCEEDED");
        let long = "é".repeat(10_000);
        let logged = r.for_log(&long);
        assert!(logged.chars().count() < MAX_LOGGED_CHARS + 20, "{logged}");
        assert!(logged.ends_with("(20000 bytes)"), "{logged}");
        assert_eq!(
            r.for_log("weird up-key-0123456789abcdef at ACME"),
            "weird [redacted] at [redacted]"
        );
    }

    const KEY: &str = "sk-proj-Ab12Cd34Ef56Gh78Ij90wxyz";

    #[test]
    fn no_part_of_a_secret_of_eight_characters_or_more_survives() {
        let r = Redactor::new([], [KEY.to_string()]);
        for (message, clean) in [
            // A 14-character prefix, a suffix, a middle, in any case.
            ("bad key sk-proj-Ab12C.", "bad key [redacted]."),
            (
                "key ending 78Ij90wxyz refused",
                "key ending [redacted] refused",
            ),
            ("got CD34EF56GH here", "got [redacted] here"),
            // Seven characters tell too little to be removed.
            ("sk-proj is a prefix", "sk-proj is a prefix"),
        ] {
            assert_eq!(r.clean(message), clean, "{message}");
        }
    }

    #[test]
    fn masked_forms_of_a_secret_are_removed() {
        let r = Redactor::new([], [KEY.to_string()]);
        for masked in [
            "sk-proj-**************************wxyz",
            "sk-proj-Ab12***wxyz",
            "sk-p…wxyz",
            "sk-proj-…****wxyz",
            "****************wxyz",
            "sk-p••••••••",
        ] {
            let message = format!("Incorrect API key provided: {masked}. See the docs.");
            assert_eq!(
                r.clean(&message),
                "Incorrect API key provided: [redacted]. See the docs.",
                "{masked}"
            );
        }
        // Masks beside words that are not ours stay.
        assert_eq!(r.clean("rated **** by abcd"), "rated **** by abcd");
        assert_eq!(r.clean("note: pass****word"), "note: pass****word");
    }

    #[test]
    fn urls_lose_the_secret_but_keep_their_host() {
        let r = Redactor::new(["cdn.acme.example".to_string()], [KEY.to_string()]);
        assert_eq!(
            r.clean_url(&format!("https://cdn.acme.example/v.mp4?k={KEY}&x=1")),
            "https://cdn.acme.example/v.mp4?k=REDACTED&x=1"
        );
        let plain = "https://cdn.acme.example/v.mp4";
        assert_eq!(r.clean_url(plain), plain);
    }

    #[test]
    fn overlapping_words_are_removed_whole() {
        let r = Redactor::new(["xab", "abcdef"].map(String::from), []);
        assert_eq!(r.clean("1 xabcdef 2"), "1 [redacted] 2");
        assert_eq!(r.clean("abcdef"), "[redacted]");
        assert_eq!(r.clean("ABCDEFxab!"), "[redacted]!");
        assert_eq!(r.clean("é abcdef é"), "é [redacted] é");
    }
}
