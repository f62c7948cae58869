//! A task in the OpenAI Videos API's shapes: the video object that `/v1/videos`
//! answers and lists, and the event a webhook of a task submitted there posts. Here,
//! below the API, beside the task's own shape, because the ledger keeps a submit's
//! answer and the deliverer renders the event.

use serde::{Deserialize, Serialize};

use super::{TaskError, TaskState, TaskStatus};

/// What an OpenAI submit asked for, as the SDK sent it: echoed in the video object
/// (the model's parameters do not say it back in OpenAI's terms).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VideoAsked {
    pub seconds: Option<String>,
    pub size: Option<String>,
}

impl VideoAsked {
    /// What the first answer of a task, kept by the ledger, says was asked.
    pub fn of_answer(body: &str) -> Self {
        serde_json::from_str(body).unwrap_or_default()
    }
}

/// The video object: `GET /v1/videos/{id}`, the create answer, the listing's items.
#[derive(Debug, Serialize)]
pub struct Video<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub model: &'a str,
    pub status: &'static str,
    pub progress: u8,
    pub created_at: u64,
    pub completed_at: Option<u64>,
    pub expires_at: Option<u64>,
    pub seconds: Option<&'a str>,
    pub size: Option<&'a str>,
    pub error: Option<&'a TaskError>,
    /// mediagate has no remix step.
    pub remixed_from_video_id: Option<&'a str>,
}

/// When a finished task ended and until when its video can be downloaded, where known.
#[derive(Debug, Clone, Copy, Default)]
pub struct VideoTimes {
    pub completed_at: Option<u64>,
    pub expires_at: Option<u64>,
}

impl<'a> Video<'a> {
    pub fn new(
        id: &'a str,
        model: &'a str,
        created: u64,
        state: &'a TaskState,
        asked: &'a VideoAsked,
        times: VideoTimes,
    ) -> Self {
        let finished = state.status.is_terminal();
        Self {
            id,
            object: "video",
            model,
            status: status(state.status),
            // OpenAI's is always a number: a finished task is done, an unstarted one
            // has not begun, whatever the provider said (or did not).
            progress: match state.status {
                TaskStatus::Completed => 100,
                TaskStatus::Queued => 0,
                _ => state.progress.unwrap_or(0).min(100),
            },
            created_at: created,
            completed_at: times.completed_at.filter(|_| finished),
            expires_at: times
                .expires_at
                .filter(|_| state.status == TaskStatus::Completed),
            seconds: asked.seconds.as_deref(),
            size: asked.size.as_deref(),
            error: state.error.as_ref(),
            remixed_from_video_id: None,
        }
    }
}

/// Our status in OpenAI's words: `processing` is `in_progress`.
pub fn status(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Queued => "queued",
        TaskStatus::Processing => "in_progress",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
    }
}

/// The webhook of a finished task submitted on `/v1/videos`, as OpenAI posts it.
#[derive(Debug, Serialize)]
pub struct VideoEvent<'a> {
    pub id: &'a str,
    pub object: &'static str,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub created_at: u64,
    pub data: EventData<'a>,
}

#[derive(Debug, Serialize)]
pub struct EventData<'a> {
    pub id: &'a str,
}

impl<'a> VideoEvent<'a> {
    /// The event `id` (the delivery's `webhook-id`) of task `task_id`, finished
    /// with `status` at `created_at`.
    pub fn new(id: &'a str, task_id: &'a str, status: TaskStatus, created_at: u64) -> Self {
        Self {
            id,
            object: "event",
            kind: match status {
                TaskStatus::Completed => "video.completed",
                _ => "video.failed",
            },
            created_at,
            data: EventData { id: task_id },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_video_says_what_is_known_in_openai_words() {
        let state = TaskState {
            status: TaskStatus::Processing,
            progress: Some(40),
            urls: vec![],
            error: None,
        };
        let asked = VideoAsked {
            seconds: Some("8".into()),
            size: None,
        };
        let times = VideoTimes {
            completed_at: Some(9),
            expires_at: Some(10),
        };
        let v = serde_json::to_value(Video::new("task_1", "m", 7, &state, &asked, times)).unwrap();
        assert_eq!(v["status"], "in_progress");
        assert_eq!(v["progress"], 40);
        assert_eq!(v["seconds"], "8");
        assert!(v["size"].is_null() && v["completed_at"].is_null() && v["expires_at"].is_null());
        assert_eq!(VideoAsked::of_answer(&v.to_string()), asked);
    }
}
