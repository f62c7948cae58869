//! Upstream connections kept open between requests: one pool per serving thread
//! ([`crate::workers`]), so a request only ever uses connections its own thread
//! drives.
//!
//! Built on hyper's connection API rather than hyper-util's pooled client, which cost
//! about a tenth of a submit's instructions in our own thread (its pool keys hashed
//! with SipHash on checkout and return, a lazily started connect raced against every
//! checkout, boxed futures, and a task spawned per answer to return the connection).
//! What that client guarantees is kept, because a submit may cost money:
//! - an HTTP/1 connection serves one request at a time and goes back to the pool only
//!   when hyper has read the whole answer and waits for the next request;
//! - a connection's own task reads it while it is idle, so an upstream's close is
//!   seen before the connection is lent again, and a request is never written to a
//!   connection known to be closed;
//! - a request that a pooled connection gave back unsent (it closed between checkout
//!   and write) is sent once more, on a fresh connection; one that may have been
//!   written is never sent again;
//! - HTTP/2, where ALPN chooses it, is one connection per origin and thread, shared
//!   by its requests; connections unused for `idle_timeout` are not lent again and
//!   are closed (a sweep four times per timeout finds them), at most `max_idle` idle
//!   HTTP/1 connections are kept per origin and thread.
//!
//! The origins are keyed with the standard (SipHash) hasher, not [`crate::FastMap`]:
//! clients choose webhook hosts and upstreams choose where content redirects.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::header::HOST;
use http::uri::{Authority, Scheme};
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::client::legacy::connect::Connection;
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;
use tower::ServiceExt;

use crate::response::BoxError;

type Body = Full<Bytes>;

/// Where a connection goes, as a request's absolute URL names it.
#[derive(Clone, PartialEq, Eq)]
struct Origin {
    scheme: Scheme,
    authority: Authority,
}

impl std::hash::Hash for Origin {
    /// As `Eq` compares (ASCII case ignored), a few writes in all: http's own `Hash`
    /// for `Authority` writes byte by byte, which SipHash makes costly (1k
    /// instructions a request for two lookups).
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let mut lower = [0u8; 64];
        for text in [self.scheme.as_str(), self.authority.as_str()] {
            for chunk in text.as_bytes().chunks(lower.len()) {
                let lower = &mut lower[..chunk.len()];
                lower.copy_from_slice(chunk);
                lower.make_ascii_lowercase();
                state.write(lower);
            }
            // Where one part ends, so that no two origins run together alike.
            state.write_u8(0xff);
        }
    }
}

impl Origin {
    fn of(uri: &Uri) -> Option<Self> {
        Some(Self {
            scheme: uri.scheme()?.clone(),
            authority: uri.authority()?.clone(),
        })
    }

    /// The URL the connector is asked for.
    fn uri(&self) -> Uri {
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query("/")
            .build()
            .expect("a scheme and an authority make a URL")
    }

    /// The `Host` header of HTTP/1: the host, and the port unless it is the scheme's.
    fn host(&self) -> HeaderValue {
        let default = if self.scheme == Scheme::HTTPS {
            443
        } else {
            80
        };
        let value = match self.authority.port_u16() {
            Some(port) if port != default => {
                Bytes::from(format!("{}:{port}", self.authority.host()))
            }
            _ => Bytes::copy_from_slice(self.authority.host().as_bytes()),
        };
        HeaderValue::from_maybe_shared(value).expect("an authority is a valid header value")
    }
}

/// Why a request got no answer.
#[derive(Debug)]
pub enum SendError {
    /// No connection could be made (the connector's error, the HTTP/2 handshake's, or
    /// the URL has no origin): nothing was sent.
    Connect(BoxError),
    /// The connection closed before the request was written: nothing was sent.
    NotSent(hyper::Error),
    /// The request may have been written, and no answer came.
    Failed(hyper::Error),
}

/// An HTTP/1 connection lent to one request: [`Pool::give_back`] it, or drop it (the
/// connection then closes when its answer ends).
pub struct Lease {
    sender: http1::SendRequest<Body>,
    origin: Origin,
    slot: usize,
}

