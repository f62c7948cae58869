//! Micro-benchmarks of the steps every request goes through, on the shipped
//! routes.toml: auth lookup, parameter validation, the jq programs of the simulator
//! provider (submit body, request path, status answer), task id seal and open,
//! the results cache, response serialisation, the access line, and the SQLite
//! ledger's writes per submit (in process CPU time; see [`ledger`]).
//!
//! `cargo bench --bench hot_path`

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderValue};
use mediagate::access::{ApiKey, KeyRing, key_digest};
use mediagate::api::shapes::{SubmitResponse, TaskView};
use mediagate::config::{Problems, ProviderConfig, read_routes};
use mediagate::providers::document::Document;
use mediagate::providers::jq::{Jq, JqVars, from_json};
use mediagate::providers::redact::Redactor;
use mediagate::providers::status::StatusReader;
use mediagate::snapshot::{LoadContext, Snapshot};
use mediagate::tasks::{
    CacheLimits, CacheStats, MediaKind, TaskCache, TaskId, TaskSealer, TaskState, TaskStatus,
};
use serde_json::Value;

const ROUTES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/routes.toml");
const MODEL: &str = "sd_2.0_special";
const BODY: &[u8] = br#"{"model":"sd_2.0_special","prompt":"a red fox running through fresh snow at dawn, cinematic","duration":5,"aspect_ratio":"16:9","resolution":"720p","reference_images":["https://example.com/a.png","https://example.com/b.png"]}"#;
const COMPLETED: &[u8] = br#"{"id":"sim-1763700000000-vo-0123456789ab","object":"video","status":"completed","created":1763700000,"progress":100,"urls":["https://media.example.com/mediagate-sim/sim-1763700000000-vo-0123456789ab.mp4"],"error":null,"video_url":"https://media.example.com/mediagate-sim/sim-1763700000000-vo-0123456789ab.mp4"}"#;
const PROCESSING: &[u8] = br#"{"id":"sim-1763700000000-vo-0123456789ab","object":"video","status":"processing","created":1763700000,"progress":42,"urls":[],"error":null}"#;

fn snapshot() -> Snapshot {
    Snapshot::load(Path::new(ROUTES), &LoadContext::default()).expect("shipped routes.toml loads")
}

fn simulator_config() -> ProviderConfig {
    read_routes(Path::new(ROUTES))
        .expect("shipped routes.toml parses")
        .providers
        .remove("simulator")
        .expect("the shipped file has the simulator provider")
}

fn params() -> Value {
    let mut v: Value = serde_json::from_slice(BODY).unwrap();
    v.as_object_mut().unwrap().remove("model");
    v
}

fn auth(c: &mut Criterion) {
    let snap = snapshot();
    let mut headers = HeaderMap::new();
    headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer sk-demo-2"));
    c.bench_function("auth/shipped_keys", |b| {
        b.iter(|| snap.keys.authenticate(black_box(&headers)).unwrap())
    });
    let many = KeyRing::new(
        (0..100)
            .map(|i| ApiKey::new(&format!("k{i}"), key_digest(&format!("sk-{i}")), None))
            .collect(),
    );
    headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer sk-99"));
    c.bench_function("auth/100_keys", |b| {
        b.iter(|| many.authenticate(black_box(&headers)).unwrap())
    });
}

fn validate(c: &mut Criterion) {
    let snap = snapshot();
    let model = snap.models.get(MODEL).unwrap().clone();
    let mut params = params();
    c.bench_function("validate/typical_video_body", |b| {
        b.iter(|| {
            model
                .validator
                .check(MODEL, black_box(&mut params))
                .unwrap()
        })
    });
    c.bench_function("validate/parse_and_check", |b| {
        b.iter(|| {
            let mut v: Value = serde_json::from_slice(black_box(BODY)).unwrap();
            v.as_object_mut().unwrap().remove("model");
            model.validator.check(MODEL, &mut v).unwrap()
        })
    });
}

