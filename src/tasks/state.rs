//! A task's state as the gateway knows it: the four statuses, the media kind, and a
//! normalised upstream answer. The public response shapes built from it are in
//! `api::shapes`.

use serde::{Deserialize, Serialize};

/// The only four statuses a client ever sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    Queued,
    Processing,
    Completed,
    Failed,
}

impl TaskStatus {
    /// Completed and failed tasks never change again, so they can be cached for long.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Processing => "processing",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }
}

/// What a model produces; decides `object` and `video_url` versus `image_url`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MediaKind {
    Video,
    Image,
}

impl MediaKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Video => "video",
            Self::Image => "image",
        }
    }
}

/// Why a task failed, cleaned of anything naming the upstream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskError {
    pub code: String,
    pub message: String,
}

/// The state of a task as the upstream reported it, already normalised.
/// Cached; the per-client view adds the id and creation time.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskState {
    pub status: TaskStatus,
    pub progress: Option<u8>,
    pub urls: Vec<String>,
    pub error: Option<TaskError>,
}

impl TaskState {
    /// The same state holding room for its own content only. Kept states (cached,
    /// watched) often come from an upstream's answer, whose vectors and strings may
    /// have been allocated for far more than what was kept of them.
    #[must_use]
    pub fn compact(mut self) -> Self {
        self.urls.shrink_to_fit();
        for url in &mut self.urls {
            url.shrink_to_fit();
        }
        if let Some(e) = &mut self.error {
            e.code.shrink_to_fit();
            e.message.shrink_to_fit();
        }
        self
    }
}
