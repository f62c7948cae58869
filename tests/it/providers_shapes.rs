//! Real upstream API shapes, each a fake HTTP server driven through the gateway by a
//! provider block: the exact request the upstream receives, and the normalised
//! answer in every state, failure included.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::support::{
    ALPHA, Answer, DEMO, DEMO2, Fake, Gateway, MODEL_CENTER, Routes, UPSTREAM_KEY as KEY, family,
};

async fn start(provider: &str, family: impl std::fmt::Display) -> Gateway {
    Gateway::start(Routes::new().provider(provider).family(family)).await
}

/// The public view fields a test compares, as one JSON object.
fn view(v: &Value) -> Value {
    let mut out = BTreeMap::new();
    for k in ["status", "progress", "video_url", "urls", "error"] {
        if let Some(x) = v.get(k) {
            out.insert(k.to_string(), x.clone());
        }
    }
    serde_json::to_value(out).expect("object")
}

fn id_of(created: &Value) -> String {
    created["id"].as_str().expect("id").to_string()
}

// (a) Our own model-center protocol: gateways chained, with the shipped simulator block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chained_gateway_with_the_simulator_block() {
    let fake = Fake::start().await;
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/routes.toml")).unwrap();
    // The shipped block, verbatim, pointed at the next gateway with a key.
    let start_at = shipped.find("[providers.simulator]").unwrap();
    let end_at = shipped.find("# --- parameter schemas").unwrap();
    let block = shipped[start_at..end_at].replace(
        r#"base_url = "builtin:simulator""#,
        &format!(
            "base_url = \"{}\"\nauth = {{ secret_file = \"upstream.key\" }}",
            fake.url()
        ),
    );
    let gw = start(
        &block,
        &family("g", &["simulator"], &["sd_2.0_special"]).upstream("sd_2.0_special", "next-model"),
    )
    .await;
    let http = gw.client();

    fake.on(
        "POST /v2/model-center/tasks",
        Answer::json(200, json!({"id": "task_up1", "object": "video", "model": "next-model", "status": "queued", "created": 1})),
    );
    let sent = json!({"model": "sd_2.0_special", "prompt": "a cat", "duration": 5});
    let created = http.submit(MODEL_CENTER, DEMO, &sent).await;
    assert_eq!(created["status"], "queued");
    assert_eq!(created["model"], "sd_2.0_special");
    let seen = fake.only();
    assert_eq!(seen.line(), "POST /v2/model-center/tasks?kind=video");
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(seen.header("content-type"), Some("application/json"));
    assert_eq!(
        seen.json(),
        json!({"model": "next-model", "prompt": "a cat", "duration": 5})
    );

    let id = id_of(&created);
    let states = [
        (
            json!({"status": "processing", "progress": 40}),
            json!({"status": "processing", "progress": 40, "urls": [], "error": null}),
        ),
        (
            json!({"status": "completed", "progress": 100, "video_url": "https://cdn.example/v.mp4", "urls": ["https://cdn.example/v.mp4"], "error": null}),
            json!({"status": "completed", "progress": 100, "video_url": "https://cdn.example/v.mp4", "urls": ["https://cdn.example/v.mp4"], "error": null}),
        ),
    ];
    for (upstream, expected) in states {
        fake.on(
            "GET /v2/model-center/tasks/task_up1",
            Answer::json(200, upstream),
        );
        assert_eq!(view(&http.query(MODEL_CENTER, DEMO, &id).await), expected);
        let seen = fake.only();
        assert_eq!(seen.line(), "GET /v2/model-center/tasks/task_up1");
        assert_eq!(
            seen.header("authorization"),
            Some(format!("Bearer {KEY}").as_str())
        );
    }

    // A failed task keeps the upstream's code and message.
    fake.on("POST /v2/model-center/tasks", Answer::queued("task_up2"));
    let sent = json!({"model": "sd_2.0_special", "prompt": "x"});
    let id = http.submit_id(MODEL_CENTER, DEMO, &sent).await;
    fake.on(
        "GET /v2/model-center/tasks/task_up2",
        Answer::json(200, json!({"status": "failed", "error": {"code": "content_policy", "message": "refused by policy"}})),
    );
    assert_eq!(
        view(&http.query(MODEL_CENTER, DEMO, &id).await),
        json!({"status": "failed", "urls": [], "error": {"code": "content_policy", "message": "refused by policy"}})
    );
}

