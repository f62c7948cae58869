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

/// For logs and the ledger's notes; the texts were cleaned of secrets where they
/// were made.
impl std::fmt::Display for UpstreamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::RateLimited(_) => f.write_str("the provider is rate limiting"),
            Self::CredentialsRefused => f.write_str("the provider refused our credentials"),
            Self::InvalidRequest(why) => write!(f, "the provider refused the request: {why}"),
            Self::Failed { step, what } => write!(f, "{step} failed: {what}"),
            Self::BadAnswer { step, what } => write!(f, "{step}: unreadable answer: {what}"),
            Self::TimedOut { step } => write!(f, "{step} timed out"),
            Self::TaskGone => f.write_str("the task is gone at the provider"),
            Self::RangeNotSatisfiable => f.write_str("range not satisfiable"),
        }
    }
}
