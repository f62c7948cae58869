//! The request body read deadline (slow-body protection): a client that has sent its
//! headers gets `server.body_read_timeout_ms` for the whole body, then 408.

use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use crate::body::BoxError;

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
    use http_body_util::BodyExt;

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
}
