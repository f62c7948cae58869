//! The one harness of the integration tests: a gateway started in-process (or, where
//! the process itself is under test, as a subprocess), one routes-file builder, one
//! fake upstream, one HTTP client, test certificates.

mod fake;
mod gateway;
mod http;
mod media;
mod postgres;
mod redis;
mod routes;
pub mod s3;
pub mod sdk;
mod tls;

use std::sync::{Mutex, Once};
use std::thread::ThreadId;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use fake::{Answer, Fake, Held, Seen};
pub use gateway::{ConfigDir, Gateway, Proc, check, operator};
pub use http::{Alpn, Http, Reply, assert_error, read_response, read_to_close};
pub use media::{completed_with, expire, path_of, sha256, stored};
pub use postgres::{Postgres, free_port};
pub use redis::Redis;
pub use routes::{
    Family, Routes, UPSTREAM_KEY, family, model_center_provider, replace_once, shipped_routes,
    shipped_routes_file, tasks_provider, tasks_provider_with_files,
};
pub use tls::Certs;

pub const DEMO: &str = "sk-demo";
pub const DEMO2: &str = "sk-demo-2";

pub const MODEL_CENTER: &str = "/v2/model-center/tasks";
pub const ALPHA: &str = "/v1/alpha/videos";

/// The four statuses a client may ever see.
pub const STATUSES: [&str; 4] = ["queued", "processing", "completed", "failed"];

/// How long anything a test waits for may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Hex SHA-256 of `secret`: how a key is stored in routes.toml.
pub fn sha256_hex(secret: &str) -> String {
    hex::encode(ring::digest::digest(
        &ring::digest::SHA256,
        secret.as_bytes(),
    ))
}

/// Unix seconds now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// The query answer of a task `t{n}` created at a [`tasks_provider`] fake whose status
/// answer for it is `status_answer`.
pub async fn query_scripted(gw: &Gateway, fake: &Fake, n: usize, status_answer: Answer) -> Reply {
    let http = gw.client();
    let created = serde_json::json!({"id": format!("t{n}")});
    fake.on("POST /tasks", Answer::json(200, created));
    let id = http
        .submit_id(
            MODEL_CENTER,
            DEMO,
            &serde_json::json!({"model": "m1", "prompt": "p"}),
        )
        .await;
    fake.on(&format!("GET /tasks/t{n}"), status_answer);
    http.get(&format!("{MODEL_CENTER}/{id}"), DEMO).await
}

/// Poll `done` every 25 ms until it holds; fail the test, saying `what`, after
/// [`PATIENCE`].
pub async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done().await {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Panics seen in this process, by thread. In-process gateways on a current-thread
/// runtime run their tasks on the test's own thread, so a panic of theirs that a
/// client never sees (a detached task) is still found.
static PANICS: Mutex<Vec<ThreadId>> = Mutex::new(Vec::new());

fn watch_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(std::thread::current().id());
            previous(info);
        }));
    });
}

/// Panics so far on this thread.
fn panics_here() -> usize {
    let me = std::thread::current().id();
    PANICS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|t| **t == me)
        .count()
}

/// A fake provider `one` (serving `m1`, with a content step) whose task `t1` is done,
/// behind a gateway with `server` lines: the submit and the query are scripted, the
/// content (`GET /files/t1`) is the test's to script.
pub async fn done_task_with_files(server: &str) -> (Fake, Gateway) {
    let fake = Fake::start().await;
    let routes = Routes::new()
        .server(server)
        .provider(tasks_provider_with_files("one", &fake.url()))
        .family(family("f", &["one"], &["m1"]));
    let gw = Gateway::start(routes).await;
    fake.on(
        "POST /tasks",
        Answer::json(200, serde_json::json!({"id": "t1"})),
    );
    fake.on(
        "GET /tasks/t1",
        Answer::json(200, serde_json::json!({"status": "done"})),
    );
    (fake, gw)
}

/// Whether this run must have a tool rather than skip the tests that need it: CI's
/// run (`CI`), or `need_var` set (as `.ci/run` sets them).
pub fn tool_required(need_var: &str) -> bool {
    let set =
        |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    set("CI") || set(need_var)
}

/// Run `.ci/NAME` (it installs a tool under the target dir when missing) with the
/// target dir cargo built into; its standard output, or why it failed (the last lines
/// of its standard error).
pub fn run_ci_script(name: &str) -> Result<String, String> {
    // target/debug/mediagate: tools go in target/, beside what cargo built.
    let target = std::path::Path::new(env!("CARGO_BIN_EXE_mediagate"))
        .parent()
        .and_then(std::path::Path::parent)
        .ok_or("no target directory")?;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".ci")
        .join(name);
    let out = std::process::Command::new("bash")
        .arg(&script)
        .env("CARGO_TARGET_DIR", target)
        .output()
        .map_err(|e| format!("bash {}: {e}", script.display()))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
        return Err(format!(
            "bash .ci/{name} failed ({}): {}",
            out.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The environment that runs a process `offset` from the machine's wall clock
/// (libfaketime's `FAKETIME`, e.g. `+30s`; installed by `.ci/services`), its
/// monotonic clock left alone.
pub fn clock_moved(offset: &str) -> Vec<(&'static str, String)> {
    services();
    let lib = std::fs::read_dir("/usr/lib")
        .ok()
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path().join("faketime/libfaketime.so.1")))
        .find(|lib| lib.exists())
        .expect("libfaketime is installed (/usr/lib/*/faketime; .ci/services installs it)");
    vec![
        ("LD_PRELOAD", lib.display().to_string()),
        ("FAKETIME", offset.to_string()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_string()),
    ]
}

/// PostgreSQL, Redis and libfaketime installed (`.ci/services`, once per test
/// process): the tests start their own servers from the machine's binaries.
pub fn services() {
    static DONE: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    if let Err(why) = DONE.get_or_init(|| run_ci_script("services")) {
        panic!("PostgreSQL, Redis and libfaketime are needed and could not be installed: {why}");
    }
}
