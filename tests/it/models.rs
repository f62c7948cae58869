//! Every model of the service interface is served: it accepts a submission on its
//! endpoint and the task reaches `completed`, with the response shapes of the brief
//! (this is also the newcomer's path: submit on both families and poll until done).
//!
//! The model ids are copied from the spec by hand (not read from routes.toml), so a
//! model missing from the shipped configuration fails this test.

use serde_json::{Value, json};

use crate::support::{
    ALPHA, DEMO, Gateway, Http, MODEL_CENTER, STATUSES, assert_error, shipped_routes, unix_now,
};

/// "Published models of the model center", every row.
const PUBLISHED: [&str; 32] = [
    // zeta (image)
    "zeta_5.0Pro",
    "zeta-5.0",
    // gamma 2.5 discount / special / o
    "sd_2.5_discount_v1",
    "sd_2.5_special_v1",
    "gamma_2.5_o1",
    // gamma 2.0 special
    "sd_2.0_fast_special",
    "sd_2.0_mini_special",
    "sd_2.0_special",
    // gamma 2.0 discount
    "sd_2.0_discount",
    "sd_2.0_fast_discount",
    "sd_2.0_mini_discount",
    // gamma 1.5
    "gamma_1_5_pro_1080p",
    "gamma_1_5_pro_480p",
    "gamma_1_5_pro_720p",
    // theta
    "theta-H3-768p",
    "theta-H3-c1",
    // eta
    "eta 1.0 参考生视频",
    "eta 1.0 图生视频",
    "eta 1.0 文生视频",
    "eta 1.1 v2 参考生视频",
    "eta 1.1 v2 图生视频",
    "eta 1.1 v2 文生视频",
    "eta 1.1 参考生视频",
    "eta 1.1 图生视频",
    "eta 1.1 文生视频",
    // iota
    "iota2.7 参考生视频",
    "iota2.7 图生视频",
    "iota2.7 文生视频",
    "iota2.7 编辑视频",
    "iota3.0-prime-r2v",
    "iota3.0-r2v",
    // kappa
    "kappa O3 视频生成",
];

/// Families named in the introduction that the brief publishes on the model center.
const INTRODUCED_ON_MODEL_CENTER: [&str; 8] = [
    "gamma_2_0",
    "gamma_2_0_fast",
    "gamma_2_0_pro",
    "gamma_2_0_fast_pro",
    "deltaq3-pro",
    "deltaq3-turbo",
    "epsilon_video3",
    "epsilon_video3_pro",
];

/// The alpha family, on `/v1/alpha/videos`, with a duration each model accepts.
const ALPHA_MODELS: [(&str, u64); 4] = [
    ("alpha2Stable", 10),
    ("alphaOpen2", 4),
    ("alphaOpen2Stable", 8),
    ("alphaOpen2Plus", 12),
];

const IMAGE_MODELS: [&str; 2] = ["zeta_5.0Pro", "zeta-5.0"];

struct Case {
    collection: &'static str,
    model: &'static str,
    body: Value,
}

fn cases() -> Vec<Case> {
    let mut cases: Vec<Case> = PUBLISHED
        .iter()
        .chain(&INTRODUCED_ON_MODEL_CENTER)
        .map(|&model| Case {
            collection: MODEL_CENTER,
            model,
            body: json!({"model": model, "prompt": format!("a lighthouse at dusk, by {model}")}),
        })
        .collect();
    cases.extend(ALPHA_MODELS.iter().map(|&(model, seconds)| Case {
        collection: ALPHA,
        model,
        body: json!({
            "model": model,
            "prompt": "a paper boat on a river",
            "aspect_ratio": "16:9",
            "seconds": seconds,
        }),
    }));
    cases
}

