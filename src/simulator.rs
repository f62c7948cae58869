//! The built-in simulated provider: a small HTTP server on loopback that speaks the
//! same protocol as our own model center, so the gateway's real forwarding path runs
//! against it.
//!
//! It keeps no state: its task ids carry the creation time, the media kind and
//! whether the task is to fail, so its tasks survive a gateway restart like real
//! upstream tasks do. A task is `queued`, then `processing`, then `completed`; a
//! prompt containing `[fail]` makes it `failed` instead.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use ring::rand::{SecureRandom, SystemRandom};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::config::SimulatorConfig;

const TASKS: &str = "/v2/model-center/tasks";
/// Prompts containing this fail, so apps can exercise their failure path.
pub const FAIL_MARKER: &str = "[fail]";

#[derive(Debug, Clone, Copy)]
struct Timing {
    queued: Duration,
    processing: Duration,
}

/// Start the simulator on `cfg.listen`; returns the bound address.
pub async fn start(cfg: &SimulatorConfig) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(cfg.listen).await?;
    let addr = listener.local_addr()?;
    let timing = Timing {
        queued: Duration::from_millis(cfg.queued_ms),
        processing: Duration::from_millis(cfg.processing_ms),
    };
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| handle(req, timing));
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

async fn handle(
    req: Request<Incoming>,
    timing: Timing,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_owned();
    let answer = match (req.method(), path.as_str()) {
        (&Method::POST, TASKS) => {
            let kind = req
                .uri()
                .query()
                .and_then(|q| form_urlencoded::parse(q.as_bytes()).find(|(k, _)| k == "kind"))
                .map_or("video".to_string(), |(_, v)| v.into_owned());
            match Limited::new(req.into_body(), 1024 * 1024).collect().await {
                Ok(body) => submit(&body.to_bytes(), &kind),
                Err(_) => reply(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    json!({"error": {"message": "body too large"}}),
                ),
            }
        }
        // Byte-wise: a path need not be UTF-8, so no slicing at a fixed index.
        (&Method::GET, p) if task_of(p).is_some() => {
            query(task_of(p).unwrap_or_default(), timing, now_ms())
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            json!({"error": {"message": "not found"}}),
        ),
    };
    Ok(answer)
}

/// The task id in `{TASKS}/{id}`.
fn task_of(path: &str) -> Option<&str> {
    path.strip_prefix(TASKS)?
        .strip_prefix('/')
        .filter(|id| !id.is_empty())
}

fn reply(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_string())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

fn submit(body: &[u8], kind: &str) -> Response<Full<Bytes>> {
    let Ok(Value::Object(req)) = serde_json::from_slice::<Value>(body) else {
        return reply(
            StatusCode::BAD_REQUEST,
            json!({"error": {"message": "body must be a JSON object"}}),
        );
    };
    let Some(model) = req.get("model").and_then(Value::as_str) else {
        return reply(
            StatusCode::BAD_REQUEST,
            json!({"error": {"message": "model is required"}}),
        );
    };
    let fail = req
        .get("prompt")
        .and_then(Value::as_str)
        .is_some_and(|p| p.contains(FAIL_MARKER));
    let mut nonce = [0u8; 6];
    let _ = SystemRandom::new().fill(&mut nonce);
    let created = now_ms();
    let id = format!(
        "sim-{created}-{}{}-{}",
        if kind == "image" { 'i' } else { 'v' },
        if fail { 'f' } else { 'o' },
        hex::encode(nonce)
    );
    reply(
        StatusCode::OK,
        json!({
            "id": id,
            "object": if kind == "image" { "image" } else { "video" },
            "model": model,
            "status": "queued",
            "created": created / 1000,
        }),
    )
}

/// What a simulated task id says: the simulator keeps no state, its ids carry it all.
/// (The load benchmark's fast upstream speaks the same ids.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimTask {
    pub created_ms: u64,
    pub image: bool,
    pub fail: bool,
}

impl SimTask {
    /// `sim-{created_ms}-{v|i}{o|f}-{12 hex digits}`; anything else is no task.
    pub fn parse(id: &str) -> Option<Self> {
        let mut parts = id.strip_prefix("sim-")?.splitn(3, '-');
        let created_ms: u64 = parts.next()?.parse().ok()?;
        let flags = parts.next()?.as_bytes();
        let nonce = parts.next()?;
        let valid = flags.len() == 2
            && matches!(flags[0], b'v' | b'i')
            && matches!(flags[1], b'o' | b'f')
            && nonce.len() == 12
            && nonce.bytes().all(|b| b.is_ascii_hexdigit());
        valid.then_some(Self {
            created_ms,
            image: flags[0] == b'i',
            fail: flags[1] == b'f',
        })
    }

