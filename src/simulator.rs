//! The built-in simulated provider: a small HTTP server on loopback that speaks the
//! same protocol as our own model center, so the gateway's real forwarding path runs
//! against it.
//!
//! It keeps no state: its task ids carry the creation time, the media kind and
//! whether the task is to fail, so its tasks survive a gateway restart like real
//! upstream tasks do. A task is `queued`, then `processing`, then `completed`; a
//! prompt containing `[fail]` makes it `failed` instead.
//!
//! A completed task's result is a small real file the simulator serves itself, at
//! its own address (`{MEDIA}/{id}.mp4`, or `.png` for an image), so that a gateway
//! keeping results copies real media from it and players can play the links.

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
/// Where completed tasks' media are served: `{MEDIA}/{id}.mp4` or `.png`.
const MEDIA: &str = "/mediagate-sim/media";

/// Every simulated video: one second of a test pattern, 160x90 at 10 fps, H.264
/// (constrained baseline, yuv420p) in MP4 with the index first, no audio. Made with
/// `ffmpeg -f lavfi -i testsrc2=size=160x90:rate=10:duration=1 -c:v libx264
/// -profile:v baseline -pix_fmt yuv420p -crf 30 -bsf:v filter_units=remove_types=6
/// -movflags +faststart -map_metadata -1 -fflags +bitexact -flags:v +bitexact
/// assets/simulator/sample.mp4`.
pub const SAMPLE_MP4: &[u8] = include_bytes!("../assets/simulator/sample.mp4");
/// Every simulated image: the same test pattern, one 160x90 frame. Made with
/// `ffmpeg -f lavfi -i testsrc2=size=160x90 -frames:v 1 -map_metadata -1
/// -fflags +bitexact -flags:v +bitexact assets/simulator/sample.png`.
pub const SAMPLE_PNG: &[u8] = include_bytes!("../assets/simulator/sample.png");
/// Prompts containing this fail, so apps can exercise their failure path.
pub const FAIL_MARKER: &str = "[fail]";

#[derive(Debug, Clone, Copy)]
struct Timing {
    queued: Duration,
    processing: Duration,
}

/// What the simulator's answers depend on besides the request.
#[derive(Debug, Clone, Copy)]
struct Sim {
    timing: Timing,
    /// Where it listens: the media links of its completed tasks point back at it.
    addr: SocketAddr,
}

/// Start the simulator on `cfg.listen`; returns the bound address.
pub async fn start(cfg: &SimulatorConfig) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(cfg.listen).await?;
    let addr = listener.local_addr()?;
    let sim = Sim {
        timing: Timing {
            queued: Duration::from_millis(cfg.queued_ms),
            processing: Duration::from_millis(cfg.processing_ms),
        },
        addr,
    };
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| handle(req, sim));
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

