//! `/v1/videos`: the OpenAI Videos API's shapes over every video model of the shipped
//! routes.toml, spoken over plain HTTP here; `openai_sdk.rs` drives the same gateway
//! with the official SDKs.

use std::collections::BTreeSet;

use http::Method;
use serde_json::{Value, json};

use crate::support::{
    Answer, DEMO, DEMO2, Fake, Gateway, Http, MODEL_CENTER, PATIENCE, Reply, Routes, assert_error,
    check, eventually, family, shipped_routes, tasks_provider,
};

pub const VIDEOS: &str = "/v1/videos";

/// The simulator's video, as it serves every completed video task.
const SAMPLE: &[u8] = include_bytes!("../../assets/simulator/sample.mp4");

async fn create(http: &Http, key: &str, body: &Value) -> Value {
    let r = http.post_json(VIDEOS, key, body).await;
    assert_eq!(r.status, 200, "create {body}: {}", r.text());
    r.json()
}

/// `GET /v1/videos/{id}` until it is completed or failed.
async fn until_done(http: &Http, id: &str) -> Value {
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let r = http.get(&format!("{VIDEOS}/{id}"), DEMO).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        let status = v["status"].as_str().unwrap_or_default().to_string();
        assert!(
            ["queued", "in_progress", "completed", "failed"].contains(&status.as_str()),
            "{v}"
        );
        if status == "completed" || status == "failed" {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "never finished: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_video_is_created_retrieved_downloaded_and_deleted_in_openai_shapes() {
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();
    let body =
        json!({"model": "deltaq3-pro", "prompt": "a cat", "seconds": "8", "size": "1280x720"});
    let created = create(&http, DEMO, &body).await;
    assert_eq!(created["object"], "video");
    assert_eq!(created["model"], "deltaq3-pro");
    assert_eq!(created["status"], "queued");
    assert_eq!(created["progress"], 0);
    assert_eq!(
        (created["seconds"].as_str(), created["size"].as_str()),
        (Some("8"), Some("1280x720"))
    );
    assert!(created["completed_at"].is_null() && created["error"].is_null());
    assert!(created["remixed_from_video_id"].is_null());
    let id = created["id"].as_str().unwrap().to_string();
    let done = until_done(&http, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["progress"], 100);
    assert_eq!(done["created_at"], created["created_at"]);
    assert_eq!(
        (done["seconds"].as_str(), done["size"].as_str()),
        (Some("8"), Some("1280x720"))
    );
    let completed_at = done["completed_at"].as_u64().expect("completed_at");
    // The shipped families keep results 30 days.
    assert_eq!(
        done["expires_at"].as_u64(),
        Some(completed_at + 30 * 86_400)
    );

    let content = http
        .get(&format!("{VIDEOS}/{id}/content?variant=video"), DEMO)
        .await;
    assert_eq!(content.status, 200);
    assert_eq!(&content.body[..], SAMPLE);
    let auth = format!("Bearer {DEMO}");
    let headers = [("authorization", auth.as_str()), ("range", "bytes=0-9")];
    let path = format!("{VIDEOS}/{id}/content");
    // Once copied into storage (the simulator itself serves whole files only).
    eventually("a Range answered from storage", async || {
        let part = http.send(Method::GET, &path, &headers, "").await;
        part.status == 206 && part.body[..] == SAMPLE[..10]
    })
    .await;
    for variant in ["thumbnail", "spritesheet"] {
        let r = http
            .get(&format!("{VIDEOS}/{id}/content?variant={variant}"), DEMO)
            .await;
        assert_error(&r, 404, "variant_not_found", Some("variant"));
    }
    let r = http
        .get(&format!("{VIDEOS}/{id}/content?variant=gif"), DEMO)
        .await;
    assert_error(&r, 400, "invalid_parameter", Some("variant"));
    // Without a key, a link whose signature does not hold is refused as such first,
    // whatever variant it asks for.
    for variant in ["thumbnail", "gif"] {
        let forged =
            format!("{VIDEOS}/{id}/content?variant={variant}&expires=9999999999&signature=x");
        assert_error(
            &http.get_bare(&forged).await,
            403,
            "invalid_signature",
            None,
        );
    }

    let remix = http
        .post_json(
            &format!("{VIDEOS}/{id}/remix"),
            DEMO,
            &json!({"prompt": "x"}),
        )
        .await;
    assert_error(&remix, 400, "unsupported", None);

    let r = http.delete(&format!("{VIDEOS}/{id}"), DEMO).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({"id": id, "object": "video.deleted", "deleted": true})
    );
    // As on the other endpoints: out of the listing, its stored video removed.
    let list = http.get(VIDEOS, DEMO).await.json();
    assert_eq!(list["data"], json!([]));
    let gone = http.get(&format!("{VIDEOS}/{id}/content"), DEMO).await;
    assert_error(&gone, 410, "result_expired", None);
}

