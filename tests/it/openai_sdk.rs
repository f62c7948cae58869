//! `/v1/videos` driven by the official OpenAI SDKs (Python and Node, pinned by
//! `.ci/openai-sdk`), with the scripts of `tests/openai/`, against a gateway on the
//! shipped routes.toml (a fake provider where the test must see what it is sent).
//! Skipped, saying so, where the SDKs cannot be installed, except in CI.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::openai::VIDEOS;
use crate::support::sdk::{self, Sdks, run_json};
use crate::support::{
    Answer, DEMO, Fake, Gateway, Routes, eventually, family, replace_once, shipped_routes,
    tasks_provider,
};

/// The simulator's video, as it serves every completed video task.
const SAMPLE: &[u8] = include_bytes!("../../assets/simulator/sample.mp4");

/// The Python script's output for `scenario` against `gw` with the demo key.
async fn python(sdks: &Sdks, gw: &Gateway, scenario: &str, args: &[&str]) -> Value {
    let base = format!("http://{}/v1", gw.addr);
    let script = sdk::script("videos.py");
    let script = script.to_str().unwrap();
    let all: Vec<&str> = [script, &base, DEMO, scenario]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    run_json(&sdks.python, &all).await
}

#[tokio::test]
async fn python_create_and_poll_completes_and_download_content_writes_the_providers_bytes() {
    let Some(sdks) = sdk::available() else { return };
    let gw = Gateway::start(shipped_routes()).await;
    let out = gw.dir().path().join("video.mp4");
    let video = python(sdks, &gw, "create_poll_download", &[out.to_str().unwrap()]).await;
    assert_eq!(video["status"], "completed", "{video}");
    assert_eq!(video["object"], "video");
    assert_eq!(video["model"], "deltaq3-pro");
    assert_eq!(
        (video["seconds"].as_str(), video["size"].as_str()),
        (Some("8"), Some("1280x720"))
    );
    assert_eq!(video["progress"], 100);
    assert!(video["id"].as_str().unwrap().starts_with("task_"));
    assert_eq!(std::fs::read(&out).unwrap(), SAMPLE);
}

#[tokio::test]
async fn python_list_auto_paginates_over_25_videos_without_gaps_or_repeats() {
    let Some(sdks) = sdk::available() else { return };
    let gw = Gateway::start(shipped_routes()).await;
    let out = python(sdks, &gw, "list_all", &["25"]).await;
    let ids = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_str().unwrap().to_string())
            .collect()
    };
    let mut created = ids(&out["created"]);
    let listed = ids(&out["listed"]);
    assert_eq!(created.len(), 25);
    // Newest first, as OpenAI's default order; pages of 4, so seven requests.
    created.reverse();
    assert_eq!(listed, created);
    assert_eq!(listed.iter().collect::<BTreeSet<_>>().len(), 25);
}

#[tokio::test]
async fn python_delete_removes_the_video_from_the_listing() {
    let Some(sdks) = sdk::available() else { return };
    let gw = Gateway::start(shipped_routes()).await;
    let out = python(sdks, &gw, "delete", &[]).await;
    let id = out["created"].as_str().unwrap();
    assert_eq!(
        out["deleted"],
        json!({"id": id, "object": "video.deleted", "deleted": true})
    );
    assert_eq!(out["listed"], json!([]));
}

#[tokio::test]
async fn python_refusals_come_out_as_the_sdks_typed_exceptions() {
    let Some(sdks) = sdk::available() else { return };
    let gw = Gateway::start(shipped_routes()).await;
    let out = python(sdks, &gw, "refusals", &[]).await;
    let expect = |name: &str, exception: &str, status: u16, code: &str, param: Value| {
        let got = &out[name];
        assert_eq!(got["exception"], exception, "{name}: {got}");
        assert_eq!(got["status"], status, "{name}: {got}");
        assert_eq!(got["code"], code, "{name}: {got}");
        assert_eq!(got["param"], param, "{name}: {got}");
    };
    expect(
        "bad_seconds",
        "BadRequestError",
        400,
        "invalid_parameter",
        json!("seconds"),
    );
    expect(
        "wrong_key",
        "AuthenticationError",
        401,
        "invalid_api_key",
        Value::Null,
    );
    expect(
        "not_found",
        "NotFoundError",
        404,
        "task_not_found",
        json!("id"),
    );
    expect("remix", "NotFoundError", 404, "task_not_found", json!("id"));
}

#[tokio::test]
async fn python_sees_a_rate_limit_as_rate_limit_error() {
    let Some(sdks) = sdk::available() else { return };
    let routes =
        Routes::simulated(&["m1"]).demo_key("limits = { rate_per_second = 0.01, burst = 1 }");
    let gw = Gateway::start(routes).await;
    let out = python(sdks, &gw, "rate_limited", &[]).await;
    let seen = out["seen"].as_array().unwrap();
    assert_eq!(seen[0]["exception"], Value::Null, "{out}");
    for refused in &seen[1..] {
        assert_eq!(refused["exception"], "RateLimitError", "{out}");
        assert_eq!(refused["code"], "rate_limited", "{out}");
    }
}

