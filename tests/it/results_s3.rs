//! Durable results in S3: a real S3-compatible server (moto, `support::s3`) spoken to
//! over HTTP with SigV4 by the gateway's storage (object_store), path-style. Each
//! gateway runs as a subprocess: S3's endpoint and credentials come from its
//! environment.

use http::Method;
use serde_json::json;

use crate::support::s3::{self, BUCKET, S3};
use crate::support::{
    Answer, ConfigDir, DEMO, Fake, MODEL_CENTER, Postgres, Proc, Routes, completed_with,
    eventually, expire, free_port, path_of, sha256, stored,
};

/// Where the gateway keeps results: a prefix in the test server's bucket.
fn storage_url() -> String {
    format!("s3://{BUCKET}/some/prefix")
}

/// The key of result `n` of the task in ledger row 1.
fn key(n: usize) -> String {
    format!("some/prefix/results/1/{n}")
}

fn routes(fake: &Fake) -> Routes {
    Routes::upstream(&fake.url(), "").storage(&storage_url())
}

/// A gateway process on the routes in `dir`, keeping results in the S3 at `port`.
async fn gateway(dir: ConfigDir, port: u16) -> Proc {
    let env = s3::env(port);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Proc::start_in(dir, &[], &env).await
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Submit to `gw`; the task's id once a query has seen it completed (the copy is owed
/// from then on).
async fn completed_task(gw: &Proc) -> String {
    let http = gw.client();
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "p"}))
        .await;
    assert_eq!(
        http.query(MODEL_CENTER, DEMO, &id).await["status"],
        "completed"
    );
    id
}

/// The task's signed links, as a query of `gw` gives them (paths).
async fn links(gw: &Proc, id: &str) -> Vec<String> {
    let task = gw.client().query(MODEL_CENTER, DEMO, id).await;
    let urls: Vec<String> = serde_json::from_value(task["urls"].clone()).unwrap();
    assert!(
        urls.iter()
            .all(|u| u.contains("/content") && u.contains("signature=")),
        "{task}"
    );
    urls.iter().map(|u| path_of(u)).collect()
}

/// `link` is answered 200 with `bytes`, from storage (its ETag is their SHA-256).
async fn served(gw: &Proc, link: &str, bytes: &[u8]) {
    let r = gw.client().get_bare(link).await;
    assert_eq!(r.status, 200, "{}\n{}", r.text(), gw.log());
    assert!(r.body[..] == bytes[..], "the bytes served differ");
    assert_eq!(
        r.header("etag"),
        Some(format!("\"{}\"", sha256(bytes)).as_str())
    );
}

