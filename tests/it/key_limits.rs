//! Per-key limits: rate and burst with their headers, the submit rate, requests in
//! progress (a streamed download counts for as long as it streams).

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use serde_json::json;

use crate::support::{
    ALPHA, Answer, DEMO, DEMO2, Fake, Gateway, MODEL_CENTER, Routes, eventually, family,
};

const UNKNOWN_TASK: &str = "/v2/model-center/tasks/task_unknown";

#[tokio::test]
async fn burst_lets_exactly_the_configured_number_through() {
    let gw = Gateway::start(
        Routes::simulated(&["m1"]).demo_key("limits = { rate_per_second = 0.01, burst = 3 }"),
    )
    .await;
    let http = gw.client();
    for left in [2, 1, 0] {
        let r = http.get(UNKNOWN_TASK, DEMO).await;
        assert_eq!(r.status, 404, "inside the burst the request goes through");
        assert_eq!(r.header_u64("x-ratelimit-limit"), 3);
        assert_eq!(r.header_u64("x-ratelimit-remaining"), left);
        assert!(r.header_u64("x-ratelimit-reset") >= 100 * (3 - left));
    }
    let r = http.get(UNKNOWN_TASK, DEMO).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.error_code(), "rate_limited");
    let retry = r.header_u64("retry-after");
    assert!((1..=100).contains(&retry), "Retry-After {retry}");
    assert_eq!(r.header_u64("x-ratelimit-limit"), 3);
    assert_eq!(r.header_u64("x-ratelimit-remaining"), 0);
    assert!(r.header_u64("x-ratelimit-reset") >= retry);

    // Other keys have their own bucket (the default limits); health checks none.
    assert_eq!(http.get(UNKNOWN_TASK, DEMO2).await.status, 404);
    let r = http.get_bare("/healthz").await;
    assert_eq!(r.status, 200);
    assert!(r.header("x-ratelimit-limit").is_none());
}

#[tokio::test]
async fn submits_have_their_own_limit() {
    let gw = Gateway::start(
        Routes::simulated(&["m1"])
            .top("[limits]\nsubmit_rate_per_second = 0.01\nsubmit_burst = 2\n"),
    )
    .await;
    let http = gw.client();
    let body = json!({"model": "m1", "prompt": "a"});
    let first = http.submit_id(MODEL_CENTER, DEMO, &body).await;
    http.submit(MODEL_CENTER, DEMO, &body).await;
    let r = http.post_json(MODEL_CENTER, DEMO, &body).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.error_code(), "rate_limited");
    assert_eq!(r.header_u64("x-ratelimit-limit"), 2);
    assert!(r.header("retry-after").is_some());
    // Queries are not submits.
    assert_eq!(
        http.get(&format!("{MODEL_CENTER}/{first}"), DEMO)
            .await
            .status,
        200
    );
    // Another key still submits.
    http.submit(MODEL_CENTER, DEMO2, &body).await;
}

#[tokio::test]
async fn requests_in_progress_per_key_are_capped() {
    let fake = Fake::start().await;
    let held = fake.hold("POST /v2/model-center/tasks", Answer::queued("up-1"));
    let gw = Gateway::start(
        Routes::upstream(&fake.url(), "").demo_key("limits = { max_concurrent_requests = 1 }"),
    )
    .await;
    let http = gw.client();
    let body = json!({"model": "m1", "prompt": "slow"});
    let first = {
        let (http, body) = (http.clone(), body.clone());
        tokio::spawn(async move { http.post_json(MODEL_CENTER, DEMO, &body).await })
    };
    held.arrived(1).await;
    let r = http.post_json(MODEL_CENTER, DEMO, &body).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.error_code(), "too_many_concurrent_requests");
    assert!(r.header("retry-after").is_some());
    held.release();
    assert_eq!(first.await.unwrap().status, 200);
    // The slot is free again once the first request is done.
    assert_eq!(http.post_json(MODEL_CENTER, DEMO, &body).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_holds_its_slot_until_it_ends() {
    let fake = Fake::start().await;
    let gw = Gateway::start(
        Routes::new()
            .top("[limits]\nrate_per_second = 0\nmax_concurrent_requests = 1\n")
            .provider(crate::providers_shapes::JOBS.replace("BASE", &fake.url()))
            .family(
                family("jobs", &["jobs"], &["alpha2Stable"])
                    .alpha()
                    .upstream("alpha2Stable", "v2"),
            ),
    )
    .await;
    let http = gw.client();

    fake.on("POST /v1/videos", Answer::queued("v1"));
    fake.on(
        "GET /v1/videos/v1",
        Answer::json(200, json!({"status": "completed"})),
    );
    // Far more than the socket buffers hold, so the stream stalls while unread.
    let video = vec![7u8; 64 * 1024 * 1024];
    fake.on(
        "GET /v1/videos/v1/content",
        Answer::raw(200, "video/mp4", video),
    );
    let sent = json!({"model": "alpha2Stable", "prompt": "p"});
    let id = http.submit_id(ALPHA, DEMO, &sent).await;
    let done = http.wait_done(ALPHA, DEMO, &id).await;
    assert_eq!(done["status"], "completed");

    // Start a download and read only its head.
    let stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let req = http::Request::get(format!("{ALPHA}/{id}/content"))
        .header("host", gw.addr.to_string())
        .header("authorization", format!("Bearer {DEMO}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let downloading = sender.send_request(req).await.unwrap();
    assert_eq!(downloading.status(), 200);

    // While it streams, the key has no free slot.
    let r = http.get(&format!("{ALPHA}/{id}"), DEMO).await;
    assert_eq!(r.status, 503, "{:?}", r.text());
    assert_eq!(r.error_code(), "too_many_concurrent_requests");

    // Abandon the download: the slot comes back.
    drop(downloading);
    drop(sender);
    conn.abort();
    eventually("the slot was released", async || {
        let r = http.get(&format!("{ALPHA}/{id}"), DEMO).await;
        if r.status != 200 {
            assert_eq!(r.error_code(), "too_many_concurrent_requests");
        }
        r.status == 200
    })
    .await;
}