#[tokio::test]
async fn python_form_upload_reaches_the_provider_as_a_link_serving_the_uploaded_bytes() {
    let Some(sdks) = sdk::available() else { return };
    let fake = Fake::start().await;
    let routes = Routes::new()
        .storage("file://media")
        .provider(tasks_provider("up", &fake.url(), ""))
        .family(family("test", &["up"], &["m1"]));
    let gw = Gateway::start(routes).await;
    fake.on("POST /tasks", Answer::json(200, json!({"id": "t1"})));
    let image: Vec<u8> = (0..=255u8).rev().cycle().take(5000).collect();
    let path = gw.dir().path().join("in.png");
    std::fs::write(&path, &image).unwrap();
    let video = python(
        sdks,
        &gw,
        "upload",
        &["m1", path.to_str().unwrap(), "image/png"],
    )
    .await;
    assert_eq!(video["status"], "queued", "{video}");
    let sent = fake.only().json();
    let link = sent["first_image"].as_str().expect("first_image");
    assert!(
        link.starts_with(&format!("http://{}/v1/videos/inputs/", gw.addr)),
        "{link}"
    );
    // Fetched as the provider would: no key.
    let got = gw
        .client()
        .get_bare(&link[link.find("/v1/").unwrap()..])
        .await;
    assert_eq!(got.status, 200);
    assert_eq!(&got.body[..], &image[..]);
}

#[tokio::test]
async fn python_webhooks_unwrap_accepts_a_delivered_video_event_and_rejects_a_tampered_one() {
    let Some(sdks) = sdk::available() else { return };
    let receiver = Fake::start().await;
    receiver.on("POST /hook", Answer::json(200, json!({})));
    let routes = replace_once(
        &replace_once(
            &shipped_routes(),
            "name = \"demo\"\n",
            &format!(
                "name = \"demo\"\nwebhook_url = \"{}/hook\"\n",
                receiver.url()
            ),
        ),
        "[webhooks]\n",
        "[webhooks]\nallow_http_hosts = [\"127.0.0.1\"]\nallow_private_networks = [\"127.0.0.1\"]\n",
    );
    let gw = Gateway::start(routes).await;
    let out = gw.dir().path().join("video.mp4");
    let video = python(sdks, &gw, "create_poll_download", &[out.to_str().unwrap()]).await;
    let id = video["id"].as_str().unwrap().to_string();
    let mut delivered = Vec::new();
    eventually("the webhook is delivered", async || {
        delivered.extend(receiver.take());
        !delivered.is_empty()
    })
    .await;
    let seen = &delivered[0];
    let headers: serde_json::Map<String, Value> =
        ["webhook-id", "webhook-timestamp", "webhook-signature"]
            .iter()
            .map(|h| (h.to_string(), json!(seen.header(h).expect(h))))
            .collect();
    let delivery =
        json!({"body": String::from_utf8(seen.body.to_vec()).unwrap(), "headers": headers});
    let file = gw.dir().path().join("delivery.json");
    std::fs::write(&file, delivery.to_string()).unwrap();
    let secret = "whsec_xRM79p/hSIjXTNu5g4EEbMLmFjq9esrWv6HAnHdQtTQ=";
    let event = python(sdks, &gw, "unwrap", &[file.to_str().unwrap(), secret]).await;
    assert_eq!(event["type"], "video.completed", "{event}");
    assert_eq!(event["object"], "event");
    assert_eq!(event["data_id"], id.as_str());
    assert_eq!(event["id"], seen.header("webhook-id").unwrap());
    assert_eq!(event["tampered"], "InvalidWebhookSignatureError");
}

#[tokio::test]
async fn node_creates_polls_downloads_and_lists() {
    let Some(sdks) = sdk::available() else { return };
    let gw = Gateway::start(shipped_routes()).await;
    let other = gw
        .client()
        .post_json(
            VIDEOS,
            DEMO,
            &json!({"model": "deltaq3-pro", "prompt": "p"}),
        )
        .await;
    assert_eq!(other.status, 200);
    let out_file = gw.dir().path().join("video.mp4");
    let base = format!("http://{}/v1", gw.addr);
    let script = sdk::script("videos.mjs");
    let args = [
        script.to_str().unwrap(),
        sdks.node_dir.to_str().unwrap(),
        &base,
        DEMO,
        out_file.to_str().unwrap(),
    ];
    let out = run_json(std::path::Path::new("node"), &args).await;
    let video = &out["video"];
    assert_eq!(video["status"], "completed", "{out}");
    assert_eq!(
        (video["seconds"].as_str(), video["size"].as_str()),
        (Some("8"), Some("1280x720"))
    );
    assert_eq!(out["statuses"][0], "queued");
    assert_eq!(std::fs::read(&out_file).unwrap(), SAMPLE);
    // Pages of 2: both videos, newest first.
    let listed = out["listed"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{out}");
    assert_eq!(listed[0], video["id"]);
    assert_eq!(listed[1], other.json()["id"]);
}
