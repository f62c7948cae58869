//! Upstream failures through the gateway: the error mapping (400 / 429 / 502 / 504),
//! contract breaks that name the failing step, and the failover rule (only a submit
//! that certainly created no task moves on). Timeouts are upstream answers held
//! until the gateway's 1 s provider timeouts fire. (Unmapped status words are in
//! `observability`, with their log line.)

use serde_json::json;

use crate::support::{
    Answer, DEMO, Fake, Gateway, Http, MODEL_CENTER, Reply, Routes, UPSTREAM_KEY as KEY, family,
    tasks_provider,
};

/// A gateway with `providers` (blocks) and `families`.
async fn start(providers: &[String], families: &[crate::support::Family]) -> Gateway {
    let mut routes = Routes::new();
    for p in providers {
        routes = routes.provider(p);
    }
    for f in families {
        routes = routes.family(f);
    }
    Gateway::start(&routes.render()).await
}

/// One provider `one` at `base` (with `extra` blocks), serving model `m1`.
async fn start_one(base: &str, extra: &str) -> Gateway {
    start(
        &[tasks_provider("one", base, "") + extra],
        &[family("f", &["one"], &["m1"])],
    )
    .await
}

async fn submit(http: &Http, model: &str) -> Reply {
    http.post_json(MODEL_CENTER, DEMO, &json!({"model": model, "prompt": "p"}))
        .await
}

async fn submit_ok(http: &Http, model: &str) -> String {
    let r = submit(http, model).await;
    assert_eq!(r.status, 200, "{:?}", r.text());
    r.json()["id"].as_str().unwrap().to_string()
}

/// A fake provider and a gateway serving `m1` from it (with `extra` blocks), and a
/// task submitted through them: the upstream's `t1`, the client's `id`.
struct OneTask {
    fake: Fake,
    http: Http,
    id: String,
    /// Kept running while the test uses the task.
    _gw: Gateway,
}

async fn one_task(extra: &str) -> OneTask {
    let fake = Fake::start().await;
    let gw = start_one(&fake.url(), extra).await;
    let http = gw.client();
    fake.on("POST /tasks", Answer::json(200, json!({"id": "t1"})));
    let id = submit_ok(&http, "m1").await;
    OneTask {
        fake,
        http,
        id,
        _gw: gw,
    }
}

/// Nothing of our upstream key in what the client receives.
fn assert_no_secret(r: &Reply) {
    let text = r.text();
    assert!(!text.contains(KEY), "secret leaked: {text}");
    assert!(!text.contains("upstream-secret"), "secret leaked: {text}");
}

