//! TLS termination: HTTPS with HTTP/1.1 and HTTP/2 chosen by ALPN, beside the plain
//! listener; a stalled handshake does not hold up other clients; certificates reload.

mod common;
mod edge_common;

use common::DEMO;
use edge_common::{Alpn, Https, Proc, Routes, make_cert};
use serde_json::json;

fn tls_routes(dir: &std::path::Path) -> String {
    tls_routes_with(dir, 60_000)
}

fn tls_routes_with(dir: &std::path::Path, handshake_timeout_ms: u64) -> String {
    let (cert, key, _) = make_cert();
    std::fs::write(dir.join("cert.pem"), cert).unwrap();
    std::fs::write(dir.join("key.pem"), key).unwrap();
    Routes {
        server: format!(
            "[server.tls]\nlisten = \"127.0.0.1:0\"\ncert_file = {:?}\nkey_file = {:?}\nhandshake_timeout_ms = {handshake_timeout_ms}\n",
            dir.join("cert.pem"),
            dir.join("key.pem"),
        ),
        ..Routes::default()
    }
    .render()
}

fn ca(dir: &std::path::Path) -> rustls::pki_types::CertificateDer<'static> {
    let pem = std::fs::read(dir.join("cert.pem")).unwrap();
    rustls_pemfile::certs(&mut &pem[..])
        .next()
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn https_with_http1_and_http2_beside_plain() {
    let certs = tempfile::tempdir().unwrap();
    let gw = Proc::start(&tls_routes(certs.path()));
    let tls_addr = gw.https.expect("TLS listener announced");
    let ca = ca(certs.path());

    let h1 = Https::new(tls_addr, &ca, Alpn::Http1);
    let (r, version) = h1.get("/healthz", None).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(version, http::Version::HTTP_11);

    let h2 = Https::new(tls_addr, &ca, Alpn::Http2);
    let (r, version) = h2.get("/readyz", None).await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(version, http::Version::HTTP_2);
    // The whole request path runs behind TLS: auth refuses, then a real submit + query.
    let (r, _) = h2.get("/v2/model-center/tasks/task_x", None).await.unwrap();
    assert_eq!(r.status, 401);

    // Plain HTTP still works beside it, and its ids open over TLS.
    let plain = gw.client();
    let created = plain
        .submit(
            common::MODEL_CENTER,
            DEMO,
            &json!({"model": "m1", "prompt": "tls"}),
        )
        .await;
    let id = created["id"].as_str().unwrap();
    let (r, version) = h2
        .get(&format!("{}/{id}", common::MODEL_CENTER), Some(DEMO))
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(version, http::Version::HTTP_2);
    assert_eq!(r.json()["id"], id);
}

#[tokio::test]
async fn stalled_handshake_does_not_block_accepting() {
    let certs = tempfile::tempdir().unwrap();
    let gw = Proc::start(&tls_routes(certs.path()));
    let tls_addr = gw.https.unwrap();
    // Connections that never start their handshake (handshake_timeout_ms is a minute).
    let mut stalled = Vec::new();
    for _ in 0..5 {
        stalled.push(tokio::net::TcpStream::connect(tls_addr).await.unwrap());
    }
    let h1 = Https::new(tls_addr, &ca(certs.path()), Alpn::Http1);
    let (r, _) = h1.get("/healthz", None).await.unwrap();
    assert_eq!(r.status, 200);
    let r = gw
        .client()
        .send(http::Method::GET, "/healthz", &[], "")
        .await;
    assert_eq!(r.status, 200);
    drop(stalled);
}

#[tokio::test]
async fn certificates_reload_with_the_config() {
    let certs = tempfile::tempdir().unwrap();
    let routes = tls_routes(certs.path());
    let gw = Proc::start(&routes);
    let tls_addr = gw.https.unwrap();
    let old_ca = ca(certs.path());
    assert!(
        Https::new(tls_addr, &old_ca, Alpn::Http1)
            .get("/healthz", None)
            .await
            .is_ok()
    );

    // New certificate files, same routes file: SIGHUP applies them.
    let (cert, key, new_ca) = make_cert();
    std::fs::write(certs.path().join("cert.pem"), cert).unwrap();
    std::fs::write(certs.path().join("key.pem"), key).unwrap();
    assert!(gw.reload_with(&routes));
    let (r, _) = Https::new(tls_addr, &new_ca, Alpn::Http1)
        .get("/healthz", None)
        .await
        .expect("new certificate served");
    assert_eq!(r.status, 200);
    assert!(
        Https::new(tls_addr, &old_ca, Alpn::Http1)
            .get("/healthz", None)
            .await
            .is_err(),
        "the old certificate is no longer served"
    );

    // A key that does not exist: the reload is refused and the current cert stays.
    std::fs::remove_file(certs.path().join("key.pem")).unwrap();
    assert!(!gw.reload_with(&routes));
    assert!(gw.log().contains("server.tls.key_file"));
    assert!(
        Https::new(tls_addr, &new_ca, Alpn::Http1)
            .get("/healthz", None)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn stalled_handshake_is_cut_off_and_counted() {
    use tokio::io::AsyncReadExt;
    let certs = tempfile::tempdir().unwrap();
    let gw = Proc::start(&tls_routes_with(certs.path(), 300));
    let mut stalled = tokio::net::TcpStream::connect(gw.https.unwrap())
        .await
        .unwrap();
    let mut buf = [0u8; 64];
    // Well under the default of 10 s: the configured timeout is what closes it.
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), stalled.read(&mut buf))
        .await
        .expect("the gateway closed the stalled connection");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");

    let metrics = gw
        .client()
        .send(http::Method::GET, "/metrics", &[], "")
        .await;
    let samples = edge_common::parse_metrics(std::str::from_utf8(&metrics.body).unwrap());
    assert_eq!(
        edge_common::metric_sum(&samples, &["mediagate_tls_handshake_failures_total"]),
        1.0
    );
}
