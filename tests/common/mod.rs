//! Test harness: runs the real `mediagate` binary on a loopback port with a generated
//! routes file, and talks HTTP to it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode, Version};
use http_body::Frame;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

pub const DEMO: &str = "sk-demo";
pub const DEMO2: &str = "sk-demo-2";

/// The shipped routes.toml, as in the repository.
pub fn shipped_routes_file() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("routes.toml"))
        .expect("routes.toml is in the repository")
}

/// The shipped routes.toml, made test-friendly: a free port, fast simulated tasks, and
/// no per-key rate limit (tests poll many tasks fast; the limits have tests of their own).
pub fn shipped_routes() -> String {
    let text = shipped_routes_file();
    let text = replace_once(
        &text,
        r#"listen = "127.0.0.1:8080""#,
        r#"listen = "127.0.0.1:0""#,
    );
    let text = replace_once(&text, "queued_ms = 1000", "queued_ms = 300");
    let text = replace_once(&text, "processing_ms = 2000", "processing_ms = 300");
    let text = replace_once(&text, "rate_per_second = 100 ", "rate_per_second = 0 ");
    replace_once(&text, "poll_cache_ttl_ms = 1000", "poll_cache_ttl_ms = 0")
}

/// `text` with the single occurrence of `from` replaced by `to`. Panics when `from`
/// does not occur exactly once, so an edit of routes.toml cannot silently make a test
/// run on another configuration than it means to.
pub fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "expected exactly one `{from}` in the routes file"
    );
    text.replacen(from, to, 1)
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// A running gateway process. Killed on drop.
pub struct Gateway {
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    env: Vec<(String, String)>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Gateway {
    /// Start on `routes` (a whole routes.toml). The task secret lives in a file in the
    /// test's own directory (created on first start), so restarts keep ids valid.
    pub fn start(routes: &str) -> Self {
        Self::start_with_env(routes, &[])
    }

    pub fn start_with_env(routes: &str, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("routes.toml"), routes).expect("write routes");
        let mut g = Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            dir,
            child: None,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            log: Arc::default(),
        };
        g.spawn();
        g
    }

    pub fn routes_path(&self) -> PathBuf {
        self.dir.path().join("routes.toml")
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mediagate"));
        cmd.arg("serve")
            .arg("--config")
            .arg(self.routes_path())
            .current_dir(self.dir.path())
            .env("RUST_LOG", "info")
            .env_remove("MEDIAGATE_TASK_SECRET")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start mediagate");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let log = self.log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("listening on http://") {
                    let addr = line[at + "listening on http://".len()..]
                        .split_whitespace()
                        .next()
                        .unwrap_or_default()
                        .to_string();
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(Ok(addr));
                    }
                }
                log.lock().unwrap().push(line);
            }
            if let Some(tx) = tx.take() {
                let _ = tx.send(Err(()));
            }
        });
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Ok(addr)) => self.addr = addr.parse().expect("listen address"),
            _ => panic!(
                "mediagate did not start; log:\n{}",
                self.log.lock().unwrap().join("\n")
            ),
        }
        self.child = Some(child);
    }

    /// Everything the process logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// Stop (SIGKILL) and start again with the same files.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Send SIGTERM and return the child to wait on.
    pub fn terminate(&mut self) -> Child {
        let child = self.child.take().expect("running");
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        child
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn client(&self) -> Http {
        Http::new(self.addr)
    }

    /// A client that speaks only HTTP/2 with prior knowledge (cleartext h2c).
    pub fn client_h2(&self) -> Http {
        Http::http2(self.addr)
    }

    /// Wait for the process to exit (after [`Gateway::terminate`]); `None` if it is
    /// still running after `limit`, in which case it is killed.
    pub fn wait_exit(mut child: Child, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().expect("wait for mediagate") {
                return Some(status);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}

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
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `error.code` of an error body.
    pub fn error_code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

type RequestBody = BoxBody<Bytes, std::convert::Infallible>;

/// A small HTTP client bound to one gateway: HTTP/1.1, or HTTP/2 only.
#[derive(Clone)]
pub struct Http {
    addr: SocketAddr,
    client: Client<HttpConnector, RequestBody>,
}

impl Http {
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// HTTP/2 with prior knowledge: no upgrade, the connection starts with the preface.
    pub fn http2(addr: SocketAddr) -> Self {
        Self {
            addr,
            client: Client::builder(TokioExecutor::new())
                .http2_only(true)
                .build_http(),
        }
    }

    /// Send anything; `headers` are added as given. The body goes with a
    /// `Content-Length`.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Reply {
        self.send_body(method, path, headers, Full::new(body.into()).boxed())
            .await
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
                .map(|c| Ok::<_, std::convert::Infallible>(Frame::data(c))),
        );
        self.send_body(method, path, headers, StreamBody::new(stream).boxed())
            .await
    }

    async fn send_body(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: RequestBody,
    ) -> Reply {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("http://{}{}", self.addr, path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(body).expect("request");
        let resp = tokio::time::timeout(Duration::from_secs(30), self.client.request(req))
            .await
            .expect("gateway answered within 30 s")
            .expect("gateway answered");
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Reply {
            status: parts.status,
            version: parts.version,
            headers: parts.headers,
            body,
        }
    }

    pub async fn get(&self, path: &str, key: &str) -> Reply {
        let auth = format!("Bearer {key}");
        self.send(Method::GET, path, &[("authorization", &auth)], Bytes::new())
            .await
    }

    pub async fn post_json(&self, path: &str, key: &str, body: &Value) -> Reply {
        let auth = format!("Bearer {key}");
        self.send(
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
        assert_eq!(
            r.status,
            200,
            "submit {body}: {:?}",
            String::from_utf8_lossy(&r.body)
        );
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
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        loop {
            let r = self.get(&format!("{collection}/{id}"), key).await;
            assert_eq!(
                r.status,
                200,
                "query: {:?}",
                String::from_utf8_lossy(&r.body)
            );
            let v = r.json();
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
}

/// The four statuses a client may ever see.
pub const STATUSES: [&str; 4] = ["queued", "processing", "completed", "failed"];

/// Assert that `r` is the refusal `status`/`code` in the catalogue shape
/// `{"error":{"message","type","code","param"}}`, with `param` as given, and that it
/// carries a request id. Returns the error's message.
#[track_caller]
pub fn assert_error(r: &Reply, status: u16, code: &str, param: Option<&str>) -> String {
    let body = String::from_utf8_lossy(&r.body);
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

pub const MODEL_CENTER: &str = "/v2/model-center/tasks";
pub const ALPHA: &str = "/v1/alpha/videos";
