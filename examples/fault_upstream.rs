//! A misbehaving upstream for `benches/memory.sh` and `benches/soak.sh`: it speaks the
//! protocol of the built-in simulator (`POST /v2/model-center/tasks`,
//! `GET /v2/model-center/tasks/{id}`, stateless `sim-…` ids), and misbehaves as told.
//! Loopback only; it stops by itself after `--seconds` (at most an hour).
//!
//! ```text
//! fault_upstream --listen 127.0.0.1:0 --mode hold|hostile|faults \
//!     [--seconds 600] [--stall-ms 40000] [--ids-file created.txt] [--seed 1]
//! ```
//!
//! - `hold`: submits are read whole and never answered (until the process ends);
//!   queries answer `queued`.
//! - `hostile`: submits succeed; a status answer is `completed` with as much as an
//!   answer may carry: ten thousand URLs (some 100 KiB long), a 100 KiB code and message.
//! - `faults`: each request meets, by chance, one of: a reset before the request is
//!   read, a reset after it is read, a stall past every timeout, a burst of 5xx or of
//!   429 (a few requests in a row), a truncated or non-JSON answer, a slowly trickling
//!   body, or a good answer. Every task id it gave out in a whole 200 answer is
//!   appended to `--ids-file` (one per line), so the soak can check the ledger knows it.
//!
//! Prints `listening on 127.0.0.1:PORT` once ready; `GET /_stats` (not counted)
//! answers the counts of each fault served.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use mediagate::simulator::SimTask;
use tokio::net::TcpListener;

mod cli;

const TASKS: &str = "/v2/model-center/tasks";
type Body = BoxBody<Bytes, std::io::Error>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Hold,
    Hostile,
    Faults,
}

/// What one request meets in `faults` mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    ResetBefore,
    ResetAfter,
    Stall,
    ServerError,
    TooMany,
    Truncated,
    NotJson,
    Trickle,
    Good,
}

struct State {
    mode: Mode,
    stall: Duration,
    rng: AtomicU64,
    /// Requests left in a 5xx or 429 burst, and which.
    burst: Mutex<(u32, Fault)>,
    served: Mutex<BTreeMap<String, u64>>,
    ids: Option<Mutex<std::fs::File>>,
    next_id: AtomicU64,
}

impl State {
    /// xorshift: good enough to pick faults, and reproducible with `--seed`.
    fn roll(&self, n: u64) -> u64 {
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        x % n
    }

    fn pick(&self) -> Fault {
        {
            let mut burst = self.burst.lock().unwrap();
            if burst.0 > 0 {
                burst.0 -= 1;
                return burst.1;
            }
        }
        let fault = match self.roll(100) {
            0..=3 => Fault::ResetBefore,
            4..=7 => Fault::ResetAfter,
            8..=10 => Fault::Stall,
            11..=14 => Fault::ServerError,
            15..=18 => Fault::TooMany,
            19..=21 => Fault::Truncated,
            22..=24 => Fault::NotJson,
            25..=28 => Fault::Trickle,
            _ => Fault::Good,
        };
        if matches!(fault, Fault::ServerError | Fault::TooMany) {
            *self.burst.lock().unwrap() = (2 + self.roll(4) as u32, fault);
        }
        fault
    }

    fn count(&self, what: &str) {
        *self.served.lock().unwrap().entry(what.into()).or_default() += 1;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let listen = cli::listen(&args);
    assert!(listen.ip().is_loopback(), "loopback only");
    let mode = match cli::arg(&args, "--mode").as_deref() {
        Some("hold") => Mode::Hold,
        Some("hostile") => Mode::Hostile,
        Some("faults") | None => Mode::Faults,
        Some(other) => panic!("unknown mode {other}"),
    };
    let seconds: u64 = cli::number(&args, "--seconds", 600);
    let state = Arc::new(State {
        mode,
        stall: Duration::from_millis(cli::number(&args, "--stall-ms", 40_000)),
        rng: AtomicU64::new(cli::number(&args, "--seed", 0x9e37_79b9_7f4a_7c15_u64).max(1)),
        burst: Mutex::new((0, Fault::Good)),
        served: Mutex::default(),
        ids: cli::arg(&args, "--ids-file").map(|f| {
            Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(f)
                    .expect("ids file"),
            )
        }),
        next_id: AtomicU64::new(0),
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let serving = serve(listen, state);
        let _ = tokio::time::timeout(Duration::from_secs(seconds.min(3600)), serving).await;
    });
}

