//! The fake upstream: a real HTTP server on loopback in the test process (HTTP/1.1 and
//! h2c, or HTTPS), answering each `METHOD path` from a script, holding an answer until
//! the test releases it, and recording every request it receives.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::PATIENCE;

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub version: Version,
    /// The client's address: the same for requests over one pooled connection.
    pub peer: SocketAddr,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> Value {
        super::http::parse_json(&self.body, "the request body")
    }

    /// `METHOD path?query`, for compact assertions.
    pub fn line(&self) -> String {
        match &self.query {
            Some(q) => format!("{} {}?{q}", self.method, self.path),
            None => format!("{} {}", self.method, self.path),
        }
    }
}

/// A scripted answer.
#[derive(Clone)]
pub struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Bytes,
    /// Close the connection after reading the request, without an answer.
    hang_up: bool,
    /// Wait for the test's release before answering.
    hold: Option<Hold>,
}

#[derive(Clone)]
struct Hold {
    released: watch::Receiver<bool>,
    arrived: Arc<watch::Sender<usize>>,
}

impl Answer {
    pub fn json(status: u16, body: Value) -> Self {
        Self::raw(status, "application/json", body.to_string())
    }

    pub fn raw(status: u16, content_type: &str, body: impl Into<Bytes>) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            body: body.into(),
            hang_up: false,
            hold: None,
        }
    }

    /// A submit's answer in our own protocol: task `id`, queued.
    pub fn queued(id: &str) -> Self {
        Self::json(200, serde_json::json!({"id": id, "status": "queued"}))
    }

    pub fn hang_up() -> Self {
        Self {
            hang_up: true,
            ..Self::raw(500, "text/plain", "")
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// This answer, given only once the returned [`Held`] is released (or dropped).
    pub fn held(mut self) -> (Self, Held) {
        let (release, released) = watch::channel(false);
        let (arrived_tx, arrived) = watch::channel(0);
        self.hold = Some(Hold {
            released,
            arrived: Arc::new(arrived_tx),
        });
        (self, Held { release, arrived })
    }
}

/// An answer held back: requests that get it wait until [`Held::release`], or until
/// this is dropped.
pub struct Held {
    release: watch::Sender<bool>,
    arrived: watch::Receiver<usize>,
}

impl Held {
    /// Wait until `n` requests in all have reached the held answer.
    pub async fn arrived(&self, n: usize) {
        let mut arrived = self.arrived.clone();
        tokio::time::timeout(PATIENCE, arrived.wait_for(|seen| *seen >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} request(s) never reached the held answer"))
            .expect("the fake is running");
    }

    /// Requests that have reached the held answer so far.
    pub fn count(&self) -> usize {
        *self.arrived.borrow()
    }

    /// Let every waiting (and every later) request have its answer.
    pub fn release(&self) {
        let _ = self.release.send(true);
    }
}

#[derive(Default)]
struct State {
    /// `METHOD path` (no query) → answer.
    script: HashMap<String, Answer>,
    seen: Vec<Seen>,
}

/// A running fake upstream. Stops when the test's runtime ends.
#[derive(Clone)]
pub struct Fake {
    pub addr: SocketAddr,
    scheme: &'static str,
    state: Arc<Mutex<State>>,
}

impl Fake {
    /// Plain HTTP/1.1 and h2c.
    pub async fn start() -> Self {
        Self::serve(None).await
    }

    /// HTTPS with `tls` (ALPN decides HTTP/2 or HTTP/1.1).
    pub async fn start_tls(tls: rustls::ServerConfig) -> Self {
        Self::serve(Some(tokio_rustls::TlsAcceptor::from(Arc::new(tls)))).await
    }

    async fn serve(tls: Option<tokio_rustls::TlsAcceptor>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind fake");
        let addr = listener.local_addr().expect("fake address");
        let fake = Self {
            addr,
            scheme: if tls.is_some() { "https" } else { "http" },
            state: Arc::default(),
        };
        let state = fake.state.clone();
        tokio::spawn(async move {
            while let Ok((tcp, peer)) = listener.accept().await {
                let state = state.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| answer(state.clone(), peer, req));
                    let builder = auto::Builder::new(TokioExecutor::new());
                    match tls {
                        Some(acceptor) => {
                            if let Ok(stream) = acceptor.accept(tcp).await {
                                let _ = builder
                                    .serve_connection(TokioIo::new(stream), service)
                                    .await;
                            }
                        }
                        None => {
                            let _ = builder.serve_connection(TokioIo::new(tcp), service).await;
                        }
                    }
                });
            }
        });
        fake
    }

    /// Base URL for a provider block.
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    /// Answer `METHOD path` (path without query) with `answer` from now on.
    pub fn on(&self, route: &str, answer: Answer) {
        self.state
            .lock()
            .unwrap()
            .script
            .insert(route.to_string(), answer);
    }

    /// Answer `METHOD path` with `answer` from now on, but only once released.
    pub fn hold(&self, route: &str, answer: Answer) -> Held {
        let (answer, held) = answer.held();
        self.on(route, answer);
        held
    }

    /// Every request received so far, oldest first; clears the record.
    pub fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut self.state.lock().unwrap().seen)
    }

    /// The one request received since the last `take`.
    pub fn only(&self) -> Seen {
        let mut seen = self.take();
        assert_eq!(
            seen.len(),
            1,
            "expected exactly one upstream request, got {:?}",
            seen.iter().map(Seen::line).collect::<Vec<_>>()
        );
        seen.remove(0)
    }
}

#[derive(Debug)]
struct HungUp;
impl std::fmt::Display for HungUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("hung up on purpose")
    }
}
impl std::error::Error for HungUp {}

async fn answer(
    state: Arc<Mutex<State>>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, HungUp> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let seen = Seen {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().map(str::to_string),
        version: parts.version,
        peer,
        headers: parts.headers,
        body,
    };
    let route = format!("{} {}", seen.method, seen.path);
    let answer = {
        let mut state = state.lock().unwrap();
        state.seen.push(seen);
        state.script.get(&route).cloned()
    };
    let answer = answer.unwrap_or_else(|| {
        Answer::json(
            404,
            serde_json::json!({"error": {"message": "no such route"}}),
        )
    });
    if let Some(mut hold) = answer.hold {
        hold.arrived.send_modify(|n| *n += 1);
        // A dropped `Held` releases too (the channel closes).
        let _ = hold.released.wait_for(|released| *released).await;
    }
    if answer.hang_up {
        // An error from the service makes hyper drop the connection unanswered.
        return Err(HungUp);
    }
    let mut resp = Response::new(Full::new(answer.body));
    *resp.status_mut() = StatusCode::from_u16(answer.status).expect("status");
    for (k, v) in answer.headers {
        resp.headers_mut().insert(
            http::HeaderName::try_from(k).expect("header name"),
            http::HeaderValue::try_from(v).expect("header value"),
        );
    }
    Ok(resp)
}
