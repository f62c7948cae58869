//! HTTPS upstreams: a fake provider behind a certificate from a test CA, trusted
//! through the provider's `ca_file`; HTTP/2 when the upstream offers it.

use serde_json::json;

use crate::support::{
    Answer, Certs, ConfigDir, DEMO, Fake, Gateway, MODEL_CENTER, Routes, UPSTREAM_KEY, family,
    tasks_provider,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstream_with_an_extra_ca_over_http2_and_http1() {
    let (h2_certs, h1_certs, untrusted_certs) = (Certs::new(), Certs::new(), Certs::new());
    let h2 = Fake::start_tls(h2_certs.server_config(&[b"h2", b"http/1.1"])).await;
    let h1 = Fake::start_tls(h1_certs.server_config(&[b"http/1.1"])).await;
    // A third authority, which the provider does not trust.
    let untrusted = Fake::start_tls(untrusted_certs.server_config(&[b"h2"])).await;

    let base = |fake: &Fake| format!("https://localhost:{}/api", fake.addr.port());
    // One worker: the pooled connection reused below is that worker's, whichever
    // connection of the test's client each request comes on.
    let routes = Routes::new()
        .server("workers = 1")
        .provider(tasks_provider("h2", &base(&h2), "ca_file = \"ca.pem\""))
        .provider(tasks_provider("h1", &base(&h1), "ca_file = \"ca1.pem\""))
        .provider(tasks_provider("untrusted", &base(&untrusted), ""))
        .family(family("a", &["h2"], &["m-h2"]))
        .family(family("b", &["h1"], &["m-h1"]))
        .family(family("c", &["untrusted"], &["m-u"]))
        .render();
    let dir = ConfigDir::new(&routes)
        .with("ca.pem", &h2_certs.ca_pem)
        .with("ca1.pem", &h1_certs.ca_pem);
    let gw = Gateway::start_in(dir).await;
    let http = gw.client();

    for (fake, model, version) in [
        (&h2, "m-h2", http::Version::HTTP_2),
        (&h1, "m-h1", http::Version::HTTP_11),
    ] {
        fake.on("POST /api/tasks", Answer::json(200, json!({"id": "t1"})));
        fake.on(
            "GET /api/tasks/t1",
            Answer::json(
                200,
                json!({"status": "done", "url": "https://cdn.example/t1.mp4"}),
            ),
        );
        let id = http
            .submit_id(MODEL_CENTER, DEMO, &json!({"model": model, "prompt": "p"}))
            .await;
        let done = http.query(MODEL_CENTER, DEMO, &id).await;
        assert_eq!(done["video_url"], "https://cdn.example/t1.mp4");
        let seen = fake.take();
        assert_eq!(seen.len(), 2);
        // The query reused the submit's pooled connection.
        assert_eq!(seen[0].peer, seen[1].peer);
        assert_eq!(seen[0].line(), "POST /api/tasks");
        assert_eq!(seen[0].json(), json!({"model": model, "prompt": "p"}));
        assert_eq!(
            seen[0].header("authorization"),
            Some(format!("Bearer {UPSTREAM_KEY}").as_str())
        );
        assert!(seen.iter().all(|s| s.version == version), "{model}");
    }

    // A certificate from an unknown authority: nothing is sent, 502.
    let r = http
        .post_json(MODEL_CENTER, DEMO, &json!({"model": "m-u", "prompt": "p"}))
        .await;
    assert_eq!(r.status, 502);
    assert!(untrusted.take().is_empty());
}
