//! A stored result answered from storage, as a file server would: `ETag` (its
//! SHA-256) and `Last-Modified` (when it was stored), `If-None-Match` (304), one
//! `Range` (206, or 416 outside the file), `If-Range`, `HEAD` (the server sends no
//! body). Several ranges in one request are answered with the whole file, which
//! HTTP allows.

use std::ops::Range;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::TryStreamExt;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use http_body_util::{BodyExt, StreamBody};

use crate::error::ApiError;
use crate::response::{BoxError, ResponseBody};
use crate::storage::{Storage, StorageError};
use crate::tasks::ledger::StoredResult;

/// `302 Found` to a URL of `result`'s object presigned for `method`, valid `ttl`;
/// `None` where storage cannot presign. Presigned for the method asked: S3 signs it
/// with the URL. `Range` and the conditional headers are then the bucket's to answer.
async fn direct_link(
    storage: &Storage,
    result: &StoredResult,
    method: &http::Method,
    ttl: Duration,
) -> Option<Result<Response<ResponseBody>, ApiError>> {
    let method = match *method {
        http::Method::HEAD => http::Method::HEAD,
        _ => http::Method::GET,
    };
    let link = storage.direct_link(method, &result.object_key, ttl).await?;
    Some(
        link.map_err(|e| {
            tracing::warn!(error = %e, "storage: a direct link cannot be presigned");
            ApiError::storage_unavailable()
        })
        .and_then(|location| redirect(&location)),
    )
}

/// `302 Found` to `location`, not kept by caches: each use of the gateway's link
/// is presigned afresh.
fn redirect(location: &str) -> Result<Response<ResponseBody>, ApiError> {
    let location = HeaderValue::from_str(location).map_err(|_| ApiError::storage_unavailable())?;
    let mut resp = Response::new(empty());
    *resp.status_mut() = StatusCode::FOUND;
    let h = resp.headers_mut();
    h.insert(header::LOCATION, location);
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

/// How long a browser may keep a stored result without asking again: it never
/// changes under its ETag.
const MAX_AGE: &str = "private, max-age=86400";

/// Answer `result` from `storage` for `request`; with `direct` (S3's direct links
/// on), a redirect to a URL of the object presigned for that long.
pub(super) async fn answer(
    storage: &Storage,
    result: &StoredResult,
    request: &http::request::Parts,
    direct: Option<Duration>,
    now_ms: i64,
) -> Result<Response<ResponseBody>, ApiError> {
    if result.deleted_ms.is_some() || result.expires_ms <= now_ms {
        return Err(ApiError::result_expired());
    }
    if let Some(ttl) = direct
        && let Some(redirect) = direct_link(storage, result, &request.method, ttl).await
    {
        return redirect;
    }
    let headers = &request.headers;
    let etag = format!("\"{}\"", result.sha256);
    let stored = UNIX_EPOCH + Duration::from_millis(result.stored_ms.max(0) as u64);
    let last_modified = httpdate::fmt_http_date(stored);
    let size = result.bytes.max(0) as u64;
    let mut resp = Response::new(empty());
    let h = resp.headers_mut();
    for (name, value) in [
        (header::ETAG, etag.as_str()),
        (header::LAST_MODIFIED, last_modified.as_str()),
        (header::CACHE_CONTROL, MAX_AGE),
        (header::ACCEPT_RANGES, "bytes"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    ] {
        if let Ok(v) = HeaderValue::from_str(value) {
            h.insert(name, v);
        }
    }
    if matches_etag(headers.get(header::IF_NONE_MATCH), &etag) {
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
        return Ok(resp);
    }
    let range = match asked_range(headers, &etag, &last_modified) {
        Some(spec) => match satisfiable(spec, size) {
            Some(range) => Some(range),
            None => return Ok(unsatisfiable(size)),
        },
        None => None,
    };
    let read = storage
        .get(&result.object_key, range.clone())
        .await
        .map_err(read_failed)?;
    let content_type = result
        .content_type
        .as_deref()
        .and_then(|t| HeaderValue::from_str(t).ok())
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, content_type);
    let length = read.range.end - read.range.start;
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    if range.is_some() {
        let value = format!(
            "bytes {}-{}/{}",
            read.range.start,
            read.range.end.saturating_sub(1),
            read.size
        );
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(header::CONTENT_RANGE, v);
        }
        *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
    }
    let frames = read
        .body
        .map_ok(http_body::Frame::data)
        .map_err(|e| -> BoxError { Box::new(e) });
    *resp.body_mut() = BodyExt::boxed(StreamBody::new(sync_wrapper::SyncStream::new(frames)));
    Ok(resp)
}

/// A stored result gone from storage is expired (deleted under the ledger's feet);
/// anything else is storage failing.
fn read_failed(e: StorageError) -> ApiError {
    match e {
        StorageError::NotFound => ApiError::result_expired(),
        e => {
            tracing::warn!(error = %e, "storage: a stored result cannot be read");
            ApiError::storage_unavailable()
        }
    }
}

