//! Graceful stop on SIGTERM, in the real process: not ready at once, still accepting
//! for `shutdown_delay_ms`, in-flight requests finish within the grace period, idle
//! connections do not hold the stop up, exit 0.

use http::Method;
use serde_json::json;

use crate::support::{
    Answer, DEMO, Fake, Held, Http, MODEL_CENTER, PATIENCE, Proc, Routes, operator,
};

/// A gateway in front of `fake`, whose submits are held; `server` lines added.
async fn held_gateway(fake: &Fake, server: &str, top: &str) -> (Proc, Held) {
    let held = fake.hold("POST /v2/model-center/tasks", Answer::queued("held-1"));
    let routes = Routes::upstream(&fake.url(), "submit_timeout_ms = 60000")
        .server(server)
        .top(top)
        .render();
    (Proc::start(&routes).await, held)
}

/// A submit sent in the background: its answer, or why there was none.
fn submit_in_background(
    http: &Http,
) -> tokio::task::JoinHandle<Result<crate::support::Reply, String>> {
    let http = http.clone();
    tokio::spawn(async move {
        let auth = format!("Bearer {DEMO}");
        http.try_send(
            Method::POST,
            MODEL_CENTER,
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            json!({"model": "m1", "prompt": "slow"}).to_string(),
        )
        .await
    })
}

#[tokio::test]
async fn sigterm_drains_in_flight_requests_then_exits_0() {
    let fake = Fake::start().await;
    let (mut gw, held) = held_gateway(
        &fake,
        "shutdown_delay_ms = 2000\nshutdown_grace_ms = 20000\nrequest_timeout_ms = 120000",
        "",
    )
    .await;
    let http = gw.client();
    assert_eq!(http.get_bare("/readyz").await.status, 200);
    // A keep-alive connection left idle after its request.
    let idle = Http::new(gw.addr);
    assert_eq!(idle.get_bare("/healthz").await.status, 200);
    let in_flight = submit_in_background(&http);
    held.arrived(1).await;

    gw.signal("TERM").await;
    gw.wait_for_log("shutdown requested", 1).await;
    // Not ready any more, while new connections are still taken for the delay.
    let ready = Http::new(gw.addr).get_bare("/readyz").await;
    assert_eq!(ready.status, 503);
    assert_eq!(ready.error_code(), "shutting_down");

    // Once the listeners are closed, the upstream answers: the request begun before
    // SIGTERM is answered in the grace period.
    gw.wait_for_log("listeners closed", 1).await;
    held.release();
    let done = in_flight
        .await
        .unwrap()
        .expect("the in-flight request is answered");
    assert_eq!(done.status, 200, "{:?}", done.text());
    assert!(done.json()["id"].as_str().unwrap().starts_with("task_"));
    assert_eq!(done.json()["model"], "m1");

    let status = gw.wait_exit(PATIENCE).await;
    assert_eq!(status.code(), Some(0), "{}", gw.log());
    // Neither the finished request nor the idle connection held the stop up.
    assert!(gw.log().contains("all connections closed"), "{}", gw.log());
    drop(idle);
}

/// A stop while a submit is held at the provider: the client is cut at the end of
/// the grace period, but the submit goes on, and the process exits once the provider
/// answered (submitted once). `top` sets the ledger.
async fn a_stop_finishes_a_held_submit(top: &str) -> Proc {
    let fake = Fake::start().await;
    let (mut gw, held) = held_gateway(
        &fake,
        "shutdown_grace_ms = 300\nrequest_timeout_ms = 120000",
        top,
    )
    .await;
    let in_flight = submit_in_background(&gw.client());
    held.arrived(1).await;
    gw.signal("TERM").await;
    let cut = in_flight.await.unwrap();
    assert!(cut.is_err(), "{cut:?}");
    gw.wait_for_log("waiting for submits in flight", 1).await;
    assert!(gw.log().contains("grace period over"), "{}", gw.log());
    held.release();
    let status = gw.wait_exit(PATIENCE).await;
    assert_eq!(status.code(), Some(0), "{}", gw.log());
    assert_eq!(fake.take().len(), 1, "submitted once");
    gw
}

#[tokio::test]
async fn grace_period_bounds_the_wait_and_a_submit_runs_to_its_end_without_a_ledger() {
    a_stop_finishes_a_held_submit("[ledger]\nurl = \"none\"").await;
}

#[tokio::test]
async fn a_stop_waits_for_submits_the_provider_received() {
    let gw = a_stop_finishes_a_held_submit("").await;
    // The task is in the ledger.
    let tasks = operator(gw.dir(), &["tasks"]);
    let row = tasks.lines().nth(1).unwrap_or_default();
    assert!(
        row.contains("\tsubmitted\t") && row.contains("\theld-1\t"),
        "{tasks}"
    );
}