fn transform(c: &mut Criterion) {
    let cfg = simulator_config();
    let body = Jq::compile(cfg.submit.body.as_deref().unwrap()).unwrap();
    let query = Jq::compile(cfg.submit.query.as_deref().unwrap()).unwrap();
    let submit_path = Jq::compile(&cfg.submit.path).unwrap();
    let params = params();
    // What `Provider::submit` does before sending: parameters into jq, the body,
    // path and query string programs, and the body back to JSON text.
    c.bench_function("jq/submit_request", |b| {
        b.iter(|| {
            let input = from_json(black_box(&params));
            let vars = JqVars::new(MODEL, MODEL, MediaKind::Video, None, Some(input.clone()));
            let out = body.json(input.clone(), &vars).unwrap();
            let path = submit_path.json(input.clone(), &vars).unwrap();
            let qs = query.json(input, &vars).unwrap();
            (serde_json::to_vec(&out).unwrap(), path, qs)
        })
    });
    let query_path = Jq::compile(&cfg.query.path).unwrap();
    c.bench_function("jq/query_path", |b| {
        b.iter(|| {
            let vars = JqVars::new(
                MODEL,
                MODEL,
                MediaKind::Video,
                Some(black_box("sim-1763700000000-vo-0123456789ab")),
                None,
            );
            query_path.json(jaq_json::Val::Null, &vars).unwrap()
        })
    });

    let mut problems = Problems::default();
    let reader = StatusReader::compile(&cfg.query, &mut problems.at("query"), &Default::default())
        .expect("the shipped query block compiles");
    let redactor = Redactor::new(["127.0.0.1".to_string(), "simulator".to_string()], []);
    let vars = JqVars::new(
        MODEL,
        MODEL,
        MediaKind::Video,
        Some("sim-1763700000000-vo-0123456789ab"),
        None,
    );
    for (name, answer) in [
        ("jq/read_completed_answer", COMPLETED),
        ("jq/read_processing_answer", PROCESSING),
    ] {
        c.bench_function(name, |b| {
            b.iter(|| {
                let doc = Document::new(black_box(answer));
                doc.check().unwrap();
                reader.read("simulator", &doc, &vars, &redactor).unwrap()
            })
        });
    }
}

fn task() -> TaskId {
    TaskId {
        provider: "simulator".into(),
        upstream_id: "sim-1763700000000-vo-0123456789ab".into(),
        model: MODEL.into(),
        kind: MediaKind::Video,
        owner: "demo".into(),
        created: 1_763_700_000,
        openai: false,
    }
}

fn task_id(c: &mut Criterion) {
    let sealer = TaskSealer::new(b"a benchmark secret", &[]);
    let t = task();
    c.bench_function("task_id/seal", |b| b.iter(|| sealer.seal(black_box(&t))));
    let id = sealer.seal(&t).expect("short fields");
    c.bench_function("task_id/open", |b| {
        b.iter(|| sealer.open(black_box(&id)).unwrap())
    });
}

fn completed() -> TaskState {
    TaskState {
        status: TaskStatus::Completed,
        progress: Some(100),
        urls: vec![
            "https://media.example.com/mediagate-sim/sim-1763700000000-vo-0123456789ab.mp4".into(),
        ],
        error: None,
    }
}

fn cache(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let cache = TaskCache::new(
        CacheLimits {
            entries: 100_000,
            bytes: 64 << 20,
        },
        Duration::from_secs(3600),
        Duration::from_secs(1),
        CacheStats::default(),
    );
    let key = TaskCache::key("simulator", "sim-1763700000000-vo-0123456789ab");
    runtime.block_on(async {
        cache
            .get_or_fetch(key.clone(), || async {
                Ok::<_, String>((completed(), true))
            })
            .await
            .unwrap()
    });
    c.bench_function("cache/hit", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let key = TaskCache::key("simulator", "sim-1763700000000-vo-0123456789ab");
                let (state, _): (Arc<TaskState>, bool) = cache
                    .get_or_fetch::<_, _, String>(key, || async { unreachable!("cached") })
                    .await
                    .unwrap();
                state
            })
        })
    });
}

fn serialise(c: &mut Criterion) {
    let sealer = TaskSealer::new(b"a benchmark secret", &[]);
    let id = sealer.seal(&task()).expect("short fields");
    let state = completed();
    c.bench_function("serialise/query_response", |b| {
        b.iter(|| {
            let view = TaskView::new(
                black_box(&id),
                MediaKind::Video,
                MODEL,
                1_763_700_000,
                &state,
            );
            serde_json::to_vec(&view).unwrap()
        })
    });
    c.bench_function("serialise/submit_response", |b| {
        b.iter(|| {
            serde_json::to_vec(&SubmitResponse {
                id: black_box(&id),
                object: MediaKind::Video,
                model: MODEL,
                status: TaskStatus::Queued,
                created: 1_763_700_000,
            })
            .unwrap()
        })
    });
}