fn empty() -> ResponseBody {
    BodyExt::boxed(http_body_util::Empty::<Bytes>::new().map_err(|never| match never {}))
}

/// 416, saying how long the file is.
fn unsatisfiable(size: u64) -> Response<ResponseBody> {
    let mut resp = ApiError::range_not_satisfiable().into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
        resp.headers_mut().insert(header::CONTENT_RANGE, v);
    }
    resp
}

/// Whether `If-None-Match` names `etag` (or `*`).
fn matches_etag(if_none_match: Option<&HeaderValue>, etag: &str) -> bool {
    let Some(value) = if_none_match.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    value
        .split(',')
        .map(str::trim)
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

/// The one range asked for, unless `If-Range` names another version of the file
/// (then the whole file is sent) or there is none, or several.
fn asked_range(headers: &HeaderMap, etag: &str, last_modified: &str) -> Option<RangeSpec> {
    let value = headers.get(header::RANGE)?.to_str().ok()?;
    if let Some(if_range) = headers.get(header::IF_RANGE) {
        let v = if_range.to_str().ok()?;
        if v != etag && v != last_modified {
            return None;
        }
    }
    RangeSpec::parse(value)
}

/// One byte range as asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RangeSpec {
    /// `bytes=a-b` or `bytes=a-`.
    From { first: u64, last: Option<u64> },
    /// `bytes=-n`: the last n bytes.
    Suffix(u64),
}

impl RangeSpec {
    /// `bytes=…` with one range; `None` for anything else (several ranges, another
    /// unit, a malformed one): the whole file is sent, as HTTP allows.
    fn parse(value: &str) -> Option<Self> {
        let spec = value.trim().strip_prefix("bytes=")?.trim();
        if spec.contains(',') {
            return None;
        }
        let (first, last) = spec.split_once('-')?;
        let number = |s: &str| -> Option<u64> {
            let s = s.trim();
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())
                .flatten()
        };
        if first.trim().is_empty() {
            return Some(Self::Suffix(number(last)?));
        }
        let first = number(first)?;
        let last = if last.trim().is_empty() {
            None
        } else {
            Some(number(last)?)
        };
        if last.is_some_and(|l| l < first) {
            return None;
        }
        Some(Self::From { first, last })
    }
}

/// The bytes of `spec` in a file of `size`; `None` when none of them is in it.
fn satisfiable(spec: RangeSpec, size: u64) -> Option<Range<u64>> {
    match spec {
        RangeSpec::From { first, .. } if first >= size => None,
        RangeSpec::From { first, last } => {
            Some(first..last.map_or(size, |l| l.saturating_add(1).min(size)))
        }
        RangeSpec::Suffix(0) => None,
        RangeSpec::Suffix(n) => Some(size.saturating_sub(n)..size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse_as_http_says() {
        let p = RangeSpec::parse;
        assert_eq!(
            p("bytes=0-99"),
            Some(RangeSpec::From {
                first: 0,
                last: Some(99)
            })
        );
        assert_eq!(
            p("bytes=100-"),
            Some(RangeSpec::From {
                first: 100,
                last: None
            })
        );
        assert_eq!(p("bytes=-500"), Some(RangeSpec::Suffix(500)));
        for whole in [
            "bytes=0-1,5-6",
            "items=0-1",
            "bytes=5-1",
            "bytes=a-",
            "bytes=-",
            "0-1",
            "bytes=+1-2",
        ] {
            assert_eq!(p(whole), None, "{whole}");
        }
    }

    #[test]
    fn ranges_are_clamped_to_the_file() {
        let from = |first, last| RangeSpec::From { first, last };
        assert_eq!(satisfiable(from(0, Some(99)), 1000), Some(0..100));
        assert_eq!(satisfiable(from(900, Some(5000)), 1000), Some(900..1000));
        assert_eq!(satisfiable(from(10, None), 1000), Some(10..1000));
        assert_eq!(satisfiable(from(1000, None), 1000), None);
        assert_eq!(satisfiable(RangeSpec::Suffix(10), 1000), Some(990..1000));
        assert_eq!(satisfiable(RangeSpec::Suffix(5000), 1000), Some(0..1000));
        assert_eq!(satisfiable(RangeSpec::Suffix(0), 1000), None);
    }

    #[test]
    fn etags_match_strong_weak_and_any() {
        let m = |v: &str| matches_etag(Some(&HeaderValue::from_str(v).unwrap()), "\"abc\"");
        assert!(m("\"abc\""));
        assert!(m("W/\"abc\""));
        assert!(m("\"x\", \"abc\""));
        assert!(m("*"));
        assert!(!m("\"abcd\""));
        assert!(!matches_etag(None, "\"abc\""));
    }
}
