//! HTTPS upstreams: a fake provider behind a certificate from a test CA (rcgen),
//! trusted through the provider's `ca_file`; HTTP/2 when the upstream offers it.

mod common;
mod fakes;

use std::sync::Arc;

use common::{DEMO, Gateway, MODEL_CENTER};
use fakes::{Canned, Fake, family, routes};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::json;

/// A CA (PEM) and a server config for `localhost` signed by it.
fn test_ca(alpn: &[&[u8]]) -> (String, rustls::ServerConfig) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "mediagate test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();

    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![CertificateDer::from(leaf.der().to_vec())],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
    )
    .unwrap();
    tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    (ca.pem(), tls)
}

fn block(name: &str, port: u16, ca_file: Option<&std::path::Path>) -> String {
    let ca = ca_file.map_or(String::new(), |p| {
        format!("ca_file = {:?}", p.display().to_string())
    });
    format!(
        r#"
[providers.{name}]
base_url = "https://localhost:{port}/api"
auth = {{ secret_env = "FAKE_UPSTREAM_KEY" }}
{ca}
[providers.{name}.submit]
path = '"/tasks"'
id = '.id'
[providers.{name}.query]
path = '"/tasks/\($id)"'
status = '.status'
status_map = {{ running = "processing", done = "completed" }}
urls = '.url'
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstream_with_an_extra_ca_over_http2_and_http1() {
    let dir = tempfile::tempdir().unwrap();
    let (ca_pem, h2_tls) = test_ca(&[b"h2", b"http/1.1"]);
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();
    let h2 = Fake::start_tls(h2_tls).await;
    let (ca1_pem, h1_tls) = test_ca(&[b"http/1.1"]);
    let ca1_file = dir.path().join("ca1.pem");
    std::fs::write(&ca1_file, ca1_pem).unwrap();
    let h1 = Fake::start_tls(h1_tls).await;
    // A third authority, which the provider does not trust.
    let (_, untrusted_tls) = test_ca(&[b"h2"]);
    let untrusted = Fake::start_tls(untrusted_tls).await;

    let providers = block("h2", h2.addr.port(), Some(&ca_file))
        + &block("h1", h1.addr.port(), Some(&ca1_file))
        + &block("untrusted", untrusted.addr.port(), None);
    let families = family("a", "model-center", &["h2"], "m-h2", "m-h2")
        + &family("b", "model-center", &["h1"], "m-h1", "m-h1")
        + &family("c", "model-center", &["untrusted"], "m-u", "m-u");
    let gw = Gateway::start_with_env(
        &routes(&providers, &families),
        &[("FAKE_UPSTREAM_KEY", "k-tls")],
    );
    let http = gw.client();

    for (fake, model, version) in [
        (&h2, "m-h2", http::Version::HTTP_2),
        (&h1, "m-h1", http::Version::HTTP_11),
    ] {
        fake.on("POST /api/tasks", Canned::json(200, json!({"id": "t1"})));
        fake.on(
            "GET /api/tasks/t1",
            Canned::json(
                200,
                json!({"status": "done", "url": "https://cdn.example/t1.mp4"}),
            ),
        );
        let created = http
            .submit(MODEL_CENTER, DEMO, &json!({"model": model, "prompt": "p"}))
            .await;
        let r = http
            .get(
                &format!("{MODEL_CENTER}/{}", created["id"].as_str().unwrap()),
                DEMO,
            )
            .await;
        assert_eq!(r.json()["video_url"], "https://cdn.example/t1.mp4");
        let seen = fake.take();
        assert_eq!(seen.len(), 2);
        // The query reused the submit's pooled connection.
        assert_eq!(seen[0].peer, seen[1].peer);
        assert_eq!(seen[0].line(), "POST /api/tasks");
        assert_eq!(seen[0].json(), json!({"model": model, "prompt": "p"}));
        assert_eq!(seen[0].header("authorization"), Some("Bearer k-tls"));
        assert!(seen.iter().all(|s| s.version == version), "{model}");
    }

    // A certificate from an unknown authority: nothing is sent, 502.
    let r = http
        .post_json(MODEL_CENTER, DEMO, &json!({"model": "m-u", "prompt": "p"}))
        .await;
    assert_eq!(r.status, 502);
    assert!(untrusted.take().is_empty());
}
