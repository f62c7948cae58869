//! Webhook receivers for `benches/webhooks.sh`: `--count N` HTTP servers on ports of
//! 127.0.0.1, one per receiver (a callback URL's origin is its receiver). Each takes a
//! post at `/hook/...` and answers 204 after `--answer-ms` (0 by default); receiver 0
//! answers after `--slow-ms` instead when `--slow` is given, and receiver 1 never
//! answers (it reads the post and holds the connection) when `--dead` is given.
//!
//! Prints `receivers PORT0 PORT1 …` once all listen. `GET /_stats` on any of them
//! (not counted) answers one line per receiver, `index posts first_ms last_ms`: the
//! posts it took whole and when the first and the last arrived (Unix ms, 0 before
//! any); `GET /_arrivals` the arrival of every post taken, one `index unix_ms` per line.
//!
//! ```text
//! cargo run --release --example webhook_receivers -- --count 100 --slow --slow-ms 10000 --dead
//! ```

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

mod cli;

/// What every receiver took: one `(receiver, unix ms)` per post.
type Arrivals = Arc<Mutex<Vec<(u16, u64)>>>;

/// How one receiver answers.
#[derive(Clone, Copy)]
enum Answers {
    After(Duration),
    Never,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let count: u16 = cli::number(&args, "--count", 100);
    let answer = Duration::from_millis(cli::number(&args, "--answer-ms", 0));
    let slow = Duration::from_millis(cli::number(&args, "--slow-ms", 10_000));
    let has = |flag: &str| args.iter().any(|a| a == flag);
    let answers: Vec<Answers> = (0..count)
        .map(|i| match i {
            0 if has("--slow") => Answers::After(slow),
            1 if has("--dead") => Answers::Never,
            _ => Answers::After(answer),
        })
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli::number(&args, "--threads", 1))
        .enable_all()
        .build()
        .expect("runtime");
    // Each receiver on a port of its own at `--listen`'s address.
    let ip = cli::listen(&args).ip();
    runtime.block_on(serve(ip, answers));
}

async fn serve(ip: std::net::IpAddr, answers: Vec<Answers>) {
    let arrivals: Arrivals = Arc::default();
    let count = answers.len() as u16;
    let mut ports = Vec::new();
    for (index, answer) in answers.into_iter().enumerate() {
        let listener = TcpListener::bind((ip, 0)).await.expect("bind");
        ports.push(listener.local_addr().expect("address").port().to_string());
        tokio::spawn(accept(
            listener,
            index as u16,
            answer,
            count,
            arrivals.clone(),
        ));
    }
    println!("receivers {}", ports.join(" "));
    std::future::pending::<()>().await;
}

async fn accept(
    listener: TcpListener,
    index: u16,
    answer: Answers,
    count: u16,
    arrivals: Arrivals,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let arrivals = arrivals.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let arrivals = arrivals.clone();
                async move {
                    let resp = handle(req, index, answer, count, &arrivals).await;
                    Ok::<_, Infallible>(resp)
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn handle(
    req: Request<Incoming>,
    index: u16,
    answer: Answers,
    count: u16,
    arrivals: &Arrivals,
) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/_stats" => return text(stats(arrivals, count)),
        "/_arrivals" => {
            let all = arrivals.lock().unwrap().clone();
            let lines: String = all.iter().map(|(i, at)| format!("{i} {at}\n")).collect();
            return text(lines);
        }
        _ => {}
    }
    let taken = req.into_body().collect().await.is_ok();
    if taken {
        arrivals.lock().unwrap().push((index, now_ms()));
    }
    match answer {
        Answers::After(wait) => tokio::time::sleep(wait).await,
        Answers::Never => std::future::pending::<()>().await,
    }
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = StatusCode::NO_CONTENT;
    resp
}

fn stats(arrivals: &Arrivals, count: u16) -> String {
    let mut per = vec![(0u64, 0u64, 0u64); usize::from(count)];
    for &(i, at) in arrivals.lock().unwrap().iter() {
        let (n, first, last) = &mut per[usize::from(i)];
        *n += 1;
        *first = if *first == 0 { at } else { (*first).min(at) };
        *last = (*last).max(at);
    }
    per.iter()
        .enumerate()
        .map(|(i, (n, first, last))| format!("{i} {n} {first} {last}\n"))
        .collect()
}

fn text(body: String) -> Response<Full<Bytes>> {
    Response::new(Full::new(Bytes::from(body)))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