async fn serve(listen: SocketAddr, state: Arc<State>) {
    let listener = TcpListener::bind(listen).await.expect("bind");
    println!("listening on {}", listener.local_addr().expect("address"));
    let _ = std::io::stdout().flush();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        if state.mode == Mode::Faults && state.roll(100) < 3 {
            // A reset before anything is read: the gateway's request never arrives.
            state.count("reset_before");
            let _ = stream.set_zero_linger();
            drop(stream);
            continue;
        }
        let state = state.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let state = state.clone();
                async move { handle(req, &state).await }
            });
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[derive(Debug)]
struct Reset;
impl std::fmt::Display for Reset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("reset on purpose")
    }
}
impl std::error::Error for Reset {}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn full(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut resp = Response::new(Full::new(body.into()).map_err(|n| match n {}).boxed());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

/// A body that sends `text` a few bytes at a time, every 100 ms.
fn trickle(text: String) -> Response<Body> {
    let chunks: Vec<Bytes> = text
        .into_bytes()
        .chunks(8)
        .map(Bytes::copy_from_slice)
        .collect();
    let stream = futures_util::stream::unfold(chunks.into_iter(), |mut rest| async move {
        let next = rest.next()?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        Some((Ok::<_, std::io::Error>(Frame::data(next)), rest))
    });
    let mut resp = Response::new(StreamBody::new(stream).boxed());
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    resp
}

async fn handle(req: Request<Incoming>, state: &State) -> Result<Response<Body>, Reset> {
    if req.uri().path() == "/_stats" {
        let served = state.served.lock().unwrap().clone();
        return Ok(full(
            StatusCode::OK,
            serde_json::to_string(&served).unwrap_or_default(),
        ));
    }
    let submit = req.method() == Method::POST && req.uri().path() == TASKS;
    let path = req.uri().path().to_owned();
    // The request is read whole first, as a real upstream would.
    if Limited::new(req.into_body(), 4 << 20)
        .collect()
        .await
        .is_err()
    {
        return Ok(full(StatusCode::PAYLOAD_TOO_LARGE, "{}"));
    }
    let fault = match state.mode {
        Mode::Faults => state.pick(),
        Mode::Hold if submit => {
            state.count("held");
            std::future::pending::<()>().await;
            Fault::Good
        }
        _ => Fault::Good,
    };
    state.count(&format!(
        "{}_{fault:?}",
        if submit { "submit" } else { "query" }
    ));
    match fault {
        Fault::ResetBefore | Fault::ResetAfter => return Err(Reset),
        Fault::Stall => {
            tokio::time::sleep(state.stall).await;
            return Err(Reset);
        }
        Fault::ServerError => {
            return Ok(full(
                StatusCode::INTERNAL_SERVER_ERROR,
                r#"{"error":{"message":"upstream broke"}}"#,
            ));
        }
        Fault::TooMany => {
            let mut resp = full(
                StatusCode::TOO_MANY_REQUESTS,
                r#"{"error":{"message":"slow down"}}"#,
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            return Ok(resp);
        }
        Fault::NotJson => return Ok(full(StatusCode::OK, "<html>gateway timeout</html>")),
        _ => {}
    }
    let answer = if submit {
        let n = state.next_id.fetch_add(1, Ordering::Relaxed);
        let id = format!("sim-{}-vo-{n:012x}", now_ms());
        let text = format!(r#"{{"id":"{id}","object":"video","status":"queued"}}"#);
        if fault == Fault::Good || fault == Fault::Trickle {
            // A whole 200 answer: the gateway can know this task.
            if let Some(ids) = &state.ids {
                let _ = writeln!(ids.lock().unwrap(), "{id}");
            }
        }
        (text, fault)
    } else {
        (status_answer(&path, state.mode), fault)
    };
    Ok(match answer {
        (text, Fault::Truncated) => full(StatusCode::OK, text[..text.len() / 2].to_string()),
        (text, Fault::Trickle) => trickle(text),
        (text, _) => full(StatusCode::OK, text),
    })
}

fn status_answer(path: &str, mode: Mode) -> String {
    let id = path
        .strip_prefix(TASKS)
        .and_then(|p| p.strip_prefix('/'))
        .unwrap_or_default();
    if mode == Mode::Hostile {
        let mut urls: Vec<String> = (0..10_000)
            .map(|n| format!("https://cdn.example/{id}/{n}.mp4"))
            .collect();
        urls[0] = format!("https://cdn.example/{}", "x".repeat(100 * 1024));
        return serde_json::json!({
            "id": id, "status": "completed", "urls": urls,
            "error": {"code": "c".repeat(100 * 1024), "message": "m".repeat(100 * 1024)},
        })
        .to_string();
    }
    let Some(task) = SimTask::parse(id) else {
        return r#"{"status":"failed","error":{"code":"not_found","message":"no such task"}}"#
            .into();
    };
    let (status, progress) = task.state_at(2_000, 3_000, now_ms());
    let url = format!("https://media.example.com/{id}.mp4");
    match status {
        "completed" => {
            format!(r#"{{"id":"{id}","status":"completed","progress":100,"urls":["{url}"]}}"#)
        }
        _ => format!(r#"{{"id":"{id}","status":"{status}","progress":{progress},"urls":[]}}"#),
    }
}
