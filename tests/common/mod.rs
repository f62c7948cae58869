//! Test harness: runs the real `mediagate` binary on a loopback port with a generated
//! routes file, and talks HTTP to it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

pub const DEMO: &str = "sk-demo";
pub const DEMO2: &str = "sk-demo-2";

/// The shipped routes.toml, made test-friendly: a free port, fast simulated tasks.
pub fn shipped_routes() -> String {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("routes.toml"))
        .expect("routes.toml is in the repository");
    text.replace(r#"listen = "127.0.0.1:8080""#, r#"listen = "127.0.0.1:0""#)
        .replace("queued_ms = 1000", "queued_ms = 300")
        .replace("processing_ms = 2000", "processing_ms = 300")
        .replace("poll_cache_ttl_ms = 1000", "poll_cache_ttl_ms = 0")
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

/// A small HTTP/1.1 client bound to one gateway.
#[derive(Clone)]
pub struct Http {
    addr: SocketAddr,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Http {
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            addr,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// Send anything; `headers` are added as given.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Reply {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("http://{}{}", self.addr, path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req.body(Full::new(body.into())).expect("request");
        let resp = tokio::time::timeout(Duration::from_secs(30), self.client.request(req))
            .await
            .expect("gateway answered within 30 s")
            .expect("gateway answered");
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.expect("body").to_bytes();
        Reply {
            status: parts.status,
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
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let r = self.get(&format!("{collection}/{id}"), key).await;
            assert_eq!(
                r.status,
                200,
                "query: {:?}",
                String::from_utf8_lossy(&r.body)
            );
            let v = r.json();
            if v["status"] == "completed" || v["status"] == "failed" {
                return v;
            }
            assert!(Instant::now() < deadline, "task never finished: {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

pub const MODEL_CENTER: &str = "/v2/model-center/tasks";
pub const ALPHA: &str = "/v1/alpha/videos";
