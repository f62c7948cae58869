//! Harness for the edge tests: the real binary with extra arguments and signals, a
//! small routes file, fake upstreams (real HTTP servers in the test process), test
//! certificates, and HTTPS clients.
#![allow(dead_code)]

use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;

use crate::common::Reply;

pub const DEMO_SHA256: &str = "f77894fdfa58e447c57e077eaa9708e8e009c84dc6aba2db80461275e9b85be7";
pub const DEMO2_SHA256: &str = "8210bbdaf0d08ca288d5c2fdd81f5a36d0367239ef386a952c245048d844561d";

/// Pieces of a small routes file; `routes()` puts them together.
pub struct Routes {
    /// Lines added to `[server]`.
    pub server: String,
    /// Top-level tables added before the keys (e.g. `[limits]`).
    pub top: String,
    /// Lines added to the `demo` key (sk-demo).
    pub demo_key: String,
    /// Provider base URL; `builtin:simulator` by default.
    pub base_url: String,
    /// Provider lines added after `base_url`.
    pub provider: String,
    /// Models of the one family.
    pub models: Vec<String>,
}

impl Default for Routes {
    fn default() -> Self {
        Self {
            server: String::new(),
            top: String::new(),
            demo_key: String::new(),
            base_url: "builtin:simulator".into(),
            provider: String::new(),
            models: vec!["m1".into()],
        }
    }
}