// (b) A jobs API: the video only from a content endpoint that needs our key.
pub(crate) const JOBS: &str = r#"
[providers.jobs]
base_url = "BASE"
auth = { secret_file = "upstream.key" }
[providers.jobs.submit]
path = '"/v1/videos"'
body = '{model: $upstream_model, prompt, seconds: (.seconds // 4 | tostring), size: ({"16:9": "1280x720", "9:16": "720x1280"}[.aspect_ratio // "16:9"])}'
id = '.id'
status = '.status'
[providers.jobs.query]
path = '"/v1/videos/\($id | @uri)"'
status = '.status'
status_map = { queued = "queued", in_progress = "processing", completed = "completed", failed = "failed" }
progress = '.progress'
error_code = '.error.code'
error_message = '.error.message'
[providers.jobs.content]
path = '"/v1/videos/\($id | @uri)/content"'
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn b_jobs_api_with_a_keyed_content_endpoint() {
    let fake = Fake::start().await;
    let gw = start(
        &JOBS.replace("BASE", &fake.url()),
        &family("jobs", &["jobs"], &["alpha2Stable"])
            .alpha()
            .upstream("alpha2Stable", "vid-2"),
    )
    .await;
    let http = gw.client();

    fake.on(
        "POST /v1/videos",
        Answer::json(
            200,
            json!({"id": "video_68d", "object": "video", "status": "queued", "progress": 0}),
        ),
    );
    let created = http
        .submit(ALPHA, DEMO, &json!({"model": "alpha2Stable", "prompt": "a dog", "aspect_ratio": "9:16", "seconds": 8}))
        .await;
    assert_eq!(created["status"], "queued");
    let seen = fake.only();
    assert_eq!(seen.line(), "POST /v1/videos");
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(
        seen.json(),
        json!({"model": "vid-2", "prompt": "a dog", "seconds": "8", "size": "720x1280"})
    );
    let id = id_of(&created);

    fake.on(
        "GET /v1/videos/video_68d",
        Answer::json(
            200,
            json!({"id": "video_68d", "status": "queued", "progress": 0}),
        ),
    );
    assert_eq!(
        view(&http.query(ALPHA, DEMO, &id).await),
        json!({"status": "queued", "progress": 0, "urls": [], "error": null})
    );
    fake.on(
        "GET /v1/videos/video_68d",
        Answer::json(
            200,
            json!({"id": "video_68d", "status": "in_progress", "progress": 42}),
        ),
    );
    assert_eq!(
        view(&http.query(ALPHA, DEMO, &id).await),
        json!({"status": "processing", "progress": 42, "urls": [], "error": null})
    );
    // No content before the task is completed.
    let r = http.get(&format!("{ALPHA}/{id}/content"), DEMO).await;
    assert_eq!(r.status, 404);
    assert_eq!(r.error_code(), "content_not_ready");
    assert_eq!(
        fake.take().last().map(|s| s.line()).as_deref(),
        Some("GET /v1/videos/video_68d")
    );
    fake.on(
        "GET /v1/videos/video_68d",
        Answer::json(
            200,
            json!({"id": "video_68d", "status": "completed", "progress": 100}),
        ),
    );
    let done = http.query(ALPHA, DEMO, &id).await;
    let content_url = format!("http://{}{ALPHA}/{id}/content", gw.addr);
    assert_eq!(
        view(&done),
        json!({"status": "completed", "progress": 100, "video_url": content_url, "urls": [content_url], "error": null})
    );
    let seen = fake.take();
    assert!(seen.iter().all(|s| s.line() == "GET /v1/videos/video_68d"));
    assert!(
        seen.iter()
            .all(|s| s.header("authorization") == Some(format!("Bearer {KEY}").as_str()))
    );

    // The content streams through with our key; the client never sees it.
    let video: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    fake.on(
        "GET /v1/videos/video_68d/content",
        Answer::raw(200, "video/mp4", video.clone()),
    );
    let r = http.get(&format!("{ALPHA}/{id}/content"), DEMO).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("video/mp4"));
    assert_eq!(r.header("content-length"), Some("3000000"));
    assert!(r.body == video, "content differs");
    let seen = fake.only();
    assert_eq!(seen.line(), "GET /v1/videos/video_68d/content");
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(seen.header("range"), None);

    // A range is passed on, and the partial answer back.
    fake.on(
        "GET /v1/videos/video_68d/content",
        Answer::raw(206, "video/mp4", video[10..20].to_vec())
            .header("content-range", "bytes 10-19/3000000")
            .header("accept-ranges", "bytes"),
    );
    let r = http
        .send(
            http::Method::GET,
            &format!("{ALPHA}/{id}/content"),
            &[
                ("authorization", "Bearer sk-demo"),
                ("range", "bytes=10-19"),
            ],
            bytes::Bytes::new(),
        )
        .await;
    assert_eq!(r.status, 206);
    assert_eq!(r.header("content-range"), Some("bytes 10-19/3000000"));
    assert_eq!(&r.body[..], &video[10..20]);
    assert_eq!(fake.only().header("range"), Some("bytes=10-19"));

    // Another key, a made-up id, the other family's path: the same 404 as a query.
    let not_found = http
        .get(&format!("{ALPHA}/task_madeup/content"), DEMO)
        .await;
    assert_eq!(not_found.status, 404);
    for path in [
        format!("{ALPHA}/{id}/content"),
        format!("{MODEL_CENTER}/{id}/content"),
    ] {
        let key = if path.starts_with(ALPHA) { DEMO2 } else { DEMO };
        let r = http.get(&path, key).await;
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.body, not_found.body);
    }
    assert_eq!(
        http.get(&format!("{ALPHA}/{id}"), DEMO2).await.body,
        not_found.body
    );
    assert!(
        fake.take().is_empty(),
        "refused ids never reach the upstream"
    );
    // Without a key: 401, as every other route.
    let r = http
        .send(
            http::Method::GET,
            &format!("{ALPHA}/{id}/content"),
            &[],
            bytes::Bytes::new(),
        )
        .await;
    assert_eq!(r.status, 401);

    // A failed job.
    fake.on("POST /v1/videos", Answer::queued("video_69e"));
    let sent = json!({"model": "alpha2Stable", "prompt": "x"});
    let id = http.submit_id(ALPHA, DEMO, &sent).await;
    fake.on(
        "GET /v1/videos/video_69e",
        Answer::json(200, json!({"id": "video_69e", "status": "failed", "progress": 0, "error": {"code": "moderation_blocked", "message": "the prompt was blocked"}})),
    );
    assert_eq!(
        view(&http.query(ALPHA, DEMO, &id).await),
        json!({"status": "failed", "progress": 0, "urls": [], "error": {"code": "moderation_blocked", "message": "the prompt was blocked"}})
    );
}