    /// Status word and progress at `now_ms`: queued, then processing, then done.
    pub fn state_at(&self, queued_ms: u64, processing_ms: u64, now_ms: u64) -> (&'static str, u64) {
        let elapsed = now_ms.saturating_sub(self.created_ms);
        if elapsed < queued_ms {
            ("queued", 0)
        } else if elapsed < queued_ms.saturating_add(processing_ms) {
            let into = elapsed - queued_ms;
            ("processing", (1 + into * 98 / processing_ms.max(1)).min(99))
        } else if self.fail {
            ("failed", 100)
        } else {
            ("completed", 100)
        }
    }
}

/// Status of a simulated task `now_ms` milliseconds after the epoch.
fn query(id: &str, timing: Timing, now_ms: u64) -> Response<Full<Bytes>> {
    let Some(task) = SimTask::parse(id) else {
        return reply(
            StatusCode::NOT_FOUND,
            json!({"error": {"message": "task not found"}}),
        );
    };
    let (status, progress) = task.state_at(
        timing.queued.as_millis() as u64,
        timing.processing.as_millis() as u64,
        now_ms,
    );
    let (created, image) = (task.created_ms, task.image);
    let object = if image { "image" } else { "video" };
    let mut body = json!({
        "id": id,
        "object": object,
        "status": status,
        "created": created / 1000,
        "progress": progress,
        "urls": [],
        "error": null,
    });
    if status == "completed" {
        let url = format!(
            "https://media.example.com/mediagate-sim/{id}.{}",
            if image { "png" } else { "mp4" }
        );
        body[if image { "image_url" } else { "video_url" }] = json!(url);
        body["urls"] = json!([url]);
    } else if status == "failed" {
        body["error"] = json!({
            "code": "simulated_failure",
            "message": "the prompt asked the simulated provider to fail ([fail])",
        });
    }
    reply(StatusCode::OK, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(r: Response<Full<Bytes>>) -> Value {
        let bytes = futures_util::FutureExt::now_or_never(r.into_body().collect())
            .unwrap()
            .unwrap()
            .to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    const T: Timing = Timing {
        queued: Duration::from_millis(1000),
        processing: Duration::from_millis(2000),
    };

    #[test]
    fn a_task_goes_queued_processing_completed() {
        let created = body(submit(br#"{"model":"m","prompt":"cat"}"#, "video"));
        let id = created["id"].as_str().unwrap();
        let t0: u64 = id.split('-').nth(1).unwrap().parse().unwrap();
        assert_eq!(body(query(id, T, t0 + 10))["status"], "queued");
        let mid = body(query(id, T, t0 + 2000));
        assert_eq!(mid["status"], "processing");
        assert_eq!(mid["progress"], 50);
        let done = body(query(id, T, t0 + 3000));
        assert_eq!(done["status"], "completed");
        assert!(done["video_url"].as_str().unwrap().ends_with(".mp4"));
    }

    #[test]
    fn fail_marker_fails_and_images_get_image_urls() {
        let id = body(submit(br#"{"model":"m","prompt":"x [fail]"}"#, "video"))["id"]
            .as_str()
            .unwrap()
            .to_string();
        let failed = body(query(&id, T, u64::MAX / 2));
        assert_eq!(failed["status"], "failed");
        assert_eq!(failed["error"]["code"], "simulated_failure");

        let id = body(submit(br#"{"model":"z","prompt":"x"}"#, "image"))["id"]
            .as_str()
            .unwrap()
            .to_string();
        let done = body(query(&id, T, u64::MAX / 2));
        assert!(done["image_url"].as_str().unwrap().ends_with(".png"));
    }

    /// Any bytes after the collection: a 404, never a panic (the server must answer).
    #[tokio::test]
    async fn odd_paths_are_404_not_a_panic() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = start(&SimulatorConfig::default()).await.unwrap();
        for tail in [
            &b"\xc3\xa9"[..],
            b"/\xff\xfe",
            b"s\xe2\x82\xac",
            b"/sim-\xc3-vo-1",
        ] {
            let mut line = b"GET /v2/model-center/tasks".to_vec();
            line.extend_from_slice(tail);
            line.extend_from_slice(b" HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
            let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            tcp.write_all(&line).await.unwrap();
            let mut answer = Vec::new();
            let _ = tcp.read_to_end(&mut answer).await;
            let head = String::from_utf8_lossy(&answer);
            assert!(
                head.starts_with("HTTP/1.1 404") || head.starts_with("HTTP/1.1 400"),
                "{tail:?}: {head:?}"
            );
        }
    }

    #[test]
    fn made_up_ids_are_404() {
        for id in [
            "x",
            "sim-1-vo-zz",
            "sim-abc-vo-000000000000",
            "sim-1-xx-000000000000",
        ] {
            assert_eq!(query(id, T, 0).status(), StatusCode::NOT_FOUND, "{id}");
        }
    }
}