/// A video's state is its provider's: with the ledger out of reach (here its table
/// renamed away behind the gateway's back), `GET /v1/videos/{id}` still answers it,
/// without what only the ledger's row says.
#[tokio::test]
async fn a_video_is_retrieved_while_the_ledger_cannot_be_read() {
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();
    let body = json!({"model": "deltaq3-pro", "prompt": "a cat", "seconds": "8"});
    let id = create(&http, DEMO, &body).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let done = until_done(&http, &id).await;
    assert_eq!(done["seconds"], "8");
    let ledger = rusqlite::Connection::open(gw.dir().path().join(".mediagate/ledger.db")).unwrap();
    ledger
        .execute_batch("ALTER TABLE tasks RENAME TO tasks_away")
        .unwrap();
    let r = http.get(&format!("{VIDEOS}/{id}"), DEMO).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let video = r.json();
    assert_eq!(
        (video["id"].as_str(), video["status"].as_str()),
        (Some(id.as_str()), Some("completed"))
    );
    assert!(
        video["seconds"].is_null() && video["completed_at"].is_null(),
        "{video}"
    );
}

/// A JSON body's fields are refused by the catalogue's codes whatever their values: a
/// `model` that is no string is `missing_model`, a name the endpoint does not take is
/// `unknown_parameter` (quoted, however long), a known field of the wrong type is
/// `invalid_parameter`.
#[tokio::test]
async fn json_fields_of_the_wrong_type_or_name_are_refused_by_their_codes() {
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();
    let r = http
        .post_json(VIDEOS, DEMO, &json!({"model": 5, "prompt": "x"}))
        .await;
    assert_error(&r, 400, "missing_model", Some("model"));
    let long = "n".repeat(100_000);
    let body = json!({"model": "deltaq3-pro", "prompt": "x", long.as_str(): 1});
    let r = http.post_json(VIDEOS, DEMO, &body).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "unknown_parameter");
    assert!(
        r.text().len() < 2_000,
        "the name is quoted: {} bytes",
        r.text().len()
    );
    let body = json!({"model": "deltaq3-pro", "prompt": "x", "bogus": null});
    let r = http.post_json(VIDEOS, DEMO, &body).await;
    assert_eq!(
        r.json()["error"]["code"],
        "unknown_parameter",
        "{}",
        r.text()
    );
    let r = http
        .post_json(
            VIDEOS,
            DEMO,
            &json!({"model": "deltaq3-pro", "prompt": ["x"]}),
        )
        .await;
    assert_error(&r, 400, "invalid_parameter", Some("prompt"));
}