enum Sender {
    Http1(http1::SendRequest<Body>),
    Http2(http2::SendRequest<Body>),
}

struct Idle {
    sender: http1::SendRequest<Body>,
    since: Instant,
}

/// The shared HTTP/2 connection of an origin, and when a request last took it.
struct Shared {
    sender: http2::SendRequest<Body>,
    since: Instant,
}

/// One thread's connections.
#[derive(Default)]
struct Slot {
    /// Only origins with a connection open (or being returned).
    origins: HashMap<Origin, Conns>,
    /// Whether a reaper sweeps this slot.
    reaping: bool,
}

/// One thread's connections to one origin.
struct Conns {
    /// The `Host` header of HTTP/1 requests to it, made once.
    host: HeaderValue,
    /// Idle HTTP/1 connections, the most recently used last.
    idle: Vec<Idle>,
    /// Where the origin negotiated HTTP/2.
    http2: Option<Shared>,
}

impl Conns {
    fn new(origin: &Origin) -> Self {
        Self {
            host: origin.host(),
            idle: Vec::new(),
            http2: None,
        }
    }

    /// An open connection used within `idle_timeout`: the shared HTTP/2 one, or the
    /// most recently used idle HTTP/1 one. An HTTP/2 connection left idle is not
    /// trusted either: an upstream that ended it (GOAWAY) as this request's stream
    /// started would fail the request with no proof it was not received.
    fn take(&mut self, now: Instant, idle_timeout: Duration) -> Option<Sender> {
        if let Some(shared) = &mut self.http2 {
            if !shared.sender.is_closed() && now.duration_since(shared.since) < idle_timeout {
                shared.since = now;
                return Some(Sender::Http2(shared.sender.clone()));
            }
            self.http2 = None;
        }
        while let Some(conn) = self.idle.pop() {
            if conn.sender.is_ready() && now.duration_since(conn.since) < idle_timeout {
                return Some(Sender::Http1(conn.sender));
            }
        }
        None
    }

    /// Forget closed connections and close those unused for `idle_timeout`; whether
    /// any is left.
    fn sweep(&mut self, now: Instant, idle_timeout: Duration) -> bool {
        self.idle
            .retain(|c| !c.sender.is_closed() && now.duration_since(c.since) < idle_timeout);
        if self.http2.as_ref().is_some_and(|shared| {
            shared.sender.is_closed() || now.duration_since(shared.since) >= idle_timeout
        }) {
            self.http2 = None;
        }
        !self.idle.is_empty() || self.http2.is_some()
    }
}

pub struct Pool<C> {
    connector: C,
    /// One per serving thread ([`crate::workers::slot`]), plus slot 0 for every other
    /// thread; the lock is seldom contended (only slot 0, or more workers than
    /// slots, share one).
    slots: Box<[Mutex<Slot>]>,
    idle_timeout: Duration,
    max_idle: usize,
    this: Weak<Self>,
}