// (c) A task API: typed `content` list, lowercase statuses, result at content.video_url.
const TASKS: &str = r#"
[providers.tasks]
base_url = "BASE"
auth = { secret_file = "upstream.key" }
[providers.tasks.submit]
path = '"/api/v3/contents/generations/tasks"'
body = '''
{model: $upstream_model,
 content: ([{type: "text", text: .prompt}]
   + (if .first_image then [{type: "image_url", image_url: {url: .first_image}, role: "first_frame"}] else [] end)
   + (if .last_image then [{type: "image_url", image_url: {url: .last_image}, role: "last_frame"}] else [] end)
   + [(.reference_images // [])[] | {type: "image_url", image_url: {url: .}, role: "reference_image"}]),
 duration, ratio: .aspect_ratio}
| with_entries(select(.value != null))
'''
id = '.id'
[providers.tasks.query]
path = '"/api/v3/contents/generations/tasks/\($id | @uri)"'
status = '.status'
status_map = { queued = "queued", running = "processing", succeeded = "completed", failed = "failed", cancelled = "failed", expired = "failed" }
urls = '.content.video_url'
error_code = '.error.code'
error_message = '.error.message // (if .status == "expired" then "the task expired" elif .status == "cancelled" then "the task was cancelled" else null end)'
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_task_api_with_a_typed_content_list() {
    let fake = Fake::start().await;
    let gw = start(
        &TASKS.replace("BASE", &fake.url()),
        &family("tasks", &["tasks"], &["sd_2.0_special"]).upstream("sd_2.0_special", "gen-video-2"),
    )
    .await;
    let http = gw.client();
    let path = "/api/v3/contents/generations/tasks";

    fake.on(
        &format!("POST {path}"),
        Answer::json(200, json!({"id": "cgt-2025"})),
    );
    let created = http
        .submit(
            MODEL_CENTER,
            DEMO,
            &json!({"model": "sd_2.0_special", "prompt": "a fox", "duration": 5, "aspect_ratio": "16:9",
                    "first_image": "https://img.example/a.png", "reference_images": ["https://img.example/r1.png"]}),
        )
        .await;
    let seen = fake.only();
    assert_eq!(seen.line(), format!("POST {path}"));
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(
        seen.json(),
        json!({"model": "gen-video-2", "duration": 5, "ratio": "16:9", "content": [
            {"type": "text", "text": "a fox"},
            {"type": "image_url", "image_url": {"url": "https://img.example/a.png"}, "role": "first_frame"},
            {"type": "image_url", "image_url": {"url": "https://img.example/r1.png"}, "role": "reference_image"}
        ]})
    );
    let id = id_of(&created);
    let task = format!("GET {path}/cgt-2025");
    for (upstream, expected) in [
        (
            json!({"id": "cgt-2025", "status": "queued"}),
            json!({"status": "queued", "urls": [], "error": null}),
        ),
        (
            json!({"id": "cgt-2025", "status": "running"}),
            json!({"status": "processing", "urls": [], "error": null}),
        ),
        (
            json!({"id": "cgt-2025", "status": "succeeded", "content": {"video_url": "https://cdn.example/fox.mp4"}}),
            json!({"status": "completed", "video_url": "https://cdn.example/fox.mp4", "urls": ["https://cdn.example/fox.mp4"], "error": null}),
        ),
    ] {
        fake.on(&task, Answer::json(200, upstream));
        assert_eq!(view(&http.query(MODEL_CENTER, DEMO, &id).await), expected);
        assert_eq!(fake.only().line(), task);
    }

    // Failed, cancelled and expired all become `failed` with a reason.
    for (n, upstream, error) in [
        (
            1,
            json!({"status": "failed", "error": {"code": "InputTextSensitive", "message": "sensitive prompt"}}),
            json!({"code": "InputTextSensitive", "message": "sensitive prompt"}),
        ),
        (
            2,
            json!({"status": "cancelled"}),
            json!({"code": "generation_failed", "message": "the task was cancelled"}),
        ),
        (
            3,
            json!({"status": "expired"}),
            json!({"code": "generation_failed", "message": "the task expired"}),
        ),
    ] {
        fake.on(
            &format!("POST {path}"),
            Answer::json(200, json!({"id": format!("cgt-f{n}")})),
        );
        let sent = json!({"model": "sd_2.0_special", "prompt": "p"});
        let id = http.submit_id(MODEL_CENTER, DEMO, &sent).await;
        fake.on(&format!("GET {path}/cgt-f{n}"), Answer::json(200, upstream));
        assert_eq!(
            view(&http.query(MODEL_CENTER, DEMO, &id).await),
            json!({"status": "failed", "urls": [], "error": error})
        );
    }
}

