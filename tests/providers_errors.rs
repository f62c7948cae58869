//! Upstream failures through the real binary: the error mapping (400 / 429 / 502 /
//! 504), contract breaks that name the failing step, unmapped statuses, and the
//! failover rule (only a submit that certainly created no task moves on).

mod common;
mod fakes;

use std::time::{Duration, Instant};

use common::{DEMO, Gateway, Http, MODEL_CENTER, Reply};
use fakes::{Canned, Fake, family, routes};
use serde_json::json;

const KEY: &str = "upstream-secret-123";

/// A plain provider: `POST /tasks` → `{id}`, `GET /tasks/{id}` → `{status, url, reason}`.
fn provider(name: &str, base: &str) -> String {
    format!(
        r#"
[providers.{name}]
base_url = "{base}"
auth = {{ secret_env = "FAKE_UPSTREAM_KEY" }}
connect_timeout_ms = 1000
submit_timeout_ms = 2000
query_timeout_ms = 2000
[providers.{name}.submit]
path = '"/tasks"'
id = '.id'
[providers.{name}.query]
path = '"/tasks/\($id | @uri)"'
status = '.status'
status_map = {{ queued = "queued", running = "processing", done = "completed", failed = "failed" }}
urls = '.url'
error_message = '.reason'
"#
    )
}

fn start(providers: &str, families: &str) -> Gateway {
    Gateway::start_with_env(&routes(providers, families), &[("FAKE_UPSTREAM_KEY", KEY)])
}

async fn submit(http: &Http, model: &str) -> Reply {
    http.post_json(MODEL_CENTER, DEMO, &json!({"model": model, "prompt": "p"}))
        .await
}