/// No request for media reached the provider since the last look.
fn no_download(fake: &Fake) {
    let asked: Vec<String> = fake.take().iter().map(|s| s.line()).collect();
    assert!(
        asked.iter().all(|l| !l.starts_with("GET /media/")),
        "{asked:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_copied_into_the_bucket_and_served_from_it() {
    let Some(s3) = S3::start().await else { return };
    let first = pattern(300_000);
    let second = b"the second result".to_vec();
    let fake = completed_with(&[
        ("/media/a.mp4", first.clone()),
        ("/media/b.mp4", second.clone()),
    ])
    .await;
    let gw = gateway(ConfigDir::new(routes(&fake)), s3.port()).await;
    let id = completed_task(&gw).await;
    let ledger = gw.dir().path().join(".mediagate/ledger.db");
    eventually("the copy is done", async || {
        stored(&ledger).1.as_deref() == Some("stored")
    })
    .await;
    let mp4 = Some("video/mp4".to_string());
    assert_eq!(
        stored(&ledger).0,
        [
            (0, first.len() as i64, mp4.clone(), sha256(&first)),
            (1, second.len() as i64, mp4, sha256(&second)),
        ]
    );
    // In the bucket, under the prefix, whole.
    for (n, bytes) in [(0, &first), (1, &second)] {
        let r = s3.object(&key(n)).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.body[..] == bytes[..], "object {n} differs");
    }

    // The provider keeps nothing any more: the links are served from the bucket.
    let _ = fake.take();
    expire(&fake, &["/media/a.mp4", "/media/b.mp4"]);
    let links = links(&gw, &id).await;
    assert_eq!(links.len(), 2);
    served(&gw, &links[0], &first).await;
    served(&gw, &links[1], &second).await;
    // A range is a ranged read of the object.
    let r = gw
        .client()
        .send(
            Method::GET,
            &links[0],
            &[("range", "bytes=100000-100009")],
            "",
        )
        .await;
    assert_eq!(r.status, 206, "{}", r.text());
    assert_eq!(&r.body[..], &first[100_000..100_010]);
    assert_eq!(
        r.header("content-range"),
        Some("bytes 100000-100009/300000")
    );
    no_download(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_replica_sharing_the_ledger_and_the_bucket_serves_the_same_link() {
    let Some(s3) = S3::start().await else { return };
    let pg = Postgres::start();
    let db = pg.database("shared");
    let bytes = pattern(200_000);
    let fake = completed_with(&[("/media/a.mp4", bytes.clone())]).await;
    let routes = routes(&fake)
        .top(&format!("[ledger]\nurl = {db:?}"))
        .render();
    // Replicas share the task secret: the links one signs, the other checks.
    let secret = "a-task-secret-shared-by-both-replicas-0123456789";
    let dir = || ConfigDir::new(&routes).with("task-secret", secret);
    let a = gateway(dir(), s3.port()).await;
    let b = gateway(dir(), s3.port()).await;
    let id = completed_task(&a).await;
    let pool = sqlx::PgPool::connect(&db).await.unwrap();
    eventually("the copy is done", async || {
        sqlx::query_scalar::<_, String>("SELECT state FROM copies")
            .fetch_optional(&pool)
            .await
            .unwrap()
            .as_deref()
            == Some("stored")
    })
    .await;
    let sha: String = sqlx::query_scalar("SELECT sha256 FROM results WHERE n = 0")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(sha, sha256(&bytes));
    assert!(s3.object(&key(0)).await.body[..] == bytes[..]);

    let _ = fake.take();
    expire(&fake, &["/media/a.mp4"]);
    let link = links(&a, &id).await.remove(0);
    served(&b, &link, &bytes).await;
    served(&a, &link, &bytes).await;
    no_download(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_waits_for_unreachable_storage_and_completes_once_it_is_back() {
    if !s3::available() {
        return;
    }
    // Nothing listens there yet.
    let port = free_port();
    let bytes = pattern(100_000);
    let fake = completed_with(&[("/media/a.mp4", bytes.clone())]).await;
    // object_store retries a refused connection itself for up to a few minutes; a
    // short copy_timeout_ms abandons the attempt sooner, so that the copier's own
    // backoff (2 s, then 4 s, …) is seen within the test's patience.
    let routes = routes(&fake)
        .storage_setting("copy_timeout_ms = 1500")
        .render();
    let gw = gateway(ConfigDir::new(routes), port).await;
    let id = completed_task(&gw).await;
    let ledger = gw.dir().path().join(".mediagate/ledger.db");
    let copy = || -> Option<(String, i64, Option<String>)> {
        let db = rusqlite::Connection::open(&ledger).ok()?;
        db.query_row(
            "SELECT state, attempts, last_error FROM copies WHERE task_row = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .ok()
    };
    eventually("a copy attempt failed", async || {
        copy().is_some_and(|(_, attempts, _)| attempts > 0)
    })
    .await;
    let (state, _, error) = copy().unwrap();
    assert_eq!(state, "pending", "retried, not given up");
    assert!(error.is_some_and(|e| !e.is_empty()));
    // The task is completed all the same.
    assert_eq!(
        gw.client().query(MODEL_CENTER, DEMO, &id).await["status"],
        "completed"
    );
    assert!(stored(&ledger).0.is_empty());

    // Storage is back: the copy completes by itself.
    let s3 = S3::start_on(port).await;
    eventually("the copy is done", async || {
        stored(&ledger).1.as_deref() == Some("stored")
    })
    .await;
    assert_eq!(stored(&ledger).0[0].3, sha256(&bytes));
    assert!(s3.object(&key(0)).await.body[..] == bytes[..]);
    let _ = fake.take();
    expire(&fake, &["/media/a.mp4"]);
    let link = links(&gw, &id).await.remove(0);
    served(&gw, &link, &bytes).await;
    no_download(&fake);
}

/// A media server at the returned URL whose first download sends a kilobyte of
/// `bytes` and then one byte every 300 ms (never idle long enough for the copy's
/// idle timeout: only its whole `copy_timeout_ms` ends it); later downloads get all
/// of `bytes` at once.
async fn slow_once(bytes: Vec<u8>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut conn, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0_u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: video/mp4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                bytes.len()
            );
            let _ = conn.write_all(answer.as_bytes()).await;
            if std::mem::take(&mut first) {
                let bytes = bytes.clone();
                tokio::spawn(async move {
                    let _ = conn.write_all(&bytes[..1024]).await;
                    for byte in &bytes[1024..] {
                        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                        if conn.write_all(&[*byte]).await.is_err() {
                            break;
                        }
                    }
                });
            } else {
                let _ = conn.write_all(&bytes).await;
                let _ = conn.shutdown().await;
            }
        }
    });
    format!("http://{addr}/media/a.mp4")
}

/// A copy cut short by `copy_timeout_ms` (its download too slow) aborts its multipart
/// upload: the bucket keeps no parts of it, only the object the next attempt stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_cut_short_by_its_timeout_leaves_no_upload_behind() {
    let Some(s3) = S3::start().await else { return };
    let bytes = pattern(100_000);
    let media = slow_once(bytes.clone()).await;
    let fake = Fake::start().await;
    fake.on("POST /v2/model-center/tasks", Answer::queued("r-1"));
    fake.on(
        "GET /v2/model-center/tasks/r-1",
        Answer::json(
            200,
            json!({"id": "r-1", "status": "completed", "urls": [media]}),
        ),
    );
    // The media server is on loopback, beside the provider: allowed.
    let routes = Routes::upstream(&fake.url(), "allow_private_networks = [\"127.0.0.1\"]")
        .storage(&storage_url())
        .storage_setting("copy_timeout_ms = 1500");
    let gw = gateway(ConfigDir::new(routes), s3.port()).await;
    completed_task(&gw).await;
    let ledger = gw.dir().path().join(".mediagate/ledger.db");
    eventually("the copy is done", async || {
        stored(&ledger).1.as_deref() == Some("stored")
    })
    .await;
    assert!(s3.object(&key(0)).await.body[..] == bytes[..]);
    let uploads = s3.fetch(Method::GET, &format!("/{BUCKET}?uploads")).await;
    assert_eq!(uploads.status, 200, "{}", uploads.text());
    assert!(
        uploads.text().contains("ListMultipartUploadsResult")
            && !uploads.text().contains("<UploadId>"),
        "{}",
        uploads.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_of_several_parts_is_stored_whole() {
    let Some(s3) = S3::start().await else { return };
    // More than two parts of 5 MiB: the multipart upload sends three.
    let bytes = pattern(12_000_000);
    let fake = completed_with(&[("/media/big.mp4", bytes.clone())]).await;
    let gw = gateway(ConfigDir::new(routes(&fake)), s3.port()).await;
    let id = completed_task(&gw).await;
    let ledger = gw.dir().path().join(".mediagate/ledger.db");
    eventually("the copy is done", async || {
        stored(&ledger).1.as_deref() == Some("stored")
    })
    .await;
    let (results, _) = stored(&ledger);
    assert_eq!(results[0].1, bytes.len() as i64);
    assert_eq!(results[0].3, sha256(&bytes));
    // Moto logs each request: the object came in three parts.
    let parts = s3.log().matches("?partNumber=").count();
    assert_eq!(parts, 3, "{}", s3.log());
    let object = s3.object(&key(0)).await;
    assert_eq!(object.body.len(), bytes.len());
    assert!(object.body[..] == bytes[..], "the object differs");

    let _ = fake.take();
    expire(&fake, &["/media/big.mp4"]);
    let link = links(&gw, &id).await.remove(0);
    served(&gw, &link, &bytes).await;
    // A range across the first parts' boundary (5 MiB).
    let at = 5 * 1024 * 1024;
    let range = format!("bytes={}-{}", at - 10, at + 9);
    let r = gw
        .client()
        .send(Method::GET, &link, &[("range", range.as_str())], "")
        .await;
    assert_eq!(r.status, 206, "{}", r.text());
    assert_eq!(&r.body[..], &bytes[at - 10..at + 10]);
    no_download(&fake);
}

/// With `direct_links`, a link to a stored result redirects to a URL of its object
/// presigned for the link's TTL: the bytes come from the bucket, with the type the
/// provider gave them; HEAD is presigned for HEAD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_links_redirect_to_presigned_urls_of_the_bucket() {
    let Some(s3) = S3::start().await else { return };
    let bytes = pattern(70_000);
    let fake = completed_with(&[("/media/a.mp4", bytes.clone())]).await;
    let routes = routes(&fake)
        .storage_setting("direct_links = true")
        .storage_setting("link_ttl_secs = 600");
    let gw = gateway(ConfigDir::new(routes), s3.port()).await;
    let id = completed_task(&gw).await;
    let ledger = gw.dir().path().join(".mediagate/ledger.db");
    eventually("the copy is done", async || {
        stored(&ledger).1.as_deref() == Some("stored")
    })
    .await;
    let link = links(&gw, &id).await.remove(0);
    let origin = format!("http://127.0.0.1:{}", s3.port());
    for method in [Method::GET, Method::HEAD] {
        let r = gw.client().send(method.clone(), &link, &[], "").await;
        assert_eq!(r.status, 302, "{method}: {}", r.text());
        assert_eq!(r.header("cache-control"), Some("no-store"));
        let location = r.header("location").unwrap_or_default().to_string();
        let path = location
            .strip_prefix(&origin)
            .unwrap_or_else(|| panic!("not the bucket's URL: {location}"));
        assert!(
            path.starts_with(&format!("/{BUCKET}/{}?", key(0))),
            "{path}"
        );
        assert!(path.contains("X-Amz-Signature="), "{path}");
        assert!(path.contains("X-Amz-Expires=600"), "{path}");
        let object = s3.fetch(method.clone(), path).await;
        assert_eq!(object.status, 200, "{method}: {}", object.text());
        assert_eq!(object.header("content-type"), Some("video/mp4"));
        assert_eq!(object.header_u64("content-length"), bytes.len() as u64);
        if method == Method::GET {
            assert!(object.body[..] == bytes[..], "the object differs");
        }
    }
    // A link that is not valid is refused before any redirect.
    let tampered = link.replace("signature=", "signature=0");
    assert_eq!(gw.client().get_bare(&tampered).await.status, 403);
}
