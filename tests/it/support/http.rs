//! Talking to a gateway: an HTTP client (HTTP/1.1, h2c, HTTPS by ALPN), the reply as
//! tests look at it, the error-shape check, raw-socket reads, metrics samples.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, Version};
use http_body::Frame;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::CertificateDer;
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use super::PATIENCE;

/// A response as tests look at it.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub version: Version,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> Value {
        parse_json(&self.body, "the answer")
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A header that must be there, as a number.
    pub fn header_u64(&self, name: &str) -> u64 {
        self.header(name)
            .unwrap_or_else(|| panic!("{name} missing: {:?}", self.headers))
            .parse()
            .unwrap_or_else(|e| panic!("{name} is not a number: {e}"))
    }

    /// `error.code` of an error body.
    pub fn error_code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// `error.message` of an error body.
    pub fn error_message(&self) -> String {
        self.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// `body` as JSON; a panic naming `what` when it is not.
pub(super) fn parse_json(body: &[u8], what: &str) -> Value {
    serde_json::from_slice(body).unwrap_or_else(|e| {
        panic!(
            "{what} is not JSON ({e}): {:?}",
            String::from_utf8_lossy(body)
        )
    })
}

/// Assert that `r` is the refusal `status`/`code` in the catalogue shape
/// `{"error":{"message","type","code","param"}}`, with `param` as given, and that it
/// carries a request id. Returns the error's message.
#[track_caller]
pub fn assert_error(r: &Reply, status: u16, code: &str, param: Option<&str>) -> String {
    let body = r.text();
    assert_eq!(r.status.as_u16(), status, "status of {body}");
    assert!(
        r.header("content-type")
            .is_some_and(|ct| ct.starts_with("application/json")),
        "content type of an error: {:?}",
        r.header("content-type")
    );
    assert!(
        r.header("x-request-id").is_some_and(|id| !id.is_empty()),
        "every response carries x-request-id: {body}"
    );
    let v = r.json();
    let top = v.as_object().expect("error body is an object");
    assert_eq!(
        top.keys().map(String::as_str).collect::<Vec<_>>(),
        ["error"],
        "only `error` at the top: {body}"
    );
    let err = v["error"].as_object().expect("`error` is an object");
    let mut keys: Vec<_> = err.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["code", "message", "param", "type"], "{body}");
    let message = err["message"].as_str().expect("message is a string");
    assert!(!message.is_empty(), "message says what is wrong: {body}");
    assert!(
        err["type"].as_str().is_some_and(|t| !t.is_empty()),
        "type is a string: {body}"
    );
    assert_eq!(err["code"], code, "code of {body}");
    match param {
        Some(p) => assert_eq!(err["param"], p, "param of {body}"),
        None => assert!(err["param"].is_null(), "param of {body}"),
    }
    message.to_string()
}

/// Which HTTP versions an HTTPS client offers by ALPN.
#[derive(Clone, Copy)]
pub enum Alpn {
    Http1,
    Http2,
}

type RequestBody = BoxBody<Bytes, Infallible>;

/// A small HTTP client bound to one listener.
#[derive(Clone)]
pub struct Http {
    base: String,
    client: Client<HttpsConnector<HttpConnector>, RequestBody>,
}

impl Http {
    /// HTTP/1.1 over plain TCP.
    pub fn new(addr: SocketAddr) -> Self {
        Self::build("http", addr, None, Alpn::Http1)
    }

    /// HTTP/2 with prior knowledge (h2c): no upgrade, the connection starts with the
    /// preface.
    pub fn h2c(addr: SocketAddr) -> Self {
        Self::build("http", addr, None, Alpn::Http2)
    }

    /// HTTPS trusting only `ca`, offering `alpn`.
    pub fn tls(addr: SocketAddr, ca: &CertificateDer<'static>, alpn: Alpn) -> Self {
        Self::build("https", addr, Some(ca), alpn)
    }

    fn build(
        scheme: &str,
        addr: SocketAddr,
        ca: Option<&CertificateDer<'static>>,
        alpn: Alpn,
    ) -> Self {
        let mut roots = rustls::RootCertStore::empty();
        if let Some(ca) = ca {
            roots.add(ca.clone()).expect("test CA");
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_or_http();
        let connector = match alpn {
            Alpn::Http1 => builder.enable_http1().build(),
            Alpn::Http2 => builder.enable_http2().build(),
        };
        let mut client = Client::builder(TokioExecutor::new());
        client.http2_only(matches!(alpn, Alpn::Http2));
        Self {
            base: format!("{scheme}://{addr}"),
            client: client.build(connector),
        }
    }

    /// Send anything; `headers` are added as given, the body goes with a
    /// `Content-Length`. An error when no answer came (refused, reset, TLS).
    pub async fn try_send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Result<Reply, String> {
        self.send_body(method, path, headers, Full::new(body.into()).boxed())
            .await
    }

    /// [`Http::try_send`] that must be answered.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Reply {
        self.try_send(method, path, headers, body)
            .await
            .unwrap_or_else(|e| panic!("no answer from the gateway: {e}"))
    }

