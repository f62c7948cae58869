//! What an upstream says reaches clients and the log only cleaned: our key (whole, any
//! run of eight of its characters, or masked), the host and the brand words are
//! removed before a message is cut to length, the errors of jq programs (which quote
//! the upstream's values) are cleaned as well, and result links lose the key.

use serde_json::json;

use crate::support::{
    Answer, DEMO, Fake, Gateway, MODEL_CENTER, Proc, Routes, UPSTREAM_KEY as KEY, family,
    query_scripted, tasks_provider,
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

/// Every run of eight characters of our key: none may reach a client or the log.
fn key_runs() -> Vec<String> {
    KEY.as_bytes()
        .windows(8)
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect()
}

fn assert_no_key_part(text: &str) {
    let lower = text.to_ascii_lowercase();
    for run in key_runs() {
        assert!(!lower.contains(&run), "{run} of the key in {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_and_masked_forms_of_the_key_are_removed() {
    let fake = Fake::start().await;
    let gw = start(&fake).await;
    let masked = ["upstr…****-123", "upstream-******-123", "upstream-secr"];
    for (n, shown) in masked.into_iter().enumerate() {
        let reason = format!("Incorrect API key provided: {shown}. Try again");
        let answer = Answer::json(200, json!({"status": "failed", "reason": reason}));
        let view = query_scripted(&gw, &fake, n, answer).await.json();
        let message = view["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(
            message, "Incorrect API key provided: [redacted]. Try again",
            "{shown}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn result_links_that_carry_the_key_reach_clients_without_it() {
    let fake = Fake::start().await;
    let gw = start(&fake).await;
    let url = format!("https://cdn.example.com/v.mp4?k={KEY}&sig=1");
    let answer = Answer::json(200, json!({"status": "done", "url": url}));
    let view = query_scripted(&gw, &fake, 1, answer).await.json();
    assert_eq!(view["status"], "completed", "{view}");
    assert_eq!(
        view["video_url"], "https://cdn.example.com/v.mp4?k=REDACTED&sig=1",
        "{view}"
    );
    assert_no_key_part(&view.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_words_in_the_log_are_cleaned_of_the_key() {
    let fake = Fake::start().await;
    let routes = Routes::new()
        .provider(tasks_provider("one", &fake.url(), ""))
        .family(family("f", &["one"], &["m1"]));
    let gw = Proc::start(routes).await;
    let http = gw.client();
    fake.on("POST /tasks", Answer::json(200, json!({"id": "t1"})));
    let body = json!({"model": "m1", "prompt": "p"});
    let id = http.submit_id(MODEL_CENTER, DEMO, &body).await;
    let word = format!("weird {KEY} and {}", &KEY[..12]);
    fake.on("GET /tasks/t1", Answer::json(200, json!({"status": word})));
    let view = http.query(MODEL_CENTER, DEMO, &id).await;
    assert_eq!(view["status"], "processing", "{view}");
    gw.wait_for_log("unmapped upstream status", 1).await;
    let log = gw.log();
    let line = log
        .lines()
        .find(|l| l.contains("unmapped upstream status"))
        .unwrap_or_default();
    let (_, logged) = line.split_once("upstream_status=").unwrap_or_default();
    assert!(logged.contains("weird [redacted] and [redacted]"), "{line}");
    assert_no_key_part(logged);
}
