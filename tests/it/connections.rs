//! Connection hardening and deadlines: slow headers, a stalled body, the connection
//! cap, the whole-request timeout.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{
    Answer, DEMO, Fake, Gateway, MODEL_CENTER, Routes, eventually, read_response, read_to_close,
};

/// Well under the 10 s default: the configured timeout is what closes a connection.
const CLOSED_WITHIN: Duration = Duration::from_secs(5);

/// A client that stops inside the HTTP/2 preface is closed by the header read
/// timeout, as a silent one is, not kept until the idle timeout (60 s).
#[tokio::test]
async fn a_connection_stopped_inside_the_http2_preface_is_cut_off() {
    let gw =
        Gateway::start(Routes::simulated(&["m1"]).server("header_read_timeout_ms = 300")).await;
    let mut partial = TcpStream::connect(gw.addr).await.unwrap();
    partial.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let started = std::time::Instant::now();
    let got = read_to_close(&mut partial, CLOSED_WITHIN).await;
    assert!(
        started.elapsed() < CLOSED_WITHIN,
        "still open after {:?}: {got:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn slow_headers_are_cut_off() {
    let gw =
        Gateway::start(Routes::simulated(&["m1"]).server("header_read_timeout_ms = 300")).await;
    let connect = || TcpStream::connect(gw.addr);
    let (mut slow, mut silent, mut idle) = (
        connect().await.unwrap(),
        connect().await.unwrap(),
        connect().await.unwrap(),
    );
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n")
        .await
        .unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    // All three are closed within the timeout, each on its own clock.
    let (slow, silent, idle) = tokio::join!(
        read_to_close(&mut slow, CLOSED_WITHIN),
        read_to_close(&mut silent, CLOSED_WITHIN),
        read_to_close(&mut idle, CLOSED_WITHIN),
    );
    // Headers that never end.
    assert!(
        slow.is_empty() || slow.starts_with(b"HTTP/1.1 408"),
        "{:?}",
        String::from_utf8_lossy(&slow)
    );
    // A client that connects and sends nothing at all.
    assert!(silent.is_empty(), "{:?}", String::from_utf8_lossy(&silent));
    // A keep-alive connection left idle after its request.
    assert!(
        idle.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&idle)
    );
    // A prompt client is served.
    assert_eq!(gw.client().get_bare("/healthz").await.status, 200);
}

/// The answer to a submit whose body stops after its first bytes, on a gateway with
/// `server` lines; the connection stays open for the rest of the body.
async fn stalled_body(server: &str) -> (u16, Value) {
    let gw = Gateway::start(Routes::simulated(&["m1"]).server(server)).await;
    let mut conn = TcpStream::connect(gw.addr).await.unwrap();
    let head = format!(
        "POST {MODEL_CENTER} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {DEMO}\r\n\
         content-type: application/json\r\ncontent-length: 100\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    conn.write_all(br#"{"model":"m1","#).await.unwrap();
    read_response(&mut conn).await
}

#[tokio::test]
async fn a_stalled_body_is_answered_not_hung() {
    // The body deadline: 408.
    let (status, body) = stalled_body("body_read_timeout_ms = 300").await;
    assert_eq!(status, 408, "{body}");
    assert_eq!(body["error"]["code"], "body_timeout", "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
    // (The whole request's deadline cannot be the shorter one: `check` refuses a body
    // deadline and submit timeout longer than it, see `config_checks`.)
}

/// The first answer on a raw connection, or nothing when it is closed unanswered.
async fn first_answer(stream: &mut TcpStream) -> Vec<u8> {
    let mut buf = [0u8; 1024];
    match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await {
        Ok(Ok(n)) => buf[..n].to_vec(),
        _ => Vec::new(),
    }
}

#[tokio::test]
async fn connections_over_the_cap_are_closed_at_once() {
    let gw = Gateway::start(Routes::simulated(&["m1"]).server("max_connections = 2")).await;
    let request = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
    // Two keep-alive connections, each served once and held open.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(gw.addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let got = first_answer(&mut s).await;
        assert!(
            got.starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&got)
        );
        held.push(s);
    }
    // The third gets no answer: it is closed.
    let mut third = TcpStream::connect(gw.addr).await.unwrap();
    let _ = third.write_all(request).await;
    let got = read_to_close(&mut third, CLOSED_WITHIN).await;
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));

    // Closing one frees a slot.
    held.pop();
    eventually("a slot was freed", async || {
        let mut s = TcpStream::connect(gw.addr).await.unwrap();
        let _ = s.write_all(request).await;
        first_answer(&mut s).await.starts_with(b"HTTP/1.1 200")
    })
    .await;
}