    /// Send `chunks` as a streamed body of unknown length: HTTP/1.1 uses
    /// `Transfer-Encoding: chunked` and no `Content-Length`.
    pub async fn send_chunked(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        chunks: Vec<Bytes>,
    ) -> Reply {
        let stream = futures_util::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, Infallible>(Frame::data(c))),
        );
        self.send_body(method, path, headers, StreamBody::new(stream).boxed())
            .await
            .unwrap_or_else(|e| panic!("no answer from the gateway: {e}"))
    }

    async fn send_body(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: RequestBody,
    ) -> Result<Reply, String> {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(body).expect("request");
        let resp = tokio::time::timeout(PATIENCE, self.client.request(req))
            .await
            .map_err(|_| "no answer in time".to_string())?
            .map_err(|e| format!("{e:?}"))?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok(Reply {
            status: parts.status,
            version: parts.version,
            headers: parts.headers,
            body,
        })
    }

    /// GET with no headers at all.
    pub async fn get_bare(&self, path: &str) -> Reply {
        self.send(Method::GET, path, &[], Bytes::new()).await
    }

    /// GET with `key` as Bearer.
    pub async fn get(&self, path: &str, key: &str) -> Reply {
        let auth = format!("Bearer {key}");
        self.send(Method::GET, path, &[("authorization", &auth)], Bytes::new())
            .await
    }

    /// DELETE with `key` as Bearer.
    pub async fn delete(&self, path: &str, key: &str) -> Reply {
        let auth = format!("Bearer {key}");
        self.send(
            Method::DELETE,
            path,
            &[("authorization", &auth)],
            Bytes::new(),
        )
        .await
    }

    pub async fn post_json(&self, path: &str, key: &str, body: &Value) -> Reply {
        self.try_post_json(path, key, body)
            .await
            .unwrap_or_else(|e| panic!("no answer from the gateway: {e}"))
    }

    /// [`Http::post_json`] to a gateway that may stop answering.
    pub async fn try_post_json(
        &self,
        path: &str,
        key: &str,
        body: &Value,
    ) -> Result<Reply, String> {
        let auth = format!("Bearer {key}");
        self.try_send(
            Method::POST,
            path,
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            body.to_string(),
        )
        .await
    }

    /// Submit and expect 200 with an id.
    pub async fn submit(&self, path: &str, key: &str, body: &Value) -> Value {
        let r = self.post_json(path, key, body).await;
        assert_eq!(r.status, 200, "submit {body}: {:?}", r.text());
        r.json()
    }

    /// Submit and expect 200; the task's id.
    pub async fn submit_id(&self, path: &str, key: &str, body: &Value) -> String {
        self.submit(path, key, body).await["id"]
            .as_str()
            .expect("id")
            .to_string()
    }

    /// Query `collection/{id}`, expecting 200.
    pub async fn query(&self, collection: &str, key: &str, id: &str) -> Value {
        let r = self.get(&format!("{collection}/{id}"), key).await;
        assert_eq!(r.status, 200, "query: {:?}", r.text());
        r.json()
    }

    /// Query `collection/{id}` until the task is completed or failed.
    pub async fn wait_done(&self, collection: &str, key: &str, id: &str) -> Value {
        self.poll_history(collection, key, id)
            .await
            .pop()
            .expect("at least one answer")
    }

    /// Query `collection/{id}` until the task is completed or failed; every answer
    /// seen, in order (the last one is terminal).
    pub async fn poll_history(&self, collection: &str, key: &str, id: &str) -> Vec<Value> {
        let deadline = Instant::now() + PATIENCE;
        let mut seen = Vec::new();
        loop {
            let v = self.query(collection, key, id).await;
            let done = v["status"] == "completed" || v["status"] == "failed";
            seen.push(v);
            if done {
                return seen;
            }
            assert!(
                Instant::now() < deadline,
                "task never finished: {:?}",
                seen.last()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `GET /metrics` (no key), parsed.
    pub async fn metrics(&self) -> Metrics {
        let r = self.get_bare("/metrics").await;
        assert_eq!(r.status, 200, "{:?}", r.text());
        assert!(
            r.header("content-type")
                .unwrap_or_default()
                .contains("text"),
            "{:?}",
            r.headers
        );
        Metrics::parse(&r.text())
    }
}

/// The samples of a metrics exposition.
pub struct Metrics(Vec<(String, f64)>);

impl Metrics {
    pub fn parse(text: &str) -> Self {
        Self(
            text.lines()
                .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
                .filter_map(|l| {
                    let (name, value) = l.rsplit_once(' ')?;
                    Some((name.to_string(), value.parse().ok()?))
                })
                .collect(),
        )
    }

    /// Sum of the samples whose series (name and labels) contains every `part`.
    pub fn sum(&self, parts: &[&str]) -> f64 {
        self.0
            .iter()
            .filter(|(series, _)| parts.iter().all(|p| series.contains(p)))
            .map(|(_, v)| v)
            .sum()
    }
}

/// Read until the peer closes (within `limit`); what it sent.
pub async fn read_to_close(stream: &mut TcpStream, limit: Duration) -> Vec<u8> {
    let mut got = Vec::new();
    let read = tokio::time::timeout(limit, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the gateway never closed the connection; it sent {:?}",
        String::from_utf8_lossy(&got)
    );
    got
}

/// Read one HTTP/1.1 response with a `Content-Length` from a raw connection, which
/// may stay open: its status and JSON body.
pub async fn read_response(stream: &mut TcpStream) -> (u16, Value) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let answer = tokio::time::timeout(PATIENCE, async {
        loop {
            let n = stream.read(&mut buf).await.unwrap_or(0);
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(|v| v.trim().parse().expect("content-length"))
                    })
                    .expect("content-length");
                if body.len() >= len {
                    let status = head[9..12].parse().expect("status");
                    let body = serde_json::from_str(&body[..len]).expect("JSON body");
                    return (status, body);
                }
            }
            assert!(n > 0, "connection closed without a whole answer: {text}");
        }
    })
    .await;
    answer.expect("an answer, not a hang")
}
