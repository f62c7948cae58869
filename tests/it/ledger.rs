//! The task ledger, through HTTP: idempotent submits, no submit lost to a disconnect
//! or a crash, daily quotas, listing — on SQLite (the default) and on PostgreSQL (a
//! cluster of the test's own).

use http::Method;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::support::{
    ALPHA, Answer, ConfigDir, DEMO, DEMO2, Fake, Gateway, Http, MODEL_CENTER, Postgres, Proc,
    Reply, Routes, assert_error, eventually, operator,
};

const SUBMIT: &str = "POST /v2/model-center/tasks";

fn body(prompt: &str) -> Value {
    json!({"model": "m1", "prompt": prompt})
}

/// A submit of `body` by `key` with `Idempotency-Key: idem`; its answer.
async fn submit_keyed(http: &Http, key: &str, idem: &str, body: &Value) -> Reply {
    let auth = format!("Bearer {key}");
    http.send(
        Method::POST,
        MODEL_CENTER,
        &[
            ("authorization", &auth),
            ("content-type", "application/json"),
            ("idempotency-key", idem),
        ],
        body.to_string(),
    )
    .await
}

/// How many submits the fake upstream received.
fn submits_seen(fake: &Fake) -> usize {
    fake.take().iter().filter(|s| s.method == "POST").count()
}

/// `[ledger]` on a fresh PostgreSQL database of `pg`.
fn on_postgres(pg: &Postgres, db: &str) -> String {
    format!("[ledger]\nurl = {:?}", pg.database(db))
}

#[tokio::test]
async fn a_retry_with_the_same_key_gets_the_same_task_also_after_a_restart() {
    let fake = Fake::start().await;
    fake.on(SUBMIT, Answer::queued("up-1"));
    let gw = Gateway::start(Routes::upstream(&fake.url(), "")).await;
    let http = gw.client();

    let first = submit_keyed(&http, DEMO, "order-1", &body("a fox")).await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.header("idempotent-replayed"), None);
    let id = first.json()["id"].as_str().unwrap().to_string();

    let again = submit_keyed(&http, DEMO, "order-1", &body("a fox")).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.json()["id"], id);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));

    let other = submit_keyed(&http, DEMO, "order-1", &body("a dog")).await;
    assert_error(&other, 422, "idempotency_key_reused", None);

    // The same key of another client key is another request.
    let theirs = submit_keyed(&http, DEMO2, "order-1", &body("a fox")).await;
    assert_eq!(theirs.status, 200);
    assert_ne!(theirs.json()["id"], id);

    let gw = Gateway::start_in(gw.stop().await).await;
    let after_restart = submit_keyed(&gw.client(), DEMO, "order-1", &body("a fox")).await;
    assert_eq!(after_restart.status, 200);
    assert_eq!(after_restart.json()["id"], id);
    assert_eq!(
        submits_seen(&fake),
        2,
        "one task per (client key, idempotency key)"
    );
}

#[tokio::test]
async fn tasks_show_finds_a_task_by_its_id_or_its_upstream_id_also_without_the_secret() {
    let fake = Fake::start().await;
    fake.on(SUBMIT, Answer::queued("up-7"));
    let gw = Gateway::start(Routes::upstream(&fake.url(), "")).await;
    let id = gw.client().submit_id(MODEL_CENTER, DEMO, &body("x")).await;
    let row = |shown: &str| {
        assert!(shown.contains("upstream_id: up-7\n"), "{shown}");
        assert!(shown.contains(&format!("task_id: {id}\n")), "{shown}");
    };
    // The sealed id opens with the secret beside routes.toml; the upstream id is asked
    // of each provider the file names.
    row(&operator(gw.dir(), &["tasks", "show", &id]));
    row(&operator(gw.dir(), &["tasks", "show", "up-7"]));
    // Where the secret cannot be read, the ledger is read through for the id.
    std::fs::remove_file(gw.dir().path().join("task-secret")).unwrap();
    row(&operator(gw.dir(), &["tasks", "show", &id]));
}

