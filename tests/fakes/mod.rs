//! Fake upstream providers: real HTTP servers on 127.0.0.1:0 inside the test process,
//! answering from a script and recording every request they receive. Plus a routes
//! file generator that puts provider blocks in front of them.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::Value;
use tokio::net::TcpListener;

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
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "request body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
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
#[derive(Debug, Clone)]
pub struct Canned {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
    pub delay: Option<Duration>,
    /// Close the connection after reading the request, without an answer.
    pub hang_up: bool,
}

impl Canned {
    pub fn json(status: u16, body: Value) -> Self {
        Self::raw(status, "application/json", body.to_string())
    }
    pub fn raw(status: u16, content_type: &str, body: impl Into<Bytes>) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            body: body.into(),
            delay: None,
            hang_up: false,
        }
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
    pub fn delayed(mut self, by: Duration) -> Self {
        self.delay = Some(by);
        self
    }
}

#[derive(Default)]
struct State {
    /// `METHOD path` (no query) → answer.
    script: HashMap<String, Canned>,
    seen: Vec<Seen>,
}

/// A running fake upstream. Stops when the test's runtime ends.
#[derive(Clone)]
pub struct Fake {
    pub addr: SocketAddr,
    pub scheme: &'static str,
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
            loop {
                let Ok((tcp, peer)) = listener.accept().await else {
                    return;
                };
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

    /// Answer `METHOD path` (path without query) with `canned` from now on.
    pub fn on(&self, route: &str, canned: Canned) {
        self.state
            .lock()
            .unwrap()
            .script
            .insert(route.to_string(), canned);
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
    let key = format!("{} {}", seen.method, seen.path);
    let canned = {
        let mut state = state.lock().unwrap();
        state.seen.push(seen);
        state.script.get(&key).cloned()
    };
    let canned = canned.unwrap_or_else(|| {
        Canned::json(
            404,
            serde_json::json!({"error": {"message": "no such route"}}),
        )
    });
    if let Some(delay) = canned.delay {
        tokio::time::sleep(delay).await;
    }
    if canned.hang_up {
        // An error from the service makes hyper drop the connection unanswered.
        return Err(HungUp);
    }
    let mut resp = Response::new(Full::new(canned.body));
    *resp.status_mut() = StatusCode::from_u16(canned.status).expect("status");
    for (k, v) in canned.headers {
        resp.headers_mut().insert(
            http::HeaderName::try_from(k).expect("header name"),
            http::HeaderValue::try_from(v).expect("header value"),
        );
    }
    Ok(resp)
}

/// A routes file: test server settings, the demo keys, the shipped schemas, then
/// `providers` and `families` (TOML text).
pub fn routes(providers: &str, families: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
request_timeout_ms = 20000

[tasks]
secret_file = "task-secret"
create_secret_file = true
poll_cache_ttl_ms = 0

[[keys]]
name = "demo"
sha256 = "f77894fdfa58e447c57e077eaa9708e8e009c84dc6aba2db80461275e9b85be7"

[[keys]]
name = "demo-2"
sha256 = "8210bbdaf0d08ca288d5c2fdd81f5a36d0367239ef386a952c245048d844561d"

{SCHEMAS}

{providers}

{families}
"#
    )
}

const SCHEMAS: &str = r#"
[schemas.video]
required = ["prompt"]
[schemas.video.properties]
prompt = { type = "string", minLength = 1 }
duration = { type = "integer", minimum = 1 }
aspect_ratio = { type = "string" }
resolution = { type = "string" }
first_image = { type = "string" }
last_image = { type = "string" }
reference_images = { type = "array", items = { type = "string" } }

[schemas.alpha]
required = ["prompt"]
[schemas.alpha.properties]
prompt = { type = "string", minLength = 1 }
aspect_ratio = { type = "string" }
seconds = { type = "integer" }
"#;

/// A one-model family on the model center (`endpoint = "model-center"`) or alpha.
pub fn family(
    name: &str,
    endpoint: &str,
    providers: &[&str],
    model: &str,
    upstream: &str,
) -> String {
    let schema = if endpoint == "alpha-videos" {
        "alpha"
    } else {
        "video"
    };
    let providers = providers
        .iter()
        .map(|p| format!("{p:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"
[families.{name}]
kind = "video"
endpoints = ["{endpoint}"]
providers = [{providers}]
models = ["{model}"]
upstream_models = {{ "{model}" = "{upstream}" }}
schema = "{schema}"
"#
    )
}

/// The public view fields a test compares, as one JSON object.
pub fn view(v: &Value) -> Value {
    let mut out = BTreeMap::new();
    for k in ["status", "progress", "video_url", "urls", "error"] {
        if let Some(x) = v.get(k) {
            out.insert(k.to_string(), x.clone());
        }
    }
    serde_json::to_value(out).expect("object")
}
