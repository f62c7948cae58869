//! What an upstream says reaches clients only cleaned: our key, the host and the brand
//! words are removed before a message is cut to length, and the errors of jq programs
//! (which quote the upstream's values) are cleaned as well.

use serde_json::json;

use crate::support::{
    Answer, Fake, Gateway, Routes, UPSTREAM_KEY as KEY, family, query_scripted, tasks_provider,
};

async fn start(fake: &Fake) -> Gateway {
    let routes = Routes::new()
        .provider(tasks_provider("one", &fake.url(), "redact = [\"acme\"]"))
        .family(family("f", &["one"], &["m1"]));
    Gateway::start(routes).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_across_the_length_cut_leaves_no_prefix() {
    let fake = Fake::start().await;
    let gw = start(&fake).await;
    // The reason is cut at 500 characters; the key starts just before the cut.
    for (n, before) in [490, 495, 499].into_iter().enumerate() {
        let reason = format!("{}{KEY} was refused", "x".repeat(before));
        let answer = Answer::json(200, json!({"status": "failed", "reason": reason}));
        let view = query_scripted(&gw, &fake, n, answer).await.json();
        let message = view["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(view["status"], "failed", "{view}");
        assert!(!message.contains("upstream-s"), "{before}: {message}");
        assert!(message.chars().count() <= 500);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jq_errors_are_cleaned_of_the_upstream_s_words() {
    let fake = Fake::start().await;
    let gw = start(&fake).await;
    // `.status` of a string fails, and jq's message quotes the string.
    let answer = Answer::json(200, json!("ACME-gpu-7"));
    let view = query_scripted(&gw, &fake, 1, answer).await.json();
    let message = view["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(view["error"]["code"], "upstream_bad_response", "{view}");
    assert!(message.contains("`query.status` failed"), "{message}");
    assert!(!message.to_ascii_lowercase().contains("acme"), "{message}");
    // A long quoted value is left out whole: not even its start is shown.
    let answer = Answer::json(200, json!(format!("{KEY}-and-more-text")));
    let view = query_scripted(&gw, &fake, 2, answer).await.json();
    let message = view["error"]["message"].as_str().unwrap_or_default();
    assert!(!message.contains("upstream"), "{message}");
    gw.assert_no_panic();
}
