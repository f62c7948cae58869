//! Request body bounds: refuse on `Content-Length`, enforce again while reading,
//! require a JSON content type, and give the whole body a read deadline.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use tokio::time::{Instant, Sleep};

use crate::error::ApiError;
use crate::response::BoxError;

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
/// answer; past this, the connection is closed without reading more.
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
    read_body(headers, body, limit).await
}

/// Read a request body of any type, of at most `limit` bytes.
pub async fn read_body<B>(headers: &HeaderMap, body: B, limit: usize) -> Result<Bytes, ApiError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
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
        Err(e) if is_body_timeout(&*e) => Err(ApiError::body_timeout()),
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

// --- Read deadline (slow-body protection): a client that has sent its headers gets
// `server.body_read_timeout_ms` for the whole body, then 408.

/// Why a body could not be read: the deadline passed, or the connection failed.
#[derive(Debug)]
pub enum BodyReadError {
    TimedOut,
    Failed(BoxError),
}

impl std::fmt::Display for BodyReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TimedOut => f.write_str("request body was not received in time"),
            Self::Failed(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for BodyReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::TimedOut => None,
            Self::Failed(e) => Some(&**e),
        }
    }
}

/// True when a body read failed because the deadline passed (the error may have been
/// boxed by a body combinator on the way).
pub fn is_body_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    matches!(
        e.downcast_ref::<BodyReadError>(),
        Some(BodyReadError::TimedOut)
    )
}

/// A request body that fails with [`BodyReadError::TimedOut`] once its deadline passes.
pub struct TimedBody<B> {
    inner: Pin<Box<B>>,
    deadline: Pin<Box<Sleep>>,
    done: bool,
}

impl<B> TimedBody<B> {
    /// The deadline starts now (when the request headers have been read).
    pub fn new(inner: B, timeout: Duration) -> Self {
        Self {
            inner: Box::pin(inner),
            deadline: Box::pin(tokio::time::sleep_until(Instant::now() + timeout)),
            done: false,
        }
    }
}

impl<B> Body for TimedBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BodyReadError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyReadError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = self.inner.as_mut().poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(|e| BodyReadError::Failed(e.into()))));
        }
        ready!(self.deadline.as_mut().poll(cx));
        self.done = true;
        Poll::Ready(Some(Err(BodyReadError::TimedOut)))
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use http_body_util::Full;

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

    #[tokio::test]
    async fn slow_body_times_out() {
        // A body whose next frame never comes.
        let body = http_body_util::StreamBody::new(futures_util::stream::pending::<
            Result<Frame<Bytes>, BoxError>,
        >());
        let err = TimedBody::new(body, Duration::from_millis(20))
            .collect()
            .await
            .err()
            .unwrap();
        assert!(is_body_timeout(&err));
    }

    #[tokio::test]
    async fn complete_body_passes() {
        let body = http_body_util::Full::new(Bytes::from_static(b"{}"));
        let got = TimedBody::new(body, Duration::from_secs(1))
            .collect()
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(&got[..], b"{}");
    }

    mod fuzz {
        //! Body reading on any headers and any chunking: an answer of the catalogue or
        //! the bytes sent, never a panic or a hang; never more than the limit kept.
        use super::*;
        use proptest::prelude::*;

        fn run<F: Future>(f: F) -> F::Output {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(f)
        }

        proptest! {
            #[test]
            fn any_body_any_headers(
                content_type in prop::option::of("[ -~]{0,40}|application/json(; charset=utf-8)?"),
                content_length in prop::option::of("[0-9]{1,6}|[ -~]{0,12}"),
                chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..12),
                limit in 1usize..2048,
            ) {
                let mut h = HeaderMap::new();
                if let Some(ct) = content_type.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
                    h.insert(header::CONTENT_TYPE, ct);
                }
                if let Some(cl) = content_length.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
                    h.insert(header::CONTENT_LENGTH, cl);
                }
                let sent: Vec<u8> = chunks.concat();
                let frames = chunks
                    .into_iter()
                    .map(|c| Ok::<_, std::io::Error>(http_body::Frame::data(Bytes::from(c))));
                let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
                let read = run(async {
                    tokio::time::timeout(Duration::from_secs(10), read_json_body(&h, body, limit)).await
                });
                let read = read.expect("never hangs");
                match read {
                    Ok(bytes) => {
                        prop_assert!(bytes.len() <= limit);
                        prop_assert_eq!(&bytes[..], &sent[..]);
                        prop_assert!(is_json(&h));
                    }
                    Err(e) => prop_assert!(
                        ["unsupported_media_type", "body_too_large", "invalid_json", "body_timeout"]
                            .contains(&e.code),
                        "{}", e.code
                    ),
                }
            }
        }
    }
}
