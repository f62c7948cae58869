//! TLS termination: HTTPS with HTTP/1.1 and HTTP/2 chosen by ALPN, beside the plain
//! listener; a stalled handshake does not hold up other clients and is cut off;
//! certificates reload with the config.

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Version};
use serde_json::json;
use tokio::io::AsyncReadExt;

use crate::support::{
    Alpn, Certs, ConfigDir, DEMO, Gateway, Http, MODEL_CENTER, Routes, eventually,
};

/// A gateway with a TLS listener presenting a certificate of `certs`.
async fn tls_gateway(certs: &Certs, handshake_timeout_ms: u64) -> Gateway {
    let routes = Routes::simulated(&["m1"])
        .server("metrics_listen = \"127.0.0.1:0\"")
        .server(&format!(
            "[server.tls]\nlisten = \"127.0.0.1:0\"\ncert_file = \"cert.pem\"\n\
             key_file = \"key.pem\"\nhandshake_timeout_ms = {handshake_timeout_ms}\n"
        ))
        .render();
    let dir = ConfigDir::new(&routes)
        .with("cert.pem", &certs.leaf_pem)
        .with("key.pem", &certs.key_pem);
    Gateway::start_in(dir).await
}

/// `GET /healthz` over HTTPS/1.1 trusting `certs`: answered or not.
async fn healthz(gw: &Gateway, certs: &Certs) -> Result<(), String> {
    let https = Http::tls(
        gw.tls_addr.expect("TLS listener"),
        &certs.ca_der,
        Alpn::Http1,
    );
    let r = https
        .try_send(Method::GET, "/healthz", &[], Bytes::new())
        .await?;
    assert_eq!(r.status, 200);
    Ok(())
}

#[tokio::test]
async fn https_with_http1_and_http2_beside_plain() {
    let certs = Certs::new();
    let gw = tls_gateway(&certs, 60_000).await;
    let tls_addr = gw.tls_addr.expect("TLS listener");

    let h1 = Http::tls(tls_addr, &certs.ca_der, Alpn::Http1);
    let r = h1.get_bare("/healthz").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.version, Version::HTTP_11);

    let h2 = Http::tls(tls_addr, &certs.ca_der, Alpn::Http2);
    let r = h2.get_bare("/readyz").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.version, Version::HTTP_2);
    // The whole request path runs behind TLS: auth refuses, then a real submit + query.
    let r = h2.get_bare("/v2/model-center/tasks/task_x").await;
    assert_eq!(r.status, 401);

    // Plain HTTP still works beside it, and its ids open over TLS.
    let id = gw
        .client()
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "tls"}))
        .await;
    let r = h2.get(&format!("{MODEL_CENTER}/{id}"), DEMO).await;
    assert_eq!(r.status, 200, "{:?}", r.text());
    assert_eq!(r.version, Version::HTTP_2);
    assert_eq!(r.json()["id"], id);
}

#[tokio::test]
async fn stalled_handshake_does_not_block_accepting() {
    let certs = Certs::new();
    // Connections that never start their handshake (the timeout is a minute).
    let gw = tls_gateway(&certs, 60_000).await;
    let mut stalled = Vec::new();
    for _ in 0..5 {
        stalled.push(
            tokio::net::TcpStream::connect(gw.tls_addr.unwrap())
                .await
                .unwrap(),
        );
    }
    healthz(&gw, &certs).await.expect("served over TLS");
    assert_eq!(gw.client().get_bare("/healthz").await.status, 200);
    drop(stalled);
}

#[tokio::test]
async fn stalled_handshake_is_cut_off_and_counted() {
    let certs = Certs::new();
    let gw = tls_gateway(&certs, 300).await;
    let mut stalled = tokio::net::TcpStream::connect(gw.tls_addr.unwrap())
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    // Well under the default of 10 s: the configured timeout is what closes it.
    let read = tokio::time::timeout(Duration::from_secs(5), stalled.read(&mut buf))
        .await
        .expect("the gateway closed the stalled connection");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // Counted as the handshake's task ends, which may be just after the close.
    let admin = gw.admin();
    eventually("the stalled handshake is counted", async || {
        admin
            .metrics()
            .await
            .sum(&["mediagate_tls_handshake_failures_total"])
            == 1.0
    })
    .await;
    assert_eq!(
        admin
            .metrics()
            .await
            .sum(&["mediagate_tls_handshake_failures_total"]),
        1.0,
        "counted once"
    );
}

#[tokio::test]
async fn certificates_reload_with_the_config() {
    let old = Certs::new();
    let gw = tls_gateway(&old, 60_000).await;
    healthz(&gw, &old).await.expect("served");

    // New certificate files, same routes file: a reload applies them.
    let new = Certs::new();
    gw.dir().write("cert.pem", &new.leaf_pem);
    gw.dir().write("key.pem", &new.key_pem);
    gw.reload().await.expect("reloaded");
    healthz(&gw, &new).await.expect("new certificate served");
    assert!(
        healthz(&gw, &old).await.is_err(),
        "the old certificate is no longer served"
    );

    // A key that does not exist: the reload is refused and the current cert stays.
    std::fs::remove_file(gw.dir().path().join("key.pem")).unwrap();
    let refused = gw.reload().await.expect_err("a missing key is refused");
    assert!(refused.contains("server.tls.key_file"), "{refused}");
    healthz(&gw, &new).await.expect("still served");
}
