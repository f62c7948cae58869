//! The public response shapes: what clients receive from submit, query, the listings
//! and the model list.

use serde::Serialize;
use serde_json::Value;

use crate::models::Model;
use crate::tasks::{MediaKind, TaskError, TaskState, TaskStatus};

/// Answer to a successful submit.
#[derive(Debug, Serialize)]
pub struct SubmitResponse<'a> {
    pub id: &'a str,
    pub object: MediaKind,
    pub model: &'a str,
    pub status: TaskStatus,
    pub created: u64,
}

/// Answer to a query.
#[derive(Debug, Serialize)]
pub struct TaskView<'a> {
    pub id: &'a str,
    pub object: MediaKind,
    pub model: &'a str,
    pub status: TaskStatus,
    pub created: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub video_url: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_url: Option<&'a str>,
    pub urls: &'a [String],
    pub error: Option<&'a TaskError>,
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
            id,
            object: kind,
            model,
            status: state.status,
            created,
            progress: state.progress,
            video_url: first.filter(|_| kind == MediaKind::Video),
            image_url: first.filter(|_| kind == MediaKind::Image),
            urls: &state.urls,
            error: state.error.as_ref(),
        }
    }
}

/// A page of a collection (`object` is `"list"`): `after=last_id` asks for the next.
#[derive(Debug, Serialize)]
pub struct List<'a, T> {
    pub object: &'static str,
    pub data: Vec<T>,
    pub first_id: Option<&'a str>,
    pub last_id: Option<&'a str>,
    pub has_more: bool,
}

/// A page of tasks, newest first.
pub type TaskList<'a> = List<'a, TaskView<'a>>;

/// A model a key may submit, with the JSON Schema of a submit body for it.
#[derive(Debug, Serialize)]
pub struct ModelView<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub kind: MediaKind,
    pub parameters: Value,
}

impl<'a> ModelView<'a> {
    pub fn of(model: &'a Model) -> Self {
        Self {
            id: &model.id,
            object: "model",
            kind: model.kind,
            parameters: model.request_schema(),
        }
    }
}

/// The models of an endpoint, by id; always one page.
pub type ModelList<'a> = List<'a, ModelView<'a>>;

impl<'a> ModelList<'a> {
    pub fn of(models: &[&'a Model]) -> Self {
        Self {
            object: "list",
            data: models.iter().map(|m| ModelView::of(m)).collect(),
            first_id: models.first().map(|m| m.id.as_str()),
            last_id: models.last().map(|m| m.id.as_str()),
            has_more: false,
        }
    }
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
