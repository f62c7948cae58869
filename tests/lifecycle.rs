//! A task's life beyond the happy path: the `[fail]` path, tasks surviving a restart,
//! and a graceful stop on SIGTERM.

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{
    ALPHA, DEMO, DEMO2, Gateway, MODEL_CENTER, assert_error, replace_once, shipped_routes,
};
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Notify;

#[tokio::test]
async fn a_fail_prompt_ends_failed_with_a_reason_and_no_result() {
    let gw = Gateway::start(&shipped_routes());
    let http = gw.client();
    let cases = [
        (
            MODEL_CENTER,
            json!({"model": "sd_2.0_special", "prompt": "a cat [fail]"}),
        ),
        (
            MODEL_CENTER,
            json!({"model": "zeta-5.0", "prompt": "[fail] a cat"}),
        ),
        (
            MODEL_CENTER,
            json!({"model": "eta 1.1 文生视频", "prompt": "a cat [fail] now"}),
        ),
        (
            ALPHA,
            json!({"model": "alphaOpen2Plus", "prompt": "a dog [fail]", "aspect_ratio": "9:16", "seconds": 12}),
        ),
    ];
    let mut runs = tokio::task::JoinSet::new();
    for (collection, body) in cases {
        runs.spawn(fails(http.clone(), collection, body));
    }
    // Only the marker fails a task, not the word.
    let created = http
        .submit(
            MODEL_CENTER,
            DEMO,
            &json!({"model": "sd_2.0_special", "prompt": "a cat that does not fail [] fail]"}),
        )
        .await;
    let done = http
        .wait_done(MODEL_CENTER, DEMO, created["id"].as_str().unwrap())
        .await;
    assert_eq!(done["status"], "completed", "{done}");
    while let Some(run) = runs.join_next().await {
        if let Err(e) = run {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

/// Submit `body`, which asks to fail, and check the task's whole life.
async fn fails(http: common::Http, collection: &'static str, body: Value) {
    let created = http.submit(collection, DEMO, &body).await;
    let id = created["id"].as_str().unwrap();
    let history = http.poll_history(collection, DEMO, id).await;
    for v in &history {
        assert_ne!(v["status"], "completed", "{body}: {v}");
    }
    let failed = history.last().unwrap();
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["id"], id);
    assert_eq!(failed["model"], body["model"]);
    let code = failed["error"]["code"].as_str().expect("error.code");
    let message = failed["error"]["message"].as_str().expect("error.message");
    assert!(!code.is_empty() && !message.is_empty(), "{failed}");
    // Cleaned of anything that points at the upstream.
    for leak in ["127.0.0.1", "http://", "localhost"] {
        assert!(!message.contains(leak), "{message}");
    }
    for url in ["video_url", "image_url"] {
        assert!(
            failed.get(url).is_none(),
            "a failed task has no {url}: {failed}"
        );
    }
    assert_eq!(failed["urls"], json!([]), "{failed}");

    // A finished task stays as it is.
    let again = http.get(&format!("{collection}/{id}"), DEMO).await.json();
    assert_eq!(&again, failed);
}

#[tokio::test]
async fn tasks_created_before_a_restart_are_readable_after_it() {
    let mut gw = Gateway::start(&shipped_routes());
    let tasks: Vec<(&str, &str, Value, &str)> = vec![
        (
            MODEL_CENTER,
            DEMO,
            json!({"model": "kappa O3 视频生成", "prompt": "a cat"}),
            "completed",
        ),
        (
            MODEL_CENTER,
            DEMO2,
            json!({"model": "zeta_5.0Pro", "prompt": "a cat"}),
            "completed",
        ),
        (
            ALPHA,
            DEMO,
            json!({"model": "alpha2Stable", "prompt": "a cat", "aspect_ratio": "16:9", "seconds": 15}),
            "completed",
        ),
        (
            MODEL_CENTER,
            DEMO,
            json!({"model": "deltaq3-turbo", "prompt": "a cat [fail]"}),
            "failed",
        ),
    ];
    let mut created = Vec::new();
    {
        let http = gw.client();
        for (collection, key, body, _) in &tasks {
            let c = http.submit(collection, key, body).await;
            // Read once before the restart, while it is still running.
            let id = c["id"].as_str().unwrap();
            let first = http.get(&format!("{collection}/{id}"), key).await;
            assert_eq!(first.status, 200);
            created.push(c);
        }
    }

    gw.restart();
    let http = gw.client();
    for ((collection, key, _, end), before) in tasks.iter().zip(&created) {
        let id = before["id"].as_str().unwrap();
        let after = http.wait_done(collection, key, id).await;
        assert_eq!(after["status"], *end, "{after}");
        for field in ["id", "object", "model", "created"] {
            assert_eq!(after[field], before[field], "{field} survives the restart");
        }
        // Still nobody else's.
        let other = if *key == DEMO { DEMO2 } else { DEMO };
        let r = http.get(&format!("{collection}/{id}"), other).await;
        assert_error(&r, 404, "task_not_found", Some("id"));
    }
    // And the restarted gateway takes new work.
    let c = http
        .submit(
            MODEL_CENTER,
            DEMO,
            &json!({"model": "theta-H3-c1", "prompt": "a cat"}),
        )
        .await;
    let done = http
        .wait_done(MODEL_CENTER, DEMO, c["id"].as_str().unwrap())
        .await;
    assert_eq!(done["status"], "completed");
}

/// The shipped routes with a short grace period.
fn graceful_routes(extra: &str) -> String {
    let routes = replace_once(
        &shipped_routes(),
        "shutdown_grace_ms = 30000",
        "shutdown_grace_ms = 3000",
    );
    format!("{routes}\n{extra}")
}

#[tokio::test]
async fn sigterm_stops_the_process_cleanly() {
    let mut gw = Gateway::start(&graceful_routes(""));
    let http = gw.client();
    // Leave an idle keep-alive connection open: it must not hold the stop up.
    let c = http
        .submit(
            MODEL_CENTER,
            DEMO,
            &json!({"model": "zeta-5.0", "prompt": "a cat"}),
        )
        .await;
    assert!(c["id"].is_string());

    let child = gw.terminate();
    let status =
        tokio::task::spawn_blocking(move || Gateway::wait_exit(child, Duration::from_secs(20)))
            .await
            .unwrap()
            .expect("mediagate exits after SIGTERM");
    assert!(status.success(), "exit status {status}; log:\n{}", gw.log());
}

/// A provider on a local test server that holds every submit until released.
struct HeldUpstream {
    addr: std::net::SocketAddr,
    arrived: Arc<Notify>,
    release: Arc<Notify>,
}

impl HeldUpstream {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let arrived = Arc::new(Notify::new());
        let release = Arc::new(Notify::new());
        let (a, r) = (arrived.clone(), release.clone());
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (a, r) = (a.clone(), r.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |_req: Request<Incoming>| {
                        let (a, r) = (a.clone(), r.clone());
                        async move {
                            a.notify_one();
                            r.notified().await;
                            let body = json!({"id": "held-1", "status": "queued"}).to_string();
                            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(body))))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            addr,
            arrived,
            release,
        }
    }

    fn provider_toml(&self) -> String {
        format!(
            r#"
[providers.held]
base_url = "http://{addr}"

[providers.held.submit]
path = '"/tasks"'
body = '{{model: $upstream_model}} + .'
id = '.id'
status = '.status'

[providers.held.query]
path = '"/tasks/\($id)"'
status = '.status'
status_map = {{ queued = "queued" }}
"#,
            addr = self.addr
        )
    }
}

