//! The pooled upstream client: keep-alive connections, HTTPS through rustls with the
//! webpki roots (plus an optional per-provider CA), HTTP/2 where the upstream offers it.
//! Every connection that is not to the provider's own origin goes to an address that
//! was resolved and judged by the provider's [`Reach`] ([`Guarded`]).

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;

use crate::outbound::origin::Reach;
use crate::outbound::pool::{Pool, SendError};

type Pooled = Pool<BoundedConnect<HttpsConnector<Guarded>>>;

/// How long an idle upstream connection is kept open.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Idle connections kept per upstream origin and serving thread.
const MAX_IDLE: usize = 256;

/// A pooled client for one provider: the connections of each serving thread kept
/// apart (and those of the other threads), so that a request uses upstream
/// connections driven by its own thread ([`crate::workers`], [`super::pool`]).
#[derive(Clone)]
pub struct UpstreamClient {
    pool: Arc<Pooled>,
    /// Largest answer read into memory (status answers are small JSON).
    max_answer_bytes: usize,
}

impl std::fmt::Debug for UpstreamClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UpstreamClient")
    }
}

/// A complete upstream answer.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// A connector whose whole connection setup (DNS, TCP and the TLS handshake) runs
/// under the connect timeout. hyper-util's own timeout covers TCP only, and a stalled
/// lookup or handshake would otherwise run into the step's timeout, where it is
/// indistinguishable from a request the upstream received: no failover. A failure
/// here is a connect error, so it stays `Unreached`.
#[derive(Clone)]
pub struct BoundedConnect<C> {
    inner: C,
    timeout: Duration,
}

type ConnectFuture<T> =
    std::pin::Pin<Box<dyn Future<Output = Result<T, crate::response::BoxError>> + Send>>;

impl<C> tower::Service<http::Uri> for BoundedConnect<C>
where
    C: tower::Service<http::Uri> + Send + 'static,
    C::Future: Send + 'static,
    C::Error: Into<crate::response::BoxError>,
{
    type Response = C::Response;
    type Error = crate::response::BoxError;
    type Future = ConnectFuture<C::Response>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let timeout = self.timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(done) => done.map_err(Into::into),
                Err(_) => Err("connection setup (DNS, TCP, TLS) timed out".into()),
            }
        })
    }
}

/// The TCP connector under TLS: a connection to the provider's own origin is made as
/// configured; any other (a link or redirect the upstream handed us) goes only to an
/// address resolved here and allowed by the provider's [`Reach`], so what is judged is
/// what is connected to: numeric host forms, trailing dots and names that resolve (or
/// re-resolve) to private addresses are all caught.
#[derive(Clone)]
pub struct Guarded {
    http: HttpConnector,
    reach: Arc<Reach>,
}

/// A connection refused because its address is in a private network.
#[derive(Debug)]
pub struct PrivateAddress;

impl std::fmt::Display for PrivateAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the address is in a private network; refused")
    }
}

impl std::error::Error for PrivateAddress {}

impl tower::Service<http::Uri> for Guarded {
    type Response = TokioIo<tokio::net::TcpStream>;
    type Error = crate::response::BoxError;
    type Future = ConnectFuture<Self::Response>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let mut http = self.http.clone();
        if self.reach.is_origin(&uri) {
            return Box::pin(async move { http.call(uri).await.map_err(Into::into) });
        }
        let reach = self.reach.clone();
        Box::pin(async move {
            let mut last: crate::response::BoxError = Box::new(PrivateAddress);
            for addr in resolve(&uri).await? {
                if !reach.allows(addr.ip()) {
                    continue;
                }
                // The address itself, so that nothing resolves the name again.
                let at = http::Uri::try_from(format!("http://{addr}"))?;
                match http.call(at).await {
                    Ok(stream) => return Ok(stream),
                    Err(e) => last = e.into(),
                }
            }
            Err(last)
        })
    }
}

/// The socket addresses of a URL's host, as the system resolver gives them (so every
/// numeric form it accepts is resolved, not taken for a name).
async fn resolve(uri: &http::Uri) -> Result<Vec<std::net::SocketAddr>, crate::response::BoxError> {
    let host = uri
        .host()
        .ok_or("the URL has no host")?
        .trim_start_matches('[')
        .trim_end_matches(']');
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(vec![(ip, port).into()]);
    }
    Ok(tokio::net::lookup_host((host, port)).await?.collect())
}

/// Why an upstream call produced no answer. The distinction decides failover:
/// only `Unreached` proves the upstream never saw the request.
#[derive(Debug)]
pub enum CallError {
    /// Connection could not be made (refused, DNS, TLS handshake): nothing was sent.
    Unreached(String),
    /// The connection would have gone into a private network: nothing was sent.
    Forbidden,
    /// The request may have been received, but no complete answer came back.
    Broken(String),
    /// No complete answer within the step's timeout.
    TimedOut,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreached(e) => write!(f, "could not connect: {e}"),
            Self::Forbidden => f.write_str("refused to connect into a private network"),
            Self::Broken(e) => write!(f, "no complete answer: {e}"),
            Self::TimedOut => f.write_str("timed out"),
        }
    }
}

