//! Durable results: a completed task's media is copied from its provider into storage
//! (local files, the embedded default), with its size, type and SHA-256 in the ledger.

use std::path::Path;

use bytes::Bytes;
use http::Method;
use serde_json::json;

use crate::support::{
    Answer, DEMO, DEMO2, Fake, Gateway, Http, MODEL_CENTER, Proc, Routes, assert_error,
    completed_with, eventually, expire, family, model_center_provider, operator, path_of, sha256,
    shipped_routes, stored,
};

/// A task of `m1` submitted with the demo key: the client, and the task's id.
async fn submitted(gw: &Gateway) -> (crate::support::Http, String) {
    let http = gw.client();
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
        .await;
    (http, id)
}

/// The path of the demo key's task `id`'s (first) result link, as its query gives it.
async fn link_of(http: &crate::support::Http, id: &str) -> String {
    path_of(
        http.query(MODEL_CENTER, DEMO, id).await["video_url"]
            .as_str()
            .unwrap(),
    )
}

/// Wait until the copy of the task in ledger row 1 ends `state`; the ledger's path.
async fn copy_ends(gw: &Gateway, state: &str) -> std::path::PathBuf {
    let ledger = gw.dir().path().join(".mediagate/ledger.db");
    eventually(&format!("the copy ends {state}"), async || {
        stored(&ledger).1.as_deref() == Some(state)
    })
    .await;
    ledger
}

/// `len` bytes that are not all alike.
fn media(len: u32) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// A task completed with `first` and `second` as its results, on a gateway that keeps
/// them in files.
async fn two_results(first: &[u8], second: &[u8]) -> (Fake, Gateway) {
    let files = [
        ("/media/a.mp4", first.to_vec()),
        ("/media/b.mp4", second.to_vec()),
    ];
    let fake = completed_with(&files).await;
    let gw = Gateway::start(Routes::upstream(&fake.url(), "").storage(FILES)).await;
    (fake, gw)
}

/// `DELETE` of task `id` with `key`.
async fn delete(http: &crate::support::Http, key: &str, id: &str) -> crate::support::Reply {
    http.delete(&format!("{MODEL_CENTER}/{id}"), key).await
}

/// The embedded default: files beside the ledger.
const FILES: &str = "file://.mediagate/media";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_result_of_a_completed_task_is_copied_into_storage_with_its_hash() {
    let (first, second) = (media(3_000_000), b"a second, smaller result".to_vec());
    let (fake, gw) = two_results(&first, &second).await;
    let (http, id) = submitted(&gw).await;
    // The query sees it completed: the copy is owed from then on.
    assert_eq!(
        http.query(MODEL_CENTER, DEMO, &id).await["status"],
        "completed"
    );
    let dir = gw.dir().path().to_path_buf();
    let ledger = dir.join(".mediagate/ledger.db");
    eventually("the copy is done", async || {
        stored(&ledger).1.as_deref() == Some("stored")
    })
    .await;
    let (results, _) = stored(&ledger);
    let mp4 = Some("video/mp4".to_string());
    assert_eq!(
        results,
        [
            (0, first.len() as i64, mp4.clone(), sha256(&first)),
            (1, second.len() as i64, mp4, sha256(&second)),
        ]
    );
    let kept =
        |n: usize| std::fs::read(dir.join(format!(".mediagate/media/results/1/{n}"))).unwrap();
    assert_eq!(kept(0), first);
    assert_eq!(kept(1), second);
    // The operator sees them.
    let shown = operator(gw.dir(), &["tasks", "show", &id]);
    let first_line = format!(
        "result 0: results/1/0, 3000000 bytes, video/mp4, sha256 {}",
        sha256(&first)
    );
    assert!(shown.contains(&first_line), "{shown}");
    assert!(shown.contains("result 1: results/1/1, 24 bytes"), "{shown}");
    // Each result was downloaded once.
    let downloads = fake
        .take()
        .into_iter()
        .filter(|s| s.line().starts_with("GET /media/"))
        .count();
    assert_eq!(downloads, 2);
}

