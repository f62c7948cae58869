//! Links and redirects an upstream hands the gateway may not lead it into a private
//! network: the address connected to is judged after resolution, so numeric host
//! forms, trailing dots and names that resolve to loopback are refused too. The
//! provider's own origin (here on loopback, as every fake is) stays reachable, and
//! `allow_private_networks` opens named networks.

use serde_json::json;

use crate::support::{
    Answer, DEMO, Fake, Gateway, Http, MODEL_CENTER, Routes, family, tasks_provider,
};

/// Provider `one` at `fake` whose content path is the first result URL; `extra` lines
/// go into its table.
async fn start(fake: &Fake, extra: &str) -> Gateway {
    let content = "\n[providers.one.content]\npath = '.urls[0]'\ntimeout_ms = 1000\n";
    let routes = Routes::new()
        .provider(tasks_provider("one", &fake.url(), extra) + content)
        .family(family("f", &["one"], &["m1"]));
    Gateway::start(routes).await
}

/// A provider `one` on loopback, and another loopback service with something to hide
/// (`GET /secret`) that links and redirects may point at.
async fn beside_an_internal_service() -> (Fake, Fake, Gateway) {
    let fake = Fake::start().await;
    let internal = Fake::start().await;
    internal.on("GET /secret", Answer::raw(200, "text/plain", "metadata"));
    let gw = start(&fake, "").await;
    (fake, internal, gw)
}

/// A completed task whose result URL is `url`; the gateway's content answer for it.
async fn content_of(http: &Http, fake: &Fake, n: usize, url: &str) -> crate::support::Reply {
    let upstream_id = format!("t{n}");
    fake.on("POST /tasks", Answer::json(200, json!({"id": upstream_id})));
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
        .await;
    fake.on(
        &format!("GET /tasks/{upstream_id}"),
        Answer::json(200, json!({"status": "done", "url": url})),
    );
    let done = http.query(MODEL_CENTER, DEMO, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    http.get(&format!("{MODEL_CENTER}/{id}/content"), DEMO)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_into_private_networks_are_refused_whatever_their_spelling() {
    let (fake, internal, gw) = beside_an_internal_service().await;
    let http = gw.client();
    let port = internal.addr.port();
    let own_host_other_port = format!("http://127.0.0.1:{port}/secret");
    let spellings = [
        own_host_other_port,
        format!("http://127.1:{port}/secret"),
        format!("http://2130706433:{port}/secret"),
        format!("http://0x7f000001:{port}/secret"),
        format!("http://0177.0.0.1:{port}/secret"),
        format!("http://localhost:{port}/secret"),
        format!("http://localhost.:{port}/secret"),
        format!("http://[::ffff:127.0.0.1]:{port}/secret"),
        format!("http://0:{port}/secret"),
    ];
    for (n, url) in spellings.iter().enumerate() {
        let r = content_of(&http, &fake, n, url).await;
        assert_eq!(r.status, 502, "{url}: {}", r.text());
        assert_eq!(r.error_code(), "upstream_error", "{url}");
        assert!(!r.text().contains("metadata"), "{url}");
    }
    let reached: Vec<String> = internal.take().iter().map(|s| s.line()).collect();
    assert!(
        reached.is_empty(),
        "the internal service was reached: {reached:?}"
    );
    gw.assert_no_panic();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_into_private_networks_are_refused_after_resolution() {
    let (fake, internal, gw) = beside_an_internal_service().await;
    let http = gw.client();
    let port = internal.addr.port();
    // The link is the provider's own origin, which redirects to a numeric loopback.
    let own = format!("{}/files/1", fake.url());
    fake.on(
        "GET /files/1",
        Answer::raw(302, "text/plain", "")
            .header("location", &format!("http://127.1:{port}/secret")),
    );
    let r = content_of(&http, &fake, 1, &own).await;
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(
        r.error_message().contains("private network"),
        "{}",
        r.text()
    );
    assert!(
        internal.take().is_empty(),
        "the internal service was reached"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_own_origin_and_listed_networks_stay_reachable() {
    let fake = Fake::start().await;
    let storage = Fake::start().await;
    storage.on("GET /bucket/v.mp4", Answer::raw(200, "video/mp4", "MP4"));
    fake.on("GET /files/1", Answer::raw(200, "video/mp4", "OWN"));
    let gw = start(&fake, "allow_private_networks = [\"127.0.0.0/8\"]").await;
    let http = gw.client();
    let own = format!("{}/files/1", fake.url());
    let r = content_of(&http, &fake, 1, &own).await;
    assert_eq!((r.status.as_u16(), &r.body[..]), (200, &b"OWN"[..]));
    // A numeric spelling of a listed network, resolved and allowed.
    let port = storage.addr.port();
    let r = content_of(
        &http,
        &fake,
        2,
        &format!("http://127.1:{port}/bucket/v.mp4"),
    )
    .await;
    assert_eq!(
        (r.status.as_u16(), &r.body[..]),
        (200, &b"MP4"[..]),
        "{}",
        r.text()
    );
    assert_eq!(storage.only().line(), "GET /bucket/v.mp4");
}

#[tokio::test]
async fn an_unparsable_network_is_a_problem_of_its_key() {
    let routes = Routes::new()
        .provider(tasks_provider(
            "one",
            "http://127.0.0.1:9",
            "allow_private_networks = [\"10.0.0.0/40\"]",
        ))
        .family(family("f", &["one"], &["m1"]));
    let dir = crate::support::ConfigDir::new(routes);
    let e = mediagate::start(&dir.routes_path())
        .await
        .err()
        .expect("refused");
    let text = e.to_string();
    assert!(
        text.contains("providers.one.allow_private_networks"),
        "{text}"
    );
}
