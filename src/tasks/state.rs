//! A task's state as the gateway knows it: the four statuses, the media kind, and a
//! normalised upstream answer. The public response shapes built from it are in
//! `api::shapes`.

use serde::Serialize;

/// The only four statuses a client ever sees: the words a provider's `status_map`
/// maps to, so they are configuration vocabulary, below this room.
pub use crate::config::TaskStatus;

/// What a model produces: a family's `kind` in the configuration.
pub use crate::config::MediaKind;

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
    /// A state known only by its status (a submit's answer).
    pub fn of_status(status: TaskStatus) -> Self {
        Self {
            status,
            progress: None,
            urls: Vec::new(),
            error: None,
        }
    }

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