#[tokio::test]
async fn a_submit_whose_request_ends_during_its_admission_still_reaches_the_provider() {
    let fake = Fake::start().await;
    fake.on(SUBMIT, Answer::queued("up-9"));
    let routes = Routes::upstream(
        &fake.url(),
        "connect_timeout_ms = 50\nsubmit_timeout_ms = 100",
    )
    .server("request_timeout_ms = 300\nbody_read_timeout_ms = 100");
    let gw = Gateway::start(routes).await;
    let http = gw.client();
    // Another writer holds the ledger past the request's timeout: the admission
    // waits, and is written once it is let go, with nobody waiting for it.
    let db = rusqlite::Connection::open(gw.dir().path().join(".mediagate/ledger.db")).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    let r = submit_keyed(&http, DEMO, "k-1", &body("x")).await;
    assert_eq!(r.status, 504, "{}", r.text());
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    db.execute_batch("COMMIT").unwrap();
    // The submit goes on: the provider is asked once, the row records its task, and
    // a retry with the key gets that task.
    eventually("the provider is asked", async || {
        fake.take().iter().any(|s| s.method == "POST")
    })
    .await;
    eventually("the retry gets the task", async || {
        let r = submit_keyed(&http, DEMO, "k-1", &body("x")).await;
        r.status == 200 && r.json()["id"].as_str().is_some()
    })
    .await;
    let shown = operator(gw.dir(), &["tasks", "show", "up-9"]);
    assert!(shown.contains("state: submitted\n"), "{shown}");
    assert!(fake.take().iter().all(|s| s.method != "POST"), "asked once");
}

/// The ledger of the gateway in `dir`, opened beside it, refusing to record a created
/// task (a full disk, a lost connection) until the trigger `refuse_created` is
/// dropped.
fn refusing_created(dir: &std::path::Path) -> rusqlite::Connection {
    let db = rusqlite::Connection::open(dir.join(".mediagate/ledger.db")).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
    db.execute_batch(
        "CREATE TRIGGER refuse_created BEFORE UPDATE OF upstream_id ON tasks \
         WHEN NEW.upstream_id IS NOT NULL BEGIN SELECT RAISE(ABORT, 'refused'); END;",
    )
    .unwrap();
    db
}

/// The state and upstream id of the one task in the ledger `db`.
fn state_and_upstream(db: &rusqlite::Connection) -> (String, Option<String>) {
    db.query_row("SELECT state, upstream_id FROM tasks", [], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .unwrap()
}

#[tokio::test]
async fn a_created_task_whose_row_could_not_be_completed_is_written_again() {
    let fake = Fake::start().await;
    fake.on(SUBMIT, Answer::queued("up-5"));
    let gw = Gateway::start(Routes::upstream(&fake.url(), "")).await;
    let http = gw.client();
    // The ledger refuses to complete rows for a moment (a full disk, a lost
    // connection): the task exists at the provider, and the client gets its id.
    let db = refusing_created(gw.dir().path());
    let id = http.submit_id(MODEL_CENTER, DEMO, &body("x")).await;
    assert_eq!(state_and_upstream(&db), ("submitting".to_string(), None));
    db.execute_batch("DROP TRIGGER refuse_created").unwrap();
    // Written again: the listing finds the task, under the id the client has.
    eventually("the row is completed", async || {
        state_and_upstream(&db) == ("submitted".to_string(), Some("up-5".to_string()))
    })
    .await;
    let listed = http.get(MODEL_CENTER, DEMO).await.json();
    assert_eq!(listed["data"][0]["id"], id.as_str(), "{listed}");
}

/// A graceful stop waits for the retry of a created task's row, as for the submits
/// in flight, and makes it at once (not after the retry's wait): the row is written
/// before the process ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_waits_for_a_created_task_s_row_to_be_written_again() {
    let fake = Fake::start().await;
    fake.on(SUBMIT, Answer::queued("up-5"));
    let gw = Gateway::start(Routes::upstream(&fake.url(), "")).await;
    let db = refusing_created(gw.dir().path());
    gw.client().submit_id(MODEL_CENTER, DEMO, &body("x")).await;
    // The ledger takes the write again well before the first retry is due (250 ms
    // after the first try), and the stop begins at once.
    db.execute_batch("DROP TRIGGER refuse_created").unwrap();
    drop(db);
    let dir = gw.stop().await;
    let db = rusqlite::Connection::open(dir.path().join(".mediagate/ledger.db")).unwrap();
    assert_eq!(
        state_and_upstream(&db),
        ("submitted".to_string(), Some("up-5".to_string()))
    );
}