/// The family's `max_result_bytes` holds for `m1`; `m2` has its own, larger one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_over_max_result_bytes_is_not_kept() {
    let fake = completed_with(&[("/media/big.mp4", vec![7_u8; 5_000])]).await;
    let family = family("test", &["up"], &["m1", "m2"]).to_string()
        + "max_result_bytes = 4096\n"
        + "[families.test.per_model.m2]\nmax_result_bytes = 8192\n";
    let routes = Routes::new()
        .provider(model_center_provider("up", &fake.url(), ""))
        .family(family)
        .storage(FILES);
    let gw = Gateway::start(routes).await;
    let (http, id) = submitted(&gw).await;
    let task = http.query(MODEL_CENTER, DEMO, &id).await;
    assert_eq!(task["status"], "completed");
    let ledger = copy_ends(&gw, "skipped").await;
    assert!(stored(&ledger).0.is_empty());
    assert!(
        !gw.dir()
            .path()
            .join(".mediagate/media/results/1/0")
            .exists()
    );
    // Its link still works: the gateway streams the result from the provider, for as
    // long as the provider keeps it.
    let again = http.query(MODEL_CENTER, DEMO, &id).await;
    let link = path_of(again["video_url"].as_str().unwrap());
    let r = http.get_bare(&link).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(&r.body[..], &[7_u8; 5_000][..]);
    assert!(r.header("etag").is_none(), "not from storage");

    // The same result of `m2` fits its own limit.
    fake.on("POST /v2/model-center/tasks", Answer::queued("r-2"));
    let urls = json!([format!("{}/media/big.mp4", fake.url())]);
    fake.on(
        "GET /v2/model-center/tasks/r-2",
        Answer::json(
            200,
            json!({"id": "r-2", "status": "completed", "urls": urls}),
        ),
    );
    let id2 = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m2", "prompt": "p"}))
        .await;
    assert_eq!(
        http.query(MODEL_CENTER, DEMO, &id2).await["status"],
        "completed"
    );
    eventually("m2's copy is stored", async || {
        copy_of_model(&ledger, "m2").0.as_deref() == Some("stored")
    })
    .await;
    assert!(
        gw.dir()
            .path()
            .join(".mediagate/media/results/2/0")
            .exists()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_storage_nothing_is_owed() {
    let fake = completed_with(&[("/media/a.mp4", b"bytes".to_vec())]).await;
    let routes = Routes::upstream(&fake.url(), "").storage("none");
    let gw = Gateway::start(routes).await;
    let (http, id) = submitted(&gw).await;
    assert_eq!(
        http.query(MODEL_CENTER, DEMO, &id).await["status"],
        "completed"
    );
    let ledger = gw.dir().path().join(".mediagate/ledger.db");
    // The completion is written before the query is answered.
    assert_eq!(stored(&ledger), (Vec::new(), None));
    assert!(!gw.dir().path().join(".mediagate/media").exists());
}

/// A copy given up leaves in storage only the results the ledger records: an object
/// under the task's keys that an earlier attempt finished after it was cut short
/// (here put there by hand) is deleted; the result stored and recorded stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_given_up_leaves_no_object_but_its_recorded_results() {
    let first = media(100_000);
    let (fake, gw) = two_results(&first, b"never fetched").await;
    let results = gw.dir().path().join(".mediagate/media/results/1");
    std::fs::create_dir_all(&results).unwrap();
    std::fs::write(
        results.join("1"),
        b"finished after its attempt was given up",
    )
    .unwrap();
    // The second result is gone at the provider: the copy is given up after the first.
    expire(&fake, &["/media/b.mp4"]);
    let (http, id) = submitted(&gw).await;
    let _ = http.query(MODEL_CENTER, DEMO, &id).await;
    let ledger = copy_ends(&gw, "skipped").await;
    let (recorded, _) = stored(&ledger);
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].3, sha256(&first));
    assert_eq!(std::fs::read(results.join("0")).unwrap(), first);
    assert!(
        !results.join("1").exists(),
        "the unrecorded object is still there"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_results_are_served_by_signed_links_after_the_provider_dropped_them() {
    let (first, second) = (media(100_000), b"the second result".to_vec());
    let (fake, gw) = two_results(&first, &second).await;
    let (http, id) = submitted(&gw).await;
    let _ = http.query(MODEL_CENTER, DEMO, &id).await;
    copy_ends(&gw, "stored").await;
    let _ = fake.take();
    // The provider keeps nothing any more.
    expire(&fake, &["/media/a.mp4", "/media/b.mp4"]);
    let task = http.query(MODEL_CENTER, DEMO, &id).await;
    let urls: Vec<String> = serde_json::from_value(task["urls"].clone()).unwrap();
    assert_eq!(urls.len(), 2, "{task}");
    assert_eq!(task["video_url"], urls[0].as_str());
    assert!(
        urls[0].contains(&format!("{MODEL_CENTER}/{id}/content?expires=")),
        "{task}"
    );
    assert!(
        urls[1].contains(&format!("{MODEL_CENTER}/{id}/content/1?expires=")),
        "{task}"
    );
    let (link0, link1) = (path_of(&urls[0]), path_of(&urls[1]));

    // No key needed: the signature stands in for it.
    let r = http.get_bare(&link0).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(&r.body[..], &first[..]);
    assert_eq!(r.header("content-type"), Some("video/mp4"));
    assert_eq!(r.header_u64("content-length"), first.len() as u64);
    assert_eq!(r.header("accept-ranges"), Some("bytes"));
    let etag = r.header("etag").unwrap().to_string();
    assert_eq!(etag, format!("\"{}\"", sha256(&first)));
    let last_modified = r.header("last-modified").unwrap().to_string();
    let r = http.get_bare(&link1).await;
    assert_eq!(&r.body[..], &second[..]);

    // A range; the same with If-Range of this version; of another version: whole.
    let get = |headers: Vec<(&'static str, String)>| {
        let http = http.clone();
        let link0 = link0.clone();
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            http.send(Method::GET, &link0, &headers, Bytes::new()).await
        }
    };
    let r = get(vec![("range", "bytes=10-19".into())]).await;
    assert_eq!(r.status, 206);
    assert_eq!(&r.body[..], &first[10..20]);
    assert_eq!(r.header("content-range"), Some("bytes 10-19/100000"));
    let r = get(vec![
        ("range", "bytes=-5".into()),
        ("if-range", etag.clone()),
    ])
    .await;
    assert_eq!(r.status, 206);
    assert_eq!(&r.body[..], &first[first.len() - 5..]);
    let r = get(vec![
        ("range", "bytes=0-0".into()),
        ("if-range", last_modified.clone()),
    ])
    .await;
    assert_eq!(r.status, 206);
    let r = get(vec![
        ("range", "bytes=10-19".into()),
        ("if-range", "\"other\"".into()),
    ])
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), first.len());
    let r = get(vec![("range", "bytes=100000-".into())]).await;
    assert_error(&r, 416, "range_not_satisfiable", None);
    assert_eq!(r.header("content-range"), Some("bytes */100000"));
    // Revalidation, and HEAD.
    let r = get(vec![("if-none-match", etag.clone())]).await;
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    let r = http.send(Method::HEAD, &link0, &[], Bytes::new()).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header_u64("content-length"), first.len() as u64);
    assert!(r.body.is_empty());
    // The owner's key opens it too, without a signature.
    let plain = format!("{MODEL_CENTER}/{id}/content");
    assert_eq!(&http.get(&plain, DEMO).await.body[..], &first[..]);
    // Nothing went to the provider for any of it.
    let asked: Vec<String> = fake.take().iter().map(|s| s.line()).collect();
    assert!(
        asked.iter().all(|l| !l.starts_with("GET /media/")),
        "{asked:?}"
    );

    // After a restart, from the same storage.
    let dir = gw.stop().await;
    let gw = Gateway::start_in(dir).await;
    let r = gw.client().get_bare(&link0).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(&r.body[..], &first[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_link_is_refused_when_tampered_with_used_elsewhere_or_expired() {
    let fake = completed_with(&[("/media/a.mp4", b"bytes".to_vec())]).await;
    // Links that last one second.
    let routes = Routes::upstream(&fake.url(), "")
        .storage(FILES)
        .storage_setting("link_ttl_secs = 1");
    let gw = Gateway::start(routes).await;
    let (http, id) = submitted(&gw).await;
    let other = http
        .submit_id(MODEL_CENTER, DEMO2, &json!({"model": "m1", "prompt": "q"}))
        .await;
    let link = link_of(&http, &id).await;
    assert_eq!(http.get_bare(&link).await.status, 200);
    let signature = link.split("signature=").nth(1).unwrap().to_string();
    let expires = link
        .split("expires=")
        .nth(1)
        .unwrap()
        .split('&')
        .next()
        .unwrap()
        .to_string();

    // Another task, another result, another expiry, a changed signature, none.
    let refused = [
        format!("{MODEL_CENTER}/{other}/content?expires={expires}&signature={signature}"),
        format!("{MODEL_CENTER}/{id}/content/1?expires={expires}&signature={signature}"),
        format!(
            "{MODEL_CENTER}/{id}/content?expires={}&signature={signature}",
            expires.parse::<u64>().unwrap() + 3600
        ),
        format!(
            "{MODEL_CENTER}/{id}/content?expires={expires}&signature=A{}",
            &signature[1..]
        ),
        format!("{MODEL_CENTER}/{id}/content?expires={expires}&signature="),
    ];
    for path in &refused {
        let r = http.get_bare(path).await;
        assert_error(&r, 403, "invalid_signature", None);
    }
    // Without a signature, the key is asked for, as on every route.
    let r = http.get_bare(&format!("{MODEL_CENTER}/{id}/content")).await;
    assert_error(&r, 401, "missing_api_key", None);
    // Past its expiry.
    tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
    let r = http.get_bare(&link).await;
    assert_error(&r, 403, "link_expired", None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_past_keep_days_is_deleted_and_its_link_answers_410() {
    let fake = completed_with(&[("/media/a.mp4", b"short-lived".to_vec())]).await;
    // Kept for no day at all: past its retention as soon as it is stored.
    let routes = Routes::new()
        .provider(model_center_provider("up", &fake.url(), ""))
        .family(family("test", &["up"], &["m1"]).to_string() + "keep_days = 0\n")
        .storage(FILES)
        .server("metrics_listen = \"127.0.0.1:0\"");
    let gw = Gateway::start(routes).await;
    let (http, id) = submitted(&gw).await;
    let link = link_of(&http, &id).await;
    let dir = gw.dir().path().to_path_buf();
    let deleted = || {
        rusqlite::Connection::open(dir.join(".mediagate/ledger.db"))
            .and_then(|db| {
                db.query_row(
                    "SELECT deleted_ms IS NOT NULL FROM results WHERE task_row = 1 AND n = 0",
                    [],
                    |r| r.get::<_, bool>(0),
                )
            })
            .unwrap_or(false)
    };
    eventually("the expired result is deleted", async || deleted()).await;
    assert!(!dir.join(".mediagate/media/results/1/0").exists());
    let r = http.get_bare(&link).await;
    assert_error(&r, 410, "result_expired", None);
    let metrics = gw.admin().metrics().await;
    assert_eq!(metrics.sum(&["mediagate_results_expired_total"]), 1.0);
    assert_eq!(
        metrics.sum(&["mediagate_result_copies_total", "stored"]),
        1.0
    );
    assert_eq!(metrics.sum(&["mediagate_result_bytes_stored_total"]), 11.0);
}

/// The ids listed for the demo key.
async fn listed(http: &crate::support::Http) -> Vec<String> {
    let page = http.get(MODEL_CENTER, DEMO).await.json();
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_finished_task_removes_its_results_and_its_listing() {
    let fake = completed_with(&[("/media/a.mp4", b"to be deleted".to_vec())]).await;
    let gw = Gateway::start(Routes::upstream(&fake.url(), "").storage(FILES)).await;
    let (http, id) = submitted(&gw).await;
    let link = link_of(&http, &id).await;
    copy_ends(&gw, "stored").await;
    assert_eq!(listed(&http).await, std::slice::from_ref(&id));
    // Another key's DELETE finds nothing, as its query would.
    let r = delete(&http, DEMO2, &id).await;
    assert_error(&r, 404, "task_not_found", Some("id"));
    for _ in 0..2 {
        let r = delete(&http, DEMO, &id).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(
            r.json(),
            json!({"id": id, "object": "video", "deleted": true})
        );
    }
    assert!(
        !gw.dir()
            .path()
            .join(".mediagate/media/results/1/0")
            .exists()
    );
    assert_eq!(listed(&http).await, Vec::<String>::new());
    assert_error(&http.get_bare(&link).await, 410, "result_expired", None);
}

/// Without storage the content is the provider's, passed through; once the task is
/// deleted it is 410 as a stored result would be, though the provider still has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_task_s_content_is_not_passed_on_from_its_provider() {
    let media = b"kept by the provider".to_vec();
    let fake = completed_with(&[("/media/a.mp4", media.clone())]).await;
    let gw = Gateway::start(Routes::upstream(&fake.url(), "")).await;
    let (http, id) = submitted(&gw).await;
    let content = format!("{MODEL_CENTER}/{id}/content");
    let r = http.get(&content, DEMO).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(&r.body[..], &media[..]);
    assert_eq!(delete(&http, DEMO, &id).await.status, 200);
    assert_error(&http.get(&content, DEMO).await, 410, "result_expired", None);
}

/// Anyone holding a signed link may fetch it without a key, but not without limit:
/// it counts against its task owner's rate (here a burst of 4, hardly refilled),
/// with the owner's rate headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_link_counts_against_its_owner_s_limits() {
    let fake = completed_with(&[("/media/a.mp4", b"limited".to_vec())]).await;
    let routes = Routes::upstream(&fake.url(), "")
        .storage(FILES)
        .demo_key("limits = { rate_per_second = 0.01, burst = 4 }");
    let gw = Gateway::start(routes).await;
    let (http, id) = submitted(&gw).await;
    let link = link_of(&http, &id).await;
    copy_ends(&gw, "stored").await;
    // The submit and the query took two of the four.
    let fetches: Vec<_> = (0..4)
        .map(|_| {
            let (http, link) = (http.clone(), link.clone());
            tokio::spawn(async move { http.get_bare(&link).await })
        })
        .collect();
    let mut statuses = Vec::new();
    for fetch in fetches {
        let r = fetch.await.unwrap();
        if r.status == 429 {
            assert_error(&r, 429, "rate_limited", None);
            assert_eq!(r.header("x-ratelimit-limit"), Some("4"));
        }
        statuses.push(r.status.as_u16());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 429, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_ends_after_its_task_was_deleted_keeps_nothing() {
    let (fake, held) = a_held_result().await;
    let gw = Gateway::start(Routes::upstream(&fake.url(), "").storage(FILES)).await;
    let (http, id) = submitted(&gw).await;
    let link = link_of(&http, &id).await;
    // The copy is under way when its owner deletes the task.
    held.arrived(1).await;
    let r = delete(&http, DEMO, &id).await;
    assert_eq!(r.status, 200, "{}", r.text());
    held.release();
    copy_ends(&gw, "stored").await;
    // What the copy wrote is not served, and is removed.
    assert_error(&http.get_bare(&link).await, 410, "result_expired", None);
    let kept = gw.dir().path().join(".mediagate/media/results/1/0");
    eventually("the copied object is deleted", async || !kept.exists()).await;
    assert_error(&http.get_bare(&link).await, 410, "result_expired", None);
}

/// A provider `up` (serving `m1`) whose task `r-1` stays queued and accepts its
/// cancel step.
async fn cancelable() -> (Fake, Routes) {
    let fake = Fake::start().await;
    fake.on("POST /v2/model-center/tasks", Answer::queued("r-1"));
    fake.on("GET /v2/model-center/tasks/r-1", Answer::queued("r-1"));
    fake.on(
        "POST /v2/model-center/tasks/r-1/cancel",
        Answer::json(200, json!({})),
    );
    let cancel = "\n[providers.up.cancel]\npath = '\"/v2/model-center/tasks/\\($id)/cancel\"'\n";
    let routes = Routes::new()
        .provider(model_center_provider("up", &fake.url(), "") + cancel)
        .family(family("test", &["up"], &["m1"]));
    (fake, routes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_unfinished_task_cancels_it_at_its_provider_once() {
    let (fake, routes) = cancelable().await;
    let gw = Gateway::start(routes).await;
    let (http, id) = submitted(&gw).await;
    let _ = fake.take();
    for _ in 0..2 {
        let r = delete(&http, DEMO, &id).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["deleted"], true);
    }
    let cancels = fake
        .take()
        .iter()
        .filter(|s| {
            s.line()
                .starts_with("POST /v2/model-center/tasks/r-1/cancel")
        })
        .count();
    assert_eq!(
        cancels, 1,
        "cancelled once; the second DELETE found it finished"
    );
    let task = http.query(MODEL_CENTER, DEMO, &id).await;
    assert_eq!(task["status"], "failed", "{task}");
    assert_eq!(task["error"]["code"], "canceled", "{task}");
    assert_eq!(listed(&http).await, Vec::<String>::new());
}

/// A DELETE decides on a cancel by what the provider says at that moment: a task
/// a client saw queued a moment ago (the results cache still holds that) and that
/// completed since is deleted as completed, not cancelled, even by a provider that
/// would accept the cancel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_completed_since_its_last_query_is_not_cancelled_by_a_delete() {
    let (fake, routes) = cancelable().await;
    let routes = routes.poll_cache_ttl_ms(60_000);
    let gw = Gateway::start(routes).await;
    let (http, id) = submitted(&gw).await;
    assert_eq!(
        http.query(MODEL_CENTER, DEMO, &id).await["status"],
        "queued"
    );
    let done = json!({"id": "r-1", "status": "completed", "urls": ["https://cdn.example/r-1.mp4"]});
    fake.on("GET /v2/model-center/tasks/r-1", Answer::json(200, done));
    let _ = fake.take();
    let r = delete(&http, DEMO, &id).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        fake.take().iter().all(|s| !s.line().contains("/cancel")),
        "a completed task is not cancelled"
    );
    let shown = operator(gw.dir(), &["tasks", "show", "r-1"]);
    assert!(shown.contains("state: completed\n"), "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_task_without_a_cancel_step_is_not_deleted() {
    let fake = Fake::start().await;
    fake.on("POST /v2/model-center/tasks", Answer::queued("r-1"));
    fake.on("GET /v2/model-center/tasks/r-1", Answer::queued("r-1"));
    let gw = Gateway::start(Routes::upstream(&fake.url(), "")).await;
    let (http, id) = submitted(&gw).await;
    let r = delete(&http, DEMO, &id).await;
    assert_error(&r, 409, "not_cancelable", None);
    assert_eq!(listed(&http).await, std::slice::from_ref(&id));
    assert_eq!(
        http.query(MODEL_CENTER, DEMO, &id).await["status"],
        "queued"
    );
}

/// A cancel step's `success` decides over a 2xx answer: a provider that answers it
/// could not stop the task leaves it running, and the DELETE is 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_the_provider_refuses_leaves_the_task_running() {
    let fake = Fake::start().await;
    fake.on("POST /v2/model-center/tasks", Answer::queued("r-1"));
    fake.on("GET /v2/model-center/tasks/r-1", Answer::queued("r-1"));
    fake.on(
        "POST /v2/model-center/tasks/r-1/cancel",
        Answer::json(200, json!({"canceled": false, "reason": "almost done"})),
    );
    let cancel = "\n[providers.up.cancel]\npath = '\"/v2/model-center/tasks/\\($id)/cancel\"'\nsuccess = '.canceled == true'\n";
    let routes = Routes::new()
        .provider(model_center_provider("up", &fake.url(), "") + cancel)
        .family(family("test", &["up"], &["m1"]));
    let gw = Gateway::start(routes).await;
    let (http, id) = submitted(&gw).await;
    let r = delete(&http, DEMO, &id).await;
    assert_error(&r, 409, "not_cancelable", None);
    assert!(r.text().contains("would not cancel"), "{}", r.text());
    assert_eq!(listed(&http).await, std::slice::from_ref(&id));
    assert_eq!(
        http.query(MODEL_CENTER, DEMO, &id).await["status"],
        "queued"
    );

    // Once the provider says it stopped, the task ends cancelled.
    fake.on(
        "POST /v2/model-center/tasks/r-1/cancel",
        Answer::json(200, json!({"canceled": true})),
    );
    let r = delete(&http, DEMO, &id).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let task = http.query(MODEL_CENTER, DEMO, &id).await;
    assert_eq!(task["error"]["code"], "canceled", "{task}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_to_kept_results_start_with_the_configured_public_base() {
    let fake = completed_with(&[("/media/a.mp4", b"bytes".to_vec())]).await;
    let routes = Routes::upstream(&fake.url(), "")
        .storage(FILES)
        .storage_setting("public_base_url = \"https://media.example.com/\"");
    let gw = Gateway::start(routes).await;
    let (http, id) = submitted(&gw).await;
    let task = http.query(MODEL_CENTER, DEMO, &id).await;
    let link = task["video_url"].as_str().unwrap();
    let expected = format!("https://media.example.com{MODEL_CENTER}/{id}/content?expires=");
    assert!(link.starts_with(&expected), "{task}");
    // The path of it is the gateway's.
    assert_eq!(gw.client().get_bare(&path_of(link)).await.status, 200);
}

/// The state of the copy of the task of `model` (one task per model), and the
/// provider's result URLs the ledger recorded for it.
fn copy_of_model(ledger: &Path, model: &str) -> (Option<String>, Option<String>) {
    let Ok(db) = rusqlite::Connection::open(ledger) else {
        return (None, None);
    };
    db.query_row(
        "SELECT copies.state, tasks.urls FROM tasks LEFT JOIN copies ON copies.task_row = tasks.id WHERE tasks.model = ?1",
        [model],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap_or((None, None))
}

/// The shipped configuration keeps results: the simulator's real media are copied
/// into `.mediagate/media` and served from there by signed links, no key needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_simulators_media_are_kept_and_served_by_signed_links() {
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();
    let ledger = gw.dir().path().join(".mediagate/ledger.db");
    for (model, field, content_type, magic) in [
        ("sd_2.0_special", "video_url", "video/mp4", &b"ftyp"[..]),
        (
            "zeta-5.0",
            "image_url",
            "image/png",
            &b"\x89PNG\r\n\x1a\n"[..],
        ),
    ] {
        let id = http
            .submit_id(MODEL_CENTER, DEMO, &json!({"model": model, "prompt": "p"}))
            .await;
        let done = http.wait_done(MODEL_CENTER, DEMO, &id).await;
        assert_eq!(done["status"], "completed", "{done}");
        eventually("the copy is done", async || {
            copy_of_model(&ledger, model).0.as_deref() == Some("stored")
        })
        .await;
        let link = done[field].as_str().unwrap();
        assert!(
            link.contains(&format!("{MODEL_CENTER}/{id}/content?expires=")),
            "{done}"
        );
        let r = http.get_bare(&path_of(link)).await;
        assert_eq!(r.status, 200, "{model}: {}", r.text());
        assert_eq!(r.header("content-type"), Some(content_type), "{model}");
        assert!(r.header("etag").is_some(), "{model}: from storage");
        let at = if magic == b"ftyp" { 4 } else { 0 };
        assert_eq!(&r.body[at..at + magic.len()], magic, "{model}");

        // The very bytes the simulator serves at the link it answered with.
        let urls = copy_of_model(&ledger, model).1.unwrap();
        let upstream: Vec<String> = serde_json::from_str(&urls).unwrap();
        let (authority, path) = upstream[0]
            .strip_prefix("http://")
            .and_then(|rest| rest.split_once('/'))
            .unwrap();
        let simulator = Http::new(authority.parse().unwrap());
        let served = simulator.get_bare(&format!("/{path}")).await;
        assert_eq!(served.status, 200, "{model}: {}", upstream[0]);
        assert_eq!(served.header("content-type"), Some(content_type));
        assert_eq!(r.body, served.body, "{model}");
    }
}

/// A gateway started without storage skips the copies still owed from when it had
/// it: nobody would make them, and each would hold its task's webhook and its row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_owed_when_storage_is_turned_off_are_skipped() {
    let (fake, held) = a_held_result().await;
    let gw = Gateway::start(Routes::upstream(&fake.url(), "").storage(FILES)).await;
    let (http, id) = submitted(&gw).await;
    link_of(&http, &id).await;
    held.arrived(1).await;
    let dir = gw.stop().await;
    std::fs::write(
        dir.routes_path(),
        Routes::upstream(&fake.url(), "").render(),
    )
    .unwrap();
    let gw = Gateway::start_in(dir).await;
    copy_ends(&gw, "skipped").await;
    let task = gw.client().query(MODEL_CENTER, DEMO, &id).await;
    assert_eq!(task["status"], "completed", "{task}");
    drop(held);
}

/// `kill -9` while a copy is under way: after the restart the copy is made again at
/// once (a SQLite ledger is one process's: the dead one's lease, here two minutes,
/// is let go at start) and the stored file is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_cut_by_kill_9_is_made_again_whole_after_a_restart() {
    let bytes = media(2_000_000);
    let fake = completed_with(&[("/media/a.mp4", bytes.clone())]).await;
    // The download hangs: the copy is under way when the process dies.
    let held = fake.hold(
        "GET /media/a.mp4",
        Answer::raw(200, "video/mp4", bytes.clone()),
    );
    // A copy may take a minute here: its lease (twice that) outlasts the test.
    let routes = Routes::upstream(&fake.url(), "")
        .storage(FILES)
        .storage_setting("copy_timeout_ms = 60000");
    let mut gw = Proc::start(routes).await;
    let http = gw.client();
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
        .await;
    assert_eq!(
        http.query(MODEL_CENTER, DEMO, &id).await["status"],
        "completed"
    );
    held.arrived(1).await;
    gw.restart().await;
    held.release();
    let ledger = gw.dir().path().join(".mediagate/ledger.db");
    eventually("the copy is made again", async || {
        stored(&ledger).1.as_deref() == Some("stored")
    })
    .await;
    let (results, _) = stored(&ledger);
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].3, sha256(&bytes));
    let kept = std::fs::read(gw.dir().path().join(".mediagate/media/results/1/0")).unwrap();
    assert_eq!(kept, bytes, "the stored file is whole");
}

/// A 300 MB result is streamed into storage: the gateway's peak memory grows by far
/// less than the result (a copy holds two parts of 5 MiB), and the file kept has the
/// provider's bytes, by their SHA-256.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_300_mb_result_is_copied_whole_in_bounded_memory() {
    const MB: u32 = 1_000_000;
    let bytes = media(300 * MB);
    let hash = sha256(&bytes);
    let fake = completed_with(&[("/media/a.mp4", bytes)]).await;
    let routes = Routes::upstream(&fake.url(), "").storage(FILES);
    let gw = Proc::start(routes).await;
    let http = gw.client();
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
        .await;
    let before_kib = gw.memory_kib("VmRSS");
    assert_eq!(
        http.query(MODEL_CENTER, DEMO, &id).await["status"],
        "completed"
    );
    let ledger = gw.dir().path().join(".mediagate/ledger.db");
    eventually("the copy is stored", async || {
        stored(&ledger).1.as_deref() == Some("stored")
    })
    .await;
    let grew_mib = gw.memory_kib("VmHWM").saturating_sub(before_kib) / 1024;
    assert!(
        grew_mib < 50,
        "the peak RSS grew by {grew_mib} MiB during the copy"
    );
    let (results, _) = stored(&ledger);
    assert_eq!(results[0].1, i64::from(300 * MB));
    assert_eq!(results[0].3, hash, "the ledger's SHA-256");
    let kept = std::fs::read(gw.dir().path().join(".mediagate/media/results/1/0")).unwrap();
    assert_eq!(sha256(&kept), hash, "the stored file's SHA-256");
}