/// A retry is the same request as sent, not only as the model takes it: a model of
/// a fixed resolution takes `1280x720` and `1920x1080` alike (both 16:9), but the
/// answer echoes the size asked, so another size under the same `Idempotency-Key` is
/// another request.
#[tokio::test]
async fn another_size_under_the_same_idempotency_key_is_another_request() {
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();
    let auth = format!("Bearer {DEMO}");
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
        ("idempotency-key", "sized-1"),
    ];
    let sized = |size: &str| {
        json!({"model": "gamma_1_5_pro_720p", "prompt": "p", "size": size}).to_string()
    };
    let first = http
        .send(Method::POST, VIDEOS, &headers, sized("1280x720"))
        .await;
    assert_eq!(first.status, 200, "{}", first.text());
    let again = http
        .send(Method::POST, VIDEOS, &headers, sized("1280x720"))
        .await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    let other = http
        .send(Method::POST, VIDEOS, &headers, sized("1920x1080"))
        .await;
    assert_error(&other, 422, "idempotency_key_reused", None);
}

#[tokio::test]
async fn a_value_the_model_does_not_take_is_refused_naming_the_openai_field() {
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();
    let refused = |model: &str, field: &str, value: &str| json!({"model": model, "prompt": "p", field: value});
    for (body, param) in [
        // delta: 1-16 seconds, 540p/720p/1080p; gamma 1.5: 5-10 seconds.
        (refused("deltaq3-pro", "seconds", "17"), "seconds"),
        (refused("gamma_1_5_pro_480p", "seconds", "4"), "seconds"),
        (refused("alpha2Stable", "seconds", "12"), "seconds"),
        (refused("deltaq3-pro", "seconds", "eight"), "seconds"),
        (refused("deltaq3-pro", "seconds", "8.5"), "seconds"),
        (refused("deltaq3-pro", "size", "100x100"), "size"),
        (refused("deltaq3-pro", "size", "big"), "size"),
    ] {
        let r = http.post_json(VIDEOS, DEMO, &body).await;
        let msg = assert_error(&r, 400, "invalid_parameter", Some(param));
        assert!(msg.contains(&format!("`{param}`")), "{msg}");
    }
    // Every video model is here; images are not.
    let r = http
        .post_json(VIDEOS, DEMO, &json!({"model": "zeta-5.0", "prompt": "p"}))
        .await;
    assert_error(&r, 400, "unknown_model", Some("model"));
    let r = http
        .post_json(
            VIDEOS,
            DEMO,
            &json!({"model": "deltaq3-pro", "prompt": "p", "quality": "hd"}),
        )
        .await;
    assert_error(&r, 400, "unknown_parameter", Some("quality"));
    let r = http
        .post_json(
            VIDEOS,
            "sk-wrong",
            &json!({"model": "deltaq3-pro", "prompt": "p"}),
        )
        .await;
    assert_error(&r, 401, "invalid_api_key", None);
    // demo-2 may use a few models only.
    let r = http
        .post_json(
            VIDEOS,
            DEMO2,
            &json!({"model": "deltaq3-pro", "prompt": "p"}),
        )
        .await;
    assert_error(&r, 403, "model_not_allowed", Some("model"));
    let r = http
        .send(
            Method::POST,
            VIDEOS,
            &[
                ("authorization", "Bearer sk-demo"),
                ("content-type", "text/plain"),
            ],
            "x",
        )
        .await;
    assert_error(&r, 415, "unsupported_media_type", None);
    // What a model takes goes through: each shipped schema's names.
    for (model, seconds, size) in [
        ("alpha2Stable", "10", "720x1280"),
        ("gamma_1_5_pro_720p", "5", "1280x720"),
        ("epsilon_video3", "6", "854x480"),
        ("eta 1.0 文生视频", "4", "1024x1024"),
    ] {
        let v = create(
            &http,
            DEMO,
            &json!({"model": model, "prompt": "p", "seconds": seconds, "size": size}),
        )
        .await;
        assert_eq!(v["seconds"], seconds);
    }
}

