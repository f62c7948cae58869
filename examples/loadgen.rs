//! Small load tools for `benches/load.sh`. Loopback only: every address must be
//! 127.0.0.0/8 or ::1, and every run is bounded in time and count.
//!
//! ```text
//! loadgen rate --addr 127.0.0.1:8080 --rate 1000 --seconds 10 --conns 50 \
//!     --path /a --path /b [--method POST --body-file f.json] [--header 'k: v']
//! loadgen hold --addr 127.0.0.1:8080 --conns 10000 --path /healthz --seconds 30 [--batch 1000]
//! loadgen seal --secret S --provider P --upstream-id ID --model M --owner O [--kind video]
//! loadgen burst --addr 127.0.0.1:8080 --conns 256 --path /p [--method POST --body-file f] \
//!     [--header 'k: v'] [--seconds 30]
//! loadgen mix --addr 127.0.0.1:8080 --rate 50 --seconds 60 --conns 32 --path /collection \
//!     --body-file f.json --header 'k: v' [--submit-percent 30] [--codes-file codes.txt]
//! loadgen wait --addr 127.0.0.1:8080 --path /collection --ids-file ids.txt \
//!     --query 'wait=60&status=queued' --header 'k: v' --out answers.txt [--batch 500] [--rate 1000]
//! ```
//!
//! `rate` sends requests at a constant rate (an open model: each request has a
//! scheduled send time; a request that had to wait for a slow answer on its
//! connection is timed from when it was due, so slowness cannot hide the requests
//! queued behind it) and prints one line:
//! `requests=… ok=… failed=… p50_us=… p90_us=… p99_us=… max_us=… rps=…`.
//!
//! `hold` opens `--conns` keep-alive connections, sends one request on each, prints
//! `holding N` and keeps them open, idle, for `--seconds`.
//!
//! `seal` prints a gateway task id for an upstream task, sealed with the same
//! secret as the gateway, so a known upstream task can be queried through it.
//!
//! `burst` sends one request on each of `--conns` connections at once and waits (at
//! most `--seconds`) for the answers: `answered=… unanswered=… status_200=… …`.
//!
//! `mix` submits (`POST --path` with the body) and queries the tasks it created
//! (`GET --path/{id}`) at `--rate` requests per second for `--seconds`, and prints
//! one JSON line: answers per class (`200`, or `STATUS code` of an error), answers
//! outside the error catalogue (an error code not in `--codes-file`, or a body that
//! is not the documented JSON), transport failures, and the created ids.
//!
//! `wait` long-polls every task of `--ids-file` (one id per line) at once, each on a
//! connection of its own (`GET --path/{id}?--query`), opened in batches, `--rate` a
//! second; prints
//! `waiting N failed F` once every request is sent, then, when every answer is in
//! (or after `--seconds`, 90 by default), `answered=… status_200=… changed=…` (changed:
//! a status other than the one `status=` in the query names). `--out` gets one line
//! per answer: `id unix_ms status` (the moment the answer was read whole).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mediagate::tasks::{MediaKind, TaskId, TaskSealer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Hard limits, whatever the arguments say.
const MAX_SECONDS: u64 = 300;
const MAX_RATE: u64 = 100_000;
const MAX_CONNS: usize = 20_000;

struct Args(Vec<String>);

impl Args {
    fn one(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .position(|a| a == name)
            .and_then(|i| self.0.get(i + 1))
            .map(String::as_str)
    }
    fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .windows(2)
            .filter(|w| w[0] == name)
            .map(|w| w[1].as_str())
            .collect()
    }
    fn need(&self, name: &str) -> &str {
        self.one(name)
            .unwrap_or_else(|| fail(&format!("missing {name}")))
    }
    fn num(&self, name: &str, default: u64) -> u64 {
        self.one(name).map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| fail(&format!("{name} is a number")))
        })
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("loadgen: {msg}");
    std::process::exit(2)
}

