//! The error catalogue of the brief (§2), as far as the gateway core produces it:
//! 400 request errors, 404 for every kind of unreadable task id (all alike), 405 with
//! `Allow`, 404 for unknown paths, 413 and 415. Every refusal has the catalogue shape
//! and a request id. (401 and 403 are in `auth`; 408 in `connections`.)

use bytes::Bytes;
use http::Method;
use serde_json::json;

use crate::support::{
    ALPHA, DEMO, DEMO2, Gateway, Http, MODEL_CENTER, Reply, assert_error, replace_once,
    shipped_routes,
};

const LIMIT: usize = 1024;

/// The shipped routes with a small body limit.
fn routes() -> String {
    replace_once(
        &shipped_routes(),
        "max_body_bytes = 1048576",
        &format!("max_body_bytes = {LIMIT}"),
    )
}

fn auth(key: &str) -> String {
    format!("Bearer {key}")
}

/// POST `body` as given, with a JSON content type.
async fn post_raw(http: &Http, path: &str, body: &'static [u8]) -> Reply {
    http.send(
        Method::POST,
        path,
        &[
            ("authorization", &auth(DEMO)),
            ("content-type", "application/json"),
        ],
        Bytes::from_static(body),
    )
    .await
}

#[tokio::test]
async fn request_body_errors_are_400_with_the_field() {
    let gw = Gateway::start(&routes()).await;
    let http = gw.client();

    for path in [MODEL_CENTER, ALPHA] {
        // Malformed JSON, including an empty body and bytes that are not UTF-8.
        for body in [
            &b"{\"model\":"[..],
            b"not json",
            b"",
            b"{\"model\":\"zeta-5.0\",}",
            b"{\"model\":\"\xff\xfe\"}",
            b"{\"model\":\"zeta-5.0\"} trailing",
        ] {
            let r = post_raw(&http, path, body).await;
            let message = assert_error(&r, 400, "invalid_json", None);
            assert!(message.contains("JSON"), "{message}");
        }
        // Valid JSON that is not an object.
        for body in [&b"[1]"[..], b"\"zeta-5.0\"", b"42", b"null", b"true"] {
            let r = post_raw(&http, path, body).await;
            let message = assert_error(&r, 400, "invalid_json", None);
            assert!(message.contains("object"), "{message}");
        }
        // `model` missing or not a string.
        for body in [
            json!({}),
            json!({"prompt": "a cat"}),
            json!({"model": 5, "prompt": "a cat"}),
            json!({"model": null, "prompt": "a cat"}),
            json!({"model": ["zeta-5.0"], "prompt": "a cat"}),
            json!({"model": {"id": "zeta-5.0"}, "prompt": "a cat"}),
        ] {
            let r = http.post_json(path, DEMO, &body).await;
            let message = assert_error(&r, 400, "missing_model", Some("model"));
            assert!(message.contains("model"), "{message}");
        }
        // A model nobody serves.
        let r = http
            .post_json(path, DEMO, &json!({"model": "sd_9.9", "prompt": "a cat"}))
            .await;
        let message = assert_error(&r, 400, "unknown_model", Some("model"));
        assert!(message.contains("sd_9.9"), "{message}");
    }

    // A model of the other family, on the wrong endpoint, both ways.
    let sent = json!({"model": "alpha2Stable", "prompt": "a cat", "seconds": 10});
    let r = http.post_json(MODEL_CENTER, DEMO, &sent).await;
    let message = assert_error(&r, 400, "unknown_model", Some("model"));
    assert!(message.contains(MODEL_CENTER), "{message}");
    let sent = json!({"model": "sd_2.0_special", "prompt": "a cat", "seconds": 10});
    let r = http.post_json(ALPHA, DEMO, &sent).await;
    let message = assert_error(&r, 400, "unknown_model", Some("model"));
    assert!(message.contains(ALPHA), "{message}");

    assert_still_serving(&gw).await;
}