#[tokio::test]
async fn ids_open_only_on_the_endpoint_they_were_submitted_on() {
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();
    let video = create(&http, DEMO, &json!({"model": "deltaq3-pro", "prompt": "p"})).await;
    let video = video["id"].as_str().unwrap();
    let task = http
        .submit_id(
            MODEL_CENTER,
            DEMO,
            &json!({"model": "deltaq3-pro", "prompt": "p"}),
        )
        .await;
    for path in [
        format!("{MODEL_CENTER}/{video}"),
        format!("{VIDEOS}/{task}"),
        format!("{VIDEOS}/{task}/content"),
    ] {
        let r = http.get(&path, DEMO).await;
        assert_error(&r, 404, "task_not_found", Some("id"));
    }
    // Another key's video is the same 404.
    let r = http.get(&format!("{VIDEOS}/{video}"), DEMO2).await;
    assert_error(&r, 404, "task_not_found", Some("id"));
    let ids = |r: Reply| -> Vec<String> {
        r.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(http.get(VIDEOS, DEMO).await), vec![video.to_string()]);
    assert_eq!(ids(http.get(MODEL_CENTER, DEMO).await), vec![task]);
}

/// Every id of `GET /v1/videos?order=…`, page by page of 2.
async fn all_pages(http: &Http, order: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut after = String::new();
    loop {
        let r = http
            .get(&format!("{VIDEOS}?limit=2&order={order}{after}"), DEMO)
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let page = r.json();
        assert_eq!(page["object"], "list");
        let data = page["data"].as_array().unwrap();
        for v in data {
            assert_eq!(v["object"], "video");
            ids.push(v["id"].as_str().unwrap().to_string());
        }
        assert_eq!(page["first_id"], data[0]["id"]);
        assert_eq!(page["last_id"], data[data.len() - 1]["id"]);
        if page["has_more"] == false {
            return ids;
        }
        after = format!("&after={}", page["last_id"].as_str().unwrap());
    }
}

#[tokio::test]
async fn the_listing_pages_both_ways_without_gaps_or_repeats() {
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();
    let mut created = Vec::new();
    for _ in 0..5 {
        let v = create(&http, DEMO, &json!({"model": "deltaq3-pro", "prompt": "p"})).await;
        created.push(v["id"].as_str().unwrap().to_string());
    }
    assert_eq!(all_pages(&http, "asc").await, created);
    created.reverse();
    assert_eq!(all_pages(&http, "desc").await, created);
    let unique: BTreeSet<_> = created.iter().collect();
    assert_eq!(unique.len(), 5);
    let r = http.get(&format!("{VIDEOS}?order=sideways"), DEMO).await;
    assert_error(&r, 400, "invalid_parameter", Some("order"));
}

