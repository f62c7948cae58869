//! A streamed content download counts as a request in progress for as long as it
//! streams, so the per-key concurrency cap also bounds downloads.

mod common;
mod fakes;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{ALPHA, DEMO, Gateway};
use fakes::{Canned, Fake, family, routes};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use serde_json::json;

const JOBS: &str = r#"
[providers.jobs]
base_url = "BASE"
[providers.jobs.submit]
path = '"/v1/videos"'
id = '.id'
[providers.jobs.query]
path = '"/v1/videos/\($id | @uri)"'
status = '.status'
status_map = { queued = "queued", completed = "completed" }
[providers.jobs.content]
path = '"/v1/videos/\($id | @uri)/content"'
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_holds_its_slot_until_it_ends() {
    let fake = Fake::start().await;
    let config = routes(
        &JOBS.replace("BASE", &fake.url()),
        &family("jobs", "alpha-videos", &["jobs"], "alpha2Stable", "v2"),
    ) + "\n[limits]\nrate_per_second = 0\nmax_concurrent_requests = 1\n";
    let gw = Gateway::start(&config);
    let http = gw.client();

    fake.on("POST /v1/videos", Canned::json(200, json!({"id": "v1"})));
    fake.on(
        "GET /v1/videos/v1",
        Canned::json(200, json!({"status": "completed"})),
    );
    // Far more than the socket buffers hold, so the stream stalls while unread.
    let video = vec![7u8; 64 * 1024 * 1024];
    fake.on(
        "GET /v1/videos/v1/content",
        Canned::raw(200, "video/mp4", video),
    );
    let created = http
        .submit(
            ALPHA,
            DEMO,
            &json!({"model": "alpha2Stable", "prompt": "p"}),
        )
        .await;
    let id = created["id"].as_str().unwrap().to_string();
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
    assert_eq!(r.status, 503, "{:?}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.error_code(), "too_many_concurrent_requests");

    // Abandon the download: the slot comes back.
    drop(downloading);
    drop(sender);
    conn.abort();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = http.get(&format!("{ALPHA}/{id}"), DEMO).await;
        if r.status == 200 {
            break;
        }
        assert_eq!(r.error_code(), "too_many_concurrent_requests");
        assert!(Instant::now() < deadline, "the slot was never released");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
