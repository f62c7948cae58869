//! The content route's answer: what the upstream sends is passed on, but it is the key
//! holder's own, so shared caches may not keep it, and browsers may not sniff its type.

use serde_json::json;

use crate::support::{
    Answer, DEMO, Fake, Gateway, MODEL_CENTER, Routes, done_task_with_files, family,
    tasks_provider_with_files,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_is_private_unsniffed_and_keeps_its_encoding() {
    let (fake, gw) = done_task_with_files("").await;
    let http = gw.client();
    fake.on(
        "GET /files/t1",
        Answer::raw(200, "video/mp4", &b"\x1f\x8bGZ"[..])
            .header("cache-control", "public, max-age=3600")
            .header("content-encoding", "gzip"),
    );
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
        .await;
    let r = http
        .get(&format!("{MODEL_CENTER}/{id}/content"), DEMO)
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("cache-control"), Some("private, max-age=3600"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(&r.body[..], b"\x1f\x8bGZ");
}

/// On the gateway's own TLS listener, the content link is https: a client that
/// follows it sends its key, which must never go in cleartext.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_formed_on_the_tls_listener_are_https() {
    use crate::support::{Alpn, Certs, ConfigDir, Http};
    let certs = Certs::new();
    let fake = Fake::start().await;
    let routes = Routes::new()
        .provider(tasks_provider_with_files("one", &fake.url()))
        .family(family("f", &["one"], &["m1"]))
        .server(
            "[server.tls]\nlisten = \"127.0.0.1:0\"\ncert_file = \"cert.pem\"\nkey_file = \"key.pem\"\n",
        );
    let dir = ConfigDir::new(routes)
        .with("cert.pem", &certs.leaf_pem)
        .with("key.pem", &certs.key_pem);
    let gw = Gateway::start_in(dir).await;
    fake.on("POST /tasks", Answer::json(200, json!({"id": "t1"})));
    fake.on(
        "GET /tasks/t1",
        Answer::json(200, json!({"status": "done"})),
    );
    for alpn in [Alpn::Http1, Alpn::Http2] {
        let https = Http::tls(gw.tls_addr.unwrap(), &certs.ca_der, alpn);
        let id = https
            .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
            .await;
        let task = https.query(MODEL_CENTER, DEMO, &id).await;
        let link = task["video_url"].as_str().unwrap_or_default();
        assert!(link.starts_with("https://"), "{task}");
        assert!(
            link.ends_with(&format!("{MODEL_CENTER}/{id}/content")),
            "{task}"
        );
    }
    // A Host with userinfo is not made into a link.
    let http = gw.client();
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
        .await;
    let r = http
        .send(
            http::Method::GET,
            &format!("{MODEL_CENTER}/{id}"),
            &[
                ("authorization", "Bearer sk-demo"),
                ("host", "evil.example@gw.example"),
            ],
            bytes::Bytes::new(),
        )
        .await;
    let link = r.json()["video_url"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(link, format!("{MODEL_CENTER}/{id}/content"));
}

/// A content step gives one result: `…/content/1` is no path of a task of its.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_step_has_one_result_only() {
    let (fake, gw) = done_task_with_files("").await;
    let http = gw.client();
    fake.on(
        "GET /files/t1",
        Answer::raw(200, "video/mp4", &b"first"[..]),
    );
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
        .await;
    let first = http
        .get(&format!("{MODEL_CENTER}/{id}/content/0"), DEMO)
        .await;
    assert_eq!(&first.body[..], b"first");
    let r = http
        .get(&format!("{MODEL_CENTER}/{id}/content/1"), DEMO)
        .await;
    crate::support::assert_error(&r, 404, "not_found", None);
}