/// Task `up-3` seen completed by a query (its answer), then the gateway restarted
/// (its results cache empty): the provider, the gateway, the task's id and answer.
async fn completed_then_restarted() -> (Fake, Gateway, String, Value) {
    let fake = Fake::start().await;
    fake.on(SUBMIT, Answer::queued("up-3"));
    let done = json!({"id": "up-3", "status": "completed", "urls": ["https://cdn.example/3.mp4"]});
    fake.on("GET /v2/model-center/tasks/up-3", Answer::json(200, done));
    let gw = Gateway::start(Routes::upstream(&fake.url(), "")).await;
    let id = gw.client().submit_id(MODEL_CENTER, DEMO, &body("x")).await;
    let first = gw.client().query(MODEL_CENTER, DEMO, &id).await;
    assert_eq!(first["status"], "completed", "{first}");
    let gw = Gateway::start_in(gw.stop().await).await;
    (fake, gw, id, first)
}

#[tokio::test]
async fn a_finished_task_the_provider_forgot_answers_as_the_ledger_recorded_it() {
    // A restart empties the results cache; the provider has forgotten the task.
    let (fake, gw, id, first) = completed_then_restarted().await;
    let gone = json!({"error": "task not found"});
    fake.on("GET /v2/model-center/tasks/up-3", Answer::json(404, gone));
    let again = gw.client().query(MODEL_CENTER, DEMO, &id).await;
    assert_eq!(again["status"], "completed", "{again}");
    assert_eq!(again["video_url"], first["video_url"], "{again}");
    // Its owner can still delete it.
    let r = gw
        .client()
        .delete(&format!("{MODEL_CENTER}/{id}"), DEMO)
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // A task the ledger has no end for is still unknown.
    fake.on(SUBMIT, Answer::queued("up-4"));
    let other = gw.client().submit_id(MODEL_CENTER, DEMO, &body("y")).await;
    let r = gw
        .client()
        .get(&format!("{MODEL_CENTER}/{other}"), DEMO)
        .await;
    assert_error(&r, 404, "task_not_found", Some("id"));
}

#[tokio::test]
async fn a_finished_task_keeps_the_end_the_ledger_recorded_when_its_provider_later_says_otherwise()
{
    // A restart empties the results cache; the provider now calls the old task
    // expired (as some do once its files are gone).
    let (fake, gw, id, first) = completed_then_restarted().await;
    let expired =
        json!({"id": "up-3", "status": "failed", "error": {"code": "expired", "message": "gone"}});
    fake.on(
        "GET /v2/model-center/tasks/up-3",
        Answer::json(200, expired),
    );
    let again = gw.client().query(MODEL_CENTER, DEMO, &id).await;
    assert_eq!(again["status"], "completed", "{again}");
    assert_eq!(again["video_url"], first["video_url"], "{again}");
    let listed = gw.client().get(MODEL_CENTER, DEMO).await.json();
    assert_eq!(listed["data"][0]["status"], "completed", "{listed}");
    let shown = operator(gw.dir(), &["tasks", "show", "up-3"]);
    assert!(shown.contains("state: completed\n"), "{shown}");
}

