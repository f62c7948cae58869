//! Logs and metrics: JSON logs by flag, one access line per request with its fields,
//! unmapped upstream statuses logged, no secrets in the log; Prometheus counters that
//! move; the admin listener.

use http::Method;
use serde_json::{Value, json};

use crate::support::{
    Answer, ConfigDir, DEMO, DEMO2, Fake, Gateway, Http, MODEL_CENTER, Proc, Routes,
};

const UPSTREAM_SECRET: &str = "up-secret-7d1c0ffee";
const WRONG_KEY: &str = "sk-wrong-4242abcd";

/// A fake speaking the simulator's protocol: `up-N` submitted, queried as `status`.
fn script(fake: &Fake, n: u32, status: &str) {
    fake.on(
        "POST /v2/model-center/tasks",
        Answer::json(200, json!({"id": format!("up-{n}"), "status": "queued"})),
    );
    fake.on(
        &format!("GET /v2/model-center/tasks/up-{n}"),
        Answer::json(
            200,
            json!({"status": status, "urls": ["https://cdn.example/v.mp4"]}),
        ),
    );
}

/// The log is read, so the gateway runs as its own process.
#[tokio::test]
async fn json_logs_one_object_per_line_with_access_fields_and_no_secrets() {
    let fake = Fake::start().await;
    let routes = Routes::upstream(
        &fake.url(),
        "auth = { secret_env = \"EDGE_UPSTREAM_SECRET\" }",
    )
    .render();
    let gw = Proc::start_in(
        ConfigDir::new(&routes),
        &["--log-format", "json"],
        &[
            ("EDGE_UPSTREAM_SECRET", UPSTREAM_SECRET),
            ("RUST_LOG", "debug"),
        ],
    )
    .await;
    let http = gw.client();
    let auth = format!("Bearer {DEMO}");
    script(&fake, 1, "completed");
    let r = http
        .send(
            Method::POST,
            MODEL_CENTER,
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
                ("x-request-id", "edge-req-1"),
            ],
            json!({"model": "m1", "prompt": "logged"}).to_string(),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-request-id"), Some("edge-req-1"));
    assert_eq!(
        fake.only().header("authorization"),
        Some(format!("Bearer {UPSTREAM_SECRET}").as_str()),
        "the provider secret was sent upstream"
    );
    let id = r.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        http.query(MODEL_CENTER, DEMO, &id).await["status"],
        "completed"
    );

    // An upstream status word the provider does not map: `processing` to the client,
    // the word itself only in the log.
    script(&fake, 2, "WEIRD_STATE_42");
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "odd"}))
        .await;
    let r = http.get(&format!("{MODEL_CENTER}/{id}"), DEMO).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["status"], "processing");
    assert!(!r.text().contains("WEIRD_STATE_42"), "{}", r.text());

    assert_eq!(http.get(MODEL_CENTER, WRONG_KEY).await.status, 401);
    gw.wait_for_log("\"status\":401", 1).await;

    let log = gw.log();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let access: Vec<_> = lines
        .iter()
        .filter(|l| l["target"] == "mediagate::access")
        .collect();
    assert_eq!(access.len(), 5, "one line per request:\n{log}");
    let submit = access
        .iter()
        .find(|l| l["span"]["request_id"] == "edge-req-1")
        .unwrap_or_else(|| panic!("request id in the access line:\n{log}"));
    assert_eq!(submit["method"], "POST");
    assert_eq!(submit["route"], "POST /v2/model-center/tasks");
    assert_eq!(submit["key"], "demo");
    assert_eq!(submit["model"], "m1");
    assert_eq!(submit["provider"], "up");
    assert_eq!(submit["status"], 200);
    assert!(submit["latency_ms"].as_f64().unwrap() >= 0.0);
    assert!(submit["upstream_ms"].as_f64().unwrap() >= 0.0);

    assert!(log.contains("unmapped upstream status"), "{log}");
    assert!(log.contains("WEIRD_STATE_42"), "{log}");
    for secret in [DEMO, DEMO2, WRONG_KEY, UPSTREAM_SECRET, "Bearer "] {
        assert!(!log.contains(secret), "`{secret}` is in the log:\n{log}");
    }
}

#[tokio::test]
async fn metrics_move_as_requests_are_made() {
    let fake = Fake::start().await;
    let gw = Gateway::start(
        Routes::upstream(&fake.url(), "")
            .server(ADMIN)
            .demo_key("limits = { rate_per_second = 0.01, burst = 6 }"),
    )
    .await;
    let http = gw.client();
    let admin = gw.admin();
    let submits = [
        "mediagate_requests_total",
        "route=\"POST /v2/model-center/tasks\"",
        "status=\"200\"",
        "model=\"m1\"",
    ];
    let before = admin.metrics().await;
    assert_eq!(before.sum(&submits), 0.0);

    // Submit, query a finished task twice (miss, then hit), an unmapped status, and
    // one request over the key's burst.
    script(&fake, 1, "completed");
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "a"}))
        .await;
    let query = format!("{MODEL_CENTER}/{id}");
    assert_eq!(http.get(&query, DEMO).await.json()["status"], "completed");
    assert_eq!(http.get(&query, DEMO).await.json()["status"], "completed");
    script(&fake, 2, "weird_word");
    let id2 = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "b"}))
        .await;
    let r = http.get(&format!("{MODEL_CENTER}/{id2}"), DEMO).await;
    assert_eq!(r.json()["status"], "processing");
    assert_eq!(http.get(&query, DEMO).await.status, 200);
    assert_eq!(http.get(&query, DEMO).await.status, 429);

    let after = admin.metrics().await;
    let moved = |parts: &[&str]| after.sum(parts) - before.sum(parts);
    assert_eq!(moved(&submits), 2.0);
    assert_eq!(
        moved(&[
            "mediagate_requests_total",
            "route=\"GET /v2/model-center/tasks/{id}\"",
            "status=\"429\""
        ]),
        1.0
    );
    assert_eq!(
        moved(&[
            "mediagate_upstream_duration_seconds_count",
            "provider=\"up\""
        ]),
        4.0,
        "two submits and two upstream queries"
    );
    assert_eq!(fake.take().len(), 4);
    assert!(moved(&["mediagate_overhead_duration_seconds_count"]) >= 7.0);
    assert_eq!(moved(&["mediagate_cache_hits_total"]), 2.0);
    assert_eq!(moved(&["mediagate_cache_misses_total"]), 2.0);
    assert_eq!(moved(&["mediagate_unmapped_upstream_statuses_total"]), 1.0);
    assert_eq!(
        moved(&["mediagate_rate_limited_total", "reason=\"rate\""]),
        1.0
    );
    assert!(after.sum(&["mediagate_connections_open"]) >= 1.0);
}

/// The admin listener on a free port: where `/metrics` is served.
const ADMIN: &str = "metrics_listen = \"127.0.0.1:0\"";

#[tokio::test]
async fn metrics_on_their_own_listener() {
    let gw =
        Gateway::start(Routes::simulated(&["m1"]).server("metrics_listen = \"127.0.0.1:0\"")).await;
    let admin = Http::new(gw.admin_addr.expect("metrics listener"));
    let r = admin.get_bare("/metrics").await;
    assert_eq!(r.status, 200);
    assert!(
        r.text()
            .contains("mediagate_config_reloads_total{result=\"success\"} 0"),
        "{}",
        r.text()
    );
    assert_eq!(admin.get_bare("/v2/model-center/tasks/x").await.status, 404);
    // Not on the public listener any more: it is just another authenticated path.
    assert_eq!(gw.client().get_bare("/metrics").await.status, 401);
}