#[tokio::test]
async fn whole_request_timeout_answers_504() {
    let fake = Fake::start().await;
    fake.on("POST /v2/model-center/tasks", Answer::queued("late"));
    let held = fake.hold(
        "GET /v2/model-center/tasks/late",
        Answer::json(200, json!({"status": "queued"})),
    );
    // A slow status query: its own timeout is far longer than the request's.
    let gw = Gateway::start(
        Routes::upstream(
            &fake.url(),
            "connect_timeout_ms = 50\nsubmit_timeout_ms = 100\nquery_timeout_ms = 60000",
        )
        .server("request_timeout_ms = 300\nbody_read_timeout_ms = 100"),
    )
    .await;
    let http = gw.client();
    let id = http
        .submit_id(
            MODEL_CENTER,
            DEMO,
            &json!({"model": "m1", "prompt": "slow"}),
        )
        .await;
    let r = http.get(&format!("{MODEL_CENTER}/{id}"), DEMO).await;
    assert_eq!(r.status, 504, "{:?}", r.text());
    assert_eq!(r.error_code(), "request_timeout");
    // It was the upstream that kept it waiting.
    held.arrived(1).await;
}

/// Each client connection is served by one worker thread, in turn, and each worker has
/// upstream connections of its own: two clients, one after the other, reach the
/// provider over two pooled connections, each client always over the same one.
#[tokio::test]
async fn each_worker_keeps_its_own_upstream_connections() {
    let fake = Fake::start().await;
    fake.on(
        "POST /api/tasks",
        Answer::json(200, serde_json::json!({"id": "t1"})),
    );
    let routes = Routes::new()
        .server("workers = 2")
        .provider(crate::support::tasks_provider(
            "one",
            &format!("http://{}/api", fake.addr),
            "",
        ))
        .family(crate::support::family("f", &["one"], &["m1"]));
    let gw = Gateway::start(routes).await;
    let mut peers = Vec::new();
    for _ in 0..2 {
        // One keep-alive connection per client, opened here: no client pool between.
        let mut conn = TcpStream::connect(gw.addr).await.unwrap();
        for _ in 0..3 {
            submit_over(&mut conn).await;
        }
        let seen = fake.take();
        assert_eq!(seen.len(), 3);
        assert!(
            seen.iter().all(|s| s.peer == seen[0].peer),
            "one connection per worker"
        );
        peers.push(seen[0].peer);
    }
    assert_ne!(
        peers[0], peers[1],
        "the second client is on the other worker's pool"
    );

    // One worker: both clients share its pool.
    let one = Routes::new()
        .server("workers = 1")
        .provider(crate::support::tasks_provider(
            "one",
            &format!("http://{}/api", fake.addr),
            "",
        ))
        .family(crate::support::family("f", &["one"], &["m1"]));
    let gw = Gateway::start(one).await;
    for _ in 0..2 {
        let mut conn = TcpStream::connect(gw.addr).await.unwrap();
        submit_over(&mut conn).await;
    }
    let seen = fake.take();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].peer, seen[1].peer);
}

/// One submit over `conn`, kept alive.
async fn submit_over(conn: &mut TcpStream) {
    let body = json!({"model": "m1", "prompt": "p"}).to_string();
    let request = format!(
        "POST {MODEL_CENTER} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {DEMO}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(request.as_bytes()).await.unwrap();
    let (status, answer) = read_response(conn).await;
    assert_eq!(status, 200, "{answer}");
}