#[tokio::test]
async fn bad_and_required_idempotency_keys_are_refused() {
    let fake = Fake::start().await;
    fake.on(SUBMIT, Answer::queued("up-1"));
    let routes = Routes::upstream(&fake.url(), "").demo_key("require_idempotency_key = true");
    let gw = Gateway::start(routes).await;
    let http = gw.client();
    let r = http.post_json(MODEL_CENTER, DEMO, &body("x")).await;
    assert_error(&r, 400, "idempotency_key_required", None);
    let r = submit_keyed(&http, DEMO, "has space", &body("x")).await;
    assert_error(&r, 400, "invalid_idempotency_key", None);
    let r = submit_keyed(&http, DEMO, "\"quoted-key\"", &body("x")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    // The other key is not required to send one.
    assert_eq!(
        http.post_json(MODEL_CENTER, DEMO2, &body("x")).await.status,
        200
    );
    assert_eq!(submits_seen(&fake), 2);
}

/// Twenty submits with one key at once, while the upstream holds the first: one
/// upstream task, and every client gets its id.
async fn twenty_at_once_make_one_task(ledger: &str) {
    let fake = Fake::start().await;
    let held = fake.hold(SUBMIT, Answer::queued("up-1"));
    let gw = Gateway::start(Routes::upstream(&fake.url(), "").top(ledger)).await;
    let mut clients = JoinSet::new();
    for _ in 0..20 {
        let http = gw.client();
        clients.spawn(async move { submit_keyed(&http, DEMO, "once", &body("a fox")).await });
    }
    held.arrived(1).await;
    held.release();
    one_task(clients).await;
    assert_eq!(submits_seen(&fake), 1);
}

/// Every client was answered 200 with the same task; its id.
async fn one_task(mut clients: JoinSet<Reply>) -> String {
    let mut ids = Vec::new();
    while let Some(reply) = clients.join_next().await {
        let reply = reply.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.text());
        ids.push(reply.json()["id"].as_str().unwrap().to_string());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "every client got the one task: {ids:?}");
    ids.remove(0)
}

#[tokio::test]
async fn twenty_concurrent_submits_with_one_key_create_one_task_on_sqlite() {
    twenty_at_once_make_one_task("").await;
}

#[tokio::test]
async fn twenty_concurrent_submits_with_one_key_create_one_task_on_postgres() {
    let pg = Postgres::start();
    twenty_at_once_make_one_task(&on_postgres(&pg, "twenty")).await;
}

#[tokio::test]
async fn two_gateway_processes_sharing_postgres_create_one_task_per_key() {
    let pg = Postgres::start();
    let fake = Fake::start().await;
    let held = fake.hold(SUBMIT, Answer::queued("up-1"));
    let queued = json!({"id": "up-1", "status": "queued"});
    fake.on("GET /v2/model-center/tasks/up-1", Answer::json(200, queued));
    let routes = Routes::upstream(&fake.url(), "")
        .top(&on_postgres(&pg, "shared"))
        .render();
    // Replicas share the task secret too, so either answers the other's ids.
    let secret = "a-task-secret-shared-by-both-replicas-0123456789";
    let dir = || ConfigDir::new(&routes).with("task-secret", secret);
    let (a, b) = (
        Proc::start_in(dir(), &[], &[]).await,
        Proc::start_in(dir(), &[], &[]).await,
    );
    let mut clients = JoinSet::new();
    for http in [a.client(), b.client(), a.client(), b.client()] {
        clients.spawn(async move { submit_keyed(&http, DEMO, "shared-key", &body("x")).await });
    }
    held.arrived(1).await;
    held.release();
    let id = one_task(clients).await;
    assert_eq!(submits_seen(&fake), 1);
    // Either replica answers the task.
    assert_eq!(b.client().query(MODEL_CENTER, DEMO, &id).await["id"], id);
    assert_eq!(a.client().query(MODEL_CENTER, DEMO, &id).await["id"], id);
}

