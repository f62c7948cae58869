//! A status answer normalised: whatever the provider says becomes one of our four
//! statuses, a progress, result URLs and a cleaned error.

use prometheus_client::metrics::counter::Counter;

use super::document::Document;
use super::jq::{Jq, JqVars, to_json, to_text};
use super::redact::Redactor;
use crate::FastMap;
use crate::config::{QueryConfig, Scope};
use crate::tasks::{TaskError, TaskState, TaskStatus};

/// How to read one provider's status answer.
#[derive(Debug)]
pub struct StatusReader {
    pub status: Jq,
    /// Exact upstream words → ours.
    pub status_map: FastMap<String, TaskStatus>,
    pub progress: Option<Jq>,
    pub urls: Option<Jq>,
    pub error_code: Option<Jq>,
    pub error_message: Option<Jq>,
    /// Counts status words missing from `status_map` (shared with the metrics).
    pub unmapped: Counter,
}

/// A step of the answer that broke the provider's contract.
#[derive(Debug, PartialEq, Eq)]
pub struct ContractError(pub String);

impl StatusReader {
    /// Compile the reading programs of a `query` block; problems under `at`.
    pub fn compile(c: &QueryConfig, at: &mut Scope, unmapped: &Counter) -> Option<Self> {
        let status = Jq::at(at, "status", &c.status);
        let progress = Jq::optional_at(at, "progress", &c.progress);
        let urls = Jq::optional_at(at, "urls", &c.urls);
        let error_code = Jq::optional_at(at, "error_code", &c.error_code);
        let error_message = Jq::optional_at(at, "error_message", &c.error_message);
        if c.status_map.is_empty() {
            at.push(
                "status_map",
                "must map every upstream status word to one of ours",
            );
        }
        Some(Self {
            status: status?,
            status_map: c.status_map.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            progress: progress?,
            urls: urls?,
            error_code: error_code?,
            error_message: error_message?,
            unmapped: unmapped.clone(),
        })
    }

