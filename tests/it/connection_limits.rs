//! No client holds the gateway's connections: HTTP/2 connections without requests are
//! closed after `idle_timeout_ms`, one client address holds at most
//! `max_connections_per_ip` (through a trusted proxy: requests in progress, by the
//! address its header names), and the admin listener has a cap of its own.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Answer, DEMO, Fake, Gateway, MODEL_CENTER, PATIENCE, Routes, read_to_close};

const HEALTHZ: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";

/// A connection served once and kept open, or `None` when it was closed unanswered.
async fn held_connection(addr: std::net::SocketAddr) -> Option<TcpStream> {
    let mut s = TcpStream::connect(addr).await.ok()?;
    s.write_all(HEALTHZ).await.ok()?;
    let mut buf = [0u8; 512];
    let n = tokio::time::timeout(PATIENCE, s.read(&mut buf))
        .await
        .ok()?
        .ok()?;
    buf[..n].starts_with(b"HTTP/1.1 200").then_some(s)
}

#[tokio::test]
async fn an_idle_http2_connection_is_closed() {
    let fake = Fake::start().await;
    let gw =
        Gateway::start(Routes::upstream(&fake.url(), "").server("idle_timeout_ms = 300")).await;
    let tcp = TcpStream::connect(gw.addr).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .unwrap();
    let conn = tokio::spawn(conn);
    // A request that takes longer than the idle timeout is not cut.
    let held = fake.hold("POST /v2/model-center/tasks", Answer::queued("t1"));
    let submit = http::Request::post(format!("http://{}{MODEL_CENTER}", gw.addr))
        .header("authorization", format!("Bearer {DEMO}"))
        .header("content-type", "application/json")
        .body(
            http_body_util::Full::new(Bytes::from(
                json!({"model": "m1", "prompt": "p"}).to_string(),
            ))
            .map_err(|never| match never {})
            .boxed(),
        )
        .unwrap();
    let answer = tokio::spawn(send.send_request(submit));
    held.arrived(1).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    held.release();
    let resp = answer.await.unwrap().expect("answered, not cut");
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(body.starts_with(b"{\"id\""), "{body:?}");
    // Then, with nothing in progress, the gateway closes the connection itself.
    let ended = tokio::time::timeout(PATIENCE, conn).await;
    assert!(ended.is_ok(), "the idle HTTP/2 connection was never closed");
}

#[tokio::test]
async fn one_address_holds_at_most_its_share_of_connections() {
    let gw = Gateway::start(
        Routes::simulated(&["m1"]).server("max_connections = 100\nmax_connections_per_ip = 2"),
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(held_connection(gw.addr).await.expect("within the share"));
    }
    let mut third = TcpStream::connect(gw.addr).await.unwrap();
    let _ = third.write_all(HEALTHZ).await;
    let got = read_to_close(&mut third, PATIENCE).await;
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    held.pop();
    crate::support::eventually("a slot of the address was freed", async || {
        held_connection(gw.addr).await.is_some()
    })
    .await;
}

#[tokio::test]
async fn through_a_trusted_proxy_the_named_client_is_capped() {
    let fake = Fake::start().await;
    let gw = Gateway::start(Routes::upstream(&fake.url(), "").server(
        "max_connections_per_ip = 1\ntrusted_proxies = [\"127.0.0.0/8\"]\nclient_ip_header = \"x-forwarded-for\"",
    ))
    .await;
    // The proxy itself is not capped: more connections than the share.
    let mut proxy = Vec::new();
    for _ in 0..3 {
        proxy.push(
            held_connection(gw.addr)
                .await
                .expect("a trusted proxy is exempt"),
        );
    }
    // One request of client 203.0.113.7 in progress…
    let held = fake.hold("POST /v2/model-center/tasks", Answer::queued("t1"));
    let submit = |client: &'static str| {
        let http = gw.client();
        async move {
            http.send(
                http::Method::POST,
                MODEL_CENTER,
                &[
                    ("authorization", "Bearer sk-demo"),
                    ("content-type", "application/json"),
                    ("x-forwarded-for", client),
                ],
                json!({"model": "m1", "prompt": "p"}).to_string(),
            )
            .await
        }
    };
    let first = tokio::spawn(submit("203.0.113.7"));
    held.arrived(1).await;
    // …so its next one is refused, while another client is served.
    let r = submit("198.51.100.1, 203.0.113.7").await;
    crate::support::assert_error(&r, 503, "too_many_connections", None);
    let other = tokio::spawn(submit("198.51.100.2"));
    held.arrived(2).await;
    held.release();
    assert_eq!(first.await.unwrap().status, 200);
    assert_eq!(other.await.unwrap().status, 200);
    // Its slot is free again once its request ended.
    assert_eq!(submit("203.0.113.7").await.status, 200);
}

#[tokio::test]
async fn the_admin_listener_has_its_own_cap() {
    let gw = Gateway::start(
        Routes::simulated(&["m1"])
            .server("metrics_listen = \"127.0.0.1:0\"\nadmin_max_connections = 1"),
    )
    .await;
    let admin = gw.admin_addr.unwrap();
    let _held = held_connection(admin).await.expect("within the cap");
    let mut second = TcpStream::connect(admin).await.unwrap();
    let _ = second.write_all(HEALTHZ).await;
    let got = read_to_close(&mut second, PATIENCE).await;
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    // The client listener is not affected.
    assert!(held_connection(gw.addr).await.is_some());
}

/// A client that stops reading a response (here a 64 MiB download) does not hold its
/// connection, its request's place and the upstream connection for good: once the
/// response has moved nothing for `idle_timeout_ms`, the gateway drops the
/// connection, and the client finds the rest cut.
#[tokio::test]
async fn a_response_its_client_stopped_reading_ends_its_connection() {
    let media = vec![7u8; 64 << 20];
    let fake = crate::support::completed_with(&[("/media/big.mp4", media.clone())]).await;
    let routes = Routes::upstream(&fake.url(), "").server("idle_timeout_ms = 500");
    let gw = Gateway::start(routes).await;
    let task = json!({"model": "m1", "prompt": "p"});
    let id = gw.client().submit_id(MODEL_CENTER, DEMO, &task).await;
    let mut s = TcpStream::connect(gw.addr).await.unwrap();
    let get = format!(
        "GET {MODEL_CENTER}/{id}/content HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {DEMO}\r\n\r\n"
    );
    s.write_all(get.as_bytes()).await.unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 200");
    // Reads nothing for five idle timeouts, then all there is.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let rest = read_to_close(&mut s, PATIENCE).await;
    assert!(
        rest.len() < media.len(),
        "the whole response was sent: {} bytes",
        rest.len()
    );
}
