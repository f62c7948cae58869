//! `Idempotency-Key` (the IETF httpapi draft): the header read, and a kept answer
//! given again (the task service waits for the first request's answer).

use http::{HeaderMap, HeaderValue, Response, StatusCode, header};

use crate::access::ApiKey;
use crate::error::ApiError;
use crate::response::{ResponseBody, full};
use crate::tasks::ledger::Answer;

const HEADER: &str = "idempotency-key";

/// The key of a submit: 1 to 255 visible ASCII characters, bare or as a quoted
/// structured-field string. Required when the client key says so.
pub(super) fn read(headers: &HeaderMap, key: &ApiKey) -> Result<Option<String>, ApiError> {
    let mut sent = headers.get_all(HEADER).iter();
    let Some(value) = sent.next() else {
        return match key.require_idempotency_key {
            true => Err(ApiError::idempotency_key_required()),
            false => Ok(None),
        };
    };
    if sent.next().is_some() {
        return Err(ApiError::repeated_header("Idempotency-Key"));
    }
    let text = value
        .to_str()
        .map_err(|_| ApiError::invalid_idempotency_key())?
        .trim();
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    let valid = (1..=255).contains(&text.len()) && text.bytes().all(|b| (0x21..=0x7e).contains(&b));
    match valid {
        true => Ok(Some(text.to_string())),
        false => Err(ApiError::invalid_idempotency_key()),
    }
}

/// A kept answer, given again; `Idempotent-Replayed` tells the client so.
pub(super) fn replay(answer: &Answer) -> Response<ResponseBody> {
    let mut resp = Response::new(full(answer.body.clone()));
    *resp.status_mut() = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert("idempotent-replayed", HeaderValue::from_static("true"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(required: bool) -> ApiKey {
        ApiKey::new("k", [0; 32], None).with_policy(None, required)
    }

    fn read_value(v: Option<&str>, required: bool) -> Result<Option<String>, &'static str> {
        let mut h = HeaderMap::new();
        if let Some(v) = v {
            h.insert(HEADER, HeaderValue::from_str(v).unwrap());
        }
        read(&h, &key(required)).map_err(|e| e.code)
    }

    #[test]
    fn keys_are_read_bare_or_quoted_and_bounded() {
        assert_eq!(
            read_value(Some("abc-123"), false),
            Ok(Some("abc-123".into()))
        );
        assert_eq!(
            read_value(Some("\"8e03978e\""), false),
            Ok(Some("8e03978e".into()))
        );
        assert_eq!(read_value(None, false), Ok(None));
        assert_eq!(read_value(None, true), Err("idempotency_key_required"));
        for bad in ["", "\"\"", "has space", &"x".repeat(256)] {
            assert_eq!(
                read_value(Some(bad), false),
                Err("invalid_idempotency_key"),
                "{bad}"
            );
        }
    }
}