// (d) An async API: extra header on submit only, input/parameters nesting,
// output.task_status, failure reason at output.message.
const ASYNC: &str = r#"
[providers.async]
base_url = "BASE"
auth = { secret_file = "upstream.key" }
headers = { "X-Workspace" = "ws-7" }
[providers.async.submit]
path = '"/api/v1/services/aigc/video-generation/video-synthesis"'
headers = { "X-Async-Mode" = "enable" }
body = '{model: $upstream_model, input: ({prompt, img_url: .first_image} | with_entries(select(.value != null))), parameters: ({duration, resolution} | with_entries(select(.value != null)))}'
id = '.output.task_id'
status = '.output.task_status'
[providers.async.query]
path = '"/api/v1/tasks/\($id | @uri)"'
status = '.output.task_status'
status_map = { PENDING = "queued", RUNNING = "processing", SUCCEEDED = "completed", FAILED = "failed", CANCELED = "failed", UNKNOWN = "failed" }
urls = '.output.video_url'
error_code = '.output.code'
error_message = '.output.message'
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn d_async_api_with_a_submit_header_and_nested_body() {
    let fake = Fake::start().await;
    let gw = start(
        &ASYNC.replace("BASE", &fake.url()),
        &family("async", &["async"], &["sd_2.0_special"]).upstream("sd_2.0_special", "wan-t2v"),
    )
    .await;
    let http = gw.client();
    let submit = "POST /api/v1/services/aigc/video-generation/video-synthesis";
    fake.on(
        submit,
        Answer::json(
            200,
            json!({"request_id": "r1", "output": {"task_id": "t-1", "task_status": "PENDING"}}),
        ),
    );
    let created = http
        .submit(MODEL_CENTER, DEMO, &json!({"model": "sd_2.0_special", "prompt": "rain", "duration": 5, "resolution": "720p", "first_image": "https://i.example/1.png"}))
        .await;
    assert_eq!(created["status"], "queued");
    let seen = fake.only();
    assert_eq!(seen.line(), submit);
    assert_eq!(seen.header("x-async-mode"), Some("enable"));
    assert_eq!(seen.header("x-workspace"), Some("ws-7"));
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(
        seen.json(),
        json!({"model": "wan-t2v", "input": {"prompt": "rain", "img_url": "https://i.example/1.png"}, "parameters": {"duration": 5, "resolution": "720p"}})
    );
    let id = id_of(&created);
    for (word, expected) in [
        (
            "PENDING",
            json!({"status": "queued", "urls": [], "error": null}),
        ),
        (
            "RUNNING",
            json!({"status": "processing", "urls": [], "error": null}),
        ),
    ] {
        fake.on(
            "GET /api/v1/tasks/t-1",
            Answer::json(
                200,
                json!({"output": {"task_id": "t-1", "task_status": word}}),
            ),
        );
        assert_eq!(view(&http.query(MODEL_CENTER, DEMO, &id).await), expected);
        let seen = fake.only();
        assert_eq!(seen.line(), "GET /api/v1/tasks/t-1");
        assert_eq!(
            seen.header("x-async-mode"),
            None,
            "the async header is for submit only"
        );
        assert_eq!(seen.header("x-workspace"), Some("ws-7"));
    }
    fake.on(
        "GET /api/v1/tasks/t-1",
        Answer::json(200, json!({"output": {"task_id": "t-1", "task_status": "SUCCEEDED", "video_url": "https://oss.example/t-1.mp4"}})),
    );
    assert_eq!(
        view(&http.query(MODEL_CENTER, DEMO, &id).await),
        json!({"status": "completed", "video_url": "https://oss.example/t-1.mp4", "urls": ["https://oss.example/t-1.mp4"], "error": null})
    );
    assert_eq!(fake.only().line(), "GET /api/v1/tasks/t-1");

    fake.on(
        submit,
        Answer::json(
            200,
            json!({"output": {"task_id": "t-2", "task_status": "PENDING"}}),
        ),
    );
    let sent = json!({"model": "sd_2.0_special", "prompt": "x"});
    let id = http.submit_id(MODEL_CENTER, DEMO, &sent).await;
    assert_eq!(
        fake.only().json(),
        json!({"model": "wan-t2v", "input": {"prompt": "x"}, "parameters": {}})
    );
    fake.on(
        "GET /api/v1/tasks/t-2",
        Answer::json(200, json!({"output": {"task_id": "t-2", "task_status": "FAILED", "code": "DataInspectionFailed", "message": "input data may contain inappropriate content"}})),
    );
    assert_eq!(
        view(&http.query(MODEL_CENTER, DEMO, &id).await),
        json!({"status": "failed", "urls": [], "error": {"code": "DataInspectionFailed", "message": "input data may contain inappropriate content"}})
    );
}