#[tokio::test]
async fn unreadable_task_ids_are_all_the_same_404() {
    let gw = Gateway::start(&routes()).await;
    let http = gw.client();

    let sent = json!({"model": "sd_2.0_special", "prompt": "a cat"});
    let mine = http.submit(MODEL_CENTER, DEMO, &sent).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let sent =
        json!({"model": "alphaOpen2", "prompt": "a cat", "aspect_ratio": "1:1", "seconds": 4});
    let mine_alpha = http.submit(ALPHA, DEMO, &sent).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let sent = json!({"model": "zeta-5.0", "prompt": "a cat"});
    let theirs = http.submit(MODEL_CENTER, DEMO2, &sent).await["id"]
        .as_str()
        .unwrap()
        .to_string();

    // Positive control: the owner reads its tasks on their own endpoints.
    assert_eq!(
        http.get(&format!("{MODEL_CENTER}/{mine}"), DEMO)
            .await
            .status,
        200
    );
    assert_eq!(
        http.get(&format!("{ALPHA}/{mine_alpha}"), DEMO)
            .await
            .status,
        200
    );
    assert_eq!(
        http.get(&format!("{MODEL_CENTER}/{theirs}"), DEMO2)
            .await
            .status,
        200
    );

    // One character of a real id changed, at several places.
    let tampered: Vec<String> = [6, mine.len() / 2, mine.len() - 3]
        .into_iter()
        .map(|at| {
            let mut chars: Vec<char> = mine.chars().collect();
            chars[at] = if chars[at] == 'A' { 'B' } else { 'A' };
            chars.into_iter().collect()
        })
        .collect();
    let truncated = mine[..mine.len() - 4].to_string();
    let extended = format!("{mine}AAAA");
    let long = format!("task_{}", "A".repeat(4000));

    let mut cases: Vec<(String, String)> = vec![
        (MODEL_CENTER.into(), "task_abc".into()),
        (MODEL_CENTER.into(), "hello".into()),
        (MODEL_CENTER.into(), "task_".into()),
        (MODEL_CENTER.into(), "%FF%00".into()),
        (MODEL_CENTER.into(), long),
        (MODEL_CENTER.into(), truncated),
        (MODEL_CENTER.into(), extended),
        // Another key's task.
        (MODEL_CENTER.into(), theirs.clone()),
        // A task of one endpoint asked for on the other.
        (ALPHA.into(), mine.clone()),
        (MODEL_CENTER.into(), mine_alpha.clone()),
        (ALPHA.into(), "task_abc".into()),
    ];
    cases.extend(tampered.into_iter().map(|t| (MODEL_CENTER.to_string(), t)));

    let mut bodies = Vec::new();
    for (collection, id) in &cases {
        let r = http.get(&format!("{collection}/{id}"), DEMO).await;
        assert_error(&r, 404, "task_not_found", Some("id"));
        bodies.push((id.clone(), r.body));
    }
    // The other key cannot read ours either.
    let r = http.get(&format!("{MODEL_CENTER}/{mine}"), DEMO2).await;
    assert_error(&r, 404, "task_not_found", Some("id"));
    bodies.push((mine.clone(), r.body));

    let (_, first) = &bodies[0];
    for (id, body) in &bodies {
        assert_eq!(
            body, first,
            "the 404 for {id:.40} tells nothing apart from the others"
        );
    }
    assert_still_serving(&gw).await;
}

#[tokio::test]
async fn wrong_method_is_405_with_allow_and_unknown_path_is_404() {
    let gw = Gateway::start(&routes()).await;
    let http = gw.client();
    let key = auth(DEMO);
    let headers = [("authorization", key.as_str())];

    let allow_of = |r: &Reply| -> Vec<String> {
        r.header("allow")
            .expect("405 carries Allow")
            .split(',')
            .map(|m| m.trim().to_string())
            .collect()
    };

    for collection in [MODEL_CENTER, ALPHA] {
        for method in [Method::PUT, Method::DELETE, Method::PATCH] {
            let r = http
                .send(method.clone(), collection, &headers, Bytes::new())
                .await;
            assert_error(&r, 405, "method_not_allowed", None);
            assert_eq!(
                allow_of(&r),
                ["GET", "HEAD", "POST"],
                "{method} {collection}"
            );
        }
        let item = format!("{collection}/task_abc");
        // DELETE deletes a task (tests/it/results.rs).
        for method in [Method::POST, Method::PUT, Method::PATCH] {
            let r = http
                .send(method.clone(), &item, &headers, Bytes::new())
                .await;
            assert_error(&r, 405, "method_not_allowed", None);
            let allow = allow_of(&r);
            assert!(
                allow.iter().any(|m| m == "GET"),
                "{method} {item}: {allow:?}"
            );
            assert!(
                !allow.iter().any(|m| m == method.as_str()),
                "{method} {item}: {allow:?}"
            );
        }
    }
    let r = http.send(Method::POST, "/healthz", &[], Bytes::new()).await;
    assert_error(&r, 405, "method_not_allowed", None);
    assert!(allow_of(&r).iter().any(|m| m == "GET"));

    for path in [
        "/",
        "/v2",
        "/v2/model-center",
        "/v2/model-center/tasks/",
        "/v2/model-center/tasksx",
        "/v2/model-center/tasks/task_abc/cancel",
        "/v1/alpha/video",
        "/v1/alpha/videos/",
        "/v3/model-center/tasks",
        "/V2/model-center/tasks",
        "/metricsx",
    ] {
        for method in [Method::GET, Method::POST] {
            let r = http
                .send(method.clone(), path, &headers, Bytes::new())
                .await;
            assert_error(&r, 404, "not_found", None);
            assert!(r.header("allow").is_none(), "{method} {path}");
        }
    }
    assert_still_serving(&gw).await;
}

