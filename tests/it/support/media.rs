//! Durable results' helpers: a fake provider whose task completed with given media,
//! what a SQLite ledger says was stored, and the links the gateway hands out.

use std::path::Path;

use serde_json::json;

use super::{Answer, Fake};

/// A stored result's row: n, bytes, content type, sha256.
pub type ResultRow = (i64, i64, Option<String>, String);

/// The stored results of the task in ledger row 1 of the SQLite ledger at `ledger`,
/// and the state of its copy.
pub fn stored(ledger: &Path) -> (Vec<ResultRow>, Option<String>) {
    let Ok(db) = rusqlite::Connection::open(ledger) else {
        return (Vec::new(), None);
    };
    let results = db
        .prepare("SELECT n, bytes, content_type, sha256 FROM results WHERE task_row = 1 ORDER BY n")
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                .collect()
        })
        .unwrap_or_default();
    let copy = db
        .query_row("SELECT state FROM copies WHERE task_row = 1", [], |r| {
            r.get(0)
        })
        .ok();
    (results, copy)
}

/// Hex SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    hex::encode(ring::digest::digest(&ring::digest::SHA256, bytes))
}

/// A fake provider whose task `r-1` completed with `files` (path, bytes) as results.
pub async fn completed_with(files: &[(&str, Vec<u8>)]) -> Fake {
    let fake = Fake::start().await;
    fake.on("POST /v2/model-center/tasks", Answer::queued("r-1"));
    let urls: Vec<String> = files
        .iter()
        .map(|(path, _)| format!("{}{path}", fake.url()))
        .collect();
    fake.on(
        "GET /v2/model-center/tasks/r-1",
        Answer::json(
            200,
            json!({"id": "r-1", "status": "completed", "urls": urls}),
        ),
    );
    for (path, bytes) in files {
        fake.on(
            &format!("GET {path}"),
            Answer::raw(200, "video/mp4", bytes.clone()),
        );
    }
    fake
}

/// From now on the provider keeps none of `paths`: each answers 404.
pub fn expire(fake: &Fake, paths: &[&str]) {
    for path in paths {
        fake.on(
            &format!("GET {path}"),
            Answer::json(404, json!({"error": "expired"})),
        );
    }
}

/// The path and query of a link the gateway gave (`http://host:port/…`).
pub fn path_of(link: &str) -> String {
    let rest = link.split_once("://").map_or(link, |(_, r)| r);
    rest.find('/')
        .map_or(String::new(), |i| rest[i..].to_string())
}