    /// Map an upstream status word; unknown words count as `processing`, never leak.
    pub fn map_status(&self, provider: &str, word: &str, redactor: &Redactor) -> TaskStatus {
        match self.status_map.get(word) {
            Some(s) => *s,
            None => {
                self.unmapped.inc();
                tracing::warn!(
                    provider,
                    upstream_status = %redactor.for_log(word),
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
        answer: &Document,
        vars: &JqVars,
        redactor: &Redactor,
    ) -> Result<TaskState, ContractError> {
        let step = |name: &str, e: String| {
            ContractError(format!("`query.{name}` failed: {}", redactor.clean(&e)))
        };
        let word = answer
            .first(&self.status, vars)
            .map_err(|e| step("status", e))?
            .as_ref()
            .and_then(to_text)
            .ok_or_else(|| ContractError("the status answer has no status".into()))?;
        let status = self.map_status(provider, &word, redactor);

        let progress = match &self.progress {
            Some(jq) => answer
                .first(jq, vars)
                .map_err(|e| step("progress", e))?
                .and_then(|v| to_json(&v).as_f64())
                .map(|p| p.clamp(0.0, 100.0).round() as u8),
            None => None,
        };

        let urls = match &self.urls {
            Some(jq) if status == TaskStatus::Completed => {
                let urls = answer.first(jq, vars).map_err(|e| step("urls", e))?;
                let urls = urls_from(urls.map_or(serde_json::Value::Null, |v| to_json(&v)));
                // A link may carry our key (`?key=…`): the client never sees it.
                urls.into_iter().map(|u| redactor.clean_url(&u)).collect()
            }
            _ => Vec::new(),
        };

        let error = (status == TaskStatus::Failed).then(|| self.failure(answer, vars, redactor));
        Ok(TaskState {
            status,
            progress,
            urls,
            error,
        }
        .compact())
    }

    /// Why a failed task failed, cleaned; our defaults when the upstream does not say.
    fn failure(&self, answer: &Document, vars: &JqVars, redactor: &Redactor) -> TaskError {
        let text = |jq: &Option<Jq>| -> Option<String> {
            answer
                .first(jq.as_ref()?, vars)
                .ok()
                .flatten()
                .as_ref()
                .and_then(to_text)
                .filter(|s| !s.is_empty())
                .map(|s| redactor.clean(&s))
        };
        TaskError {
            code: text(&self.error_code)
                .map(|c| c.chars().take(MAX_CODE_CHARS).collect())
                .unwrap_or_else(|| "generation_failed".into()),
            message: text(&self.error_message)
                .unwrap_or_else(|| "the task failed without a reason given".into()),
        }
    }
}

/// Result URLs kept of one answer, at most: a task has a few results.
pub const MAX_URLS: usize = 16;
/// Longest result URL kept (signed storage URLs run to a few hundred bytes).
pub const MAX_URL_BYTES: usize = 4096;
/// Longest error code kept.
pub const MAX_CODE_CHARS: usize = 64;

/// Result URLs from what a `urls` program produced: one string or an array of them
/// (empty strings, non-strings and URLs longer than [`MAX_URL_BYTES`] are skipped; at
/// most [`MAX_URLS`] are kept). What an upstream says is kept bounded: it is cached
/// and sent to every client that asks.
pub fn urls_from(value: serde_json::Value) -> Vec<String> {
    use serde_json::Value;
    let usable = |v: Value| match v {
        Value::String(s) if !s.is_empty() && s.len() <= MAX_URL_BYTES => Some(s),
        _ => None,
    };
    let mut kept = Vec::new();
    match value {
        // Pushed one by one into a new vector: collecting from the answer's own vector
        // would reuse its allocation, and keep ten thousand URLs' room for sixteen.
        Value::Array(items) => {
            for url in items.into_iter().filter_map(usable).take(MAX_URLS) {
                kept.push(url);
            }
        }
        one => kept.extend(usable(one)),
    }
    kept.shrink_to_fit();
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::MediaKind;

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
            unmapped: Counter::default(),
        }
    }

    fn vars() -> JqVars {
        JqVars::new("m", "m", MediaKind::Video, Some("1"), None)
    }

    fn read(body: &str) -> Result<TaskState, ContractError> {
        let redactor = Redactor::new(["api.acme.example".to_string(), "acme".to_string()], []);
        let answer = Document::new(body.as_bytes());
        answer.check().unwrap();
        reader().read("p", &answer, &vars(), &redactor)
    }

    /// `body` read by `r`, with nothing to redact.
    fn read_value(r: &StatusReader, body: &serde_json::Value) -> TaskState {
        let text = body.to_string();
        r.read(
            "p",
            &Document::new(text.as_bytes()),
            &vars(),
            &Redactor::default(),
        )
        .unwrap()
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
        let r = reader();
        let redactor = Redactor::default();
        let answer = Document::new(br#"{"data":{"task_status":"WEIRD"}}"#);
        let s = r.read("p", &answer, &vars(), &redactor).unwrap();
        assert_eq!(s.status, TaskStatus::Processing);
        assert_eq!(r.unmapped.get(), 1);
    }

    #[test]
    fn failure_reason_is_cleaned() {
        let s = read(r#"{"data":{"task_status":"failed","task_status_msg":"ACME at api.acme.example refused: nsfw"}}"#).unwrap();
        let e = s.error.unwrap();
        assert_eq!(e.code, "generation_failed");
        assert_eq!(e.message, "[redacted] at [redacted] refused: nsfw");
    }

    #[test]
    fn what_is_kept_of_a_hostile_answer_is_bounded() {
        let urls: Vec<String> = (0..10_000).map(|n| format!("https://cdn/{n}")).collect();
        let long = format!("https://cdn/{}", "x".repeat(MAX_URL_BYTES));
        let body = serde_json::json!({"data": {
            "task_status": "failed",
            "task_status_msg": "m".repeat(100_000),
        }});
        let mut r = reader();
        r.error_code = Some(Jq::compile(".data.task_status_msg").unwrap());
        let s = read_value(&r, &body);
        let e = s.error.unwrap();
        assert_eq!(e.code.chars().count(), MAX_CODE_CHARS);
        assert!(e.message.chars().count() <= crate::providers::redact::MAX_MESSAGE_CHARS);
        let kept = urls_from(serde_json::json!(urls));
        assert_eq!(kept.len(), MAX_URLS);
        // What is kept holds room for what is kept, not for the whole answer.
        assert!(kept.capacity() <= MAX_URLS, "{}", kept.capacity());
        assert!(urls_from(serde_json::json!(long)).is_empty());
        assert!(urls_from(serde_json::json!([long, "https://cdn/ok"])) == ["https://cdn/ok"]);
    }

    /// What a cache entry of a hostile completed answer (100,000 result URLs) weighs:
    /// the sixteen URLs kept, not the room of the answer they were read from.
    #[test]
    fn a_hostile_answer_is_kept_at_the_size_of_what_is_kept() {
        let videos: Vec<_> = (0..100_000)
            .map(|n| serde_json::json!({"url": format!("https://cdn.example/{n:06}.mp4")}))
            .collect();
        let body = serde_json::json!({"data": {
            "task_status": "succeed",
            "task_result": {"videos": videos},
        }});
        let s = read_value(&reader(), &body);
        assert_eq!(s.urls.len(), MAX_URLS);
        assert!(s.urls.capacity() <= MAX_URLS, "{}", s.urls.capacity());
        let url_bytes: usize = s.urls.iter().map(String::len).sum();
        let held = crate::tasks::cache::weight("p\0id", &s);
        assert!(
            held <= 512 + url_bytes + MAX_URLS * std::mem::size_of::<String>(),
            "{held} bytes kept for {url_bytes} bytes of URLs"
        );
    }

    #[test]
    fn missing_status_breaks_the_contract() {
        assert!(read(r#"{"data":{}}"#).is_err());
        assert!(read(r#"[1,2]"#).is_err());
    }
}
