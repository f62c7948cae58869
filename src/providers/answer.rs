//! What an upstream answer means. The one place where upstream HTTP statuses, refusal
//! words and unanswered calls become errors of the catalogue, and where it is decided
//! whether a failed submit proves that no task was created: only then may the next
//! provider be tried, since a user must never pay twice.

use std::time::Duration;

use http::{HeaderMap, StatusCode};

use crate::error::ApiError;
use crate::outbound::client::CallError;

/// The call a provider was answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Submit,
    Query,
    Result,
    Content,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Submit => "submit",
            Self::Query => "query",
            Self::Result => "result",
            Self::Content => "content",
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

    /// The catalogue error. `reason` is the upstream's own words, already redacted;
    /// what an operator must fix is logged under the provider's name.
    pub fn into_error(self, provider: &str, step: Step, reason: Option<&str>) -> ApiError {
        let name = step.as_str();
        match self {
            Self::RateLimited(after) => ApiError::upstream_rate_limited(after),
            Self::Credentials => {
                tracing::error!(provider, step = name, "provider refused our credentials");
                ApiError::upstream_auth()
            }
            Self::Unavailable => ApiError::upstream_failed(
                name,
                format!("unavailable ({})", reason.unwrap_or("no reason given")),
            ),
            Self::NoEndpoint(status) => {
                tracing::error!(provider, %status, "submit endpoint refused; check submit.path and submit.method");
                ApiError::upstream_failed(name, format!("answered HTTP {}", status.as_u16()))
            }
            Self::Gone => ApiError::task_not_found(),
            Self::Invalid => {
                ApiError::upstream_invalid_request(reason.unwrap_or("no reason given"))
            }
            Self::Failed(status) => ApiError::upstream_failed(
                name,
                match reason {
                    Some(r) => format!("answered HTTP {} ({r})", status.as_u16()),
                    None => format!("answered HTTP {}", status.as_u16()),
                },
            ),
            Self::Unreached => ApiError::upstream_failed(name, "could not connect"),
            Self::Forbidden => {
                tracing::warn!(
                    provider,
                    step = name,
                    "a link or redirect into a private network was refused"
                );
                ApiError::upstream_failed(name, "points into a private network; refused")
            }
            Self::Broken => ApiError::upstream_failed(name, "connection broke before an answer"),
            Self::TimedOut => ApiError::upstream_timeout(name),
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

    /// Every upstream status a step can meet: what the client gets, and whether the
    /// next provider may be tried.
    #[test]
    fn statuses_map_to_the_catalogue() {
        use Step::*;
        #[rustfmt::skip]
        let table: &[(Step, u16, u16, &str, bool)] = &[
            (Submit, 400, 400, "upstream_invalid_request", false),
            (Submit, 422, 400, "upstream_invalid_request", false),
            (Submit, 401, 502, "upstream_auth_failed", true),
            (Submit, 403, 502, "upstream_auth_failed", true),
            (Submit, 404, 502, "upstream_error", true),
            (Submit, 405, 502, "upstream_error", true),
            (Submit, 501, 502, "upstream_error", true),
            (Submit, 429, 429, "upstream_rate_limited", true),
            (Submit, 503, 502, "upstream_error", true),
            (Submit, 500, 502, "upstream_error", false),
            (Submit, 502, 502, "upstream_error", false),
            (Query, 404, 404, "task_not_found", false),
            (Query, 410, 404, "task_not_found", false),
            (Query, 400, 502, "upstream_error", false),
            (Query, 401, 502, "upstream_auth_failed", true),
            (Query, 429, 429, "upstream_rate_limited", true),
            (Query, 503, 502, "upstream_error", false),
            (Result, 500, 502, "upstream_error", false),
            (Content, 404, 404, "task_not_found", false),
            (Content, 500, 502, "upstream_error", false),
        ];
        for &(step, upstream, status, code, failover) in table {
            let upstream = StatusCode::from_u16(upstream).unwrap();
            let refusal = Refusal::of_status(step, upstream, &HeaderMap::new()).unwrap();
            assert_eq!(refusal.created_nothing(), failover, "{step:?} {upstream}");
            let e = refusal.into_error("p", step, Some("why"));
            assert_eq!(
                (e.status.as_u16(), e.code),
                (status, code),
                "{step:?} {upstream}"
            );
        }
        assert_eq!(
            Refusal::of_status(Submit, StatusCode::OK, &HeaderMap::new()),
            None
        );
        assert_eq!(
            Refusal::of_status(Query, StatusCode::CREATED, &HeaderMap::new()),
            None
        );
    }

    #[test]
    fn refusal_words_and_unanswered_calls() {
        #[rustfmt::skip]
        let words: &[(Option<&str>, u16, &str, bool)] = &[
            (Some("rate_limited"), 429, "upstream_rate_limited", true),
            (Some("auth"), 502, "upstream_auth_failed", true),
            (Some("unavailable"), 502, "upstream_error", true),
            (Some("anything else"), 400, "upstream_invalid_request", false),
            (None, 400, "upstream_invalid_request", false),
        ];
        for &(word, status, code, failover) in words {
            let r = Refusal::of_word(word);
            assert_eq!(r.created_nothing(), failover, "{word:?}");
            let e = r.into_error("p", Step::Submit, Some("why"));
            assert_eq!((e.status.as_u16(), e.code), (status, code), "{word:?}");
        }
        let calls = [
            (CallError::Unreached("x".into()), 502, true),
            (CallError::Forbidden, 502, true),
            (CallError::Broken("x".into()), 502, false),
            (CallError::TimedOut, 504, false),
        ];
        for (call, status, failover) in calls {
            let r = Refusal::of_call(&call);
            assert_eq!(r.created_nothing(), failover, "{call:?}");
            assert_eq!(r.into_error("p", Step::Submit, None).status, status);
        }
    }

    #[test]
    fn messages_carry_the_step_and_the_reason() {
        let e =
            Refusal::Failed(StatusCode::INTERNAL_SERVER_ERROR).into_error("p", Step::Result, None);
        assert_eq!(e.message, "upstream result: answered HTTP 500");
        let e = Refusal::Invalid.into_error("p", Step::Submit, Some("prompt too long"));
        assert!(e.message.ends_with("prompt too long"), "{}", e.message);
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