/// A `multipart/form-data` body of `fields` and one file part `input_reference`.
pub fn form(fields: &[(&str, &str)], file: &[u8], content_type: &str) -> (String, Vec<u8>) {
    let boundary = "mediagate-test-boundary";
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend(
            format!(
                "--{boundary}\r\ncontent-disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .bytes(),
        );
    }
    body.extend(format!("--{boundary}\r\ncontent-disposition: form-data; name=\"input_reference\"; filename=\"in.png\"\r\ncontent-type: {content_type}\r\n\r\n").bytes());
    body.extend_from_slice(file);
    body.extend(format!("\r\n--{boundary}--\r\n").bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

/// Routes where model `m1` is served by `fake` (a `tasks` provider) and uploads are
/// kept in file storage.
fn uploads_to(fake: &Fake) -> Routes {
    Routes::new()
        .storage("file://media")
        .provider(tasks_provider("up", &fake.url(), ""))
        .family(family("test", &["up"], &["m1"]))
}

/// The path of the gateway's signed link to an uploaded input, in the submit `sent`
/// to the provider.
fn input_path(sent: &serde_json::Value) -> String {
    let link = sent["first_image"].as_str().expect("first_image");
    link[link.find("/v1/videos/inputs/").expect("a gateway link")..].to_string()
}

/// `POST /v1/videos` of a form (`form`'s answer) with the demo key.
async fn post_form(http: &Http, (content_type, body): (String, Vec<u8>)) -> Reply {
    let auth = format!("Bearer {DEMO}");
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", &content_type),
    ];
    http.send(Method::POST, VIDEOS, &headers, body).await
}

#[tokio::test]
async fn an_uploaded_input_reaches_the_provider_as_a_signed_link_to_its_bytes() {
    let fake = Fake::start().await;
    let routes = uploads_to(&fake);
    let gw = Gateway::start(routes).await;
    let http = gw.client();
    fake.on("POST /tasks", Answer::json(200, json!({"id": "t1"})));
    let image: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    let (ct, body) = form(
        &[("model", "m1"), ("prompt", "p"), ("seconds", "4")],
        &image,
        "image/png",
    );
    let auth = format!("Bearer {DEMO}");
    let r = http
        .send(
            Method::POST,
            VIDEOS,
            &[("authorization", &auth), ("content-type", &ct)],
            body.clone(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = fake.only().json();
    assert_eq!(sent["duration"], 4);
    // The same upload retried with the same Idempotency-Key a second later: its link
    // has another expiry, yet it is the same request, answered as the first was.
    let keyed = |body| {
        let headers = [
            ("authorization", auth.as_str()),
            ("content-type", ct.as_str()),
            ("idempotency-key", "upload-1"),
        ];
        let http = &http;
        async move { http.send(Method::POST, VIDEOS, &headers, body).await }
    };
    let first = keyed(body.clone()).await;
    assert_eq!(first.status, 200, "{}", first.text());
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let again = keyed(body.clone()).await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.json()["id"], first.json()["id"]);
    assert_eq!(fake.take().len(), 1, "one submit reached the provider");
    let path = &input_path(&sent);
    // No key: the provider has none of ours.
    let got = http.get_bare(path).await;
    assert_eq!(got.status, 200);
    assert_eq!(&got.body[..], &image[..]);
    assert_eq!(got.header("content-type"), Some("image/png"));
    let tampered = path.replace("signature=", "signature=A");
    assert_error(
        &http.get_bare(&tampered).await,
        403,
        "invalid_signature",
        None,
    );
    // A type the providers cannot take, and storage off, are refused up front.
    let fields = [("model", "m1"), ("prompt", "p")];
    let r = post_form(&http, form(&fields, b"text", "text/plain")).await;
    assert_error(&r, 400, "invalid_parameter", Some("input_reference"));
    assert!(fake.take().is_empty());
}

/// A file the SDKs send as `application/octet-stream` (given as bytes, with no type
/// of its own) is taken by its first bytes, and served with the type they say.
#[tokio::test]
async fn an_upload_sent_as_octet_stream_is_taken_by_its_signature() {
    let fake = Fake::start().await;
    fake.on("POST /tasks", Answer::json(200, json!({"id": "t1"})));
    let routes = uploads_to(&fake);
    let gw = Gateway::start(routes).await;
    let http = gw.client();
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend((0..=255u8).cycle().take(2000));
    let fields = [("model", "m1"), ("prompt", "p")];
    let r = post_form(&http, form(&fields, &png, "application/octet-stream")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let path = &input_path(&fake.only().json());
    assert!(path.contains(".png?"), "{path}");
    let got = http.get_bare(path).await;
    assert_eq!(got.status, 200);
    assert_eq!(&got.body[..], &png[..]);
    assert_eq!(got.header("content-type"), Some("image/png"));
    // Bytes of no type the providers take are refused, as a declared one would be.
    let r = post_form(
        &http,
        form(&fields, b"GIF89a....", "application/octet-stream"),
    )
    .await;
    let msg = assert_error(&r, 400, "invalid_parameter", Some("input_reference"));
    assert!(msg.contains("image/png"), "{msg}");
    assert!(fake.take().is_empty());
}

/// A request refused for its other fields keeps nothing of its upload.
#[tokio::test]
async fn an_upload_with_a_refused_request_is_not_kept() {
    let fake = Fake::start().await;
    fake.on("POST /tasks", Answer::json(200, json!({"id": "t1"})));
    let routes = uploads_to(&fake);
    let gw = Gateway::start(routes).await;
    let kept = || {
        let mut kept = Vec::new();
        let mut dirs = vec![gw.dir().path().join("media")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                match entry.file_type().unwrap().is_dir() {
                    true => dirs.push(entry.path()),
                    false => kept.push(entry.path()),
                }
            }
        }
        kept
    };
    let image: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    let fields = [("model", "m1"), ("prompt", "p"), ("seconds", "many")];
    let r = post_form(&gw.client(), form(&fields, &image, "image/png")).await;
    assert_error(&r, 400, "invalid_parameter", Some("seconds"));
    assert!(kept().is_empty(), "{:?}", kept());
    assert!(fake.take().is_empty());
    // The same upload in a valid request is kept, there.
    let fields = [("model", "m1"), ("prompt", "p"), ("seconds", "4")];
    let r = post_form(&gw.client(), form(&fields, &image, "image/png")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(kept().len(), 1, "{:?}", kept());
}

#[tokio::test]
async fn an_upload_is_refused_where_no_provider_could_fetch_it() {
    let fake = Fake::start().await;
    let routes = Routes::new()
        .provider(tasks_provider("up", &fake.url(), ""))
        .family(family("test", &["up"], &["m1"]));
    let gw = Gateway::start(routes).await;
    let fields = [("model", "m1"), ("prompt", "p")];
    let r = post_form(&gw.client(), form(&fields, b"png", "image/png")).await;
    let msg = assert_error(&r, 400, "invalid_parameter", Some("input_reference"));
    assert!(msg.contains("storage"), "{msg}");
    assert!(fake.take().is_empty());
}

#[tokio::test]
async fn a_family_may_keep_off_v1_videos_and_only_video_families_are_on_it() {
    let off = "\n[families.off]\nkind = \"video\"\nproviders = [\"up\"]\nmodels = [\"m2\"]\nschema = \"video\"\ndefault_seconds = 5\nopenai_videos = false\n";
    let routes = Routes::simulated(&["m1"]).family(off);
    let gw = Gateway::start(&routes).await;
    let http = gw.client();
    let r = http
        .post_json(VIDEOS, DEMO, &json!({"model": "m2", "prompt": "p"}))
        .await;
    assert_error(&r, 400, "unknown_model", Some("model"));
    create(&http, DEMO, &json!({"model": "m1", "prompt": "p"})).await;
    let listed = http.get("/v1/models", DEMO).await.json();
    let ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["m1"]);
    // OpenAI's `Model` fields, here only.
    assert_eq!(listed["data"][0]["created"], 0, "{listed}");
    assert_eq!(listed["data"][0]["owned_by"], "mediagate", "{listed}");
    let one = http.get("/v1/models/m1", DEMO).await.json();
    assert_eq!(one["owned_by"], "mediagate", "{one}");
    let theirs = http.get("/v2/model-center/models", DEMO).await.json();
    assert!(theirs["data"][0].get("owned_by").is_none(), "{theirs}");
    // Still served where it was.
    http.submit_id(MODEL_CENTER, DEMO, &json!({"model": "m2", "prompt": "p"}))
        .await;

    let image = "\n[families.pics]\nkind = \"image\"\nendpoints = [\"openai-videos\"]\nproviders = [\"up\"]\nmodels = [\"i1\"]\nschema = \"video\"\nopenai_request = '{prompt}'\n";
    let dir = gw.dir().path();
    let file = dir.join("bad.toml");
    std::fs::write(&file, Routes::simulated(&["m1"]).family(image).render()).unwrap();
    let out = check(dir, &file, &[]);
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("families.pics.endpoints"), "{said}");
    assert!(said.contains("families.pics.openai_request"), "{said}");
}

#[tokio::test]
async fn a_finished_video_is_posted_as_openais_event_signed_and_a_retry_replays_its_answer() {
    let receiver = Fake::start().await;
    receiver.on("POST /hook", Answer::json(200, json!({})));
    let routes = Routes::tracked_simulator()
        .top("[webhooks]\nallow_http_hosts = [\"127.0.0.1\"]\nallow_private_networks = [\"127.0.0.1\"]\n")
        .demo_key(&format!(
            "webhook_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nwebhook_url = \"{}/hook\"",
            receiver.url()
        ));
    let gw = Gateway::start(routes).await;
    let http = gw.client();
    let auth = format!("Bearer {DEMO}");
    let headers = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
        ("idempotency-key", "video-1"),
    ];
    let body = json!({"model": "m1", "prompt": "p", "seconds": "5"}).to_string();
    let first = http
        .send(Method::POST, VIDEOS, &headers, body.clone())
        .await;
    assert_eq!(first.status, 200, "{}", first.text());
    let again = http.send(Method::POST, VIDEOS, &headers, body).await;
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json(), first.json());
    let id = first.json()["id"].as_str().unwrap().to_string();
    let mut delivered = Vec::new();
    eventually("the webhook is delivered", async || {
        delivered.extend(receiver.take());
        !delivered.is_empty()
    })
    .await;
    let seen = &delivered[0];
    let event = seen.json();
    assert_eq!(event["object"], "event");
    assert_eq!(event["type"], "video.completed");
    assert_eq!(event["data"], json!({"id": id}));
    assert_eq!(event["id"], seen.header("webhook-id").unwrap());
    assert!(event["created_at"].as_u64().unwrap() >= first.json()["created_at"].as_u64().unwrap());
    // Checked by the webhook tests' own implementation of Standard Webhooks.
    assert!(crate::webhooks::signed_with(
        seen,
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    ));
}

