//! A fast upstream for the load benchmark: speaks the protocol of the built-in
//! simulator (`POST /v2/model-center/tasks`, `GET /v2/model-center/tasks/{id}`)
//! with next to no work per request, and counts every request it receives.
//!
//! Task ids are stateless, like the simulator's: `sim-{created_ms}-{kind}{fate}-{nonce}`.
//! A task is `queued` for `--queued-ms` after its creation, then `processing` for
//! `--processing-ms`, then `completed`. So `sim-1-vo-000000000000` (created in 1970)
//! is a finished task, and a task submitted during the run stays unfinished.
//!
//! `GET /_stats` (not counted) answers `{"requests":N,"submits":N,"queries":N,"spans":N}`.
//!
//! It is also an OTLP/HTTP collector (`POST /v1/traces`) that counts the spans it
//! receives (`spans`): the load benchmark compares them with the requests made, so
//! that spans an exporter dropped do not pass for cheap tracing.
//!
//! `POST /_complete?over_ms=W` (not counted; for benches/tracker.sh) completes every
//! task created before it, each at its own moment within the next W ms: the task
//! created at `c` ms completes at `at + (c % W) * 7919 % W`, where `at` is the time
//! of the call (the answer: `{"at_ms":…,"over_ms":…}`). The multiplication spreads
//! tasks created together in time (and so polled together) across the window; the
//! bench computes the same moment from the upstream id to measure how long the
//! gateway took to learn each end. Tasks created later are not affected.
//!
//! `GET /media/{N}.bin` streams N bytes (a 64 KiB pattern repeated, with its
//! `Content-Length`), made on the way and never held whole: the result a copy
//! benchmark downloads (benches/copy.sh). With `--result-bytes N` a completed task's
//! links point there (`http://{its own address}/media/{N}.bin`); without it they are
//! the simulator's (`https://media.example.com/…`), which lead nowhere.
//!
//! ```text
//! cargo run --release --example fast_upstream -- --listen 127.0.0.1:0
//! ```
//! prints `listening on 127.0.0.1:PORT` once ready.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use mediagate::simulator::SimTask;
use tokio::net::TcpListener;

mod cli;

const TASKS: &str = "/v2/model-center/tasks";
/// The pattern a media body repeats, and the size of its frames.
const MEDIA_CHUNK: usize = 64 * 1024;

type Body = BoxBody<Bytes, Infallible>;

#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    submits: AtomicU64,
    queries: AtomicU64,
    spans: AtomicU64,
    next_id: AtomicU64,
}

#[derive(Clone, Copy)]
struct Timing {
    queued_ms: u64,
    processing_ms: u64,
}

/// What the server answers with, beside the counters.
struct Settings {
    timing: Timing,
    /// `--result-bytes`: a completed task's link, to this server's own media.
    result_url: Option<String>,
    /// The bytes media bodies are cut from.
    pattern: Bytes,
    /// `/_complete` calls: (when, over how long), in the order made.
    completions: Mutex<Vec<(u64, u64)>>,
}

