//! A fast upstream for the load benchmark: speaks the protocol of the built-in
//! simulator (`POST /v2/model-center/tasks`, `GET /v2/model-center/tasks/{id}`)
//! with next to no work per request, and counts every request it receives.
//!
//! Task ids are stateless, like the simulator's: `sim-{created_ms}-{kind}{fate}-{nonce}`.
//! A task is `queued` for `--queued-ms` after its creation, then `processing` for
//! `--processing-ms`, then `completed`. So `sim-1-vo-000000000000` (created in 1970)
//! is a finished task, and a task submitted during the run stays unfinished.
//!
//! `GET /_stats` (not counted) answers `{"requests":N,"submits":N,"queries":N}`.
//!
//! ```text
//! cargo run --release --example fast_upstream -- --listen 127.0.0.1:0
//! ```
//! prints `listening on 127.0.0.1:PORT` once ready.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use mediagate::simulator::SimTask;
use tokio::net::TcpListener;

mod cli;

const TASKS: &str = "/v2/model-center/tasks";

#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    submits: AtomicU64,
    queries: AtomicU64,
    next_id: AtomicU64,
}

#[derive(Clone, Copy)]
struct Timing {
    queued_ms: u64,
    processing_ms: u64,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let listen = cli::listen(&args);
    let timing = Timing {
        queued_ms: cli::number(&args, "--queued-ms", 3_600_000),
        processing_ms: cli::number(&args, "--processing-ms", 3_600_000),
    };
    let threads: usize = cli::number(&args, "--threads", 1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(serve(listen, timing));
}

async fn serve(listen: SocketAddr, timing: Timing) {
    let listener = TcpListener::bind(listen).await.expect("bind");
    println!("listening on {}", listener.local_addr().expect("address"));
    let stats = Arc::new(Stats::default());
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let stats = stats.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let stats = stats.clone();
                async move { Ok::<_, Infallible>(handle(req, &stats, timing).await) }
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

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

async fn handle(req: Request<Incoming>, stats: &Stats, timing: Timing) -> Response<Full<Bytes>> {
    if req.uri().path() == "/_stats" {
        return reply(
            StatusCode::OK,
            format!(
                r#"{{"requests":{},"submits":{},"queries":{}}}"#,
                stats.requests.load(Ordering::Relaxed),
                stats.submits.load(Ordering::Relaxed),
                stats.queries.load(Ordering::Relaxed)
            ),
        );
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
            query(&p[TASKS.len() + 1..], timing, now_ms())
        }
        _ => reply(
            StatusCode::NOT_FOUND,
            r#"{"error":{"message":"not found"}}"#.into(),
        ),
    }
}

fn query(id: &str, timing: Timing, now_ms: u64) -> Response<Full<Bytes>> {
    let Some(task) = SimTask::parse(id) else {
        return reply(
            StatusCode::NOT_FOUND,
            r#"{"error":{"message":"task not found"}}"#.into(),
        );
    };
    let (status, progress) = task.state_at(timing.queued_ms, timing.processing_ms, now_ms);
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
            let url = format!("https://media.example.com/mediagate-sim/{id}.{ext}");
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
