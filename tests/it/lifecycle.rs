//! A task's life beyond the happy path: the `[fail]` path, and tasks surviving a
//! restart of the process. (A graceful stop is in `shutdown`.)

use serde_json::{Value, json};

use crate::support::{
    ALPHA, DEMO, DEMO2, Gateway, Http, MODEL_CENTER, Proc, assert_error, shipped_routes,
};

#[tokio::test]
async fn a_fail_prompt_ends_failed_with_a_reason_and_no_result() {
    let gw = Gateway::start(&shipped_routes()).await;
    let http = gw.client();
    let cases = [
        (
            MODEL_CENTER,
            json!({"model": "sd_2.0_special", "prompt": "a cat [fail]"}),
        ),
        (
            MODEL_CENTER,
            json!({"model": "zeta-5.0", "prompt": "[fail] a cat"}),
        ),
        (
            MODEL_CENTER,
            json!({"model": "eta 1.1 文生视频", "prompt": "a cat [fail] now"}),
        ),
        (
            ALPHA,
            json!({"model": "alphaOpen2Plus", "prompt": "a dog [fail]", "aspect_ratio": "9:16", "seconds": 12}),
        ),
    ];
    let mut runs = tokio::task::JoinSet::new();
    for (collection, body) in cases {
        runs.spawn(fails(http.clone(), collection, body));
    }
    // Only the marker fails a task, not the word.
    let sent = json!({"model": "sd_2.0_special", "prompt": "a cat that does not fail [] fail]"});
    let created = http.submit(MODEL_CENTER, DEMO, &sent).await;
    let done = http
        .wait_done(MODEL_CENTER, DEMO, created["id"].as_str().unwrap())
        .await;
    assert_eq!(done["status"], "completed", "{done}");
    while let Some(run) = runs.join_next().await {
        if let Err(e) = run {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

/// Submit `body`, which asks to fail, and check the task's whole life.
async fn fails(http: Http, collection: &'static str, body: Value) {
    let created = http.submit(collection, DEMO, &body).await;
    let id = created["id"].as_str().unwrap();
    let history = http.poll_history(collection, DEMO, id).await;
    for v in &history {
        assert_ne!(v["status"], "completed", "{body}: {v}");
    }
    let failed = history.last().unwrap();
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["id"], id);
    assert_eq!(failed["model"], body["model"]);
    let code = failed["error"]["code"].as_str().expect("error.code");
    let message = failed["error"]["message"].as_str().expect("error.message");
    assert!(!code.is_empty() && !message.is_empty(), "{failed}");
    // Cleaned of anything that points at the upstream.
    for leak in ["127.0.0.1", "http://", "localhost"] {
        assert!(!message.contains(leak), "{message}");
    }
    for url in ["video_url", "image_url"] {
        assert!(
            failed.get(url).is_none(),
            "a failed task has no {url}: {failed}"
        );
    }
    assert_eq!(failed["urls"], json!([]), "{failed}");

    // A finished task stays as it is.
    let again = http.get(&format!("{collection}/{id}"), DEMO).await.json();
    assert_eq!(&again, failed);
}

#[tokio::test]
async fn tasks_created_before_a_restart_are_readable_after_it() {
    // The process is killed and started again on the same files.
    let mut gw = Proc::start(&shipped_routes()).await;
    let tasks: Vec<(&str, &str, Value, &str)> = vec![
        (
            MODEL_CENTER,
            DEMO,
            json!({"model": "kappa O3 视频生成", "prompt": "a cat"}),
            "completed",
        ),
        (
            MODEL_CENTER,
            DEMO2,
            json!({"model": "zeta_5.0Pro", "prompt": "a cat"}),
            "completed",
        ),
        (
            ALPHA,
            DEMO,
            json!({"model": "alpha2Stable", "prompt": "a cat", "aspect_ratio": "16:9", "seconds": 15}),
            "completed",
        ),
        (
            MODEL_CENTER,
            DEMO,
            json!({"model": "deltaq3-turbo", "prompt": "a cat [fail]"}),
            "failed",
        ),
    ];
    let mut created = Vec::new();
    {
        let http = gw.client();
        for (collection, key, body, _) in &tasks {
            let c = http.submit(collection, key, body).await;
            // Read once before the restart, while it is still running.
            let id = c["id"].as_str().unwrap();
            let first = http.get(&format!("{collection}/{id}"), key).await;
            assert_eq!(first.status, 200);
            created.push(c);
        }
    }

    gw.restart().await;
    let http = gw.client();
    for ((collection, key, _, end), before) in tasks.iter().zip(&created) {
        let id = before["id"].as_str().unwrap();
        let after = http.wait_done(collection, key, id).await;
        assert_eq!(after["status"], *end, "{after}");
        for field in ["id", "object", "model", "created"] {
            assert_eq!(after[field], before[field], "{field} survives the restart");
        }
        // Still nobody else's.
        let other = if *key == DEMO { DEMO2 } else { DEMO };
        let r = http.get(&format!("{collection}/{id}"), other).await;
        assert_error(&r, 404, "task_not_found", Some("id"));
    }
    // And the restarted gateway takes new work.
    let sent = json!({"model": "theta-H3-c1", "prompt": "a cat"});
    let c = http.submit(MODEL_CENTER, DEMO, &sent).await;
    let done = http
        .wait_done(MODEL_CENTER, DEMO, c["id"].as_str().unwrap())
        .await;
    assert_eq!(done["status"], "completed");
}
