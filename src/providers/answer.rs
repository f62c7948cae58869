//! What an upstream answer means. The one place where upstream HTTP statuses, refusal
//! words and unanswered calls become [`UpstreamError`]s, and where it is decided
//! whether a failed submit proves that no task was created: only then may the next
//! provider be tried, since a user must never pay twice.

use std::time::Duration;

use http::{HeaderMap, StatusCode};

use super::UpstreamError;
use crate::outbound::client::CallError;

/// The call a provider was answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Submit,
    Query,
    Result,
    Content,
    Cancel,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submit => "submit",
            Self::Query => "query",
            Self::Result => "result",
            Self::Content => "content",
            Self::Cancel => "cancel",
        }
    }
}

/// Why an upstream call did not give what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// 429, or a body saying so: retry later.
    RateLimited(Option<Duration>),
    /// 401/403: our credentials were refused.
    Credentials,
    /// A submit answered 503, or a body saying the upstream is down.
    Unavailable,
    /// A submit answered 404/405/501: the configured endpoint does not exist.
    NoEndpoint(StatusCode),
    /// A later step answered 404/410: the upstream no longer knows the task.
    Gone,
    /// A submit refused as invalid (another 4xx, or a body saying so).
    Invalid,
    /// Any other unsuccessful status.
    Failed(StatusCode),
    /// No connection could be made: nothing was sent.
    Unreached,
    /// The connection would have gone into a private network: nothing was sent.
    Forbidden,
    /// The request may have been received, but no complete answer came back.
    Broken,
    /// No complete answer within the step's timeout.
    TimedOut,
}

impl Refusal {
    /// The refusal an unsuccessful HTTP status stands for; `None` for a success.
    pub fn of_status(step: Step, status: StatusCode, headers: &HeaderMap) -> Option<Self> {
        let submit = step == Step::Submit;
        Some(match status {
            s if s.is_success() => return None,
            StatusCode::TOO_MANY_REQUESTS => Self::RateLimited(retry_after(headers)),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Self::Credentials,
            StatusCode::SERVICE_UNAVAILABLE if submit => Self::Unavailable,
            StatusCode::NOT_FOUND
            | StatusCode::METHOD_NOT_ALLOWED
            | StatusCode::NOT_IMPLEMENTED
                if submit =>
            {
                Self::NoEndpoint(status)
            }
            StatusCode::NOT_FOUND | StatusCode::GONE if !submit => Self::Gone,
            s if submit && s.is_client_error() => Self::Invalid,
            s => Self::Failed(s),
        })
    }

    /// A successful submit answer whose `success` check failed, as `submit.refusal`
    /// classified it: only a declining upstream lets the next provider try.
    pub fn of_word(word: Option<&str>) -> Self {
        match word {
            Some("rate_limited") => Self::RateLimited(None),
            Some("auth") => Self::Credentials,
            Some("unavailable") => Self::Unavailable,
            _ => Self::Invalid,
        }
    }

    /// A call that got no answer.
    pub fn of_call(e: &CallError) -> Self {
        match e {
            CallError::Unreached(_) => Self::Unreached,
            CallError::Forbidden => Self::Forbidden,
            CallError::Broken(_) => Self::Broken,
            CallError::TimedOut => Self::TimedOut,
        }
    }

    /// Whether this proves the upstream created no task.
    pub fn created_nothing(&self) -> bool {
        matches!(
            self,
            Self::RateLimited(_)
                | Self::Credentials
                | Self::Unavailable
                | Self::NoEndpoint(_)
                | Self::Unreached
                | Self::Forbidden
        )
    }

    /// The provider's error. `reason` is the upstream's own words, already redacted;
    /// what an operator must fix is logged under the provider's name.
    pub fn into_error(self, provider: &str, step: Step, reason: Option<&str>) -> UpstreamError {
        let name = step.as_str();
        match self {
            Self::RateLimited(after) => UpstreamError::RateLimited(after),
            Self::Credentials => {
                tracing::error!(provider, step = name, "provider refused our credentials");
                UpstreamError::CredentialsRefused
            }
            Self::Unavailable => UpstreamError::failed(
                name,
                format!("unavailable ({})", reason.unwrap_or("no reason given")),
            ),
            Self::NoEndpoint(status) => {
                tracing::error!(provider, %status, "submit endpoint refused; check submit.path and submit.method");
                UpstreamError::failed(name, format!("answered HTTP {}", status.as_u16()))
            }
            Self::Gone => UpstreamError::TaskGone,
            Self::Invalid => {
                UpstreamError::InvalidRequest(reason.unwrap_or("no reason given").to_string())
            }
            Self::Failed(status) => UpstreamError::failed(
                name,
                match reason {
                    Some(r) => format!("answered HTTP {} ({r})", status.as_u16()),
                    None => format!("answered HTTP {}", status.as_u16()),
                },
            ),
            Self::Unreached => UpstreamError::failed(name, "could not connect"),
            Self::Forbidden => {
                tracing::warn!(
                    provider,
                    step = name,
                    "a link or redirect into a private network was refused"
                );
                UpstreamError::failed(name, "points into a private network; refused")
            }
            Self::Broken => UpstreamError::failed(name, "connection broke before an answer"),
            Self::TimedOut => UpstreamError::TimedOut { step: name },
        }
    }
}

/// `Retry-After` in seconds from an upstream answer (HTTP dates are ignored).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn errors_carry_the_step_and_the_reason() {
        let e =
            Refusal::Failed(StatusCode::INTERNAL_SERVER_ERROR).into_error("p", Step::Result, None);
        assert_eq!(e, UpstreamError::failed("result", "answered HTTP 500"));
        let e = Refusal::Invalid.into_error("p", Step::Submit, Some("prompt too long"));
        assert_eq!(e, UpstreamError::InvalidRequest("prompt too long".into()));
    }

    #[test]
    fn retry_after_takes_seconds_only() {
        let h = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(http::header::RETRY_AFTER, HeaderValue::from_str(v).unwrap());
            h
        };
        assert_eq!(retry_after(&h("7")), Some(Duration::from_secs(7)));
        assert_eq!(retry_after(&h(" 12 ")), Some(Duration::from_secs(12)));
        assert_eq!(retry_after(&h("Wed, 21 Oct 2015 07:28:00 GMT")), None);
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }
}
