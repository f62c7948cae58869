//! Cleartext HTTP/2 with prior knowledge (h2c, no upgrade): the whole interface works
//! on it, with concurrent streams, and refusals leave the connection usable.

use bytes::Bytes;
use http::{Method, Version};
use serde_json::json;

use crate::support::{
    ALPHA, DEMO, Gateway, MODEL_CENTER, assert_error, replace_once, shipped_routes,
};

#[tokio::test]
async fn the_interface_works_over_h2c() {
    let routes = replace_once(
        &shipped_routes(),
        "max_body_bytes = 1048576",
        "max_body_bytes = 1024",
    );
    let gw = Gateway::start(&routes).await;
    let h2 = gw.client_h2();

    let r = h2.send(Method::GET, "/healthz", &[], Bytes::new()).await;
    assert_eq!(r.version, Version::HTTP_2);
    assert_eq!(r.status, 200);
    assert!(r.header("x-request-id").is_some());

    // Submit and poll both families, all streams on the one connection, at once.
    let mut runs = tokio::task::JoinSet::new();
    for i in 0..8 {
        let h2 = h2.clone();
        runs.spawn(async move {
            let (collection, body) = if i % 2 == 0 {
                (
                    MODEL_CENTER,
                    json!({"model": "iota3.0-r2v", "prompt": format!("cat {i}")}),
                )
            } else {
                (
                    ALPHA,
                    json!({"model": "alphaOpen2", "prompt": format!("dog {i}"), "aspect_ratio": "4:3", "seconds": 8}),
                )
            };
            let r = h2.post_json(collection, DEMO, &body).await;
            assert_eq!(r.version, Version::HTTP_2);
            assert_eq!(r.status, 200, "{:?}", r.text());
            let created = r.json();
            let done = h2
                .wait_done(collection, DEMO, created["id"].as_str().unwrap())
                .await;
            assert_eq!(done["status"], "completed", "{done}");
            assert_eq!(done["model"], body["model"]);
            assert!(done["video_url"].as_str().is_some(), "{done}");
        });
    }
    while let Some(run) = runs.join_next().await {
        if let Err(e) = run {
            std::panic::resume_unwind(e.into_panic());
        }
    }

    // Refusals have the same shape and headers as on HTTP/1.1.
    let r = h2.get(&format!("{MODEL_CENTER}/task_abc"), "sk-nope").await;
    assert_eq!(r.version, Version::HTTP_2);
    assert_error(&r, 401, "invalid_api_key", None);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    let r = h2.get(&format!("{MODEL_CENTER}/task_abc"), DEMO).await;
    assert_error(&r, 404, "task_not_found", Some("id"));
    let r = h2
        .send(
            Method::DELETE,
            MODEL_CENTER,
            &[("authorization", "Bearer sk-demo")],
            "",
        )
        .await;
    assert_error(&r, 405, "method_not_allowed", None);
    assert_eq!(r.header("allow"), Some("GET, HEAD, POST"));
    let r = h2.get(MODEL_CENTER, DEMO).await;
    assert_eq!((r.version, r.status.as_u16()), (Version::HTTP_2, 200));
    assert_eq!(r.json()["object"], "list");
    let sent = json!({"model": "deltaq3-pro", "prompt": "x", "duration": 17});
    let r = h2.post_json(MODEL_CENTER, DEMO, &sent).await;
    assert_error(&r, 400, "invalid_parameter", Some("duration"));

    // Over the body limit, with a declared length and streamed: 413, and the
    // connection goes on serving.
    let auth = format!("Bearer {DEMO}");
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    let big = json!({"model": "zeta-5.0", "prompt": "a".repeat(4096)}).to_string();
    let r = h2
        .send(Method::POST, MODEL_CENTER, &headers, big.clone())
        .await;
    assert_eq!(r.version, Version::HTTP_2);
    assert_error(&r, 413, "body_too_large", None);
    let chunks = big
        .as_bytes()
        .chunks(256)
        .map(Bytes::copy_from_slice)
        .collect();
    let r = h2
        .send_chunked(Method::POST, MODEL_CENTER, &headers, chunks)
        .await;
    assert_error(&r, 413, "body_too_large", None);
    let sent = json!({"model": "zeta-5.0", "prompt": "a cat"});
    let r = h2.post_json(MODEL_CENTER, DEMO, &sent).await;
    assert_eq!(r.status, 200, "{:?}", r.text());
    assert_eq!(r.json()["object"], "image");
    gw.assert_no_panic();
}
