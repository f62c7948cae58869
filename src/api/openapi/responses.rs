//! The answers of an operation: its success, and its refusals from the error
//! catalogue (`crate::error`) grouped by status, each narrowed to the codes the
//! operation can give, with the headers that status carries.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use super::objects::{Header, Response};
use super::schemas::reference;
use crate::error::ApiError;

/// Refusals of every operation behind a key: authentication, the key's limits, the
/// request timeout.
pub(super) const AUTHENTICATED: &[&str] = &[
    "repeated_header",
    "missing_api_key",
    "invalid_api_key",
    "rate_limited",
    "too_many_concurrent_requests",
    "too_many_connections",
    "request_timeout",
];

/// Refusals of an operation that calls the provider.
pub(super) const UPSTREAM: &[&str] = &[
    "upstream_invalid_request",
    "upstream_rate_limited",
    "upstream_error",
    "upstream_bad_response",
    "upstream_auth_failed",
    "upstream_timeout",
    "no_provider",
];

pub(super) const SUBMIT: &[&str] = &[
    "invalid_json",
    "missing_model",
    "unknown_model",
    "invalid_parameter",
    "unknown_parameter",
    "invalid_idempotency_key",
    "idempotency_key_required",
    "model_not_allowed",
    "body_timeout",
    "idempotency_key_in_use",
    "body_too_large",
    "unsupported_media_type",
    "idempotency_key_reused",
    "quota_exceeded",
    "budget_exceeded",
    "price_unavailable",
    "submit_outcome_unknown",
    "ledger_unavailable",
];
pub(super) const LIST: &[&str] = &["invalid_parameter", "ledger_off", "ledger_unavailable"];
/// A malformed id segment is an unknown path (`not_found`) rather than an unknown task;
/// a long-poll's `wait` or `status` out of range is `invalid_parameter`.
pub(super) const QUERY: &[&str] = &["task_not_found", "not_found", "invalid_parameter"];
pub(super) const DELETE: &[&str] = &[
    "task_not_found",
    "not_found",
    "not_cancelable",
    "ledger_unavailable",
    "storage_unavailable",
];
pub(super) const CONTENT: &[&str] = &[
    "task_not_found",
    "not_found",
    "content_not_ready",
    "range_not_satisfiable",
    "link_expired",
    "invalid_signature",
    "result_expired",
    "storage_unavailable",
    "ledger_unavailable",
];
pub(super) const MODEL: &[&str] = &["model_not_found", "not_found"];
/// `/v1/videos`' own: a form that cannot be read, the remix, the preview variants.
pub(super) const VIDEO_SUBMIT: &[&str] = &["invalid_form"];
pub(super) const REMIX: &[&str] = &["unsupported"];
pub(super) const VARIANT: &[&str] = &["variant_not_found", "invalid_parameter"];
pub(super) const READY: &[&str] = &["shutting_down", "too_many_connections"];
/// A client over its connection cap is refused on any route.
pub(super) const ANY: &[&str] = &["too_many_connections"];

/// Refusals of no listed operation, documented once under `components.responses`:
/// 405 answers a method the document does not list for a path.
pub(super) const UNLISTED: [(&str, &str); 1] = [("MethodNotAllowed", "method_not_allowed")];

/// `components.responses`.
pub(super) fn unlisted() -> BTreeMap<&'static str, Response> {
    UNLISTED
        .iter()
        .filter_map(|&(name, code)| {
            let mut answer = refusals(&[&[code]], true).into_values().next()?;
            answer.description = format!("{} Any method but those of `Allow`.", answer.description);
            Some((name, answer))
        })
        .collect()
}

/// Headers shared by many answers, defined once under `components.headers`: the
/// header's name, its component name, and whether only authenticated answers have it.
const SHARED: [(&str, &str, bool); 4] = [
    ("x-request-id", "RequestId", false),
    ("x-ratelimit-limit", "RateLimitLimit", true),
    ("x-ratelimit-remaining", "RateLimitRemaining", true),
    ("x-ratelimit-reset", "RateLimitReset", true),
];

/// `components.headers`.
pub(super) fn shared_headers() -> BTreeMap<&'static str, Header> {
    let count = |description| Header::Inline {
        description,
        required: false,
        schema: json!({"type": "integer", "minimum": 0}),
    };
    BTreeMap::from([
        (
            "RequestId",
            Header::Inline {
                description: "The request's id (yours when you sent a sane one); quote it when reporting a problem.",
                required: true,
                schema: json!({"type": "string", "minLength": 1}),
            },
        ),
        (
            "RateLimitLimit",
            count("Requests the key may make at once (its burst)."),
        ),
        (
            "RateLimitRemaining",
            count("Requests the key may make now."),
        ),
        (
            "RateLimitReset",
            count("Seconds until the key's allowance is whole again."),
        ),
    ])
}