#[tokio::test]
async fn sigterm_lets_an_in_flight_request_finish() {
    let upstream = HeldUpstream::start().await;
    let routes = replace_once(
        &graceful_routes(&upstream.provider_toml()),
        "[families.theta]\nkind = \"video\"\nproviders = [\"simulator\"]",
        "[families.theta]\nkind = \"video\"\nproviders = [\"held\"]",
    );
    let mut gw = Gateway::start(&routes);
    let http = gw.client();

    let in_flight = tokio::spawn({
        let http = http.clone();
        async move {
            http.post_json(
                MODEL_CENTER,
                DEMO,
                &json!({"model": "theta-H3-c1", "prompt": "a cat"}),
            )
            .await
        }
    });
    upstream.arrived.notified().await;

    let child = gw.terminate();
    // Once the gateway is draining, let the upstream answer.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !gw.log().contains("shutdown requested") {
        assert!(
            std::time::Instant::now() < deadline,
            "no drain: {}",
            gw.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    upstream.release.notify_one();

    let r = in_flight.await.unwrap();
    assert_eq!(
        r.status,
        200,
        "the request begun before SIGTERM is answered: {:?}",
        String::from_utf8_lossy(&r.body)
    );
    assert_eq!(r.json()["model"], "theta-H3-c1");
    let status =
        tokio::task::spawn_blocking(move || Gateway::wait_exit(child, Duration::from_secs(20)))
            .await
            .unwrap()
            .expect("mediagate exits after SIGTERM");
    assert!(status.success(), "exit status {status}; log:\n{}", gw.log());
}