/// A valid submission of exactly `len` bytes.
fn body_of_len(len: usize) -> Bytes {
    let head = r#"{"model":"sd_2.0_special","prompt":""#;
    let tail = r#""}"#;
    let pad = len - head.len() - tail.len();
    let body = format!("{head}{}{tail}", "a".repeat(pad));
    assert_eq!(body.len(), len);
    serde_json::from_str::<serde_json::Value>(&body).expect("valid JSON");
    Bytes::from(body)
}

#[tokio::test]
async fn body_limit_is_413_with_and_without_content_length() {
    let gw = Gateway::start(&routes()).await;
    let http = gw.client();
    let key = auth(DEMO);
    let headers = [
        ("authorization", key.as_str()),
        ("content-type", "application/json"),
    ];

    // Declared length: at the limit accepted, one byte more refused.
    let r = http
        .send(Method::POST, MODEL_CENTER, &headers, body_of_len(LIMIT))
        .await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    for len in [LIMIT + 1, 64 * LIMIT] {
        let r = http
            .send(Method::POST, MODEL_CENTER, &headers, body_of_len(len))
            .await;
        let message = assert_error(&r, 413, "body_too_large", None);
        assert!(message.contains(&LIMIT.to_string()), "{message}");
        // The unread rest of the body ends the connection; the client is told so.
        assert_eq!(r.header("connection"), Some("close"));
        next_request_works(&http, &headers).await;
    }

    // Chunked, no Content-Length: the limit holds while reading.
    let chunks =
        |body: Bytes| -> Vec<Bytes> { body.chunks(100).map(Bytes::copy_from_slice).collect() };
    let r = http
        .send_chunked(
            Method::POST,
            MODEL_CENTER,
            &headers,
            chunks(body_of_len(LIMIT)),
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    for len in [LIMIT + 1, 4 * LIMIT] {
        let r = http
            .send_chunked(Method::POST, ALPHA, &headers, chunks(body_of_len(len)))
            .await;
        let message = assert_error(&r, 413, "body_too_large", None);
        assert!(message.contains(&LIMIT.to_string()), "{message}");
        next_request_works(&http, &headers).await;
    }
    assert_still_serving(&gw).await;
}

/// A keep-alive client goes on after a refusal: its next request is answered.
async fn next_request_works(http: &Http, headers: &[(&str, &str)]) {
    let r = http
        .send(Method::POST, MODEL_CENTER, headers, body_of_len(100))
        .await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
}

#[tokio::test]
async fn body_without_json_content_type_is_415() {
    let gw = Gateway::start(&routes()).await;
    let http = gw.client();
    let key = auth(DEMO);
    let body = || Bytes::from(json!({"model": "zeta-5.0", "prompt": "a cat"}).to_string());

    let r = http
        .send(
            Method::POST,
            MODEL_CENTER,
            &[("authorization", &key)],
            body(),
        )
        .await;
    let message = assert_error(&r, 415, "unsupported_media_type", None);
    assert!(message.contains("application/json"), "{message}");

    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonx",
        "text/json",
    ] {
        for path in [MODEL_CENTER, ALPHA] {
            let r = http
                .send(
                    Method::POST,
                    path,
                    &[("authorization", &key), ("content-type", ct)],
                    body(),
                )
                .await;
            assert_error(&r, 415, "unsupported_media_type", None);
        }
    }
    // JSON with parameters is JSON.
    for ct in ["application/json; charset=utf-8", "Application/JSON"] {
        let r = http
            .send(
                Method::POST,
                MODEL_CENTER,
                &[("authorization", &key), ("content-type", ct)],
                body(),
            )
            .await;
        assert_eq!(
            r.status,
            200,
            "{ct}: {:?}",
            String::from_utf8_lossy(&r.body)
        );
    }
    assert_still_serving(&gw).await;
}