/// The shared headers of an answer, as references.
pub(super) fn headers(authenticated: bool) -> BTreeMap<&'static str, Header> {
    SHARED
        .iter()
        .filter(|(_, _, keyed)| authenticated || !keyed)
        .map(|(name, component, _)| (*name, Header::reference(component)))
        .collect()
}

/// A success with a JSON body of `schema`.
pub(super) fn success(description: &str, schema: Value, authenticated: bool) -> Response {
    Response {
        description: description.to_string(),
        headers: headers(authenticated),
        content: Some(super::objects::json_content(schema)),
        links: BTreeMap::new(),
    }
}

/// The refusals with these `codes`, one answer per status.
pub(super) fn refusals(codes: &[&[&str]], authenticated: bool) -> BTreeMap<String, Response> {
    let wanted: BTreeSet<&str> = codes.iter().flat_map(|c| c.iter().copied()).collect();
    let mut by_status: BTreeMap<u16, Vec<ApiError>> = BTreeMap::new();
    for e in ApiError::catalogue() {
        if wanted.contains(e.code) {
            by_status.entry(e.status.as_u16()).or_default().push(e);
        }
    }
    by_status
        .into_iter()
        .map(|(status, errors)| (status.to_string(), refusal(&errors, authenticated)))
        .collect()
}

/// One status's answer: the error body with `code` one of these errors'.
fn refusal(errors: &[ApiError], authenticated: bool) -> Response {
    let codes: Vec<&str> = errors.iter().map(|e| e.code).collect();
    let status = errors[0].status;
    let mut headers = headers(authenticated && status.as_u16() != 401);
    if status.as_u16() == 401 {
        headers.insert(
            "WWW-Authenticate",
            inline("The authentication scheme to use: `Bearer`.", true),
        );
    }
    // Present when one of the errors sets it; required when all of them do.
    if errors.iter().any(|e| e.retry_after.is_some()) {
        let always = errors.iter().all(|e| e.retry_after.is_some());
        headers.insert(
            "Retry-After",
            Header::Inline {
                description: "Seconds to wait before retrying.",
                required: always,
                schema: json!({"type": "integer", "minimum": 1}),
            },
        );
    }
    if errors.iter().any(|e| e.allow.is_some()) {
        headers.insert("Allow", inline("The methods the path allows.", true));
    }
    let reason = status.canonical_reason().unwrap_or("Error");
    let schema = json!({
        "allOf": [reference("Error")],
        "properties": {"error": {"properties": {"code": {"enum": codes}}}},
    });
    Response {
        description: format!("{reason}: `{}`.", codes.join("`, `")),
        headers,
        content: Some(super::objects::json_content(schema)),
        links: BTreeMap::new(),
    }
}

fn inline(description: &'static str, required: bool) -> Header {
    Header::Inline {
        description,
        required,
        schema: json!({"type": "string"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_named_is_in_the_catalogue_and_every_refusal_is_named() {
        let catalogue: BTreeSet<&str> = ApiError::catalogue().iter().map(|e| e.code).collect();
        let named: BTreeSet<&str> = [
            AUTHENTICATED,
            UPSTREAM,
            SUBMIT,
            LIST,
            QUERY,
            DELETE,
            CONTENT,
            MODEL,
            READY,
            VIDEO_SUBMIT,
            REMIX,
            VARIANT,
        ]
        .concat()
        .into_iter()
        .collect();
        let unknown: Vec<_> = named.difference(&catalogue).collect();
        assert!(unknown.is_empty(), "not in the catalogue: {unknown:?}");
        let unnamed: Vec<_> = catalogue.difference(&named).copied().collect();
        let codes: Vec<_> = UNLISTED.iter().map(|(_, code)| *code).collect();
        assert_eq!(unnamed, codes);
        assert!(unlisted()["MethodNotAllowed"].headers.contains_key("Allow"));
    }

    #[test]
    fn statuses_carry_their_headers() {
        let r = refusals(&[SUBMIT, UPSTREAM, AUTHENTICATED], true);
        let names = |s: &str| r[s].headers.keys().copied().collect::<Vec<_>>();
        assert!(names("401").contains(&"WWW-Authenticate"));
        assert!(!names("401").contains(&"x-ratelimit-limit"));
        assert!(names("409").contains(&"Retry-After"));
        let retry = |s: &str| match &r[s].headers["Retry-After"] {
            Header::Inline { required, .. } => *required,
            Header::Ref { .. } => unreachable!(),
        };
        assert!(retry("409"));
        // Every 429, `upstream_rate_limited` too (a second when the provider said
        // nothing).
        assert!(retry("429"));
        assert!(!names("400").contains(&"Retry-After"));
        assert!(r.contains_key("413") && r.contains_key("415") && r.contains_key("422"));
        assert!(!r.contains_key("404"));
    }
}