impl<C, T> Pool<C>
where
    C: tower::Service<Uri, Response = T> + Clone + Send + Sync + 'static,
    C::Future: Send,
    C::Error: Into<BoxError>,
    T: hyper::rt::Read + hyper::rt::Write + Connection + Unpin + Send + 'static,
{
    pub fn new(connector: C, slots: usize, idle_timeout: Duration, max_idle: usize) -> Arc<Self> {
        Arc::new_cyclic(|this| Self {
            connector,
            slots: (0..slots.max(1)).map(|_| Mutex::default()).collect(),
            idle_timeout,
            max_idle,
            this: this.clone(),
        })
    }

    /// Send `request` (its URL absolute) on a pooled or a new connection. The answer's
    /// body streams from the connection's task; an HTTP/1 connection comes with it as
    /// a [`Lease`].
    pub async fn send(
        &self,
        mut request: Request<Body>,
    ) -> Result<(Response<Incoming>, Option<Lease>), SendError> {
        let origin = Origin::of(request.uri())
            .ok_or_else(|| SendError::Connect("the URL is not absolute".into()))?;
        let slot = crate::workers::slot(self.slots.len());
        let mut fresh = false;
        loop {
            let (pooled, host) = self.take_idle(slot, &origin, !fresh);
            let sender = match pooled {
                Some(sender) => sender,
                None => {
                    fresh = true;
                    // Boxed: connecting is rare, and its future inline would make
                    // every request's future larger (and costlier to move).
                    Box::pin(self.connect(slot, &origin)).await?
                }
            };
            let (unsent, error) = match sender {
                Sender::Http1(mut sender) => {
                    // HTTP/1 names the origin in `Host` and only the path in the
                    // request line; the URL is put back for a retry that may go
                    // out over HTTP/2.
                    let url = for_http1(&mut request, host);
                    match sender.try_send_request(request).await {
                        Ok(response) => {
                            let lease = Lease {
                                sender,
                                origin,
                                slot,
                            };
                            return Ok((response, Some(lease)));
                        }
                        Err(mut e) => match e.take_message() {
                            Some(mut unsent) => {
                                *unsent.uri_mut() = url;
                                (unsent, e.into_error())
                            }
                            None => return Err(SendError::Failed(e.into_error())),
                        },
                    }
                }
                Sender::Http2(mut sender) => match sender.try_send_request(request).await {
                    Ok(response) => return Ok((response, None)),
                    Err(mut e) => match e.take_message() {
                        Some(unsent) => (unsent, e.into_error()),
                        None => return Err(SendError::Failed(e.into_error())),
                    },
                },
            };
            if fresh {
                return Err(SendError::NotSent(error));
            }
            // A pooled connection closed under us: once more, on a new one.
            request = unsent;
            fresh = true;
        }
    }

    /// Return a leased connection to the pool: at once if hyper already waits for
    /// its next request, else when it does (its answer still streaming, or its task
    /// not yet run), from a task of its own. A connection that closes first is
    /// dropped.
    pub fn give_back(&self, mut lease: Lease) {
        if lease.sender.is_ready() {
            self.put(lease);
        } else if !lease.sender.is_closed() {
            let Some(pool) = self.this.upgrade() else {
                return;
            };
            tokio::spawn(async move {
                if lease.sender.ready().await.is_ok() {
                    pool.put(lease);
                }
            });
        }
    }

    fn slot(&self, slot: usize) -> std::sync::MutexGuard<'_, Slot> {
        self.slots[slot]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// An open connection to `origin` from the pool (when `reuse`), and the `Host`
    /// header of HTTP/1 requests to it.
    fn take_idle(
        &self,
        slot: usize,
        origin: &Origin,
        reuse: bool,
    ) -> (Option<Sender>, HeaderValue) {
        let mut slot = self.slot(slot);
        match slot.origins.get_mut(origin) {
            Some(conns) => {
                let pooled = if reuse {
                    conns.take(Instant::now(), self.idle_timeout)
                } else {
                    None
                };
                (pooled, conns.host.clone())
            }
            // Nothing is kept for an origin until a connection to it is.
            None => (None, origin.host()),
        }
    }

    fn put(&self, lease: Lease) {
        let mut slot = self.slot(lease.slot);
        let conns = slot
            .origins
            .entry(lease.origin)
            .or_insert_with_key(Conns::new);
        if conns.idle.len() < self.max_idle {
            conns.idle.push(Idle {
                sender: lease.sender,
                since: Instant::now(),
            });
        }
        self.reaper_for(&mut slot, lease.slot);
    }

    /// Start the slot's reaper unless one runs.
    fn reaper_for(&self, slot: &mut Slot, n: usize) {
        if !std::mem::replace(&mut slot.reaping, true) {
            self.start_reaper(n);
        }
    }

    /// Close this slot's connections idle for longer than the idle timeout, and
    /// forget closed ones, four times per idle timeout while the pool lives.
    fn start_reaper(&self, slot: usize) {
        let pool = self.this.clone();
        let every = (self.idle_timeout / 4).max(Duration::from_secs(1));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(pool) = pool.upgrade() else {
                    return;
                };
                pool.reap(slot, Instant::now());
            }
        });
    }

    fn reap(&self, slot: usize, now: Instant) {
        self.slot(slot)
            .origins
            .retain(|_, conns| conns.sweep(now, self.idle_timeout));
    }

    /// A new connection to `origin`, its task spawned on this thread.
    async fn connect(&self, slot: usize, origin: &Origin) -> Result<Sender, SendError> {
        let io = self
            .connector
            .clone()
            .oneshot(origin.uri())
            .await
            .map_err(|e| SendError::Connect(e.into()))?;
        if io.connected().is_negotiated_h2() {
            let (sender, conn) = http2::Builder::new(TokioExecutor::new())
                .handshake(io)
                .await
                .map_err(|e| SendError::Connect(e.into()))?;
            drive(conn);
            let mut kept = self.slot(slot);
            kept.origins
                .entry(origin.clone())
                .or_insert_with_key(Conns::new)
                .http2 = Some(Shared {
                sender: sender.clone(),
                since: Instant::now(),
            });
            self.reaper_for(&mut kept, slot);
            return Ok(Sender::Http2(sender));
        }
        let (sender, conn) = http1::handshake(io)
            .await
            .map_err(|e| SendError::Connect(e.into()))?;
        drive(conn);
        Ok(Sender::Http1(sender))
    }
}