/// Callbacks to a receiver on 127.0.0.1 over http are allowed; retries are fast.
const WEBHOOKS: &str = r#"
[webhooks]
allow_http_hosts = ["127.0.0.1"]
allow_private_networks = ["127.0.0.1"]
first_retry_ms = 100
max_retry_interval_ms = 200
"#;

/// An upstream whose task `r-1` is completed with one result, its download held.
async fn a_held_result() -> (Fake, crate::support::Held) {
    let fake = completed_with(&[]).await;
    let urls = json!([format!("{}/media/a.mp4", fake.url())]);
    fake.on(
        "GET /v2/model-center/tasks/r-1",
        Answer::json(
            200,
            json!({"id": "r-1", "status": "completed", "urls": urls}),
        ),
    );
    let held = fake.hold(
        "GET /media/a.mp4",
        Answer::raw(200, "video/mp4", media(40_000)),
    );
    (fake, held)
}

/// A gateway keeping results in files, the demo key signing webhooks, `[storage]`
/// given `storage_line`; a task of `m1` whose one result's download is held, submitted
/// with a callback to `receiver` and completed by a query. The held download.
async fn completed_with_a_held_copy(
    receiver: &Fake,
    storage_line: &str,
) -> (Fake, Gateway, crate::support::Held) {
    let (fake, held) = a_held_result().await;
    let routes = Routes::upstream(&fake.url(), "")
        .top(WEBHOOKS)
        .demo_key("webhook_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"")
        .storage(FILES)
        .storage_setting(storage_line);
    let gw = Gateway::start(routes).await;
    let http = gw.client();
    let callback = format!("{}/hook", receiver.url());
    let id = http
        .submit_id(
            MODEL_CENTER,
            DEMO,
            &json!({"model": "m1", "prompt": "p", "callback_url": callback}),
        )
        .await;
    assert_eq!(
        http.query(MODEL_CENTER, DEMO, &id).await["status"],
        "completed"
    );
    held.arrived(1).await;
    (fake, gw, held)
}

/// The webhook of a task whose results are being copied waits for the copy: the
/// receiver that fetches the media at once gets them from storage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_waits_for_the_copy_of_its_task_s_results() {
    let receiver = Fake::start().await;
    receiver.on("POST /hook", Answer::json(204, json!(null)));
    let (_fake, gw, held) = completed_with_a_held_copy(&receiver, "webhook_wait_ms = 60000").await;
    // The deliverer looks at the ledger every 250 ms: a second is four looks.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(
        receiver.take().is_empty(),
        "posted before the copy was made"
    );
    held.release();
    eventually("the webhook is posted", async || {
        receiver
            .take()
            .iter()
            .any(|s| s.line().starts_with("POST /hook"))
    })
    .await;
    let ledger = gw.dir().path().join(".mediagate/ledger.db");
    assert_eq!(stored(&ledger).1.as_deref(), Some("stored"));
}

/// The wait is bounded: a copy that does not end holds the webhook back
/// `webhook_wait_ms` at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_waits_for_a_copy_no_longer_than_webhook_wait_ms() {
    let receiver = Fake::start().await;
    receiver.on("POST /hook", Answer::json(204, json!(null)));
    let (_fake, gw, _held) = completed_with_a_held_copy(&receiver, "webhook_wait_ms = 300").await;
    eventually("the webhook is posted", async || {
        receiver
            .take()
            .iter()
            .any(|s| s.line().starts_with("POST /hook"))
    })
    .await;
    let ledger = gw.dir().path().join(".mediagate/ledger.db");
    assert_eq!(
        stored(&ledger).1.as_deref(),
        Some("pending"),
        "the copy is still held"
    );
}