/// `r` is a refusal with `status` and the catalogue's `code`, its message has
/// `words`, and nothing of our key is in it.
#[track_caller]
fn assert_refused(r: &Reply, status: u16, code: &str, words: &str) {
    assert_eq!(r.status, status, "{:?}", r.text());
    assert_eq!(r.error_code(), code);
    assert!(r.error_message().contains(words), "{}", r.error_message());
    assert_no_secret(r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_errors_are_mapped() {
    let fake = Fake::start().await;
    let gw = start_one(&fake.url(), "").await;
    let http = gw.client();

    // Upstream "invalid request": 400 with its reason.
    fake.on(
        "POST /tasks",
        Answer::json(400, json!({"error": {"message": "prompt is too long"}})),
    );
    let r = submit(&http, "m1").await;
    assert_refused(&r, 400, "upstream_invalid_request", "prompt is too long");

    // A reason that quotes our key is cleaned before it is passed on.
    fake.on(
        "POST /tasks",
        Answer::json(
            422,
            json!({"message": format!("key {KEY} may not use this model")}),
        ),
    );
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 400);
    assert_no_secret(&r);
    assert!(
        r.error_message()
            .contains("[redacted] may not use this model")
    );

    // Our key refused: 502, no key in the message.
    fake.on(
        "POST /tasks",
        Answer::json(401, json!({"error": {"message": format!("bad key {KEY}")}})),
    );
    let r = submit(&http, "m1").await;
    assert_refused(&r, 502, "upstream_auth_failed", "");

    // 429 with and without Retry-After.
    fake.on(
        "POST /tasks",
        Answer::json(429, json!({"error": {"message": "slow down"}})).header("retry-after", "7"),
    );
    let r = submit(&http, "m1").await;
    assert_refused(&r, 429, "upstream_rate_limited", "");
    assert_eq!(r.header("retry-after"), Some("7"));
    fake.on("POST /tasks", Answer::json(429, json!({})));
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"), "every 429 says when");

    // 5xx: 502.
    fake.on("POST /tasks", Answer::json(500, json!({"message": "oops"})));
    let r = submit(&http, "m1").await;
    assert_refused(&r, 502, "upstream_error", "");

    // Contract breaks: 502 naming the step.
    for (canned, what) in [
        (
            Answer::raw(200, "text/html", "<html><body>Bad gateway</body></html>"),
            "not JSON",
        ),
        (
            Answer::json(200, json!({"task": {"state": "ok"}})),
            "no task id",
        ),
        (Answer::json(200, json!({"id": ""})), "no task id"),
        (Answer::raw(200, "application/json", ""), "not JSON"),
    ] {
        fake.on("POST /tasks", canned);
        let r = submit(&http, "m1").await;
        assert_refused(&r, 502, "upstream_bad_response", what);
        assert!(
            r.error_message().contains("submit"),
            "{}",
            r.error_message()
        );
    }

    // Timeout: 504. A broken connection: 502.
    let held = fake.hold("POST /tasks", Answer::json(200, json!({"id": "late"})));
    let r = submit(&http, "m1").await;
    assert_refused(&r, 504, "upstream_timeout", "");
    held.arrived(1).await;
    fake.on("POST /tasks", Answer::hang_up());
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 502);
    for seen in fake.take() {
        assert_eq!(seen.line(), "POST /tasks");
        assert_eq!(
            seen.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    }
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_errors_are_mapped() {
    let OneTask {
        fake,
        http,
        id,
        _gw,
    } = one_task("").await;
    let path = format!("{MODEL_CENTER}/{id}");

    let (slow, held) = Answer::json(200, json!({"status": "running"})).held();
    let cases: Vec<(Answer, u16, &str, &str)> = vec![
        (Answer::json(500, json!({})), 502, "upstream_error", "query"),
        (Answer::json(502, json!({})), 502, "upstream_error", "query"),
        (
            Answer::raw(200, "text/html", "<!doctype html><h1>503</h1>"),
            502,
            "upstream_bad_response",
            "query",
        ),
        (
            Answer::json(200, json!({"state": "running"})),
            502,
            "upstream_bad_response",
            "no status",
        ),
        (
            Answer::json(401, json!({"message": KEY})),
            502,
            "upstream_auth_failed",
            "credentials",
        ),
        (
            Answer::json(429, json!({})).header("retry-after", "3"),
            429,
            "upstream_rate_limited",
            "",
        ),
        (slow, 504, "upstream_timeout", "query"),
        (Answer::json(404, json!({})), 404, "task_not_found", ""),
        (Answer::hang_up(), 502, "upstream_error", "query"),
    ];
    for (canned, status, code, words) in cases {
        fake.on("GET /tasks/t1", canned);
        let r = http.get(&path, DEMO).await;
        assert_refused(&r, status, code, words);
        if status == 429 {
            assert_eq!(r.header("retry-after"), Some("3"));
        }
    }

    held.arrived(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_result_request_names_its_step() {
    let result = r#"
[providers.one.result]
path = '"/files/\(.file)"'
urls = '.download_url'
"#;
    let OneTask {
        fake,
        http,
        id,
        _gw,
    } = one_task(result).await;
    fake.on(
        "GET /tasks/t1",
        Answer::json(200, json!({"status": "done", "file": "f9"})),
    );
    for (canned, words) in [
        (
            Answer::raw(200, "text/html", "<html>"),
            "result answer: not JSON",
        ),
        (Answer::json(200, json!({"other": 1})), "no result URL"),
        (Answer::json(500, json!({})), "result: answered HTTP 500"),
    ] {
        fake.on("GET /files/f9", canned);
        let r = http.get(&format!("{MODEL_CENTER}/{id}"), DEMO).await;
        assert_eq!(r.status, 502);
        assert!(r.error_message().contains(words), "{}", r.error_message());
    }
    let lines: Vec<String> = fake.take().iter().map(|s| s.line()).collect();
    assert!(lines.ends_with(&["GET /tasks/t1".into(), "GET /files/f9".into()]));
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
    let gw = start(
        &[
            tasks_provider("first", &first.url(), ""),
            tasks_provider("second", &second.url(), ""),
            tasks_provider("dead", &format!("http://{closed}"), ""),
            tasks_provider("nowhere", "http://no-such-host.invalid", ""),
        ],
        &[
            family("f", &["first", "second"], &["m1"]),
            family("g", &["dead", "nowhere", "second"], &["m2"]),
        ],
    )
    .await;
    let http = gw.client();

    // Refusals that prove no task exists: the next provider takes the submit, and
    // queries go to the provider sealed in the id.
    for (n, refusal) in [
        Answer::json(429, json!({})).header("retry-after", "9"),
        Answer::json(503, json!({"message": "overloaded"})),
        Answer::json(401, json!({})),
        // No such endpoint: a configuration mistake upstream, nothing was created.
        Answer::json(404, json!({})),
    ]
    .into_iter()
    .enumerate()
    {
        // A new upstream id each time: completed states are cached.
        second.on(
            "POST /tasks",
            Answer::json(200, json!({"id": format!("r{n}")})),
        );
        second.on(
            &format!("GET /tasks/r{n}"),
            Answer::json(
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
    second.on("POST /tasks", Answer::json(200, json!({"id": "s1"})));
    second.on(
        "GET /tasks/s1",
        Answer::json(
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
    let (slow, held) = Answer::json(200, json!({"id": "late"})).held();
    for (canned, status) in [
        (slow, 504),
        (Answer::hang_up(), 502),
        (Answer::json(500, json!({})), 502),
        (Answer::json(400, json!({"message": "bad prompt"})), 400),
        (Answer::raw(200, "text/html", "<html>"), 502),
    ] {
        first.on("POST /tasks", canned);
        let r = submit(&http, "m1").await;
        assert_eq!(r.status, status, "{:?}", r.text());
        assert_eq!(first.only().line(), "POST /tasks");
        assert!(
            second.take().is_empty(),
            "a possibly created task was resubmitted"
        );
    }

    // Every provider refused: the last refusal is the answer.
    first.on("POST /tasks", Answer::json(429, json!({})));
    second.on(
        "POST /tasks",
        Answer::json(429, json!({})).header("retry-after", "4"),
    );
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("4"));
    held.arrived(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_errors_are_mapped() {
    let content = r#"
[providers.one.content]
path = '"/files/\($id)"'
timeout_ms = 1000
"#;
    let OneTask {
        fake,
        http,
        id,
        _gw,
    } = one_task(content).await;
    fake.on(
        "GET /tasks/t1",
        Answer::json(200, json!({"status": "done"})),
    );
    let path = format!("{MODEL_CENTER}/{id}/content");
    let loop_to = format!("{}/files/t1", fake.url());
    let (slow, held) = Answer::raw(200, "video/mp4", "x").held();
    for (canned, status, code, words) in [
        (
            Answer::json(500, json!({})),
            502,
            "upstream_error",
            "content: answered HTTP 500",
        ),
        (
            Answer::json(401, json!({})),
            502,
            "upstream_auth_failed",
            "credentials",
        ),
        (Answer::json(404, json!({})), 404, "task_not_found", ""),
        (
            Answer::json(416, json!({})),
            416,
            "range_not_satisfiable",
            "",
        ),
        (slow, 504, "upstream_timeout", "content"),
        (
            Answer::raw(302, "text/plain", "").header("location", &loop_to),
            502,
            "upstream_error",
            "too many redirects",
        ),
        (
            Answer::raw(302, "text/plain", ""),
            502,
            "upstream_error",
            "Location",
        ),
    ] {
        fake.on("GET /files/t1", canned);
        let r = http.get(&path, DEMO).await;
        assert_refused(&r, status, code, words);
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
    held.arrived(1).await;
}

/// An answer nested deeper than any real one must be refused, not overflow the stack:
/// the process keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deeply_nested_answer_is_a_502_not_a_crash() {
    let fake = Fake::start().await;
    let gw = start_one(&fake.url(), "").await;
    let http = gw.client();
    let deep = "[".repeat(100_000);
    fake.on(
        "POST /tasks",
        Answer::raw(200, "application/json", deep.clone()),
    );
    let r = submit(&http, "m1").await;
    assert_refused(&r, 502, "upstream_bad_response", "nested deeper");
    // Nor behind a `#` comment (jaq's reader skips them) with a quote in it.
    fake.on(
        "POST /tasks",
        Answer::raw(200, "application/json", format!("# \"\n{deep}")),
    );
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 502);
    assert!(
        r.error_message().contains("nested deeper"),
        "{}",
        r.error_message()
    );

    fake.on("POST /tasks", Answer::json(200, json!({"id": "t1"})));
    fake.on(
        "GET /tasks/t1",
        Answer::raw(200, "application/json", deep.clone()),
    );
    let id = submit_ok(&http, "m1").await;
    let r = http.get(&format!("{MODEL_CENTER}/{id}"), DEMO).await;
    assert_refused(&r, 502, "upstream_bad_response", "");
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
    let gw = start(
        &[
            tasks_provider("silent", &format!("https://{silent_addr}"), ""),
            tasks_provider("second", &second.url(), ""),
        ],
        &[family("f", &["silent", "second"], &["m1"])],
    )
    .await;
    let http = gw.client();
    second.on("POST /tasks", Answer::json(200, json!({"id": "s1"})));
    let r = submit(&http, "m1").await;
    assert_eq!(r.status, 200, "{:?}", r.text());
    assert_eq!(second.only().line(), "POST /tasks");
    held.abort();
}