#[tokio::test]
async fn a_killed_gateway_leaves_every_submit_in_the_ledger_to_reconcile() {
    let fake = Fake::start().await;
    let held = fake.hold(SUBMIT, Answer::queued("never-answered"));
    // Short timeouts, so that interrupted submits are known stale soon after.
    let routes = Routes::upstream(
        &fake.url(),
        "connect_timeout_ms = 200\nsubmit_timeout_ms = 1000",
    )
    .server("body_read_timeout_ms = 500\nmetrics_listen = \"127.0.0.1:0\"");
    let mut gw = Proc::start(routes).await;
    let mut in_flight = JoinSet::new();
    for n in 0..3 {
        let http = gw.client();
        in_flight.spawn(async move {
            let auth = format!("Bearer {DEMO}");
            let headers = [
                ("authorization", auth.as_str()),
                ("content-type", "application/json"),
                ("idempotency-key", &format!("k{n}")),
            ];
            let _ = http
                .try_send(Method::POST, MODEL_CENTER, &headers, body("x").to_string())
                .await;
        });
    }
    held.arrived(3).await;
    gw.restart().await; // SIGKILL, then the same files again
    drop(held);
    in_flight.join_all().await;

    // Retrying a key never submits again: its outcome is unknown.
    for n in 0..3 {
        let r = submit_keyed(&gw.client(), DEMO, &format!("k{n}"), &body("x")).await;
        assert_eq!(r.status, 502, "{}\n{}", r.text(), gw.log());
        assert_error(&r, 502, "submit_outcome_unknown", None);
    }
    let unknown = operator(gw.dir(), &["tasks", "--state", "unknown_outcome"]);
    assert_eq!(
        unknown.lines().count(),
        4,
        "a header and three rows:\n{unknown}"
    );
    let all = operator(gw.dir(), &["tasks"]);
    assert_eq!(all.lines().count(), 4, "nothing else, nothing lost:\n{all}");
    assert_eq!(submits_seen(&fake), 3);
    let admin = Http::new(gw.admin_addr.expect("the admin listener"));
    let metrics = admin.metrics().await;
    assert_eq!(
        metrics.sum(&["mediagate_ledger_unknown_outcome_tasks"]),
        3.0
    );
}

#[tokio::test]
async fn a_client_that_goes_away_does_not_cancel_its_submit() {
    let fake = Fake::start().await;
    let held = fake.hold(SUBMIT, Answer::queued("up-late"));
    let gw = Gateway::start(Routes::upstream(&fake.url(), "")).await;
    let http = gw.client();
    let gone = tokio::spawn({
        let http = http.clone();
        async move { submit_keyed(&http, DEMO, "impatient", &body("x")).await }
    });
    held.arrived(1).await;
    gone.abort(); // the client hangs up while the provider works
    let _ = gone.await;
    held.release();
    // The submit ran to its end: the retry gets the task, and no second one exists.
    let mut retry = None;
    eventually("the retry gets the recorded task", async || {
        let r = submit_keyed(&http, DEMO, "impatient", &body("x")).await;
        let done = r.status == 200;
        retry = Some(r);
        done
    })
    .await;
    let retry = retry.unwrap();
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    let listed = http.get(MODEL_CENTER, DEMO).await.json();
    assert_eq!(listed["data"][0]["id"], retry.json()["id"]);
    assert_eq!(submits_seen(&fake), 1);
    let tasks = operator(gw.dir(), &["tasks"]);
    assert!(
        tasks.contains("\tsubmitted\t") && tasks.contains("\tup-late\t"),
        "{tasks}"
    );
}

async fn quota_gives_failed_tasks_back(ledger: &str) {
    let routes = Routes::simulated(&["m1"])
        .demo_key("quota = { tasks_per_day = 2 }")
        .top(ledger);
    let gw = Gateway::start(routes).await;
    let http = gw.client();
    let first = submit_keyed(&http, DEMO, "first", &body("a fox")).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let failing = http.submit(MODEL_CENTER, DEMO, &body("a fox [fail]")).await;
    let over = http.post_json(MODEL_CENTER, DEMO, &body("one more")).await;
    let message = assert_error(&over, 429, "quota_exceeded", None);
    assert!(message.contains("tasks_per_day"), "{message}");
    let wait = over.header_u64("retry-after");
    assert!(
        (1..=86_400).contains(&wait),
        "Retry-After until midnight UTC: {wait}"
    );
    // A retry of a task already admitted is answered over the quota: the same task.
    let again = submit_keyed(&http, DEMO, "first", &body("a fox")).await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.json()["id"], first.json()["id"]);
    // Another key has its own day.
    assert_eq!(
        http.post_json(MODEL_CENTER, DEMO2, &body("x")).await.status,
        200
    );
    // Once the failure is seen, its unit is given back.
    let id = failing["id"].as_str().unwrap();
    assert_eq!(
        http.wait_done(MODEL_CENTER, DEMO, id).await["status"],
        "failed"
    );
    let r = http.post_json(MODEL_CENTER, DEMO, &body("one more")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = http
        .post_json(MODEL_CENTER, DEMO, &body("and another"))
        .await;
    assert_error(&r, 429, "quota_exceeded", None);
}

