//! Graceful shutdown on SIGTERM: not ready at once, in-flight requests finish within
//! the grace period, exit 0.

mod common;
mod edge_common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{DEMO, MODEL_CENTER};
use edge_common::{Proc, Routes, Upstream};
use serde_json::json;

async fn wait_for_submit(upstream: &Upstream) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while upstream.submits.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "submit never reached upstream");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn sigterm_drains_in_flight_requests_then_exits_0() {
    let upstream = Upstream::start(Duration::from_millis(5000)).await;
    let mut gw = Proc::start(
        &Routes {
            base_url: upstream.base_url(),
            server: "shutdown_delay_ms = 4000\nshutdown_grace_ms = 20000".into(),
            ..Routes::default()
        }
        .render(),
    );
    let http = gw.client();
    assert_eq!(
        http.send(http::Method::GET, "/readyz", &[], "")
            .await
            .status,
        200
    );
    let in_flight = {
        let http = http.clone();
        tokio::spawn(async move {
            http.post_json(
                MODEL_CENTER,
                DEMO,
                &json!({"model": "m1", "prompt": "slow"}),
            )
            .await
        })
    };
    wait_for_submit(&upstream).await;

    gw.signal("TERM");
    gw.wait_for_log(|p| p.count_in_log("shutdown requested") > 0);
    let ready = common::Http::new(gw.addr)
        .send(http::Method::GET, "/readyz", &[], "")
        .await;
    assert_eq!(ready.status, 503);
    assert_eq!(ready.error_code(), "shutting_down");

    let done = in_flight.await.unwrap();
    assert_eq!(done.status, 200, "{:?}", done.body);
    assert!(done.json()["id"].as_str().unwrap().starts_with("task_"));
    let status = gw.wait_exit();
    assert_eq!(status.code(), Some(0), "{}", gw.log());
    assert!(gw.log().contains("all connections closed"));
}

#[tokio::test]
async fn grace_period_bounds_the_wait() {
    let upstream = Upstream::start(Duration::from_secs(60)).await;
    let mut gw = Proc::start(
        &Routes {
            base_url: upstream.base_url(),
            server: "shutdown_grace_ms = 300\nrequest_timeout_ms = 120000".into(),
            provider: "submit_timeout_ms = 120000".into(),
            ..Routes::default()
        }
        .render(),
    );
    let http = gw.client();
    let in_flight = tokio::spawn(async move {
        let body = json!({"model": "m1", "prompt": "never answered"});
        http.post_json(MODEL_CENTER, DEMO, &body).await
    });
    wait_for_submit(&upstream).await;
    gw.signal("TERM");
    let status = gw.wait_exit();
    assert_eq!(status.code(), Some(0), "{}", gw.log());
    assert!(gw.log().contains("grace period over"));
    // The request that outlived the grace period was cut, not answered.
    assert!(in_flight.await.is_err());
}
