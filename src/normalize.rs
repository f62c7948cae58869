//! Upstream answer normalised: whatever the provider says becomes one of our four
//! statuses, a progress, result URLs and a cleaned error.

use std::collections::HashMap;
use std::sync::LazyLock;

use prometheus_client::metrics::counter::Counter;

use jaq_json::Val;

use crate::provider::transform::{Jq, JqVars, to_json, to_text};
use crate::task::{TaskError, TaskState, TaskStatus};

/// Upstream status words seen that the provider's `status_map` does not list.
pub static UNMAPPED_STATUSES: LazyLock<Counter> = LazyLock::new(Counter::default);

/// Longest error message passed on to clients.
const MAX_MESSAGE_CHARS: usize = 500;

/// How to read one provider's status answer.
#[derive(Debug)]
pub struct StatusReader {
    pub status: Jq,
    /// Exact upstream words → ours.
    pub status_map: HashMap<String, TaskStatus>,
    pub progress: Option<Jq>,
    pub urls: Option<Jq>,
    pub error_code: Option<Jq>,
    pub error_message: Option<Jq>,
}

/// A step of the answer that broke the provider's contract.
#[derive(Debug, PartialEq, Eq)]
pub struct ContractError(pub String);

impl StatusReader {
    /// Map an upstream status word; unknown words count as `processing`, never leak.
    pub fn map_status(&self, provider: &str, word: &str) -> TaskStatus {
        match self.status_map.get(word) {
            Some(s) => *s,
            None => {
                UNMAPPED_STATUSES.inc();
                tracing::warn!(
                    provider,
                    upstream_status = word,
                    "unmapped upstream status reported as processing; add it to status_map"
                );
                TaskStatus::Processing
            }
        }
    }

    /// Read the status answer into our task state.
    pub fn read(
        &self,
        provider: &str,
        answer: Val,
        vars: &JqVars,
        redactor: &Redactor,
    ) -> Result<TaskState, ContractError> {
        let step = |name: &str, e: String| ContractError(format!("`query.{name}` failed: {e}"));
        let word = self
            .status
            .first(answer.clone(), vars)
            .map_err(|e| step("status", e))?
            .as_ref()
            .and_then(to_text)
            .ok_or_else(|| ContractError("the status answer has no status".into()))?;
        let status = self.map_status(provider, &word);

        let progress = match &self.progress {
            Some(jq) => jq
                .first(answer.clone(), vars)
                .map_err(|e| step("progress", e))?
                .and_then(|v| to_json(&v).as_f64())
                .map(|p| p.clamp(0.0, 100.0).round() as u8),
            None => None,
        };

        let urls = match &self.urls {
            Some(jq) if status == TaskStatus::Completed => {
                urls_from(jq.json(answer.clone(), vars).map_err(|e| step("urls", e))?)
            }
            _ => Vec::new(),
        };

        let error = if status == TaskStatus::Failed {
            let text = |jq: &Option<Jq>| -> Option<String> {
                jq.as_ref()?
                    .first(answer.clone(), vars)
                    .ok()
                    .flatten()
                    .as_ref()
                    .and_then(to_text)
                    .filter(|s| !s.is_empty())
            };
            Some(TaskError {
                code: text(&self.error_code)
                    .map(|c| redactor.clean(&c))
                    .unwrap_or_else(|| "generation_failed".into()),
                message: text(&self.error_message)
                    .map(|m| redactor.clean(&m))
                    .unwrap_or_else(|| "the task failed without a reason given".into()),
            })
        } else {
            None
        };

        Ok(TaskState {
            status,
            progress,
            urls,
            error,
        })
    }
}

/// Result URLs from what a `urls` program produced: one string or an array of them
/// (empty strings and non-strings are skipped).
pub fn urls_from(value: serde_json::Value) -> Vec<String> {
    use serde_json::Value;
    match value {
        Value::String(s) if !s.is_empty() => vec![s],
        Value::Array(items) => items
            .into_iter()
            .filter_map(|v| match v {
                Value::String(s) if !s.is_empty() => Some(s),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Removes what identifies an upstream (its host, brand words, our secret for it)
/// from messages that are passed on to clients.
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
    use crate::provider::transform::parse;
    use crate::task::MediaKind;

    fn reader() -> StatusReader {
        StatusReader {
            status: Jq::compile(".data.task_status").unwrap(),
            status_map: [
                ("submitted", TaskStatus::Queued),
                ("processing", TaskStatus::Processing),
                ("succeed", TaskStatus::Completed),
                ("failed", TaskStatus::Failed),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
            progress: Some(Jq::compile(".data.progress").unwrap()),
            urls: Some(Jq::compile("[.data.task_result.videos[]?.url]").unwrap()),
            error_code: None,
            error_message: Some(Jq::compile(".data.task_status_msg").unwrap()),
        }
    }

    fn vars() -> JqVars {
        JqVars::new("m", "m", MediaKind::Video, Some("1"), None)
    }

    fn read(body: &str) -> Result<TaskState, ContractError> {
        let redactor = Redactor::new(["api.acme.example".to_string(), "acme".to_string()]);
        reader().read("p", parse(body.as_bytes()).unwrap(), &vars(), &redactor)
    }

    #[test]
    fn completed_with_deep_urls() {
        let s = read(r#"{"data":{"task_status":"succeed","progress":100,"task_result":{"videos":[{"url":"u1"},{"url":"u2"}]}}}"#).unwrap();
        assert_eq!(s.status, TaskStatus::Completed);
        assert_eq!(s.urls, vec!["u1", "u2"]);
        assert_eq!(s.progress, Some(100));
    }

    #[test]
    fn unmapped_word_is_processing_and_counted() {
        let before = UNMAPPED_STATUSES.get();
        let s = read(r#"{"data":{"task_status":"WEIRD"}}"#).unwrap();
        assert_eq!(s.status, TaskStatus::Processing);
        assert!(UNMAPPED_STATUSES.get() > before);
    }

    #[test]
    fn failure_reason_is_cleaned() {
        let s = read(r#"{"data":{"task_status":"failed","task_status_msg":"ACME at api.acme.example refused: nsfw"}}"#).unwrap();
        let e = s.error.unwrap();
        assert_eq!(e.code, "generation_failed");
        assert_eq!(e.message, "[redacted] at [redacted] refused: nsfw");
    }

    #[test]
    fn missing_status_breaks_the_contract() {
        assert!(read(r#"{"data":{}}"#).is_err());
        assert!(read(r#"[1,2]"#).is_err());
    }
}