#[tokio::test]
async fn every_response_carries_a_request_id() {
    let gw = Gateway::start(&routes()).await;
    let http = gw.client();
    let key = auth(DEMO);
    let submit = json!({"model": "zeta-5.0", "prompt": "a cat"}).to_string();

    // A client's own id comes back, on success and on every kind of refusal.
    let json_post = [
        ("authorization", key.as_str()),
        ("content-type", "application/json"),
    ];
    let keyed = [("authorization", key.as_str())];
    type Headers<'a> = &'a [(&'a str, &'a str)];
    let cases: [(Method, &str, Headers, &str); 7] = [
        (Method::POST, MODEL_CENTER, &json_post, &submit),
        (Method::POST, MODEL_CENTER, &json_post, "{"),
        (Method::PUT, MODEL_CENTER, &keyed, ""),
        (Method::GET, "/nope", &keyed, ""),
        (Method::GET, "/v2/model-center/tasks/task_x", &keyed, ""),
        (Method::GET, MODEL_CENTER, &[], ""),
        (Method::GET, "/healthz", &[], ""),
    ];
    let mut statuses = Vec::new();
    for (i, (method, path, headers, body)) in cases.into_iter().enumerate() {
        let mine = format!("client-req_{i}.abc");
        let mut headers = headers.to_vec();
        headers.push(("x-request-id", &mine));
        let r = http
            .send(method.clone(), path, &headers, body.to_string())
            .await;
        assert_eq!(
            r.header("x-request-id"),
            Some(mine.as_str()),
            "{method} {path} answered {}",
            r.status
        );
        statuses.push(r.status.as_u16());
    }
    assert_eq!(statuses, [200, 400, 405, 404, 404, 401, 200]);

    // Without one, the gateway makes a fresh id for each request.
    let a = http.get("/healthz", DEMO).await;
    let b = http.get("/nope", DEMO).await;
    let (a, b) = (a.header("x-request-id"), b.header("x-request-id"));
    assert!(a.is_some_and(|a| !a.is_empty()), "{a:?}");
    assert!(b.is_some_and(|b| !b.is_empty()), "{b:?}");
    assert_ne!(a, b);
}

/// After everything a test threw at it, the gateway still answers and never panicked.
async fn assert_still_serving(gw: &Gateway) {
    let r = gw.client().get("/healthz", DEMO).await;
    assert_eq!(r.status, 200);
    gw.assert_no_panic();
}

#[tokio::test]
async fn headers_sent_twice_and_signed_numbers_are_refused() {
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();
    let body = json!({"model": "sd_2.0_special", "prompt": "a fox"}).to_string();
    let json_type = ("content-type", "application/json");
    // Which of two `Authorization` headers counts would be a guess: neither does.
    for second in [auth(DEMO), auth(DEMO2), auth("sk-nope")] {
        let headers = [("authorization", auth(DEMO)), ("authorization", second)];
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = http
            .send(Method::GET, MODEL_CENTER, &headers, Bytes::new())
            .await;
        let message = assert_error(&r, 400, "repeated_header", None);
        assert!(message.contains("`Authorization`"), "{message}");
    }
    let demo = auth(DEMO);
    let twice = [
        ("authorization", demo.as_str()),
        json_type,
        ("idempotency-key", "a"),
        ("idempotency-key", "b"),
    ];
    let r = http
        .send(Method::POST, MODEL_CENTER, &twice, body.clone())
        .await;
    let message = assert_error(&r, 400, "repeated_header", None);
    assert!(message.contains("`Idempotency-Key`"), "{message}");
    let once = [
        ("authorization", demo.as_str()),
        json_type,
        ("idempotency-key", "a"),
    ];
    let r = http.send(Method::POST, MODEL_CENTER, &once, body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.json()["id"].as_str().unwrap_or_default().to_string();

    // `str::parse` takes `+5` (`%2B5`); a query parameter of digits does not.
    for wait in ["%2B5", "+5", "5.0", "%205"] {
        let r = http
            .get(&format!("{MODEL_CENTER}/{id}?wait={wait}"), DEMO)
            .await;
        assert_error(&r, 400, "invalid_parameter", Some("wait"));
    }
    assert_eq!(
        http.get(&format!("{MODEL_CENTER}/{id}?wait=0"), DEMO)
            .await
            .status,
        200
    );
}
