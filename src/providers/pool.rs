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
//! - HTTP/2, where ALPN chooses it, is one connection per origin shared by all
//!   requests; idle HTTP/1 connections close after `idle_timeout` (found by a sweep
//!   four times per timeout), at most `max_idle` are kept per origin.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::HOST;
use http::uri::{Authority, Scheme};
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::client::legacy::connect::Connection;
use hyper_util::rt::TokioExecutor;
use tower::ServiceExt;

use crate::FastMap;
use crate::response::BoxError;

type Body = Full<Bytes>;

/// Where a connection goes, as a request's absolute URL names it.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Origin {
    scheme: Scheme,
    authority: Authority,
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
    /// No connection could be made (the connector's error, or the URL has no origin):
    /// nothing was sent.
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

/// One thread's connections.
#[derive(Default)]
struct Slot {
    origins: FastMap<Origin, Conns>,
    /// Whether this slot's reaper runs.
    reaping: bool,
}

/// One thread's connections to one origin.
struct Conns {
    /// The `Host` header of HTTP/1 requests to it, made once.
    host: HeaderValue,
    /// Idle HTTP/1 connections, the most recently used last.
    idle: Vec<Idle>,
    /// The shared HTTP/2 connection, where the origin negotiated it.
    http2: Option<http2::SendRequest<Body>>,
}

impl Conns {
    fn new(origin: &Origin) -> Self {
        Self {
            host: origin.host(),
            idle: Vec::new(),
            http2: None,
        }
    }

    /// An open connection: the shared HTTP/2 one, or the most recently used idle
    /// HTTP/1 one.
    fn take(&mut self, now: Instant, idle_timeout: Duration) -> Option<Sender> {
        if let Some(shared) = &self.http2 {
            if !shared.is_closed() {
                return Some(Sender::Http2(shared.clone()));
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
}

pub struct Pool<C> {
    connector: C,
    /// One per serving thread, plus one for every other thread (slot 0); each is
    /// locked only by its own thread, but a lock keeps the pool shareable.
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
        if let Some(conns) = slot.origins.get_mut(origin) {
            let pooled = if reuse {
                conns.take(Instant::now(), self.idle_timeout)
            } else {
                None
            };
            return (pooled, conns.host.clone());
        }
        let conns = Conns::new(origin);
        let host = conns.host.clone();
        slot.origins.insert(origin.clone(), conns);
        (None, host)
    }

    fn put(&self, lease: Lease) {
        let start_reaper = {
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
            !std::mem::replace(&mut slot.reaping, true)
        };
        if start_reaper {
            self.start_reaper(lease.slot);
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
        let mut slot = self.slot(slot);
        slot.origins.retain(|_, conns| {
            conns.idle.retain(|c| {
                !c.sender.is_closed() && now.duration_since(c.since) < self.idle_timeout
            });
            if conns
                .http2
                .as_ref()
                .is_some_and(|shared| shared.is_closed())
            {
                conns.http2 = None;
            }
            !conns.idle.is_empty() || conns.http2.is_some()
        });
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
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "upstream HTTP/2 connection ended");
                }
            });
            self.slot(slot)
                .origins
                .entry(origin.clone())
                .or_insert_with_key(Conns::new)
                .http2 = Some(sender.clone());
            return Ok(Sender::Http2(sender));
        }
        let (sender, conn) = http1::handshake(io)
            .await
            .map_err(|e| SendError::Connect(e.into()))?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection ended");
            }
        });
        Ok(Sender::Http1(sender))
    }
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
    fn origins_compare_as_urls_do() {
        let a = Origin::of(&Uri::from_static("http://Up.Example:8080/a")).unwrap();
        let b = Origin::of(&Uri::from_static("http://up.example:8080/b")).unwrap();
        let c = Origin::of(&Uri::from_static("https://up.example:8080/a")).unwrap();
        assert!(a == b);
        assert!(a != c);
        assert!(Origin::of(&Uri::from_static("/relative")).is_none());
    }
}
