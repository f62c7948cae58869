//! Hot reload on SIGHUP: a valid file is swapped in whole, an invalid one changes
//! nothing, and tasks created before a reload stay queryable.

mod common;
mod edge_common;

use common::{DEMO, MODEL_CENTER};
use edge_common::{Proc, Routes, metric_sum, parse_metrics};
use serde_json::json;

#[tokio::test]
async fn add_a_model_without_restart_and_survive_a_broken_file() {
    let mut routes = Routes::default();
    let gw = Proc::start(&routes.render());
    let http = gw.client();
    let before = http
        .submit(
            MODEL_CENTER,
            DEMO,
            &json!({"model": "m1", "prompt": "before"}),
        )
        .await;
    let r = http
        .post_json(MODEL_CENTER, DEMO, &json!({"model": "m2", "prompt": "x"}))
        .await;
    assert_eq!(r.error_code(), "unknown_model");

    // Add a model, and tighten the demo key's limits in the same file.
    routes.models.push("m2".into());
    routes.demo_key = "limits = { rate_per_second = 0.01, burst = 1000 }".into();
    assert!(gw.reload_with(&routes.render()), "{}", gw.log());
    let created = http
        .submit(
            MODEL_CENTER,
            DEMO,
            &json!({"model": "m2", "prompt": "after"}),
        )
        .await;
    assert_eq!(created["model"], "m2");
    assert_eq!(created_limit(&http).await, Some("1000".into()));
    // The task made before the reload is still there.
    let id = before["id"].as_str().unwrap();
    let done = http.wait_done(MODEL_CENTER, DEMO, id).await;
    assert_eq!(done["status"], "completed");

    // Broken files: not TOML, and TOML naming a provider that does not exist.
    assert!(!gw.reload_with("[server\nlisten = "));
    let wrong = Routes {
        models: vec!["m3".into()],
        ..Routes::default()
    }
    .render()
    .replace(r#"providers = ["up"]"#, r#"providers = ["nope"]"#);
    assert!(!gw.reload_with(&wrong));
    assert!(
        gw.log().contains("no provider named `nope`"),
        "{}",
        gw.log()
    );
    // Nothing changed: m2 is served, m3 is not, the limits are the reloaded ones.
    http.submit(
        MODEL_CENTER,
        DEMO,
        &json!({"model": "m2", "prompt": "still"}),
    )
    .await;
    let r = http
        .post_json(MODEL_CENTER, DEMO, &json!({"model": "m3", "prompt": "x"}))
        .await;
    assert_eq!(r.error_code(), "unknown_model");
    assert_eq!(created_limit(&http).await, Some("1000".into()));

    let metrics = http.send(http::Method::GET, "/metrics", &[], "").await;
    let samples = parse_metrics(std::str::from_utf8(&metrics.body).unwrap());
    assert_eq!(
        metric_sum(&samples, &["mediagate_config_reloads_total", "success"]),
        1.0
    );
    assert_eq!(
        metric_sum(&samples, &["mediagate_config_reloads_total", "failure"]),
        2.0
    );
}

async fn created_limit(http: &common::Http) -> Option<String> {
    let r = http.get("/v2/model-center/tasks/task_none", DEMO).await;
    r.header("x-ratelimit-limit").map(str::to_owned)
}

#[tokio::test]
async fn file_watch_reloads_without_a_signal() {
    let mut routes = Routes {
        server: "reload_poll_ms = 100".into(),
        ..Routes::default()
    };
    let gw = Proc::start(&routes.render());
    let http = gw.client();
    routes.models.push("m2".into());
    std::fs::write(gw.routes_path(), routes.render()).unwrap();
    gw.wait_for_log(|p| p.count_in_log("configuration reloaded") > 0);
    let created = http
        .submit(
            MODEL_CENTER,
            DEMO,
            &json!({"model": "m2", "prompt": "watched"}),
        )
        .await;
    assert_eq!(created["model"], "m2");

    // A broken write is reported once and changes nothing.
    std::fs::write(gw.routes_path(), "[server\n").unwrap();
    gw.wait_for_log(|p| p.count_in_log("configuration NOT reloaded") > 0);
    http.submit(
        MODEL_CENTER,
        DEMO,
        &json!({"model": "m2", "prompt": "still"}),
    )
    .await;
}

/// A reload must never mint a new task secret: every outstanding id would become a 404.
#[tokio::test]
async fn a_reload_refuses_to_replace_a_vanished_task_secret() {
    let routes = Routes::default();
    let gw = Proc::start(&routes.render());
    let http = gw.client();
    let created = http
        .submit(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "x"}))
        .await;
    let secret = gw.routes_path().with_file_name("task-secret");
    std::fs::remove_file(&secret).expect("the secret file was created at start");

    assert!(!gw.reload_with(&routes.render()), "{}", gw.log());
    assert!(gw.log().contains("has disappeared"), "{}", gw.log());
    assert!(!secret.exists(), "a reload created a new secret file");
    // The running secret still opens the task.
    let id = created["id"].as_str().unwrap();
    let done = http.wait_done(MODEL_CENTER, DEMO, id).await;
    assert_eq!(done["status"], "completed");
}
