//! A provider step that gave no usable result, in the provider's own terms: what went
//! wrong and at which step, with the upstream's reason already cleaned. Which refusal
//! of the catalogue a client gets for it is decided above this room
//! (`lifecycle/refusals.rs`), not here.

use std::time::Duration;

/// Why a provider step gave no usable result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamError {
    /// 429, or a body saying so; retry after this long, when it said.
    RateLimited(Option<Duration>),
    /// Our credentials were refused (an operator problem, logged where it happened).
    CredentialsRefused,
    /// The provider refused the request itself as invalid, for this reason.
    InvalidRequest(String),
    /// The step failed: what happened ("answered HTTP 500", "could not connect").
    Failed { step: &'static str, what: String },
    /// The step's answer could not be used: what was wrong with it.
    BadAnswer { step: &'static str, what: String },
    /// No complete answer within the step's timeout.
    TimedOut { step: &'static str },
    /// The provider no longer knows the task (404/410 after the submit), or it has no
    /// content to give.
    TaskGone,
    /// The content range asked for lies outside the result.
    RangeNotSatisfiable,
}

impl UpstreamError {
    pub fn failed(step: &'static str, what: impl Into<String>) -> Self {
        Self::Failed {
            step,
            what: what.into(),
        }
    }

    pub fn bad_answer(step: &'static str, what: impl Into<String>) -> Self {
        Self::BadAnswer {
            step,
            what: what.into(),
        }
    }

    /// The same error with its text (what the upstream or a program said) passed
    /// through `clean`.
    pub fn cleaned(self, clean: impl Fn(&str) -> String) -> Self {
        match self {
            Self::InvalidRequest(reason) => Self::InvalidRequest(clean(&reason)),
            Self::Failed { step, what } => Self::Failed {
                step,
                what: clean(&what),
            },
            Self::BadAnswer { step, what } => Self::BadAnswer {
                step,
                what: clean(&what),
            },
            other => other,
        }
    }
}
