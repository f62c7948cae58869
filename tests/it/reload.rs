//! Hot reload: a valid file is swapped in whole, an invalid one changes nothing, tasks
//! created before a reload stay queryable; the file watch and SIGHUP trigger it.
//! (Certificates reloading is in `tls`.)

use serde_json::json;

use crate::support::{DEMO, Gateway, Http, MODEL_CENTER, Proc, Routes, eventually};

/// The `x-ratelimit-limit` a request of the demo key is answered with.
async fn demo_limit(http: &Http) -> Option<String> {
    let r = http.get("/v2/model-center/tasks/task_none", DEMO).await;
    r.header("x-ratelimit-limit").map(str::to_owned)
}

/// The admin listener on a free port: where `/metrics` is served.
const ADMIN: &str = "metrics_listen = \"127.0.0.1:0\"";

/// Routes whose one family names a provider that does not exist.
fn naming_a_missing_provider(models: &[&str]) -> String {
    let routes = Routes::simulated(models).render();
    assert!(routes.contains(r#"providers = ["up"]"#));
    routes.replace(r#"providers = ["up"]"#, r#"providers = ["nope"]"#)
}

#[tokio::test]
async fn add_a_model_without_restart_and_survive_a_broken_file() {
    let gw = Gateway::start(Routes::simulated(&["m1"]).server(ADMIN)).await;
    let http = gw.client();
    let sent = json!({"model": "m1", "prompt": "before"});
    let before = http.submit_id(MODEL_CENTER, DEMO, &sent).await;
    let r = http
        .post_json(MODEL_CENTER, DEMO, &json!({"model": "m2", "prompt": "x"}))
        .await;
    assert_eq!(r.error_code(), "unknown_model");

    // Add a model, and tighten the demo key's limits in the same file.
    let routes = Routes::simulated(&["m1", "m2"])
        .server(ADMIN)
        .demo_key("limits = { rate_per_second = 0.01, burst = 1000 }")
        .render();
    gw.reload_with(&routes).await.expect("reloaded");
    let sent = json!({"model": "m2", "prompt": "after"});
    let created = http.submit(MODEL_CENTER, DEMO, &sent).await;
    assert_eq!(created["model"], "m2");
    assert_eq!(demo_limit(&http).await.as_deref(), Some("1000"));
    // The task made before the reload is still there.
    let done = http.wait_done(MODEL_CENTER, DEMO, &before).await;
    assert_eq!(done["status"], "completed");

    // Broken files: not TOML, and TOML naming a provider that does not exist.
    assert!(gw.reload_with("[server\nlisten = ").await.is_err());
    let refused = gw
        .reload_with(&naming_a_missing_provider(&["m3"]))
        .await
        .expect_err("a missing provider is refused");
    assert!(refused.contains("no provider named `nope`"), "{refused}");
    // Nothing changed: m2 is served, m3 is not, the limits are the reloaded ones.
    let sent = json!({"model": "m2", "prompt": "still"});
    http.submit(MODEL_CENTER, DEMO, &sent).await;
    let r = http
        .post_json(MODEL_CENTER, DEMO, &json!({"model": "m3", "prompt": "x"}))
        .await;
    assert_eq!(r.error_code(), "unknown_model");
    assert_eq!(demo_limit(&http).await.as_deref(), Some("1000"));

    let metrics = gw.admin().metrics().await;
    assert_eq!(
        metrics.sum(&["mediagate_config_reloads_total", "success"]),
        1.0
    );
    assert_eq!(
        metrics.sum(&["mediagate_config_reloads_total", "failure"]),
        2.0
    );
}

#[tokio::test]
async fn file_watch_reloads_without_a_signal() {
    let watched = |models: &[&str]| {
        Routes::simulated(models)
            .server("reload_poll_ms = 100")
            .server(ADMIN)
            .render()
    };
    let gw = Gateway::start(&watched(&["m1"])).await;
    let http = gw.client();
    let admin = gw.admin();
    let reloads = async |result: &str| {
        admin
            .metrics()
            .await
            .sum(&["mediagate_config_reloads_total", result])
    };
    gw.dir().write("routes.toml", &watched(&["m1", "m2"]));
    eventually("the changed file was taken", async || {
        reloads("success").await == 1.0
    })
    .await;
    let sent = json!({"model": "m2", "prompt": "watched"});
    let created = http.submit(MODEL_CENTER, DEMO, &sent).await;
    assert_eq!(created["model"], "m2");

    // A broken write is reported once and changes nothing.
    gw.dir().write("routes.toml", "[server\n");
    eventually("the broken file was refused", async || {
        reloads("failure").await == 1.0
    })
    .await;
    let sent = json!({"model": "m2", "prompt": "still"});
    http.submit(MODEL_CENTER, DEMO, &sent).await;
    assert_eq!(reloads("failure").await, 1.0);
    assert_eq!(reloads("success").await, 1.0);
}

/// A reload must never mint a new task secret: every outstanding id would become a 404.
#[tokio::test]
async fn a_reload_refuses_to_replace_a_vanished_task_secret() {
    let gw = Gateway::start(Routes::simulated(&["m1"])).await;
    let http = gw.client();
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "x"}))
        .await;
    let secret = gw.dir().path().join("task-secret");
    std::fs::remove_file(&secret).expect("the secret file was created at start");

    let refused = gw.reload().await.expect_err("no new secret on reload");
    assert!(refused.contains("has disappeared"), "{refused}");
    assert!(!secret.exists(), "a reload created a new secret file");
    // The running secret still opens the task.
    let done = http.wait_done(MODEL_CENTER, DEMO, &id).await;
    assert_eq!(done["status"], "completed");
}

/// SIGHUP reloads the running process; the outcome and its reasons are logged.
#[tokio::test]
async fn sighup_reloads_and_logs_the_outcome() {
    let gw = Proc::start(Routes::simulated(&["m1"])).await;
    // The demo keys are announced as such.
    assert_eq!(gw.count_in_log("demo API key enabled"), 2, "{}", gw.log());
    let http = gw.client();
    let m2 = json!({"model": "m2", "prompt": "x"});
    let r = http.post_json(MODEL_CENTER, DEMO, &m2).await;
    assert_eq!(r.error_code(), "unknown_model");

    assert!(
        gw.reload_with(&Routes::simulated(&["m1", "m2"]).render())
            .await,
        "{}",
        gw.log()
    );
    http.submit(MODEL_CENTER, DEMO, &m2).await;

    assert!(!gw.reload_with(&naming_a_missing_provider(&["m3"])).await);
    assert!(
        gw.log().contains("no provider named `nope`"),
        "{}",
        gw.log()
    );
    http.submit(MODEL_CENTER, DEMO, &m2).await;
}
