//! Bounded body read: refuse on `Content-Length`, enforce again while reading,
//! and require a JSON content type.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, header};
use http_body_util::{BodyExt, Full, Limited, combinators::BoxBody};

use crate::error::ApiError;

/// Error type of streamed response bodies (upstream content passes through).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Body of every response the gateway sends.
pub type ResponseBody = BoxBody<Bytes, BoxError>;

/// A complete in-memory response body.
pub fn full(bytes: impl Into<Bytes>) -> ResponseBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// True when the request declares a JSON body (`application/json`, any parameters,
/// or a `+json` suffix type).
pub fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return false;
    };
    let Ok(value) = value.to_str() else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
        || essence.rsplit_once('+').is_some_and(|(ty, suffix)| {
            suffix.eq_ignore_ascii_case("json")
                && ty.len() > "application/".len()
                && ty[.."application/".len()].eq_ignore_ascii_case("application/")
        })
}

/// After a refusal for size, at most this much more of the body is read and dropped
/// (and for at most [`DRAIN_TIME`]) before the 413 goes out. A client that is still
/// sending would otherwise find the connection closed under it and never read the
/// answer; a body larger than this gets the connection closed as before.
const DRAIN_BYTES: u64 = 1024 * 1024;
const DRAIN_TIME: Duration = Duration::from_secs(2);

/// Read a JSON request body of at most `limit` bytes.
pub async fn read_json_body<B>(
    headers: &HeaderMap,
    body: B,
    limit: usize,
) -> Result<Bytes, ApiError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    if !is_json(headers) {
        return Err(ApiError::unsupported_media_type());
    }
    let mut body = std::pin::pin!(body);
    // First stage: a declared length over the limit is refused without keeping any of it.
    if let Some(len) = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > limit as u64
    {
        if len - limit as u64 <= DRAIN_BYTES {
            drain(body.as_mut(), len).await;
        }
        return Err(ApiError::body_too_large(limit));
    }
    // Second stage: chunked or lying bodies are cut off while streaming.
    match Limited::new(body.as_mut(), limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            drain(body, DRAIN_BYTES).await;
            Err(ApiError::body_too_large(limit))
        }
        Err(e) if crate::limits::is_body_timeout(&*e) => Err(ApiError::body_timeout()),
        Err(e) => Err(ApiError::invalid_json(format!(
            "body could not be read ({e})"
        ))),
    }
}

/// Read and drop up to `max` bytes of what is left of `body`, for at most [`DRAIN_TIME`].
async fn drain<B>(mut body: std::pin::Pin<&mut B>, max: u64)
where
    B: http_body::Body<Data = Bytes>,
{
    let mut left = max;
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        while let Some(Ok(frame)) = body.frame().await {
            let len = frame.data_ref().map_or(0, |d| d.len() as u64);
            if len >= left {
                break;
            }
            left -= len;
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ct(v: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(v));
        h
    }

    #[test]
    fn json_content_types() {
        assert!(is_json(&ct("application/json")));
        assert!(is_json(&ct("Application/JSON; charset=utf-8")));
        assert!(is_json(&ct("application/vnd.api+json")));
        assert!(!is_json(&ct("text/plain")));
        assert!(!is_json(&ct("text/x+json")));
        assert!(!is_json(&HeaderMap::new()));
    }

    #[tokio::test]
    async fn refuses_on_declared_length_and_while_reading() {
        let mut h = ct("application/json");
        h.insert(header::CONTENT_LENGTH, HeaderValue::from_static("100"));
        let err = read_json_body(&h, Full::new(Bytes::from_static(b"{}")), 10)
            .await
            .unwrap_err();
        assert_eq!(err.code, "body_too_large");

        let h = ct("application/json");
        let big = Bytes::from(vec![b' '; 11]);
        let err = read_json_body(&h, Full::new(big), 10).await.unwrap_err();
        assert_eq!(err.code, "body_too_large");

        let ok = read_json_body(&h, Full::new(Bytes::from_static(b"{}")), 10)
            .await
            .unwrap();
        assert_eq!(&ok[..], b"{}");
    }
}