// (e) A {code, message, data} wrapper: code != 0 is a failure even with HTTP 200.
const WRAPPED: &str = r#"
[providers.wrapped]
base_url = "BASE"
auth = { secret_file = "upstream.key" }
[providers.wrapped.submit]
path = '"/v1/videos/text2video"'
body = '{model_name: $upstream_model, prompt, duration: (.duration // 5 | tostring), aspect_ratio}'
success = '.code == 0'
refusal = 'if .code == 1302 then "rate_limited" elif .code >= 1000 and .code < 1100 then "auth" else null end'
error_message = '.message'
id = '.data.task_id'
status = '.data.task_status'
[providers.wrapped.query]
path = '"/v1/videos/text2video/\($id | @uri)"'
status = 'if .code != 0 then "failed" else .data.task_status end'
status_map = { submitted = "queued", processing = "processing", succeed = "completed", failed = "failed" }
urls = '[.data.task_result.videos[]?.url]'
error_code = 'if .code != 0 then .code else null end'
error_message = '.data.task_status_msg // .message'
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn e_wrapped_answers_with_codes() {
    let fake = Fake::start().await;
    let gw = start(
        &WRAPPED.replace("BASE", &fake.url()),
        &family("wrapped", &["wrapped"], &["sd_2.0_special"])
            .upstream("sd_2.0_special", "kv-2-master"),
    )
    .await;
    let http = gw.client();
    fake.on(
        "POST /v1/videos/text2video",
        Answer::json(200, json!({"code": 0, "message": "SUCCEED", "request_id": "q", "data": {"task_id": "8680", "task_status": "submitted"}})),
    );
    let created = http
        .submit(MODEL_CENTER, DEMO, &json!({"model": "sd_2.0_special", "prompt": "waves", "duration": 10, "aspect_ratio": "16:9"}))
        .await;
    let seen = fake.only();
    assert_eq!(seen.line(), "POST /v1/videos/text2video");
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(
        seen.json(),
        json!({"model_name": "kv-2-master", "prompt": "waves", "duration": "10", "aspect_ratio": "16:9"})
    );
    let id = id_of(&created);
    let task = "GET /v1/videos/text2video/8680";
    for (upstream, expected) in [
        (
            json!({"code": 0, "data": {"task_id": "8680", "task_status": "submitted"}}),
            json!({"status": "queued", "urls": [], "error": null}),
        ),
        (
            json!({"code": 0, "data": {"task_id": "8680", "task_status": "processing"}}),
            json!({"status": "processing", "urls": [], "error": null}),
        ),
        (
            json!({"code": 0, "data": {"task_id": "8680", "task_status": "succeed", "task_result": {"videos": [{"id": "v1", "url": "https://cdn.example/1.mp4", "duration": "10"}, {"id": "v2", "url": "https://cdn.example/2.mp4"}]}}}),
            json!({"status": "completed", "video_url": "https://cdn.example/1.mp4", "urls": ["https://cdn.example/1.mp4", "https://cdn.example/2.mp4"], "error": null}),
        ),
    ] {
        fake.on(task, Answer::json(200, upstream));
        assert_eq!(view(&http.query(MODEL_CENTER, DEMO, &id).await), expected);
        assert_eq!(fake.only().line(), task);
    }

    // code != 0 on HTTP 200: a refused submit, 400 with the upstream's reason.
    fake.on(
        "POST /v1/videos/text2video",
        Answer::json(
            200,
            json!({"code": 1201, "message": "duration must be 5 or 10", "data": null}),
        ),
    );
    let sent = json!({"model": "sd_2.0_special", "prompt": "x", "duration": 7});
    let r = http.post_json(MODEL_CENTER, DEMO, &sent).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.error_code(), "upstream_invalid_request");
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("duration must be 5 or 10")
    );
    assert_eq!(fake.only().json()["duration"], "7");

    // Codes that say the upstream declined: a rate limit, our key.
    for (code, status, error) in [
        (1302, 429, "upstream_rate_limited"),
        (1004, 502, "upstream_auth_failed"),
    ] {
        fake.on(
            "POST /v1/videos/text2video",
            Answer::json(
                200,
                json!({"code": code, "message": "declined", "data": null}),
            ),
        );
        let sent = json!({"model": "sd_2.0_special", "prompt": "x"});
        let r = http.post_json(MODEL_CENTER, DEMO, &sent).await;
        assert_eq!(r.status, status);
        assert_eq!(r.error_code(), error);
        fake.take();
    }

    // A failed task.
    fake.on(
        "POST /v1/videos/text2video",
        Answer::json(
            200,
            json!({"code": 0, "data": {"task_id": "8681", "task_status": "submitted"}}),
        ),
    );
    let sent = json!({"model": "sd_2.0_special", "prompt": "x"});
    let id = http.submit_id(MODEL_CENTER, DEMO, &sent).await;
    fake.on(
        "GET /v1/videos/text2video/8681",
        Answer::json(200, json!({"code": 0, "data": {"task_id": "8681", "task_status": "failed", "task_status_msg": "risk control"}})),
    );
    assert_eq!(
        view(&http.query(MODEL_CENTER, DEMO, &id).await),
        json!({"status": "failed", "urls": [], "error": {"code": "generation_failed", "message": "risk control"}})
    );
}