fn loopback(args: &Args) -> SocketAddr {
    let addr: SocketAddr = args
        .need("--addr")
        .parse()
        .unwrap_or_else(|_| fail("--addr is IP:PORT"));
    if !addr.ip().is_loopback() {
        fail("only loopback addresses are allowed");
    }
    addr
}

fn main() {
    let raw: Vec<String> = std::env::args().skip(1).collect();
    let Some(mode) = raw.first().cloned() else {
        fail("usage: loadgen rate|hold|seal|burst|mix|wait …")
    };
    let args = Args(raw);
    match mode.as_str() {
        "seal" => seal(&args),
        "rate" | "hold" | "burst" | "mix" | "wait" => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            match mode.as_str() {
                "rate" => runtime.block_on(rate(&args)),
                "hold" => runtime.block_on(hold(&args)),
                "burst" => runtime.block_on(burst(&args)),
                "wait" => runtime.block_on(wait(&args)),
                _ => runtime.block_on(mix(&args)),
            }
        }
        other => fail(&format!("unknown mode {other}")),
    }
}

fn seal(args: &Args) {
    let kind = match args.one("--kind").unwrap_or("video") {
        "image" => MediaKind::Image,
        _ => MediaKind::Video,
    };
    let sealer = TaskSealer::new(args.need("--secret").as_bytes(), &[]);
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    println!(
        "{}",
        sealer
            .seal(&TaskId {
                provider: args.need("--provider").into(),
                upstream_id: args.need("--upstream-id").into(),
                model: args.need("--model").into(),
                kind,
                owner: args.need("--owner").into(),
                created,
                openai: false,
            })
            .expect("id fields short enough to seal")
    );
}

/// The bytes of one request, ready to write.
fn requests(args: &Args, addr: SocketAddr) -> Vec<Vec<u8>> {
    let method = args.one("--method").unwrap_or("GET");
    let body = args
        .one("--body-file")
        .map(|f| std::fs::read(f).unwrap_or_else(|e| fail(&format!("{f}: {e}"))))
        .unwrap_or_default();
    let headers: String = args
        .all("--header")
        .iter()
        .map(|h| format!("{h}\r\n"))
        .collect();
    let paths = args.all("--path");
    if paths.is_empty() {
        fail("give at least one --path");
    }
    paths
        .iter()
        .map(|path| {
            let mut r = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}");
            if method != "GET" || !body.is_empty() {
                r.push_str(&format!("Content-Length: {}\r\n", body.len()));
            }
            r.push_str("\r\n");
            let mut r = r.into_bytes();
            r.extend_from_slice(&body);
            r
        })
        .collect()
}

/// Read one HTTP/1.1 response; returns its status code (the whole response is in
/// `buf`).
async fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<u16> {
    read_response_at(stream, buf)
        .await
        .map(|(status, _)| status)
}