/// Run a connection's task on this thread until the connection ends.
fn drive(conn: impl Future<Output = hyper::Result<()>> + Send + 'static) {
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "upstream connection ended");
        }
    });
}

/// Make `request` an HTTP/1 request: `host` as its `Host` header if it has none, the
/// path alone in its URL. Returns the URL it had.
fn for_http1(request: &mut Request<Body>, host: HeaderValue) -> Uri {
    request.headers_mut().entry(HOST).or_insert(host);
    let path = match request.uri().path_and_query() {
        Some(path) => Uri::from(path.clone()),
        None => Uri::from_static("/"),
    };
    std::mem::replace(request.uri_mut(), path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(url: &str) -> Request<Body> {
        Request::builder().uri(url).body(Body::default()).unwrap()
    }

    #[test]
    fn an_http1_request_names_its_host_and_only_its_path() {
        for (url, host, path) in [
            ("http://up.example/a/b?x=1", "up.example", "/a/b?x=1"),
            ("http://up.example:80/", "up.example", "/"),
            ("http://up.example:8080", "up.example:8080", "/"),
            ("https://up.example:443/t", "up.example", "/t"),
            ("https://up.example:80/t", "up.example:80", "/t"),
            ("http://[::1]:9/t", "[::1]:9", "/t"),
        ] {
            let mut r = request(url);
            let origin = Origin::of(r.uri()).unwrap();
            let was = for_http1(&mut r, origin.host());
            assert_eq!(was, url);
            assert_eq!(r.uri(), path, "{url}");
            assert_eq!(r.headers()[HOST], host, "{url}");
        }
    }

    #[test]
    fn a_host_header_already_set_is_kept() {
        let mut r = request("http://up.example/t");
        r.headers_mut()
            .insert(HOST, HeaderValue::from_static("other.example"));
        let origin = Origin::of(r.uri()).unwrap();
        for_http1(&mut r, origin.host());
        assert_eq!(r.headers()[HOST], "other.example");
    }

    #[test]
    fn origins_that_are_equal_hash_alike() {
        use std::hash::BuildHasher;
        let hasher = std::collections::hash_map::RandomState::new();
        let long = format!("{}.example", "Sub".repeat(40));
        for (a, b) in [
            ("http://Up.Example:8080/a", "http://up.example:8080/b"),
            ("HTTPS://up.example/", "https://UP.example/x"),
            (
                &format!("http://{long}/"),
                &format!("http://{}/", long.to_lowercase()),
            ),
        ] {
            let a = Origin::of(&a.parse().unwrap()).unwrap();
            let b = Origin::of(&b.parse().unwrap()).unwrap();
            assert!(a == b);
            assert_eq!(hasher.hash_one(&a), hasher.hash_one(&b));
        }
        let a = Origin::of(&Uri::from_static("http://up.example/")).unwrap();
        let c = Origin::of(&Uri::from_static("https://up.example/")).unwrap();
        assert_ne!(hasher.hash_one(&a), hasher.hash_one(&c));
    }

    #[test]
    fn origins_compare_as_urls_do() {
        let a = Origin::of(&Uri::from_static("http://Up.Example:8080/a")).unwrap();
        let b = Origin::of(&Uri::from_static("http://up.example:8080/b")).unwrap();
        let c = Origin::of(&Uri::from_static("https://up.example:8080/a")).unwrap();
        assert!(a == b);
        assert!(a != c);
        assert!(Origin::of(&Uri::from_static("/relative")).is_none());
    }
}

/// The pool against connections whose far ends the test holds (in-memory pipes), so
/// that when an upstream closes is the test's to say, exactly.
#[cfg(test)]
mod connection_tests {
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use http_body_util::BodyExt;
    use hyper_util::client::legacy::connect::Connected;
    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};

    use super::*;

    /// Our end of a pipe.
    struct Pipe(DuplexStream);

    impl AsyncRead for Pipe {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().0).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Pipe {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            Pin::new(&mut self.get_mut().0).poll_write(cx, buf)
        }

        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().0).poll_flush(cx)
        }

        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.get_mut().0).poll_shutdown(cx)
        }
    }

    impl Connection for Pipe {
        fn connected(&self) -> Connected {
            Connected::new()
        }
    }

    /// A connector making pipes: the far ends wait in `ends` for the test, or are
    /// dropped at once (the upstream closes before anything is written) when
    /// `hang_up` is set.
    #[derive(Clone, Default)]
    struct Pipes {
        ends: Arc<Mutex<VecDeque<DuplexStream>>>,
        made: Arc<Mutex<usize>>,
        hang_up: bool,
    }

    impl Pipes {
        fn made(&self) -> usize {
            *self.made.lock().unwrap()
        }

        /// The far end of the next connection made, once it is.
        async fn next_end(&self) -> DuplexStream {
            loop {
                if let Some(end) = self.ends.lock().unwrap().pop_front() {
                    return end;
                }
                tokio::task::yield_now().await;
            }
        }
    }

    impl tower::Service<Uri> for Pipes {
        type Response = TokioIo<Pipe>;
        type Error = BoxError;
        type Future = std::future::Ready<Result<Self::Response, BoxError>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Uri) -> Self::Future {
            let (ours, theirs) = tokio::io::duplex(64 * 1024);
            *self.made.lock().unwrap() += 1;
            if !self.hang_up {
                self.ends.lock().unwrap().push_back(theirs);
            }
            std::future::ready(Ok(TokioIo::new(Pipe(ours))))
        }
    }

    fn post(body: &'static str) -> Request<Body> {
        Request::post("http://up.example/tasks")
            .body(Body::new(Bytes::from_static(body.as_bytes())))
            .unwrap()
    }

    /// The upstream's side: read one request on `end` and answer it (keep-alive);
    /// the request's body.
    async fn answer(end: &mut DuplexStream) -> String {
        let mut seen = Vec::new();
        let mut chunk = [0u8; 1024];
        let body_at = loop {
            if let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let n = end.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the connection closed before a request");
            seen.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8(seen[..body_at].to_vec()).unwrap();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map_or(0, |n| n.parse().unwrap());
        while seen.len() < body_at + length {
            let n = end.read(&mut chunk).await.unwrap();
            seen.extend_from_slice(&chunk[..n]);
        }
        end.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await
            .unwrap();
        String::from_utf8(seen[body_at..].to_vec()).unwrap()
    }

    /// Send `request`, let the upstream answer it on `end` (its next connection's end
    /// when `None`), read the answer whole and give the connection back; the far end
    /// used and the body it read.
    async fn exchange(
        pool: &Arc<Pool<Pipes>>,
        pipes: &Pipes,
        request: Request<Body>,
        end: Option<DuplexStream>,
    ) -> (DuplexStream, String) {
        let sent = async {
            let (response, lease) = pool.send(request).await.unwrap();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(&body[..], b"ok");
            pool.give_back(lease.expect("HTTP/1"));
        };
        let upstream = async {
            let mut end = match end {
                Some(end) => end,
                None => pipes.next_end().await,
            };
            let seen = answer(&mut end).await;
            (end, seen)
        };
        let ((), answered) = tokio::join!(sent, upstream);
        // Let the connection's task mark it idle and return it.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        answered
    }

    fn idle(pool: &Pool<Pipes>) -> usize {
        pool.slot(0).origins.values().map(|c| c.idle.len()).sum()
    }

    #[tokio::test]
    async fn a_request_a_closed_pooled_connection_gave_back_goes_once_on_a_new_one() {
        let pipes = Pipes::default();
        let pool = Pool::new(pipes.clone(), 1, Duration::from_secs(90), 8);
        let (first, seen) = exchange(&pool, &pipes, post("a"), None).await;
        assert_eq!(seen, "a");
        assert_eq!(idle(&pool), 1);
        // The upstream closes the idle connection, and the next request comes before
        // the connection's task has run: it takes the pooled connection, whose task
        // then finds it closed and hands the request back unwritten.
        drop(first);
        let (_second, seen) = exchange(&pool, &pipes, post("b"), None).await;
        assert_eq!(seen, "b");
        assert_eq!(pipes.made(), 2);
    }

    #[tokio::test]
    async fn a_new_connection_closed_before_the_write_is_not_sent_and_not_retried() {
        let pipes = Pipes {
            hang_up: true,
            ..Pipes::default()
        };
        let pool = Pool::new(pipes.clone(), 1, Duration::from_secs(90), 8);
        let sent = tokio::time::timeout(Duration::from_secs(5), pool.send(post("a")));
        let err = sent
            .await
            .expect("no endless retries")
            .map(drop)
            .unwrap_err();
        assert!(matches!(err, SendError::NotSent(_)), "{err:?}");
        assert_eq!(pipes.made(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_reused_until_it_idles_past_the_timeout() {
        let pipes = Pipes::default();
        let pool = Pool::new(pipes.clone(), 1, Duration::from_secs(10), 8);
        let (end, _) = exchange(&pool, &pipes, post("a"), None).await;
        tokio::time::advance(Duration::from_secs(9)).await;
        let (mut end, seen) = exchange(&pool, &pipes, post("b"), Some(end)).await;
        assert_eq!(seen, "b");
        assert_eq!(pipes.made(), 1, "reused within the idle timeout");

        // Idle for longer than the timeout: the sweep closes it.
        tokio::time::sleep(Duration::from_secs(16)).await;
        assert_eq!(idle(&pool), 0);
        let mut rest = Vec::new();
        assert_eq!(end.read_to_end(&mut rest).await.unwrap(), 0, "closed");
        let (_, seen) = exchange(&pool, &pipes, post("c"), None).await;
        assert_eq!(seen, "c");
        assert_eq!(pipes.made(), 2);
    }

    #[tokio::test]
    async fn at_most_max_idle_connections_are_kept() {
        let pipes = Pipes::default();
        let pool = Pool::new(pipes.clone(), 1, Duration::from_secs(90), 2);
        // Three requests at once: three connections, of which two are kept.
        let [a, b, c] = ["a", "b", "c"].map(|b| {
            let pool = pool.clone();
            async move {
                let (response, lease) = pool.send(post(b)).await.unwrap();
                response.into_body().collect().await.unwrap();
                pool.give_back(lease.unwrap());
            }
        });
        let upstream = async {
            let mut ends = Vec::new();
            for _ in 0..3 {
                let mut end = pipes.next_end().await;
                answer(&mut end).await;
                ends.push(end);
            }
            ends
        };
        let (_, _, _, _ends) = tokio::join!(a, b, c, upstream);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(pipes.made(), 3);
        assert_eq!(idle(&pool), 2);
    }
}