// (f) The id in a query parameter; a file id turned into a URL by a second request;
// errors as base_resp.status_code != 0 on HTTP 200.
const FILES: &str = r#"
[providers.files]
base_url = "BASE"
auth = { secret_file = "upstream.key" }
[providers.files.submit]
path = '"/v1/video_generation"'
body = '{model: $upstream_model, prompt, duration, resolution} | with_entries(select(.value != null))'
success = '.base_resp.status_code == 0'
error_message = '.base_resp.status_msg'
id = '.task_id'
[providers.files.query]
path = '"/v1/query/video_generation"'
query = '{task_id: $id}'
status = 'if (.base_resp.status_code // 0) != 0 then "Fail" else .status end'
status_map = { Queueing = "queued", Preparing = "queued", Processing = "processing", Success = "completed", Fail = "failed" }
error_code = '.base_resp.status_code | if . == 0 then null else . end'
error_message = '.base_resp.status_msg'
[providers.files.result]
path = '"/v1/files/retrieve"'
query = '{file_id: .file_id}'
urls = '.file.download_url'
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f_file_id_looked_up_by_a_second_request() {
    let fake = Fake::start().await;
    let gw = start(
        &FILES.replace("BASE", &fake.url()),
        &family("files", &["files"], &["sd_2.0_special"]).upstream("sd_2.0_special", "Hailuo-02"),
    )
    .await;
    let http = gw.client();
    fake.on(
        "POST /v1/video_generation",
        Answer::json(200, json!({"task_id": "106916112212032", "base_resp": {"status_code": 0, "status_msg": "success"}})),
    );
    let created = http
        .submit(MODEL_CENTER, DEMO, &json!({"model": "sd_2.0_special", "prompt": "a kite", "duration": 6, "resolution": "1080P"}))
        .await;
    let seen = fake.only();
    assert_eq!(seen.line(), "POST /v1/video_generation");
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(
        seen.json(),
        json!({"model": "Hailuo-02", "prompt": "a kite", "duration": 6, "resolution": "1080P"})
    );
    let id = id_of(&created);
    let status = |word: &str, file_id: &str| {
        Answer::json(
            200,
            json!({"task_id": "106916112212032", "status": word, "file_id": file_id, "base_resp": {"status_code": 0, "status_msg": "success"}}),
        )
    };
    for (word, expected) in [
        ("Queueing", "queued"),
        ("Preparing", "queued"),
        ("Processing", "processing"),
    ] {
        fake.on("GET /v1/query/video_generation", status(word, ""));
        assert_eq!(
            view(&http.query(MODEL_CENTER, DEMO, &id).await),
            json!({"status": expected, "urls": [], "error": null})
        );
        assert_eq!(
            fake.only().line(),
            "GET /v1/query/video_generation?task_id=106916112212032"
        );
    }
    fake.on(
        "GET /v1/query/video_generation",
        status("Success", "205258526306433"),
    );
    fake.on(
        "GET /v1/files/retrieve",
        Answer::json(200, json!({"file": {"file_id": 205258526306433u64, "filename": "out.mp4", "download_url": "https://files.example/out.mp4?sig=1"}, "base_resp": {"status_code": 0}})),
    );
    assert_eq!(
        view(&http.query(MODEL_CENTER, DEMO, &id).await),
        json!({"status": "completed", "video_url": "https://files.example/out.mp4?sig=1", "urls": ["https://files.example/out.mp4?sig=1"], "error": null})
    );
    let seen = fake.take();
    assert_eq!(
        seen.iter().map(|s| s.line()).collect::<Vec<_>>(),
        [
            "GET /v1/query/video_generation?task_id=106916112212032",
            "GET /v1/files/retrieve?file_id=205258526306433"
        ]
    );
    assert_eq!(
        seen[1].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );

    // base_resp.status_code != 0 on HTTP 200: refused submit, and a failed task.
    fake.on(
        "POST /v1/video_generation",
        Answer::json(200, json!({"task_id": "", "base_resp": {"status_code": 2013, "status_msg": "invalid params: duration"}})),
    );
    let sent = json!({"model": "sd_2.0_special", "prompt": "x"});
    let r = http.post_json(MODEL_CENTER, DEMO, &sent).await;
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("invalid params: duration")
    );
    fake.take();
    fake.on(
        "POST /v1/video_generation",
        Answer::json(
            200,
            json!({"task_id": "777", "base_resp": {"status_code": 0, "status_msg": "success"}}),
        ),
    );
    let sent = json!({"model": "sd_2.0_special", "prompt": "x"});
    let id = http.submit_id(MODEL_CENTER, DEMO, &sent).await;
    fake.on(
        "GET /v1/query/video_generation",
        Answer::json(200, json!({"task_id": "777", "status": "Fail", "base_resp": {"status_code": 1027, "status_msg": "output video sensitive"}})),
    );
    assert_eq!(
        view(&http.query(MODEL_CENTER, DEMO, &id).await),
        json!({"status": "failed", "urls": [], "error": {"code": "1027", "message": "output video sensitive"}})
    );
}