fn message(r: &Reply) -> String {
    r.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Nothing of our upstream key in what the client receives.
fn assert_no_secret(r: &Reply) {
    let text = String::from_utf8_lossy(&r.body);
    assert!(!text.contains(KEY), "secret leaked: {text}");
    assert!(!text.contains("upstream-secret"), "secret leaked: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_errors_are_mapped() {
    let fake = Fake::start().await;
    let gw = start(
        &provider("one", &fake.url()),
        &family("f", "model-center", &["one"], "m1", "m1"),
    );
    let http = gw.client();

    // Upstream "invalid request": 400 with its reason.
    fake.on(
        "POST /tasks",
        Canned::json(400, json!({"error": {"message": "prompt is too long"}})),
    );
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.error_code(), "upstream_invalid_request");
    assert!(
        message(&r).contains("prompt is too long"),
        "{}",
        message(&r)
    );

    // A reason that quotes our key is cleaned before it is passed on.
    fake.on(
        "POST /tasks",
        Canned::json(
            422,
            json!({"message": format!("key {KEY} may not use this model")}),
        ),
    );
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 400);
    assert_no_secret(&r);
    assert!(message(&r).contains("[redacted] may not use this model"));

    // Our key refused: 502, no key in the message.
    fake.on(
        "POST /tasks",
        Canned::json(401, json!({"error": {"message": format!("bad key {KEY}")}})),
    );
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 502);
    assert_eq!(r.error_code(), "upstream_auth_failed");
    assert_no_secret(&r);

    // 429 with and without Retry-After.
    fake.on(
        "POST /tasks",
        Canned::json(429, json!({"error": {"message": "slow down"}})).header("retry-after", "7"),
    );
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.error_code(), "upstream_rate_limited");
    assert_eq!(r.header("retry-after"), Some("7"));
    fake.on("POST /tasks", Canned::json(429, json!({})));
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), None);

    // 5xx: 502.
    fake.on("POST /tasks", Canned::json(500, json!({"message": "oops"})));
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 502);
    assert_eq!(r.error_code(), "upstream_error");

    // Contract breaks: 502 naming the step.
    for (canned, what) in [
        (
            Canned::raw(200, "text/html", "<html><body>Bad gateway</body></html>"),
            "not JSON",
        ),
        (
            Canned::json(200, json!({"task": {"state": "ok"}})),
            "no task id",
        ),
        (Canned::json(200, json!({"id": ""})), "no task id"),
        (Canned::raw(200, "application/json", ""), "not JSON"),
    ] {
        fake.on("POST /tasks", canned);
        let r = submit(&http, "m1").await;
        assert_eq!(r.status, 502);
        assert_eq!(r.error_code(), "upstream_bad_response");
        let m = message(&r);
        assert!(m.contains("submit") && m.contains(what), "{m}");
    }

    // Timeout: 504. A broken connection: 502.
    fake.on(
        "POST /tasks",
        Canned::json(200, json!({"id": "late"})).delayed(Duration::from_secs(6)),
    );
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 504);
    assert_eq!(r.error_code(), "upstream_timeout");
    fake.on("POST /tasks", Canned::hang_up());
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 502);
    for seen in fake.take() {
        assert_eq!(seen.line(), "POST /tasks");
        assert_eq!(
            seen.header("authorization"),
            Some("Bearer upstream-secret-123")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_errors_are_mapped_and_unmapped_statuses_never_leak() {
    let fake = Fake::start().await;
    let gw = start(
        &provider("one", &fake.url()),
        &family("f", "model-center", &["one"], "m1", "m1"),
    );
    let http = gw.client();
    fake.on("POST /tasks", Canned::json(200, json!({"id": "t1"})));
    let id = submit(&http, "m1").await.json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let path = format!("{MODEL_CENTER}/{id}");

    let cases: Vec<(Canned, u16, &str, &str)> = vec![
        (Canned::json(500, json!({})), 502, "upstream_error", "query"),
        (Canned::json(502, json!({})), 502, "upstream_error", "query"),
        (
            Canned::raw(200, "text/html", "<!doctype html><h1>503</h1>"),
            502,
            "upstream_bad_response",
            "query",
        ),
        (
            Canned::json(200, json!({"state": "running"})),
            502,
            "upstream_bad_response",
            "no status",
        ),
        (
            Canned::json(401, json!({"message": KEY})),
            502,
            "upstream_auth_failed",
            "credentials",
        ),
        (
            Canned::json(429, json!({})).header("retry-after", "3"),
            429,
            "upstream_rate_limited",
            "",
        ),
        (
            Canned::json(200, json!({"status": "running"})).delayed(Duration::from_secs(6)),
            504,
            "upstream_timeout",
            "query",
        ),
        (Canned::json(404, json!({})), 404, "task_not_found", ""),
        (Canned::hang_up(), 502, "upstream_error", "query"),
    ];
    for (canned, status, code, words) in cases {
        fake.on("GET /tasks/t1", canned);
        let r = http.get(&path, DEMO).await;
        assert_eq!(r.status, status, "{:?}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.error_code(), code);
        assert!(message(&r).contains(words), "{}", message(&r));
        assert_no_secret(&r);
        if status == 429 {
            assert_eq!(r.header("retry-after"), Some("3"));
        }
    }

    // An unmapped word: processing, logged and counted, never shown.
    fake.on(
        "GET /tasks/t1",
        Canned::json(200, json!({"status": "WEIRD_STATE_42"})),
    );
    let r = http.get(&path, DEMO).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["status"], "processing");
    assert!(!String::from_utf8_lossy(&r.body).contains("WEIRD_STATE_42"));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !gw.log().contains("WEIRD_STATE_42") {
        assert!(Instant::now() < deadline, "not logged:\n{}", gw.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gw.log().contains("unmapped upstream status"));
    assert!(!gw.log().contains(KEY), "the log holds the secret");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_result_request_names_its_step() {
    let fake = Fake::start().await;
    let block = provider("one", &fake.url())
        + r#"
[providers.one.result]
path = '"/files/\(.file)"'
urls = '.download_url'
"#;
    let gw = start(&block, &family("f", "model-center", &["one"], "m1", "m1"));
    let http = gw.client();
    fake.on("POST /tasks", Canned::json(200, json!({"id": "t1"})));
    let id = submit(&http, "m1").await.json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    fake.on(
        "GET /tasks/t1",
        Canned::json(200, json!({"status": "done", "file": "f9"})),
    );
    for (canned, words) in [
        (
            Canned::raw(200, "text/html", "<html>"),
            "result answer: not JSON",
        ),
        (Canned::json(200, json!({"other": 1})), "no result URL"),
        (Canned::json(500, json!({})), "result: answered HTTP 500"),
    ] {
        fake.on("GET /files/f9", canned);
        let r = http.get(&format!("{MODEL_CENTER}/{id}"), DEMO).await;
        assert_eq!(r.status, 502);
        assert!(message(&r).contains(words), "{}", message(&r));
    }
    let lines: Vec<String> = fake.take().iter().map(|s| s.line()).collect();
    assert!(lines.ends_with(&["GET /tasks/t1".into(), "GET /files/f9".into()]));
}

async fn submit_ok(http: &Http, model: &str) -> String {
    let r = submit(http, model).await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    r.json()["id"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_only_when_no_task_was_created() {
    let first = Fake::start().await;
    let second = Fake::start().await;
    // A port nothing listens on: connection refused.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let providers = provider("first", &first.url())
        + &provider("second", &second.url())
        + &provider("dead", &format!("http://{closed}"))
        + &provider("nowhere", "http://no-such-host.invalid");
    let families = family("f", "model-center", &["first", "second"], "m1", "m1")
        + &family(
            "g",
            "model-center",
            &["dead", "nowhere", "second"],
            "m2",
            "m2",
        );
    let gw = start(&providers, &families);
    let http = gw.client();

    // Refusals that prove no task exists: the next provider takes the submit, and
    // queries go to the provider sealed in the id.
    for (n, refusal) in [
        Canned::json(429, json!({})).header("retry-after", "9"),
        Canned::json(503, json!({"message": "overloaded"})),
        Canned::json(401, json!({})),
        // No such endpoint: a configuration mistake upstream, nothing was created.
        Canned::json(404, json!({})),
    ]
    .into_iter()
    .enumerate()
    {
        // A new upstream id each time: completed states are cached.
        second.on(
            "POST /tasks",
            Canned::json(200, json!({"id": format!("r{n}")})),
        );
        second.on(
            &format!("GET /tasks/r{n}"),
            Canned::json(
                200,
                json!({"status": "done", "url": format!("https://cdn.example/r{n}.mp4")}),
            ),
        );
        first.on("POST /tasks", refusal);
        let id = submit_ok(&http, "m1").await;
        assert_eq!(first.only().line(), "POST /tasks");
        assert_eq!(second.only().line(), "POST /tasks");
        let done = http.get(&format!("{MODEL_CENTER}/{id}"), DEMO).await.json();
        assert_eq!(done["video_url"], format!("https://cdn.example/r{n}.mp4"));
        assert_eq!(second.only().line(), format!("GET /tasks/r{n}"));
        assert!(first.take().is_empty());
    }

    // Connection refused and DNS failure: nothing was sent, the next one is tried.
    second.on("POST /tasks", Canned::json(200, json!({"id": "s1"})));
    second.on(
        "GET /tasks/s1",
        Canned::json(
            200,
            json!({"status": "done", "url": "https://cdn.example/s1.mp4"}),
        ),
    );
    let id = submit_ok(&http, "m2").await;
    assert_eq!(second.only().line(), "POST /tasks");
    let done = http.get(&format!("{MODEL_CENTER}/{id}"), DEMO).await.json();
    assert_eq!(done["status"], "completed");
    assert_eq!(second.only().line(), "GET /tasks/s1");

    // Outcomes that are unknown or definite: never sent to the second provider.
    for (canned, status) in [
        (
            Canned::json(200, json!({"id": "late"})).delayed(Duration::from_secs(6)),
            504,
        ),
        (Canned::hang_up(), 502),
        (Canned::json(500, json!({})), 502),
        (Canned::json(400, json!({"message": "bad prompt"})), 400),
        (Canned::raw(200, "text/html", "<html>"), 502),
    ] {
        first.on("POST /tasks", canned);
        let r = submit(&http, "m1").await;
        assert_eq!(r.status, status, "{:?}", String::from_utf8_lossy(&r.body));
        assert_eq!(first.only().line(), "POST /tasks");
        assert!(
            second.take().is_empty(),
            "a possibly created task was resubmitted"
        );
    }

    // Every provider refused: the last refusal is the answer.
    first.on("POST /tasks", Canned::json(429, json!({})));
    second.on(
        "POST /tasks",
        Canned::json(429, json!({})).header("retry-after", "4"),
    );
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("4"));
}

/// `mediagate check` on a file with broken programs and schemas.
#[test]
fn check_reports_every_broken_program_with_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let broken = r#"
[providers.broken]
base_url = "http://127.0.0.1:9"
[providers.broken.submit]
path = '"/tasks"'
body = '{model: $upstream_model'
id = '.id'
success = '$nope == 1'
[providers.broken.query]
path = '"/tasks/\($id)"'
status = 'frobnicate(.status)'
status_map = {}
[providers.broken.result]
path = '"/files"'
urls = '.[] |'
[providers.broken.content]
path = '"/c"'
public_base_url = "ftp://example.com"
"#;
    let families = family("f", "model-center", &["broken"], "m1", "m1")
        + r#"
[families.badschema]
kind = "video"
providers = ["broken"]
models = ["m2"]
params = { type = 12 }
"#;
    let file = dir.path().join("routes.toml");
    std::fs::write(&file, routes(broken, &families)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mediagate"))
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "providers.broken.submit.body: jq: expected",
        "providers.broken.submit.success: jq: undefined variable `$nope`",
        "providers.broken.query.status: jq: undefined filter `frobnicate`",
        "providers.broken.query.status_map: must map every upstream status word",
        "providers.broken.result.urls: jq:",
        "providers.broken.content.public_base_url: must be an http",
        "families.badschema.params: invalid JSON Schema",
        "check failed",
    ] {
        assert!(err.contains(expected), "missing `{expected}` in:\n{err}");
    }

    // A correct file passes.
    let good = provider("one", "https://api.example.com");
    std::fs::write(
        &file,
        routes(&good, &family("f", "model-center", &["one"], "m1", "m1")),
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_mediagate"))
        .arg("check")
        .arg(&file)
        .env("FAKE_UPSTREAM_KEY", KEY)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_errors_are_mapped() {
    let fake = Fake::start().await;
    let block = provider("one", &fake.url())
        + r#"
[providers.one.content]
path = '"/files/\($id)"'
timeout_ms = 2000
"#;
    let gw = start(&block, &family("f", "model-center", &["one"], "m1", "m1"));
    let http = gw.client();
    fake.on("POST /tasks", Canned::json(200, json!({"id": "t1"})));
    let id = submit_ok(&http, "m1").await;
    fake.on(
        "GET /tasks/t1",
        Canned::json(200, json!({"status": "done"})),
    );
    let path = format!("{MODEL_CENTER}/{id}/content");
    let loop_to = format!("{}/files/t1", fake.url());
    for (canned, status, code, words) in [
        (
            Canned::json(500, json!({})),
            502,
            "upstream_error",
            "content: answered HTTP 500",
        ),
        (
            Canned::json(401, json!({})),
            502,
            "upstream_auth_failed",
            "credentials",
        ),
        (Canned::json(404, json!({})), 404, "task_not_found", ""),
        (
            Canned::json(416, json!({})),
            416,
            "range_not_satisfiable",
            "",
        ),
        (
            Canned::raw(200, "video/mp4", "x").delayed(Duration::from_secs(6)),
            504,
            "upstream_timeout",
            "content",
        ),
        (
            Canned::raw(302, "text/plain", "").header("location", &loop_to),
            502,
            "upstream_error",
            "too many redirects",
        ),
        (
            Canned::raw(302, "text/plain", ""),
            502,
            "upstream_error",
            "Location",
        ),
    ] {
        fake.on("GET /files/t1", canned);
        let r = http.get(&path, DEMO).await;
        assert_eq!(r.status, status, "{:?}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.error_code(), code);
        assert!(message(&r).contains(words), "{}", message(&r));
        assert_no_secret(&r);
    }
    // One request per case, but four for the loop: the first and three redirects.
    let seen = fake.take();
    let loops = seen.iter().filter(|s| s.line() == "GET /files/t1").count();
    assert_eq!(
        loops,
        4 + 6,
        "{:?}",
        seen.iter().map(|s| s.line()).collect::<Vec<_>>()
    );
}

/// An answer nested deeper than any real one must be refused, not overflow the stack:
/// the process keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deeply_nested_answer_is_a_502_not_a_crash() {
    let fake = Fake::start().await;
    let gw = start(
        &provider("one", &fake.url()),
        &family("f", "model-center", &["one"], "m1", "m1"),
    );
    let http = gw.client();
    let deep = "[".repeat(100_000);
    fake.on(
        "POST /tasks",
        Canned::raw(200, "application/json", deep.clone()),
    );
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 502);
    assert_eq!(r.error_code(), "upstream_bad_response");
    assert!(message(&r).contains("nested deeper"), "{}", message(&r));

    fake.on("POST /tasks", Canned::json(200, json!({"id": "t1"})));
    fake.on(
        "GET /tasks/t1",
        Canned::raw(200, "application/json", deep.clone()),
    );
    let id = submit_ok(&http, "m1").await;
    let r = http.get(&format!("{MODEL_CENTER}/{id}"), DEMO).await;
    assert_eq!(r.status, 502);
    assert_eq!(r.error_code(), "upstream_bad_response");
    assert_eq!(http.get("/healthz", DEMO).await.status, 200);
}

/// A TLS handshake that never completes is a connection that was never made: the
/// submit moves on to the next provider instead of timing out as an unknown outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_handshake_fails_over() {
    // Accepts TCP connections and never says a word.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            open.push(stream);
        }
    });
    let second = Fake::start().await;
    let providers =
        provider("silent", &format!("https://{silent_addr}")) + &provider("second", &second.url());
    let gw = start(
        &providers,
        &family("f", "model-center", &["silent", "second"], "m1", "m1"),
    );
    let http = gw.client();
    second.on("POST /tasks", Canned::json(200, json!({"id": "s1"})));
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    assert_eq!(second.only().line(), "POST /tasks");
    held.abort();
}
