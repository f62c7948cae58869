//! Durable results: a completed task's media is copied from its provider into storage
//! (local files, the embedded default), with its size, type and SHA-256 in the ledger.

use bytes::Bytes;
use http::Method;
use serde_json::json;

use crate::support::{
    DEMO, DEMO2, Gateway, MODEL_CENTER, Routes, assert_error, completed_with, eventually, expire,
    family, model_center_provider, path_of, sha256, stored,
};

/// The embedded default: files beside the ledger.
const FILES: &str = "file://.mediagate/media";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_result_of_a_completed_task_is_copied_into_storage_with_its_hash() {
    let first: Vec<u8> = (0..3_000_000_u32).map(|i| (i % 251) as u8).collect();
    let second = b"a second, smaller result".to_vec();
    let fake = completed_with(&[
        ("/media/a.mp4", first.clone()),
        ("/media/b.mp4", second.clone()),
    ])
    .await;
    let gw = Gateway::start(Routes::upstream(&fake.url(), "").storage(FILES)).await;
    let http = gw.client();
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
        .await;
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
    // Each result was downloaded once.
    let downloads = fake
        .take()
        .into_iter()
        .filter(|s| s.line().starts_with("GET /media/"))
        .count();
    assert_eq!(downloads, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_over_max_result_bytes_is_not_kept() {
    let fake = completed_with(&[("/media/big.mp4", vec![7_u8; 5_000])]).await;
    let routes = Routes::new()
        .provider(model_center_provider("up", &fake.url(), ""))
        .family(family("test", &["up"], &["m1"]).to_string() + "max_result_bytes = 4096\n")
        .storage(FILES);
    let gw = Gateway::start(routes).await;
    let http = gw.client();
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
        .await;
    let task = http.query(MODEL_CENTER, DEMO, &id).await;
    assert_eq!(task["status"], "completed");
    let ledger = gw.dir().path().join(".mediagate/ledger.db");
    eventually("the copy is given up", async || {
        stored(&ledger).1.as_deref() == Some("skipped")
    })
    .await;
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
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_storage_nothing_is_owed() {
    let fake = completed_with(&[("/media/a.mp4", b"bytes".to_vec())]).await;
    let routes = Routes::upstream(&fake.url(), "").storage("none");
    let gw = Gateway::start(routes).await;
    let http = gw.client();
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
        .await;
    assert_eq!(
        http.query(MODEL_CENTER, DEMO, &id).await["status"],
        "completed"
    );
    let ledger = gw.dir().path().join(".mediagate/ledger.db");
    // The completion is written before the query is answered.
    assert_eq!(stored(&ledger), (Vec::new(), None));
    assert!(!gw.dir().path().join(".mediagate/media").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_results_are_served_by_signed_links_after_the_provider_dropped_them() {
    let first: Vec<u8> = (0..100_000_u32).map(|i| (i % 251) as u8).collect();
    let second = b"the second result".to_vec();
    let fake = completed_with(&[
        ("/media/a.mp4", first.clone()),
        ("/media/b.mp4", second.clone()),
    ])
    .await;
    let gw = Gateway::start(Routes::upstream(&fake.url(), "").storage(FILES)).await;
    let http = gw.client();
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
        .await;
    let ledger = gw.dir().path().join(".mediagate/ledger.db");
    let _ = http.query(MODEL_CENTER, DEMO, &id).await;
    eventually("the copy is done", async || {
        stored(&ledger).1.as_deref() == Some("stored")
    })
    .await;
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
    let routes = Routes::upstream(&fake.url(), "").storage(FILES);
    // Links that last one second.
    let routes = routes.render().replace(
        "[storage]\nurl = \"file://.mediagate/media\"",
        "[storage]\nurl = \"file://.mediagate/media\"\nlink_ttl_secs = 1",
    );
    let gw = Gateway::start(routes).await;
    let http = gw.client();
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
        .await;
    let other = http
        .submit_id(MODEL_CENTER, DEMO2, &json!({"model": "m1", "prompt": "q"}))
        .await;
    let link = path_of(
        http.query(MODEL_CENTER, DEMO, &id).await["video_url"]
            .as_str()
            .unwrap(),
    );
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