impl Settings {
    /// When a `/_complete` call made the task created at `created_ms` complete.
    fn completes_at(&self, created_ms: u64) -> Option<u64> {
        let completions = self.completions.lock().unwrap_or_else(|e| e.into_inner());
        let &(at, over) = completions.iter().find(|(at, _)| created_ms < *at)?;
        Some(at + (created_ms % over) * 7919 % over)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let listen = cli::listen(&args);
    let timing = Timing {
        queued_ms: cli::number(&args, "--queued-ms", 3_600_000),
        processing_ms: cli::number(&args, "--processing-ms", 3_600_000),
    };
    let result_bytes =
        cli::arg(&args, "--result-bytes").map(|v| v.parse::<u64>().expect("--result-bytes"));
    let threads: usize = cli::number(&args, "--threads", 1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(serve(listen, timing, result_bytes));
}

async fn serve(listen: SocketAddr, timing: Timing, result_bytes: Option<u64>) {
    let listener = TcpListener::bind(listen).await.expect("bind");
    let addr = listener.local_addr().expect("address");
    println!("listening on {addr}");
    let pattern: Vec<u8> = (0..MEDIA_CHUNK).map(|i| (i % 251) as u8).collect();
    let settings = Arc::new(Settings {
        timing,
        result_url: result_bytes.map(|n| format!("http://{addr}/media/{n}.bin")),
        pattern: Bytes::from(pattern),
        completions: Mutex::new(Vec::new()),
    });
    let stats = Arc::new(Stats::default());
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let stats = stats.clone();
        let settings = settings.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let stats = stats.clone();
                let settings = settings.clone();
                async move { Ok::<_, Infallible>(handle(req, &stats, &settings).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn reply(status: StatusCode, body: String) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).boxed());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

async fn handle(req: Request<Incoming>, stats: &Stats, settings: &Settings) -> Response<Body> {
    if req.uri().path() == "/_stats" {
        return reply(
            StatusCode::OK,
            format!(
                r#"{{"requests":{},"submits":{},"queries":{},"spans":{}}}"#,
                stats.requests.load(Ordering::Relaxed),
                stats.submits.load(Ordering::Relaxed),
                stats.queries.load(Ordering::Relaxed),
                stats.spans.load(Ordering::Relaxed)
            ),
        );
    }
    if req.method() == Method::POST && req.uri().path() == "/_complete" {
        return complete(req.uri().query().unwrap_or(""), settings);
    }
    stats.requests.fetch_add(1, Ordering::Relaxed);
    let path = req.uri().path().to_owned();
    match (req.method(), path.as_str()) {
        (&Method::POST, TASKS) => {
            stats.submits.fetch_add(1, Ordering::Relaxed);
            let image = req.uri().query().is_some_and(|q| q.contains("kind=image"));
            // The body is read whole, as a real upstream would.
            if Limited::new(req.into_body(), 1024 * 1024)
                .collect()
                .await
                .is_err()
            {
                return reply(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    r#"{"error":{"message":"body too large"}}"#.into(),
                );
            }
            let created = now_ms();
            let n = stats.next_id.fetch_add(1, Ordering::Relaxed);
            let kind = if image { "image" } else { "video" };
            let id = format!("sim-{created}-{}o-{n:012x}", &kind[..1]);
            reply(
                StatusCode::OK,
                format!(
                    r#"{{"id":"{id}","object":"{kind}","model":"bench","status":"queued","created":{}}}"#,
                    created / 1000
                ),
            )
        }
        (&Method::GET, p) if p.len() > TASKS.len() + 1 && p.starts_with(TASKS) => {
            stats.queries.fetch_add(1, Ordering::Relaxed);
            query(&p[TASKS.len() + 1..], settings, now_ms())
        }
        (&Method::GET, p) if p.starts_with("/media/") => media(p, &settings.pattern),
        // A collector for `benches/load.sh` with traces on: the spans of an export
        // counted, nothing kept.
        (&Method::POST, "/v1/traces") => {
            let Ok(body) = Limited::new(req.into_body(), 64 * 1024 * 1024)
                .collect()
                .await
            else {
                return reply(StatusCode::BAD_REQUEST, String::new());
            };
            let spans = spans_in(body.to_bytes()).unwrap_or(0);
            stats.spans.fetch_add(spans, Ordering::Relaxed);
            reply(StatusCode::OK, String::new())
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            r#"{"error":{"message":"not found"}}"#.into(),
        ),
    }
}

/// `/_complete?over_ms=W`: every task created so far completes within W ms.
fn complete(query: &str, settings: &Settings) -> Response<Body> {
    let over = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("over_ms="))
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|w| *w > 0);
    let Some(over) = over else {
        return reply(
            StatusCode::BAD_REQUEST,
            r#"{"error":{"message":"over_ms=W (W > 0) is required"}}"#.into(),
        );
    };
    let at = now_ms();
    settings
        .completions
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((at, over));
    reply(
        StatusCode::OK,
        format!(r#"{{"at_ms":{at},"over_ms":{over}}}"#),
    )
}

/// The spans of an OTLP export, decoded with the OpenTelemetry proto definitions.
fn spans_in(export: Bytes) -> Option<u64> {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    let export = ExportTraceServiceRequest::decode(export).ok()?;
    let spans = export
        .resource_spans
        .iter()
        .flat_map(|resource| &resource.scope_spans)
        .map(|scope| scope.spans.len() as u64)
        .sum();
    Some(spans)
}

/// `/media/{N}.bin`: N bytes of the pattern, streamed in frames of its size.
fn media(path: &str, pattern: &Bytes) -> Response<Body> {
    let Some(len) = path
        .strip_prefix("/media/")
        .and_then(|p| p.strip_suffix(".bin"))
        .and_then(|n| n.parse::<u64>().ok())
    else {
        return reply(
            StatusCode::NOT_FOUND,
            r#"{"error":{"message":"not found"}}"#.into(),
        );
    };
    let chunk = pattern.len() as u64;
    let (whole, rest) = (len / chunk, (len % chunk) as usize);
    let frames = std::iter::repeat_n(pattern.clone(), whole as usize)
        .chain((rest > 0).then(|| pattern.slice(..rest)))
        .map(|b| Ok::<_, Infallible>(http_body::Frame::data(b)));
    let mut resp = Response::new(StreamBody::new(futures_util::stream::iter(frames)).boxed());
    let h = resp.headers_mut();
    h.insert(header::CONTENT_LENGTH, header::HeaderValue::from(len));
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/octet-stream"),
    );
    resp
}

fn query(id: &str, settings: &Settings, now_ms: u64) -> Response<Body> {
    let timing = settings.timing;
    let Some(task) = SimTask::parse(id) else {
        return reply(
            StatusCode::NOT_FOUND,
            r#"{"error":{"message":"task not found"}}"#.into(),
        );
    };
    let (status, progress) = match settings.completes_at(task.created_ms) {
        Some(at) if now_ms >= at => (if task.fail { "failed" } else { "completed" }, 100),
        _ => task.state_at(timing.queued_ms, timing.processing_ms, now_ms),
    };
    let (created, image) = (task.created_ms, task.image);
    let object = if image { "image" } else { "video" };
    let created_s = created / 1000;
    let body = match status {
        "completed" => {
            let (field, ext) = if image {
                ("image_url", "png")
            } else {
                ("video_url", "mp4")
            };
            let url = match &settings.result_url {
                Some(url) => url.clone(),
                None => format!("https://media.example.com/mediagate-sim/{id}.{ext}"),
            };
            format!(
                r#"{{"id":"{id}","object":"{object}","status":"completed","created":{created_s},"progress":100,"urls":["{url}"],"error":null,"{field}":"{url}"}}"#
            )
        }
        "failed" => format!(
            r#"{{"id":"{id}","object":"{object}","status":"failed","created":{created_s},"progress":100,"urls":[],"error":{{"code":"simulated_failure","message":"the prompt asked the simulated provider to fail ([fail])"}}}}"#
        ),
        _ => format!(
            r#"{{"id":"{id}","object":"{object}","status":"{status}","created":{created_s},"progress":{progress},"urls":[],"error":null}}"#
        ),
    };
    reply(StatusCode::OK, body)
}
