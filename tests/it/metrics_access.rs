//! `/metrics` is not open to anyone who reaches the public listener: by default it is
//! not served there at all; with a metrics token it answers only to that token; the
//! admin listener (`server.metrics_listen`) serves it without auth
//! (`observability::metrics_on_their_own_listener`).

use crate::support::{ConfigDir, DEMO, Gateway, Routes, assert_error};

const TOKEN: &str = "metrics-token-0123456789";

#[tokio::test]
async fn not_served_on_the_public_listener_by_default() {
    let gw = Gateway::start(Routes::simulated(&["m1"])).await;
    let http = gw.client();
    let r = http.get_bare("/metrics").await;
    assert_error(&r, 401, "missing_api_key", None);
    assert!(!r.text().contains("mediagate_"), "{}", r.text());
    // A client key does not open it: it is just an unknown path.
    let r = http.get("/metrics", DEMO).await;
    assert_error(&r, 404, "not_found", None);
}

#[tokio::test]
async fn with_a_token_it_answers_that_token_only() {
    let routes = Routes::simulated(&["m1"]).server("metrics_token_file = \"metrics.token\"");
    let dir = ConfigDir::new(routes).with("metrics.token", &format!("{TOKEN}\n"));
    let gw = Gateway::start_in(dir).await;
    let http = gw.client();
    assert_error(
        &http.get_bare("/metrics").await,
        401,
        "missing_api_key",
        None,
    );
    assert_error(
        &http.get("/metrics", DEMO).await,
        401,
        "invalid_api_key",
        None,
    );
    let r = http.get("/metrics", &format!("{TOKEN}x")).await;
    assert_error(&r, 401, "invalid_api_key", None);
    let r = http.get("/metrics", TOKEN).await;
    assert_eq!(r.status, 200);
    assert!(
        r.text().contains("mediagate_requests_total"),
        "{}",
        r.text()
    );
    // The token is no client key.
    let r = http.get("/v2/model-center/tasks/x", TOKEN).await;
    assert_error(&r, 401, "invalid_api_key", None);
}

#[tokio::test]
async fn a_short_token_is_refused_at_load() {
    let routes = Routes::simulated(&["m1"]).server("metrics_token_file = \"metrics.token\"");
    let dir = ConfigDir::new(routes).with("metrics.token", "short");
    let e = mediagate::start(&dir.routes_path())
        .await
        .err()
        .expect("refused");
    assert!(e.to_string().contains("server.metrics_token_file"), "{e}");
    assert!(!e.to_string().contains("short\n"), "{e}");
}
