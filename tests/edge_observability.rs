//! Logs and metrics: JSON logs by flag, one access line per request with its fields,
//! no secrets in the log, Prometheus counters that move, the admin listener.

mod common;
mod edge_common;

use common::{DEMO, DEMO2, MODEL_CENTER};
use edge_common::{Proc, Routes, Upstream, json_lines, metric_sum, parse_metrics};
use serde_json::json;

const UPSTREAM_SECRET: &str = "up-secret-7d1c0ffee";
const WRONG_KEY: &str = "sk-wrong-4242abcd";

#[tokio::test]
async fn json_logs_one_object_per_line_with_access_fields_and_no_secrets() {
    let upstream = Upstream::start(std::time::Duration::ZERO).await;
    let gw = Proc::start_with(
        &Routes {
            base_url: upstream.base_url(),
            provider: "auth = { secret_env = \"EDGE_UPSTREAM_SECRET\" }".into(),
            ..Routes::default()
        }
        .render(),
        &["--log-format", "json"],
        &[
            ("EDGE_UPSTREAM_SECRET", UPSTREAM_SECRET),
            ("RUST_LOG", "debug"),
        ],
    );
    let http = gw.client();
    let auth = format!("Bearer {DEMO}");
    let r = http
        .send(
            http::Method::POST,
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
        upstream.last_auth.lock().unwrap().as_deref(),
        Some(format!("Bearer {UPSTREAM_SECRET}").as_str()),
        "the provider secret was sent upstream"
    );
    let id = r.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        http.get(&format!("{MODEL_CENTER}/{id}"), DEMO).await.status,
        200
    );
    assert_eq!(http.get(MODEL_CENTER, WRONG_KEY).await.status, 401);
    gw.wait_for_log(|p| p.count_in_log("\"status\":401") > 0);

    let log = gw.log();
    let lines = json_lines(&log);
    let access: Vec<_> = lines
        .iter()
        .filter(|l| l["target"] == "mediagate::access")
        .collect();
    assert_eq!(access.len(), 3, "one line per request:\n{log}");
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

    for secret in [DEMO, DEMO2, WRONG_KEY, UPSTREAM_SECRET, "Bearer "] {
        assert!(!log.contains(secret), "`{secret}` is in the log:\n{log}");
    }
}

#[tokio::test]
async fn metrics_move_as_requests_are_made() {
    let upstream = Upstream::start(std::time::Duration::ZERO).await;
    let gw = Proc::start(
        &Routes {
            base_url: upstream.base_url(),
            demo_key: "limits = { rate_per_second = 0.01, burst = 6 }".into(),
            ..Routes::default()
        }
        .render(),
    );
    let http = gw.client();
    let scrape = || async {
        let r = http.send(http::Method::GET, "/metrics", &[], "").await;
        assert_eq!(r.status, 200);
        assert!(r.header("content-type").unwrap().contains("text"));
        parse_metrics(std::str::from_utf8(&r.body).unwrap())
    };
    let submits = [
        "mediagate_requests_total",
        "route=\"POST /v2/model-center/tasks\"",
        "status=\"200\"",
        "model=\"m1\"",
    ];
    let before = scrape().await;
    assert_eq!(metric_sum(&before, &submits), 0.0);

    // Submit, query a finished task twice (miss, then hit), an unmapped status, and
    // one request over the key's burst.
    let id = http
        .submit(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "a"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let query = format!("{MODEL_CENTER}/{id}");
    assert_eq!(http.get(&query, DEMO).await.json()["status"], "completed");
    assert_eq!(http.get(&query, DEMO).await.json()["status"], "completed");
    *upstream.query_status.lock().unwrap() = "weird_word".into();
    let id2 = http
        .submit(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "b"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = http.get(&format!("{MODEL_CENTER}/{id2}"), DEMO).await;
    assert_eq!(r.json()["status"], "processing");
    assert_eq!(http.get(&query, DEMO).await.status, 200);
    assert_eq!(http.get(&query, DEMO).await.status, 429);

    let after = scrape().await;
    let moved = |parts: &[&str]| metric_sum(&after, parts) - metric_sum(&before, parts);
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
    assert!(moved(&["mediagate_overhead_duration_seconds_count"]) >= 7.0);
    assert_eq!(moved(&["mediagate_cache_hits_total"]), 2.0);
    assert_eq!(moved(&["mediagate_cache_misses_total"]), 2.0);
    assert_eq!(moved(&["mediagate_unmapped_upstream_statuses_total"]), 1.0);
    assert_eq!(
        moved(&["mediagate_rate_limited_total", "reason=\"rate\""]),
        1.0
    );
    assert!(metric_sum(&after, &["mediagate_connections_open"]) >= 1.0);
}

#[tokio::test]
async fn metrics_on_their_own_listener() {
    let gw = Proc::start(
        &Routes {
            server: "metrics_listen = \"127.0.0.1:0\"".into(),
            ..Routes::default()
        }
        .render(),
    );
    let admin = common::Http::new(gw.metrics.expect("metrics listener announced"));
    let r = admin.send(http::Method::GET, "/metrics", &[], "").await;
    assert_eq!(r.status, 200);
    assert!(
        String::from_utf8_lossy(&r.body)
            .contains("mediagate_config_reloads_total{result=\"success\"} 0")
    );
    assert_eq!(
        admin
            .send(http::Method::GET, "/v2/model-center/tasks/x", &[], "")
            .await
            .status,
        404
    );
    // Not on the public listener any more: it is just another authenticated path.
    let r = gw
        .client()
        .send(http::Method::GET, "/metrics", &[], "")
        .await;
    assert_eq!(r.status, 401);
}