impl UpstreamClient {
    /// A client whose connections go where `reach` allows.
    pub fn new(
        connect_timeout: Duration,
        ca_file: Option<&Path>,
        reach: Arc<Reach>,
        max_answer_bytes: usize,
    ) -> Result<Self, String> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        http.set_keepalive(Some(Duration::from_secs(60)));

        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(path) = ca_file {
            let pem = std::fs::read(path)
                .map_err(|e| format!("cannot read CA file {}: {e}", path.display()))?;
            let mut added = 0;
            for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
                let cert = cert.map_err(|e| format!("bad PEM in {}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("bad certificate in {}: {e}", path.display()))?;
                added += 1;
            }
            if added == 0 {
                return Err(format!("no certificate in CA file {}", path.display()));
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(Guarded { http, reach });
        let connect = BoundedConnect {
            inner: https,
            timeout: connect_timeout,
        };
        let slots = 1 + crate::workers::default_count();
        Ok(Self {
            pool: Pool::new(connect, slots, IDLE_TIMEOUT, MAX_IDLE),
            max_answer_bytes,
        })
    }

    /// Send one request and read the whole answer, all under `timeout`.
    pub async fn call(
        &self,
        mut request: Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<Reply, CallError> {
        // The current span's trace goes along (providers and webhook receivers alike).
        crate::traces::propagate(request.headers_mut());
        let exchange = async {
            let (response, lease) = self.pool.send(request).await.map_err(call_error)?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, self.max_answer_bytes)
                .collect()
                .await
                .map_err(|e| CallError::Broken(format!("answer body: {e}")))?
                .to_bytes();
            if let Some(lease) = lease {
                self.pool.give_back(lease);
            }
            Ok(Reply {
                status: parts.status,
                headers: parts.headers,
                body,
            })
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err(CallError::TimedOut))
    }
}

impl UpstreamClient {
    /// Send one request and return as soon as the status and headers arrive (within
    /// `timeout`); the body is left to stream, never held whole in memory.
    pub async fn open(
        &self,
        mut request: Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<Response<Incoming>, CallError> {
        // The current span's trace goes along (providers and webhook receivers alike).
        crate::traces::propagate(request.headers_mut());
        let exchange = async {
            let (response, lease) = self.pool.send(request).await.map_err(call_error)?;
            // Back to the pool once the answer has streamed to its end; a body dropped
            // before usually closes the connection (hyper reads what it can at once).
            if let Some(lease) = lease {
                self.pool.give_back(lease);
            }
            Ok(response)
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err(CallError::TimedOut))
    }
}

/// A streamed answer body that fails when no data arrives for `idle`, so a stalled
/// upstream cannot hold a client connection forever.
pub struct IdleTimeout<B> {
    inner: B,
    idle: Duration,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl<B> IdleTimeout<B> {
    pub fn new(inner: B, idle: Duration) -> Self {
        Self {
            inner,
            idle,
            timer: Box::pin(tokio::time::sleep(idle)),
        }
    }
}

/// The upstream sent nothing for longer than the step's timeout.
#[derive(Debug)]
pub struct Stalled;

impl std::fmt::Display for Stalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the upstream stopped sending")
    }
}

impl std::error::Error for Stalled {}

impl<B> http_body::Body for IdleTimeout<B>
where
    B: http_body::Body + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let deadline = tokio::time::Instant::now() + this.idle;
                this.timer.as_mut().reset(deadline);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => match this.timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(Stalled)))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// What a failed request proves: nothing sent (no connection, or one that closed
/// before the request was written), or not.
fn call_error(e: SendError) -> CallError {
    match e {
        SendError::Connect(e) => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&*e);
            while let Some(s) = source {
                if s.is::<PrivateAddress>() {
                    return CallError::Forbidden;
                }
                source = s.source();
            }
            CallError::Unreached(error_chain(&*e))
        }
        SendError::NotSent(e) => CallError::Unreached(error_chain(&e)),
        SendError::Failed(e) => CallError::Broken(error_chain(&e)),
    }
}

/// The error and its causes on one line; hyper's top-level message alone is vague.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::StreamBody;

    #[tokio::test]
    async fn a_stalled_body_fails_instead_of_hanging() {
        let first = futures_util::stream::iter([Ok::<_, std::io::Error>(http_body::Frame::data(
            Bytes::from_static(b"abc"),
        ))]);
        let stalled = StreamBody::new(futures_util::StreamExt::chain(
            first,
            futures_util::stream::pending(),
        ));
        let mut body = IdleTimeout::new(stalled, Duration::from_millis(20));
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), Bytes::from_static(b"abc"));
        let err = body.frame().await.unwrap().unwrap_err();
        assert!(err.is::<Stalled>(), "{err}");
    }
}
