//! The newcomer's path: submit on both families and poll until done.

mod common;

use common::{ALPHA, DEMO, Gateway, MODEL_CENTER, shipped_routes};
use serde_json::json;

#[tokio::test]
async fn submit_and_poll_both_families() {
    let gw = Gateway::start(&shipped_routes());
    let http = gw.client();

    let created = http
        .submit(
            MODEL_CENTER,
            DEMO,
            &json!({"model": "sd_2.0_special", "prompt": "a cat"}),
        )
        .await;
    assert_eq!(created["object"], "video");
    assert_eq!(created["status"], "queued");
    assert!(created["id"].as_str().unwrap().starts_with("task_"));
    assert!(created.get("code").is_none() && created.get("data").is_none());
    let done = http
        .wait_done(MODEL_CENTER, DEMO, created["id"].as_str().unwrap())
        .await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["progress"], 100);
    assert!(done["video_url"].as_str().unwrap().starts_with("https://"));
    assert_eq!(done["urls"][0], done["video_url"]);

    let created = http
        .submit(ALPHA, DEMO, &json!({"model": "alpha2Stable", "prompt": "a dog", "aspect_ratio": "16:9", "seconds": 10}))
        .await;
    let done = http
        .wait_done(ALPHA, DEMO, created["id"].as_str().unwrap())
        .await;
    assert_eq!(done["status"], "completed");
    assert_eq!(done["model"], "alpha2Stable");
}
