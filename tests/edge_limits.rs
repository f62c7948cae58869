//! Limits: per-key rate and burst with their headers, the submit rate, requests in
//! progress per key, the connection cap, slow headers and slow bodies.

mod common;
mod edge_common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{DEMO, DEMO2, MODEL_CENTER};
use edge_common::{Proc, Routes, Upstream};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const UNKNOWN_TASK: &str = "/v2/model-center/tasks/task_unknown";

fn header_u64(r: &common::Reply, name: &str) -> u64 {
    r.header(name)
        .unwrap_or_else(|| panic!("{name} missing: {:?}", r.headers))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn burst_lets_exactly_the_configured_number_through() {
    let gw = Proc::start(
        &Routes {
            demo_key: "limits = { rate_per_second = 0.01, burst = 3 }".into(),
            ..Routes::default()
        }
        .render(),
    );
    let http = gw.client();
    for left in [2, 1, 0] {
        let r = http.get(UNKNOWN_TASK, DEMO).await;
        assert_eq!(r.status, 404, "inside the burst the request goes through");
        assert_eq!(header_u64(&r, "x-ratelimit-limit"), 3);
        assert_eq!(header_u64(&r, "x-ratelimit-remaining"), left);
        assert!(header_u64(&r, "x-ratelimit-reset") >= 100 * (3 - left));
    }
    let r = http.get(UNKNOWN_TASK, DEMO).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.error_code(), "rate_limited");
    let retry = header_u64(&r, "retry-after");
    assert!((1..=100).contains(&retry), "Retry-After {retry}");
    assert_eq!(header_u64(&r, "x-ratelimit-limit"), 3);
    assert_eq!(header_u64(&r, "x-ratelimit-remaining"), 0);
    assert!(header_u64(&r, "x-ratelimit-reset") >= retry);

    // Other keys have their own bucket (the default limits); health checks none.
    assert_eq!(http.get(UNKNOWN_TASK, DEMO2).await.status, 404);
    let r = http.send(http::Method::GET, "/healthz", &[], "").await;
    assert_eq!(r.status, 200);
    assert!(r.header("x-ratelimit-limit").is_none());
}

#[tokio::test]
async fn submits_have_their_own_limit() {
    let gw = Proc::start(
        &Routes {
            top: "[limits]\nsubmit_rate_per_second = 0.01\nsubmit_burst = 2\n".into(),
            ..Routes::default()
        }
        .render(),
    );
    let http = gw.client();
    let body = json!({"model": "m1", "prompt": "a"});
    let first = http.submit(MODEL_CENTER, DEMO, &body).await;
    http.submit(MODEL_CENTER, DEMO, &body).await;
    let r = http.post_json(MODEL_CENTER, DEMO, &body).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.error_code(), "rate_limited");
    assert_eq!(header_u64(&r, "x-ratelimit-limit"), 2);
    assert!(r.header("retry-after").is_some());
    // Queries are not submits.
    let id = first["id"].as_str().unwrap();
    assert_eq!(
        http.get(&format!("{MODEL_CENTER}/{id}"), DEMO).await.status,
        200
    );
    // Another key still submits.
    http.submit(MODEL_CENTER, DEMO2, &body).await;
}

#[tokio::test]
async fn requests_in_progress_per_key_are_capped() {
    let upstream = Upstream::start(Duration::from_millis(3000)).await;
    let gw = Proc::start(
        &Routes {
            base_url: upstream.base_url(),
            demo_key: "limits = { max_concurrent_requests = 1 }".into(),
            ..Routes::default()
        }
        .render(),
    );
    let http = gw.client();
    let body = json!({"model": "m1", "prompt": "slow"});
    let first = {
        let (http, body) = (http.clone(), body.clone());
        tokio::spawn(async move { http.post_json(MODEL_CENTER, DEMO, &body).await })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while upstream.submits.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "first submit never reached upstream"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = http.post_json(MODEL_CENTER, DEMO, &body).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.error_code(), "too_many_concurrent_requests");
    assert!(r.header("retry-after").is_some());
    assert_eq!(first.await.unwrap().status, 200);
    // The slot is free again once the first request is done.
    assert_eq!(http.post_json(MODEL_CENTER, DEMO, &body).await.status, 200);
}

/// Read until the peer closes; what it sent.
async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    // Well under the 10 s default: the configured timeout is what closes it.
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "the gateway never closed the connection");
    got
}

#[tokio::test]
async fn slow_headers_are_cut_off() {
    let gw = Proc::start(
        &Routes {
            server: "header_read_timeout_ms = 300".into(),
            ..Routes::default()
        }
        .render(),
    );
    let mut slow = TcpStream::connect(gw.addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    let got = read_to_close(&mut slow).await;
    assert!(
        got.is_empty() || got.starts_with(b"HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    // A client that connects and sends nothing at all is closed too.
    let mut silent = TcpStream::connect(gw.addr).await.unwrap();
    assert!(read_to_close(&mut silent).await.is_empty());
    // And so is a keep-alive connection left idle after its request.
    let mut idle = TcpStream::connect(gw.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let got = read_to_close(&mut idle).await;
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    // A prompt client is served.
    assert_eq!(
        gw.client()
            .send(http::Method::GET, "/healthz", &[], "")
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn slow_body_gets_408() {
    let gw = Proc::start(
        &Routes {
            server: "body_read_timeout_ms = 300".into(),
            ..Routes::default()
        }
        .render(),
    );
    let mut slow = TcpStream::connect(gw.addr).await.unwrap();
    slow.write_all(
        format!(
            "POST {MODEL_CENTER} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {DEMO}\r\n\
             content-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"model\""
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(15), async {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&got).contains("}}") {
            match slow.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    })
    .await
    .expect("an answer to the slow body");
    assert!(got.starts_with("HTTP/1.1 408"), "{got}");
    assert!(got.contains(r#""code":"body_timeout""#), "{got}");
}

#[tokio::test]
async fn connections_over_the_cap_are_closed_at_once() {
    let gw = Proc::start(
        &Routes {
            server: "max_connections = 2".into(),
            ..Routes::default()
        }
        .render(),
    );
    let request = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
    // Two keep-alive connections, each served once and held open.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(gw.addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut buf = [0u8; 1024];
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        held.push(s);
    }
    // The third gets no answer: it is closed.
    let mut third = TcpStream::connect(gw.addr).await.unwrap();
    let _ = third.write_all(request).await;
    let got = read_to_close(&mut third).await;
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));

    // Closing one frees a slot.
    held.pop();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut s = TcpStream::connect(gw.addr).await.unwrap();
        let _ = s.write_all(request).await;
        let got = read_to_close_or_answer(&mut s).await;
        if got.starts_with(b"HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "no slot was freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn read_to_close_or_answer(stream: &mut TcpStream) -> Vec<u8> {
    let mut buf = [0u8; 1024];
    match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
        Ok(Ok(n)) => buf[..n].to_vec(),
        _ => Vec::new(),
    }
}

#[tokio::test]
async fn whole_request_timeout_answers_504() {
    let upstream = Upstream::start(Duration::from_secs(30)).await;
    let gw = Proc::start(
        &Routes {
            base_url: upstream.base_url(),
            server: "request_timeout_ms = 300".into(),
            provider: "submit_timeout_ms = 60000".into(),
            ..Routes::default()
        }
        .render(),
    );
    let r = gw
        .client()
        .post_json(
            MODEL_CENTER,
            DEMO,
            &json!({"model": "m1", "prompt": "slow"}),
        )
        .await;
    assert_eq!(r.status, 504);
    assert_eq!(r.error_code(), "request_timeout");
}