/// Submit one task, poll it to the end, and check every answer on the way.
async fn run(http: Http, case: Case) {
    let Case {
        collection,
        model,
        body,
    } = case;
    let kind = if IMAGE_MODELS.contains(&model) {
        "image"
    } else {
        "video"
    };
    let r = http.post_json(collection, DEMO, &body).await;
    assert_eq!(r.status, 200, "{model}: {}", r.text());
    assert!(r.header("x-request-id").is_some(), "{model}: request id");
    let created = r.json();

    // Submit: exactly {id, object, model, status, created}.
    let obj = created.as_object().expect("submit answer is an object");
    let mut keys: Vec<_> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["created", "id", "model", "object", "status"],
        "{model}: {created}"
    );
    let id = created["id"].as_str().expect("id is a string");
    assert!(id.starts_with("task_"), "{model}: id {id}");
    assert_eq!(created["object"], kind, "{model}");
    assert_eq!(
        created["model"], model,
        "{model}: the id comes back exactly"
    );
    assert_eq!(
        created["status"], "queued",
        "{model}: a new task is queued: {created}"
    );
    let at = created["created"]
        .as_u64()
        .expect("created is Unix seconds");
    assert!(
        at.abs_diff(unix_now()) < 300,
        "{model}: created {at} is now, in Unix seconds"
    );

    // Query: every answer in the query shape, the last one completed.
    let history = http.poll_history(collection, DEMO, id).await;
    for v in &history {
        check_query_shape(model, kind, id, at, v);
    }
    let done = history.last().expect("an answer");
    assert_eq!(done["status"], "completed", "{model}: {done}");
    assert_eq!(done["progress"], 100, "{model}: {done}");
    assert!(done["error"].is_null(), "{model}: {done}");
    let url_field = format!("{kind}_url");
    let url = done[&url_field]
        .as_str()
        .unwrap_or_else(|| panic!("{model}: completed {kind} has {url_field}: {done}"));
    // The shipped configuration keeps results: the link is the gateway's own, signed.
    assert!(
        url.contains(&format!("{collection}/{id}/content?expires=")),
        "{model}: {url}"
    );
    assert_eq!(done["urls"], json!([url]), "{model}: urls lists the result");
}

fn check_query_shape(model: &str, kind: &str, id: &str, created: u64, v: &Value) {
    let obj = v.as_object().expect("query answer is an object");
    for k in obj.keys() {
        assert!(
            [
                "id",
                "object",
                "model",
                "status",
                "created",
                "progress",
                "video_url",
                "image_url",
                "urls",
                "error",
            ]
            .contains(&k.as_str()),
            "{model}: unexpected member `{k}` in {v}"
        );
    }
    for wrapper in ["code", "msg", "data"] {
        assert!(obj.get(wrapper).is_none(), "{model}: no wrapper: {v}");
    }
    assert_eq!(v["id"], id, "{model}");
    assert_eq!(v["object"], kind, "{model}");
    assert_eq!(v["model"], model, "{model}");
    assert_eq!(v["created"], created, "{model}: created is stable");
    let status = v["status"].as_str().expect("status is a string");
    assert!(STATUSES.contains(&status), "{model}: status {status}");
    if let Some(p) = obj.get("progress") {
        assert!(
            p.as_u64().is_some_and(|p| p <= 100),
            "{model}: progress 0-100: {v}"
        );
    }
    assert!(v["urls"].is_array(), "{model}: urls is a list: {v}");
    assert!(obj.contains_key("error"), "{model}: error is present: {v}");
    let other = if kind == "video" {
        "image_url"
    } else {
        "video_url"
    };
    assert!(obj.get(other).is_none(), "{model}: a {kind} has no {other}");
    if status != "completed" {
        assert!(
            obj.get("video_url").is_none() && obj.get("image_url").is_none(),
            "{model}: no result URL before completion: {v}"
        );
    }
}

#[tokio::test]
async fn every_model_of_the_spec_submits_and_completes() {
    let cases = cases();
    assert_eq!(cases.len(), 44, "32 published + 8 introduced + 4 alpha");
    let gw = Gateway::start(&shipped_routes()).await;
    let http = gw.client();
    let mut tasks = tokio::task::JoinSet::new();
    for case in cases {
        tasks.spawn(run(http.clone(), case));
    }
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}

#[tokio::test]
async fn model_ids_match_exactly() {
    let gw = Gateway::start(&shipped_routes()).await;
    let http = gw.client();
    // Near misses of real ids: case, whitespace, a missing suffix, a translated suffix.
    for model in [
        "zeta_5.0pro",
        "ZETA-5.0",
        " zeta-5.0",
        "zeta-5.0 ",
        "eta 1.0  文生视频",
        "eta 1.0文生视频",
        "eta 1.0",
        "eta 1.0 text-to-video",
        "kappa O3",
        "iota2.7 编辑视频\u{0}",
        "",
    ] {
        let r = http
            .post_json(MODEL_CENTER, DEMO, &json!({"model": model, "prompt": "x"}))
            .await;
        assert_error(&r, 400, "unknown_model", Some("model"));
    }
    // The id is matched after JSON decoding: escapes name the same model.
    let r = http
        .send(
            http::Method::POST,
            MODEL_CENTER,
            &[
                ("authorization", "Bearer sk-demo"),
                ("content-type", "application/json"),
            ],
            r#"{"model":"eta 1.0 \u6587\u751f\u89c6\u9891","prompt":"a cat"}"#,
        )
        .await;
    assert_eq!(r.status, 200, "{:?}", r.text());
    assert_eq!(r.json()["model"], "eta 1.0 文生视频");
}
