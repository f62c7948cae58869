//! What a provider's error means for a client: the refusal of the catalogue. Providers
//! say what went wrong upstream ([`UpstreamError`]); the HTTP status and code a client
//! gets for it are decided here, once, for every endpoint.

use crate::error::ApiError;
use crate::providers::UpstreamError;

impl From<UpstreamError> for ApiError {
    fn from(e: UpstreamError) -> Self {
        match e {
            UpstreamError::RateLimited(after) => ApiError::upstream_rate_limited(after),
            UpstreamError::CredentialsRefused => ApiError::upstream_auth(),
            UpstreamError::InvalidRequest(reason) => ApiError::upstream_invalid_request(&reason),
            UpstreamError::Failed { step, what } => ApiError::upstream_failed(step, what),
            UpstreamError::BadAnswer { step, what } => ApiError::upstream_bad_answer(step, what),
            UpstreamError::TimedOut { step } => ApiError::upstream_timeout(step),
            UpstreamError::TaskGone => ApiError::task_not_found(),
            UpstreamError::RangeNotSatisfiable => ApiError::range_not_satisfiable(),
        }
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, StatusCode};

    use super::*;
    use crate::outbound::CallError;
    use crate::providers::{Refusal, Step};

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
            let e = ApiError::from(refusal.into_error("p", step, Some("why")));
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
            let e = ApiError::from(r.into_error("p", Step::Submit, Some("why")));
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
            let e = ApiError::from(r.into_error("p", Step::Submit, None));
            assert_eq!(e.status, status);
        }
    }

    #[test]
    fn messages_carry_the_step_and_the_reason() {
        let e = ApiError::from(UpstreamError::failed("result", "answered HTTP 500"));
        assert_eq!(e.message, "upstream result: answered HTTP 500");
        let e = ApiError::from(UpstreamError::InvalidRequest("prompt too long".into()));
        assert!(e.message.ends_with("prompt too long"), "{}", e.message);
    }
}