// (g) A long-running operation: model in the path, an id with slashes, a `done` flag
// and an `error` object, the result deep in arrays; the key in a custom header.
const OPERATIONS: &str = r#"
[providers.operations]
base_url = "BASE"
auth = { header = "x-goog-api-key", scheme = "", secret_file = "upstream.key" }
[providers.operations.submit]
path = '"/v1beta/models/\($upstream_model):predictLongRunning"'
body = '{instances: [{prompt}], parameters: ({durationSeconds: .duration, aspectRatio: .aspect_ratio} | with_entries(select(.value != null)))}'
id = '.name'
[providers.operations.query]
path = '"/v1beta/\($id)"'
status = 'if .done != true then "running" elif .error then "error" else "done" end'
status_map = { running = "processing", done = "completed", error = "failed" }
urls = '[.response.generateVideoResponse.generatedSamples[]?.video.uri]'
error_code = '.error.status // .error.code'
error_message = '.error.message'
# The video link needs our key: served through the gateway. `.urls` holds what
# `query.urls` found; the upstream redirects to storage, which gets no key.
[providers.operations.content]
path = '.urls[0]'
query = '{alt: "media"}'
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g_long_running_operations_with_slashed_ids() {
    let fake = Fake::start().await;
    // The storage it redirects to is another fake on loopback: a private network the
    // block must name.
    let operations = OPERATIONS.replace("BASE", &fake.url()).replace(
        "[providers.operations.submit]",
        "allow_private_networks = [\"127.0.0.1\"]\n[providers.operations.submit]",
    );
    let gw = start(
        &operations,
        &family("ops", &["operations"], &["sd_2.0_special"])
            .upstream("sd_2.0_special", "veo-3.0-generate-001"),
    )
    .await;
    let http = gw.client();
    let submit = "POST /v1beta/models/veo-3.0-generate-001:predictLongRunning";
    let op = "models/veo-3.0-generate-001/operations/a1b2c3";
    fake.on(submit, Answer::json(200, json!({"name": op})));
    let created = http
        .submit(MODEL_CENTER, DEMO, &json!({"model": "sd_2.0_special", "prompt": "a lighthouse", "duration": 8, "aspect_ratio": "16:9"}))
        .await;
    assert_eq!(created["status"], "queued");
    let seen = fake.only();
    assert_eq!(seen.line(), submit);
    assert_eq!(seen.header("x-goog-api-key"), Some(KEY));
    assert_eq!(seen.header("authorization"), None);
    assert_eq!(
        seen.json(),
        json!({"instances": [{"prompt": "a lighthouse"}], "parameters": {"durationSeconds": 8, "aspectRatio": "16:9"}})
    );
    let id = id_of(&created);
    let poll = format!("GET /v1beta/{op}");
    fake.on(&poll, Answer::json(200, json!({"name": op, "done": false})));
    assert_eq!(
        view(&http.query(MODEL_CENTER, DEMO, &id).await),
        json!({"status": "processing", "urls": [], "error": null})
    );
    assert_eq!(fake.only().line(), poll);
    let file = format!("{}/v1beta/files/abc:download", fake.url());
    fake.on(
        &poll,
        Answer::json(200, json!({"name": op, "done": true, "response": {"generateVideoResponse": {"generatedSamples": [{"video": {"uri": file}}]}}})),
    );
    let content_url = format!("http://{}{MODEL_CENTER}/{id}/content", gw.addr);
    assert_eq!(
        view(&http.query(MODEL_CENTER, DEMO, &id).await),
        json!({"status": "completed", "video_url": content_url, "urls": [content_url], "error": null})
    );
    assert_eq!(fake.only().line(), poll);

    // The content: our key to the provider, which redirects to storage (no key).
    let storage = Fake::start().await;
    storage.on(
        "GET /bucket/abc.mp4",
        Answer::raw(200, "video/mp4", &b"MP4DATA"[..]),
    );
    fake.on(
        "GET /v1beta/files/abc:download",
        Answer::raw(302, "text/plain", "").header(
            "location",
            &format!("{}/bucket/abc.mp4?sig=s1", storage.url()),
        ),
    );
    let r = http
        .send(
            http::Method::GET,
            &format!("{MODEL_CENTER}/{id}/content"),
            &[
                ("authorization", "Bearer sk-demo"),
                ("host", "media.example:8443"),
                ("x-forwarded-proto", "https"),
            ],
            bytes::Bytes::new(),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(&r.body[..], b"MP4DATA");
    let seen = fake.only();
    assert_eq!(seen.line(), "GET /v1beta/files/abc:download?alt=media");
    assert_eq!(seen.header("x-goog-api-key"), Some(KEY));
    let seen = storage.only();
    assert_eq!(seen.line(), "GET /bucket/abc.mp4?sig=s1");
    assert_eq!(seen.header("x-goog-api-key"), None);
    // The gateway URL follows the Host and X-Forwarded-Proto the client used.
    let r = http
        .send(
            http::Method::GET,
            &format!("{MODEL_CENTER}/{id}"),
            &[
                ("authorization", "Bearer sk-demo"),
                ("host", "media.example:8443"),
                ("x-forwarded-proto", "https"),
            ],
            bytes::Bytes::new(),
        )
        .await;
    assert_eq!(
        r.json()["video_url"],
        format!("https://media.example:8443{MODEL_CENTER}/{id}/content")
    );

    let op2 = "models/veo-3.0-generate-001/operations/zz9";
    fake.on(submit, Answer::json(200, json!({"name": op2})));
    let sent = json!({"model": "sd_2.0_special", "prompt": "x"});
    let id = http.submit_id(MODEL_CENTER, DEMO, &sent).await;
    fake.on(
        &format!("GET /v1beta/{op2}"),
        Answer::json(200, json!({"name": op2, "done": true, "error": {"code": 3, "status": "INVALID_ARGUMENT", "message": "prompt rejected"}})),
    );
    assert_eq!(
        view(&http.query(MODEL_CENTER, DEMO, &id).await),
        json!({"status": "failed", "urls": [], "error": {"code": "INVALID_ARGUMENT", "message": "prompt rejected"}})
    );
}

// (h) A queue API: `Authorization: Key`, separate status and result URLs.
const QUEUE: &str = r#"
[providers.queue]
base_url = "BASE"
auth = { scheme = "Key", secret_file = "upstream.key" }
[providers.queue.submit]
path = '"/\($upstream_model)"'
body = '{prompt, duration: (.duration // 5 | tostring), aspect_ratio} | with_entries(select(.value != null))'
id = '.request_id'
status = '.status'
[providers.queue.query]
path = '"/\($upstream_model)/requests/\($id | @uri)/status"'
query = '{logs: "0"}'
status = 'if .status == "COMPLETED" and .error then "ERROR" else .status end'
status_map = { IN_QUEUE = "queued", IN_PROGRESS = "processing", COMPLETED = "completed", ERROR = "failed" }
error_code = '.error_type'
error_message = '.error'
[providers.queue.result]
path = '"/\($upstream_model)/requests/\($id | @uri)"'
urls = '.video.url'
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h_queue_api_with_status_and_result_urls() {
    let fake = Fake::start().await;
    let gw = start(
        &QUEUE.replace("BASE", &fake.url()),
        &family("queue", &["queue"], &["alphaOpen2"])
            .alpha()
            .upstream("alphaOpen2", "fal-ai/vid/v2/text-to-video"),
    )
    .await;
    let http = gw.client();
    let model = "/fal-ai/vid/v2/text-to-video";
    fake.on(
        &format!("POST {model}"),
        Answer::json(200, json!({"request_id": "764cabcf-b745", "status": "IN_QUEUE", "status_url": "x", "response_url": "y"})),
    );
    let sent = json!({"model": "alphaOpen2", "prompt": "a train", "aspect_ratio": "16:9"});
    let created = http.submit(ALPHA, DEMO, &sent).await;
    assert_eq!(created["status"], "queued");
    let seen = fake.only();
    assert_eq!(seen.line(), format!("POST {model}"));
    assert_eq!(
        seen.header("authorization"),
        Some(format!("Key {KEY}").as_str())
    );
    assert_eq!(
        seen.json(),
        json!({"prompt": "a train", "duration": "5", "aspect_ratio": "16:9"})
    );
    let id = id_of(&created);
    let status = format!("GET {model}/requests/764cabcf-b745/status");
    for (word, expected) in [("IN_QUEUE", "queued"), ("IN_PROGRESS", "processing")] {
        fake.on(
            &status,
            Answer::json(200, json!({"status": word, "queue_position": 0})),
        );
        assert_eq!(
            view(&http.query(ALPHA, DEMO, &id).await),
            json!({"status": expected, "urls": [], "error": null})
        );
        let seen = fake.only();
        assert_eq!(seen.line(), format!("{status}?logs=0"));
        assert_eq!(
            seen.header("authorization"),
            Some(format!("Key {KEY}").as_str())
        );
    }
    fake.on(&status, Answer::json(200, json!({"status": "COMPLETED"})));
    fake.on(
        &format!("GET {model}/requests/764cabcf-b745"),
        Answer::json(200, json!({"video": {"url": "https://v3.example/train.mp4", "content_type": "video/mp4"}, "seed": 1})),
    );
    assert_eq!(
        view(&http.query(ALPHA, DEMO, &id).await),
        json!({"status": "completed", "video_url": "https://v3.example/train.mp4", "urls": ["https://v3.example/train.mp4"], "error": null})
    );
    assert_eq!(
        fake.take().iter().map(|s| s.line()).collect::<Vec<_>>(),
        [
            format!("{status}?logs=0"),
            format!("GET {model}/requests/764cabcf-b745")
        ]
    );

    fake.on(
        &format!("POST {model}"),
        Answer::json(200, json!({"request_id": "r-2", "status": "IN_QUEUE"})),
    );
    let id = id_of(
        &http
            .submit(ALPHA, DEMO, &json!({"model": "alphaOpen2", "prompt": "x"}))
            .await,
    );
    fake.on(
        &format!("GET {model}/requests/r-2/status"),
        Answer::json(200, json!({"status": "COMPLETED", "error": "generation failed: NSFW", "error_type": "content_policy_violation"})),
    );
    assert_eq!(
        view(&http.query(ALPHA, DEMO, &id).await),
        json!({"status": "failed", "urls": [], "error": {"code": "content_policy_violation", "message": "generation failed: NSFW"}})
    );
}
