//! The public task shape: what a query answers, a listing lists and a webhook posts.

use serde::Serialize;

use super::ledger::TaskRecord;
use super::{MediaKind, TaskError, TaskState, TaskStatus};
use crate::money::Micros;

/// Answer to a successful submit (kept by the ledger for a retry with the same
/// idempotency key, so it lives here, below the API, as the task's shape does), and
/// the fields every [`TaskView`] starts with.
#[derive(Debug, Serialize)]
pub struct SubmitResponse<'a> {
    pub id: &'a str,
    pub object: MediaKind,
    pub model: &'a str,
    pub status: TaskStatus,
    pub created: u64,
}

/// A task as a query answers it, a listing lists it and a webhook posts it.
#[derive(Debug, Serialize)]
pub struct TaskView<'a> {
    #[serde(flatten)]
    pub task: SubmitResponse<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub video_url: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_url: Option<&'a str>,
    pub urls: &'a [String],
    pub error: Option<&'a TaskError>,
    /// What the task costs, for keys whose operator shows it (`show_cost`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost<'a>>,
}

/// A task's price in the answers of keys that show it: the estimate reserved at
/// submit and, once the task has ended, what it cost (`null` until then).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Cost<'a> {
    pub currency: &'a str,
    pub estimate: Micros,
    pub settled: Option<Micros>,
}

impl<'a> Cost<'a> {
    /// The cost a row records, when its task has a price.
    pub fn of(currency: &'a str, estimate: Option<i64>, settled: Option<i64>) -> Option<Self> {
        Some(Self {
            currency,
            estimate: Micros(estimate?),
            settled: settled.map(Micros),
        })
    }
}

impl<'a> TaskView<'a> {
    pub fn new(
        id: &'a str,
        kind: MediaKind,
        model: &'a str,
        created: u64,
        state: &'a TaskState,
    ) -> Self {
        let first = state.urls.first().map(String::as_str);
        Self {
            task: SubmitResponse {
                id,
                object: kind,
                model,
                status: state.status,
                created,
            },
            progress: state.progress,
            video_url: first.filter(|_| kind == MediaKind::Video),
            image_url: first.filter(|_| kind == MediaKind::Image),
            urls: &state.urls,
            error: state.error.as_ref(),
            cost: None,
        }
    }

    /// The same with the task's cost.
    #[must_use]
    pub fn with_cost(mut self, cost: Option<Cost<'a>>) -> Self {
        self.cost = cost;
        self
    }
}

/// The state the ledger recorded for a row.
pub fn recorded_state(row: &TaskRecord) -> Option<TaskState> {
    let status = row.status?;
    let urls = row
        .urls
        .as_deref()
        .and_then(|u| serde_json::from_str(u).ok())
        .unwrap_or_default();
    let error = match (&row.error_code, &row.error_message) {
        (Some(code), Some(message)) => Some(TaskError {
            code: code.clone(),
            message: message.clone(),
        }),
        _ => None,
    };
    Some(TaskState {
        status,
        progress: row.progress.and_then(|p| u8::try_from(p).ok()),
        urls,
        error: error.filter(|_| status == TaskStatus::Failed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_view_carries_image_url_and_no_video_url() {
        let state = TaskState {
            status: TaskStatus::Completed,
            progress: Some(100),
            urls: vec!["https://x/a.png".into(), "https://x/b.png".into()],
            error: None,
        };
        let v = serde_json::to_value(TaskView::new(
            "task_1",
            MediaKind::Image,
            "zeta-5.0",
            7,
            &state,
        ))
        .unwrap();
        assert_eq!(v["image_url"], "https://x/a.png");
        assert!(v.get("video_url").is_none());
        assert_eq!(v["urls"].as_array().unwrap().len(), 2);
        assert_eq!(v["status"], "completed");
        assert!(v["error"].is_null());
    }

    #[test]
    fn the_view_is_the_submit_answer_then_the_state() {
        let state = TaskState {
            status: TaskStatus::Failed,
            progress: Some(100),
            urls: vec![],
            error: Some(TaskError {
                code: "c".into(),
                message: "m".into(),
            }),
        };
        let view = TaskView::new("t", MediaKind::Video, "m1", 7, &state);
        assert_eq!(
            serde_json::to_string(&view).unwrap(),
            r#"{"id":"t","object":"video","model":"m1","status":"failed","created":7,"progress":100,"urls":[],"error":{"code":"c","message":"m"}}"#
        );
    }

    #[test]
    fn unfinished_view_omits_progress_when_unknown() {
        let state = TaskState {
            status: TaskStatus::Queued,
            progress: None,
            urls: vec![],
            error: None,
        };
        let v = serde_json::to_value(TaskView::new("t", MediaKind::Video, "m", 1, &state)).unwrap();
        assert!(v.get("progress").is_none());
        assert!(v.get("video_url").is_none());
        assert_eq!(v["object"], "video");
    }
}