async fn handle(req: Request<Incoming>, sim: Sim) -> Result<Response<Full<Bytes>>, Infallible> {
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
            query(task_of(p).unwrap_or_default(), sim, now_ms())
        }
        (&Method::GET | &Method::HEAD, p) if p.starts_with(MEDIA) => {
            media(p, sim.timing, now_ms(), *req.method() == Method::HEAD)
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
fn query(id: &str, sim: Sim, now_ms: u64) -> Response<Full<Bytes>> {
    let Some(task) = SimTask::parse(id) else {
        return reply(
            StatusCode::NOT_FOUND,
            json!({"error": {"message": "task not found"}}),
        );
    };
    let (status, progress) = task.state_at(
        sim.timing.queued.as_millis() as u64,
        sim.timing.processing.as_millis() as u64,
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
        let url = format!("http://{}{MEDIA}/{id}.{}", sim.addr, extension(image));
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

fn extension(image: bool) -> &'static str {
    if image { "png" } else { "mp4" }
}

/// The file of a completed task, `{MEDIA}/{id}.mp4` (a video) or `.png` (an image):
/// 404 for any other name, and before the task is completed. `head`: the headers alone.
fn media(path: &str, timing: Timing, now_ms: u64, head: bool) -> Response<Full<Bytes>> {
    let completed = path
        .strip_prefix(MEDIA)
        .and_then(|p| p.strip_prefix('/'))
        .and_then(|name| name.rsplit_once('.'))
        .and_then(|(id, ext)| SimTask::parse(id).filter(|t| ext == extension(t.image)))
        .filter(|t| {
            let queued = timing.queued.as_millis() as u64;
            let processing = timing.processing.as_millis() as u64;
            t.state_at(queued, processing, now_ms).0 == "completed"
        });
    let Some(task) = completed else {
        return reply(
            StatusCode::NOT_FOUND,
            json!({"error": {"message": "no such file"}}),
        );
    };
    let (file, content_type) = if task.image {
        (SAMPLE_PNG, "image/png")
    } else {
        (SAMPLE_MP4, "video/mp4")
    };
    // HEAD: no body, but the length the GET would send.
    let body = if head {
        Bytes::new()
    } else {
        Bytes::from_static(file)
    };
    let mut resp = Response::new(Full::new(body));
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    headers.insert(
        header::CONTENT_LENGTH,
        header::HeaderValue::from(file.len()),
    );
    resp
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;

    fn bytes(r: Response<Full<Bytes>>) -> Bytes {
        futures_util::FutureExt::now_or_never(r.into_body().collect())
            .unwrap()
            .unwrap()
            .to_bytes()
    }

    fn body(r: Response<Full<Bytes>>) -> Value {
        serde_json::from_slice(&bytes(r)).unwrap()
    }

    const T: Timing = Timing {
        queued: Duration::from_millis(1000),
        processing: Duration::from_millis(2000),
    };

    const SIM: Sim = Sim {
        timing: T,
        addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 9),
    };

    #[test]
    fn a_task_goes_queued_processing_completed() {
        let created = body(submit(br#"{"model":"m","prompt":"cat"}"#, "video"));
        let id = created["id"].as_str().unwrap();
        let t0: u64 = id.split('-').nth(1).unwrap().parse().unwrap();
        assert_eq!(body(query(id, SIM, t0 + 10))["status"], "queued");
        let mid = body(query(id, SIM, t0 + 2000));
        assert_eq!(mid["status"], "processing");
        assert_eq!(mid["progress"], 50);
        assert!(mid.get("video_url").is_none());
        let done = body(query(id, SIM, t0 + 3000));
        assert_eq!(done["status"], "completed");
        let url = format!("http://127.0.0.1:9/mediagate-sim/media/{id}.mp4");
        assert_eq!(done["video_url"], url);
        assert_eq!(done["urls"], json!([url]));
    }

    #[test]
    fn fail_marker_fails_and_images_get_image_urls() {
        let id = body(submit(br#"{"model":"m","prompt":"x [fail]"}"#, "video"))["id"]
            .as_str()
            .unwrap()
            .to_string();
        let failed = body(query(&id, SIM, u64::MAX / 2));
        assert_eq!(failed["status"], "failed");
        assert_eq!(failed["error"]["code"], "simulated_failure");
        assert_eq!(failed["urls"], json!([]));

        let id = body(submit(br#"{"model":"z","prompt":"x"}"#, "image"))["id"]
            .as_str()
            .unwrap()
            .to_string();
        let done = body(query(&id, SIM, u64::MAX / 2));
        let url = format!("http://127.0.0.1:9/mediagate-sim/media/{id}.png");
        assert_eq!(done["image_url"], url);
        assert!(done.get("video_url").is_none());
    }

    #[test]
    fn the_samples_are_an_mp4_and_a_png() {
        // An ISO BMFF file starts with its `ftyp` box; the video track is H.264.
        assert_eq!(&SAMPLE_MP4[4..8], b"ftyp");
        assert!(SAMPLE_MP4.windows(4).any(|w| w == b"avc1"));
        assert_eq!(&SAMPLE_PNG[..8], b"\x89PNG\r\n\x1a\n");
        assert!(SAMPLE_MP4.len() < 32 * 1024 && SAMPLE_PNG.len() < 32 * 1024);
    }

    #[test]
    fn a_completed_tasks_file_is_served_with_its_type_and_length() {
        let (video, image) = ("sim-1-vo-00000000000a", "sim-1-io-00000000000b");
        let later = 10_000;
        for (id, ext, file, content_type) in [
            (video, "mp4", SAMPLE_MP4, "video/mp4"),
            (image, "png", SAMPLE_PNG, "image/png"),
        ] {
            let path = format!("{MEDIA}/{id}.{ext}");
            for head in [false, true] {
                let r = media(&path, T, later, head);
                assert_eq!(r.status(), StatusCode::OK, "{path}");
                assert_eq!(r.headers()[header::CONTENT_TYPE], content_type);
                assert_eq!(r.headers()[header::CONTENT_LENGTH], file.len().to_string());
                let sent = bytes(r);
                assert_eq!(&sent[..], if head { &[][..] } else { file }, "{path}");
            }
        }
        for path in [
            format!("{MEDIA}/{video}.png"),
            format!("{MEDIA}/{image}.mp4"),
            format!("{MEDIA}/{video}"),
            format!("{MEDIA}{video}.mp4"),
            format!("{MEDIA}/sim-1-vf-00000000000c.mp4"),
            format!("{MEDIA}/x.mp4"),
            format!("{MEDIA}/"),
            MEDIA.to_string(),
        ] {
            let r = media(&path, T, later, false);
            assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
        }
        // Not before the task is completed.
        let path = format!("{MEDIA}/{video}.mp4");
        assert_eq!(
            media(&path, T, 2_000, false).status(),
            StatusCode::NOT_FOUND
        );
    }

    /// `request` on a connection of its own; the answer's head and body.
    async fn exchange(addr: SocketAddr, request: &[u8]) -> (String, Vec<u8>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(request).await.unwrap();
        let mut answer = Vec::new();
        let _ = tcp.read_to_end(&mut answer).await;
        let end = answer
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(answer.len(), |i| i + 4);
        let body = answer.split_off(end);
        (String::from_utf8_lossy(&answer).into_owned(), body)
    }

    /// The completed answer's link leads back to the simulator, which serves the file.
    #[tokio::test]
    async fn a_completed_tasks_link_is_served_by_the_simulator_itself() {
        let cfg = SimulatorConfig {
            queued_ms: 0,
            processing_ms: 0,
            ..SimulatorConfig::default()
        };
        let addr = start(&cfg).await.unwrap();
        let submit = br#"{"model":"m","prompt":"p"}"#;
        let mut post = format!(
            "POST {TASKS}?kind=video HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            submit.len()
        )
        .into_bytes();
        post.extend_from_slice(submit);
        let (_, created) = exchange(addr, &post).await;
        let id = serde_json::from_slice::<Value>(&created).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        let get = |path: &str, method: &str| {
            format!("{method} {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        };
        let (_, done) = exchange(addr, get(&format!("{TASKS}/{id}"), "GET").as_bytes()).await;
        let done: Value = serde_json::from_slice(&done).unwrap();
        assert_eq!(done["status"], "completed", "{done}");
        let url = done["video_url"].as_str().unwrap();
        let path = url.strip_prefix(&format!("http://{addr}")).unwrap();
        assert_eq!(path, format!("{MEDIA}/{id}.mp4"));

        let (head, file) = exchange(addr, get(path, "GET").as_bytes()).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("content-type: video/mp4\r\n"), "{head}");
        let length = format!("content-length: {}\r\n", SAMPLE_MP4.len());
        assert!(head.contains(&length), "{head}");
        assert_eq!(file, SAMPLE_MP4);
        let (head, nothing) = exchange(addr, get(path, "HEAD").as_bytes()).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains(&length), "{head}");
        assert!(nothing.is_empty());
    }

    /// Any bytes after the collection: a 404, never a panic (the server must answer).
    #[tokio::test]
    async fn odd_paths_are_404_not_a_panic() {
        let addr = start(&SimulatorConfig::default()).await.unwrap();
        for (prefix, tail) in [
            (TASKS, &b"\xc3\xa9"[..]),
            (TASKS, b"/\xff\xfe"),
            (TASKS, b"s\xe2\x82\xac"),
            (TASKS, b"/sim-\xc3-vo-1"),
            (MEDIA, b"/sim-1-vo-00000000000\xc3.mp4"),
            (MEDIA, b"/\xff.\xfe"),
        ] {
            let mut line = format!("GET {prefix}").into_bytes();
            line.extend_from_slice(tail);
            line.extend_from_slice(b" HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
            let (head, _) = exchange(addr, &line).await;
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
            assert_eq!(query(id, SIM, 0).status(), StatusCode::NOT_FOUND, "{id}");
        }
    }
}