/// Writes nothing: what the formatters cost, without a system call.
#[derive(Clone, Copy)]
struct Discard;

impl std::io::Write for Discard {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        Ok(black_box(b).len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The request span and its access line, as `serve` sets up logging: through
/// `log_format::AccessLine`, and through tracing-subscriber's own format alone.
fn access_line(c: &mut Criterion) {
    use mediagate::log_format::{ACCESS, AccessLine, Style};
    use tracing_subscriber::fmt::format::Format;
    let line = || {
        let span = tracing::info_span!("request", request_id = %"5f3a9c1e00000000002a");
        span.in_scope(|| {
            tracing::info!(
                target: ACCESS,
                method = %http::Method::POST,
                route = "POST /v2/model-center/tasks",
                status = 200u16,
                key = Some("bench"),
                model = Some(MODEL),
                provider = Some("simulator"),
                latency_ms = black_box(1.239_f64),
                upstream_ms = Some(0.456_f64),
                error = None::<&str>,
                "request"
            )
        })
    };
    for (name, style, ours) in [
        ("log/access_line_text", Style::Text, true),
        ("log/access_line_text_generic", Style::Text, false),
        ("log/access_line_json", Style::Json, true),
        ("log/access_line_json_generic", Style::Json, false),
    ] {
        let builder = tracing_subscriber::fmt()
            .with_writer(|| Discard)
            .with_ansi(false);
        let dispatch: tracing::Dispatch = match (style, ours) {
            (Style::Text, false) => builder.into(),
            (Style::Text, true) => builder
                .event_format(AccessLine::new(Format::default(), style))
                .into(),
            (Style::Json, false) => builder.json().flatten_event(true).into(),
            (Style::Json, true) => builder
                .json()
                .flatten_event(true)
                .event_format(AccessLine::new(
                    Format::default().json().flatten_event(true),
                    style,
                ))
                .into(),
        };
        tracing::dispatcher::with_default(&dispatch, || {
            c.bench_function(name, |b| b.iter(line));
        });
    }
}

/// The process's CPU time so far, every thread's (the serving thread, the ledger's
/// writer and checkpointer).
fn process_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec; the clock id is a constant.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(ok, 0, "CLOCK_PROCESS_CPUTIME_ID is readable");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// What a submit writes to the ledger: its write-ahead row, then its completion with
/// the ids and the upstream's answer (sizes as the simulator's).
const UPSTREAM_ANSWER: &str = r#"{"id":"sim-1763700000000-vo-0123456789ab","object":"video","status":"queued","created":1763700000,"progress":0,"urls":[],"error":null}"#;
const SEALED_ID: &str = "task_v1.AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0-P0BBQkNERUZHSElKS0xNTk9Q";

/// The SQLite ledger's cost per submit, without HTTP around it. Every figure is the
/// process's CPU time per submit (all threads), not wall time: the quantity issue
/// #9's CPU target compares with the ledger-off submit of `benches/load.sh`.
///
/// - `ledger/sqlite_submit_cpu`: `Ledger::admit` and `Ledger::created`, as a submit
///   calls them, from a serving thread with 64 submits in flight (the writer thread
///   groups them into transactions, as under load);
/// - `ledger/sqlite_statements_floor_cpu/N`: the same two statements run by one
///   thread on its own connection, N submits per transaction, checkpointed by SQLite
///   on the same thread: no queue, no thread hand-off, no answer; what the two
///   writes, their commit and their checkpoint cost SQLite itself. Under load the
///   writer's transactions hold a few submits each (about four on the machines
///   measured in BENCHMARKS.md); 64 shows the statements alone.
fn ledger(c: &mut Criterion) {
    use mediagate::config::Endpoint;
    use mediagate::tasks::ledger::{Admission, Answer, Created, Ledger, LedgerUrl, NewTask};

    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = LedgerUrl::parse("sqlite://ledger.db", dir.path()).expect("an SQLite URL");
    // sqlx's reader pool lives on this runtime; the writes go to the writer thread.
    let setup = tokio::runtime::Runtime::new().expect("a runtime");
    let ledger = setup
        .block_on(Ledger::open(&url, 2))
        .expect("the ledger opens")
        .expect("an SQLite ledger");
    let ledger = Arc::new(ledger);
    let workers = mediagate::workers::Workers::start(1).expect("a serving thread");
    let answer = Arc::new(Answer {
        status: 200,
        body: UPSTREAM_ANSWER.into(),
    });

    c.bench_function("ledger/sqlite_submit_cpu", |b| {
        b.iter_custom(|iters| {
            let (done, finished) = std::sync::mpsc::channel();
            let (ledger, answer) = (ledger.clone(), answer.clone());
            let cpu = process_cpu();
            workers.next().spawn(async move {
                let mut flights = tokio::task::JoinSet::new();
                for flight in 0..64u64 {
                    let (ledger, answer) = (ledger.clone(), answer.clone());
                    let share = iters / 64 + u64::from(flight < iters % 64);
                    flights.spawn(async move {
                        for n in 0..share {
                            let new = NewTask {
                                owner: "bench",
                                endpoint: Endpoint::ModelCenter,
                                model: MODEL,
                                kind: MediaKind::Video,
                                fingerprint: format!("{flight:016x}{n:048x}"),
                                idempotency_key: None,
                                video_seconds: 5,
                                quota: None,
                                provider: Some("simulator"),
                                callback_url: None,
                                keep_days: None,
                                cost_estimate: None,
                                budget: None,
                                price_params: None,
                            };
                            let Ok(Admission::Fresh(row)) = ledger.admit(&new).await else {
                                panic!("a fresh row");
                            };
                            let upstream_id = format!("sim-{flight:04}-{n:016}");
                            let created = Created {
                                provider: "simulator",
                                upstream_id: &upstream_id,
                                task_id: SEALED_ID,
                                status: TaskStatus::Queued,
                                answer: &answer,
                                first_poll: Duration::from_secs(5),
                            };
                            ledger.created(row, &created).await.expect("completed");
                        }
                    });
                }
                while let Some(flight) = flights.join_next().await {
                    // A failed write ends the bench (the sender is dropped, `recv` fails).
                    flight.expect("every submit of the flight was written");
                }
                let _ = done.send(());
            });
            finished.recv().expect("the submits ran");
            process_cpu() - cpu
        })
    });

    let conn = rusqlite::Connection::open(dir.path().join("ledger.db")).expect("opens");
    // SQLite's own checkpoint every 1,000 WAL pages keeps the WAL as short as the
    // ledger's checkpointer keeps it (without one, a growing WAL makes every page
    // lookup and every write dearer).
    conn.pragma_update(None, "synchronous", "NORMAL")
        .expect("the writer's setting");
    let mut next = 0u64;
    for batch in [8, 64] {
        let name = format!("ledger/sqlite_statements_floor_cpu/{batch}");
        c.bench_function(&name, |b| {
            b.iter_custom(|iters| {
                let cpu = process_cpu();
                let mut left = iters;
                while left > 0 {
                    let n = left.min(batch);
                    write_floor_transaction(&conn, n, &mut next);
                    left -= n;
                }
                process_cpu() - cpu
            })
        });
    }
}

/// One transaction of the floor: `n` submits' write-ahead rows and completions,
/// numbered on from `next`.
fn write_floor_transaction(conn: &rusqlite::Connection, n: u64, next: &mut u64) {
    use mediagate::config::Endpoint;
    use mediagate::tasks::ledger::submit_statements;

    let tx = conn.unchecked_transaction().expect("BEGIN");
    for _ in 0..n {
        *next += 1;
        let fingerprint = format!("floor{next:059x}");
        let inserted = tx
            .prepare_cached(submit_statements::WRITE_AHEAD)
            .and_then(|mut write_ahead| {
                write_ahead.execute(rusqlite::params![
                    "bench",
                    submit_statements::endpoint(Endpoint::ModelCenter),
                    MODEL,
                    MediaKind::Video.as_str(),
                    fingerprint,
                    None::<String>,
                    5i64,
                    1_763_700_000_000i64,
                    "simulator",
                    None::<String>,
                ])
            })
            .expect("inserted");
        assert_eq!(inserted, 1);
        let row = tx.last_insert_rowid();
        let upstream_id = format!("sim-floor-{next:016}");
        tx.prepare_cached(submit_statements::COMPLETE)
            .and_then(|mut complete| {
                complete.execute(rusqlite::params![
                    row,
                    "simulator",
                    upstream_id,
                    SEALED_ID,
                    TaskStatus::Queued.as_str(),
                    200i64,
                    UPSTREAM_ANSWER,
                    1_763_700_000_000i64,
                    5_000i64,
                ])
            })
            .expect("completed");
    }
    tx.commit().expect("COMMIT");
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = auth, validate, transform, task_id, cache, serialise, access_line, ledger
}
criterion_main!(benches);