#[tokio::test]
async fn the_quota_refuses_the_next_submit_of_the_day_on_sqlite() {
    quota_gives_failed_tasks_back("").await;
}

#[tokio::test]
async fn the_quota_refuses_the_next_submit_of_the_day_on_postgres() {
    let pg = Postgres::start();
    quota_gives_failed_tasks_back(&on_postgres(&pg, "quota")).await;
}

#[tokio::test]
async fn video_seconds_count_against_their_own_quota() {
    let routes = Routes::simulated(&["m1"]).demo_key("quota = { video_seconds_per_day = 12 }");
    let gw = Gateway::start(routes).await;
    let http = gw.client();
    let long = json!({"model": "m1", "prompt": "x", "duration": 10});
    http.submit(MODEL_CENTER, DEMO, &long).await;
    let r = http.post_json(MODEL_CENTER, DEMO, &long).await;
    let message = assert_error(&r, 429, "quota_exceeded", None);
    assert!(message.contains("video_seconds_per_day"), "{message}");
    let short = json!({"model": "m1", "prompt": "x", "duration": 2});
    assert_eq!(http.post_json(MODEL_CENTER, DEMO, &short).await.status, 200);
    let usage = operator(gw.dir(), &["usage", "--key", "demo"]);
    let row = usage.lines().nth(1).unwrap_or_default();
    assert!(row.ends_with("\tdemo\tm1\t2\t0\t0\t12\t0\t0"), "{usage}");
}