/// [`read_response`], and where the body starts in `buf`.
async fn read_response_at(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
) -> std::io::Result<(u16, usize)> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    buf.clear();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(bad("connection closed"));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(|_| bad("head not UTF-8"))?;
    let status: u16 = head
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let mut length = None;
    let mut chunked = false;
    for line in head.split("\r\n").skip(1) {
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse::<usize>().ok();
            } else if k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked") {
                chunked = true;
            }
        }
    }
    if chunked {
        // Enough for these small answers: read until the last chunk.
        while !buf[head_end..].windows(5).any(|w| w == b"0\r\n\r\n") {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(bad("connection closed in body"));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    } else {
        let want = head_end + length.unwrap_or(0);
        while buf.len() < want {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Err(bad("connection closed in body"));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    }
    Ok((status, head_end))
}

#[derive(Default)]
struct ConnResult {
    latencies_us: Vec<u32>,
    ok: u64,
    failed: u64,
}

async fn rate(args: &Args) {
    let addr = loopback(args);
    let rate = args.num("--rate", 1000).clamp(1, MAX_RATE);
    let seconds = args.num("--seconds", 10).clamp(1, MAX_SECONDS);
    let conns = (args.num("--conns", 50) as usize).clamp(1, MAX_CONNS);
    let requests = Arc::new(requests(args, addr));
    let total = rate * seconds;
    let interval = Duration::from_secs_f64(conns as f64 / rate as f64);
    // Each connection sends every `conns`-th request, offset so that together they
    // keep a constant rate.
    let start = Instant::now() + Duration::from_millis(200);
    let deadline = start + Duration::from_secs(seconds) + Duration::from_secs(10);
    let mut tasks = Vec::new();
    for c in 0..conns {
        let requests = requests.clone();
        let share = total / conns as u64 + u64::from((c as u64) < total % conns as u64);
        tasks.push(tokio::spawn(async move {
            let mut out = ConnResult::default();
            let mut stream: Option<TcpStream> = None;
            let mut buf = Vec::with_capacity(4096);
            let first = start + Duration::from_secs_f64(c as f64 / rate as f64);
            // When the previous answer came after this request was due, the request
            // waited for it: latency counts from the due time. Otherwise it counts
            // from the send, so the timer's own lateness (up to 1 ms) is not added.
            let mut previous_done = start;
            for k in 0..share {
                let due = first + interval * k as u32;
                if Instant::now() > deadline {
                    out.failed += share - k;
                    break;
                }
                tokio::time::sleep_until(due.into()).await;
                let sent_at = if previous_done > due {
                    due
                } else {
                    Instant::now()
                };
                let req = &requests[((k as usize) * conns + c) % requests.len()];
                let s = match &mut stream {
                    Some(s) => s,
                    None => match TcpStream::connect(addr).await {
                        Ok(s) => {
                            let _ = s.set_nodelay(true);
                            stream.insert(s)
                        }
                        Err(_) => {
                            out.failed += 1;
                            continue;
                        }
                    },
                };
                let sent = async {
                    s.write_all(req).await?;
                    read_response(s, &mut buf).await
                };
                let answered = tokio::time::timeout(Duration::from_secs(5), sent).await;
                previous_done = Instant::now();
                match answered {
                    Ok(Ok(status)) if (200..300).contains(&status) => {
                        out.ok += 1;
                        let us = (previous_done - sent_at).as_micros().min(u32::MAX as u128);
                        out.latencies_us.push(us as u32);
                    }
                    Ok(Ok(_)) => out.failed += 1,
                    _ => {
                        out.failed += 1;
                        stream = None;
                    }
                }
            }
            out
        }));
    }
    let mut all = ConnResult::default();
    for t in tasks {
        let r = t.await.expect("connection task");
        all.ok += r.ok;
        all.failed += r.failed;
        all.latencies_us.extend(r.latencies_us);
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.latencies_us.sort_unstable();
    let pct = |p: f64| -> u32 {
        if all.latencies_us.is_empty() {
            return 0;
        }
        let i = ((all.latencies_us.len() as f64 * p).ceil() as usize).saturating_sub(1);
        all.latencies_us[i.min(all.latencies_us.len() - 1)]
    };
    println!(
        "requests={} ok={} failed={} p50_us={} p90_us={} p99_us={} max_us={} rps={:.0}",
        total,
        all.ok,
        all.failed,
        pct(0.50),
        pct(0.90),
        pct(0.99),
        all.latencies_us.last().copied().unwrap_or(0),
        all.ok as f64 / elapsed
    );
}

async fn hold(args: &Args) {
    let addr = loopback(args);
    let conns = (args.num("--conns", 10_000) as usize).clamp(1, MAX_CONNS);
    let seconds = args.num("--seconds", 30).clamp(1, MAX_SECONDS);
    let requests = requests(args, addr);
    let request = Arc::new(requests[0].clone());
    // Open in batches so the listener's accept queue never overflows, but quickly:
    // a server may close connections that stay idle (mediagate after 10 s).
    let batch_size = (args.num("--batch", 1000) as usize).clamp(1, 4096);
    let started = Instant::now();
    let mut held = Vec::with_capacity(conns);
    let mut failed = 0usize;
    let deadline = Instant::now() + Duration::from_secs(60);
    for batch in (0..conns).collect::<Vec<_>>().chunks(batch_size) {
        if Instant::now() > deadline {
            failed += conns - held.len() - failed;
            break;
        }
        let opened = futures_util::future::join_all(batch.iter().map(|_| {
            let request = request.clone();
            async move {
                let mut s = TcpStream::connect(addr).await.ok()?;
                let mut buf = Vec::new();
                let exchange = async {
                    s.write_all(&request).await?;
                    read_response(&mut s, &mut buf).await
                };
                match tokio::time::timeout(Duration::from_secs(10), exchange).await {
                    Ok(Ok(_)) => Some(s),
                    _ => None,
                }
            }
        }))
        .await;
        for s in opened {
            match s {
                Some(s) => held.push(s),
                None => failed += 1,
            }
        }
    }
    println!(
        "holding {} failed {failed} opened_in_ms {}",
        held.len(),
        started.elapsed().as_millis()
    );
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    drop(held);
}

async fn burst(args: &Args) {
    let addr = loopback(args);
    let conns = (args.num("--conns", 256) as usize).clamp(1, MAX_CONNS);
    let seconds = args.num("--seconds", 30).clamp(1, MAX_SECONDS);
    let request = Arc::new(requests(args, addr).swap_remove(0));
    let sent = futures_util::future::join_all((0..conns).map(|_| {
        let request = request.clone();
        async move {
            let exchange = async {
                let mut s = TcpStream::connect(addr).await?;
                s.write_all(&request).await?;
                let mut buf = Vec::new();
                read_response(&mut s, &mut buf).await
            };
            tokio::time::timeout(Duration::from_secs(seconds), exchange)
                .await
                .ok()
                .and_then(Result::ok)
        }
    }))
    .await;
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for status in sent.iter().flatten() {
        *statuses.entry(*status).or_default() += 1;
    }
    let answered: usize = statuses.values().sum();
    let counts: Vec<String> = statuses
        .iter()
        .map(|(s, n)| format!("status_{s}={n}"))
        .collect();
    println!(
        "answered={answered} unanswered={} {}",
        conns - answered,
        counts.join(" ")
    );
}

/// What `mix` saw.
#[derive(Default)]
struct Seen {
    classes: std::collections::BTreeMap<String, u64>,
    outside: u64,
    outside_samples: Vec<String>,
    transport: u64,
    ids: Vec<String>,
}

/// The class of an answer, or `Err` with why it is outside the documented answers.
fn classify(status: u16, body: &[u8], codes: &[String], query: bool) -> Result<String, String> {
    let json: serde_json::Value = serde_json::from_slice(body).map_err(|_| {
        format!(
            "{status} not JSON: {}",
            String::from_utf8_lossy(&body[..body.len().min(80)])
        )
    })?;
    if (200..300).contains(&status) {
        let word = json["status"].as_str().unwrap_or_default();
        let known = ["queued", "processing", "completed", "failed"].contains(&word);
        if !known || json["id"].as_str().is_none() || (query && json.get("error").is_none()) {
            return Err(format!("{status} not a task: {json}"));
        }
        return Ok(format!("{status} {word}"));
    }
    let code = json["error"]["code"].as_str().unwrap_or_default();
    let shape = json["error"]["message"].is_string() && json["error"]["type"].is_string();
    if !shape || !codes.iter().any(|c| c == code) {
        return Err(format!("{status} outside the catalogue: {json}"));
    }
    Ok(format!("{status} {code}"))
}

async fn mix(args: &Args) {
    let addr = loopback(args);
    let rate = args.num("--rate", 50).clamp(1, MAX_RATE);
    let seconds = args.num("--seconds", 60).clamp(1, MAX_SECONDS * 12);
    let conns = (args.num("--conns", 32) as usize).clamp(1, MAX_CONNS);
    let submit_percent = args.num("--submit-percent", 30).min(100);
    let codes: Arc<Vec<String>> = Arc::new(
        args.one("--codes-file")
            .map(|f| std::fs::read_to_string(f).unwrap_or_else(|e| fail(&format!("{f}: {e}"))))
            .unwrap_or_default()
            .lines()
            .map(|l| l.trim().to_string())
            .filter(|l| !l.is_empty())
            .collect(),
    );
    let submit = Arc::new(requests(args, addr).swap_remove(0));
    let path = args.need("--path").to_string();
    let headers: String = args
        .all("--header")
        .iter()
        .filter(|h| !h.to_ascii_lowercase().starts_with("content-"))
        .map(|h| format!("{h}\r\n"))
        .collect();
    let seen = Arc::new(std::sync::Mutex::new(Seen::default()));
    let interval = Duration::from_secs_f64(conns as f64 / rate as f64);
    let end = Instant::now() + Duration::from_secs(seconds);
    let workers = (0..conns).map(|c| {
        let (submit, codes, seen) = (submit.clone(), codes.clone(), seen.clone());
        let (path, headers) = (path.clone(), headers.clone());
        async move {
            let mut stream: Option<TcpStream> = None;
            let mut buf = Vec::with_capacity(4096);
            let mut next = Instant::now() + interval.mul_f64(c as f64 / conns as f64);
            let mut n = c as u64;
            while next < end {
                tokio::time::sleep_until(next.into()).await;
                next += interval;
                n = n
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let known = seen.lock().unwrap().ids.len();
                let query = known > 0 && (n >> 33) % 100 >= submit_percent;
                let request = if query {
                    let id = seen.lock().unwrap().ids[(n >> 20) as usize % known].clone();
                    format!("GET {path}/{id} HTTP/1.1\r\nHost: {addr}\r\n{headers}\r\n")
                        .into_bytes()
                } else {
                    submit.to_vec()
                };
                let s = match &mut stream {
                    Some(s) => s,
                    None => match TcpStream::connect(addr).await {
                        Ok(s) => stream.insert(s),
                        Err(_) => {
                            seen.lock().unwrap().transport += 1;
                            continue;
                        }
                    },
                };
                let exchange = async {
                    s.write_all(&request).await?;
                    read_response_at(s, &mut buf).await
                };
                let answered = tokio::time::timeout(Duration::from_secs(180), exchange).await;
                let mut seen = seen.lock().unwrap();
                match answered {
                    Ok(Ok((status, at))) => match classify(status, &buf[at..], &codes, query) {
                        Ok(class) => {
                            if !query && status == 200 {
                                let body: serde_json::Value =
                                    serde_json::from_slice(&buf[at..]).unwrap_or_default();
                                if let Some(id) = body["id"].as_str() {
                                    seen.ids.push(id.to_string());
                                }
                            }
                            *seen.classes.entry(class).or_default() += 1;
                        }
                        Err(why) => {
                            seen.outside += 1;
                            if seen.outside_samples.len() < 5 {
                                seen.outside_samples.push(why);
                            }
                        }
                    },
                    _ => {
                        // A connection the gateway closed (a restart, an idle close):
                        // counted, and the next request opens a new one.
                        seen.transport += 1;
                        stream = None;
                    }
                }
            }
        }
    });
    futures_util::future::join_all(workers).await;
    let seen = seen.lock().unwrap();
    println!(
        "{}",
        serde_json::json!({
            "classes": seen.classes,
            "outside_catalogue": seen.outside,
            "outside_samples": seen.outside_samples,
            "transport_failures": seen.transport,
            "created": seen.ids.len(),
        })
    );
    if let Some(file) = args.one("--ids-out") {
        let _ = std::fs::write(file, seen.ids.join("\n"));
    }
}

/// One long-poll's answer: the HTTP status, the task's status, when it was read.
struct Waited {
    id: String,
    http: u16,
    status: String,
    at_ms: u128,
}

async fn wait(args: &Args) {
    let addr = loopback(args);
    let seconds = args.num("--seconds", 90).clamp(1, MAX_SECONDS);
    let path = args.need("--path").to_string();
    let query = args.need("--query").to_string();
    let file = args.need("--ids-file");
    let ids: Vec<String> = std::fs::read_to_string(file)
        .unwrap_or_else(|e| fail(&format!("{file}: {e}")))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .take(MAX_CONNS)
        .collect();
    let seen = form_value(&query, "status");
    let headers: String = args
        .all("--header")
        .iter()
        .map(|h| format!("{h}\r\n"))
        .collect();
    let batch_size = (args.num("--batch", 500) as usize).clamp(1, 4096);
    // Clients arriving at once would each have their first look at the task sent to
    // the provider at the same moment: they arrive at `--rate` a second.
    let pace = Duration::from_secs_f64(batch_size as f64 / args.num("--rate", 1000).max(1) as f64);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Option<Waited>>();
    let mut failed = 0usize;
    for batch in ids.chunks(batch_size) {
        let next = Instant::now() + pace;
        // Connected before the next batch, so that the listener's queue never
        // overflows.
        let opened = futures_util::future::join_all(batch.iter().map(|id| async move {
            let s = TcpStream::connect(addr).await.ok()?;
            let _ = s.set_nodelay(true);
            Some((id.clone(), s))
        }))
        .await;
        for conn in opened {
            let Some((id, mut s)) = conn else {
                failed += 1;
                let _ = tx.send(None);
                continue;
            };
            let request =
                format!("GET {path}/{id}?{query} HTTP/1.1\r\nHost: {addr}\r\n{headers}\r\n");
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::with_capacity(1024);
                let exchange = async {
                    s.write_all(request.as_bytes()).await?;
                    read_response_at(&mut s, &mut buf).await
                };
                let answered = tokio::time::timeout_at(deadline.into(), exchange).await;
                let waited = match answered {
                    Ok(Ok((http, at))) => {
                        let body: serde_json::Value =
                            serde_json::from_slice(&buf[at..]).unwrap_or_default();
                        Some(Waited {
                            id,
                            http,
                            status: body["status"].as_str().unwrap_or("-").to_string(),
                            at_ms: SystemTime::now()
                                .duration_since(UNIX_EPOCH)
                                .map_or(0, |d| d.as_millis()),
                        })
                    }
                    _ => None,
                };
                let _ = tx.send(waited);
            });
        }
        tokio::time::sleep_until(next.into()).await;
    }
    drop(tx);
    println!("waiting {} failed {failed}", ids.len() - failed);
    let mut answers = Vec::with_capacity(ids.len());
    let mut unanswered = 0usize;
    while let Some(waited) = rx.recv().await {
        match waited {
            Some(w) => answers.push(w),
            None => unanswered += 1,
        }
    }
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for w in &answers {
        *statuses.entry(w.http).or_default() += 1;
    }
    let changed = answers
        .iter()
        .filter(|w| w.http == 200 && Some(w.status.as_str()) != seen.as_deref())
        .count();
    let counts: Vec<String> = statuses
        .iter()
        .map(|(s, n)| format!("status_{s}={n}"))
        .collect();
    println!(
        "answered={} unanswered={unanswered} changed={changed} {}",
        answers.len(),
        counts.join(" ")
    );
    if let Some(out) = args.one("--out") {
        let lines: String = answers
            .iter()
            .map(|w| format!("{} {} {}\n", w.id, w.at_ms, w.status))
            .collect();
        let _ = std::fs::write(out, lines);
    }
}

/// The value of `name` in a query string.
fn form_value(query: &str, name: &str) -> Option<String> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .map(String::from)
}
