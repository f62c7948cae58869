//! Seconds of video are counted from what the model produces: a number the schema
//! calls an integer (`10.0`, `1e1`) is counted and forwarded as that integer, a submit
//! without a length counts its family's `default_seconds`, and a length no model
//! produces is refused, so neither a quota nor a sum can be passed by overflowing it.

use http::Method;
use serde_json::json;

use crate::support::{
    ALPHA, Answer, Fake, Gateway, Http, MODEL_CENTER, Reply, Routes, assert_error, family, operator,
};

/// A submit whose body is written exactly as `body` (serde would write `10.0` as such,
/// but `1e1` never).
async fn post_text(http: &Http, path: &str, body: &str) -> Reply {
    let headers = [
        ("authorization", "Bearer sk-demo"),
        ("content-type", "application/json"),
    ];
    http.send(Method::POST, path, &headers, body.to_string())
        .await
}

fn center(duration: &str) -> String {
    format!(r#"{{"model": "m1", "prompt": "x", "duration": {duration}}}"#)
}

#[tokio::test]
async fn seconds_written_as_floats_or_left_out_count_what_the_model_produces() {
    let fake = Fake::start().await;
    fake.on("POST /v2/model-center/tasks", Answer::queued("up-1"));
    let routes =
        Routes::upstream(&fake.url(), "").demo_key("quota = { video_seconds_per_day = 20 }");
    let gw = Gateway::start(routes).await;
    let http = gw.client();

    assert_eq!(
        post_text(&http, MODEL_CENTER, &center("1e1")).await.status,
        200
    );
    assert_eq!(
        post_text(&http, MODEL_CENTER, &center("5.0")).await.status,
        200
    );
    // What the provider received is the integer, whatever the client wrote.
    let sent: Vec<String> = fake
        .take()
        .iter()
        .map(|s| String::from_utf8_lossy(&s.body).into_owned())
        .collect();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(
        sent[0].contains(r#""duration":10"#) && !sent[0].contains("10."),
        "{sent:?}"
    );
    assert!(
        sent[1].contains(r#""duration":5"#) && !sent[1].contains("5."),
        "{sent:?}"
    );

    // 15 used of 20: a submit without a length counts the family's 5 seconds.
    let no_length = r#"{"model": "m1", "prompt": "x"}"#;
    assert_eq!(post_text(&http, MODEL_CENTER, no_length).await.status, 200);
    for over in [center("1.0"), no_length.to_string(), center("1e3")] {
        let r = post_text(&http, MODEL_CENTER, &over).await;
        let message = assert_error(&r, 429, "quota_exceeded", None);
        assert!(
            message.contains("video_seconds_per_day"),
            "{over}: {message}"
        );
    }
    // Lengths no model produces are refused before any quota is looked at.
    for absurd in [
        "18446744073709551615",
        "9223372036854775807",
        "1e300",
        "3601",
    ] {
        let r = post_text(&http, MODEL_CENTER, &center(absurd)).await;
        assert_error(&r, 400, "invalid_parameter", Some("duration"));
    }
    assert_eq!(
        fake.take().len(),
        1,
        "only the counted submit reached the provider"
    );
    let usage = operator(gw.dir(), &["usage", "--key", "demo"]);
    let row = usage.lines().nth(1).unwrap_or_default();
    assert!(row.ends_with("\tdemo\tm1\t3\t0\t0\t20\t0\t0"), "{usage}");
}

#[tokio::test]
async fn alpha_seconds_written_as_floats_count_as_integers() {
    let fake = Fake::start().await;
    fake.on("POST /v2/model-center/tasks", Answer::queued("up-1"));
    let routes = Routes::upstream(&fake.url(), "")
        .family(family("alpha", &["up"], &["a1"]).alpha())
        .demo_key("quota = { video_seconds_per_day = 20 }");
    let gw = Gateway::start(routes).await;
    let http = gw.client();
    let alpha = |seconds: &str| {
        format!(r#"{{"model": "a1", "prompt": "x", "aspect_ratio": "16:9", "seconds": {seconds}}}"#)
    };
    for seconds in ["10.0", "10"] {
        assert_eq!(post_text(&http, ALPHA, &alpha(seconds)).await.status, 200);
    }
    let r = post_text(&http, ALPHA, &alpha("1.0")).await;
    assert_error(&r, 429, "quota_exceeded", None);
    let sent = fake.take();
    assert_eq!(sent[0].json()["seconds"], json!(10));
    assert!(sent[0].json()["seconds"].is_i64());
}

#[tokio::test]
async fn a_huge_length_neither_overflows_a_sum_nor_locks_a_key_out() {
    let gw = Gateway::start(Routes::simulated(&["m1"])).await;
    let http = gw.client();
    for _ in 0..2 {
        let r = post_text(&http, MODEL_CENTER, &center("9223372036854775807")).await;
        assert_error(&r, 400, "invalid_parameter", Some("duration"));
    }
    assert_eq!(
        post_text(&http, MODEL_CENTER, &center("7")).await.status,
        200
    );
    assert_eq!(
        post_text(&http, MODEL_CENTER, &center("8")).await.status,
        200
    );
    let usage = operator(gw.dir(), &["usage"]);
    let row = usage.lines().nth(1).unwrap_or_default();
    assert!(row.ends_with("\tdemo\tm1\t2\t0\t0\t15\t0\t0"), "{usage}");
}