async fn listing_pages(ledger: &str) {
    let gw = Gateway::start(Routes::simulated(&["m1"]).top(ledger)).await;
    let http = gw.client();
    let mut mine = Vec::new();
    for n in 0..5 {
        mine.push(
            http.submit_id(MODEL_CENTER, DEMO, &body(&format!("task {n}")))
                .await,
        );
    }
    let theirs = [
        http.submit_id(MODEL_CENTER, DEMO2, &body("theirs")).await,
        http.submit_id(MODEL_CENTER, DEMO2, &body("theirs")).await,
    ];
    mine.reverse(); // newest first

    let page = |after: Option<String>| {
        let http = http.clone();
        async move {
            let path = match after {
                Some(a) => format!("{MODEL_CENTER}?limit=2&after={a}"),
                None => format!("{MODEL_CENTER}?limit=2"),
            };
            let r = http.get(&path, DEMO).await;
            assert_eq!(r.status, 200, "{}", r.text());
            r.json()
        }
    };
    let ids = |p: &Value| -> Vec<String> {
        p["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect()
    };
    let first = page(None).await;
    assert_eq!(first["object"], "list");
    assert_eq!(ids(&first), mine[..2]);
    assert_eq!(first["has_more"], true);
    assert_eq!(first["first_id"], mine[0].as_str());
    let item = &first["data"][0];
    assert_eq!(
        (item["object"].as_str(), item["model"].as_str()),
        (Some("video"), Some("m1"))
    );
    // A task created between pages is on none of the following ones.
    let newer = http.submit_id(MODEL_CENTER, DEMO, &body("newer")).await;
    let second = page(first["last_id"].as_str().map(String::from)).await;
    assert_eq!(ids(&second), mine[2..4]);
    let third = page(second["last_id"].as_str().map(String::from)).await;
    assert_eq!(ids(&third), mine[4..]);
    assert_eq!(third["has_more"], false);
    assert_eq!(ids(&page(None).await)[0], newer);

    // Never another key's tasks, never another endpoint's.
    let listed: Vec<String> = ids(&http.get(MODEL_CENTER, DEMO2).await.json());
    assert_eq!(listed, [theirs[1].clone(), theirs[0].clone()]);
    assert!(ids(&http.get(ALPHA, DEMO).await.json()).is_empty());
    let r = http
        .get(&format!("{MODEL_CENTER}?after={}", theirs[0]), DEMO)
        .await;
    assert_error(&r, 400, "invalid_parameter", Some("after"));
    // A task of the model center is no cursor of the alpha listing.
    let r = http.get(&format!("{ALPHA}?after={}", mine[0]), DEMO).await;
    assert_error(&r, 400, "invalid_parameter", Some("after"));
    for limit in ["101", "%2B5", "+5", "5.0", "0x5", "-1"] {
        let r = http
            .get(&format!("{MODEL_CENTER}?limit={limit}"), DEMO)
            .await;
        assert_error(&r, 400, "invalid_parameter", Some("limit"));
    }
    assert_error(
        &http.get(MODEL_CENTER, "sk-nope").await,
        401,
        "invalid_api_key",
        None,
    );

    // A finished task is listed as it finished.
    let done = http.wait_done(MODEL_CENTER, DEMO, &newer).await;
    let listed = http
        .get(&format!("{MODEL_CENTER}?limit=1"), DEMO)
        .await
        .json();
    assert_eq!(listed["data"][0]["status"], "completed");
    assert_eq!(listed["data"][0]["urls"], done["urls"]);
}

#[tokio::test]
async fn listing_shows_only_the_callers_tasks_and_pages_without_gaps_on_sqlite() {
    listing_pages("").await;
}

#[tokio::test]
async fn listing_shows_only_the_callers_tasks_and_pages_without_gaps_on_postgres() {
    let pg = Postgres::start();
    listing_pages(&on_postgres(&pg, "listing")).await;
}

#[tokio::test]
async fn without_a_ledger_listing_is_501_and_keys_are_ignored() {
    let gw = Gateway::start(Routes::simulated(&["m1"]).top("[ledger]\nurl = \"none\"")).await;
    let http = gw.client();
    assert_error(&http.get(MODEL_CENTER, DEMO).await, 501, "ledger_off", None);
    let a = submit_keyed(&http, DEMO, "k", &body("x")).await;
    let b = submit_keyed(&http, DEMO, "k", &body("x")).await;
    assert_eq!((a.status.as_u16(), b.status.as_u16()), (200, 200));
    assert_ne!(a.json()["id"], b.json()["id"]);
}

/// Forty submits at once on SQLite, committed together by the ledger's writer: each
/// gets its own task and its own row, completed with what the upstream answered.
#[tokio::test]
async fn concurrent_submits_on_sqlite_each_get_their_own_completed_row() {
    let fake = Fake::start().await;
    fake.on(SUBMIT, Answer::queued("up-1"));
    let gw = Gateway::start(Routes::upstream(&fake.url(), "")).await;
    let mut clients = JoinSet::new();
    for n in 0..40 {
        let http = gw.client();
        clients.spawn(async move {
            match n % 2 {
                0 => submit_keyed(&http, DEMO, &format!("k{n}"), &body("a fox")).await,
                _ => http.post_json(MODEL_CENTER, DEMO, &body("a fox")).await,
            }
        });
    }
    let mut ids = Vec::new();
    while let Some(reply) = clients.join_next().await {
        let reply = reply.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.text());
        ids.push(reply.json()["id"].as_str().unwrap().to_string());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 40);
    assert_eq!(submits_seen(&fake), 40);
    let submitted = operator(gw.dir(), &["tasks", "--state", "submitted"]);
    assert_eq!(
        submitted.lines().count(),
        41,
        "a header and forty rows:\n{submitted}"
    );
    for id in &ids {
        assert!(submitted.contains(id.as_str()), "{id} is in the ledger");
    }
}