impl Routes {
    pub fn render(&self) -> String {
        let models = self
            .models
            .iter()
            .map(|m| format!("{m:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            r#"
[server]
listen = "127.0.0.1:0"
{server}

[tasks]
secret_file = "task-secret"
create_secret_file = true

[simulator]
queued_ms = 100
processing_ms = 100

{top}

[[keys]]
name = "demo"
sha256 = "{DEMO_SHA256}"
{demo_key}

[[keys]]
name = "demo-2"
sha256 = "{DEMO2_SHA256}"

[providers.up]
base_url = "{base_url}"
{provider}

[providers.up.submit]
path = '"/v2/model-center/tasks"'
body = '{{model: $upstream_model}} + .'
id = '.id'
status = '.status'

[providers.up.query]
path = '"/v2/model-center/tasks/\($id | @uri)"'
status = '.status'
status_map = {{ queued = "queued", processing = "processing", completed = "completed", failed = "failed" }}
urls = '.urls'

[families.test]
kind = "video"
providers = ["up"]
models = [{models}]
params.required = ["prompt"]
params.properties.prompt = {{ type = "string", minLength = 1 }}
"#,
            server = self.server,
            top = self.top,
            demo_key = self.demo_key,
            base_url = self.base_url,
            provider = self.provider,
        )
    }
}

/// A running gateway process with its own arguments. Killed on drop.
pub struct Proc {
    pub dir: tempfile::TempDir,
    pub addr: SocketAddr,
    pub https: Option<SocketAddr>,
    pub metrics: Option<SocketAddr>,
    child: Option<Child>,
    log: Arc<Mutex<Vec<String>>>,
}

/// The address after `marker` (e.g. "listening on http://") in a log line, text or JSON.
fn address_after(line: &str, marker: &str) -> Option<SocketAddr> {
    let at = line.find(marker)?;
    let rest = &line[at + marker.len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == ':'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

impl Proc {
    pub fn start(routes: &str) -> Self {
        Self::start_with(routes, &[], &[])
    }

    /// Start with extra command-line arguments and environment variables.
    pub fn start_with(routes: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("routes.toml"), routes).expect("write routes");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_mediagate"));
        cmd.arg("serve")
            .arg("--config")
            .arg(dir.path().join("routes.toml"))
            .args(args)
            .current_dir(dir.path())
            .env("RUST_LOG", "info")
            .env_remove("MEDIAGATE_TASK_SECRET")
            .env_remove("MEDIAGATE_LOG_FORMAT")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start mediagate");
        let stderr = child.stderr.take().expect("piped stderr");
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            let (mut https, mut metrics) = (None, None);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                https = https.or(address_after(&line, "listening on https://"));
                metrics = metrics.or(address_after(&line, "metrics listener on http://"));
                if let Some(addr) = address_after(&line, "listening on http://")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(Some((addr, https, metrics)));
                }
                sink.lock().unwrap().push(line);
            }
            if let Some(tx) = tx.take() {
                let _ = tx.send(None);
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Some((addr, https, metrics))) => Self {
                dir,
                addr,
                https,
                metrics,
                child: Some(child),
                log,
            },
            _ => {
                let _ = child.kill();
                panic!(
                    "mediagate did not start; log:\n{}",
                    log.lock().unwrap().join("\n")
                )
            }
        }
    }

    pub fn routes_path(&self) -> PathBuf {
        self.dir.path().join("routes.toml")
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    pub fn client(&self) -> crate::common::Http {
        crate::common::Http::new(self.addr)
    }

    pub fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill -{sig} {pid}");
    }

    /// Rewrite the routes file, send SIGHUP, and wait for the outcome to be logged.
    /// True when the new file was taken.
    pub fn reload_with(&self, routes: &str) -> bool {
        let before = self.count_in_log("configuration reloaded")
            + self.count_in_log("configuration NOT reloaded");
        std::fs::write(self.routes_path(), routes).expect("write routes");
        self.signal("HUP");
        self.wait_for_log(|p| {
            p.count_in_log("configuration reloaded") + p.count_in_log("configuration NOT reloaded")
                > before
        });
        let lines = self.log_lines();
        let last = lines
            .iter()
            .rev()
            .find(|l| l.contains("configuration reloaded") || l.contains("NOT reloaded"))
            .expect("reload logged");
        !last.contains("NOT reloaded")
    }

    pub fn count_in_log(&self, needle: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    pub fn wait_for_log(&self, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done(self) {
            assert!(
                Instant::now() < deadline,
                "log never showed it:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait for the process to exit (at most 30 s).
    pub fn wait_exit(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("mediagate did not exit; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A fake provider speaking the simulator's protocol: submits answer after `delay`
/// with a new id; queries answer `completed`. Counts submits; keeps the last
/// `authorization` header it saw.
pub struct Upstream {
    pub addr: SocketAddr,
    pub submits: Arc<AtomicUsize>,
    pub last_auth: Arc<Mutex<Option<String>>>,
    /// Status word queries answer with.
    pub query_status: Arc<Mutex<String>>,
}

impl Upstream {
    pub async fn start(delay: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let submits = Arc::new(AtomicUsize::new(0));
        let last_auth: Arc<Mutex<Option<String>>> = Arc::default();
        let query_status = Arc::new(Mutex::new("completed".to_string()));
        let (s, a, q) = (submits.clone(), last_auth.clone(), query_status.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (s, a, q) = (s.clone(), a.clone(), q.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                        let (s, a, q) = (s.clone(), a.clone(), q.clone());
                        async move {
                            *a.lock().unwrap() = req
                                .headers()
                                .get("authorization")
                                .and_then(|v| v.to_str().ok())
                                .map(str::to_owned);
                            let body = if req.method() == http::Method::POST {
                                let n = s.fetch_add(1, Ordering::SeqCst) + 1;
                                tokio::time::sleep(delay).await;
                                serde_json::json!({"id": format!("up-{n}"), "status": "queued"})
                            } else {
                                let status = q.lock().unwrap().clone();
                                serde_json::json!({"status": status, "urls": ["https://cdn.example/v.mp4"]})
                            };
                            Ok::<_, Infallible>(
                                Response::builder()
                                    .status(StatusCode::OK)
                                    .header("content-type", "application/json")
                                    .body(Full::new(Bytes::from(body.to_string())))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self {
            addr,
            submits,
            last_auth,
            query_status,
        }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// A self-signed certificate for `localhost` and 127.0.0.1: (cert PEM, key PEM, DER
/// for clients).
pub fn make_cert() -> (String, String, rustls::pki_types::CertificateDer<'static>) {
    let names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let ck = rcgen::generate_simple_self_signed(names).expect("rcgen");
    (
        ck.cert.pem(),
        ck.signing_key.serialize_pem(),
        ck.cert.der().clone(),
    )
}

/// Which HTTP versions an HTTPS client offers by ALPN.
#[derive(Clone, Copy)]
pub enum Alpn {
    Http1,
    Http2,
}

/// HTTPS client trusting only `ca`.
pub struct Https {
    addr: SocketAddr,
    client: hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        Full<Bytes>,
    >,
}

impl Https {
    pub fn new(
        addr: SocketAddr,
        ca: &rustls::pki_types::CertificateDer<'static>,
        alpn: Alpn,
    ) -> Self {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.clone()).expect("test CA");
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_only();
        let connector = match alpn {
            Alpn::Http1 => builder.enable_http1().build(),
            Alpn::Http2 => builder.enable_http2().build(),
        };
        let mut client = hyper_util::client::legacy::Client::builder(TokioExecutor::new());
        if matches!(alpn, Alpn::Http2) {
            client.http2_only(true);
        }
        Self {
            addr,
            client: client.build(connector),
        }
    }

    /// GET `path` with an optional key: the reply and the HTTP version used.
    pub async fn get(
        &self,
        path: &str,
        key: Option<&str>,
    ) -> Result<(Reply, http::Version), String> {
        let mut req = Request::builder().uri(format!("https://{}{path}", self.addr));
        if let Some(key) = key {
            req = req.header("authorization", format!("Bearer {key}"));
        }
        let req = req.body(Full::new(Bytes::new())).unwrap();
        let resp = tokio::time::timeout(Duration::from_secs(20), self.client.request(req))
            .await
            .map_err(|_| "timed out".to_string())?
            .map_err(|e| format!("{e:?}"))?;
        let version = resp.version();
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((
            Reply {
                status: parts.status,
                version,
                headers: parts.headers,
                body,
            },
            version,
        ))
    }
}

/// The samples of a metrics exposition: (series, value).
pub fn parse_metrics(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

/// Sum of the samples whose series (name and labels) contains every `part`.
pub fn metric_sum(samples: &[(String, f64)], parts: &[&str]) -> f64 {
    samples
        .iter()
        .filter(|(series, _)| parts.iter().all(|p| series.contains(p)))
        .map(|(_, v)| v)
        .sum()
}

pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}