/// Tasks whose ids were sealed with a secret no longer configured are not listed; a
/// page made only of them is filled with the tasks after them rather than coming
/// back empty with `has_more` and no `last_id` to go on from.
#[tokio::test]
async fn a_page_of_tasks_sealed_with_a_retired_secret_is_filled_with_the_next_ones() {
    let gw = Gateway::start(Routes::simulated(&["m1"])).await;
    for n in 0..3 {
        create(
            &gw.client(),
            DEMO,
            &json!({"model": "m1", "prompt": format!("old {n}")}),
        )
        .await;
    }
    let dir = gw.stop().await;
    let secret = "a-new-task-secret-of-more-than-32-characters-0123";
    std::fs::write(dir.path().join("task-secret"), secret).unwrap();
    let gw = Gateway::start_in(dir).await;
    let http = gw.client();
    let mut new = Vec::new();
    for n in 0..3 {
        let task = create(
            &http,
            DEMO,
            &json!({"model": "m1", "prompt": format!("new {n}")}),
        )
        .await;
        new.push(task["id"].as_str().unwrap().to_string());
    }
    let page = |after: Option<&str>| {
        let after = after.map_or(String::new(), |a| format!("&after={a}"));
        let http = &http;
        async move {
            let page = http
                .get(&format!("{VIDEOS}?order=asc&limit=2{after}"), DEMO)
                .await
                .json();
            let ids: Vec<String> = page["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v["id"].as_str().unwrap().to_string())
                .collect();
            (ids, page)
        }
    };
    let (ids, first) = page(None).await;
    assert_eq!(ids, new[..2], "{first}");
    assert_eq!(first["last_id"], new[1].as_str(), "{first}");
    assert_eq!(first["has_more"], true, "{first}");
    let (ids, second) = page(Some(&new[1])).await;
    assert_eq!(ids, new[2..], "{second}");
    assert_eq!(second["has_more"], false, "{second}");
}
