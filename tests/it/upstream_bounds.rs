//! What an upstream can make the gateway hold is bounded: answers past
//! `max_answer_bytes` are refused, and of a status answer only a few result URLs of
//! sane length, a short code and a 500-character message are kept (and cached).

use serde_json::json;

use crate::support::{Answer, Fake, Gateway, Routes, family, query_scripted, tasks_provider};

async fn start(fake: &Fake, extra: &str) -> Gateway {
    let routes = Routes::new()
        .provider(
            tasks_provider("one", &fake.url(), extra)
                .replace("urls = '.url'", "urls = '.urls'")
                .replace(
                    "error_message = '.reason'",
                    "error_message = '.reason'\nerror_code = '.code'",
                ),
        )
        .family(family("f", &["one"], &["m1"]));
    Gateway::start(routes).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_status_answer_is_kept_small() {
    let fake = Fake::start().await;
    let gw = start(&fake, "").await;
    // 10,000 URLs, some far too long: 16 sane ones are kept.
    let mut urls: Vec<String> = (0..10_000)
        .map(|n| format!("https://cdn.example/{n}.mp4"))
        .collect();
    urls.insert(0, format!("https://cdn.example/{}", "x".repeat(100_000)));
    let r = query_scripted(
        &gw,
        &fake,
        1,
        Answer::json(200, json!({"status": "done", "urls": urls})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let view = r.json();
    let kept = view["urls"].as_array().unwrap();
    assert_eq!(kept.len(), 16, "{}", kept.len());
    assert_eq!(kept[0], "https://cdn.example/0.mp4");
    assert!(r.body.len() < 4096, "{} bytes", r.body.len());
    // A failure with a huge code and message: both cut.
    let failed =
        json!({"status": "failed", "code": "C".repeat(100_000), "reason": "R".repeat(500_000)});
    let r = query_scripted(&gw, &fake, 2, Answer::json(200, failed)).await;
    let view = r.json();
    assert_eq!(view["error"]["code"].as_str().unwrap().len(), 64);
    assert_eq!(view["error"]["message"].as_str().unwrap().len(), 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_past_the_limit_is_refused() {
    let fake = Fake::start().await;
    let gw = start(&fake, "max_answer_bytes = 65536").await;
    let padding = "p".repeat(70_000);
    let r = query_scripted(
        &gw,
        &fake,
        1,
        Answer::json(200, json!({"status": "queued", "pad": padding})),
    )
    .await;
    crate::support::assert_error(&r, 502, "upstream_error", None);
    // Under the limit, the same shape is read.
    let padding = "p".repeat(60_000);
    let r = query_scripted(
        &gw,
        &fake,
        2,
        Answer::json(200, json!({"status": "queued", "pad": padding})),
    )
    .await;
    assert_eq!(r.json()["status"], "queued", "{}", r.text());
}
