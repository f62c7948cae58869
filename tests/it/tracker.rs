//! The background tracker and long-poll: unfinished tasks are followed without any
//! client polling; a client waiting on a task hears of a change at once, or gets the
//! unchanged state when its wait is over.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{
    Answer, DEMO, Fake, Gateway, MODEL_CENTER, Postgres, Proc, Routes, assert_error, eventually,
    operator,
};

#[tokio::test]
async fn unfinished_tasks_are_followed_without_client_queries() {
    let gw = Gateway::start(Routes::tracked_simulator()).await;
    let http = gw.client();
    let done = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "x"}))
        .await;
    let failed = http
        .submit_id(
            MODEL_CENTER,
            DEMO,
            &json!({"model": "m1", "prompt": "x [fail]"}),
        )
        .await;
    // Nobody queries the tasks: the listing (the ledger) still learns how they ended.
    eventually("the tracker records both outcomes", async || {
        let listed = http.get(MODEL_CENTER, DEMO).await.json();
        let status = |id: &str| {
            let items = listed["data"].as_array().cloned().unwrap_or_default();
            items
                .into_iter()
                .find(|t| t["id"] == id)
                .map(|t| t["status"].clone())
        };
        status(&done) == Some(json!("completed")) && status(&failed) == Some(json!("failed"))
    })
    .await;
    let tasks = operator(gw.dir(), &["tasks"]);
    assert_eq!(tasks.matches("\tcompleted\t").count(), 1, "{tasks}");
    assert_eq!(tasks.matches("\tfailed\t").count(), 1, "{tasks}");
}

#[tokio::test]
async fn a_long_poll_returns_as_soon_as_the_status_changes() {
    let gw = Gateway::start(Routes::tracked_simulator()).await;
    let http = gw.client();
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "x"}))
        .await;
    let mut seen = "queued".to_string();
    let mut history = Vec::new();
    while seen != "completed" {
        let asked = Instant::now();
        let path = format!("{MODEL_CENTER}/{id}?wait=20&status={seen}");
        let r = http.get(&path, DEMO).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let now = r.json()["status"].as_str().unwrap().to_string();
        // It answered because the status changed, long before the 20 s were over.
        assert_ne!(now, seen, "{history:?}");
        assert!(asked.elapsed() < Duration::from_secs(20), "{history:?}");
        history.push(now.clone());
        seen = now;
    }
    assert!(history.ends_with(&["completed".to_string()]), "{history:?}");
    // A finished task answers at once.
    let r = http
        .get(&format!("{MODEL_CENTER}/{id}?wait=20"), DEMO)
        .await;
    assert_eq!(r.json()["status"], "completed");
}

#[tokio::test]
async fn a_long_poll_answers_the_unchanged_state_when_its_wait_is_over() {
    let fake = Fake::start().await;
    fake.on("POST /v2/model-center/tasks", Answer::queued("slow-1"));
    let queued = json!({"id": "slow-1", "status": "queued"});
    fake.on(
        "GET /v2/model-center/tasks/slow-1",
        Answer::json(200, queued),
    );
    let gw = Gateway::start(Routes::upstream(&fake.url(), "poll_interval_ms = 5000")).await;
    let http = gw.client();
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "x"}))
        .await;
    fake.take();
    let asked = Instant::now();
    let auth = format!("Bearer {DEMO}");
    let r = http
        .send(
            http::Method::GET,
            &format!("{MODEL_CENTER}/{id}"),
            &[("authorization", &auth), ("prefer", "wait=1")],
            "",
        )
        .await;
    assert!(asked.elapsed() >= Duration::from_secs(1), "it waited");
    assert_eq!(r.json()["status"], "queued");
    assert_eq!(r.header("preference-applied"), Some("wait=1"));
    // The wait itself cost no status request: only the one that opened it.
    let asked_upstream = fake.take().iter().filter(|s| s.method == "GET").count();
    assert_eq!(asked_upstream, 1);

    let r = http
        .get(&format!("{MODEL_CENTER}/{id}?wait=61"), DEMO)
        .await;
    assert_error(&r, 400, "invalid_parameter", Some("wait"));
    let r = http
        .get(&format!("{MODEL_CENTER}/{id}?wait=1&status=done"), DEMO)
        .await;
    assert_error(&r, 400, "invalid_parameter", Some("status"));
}

#[tokio::test]
async fn a_task_whose_end_the_ledger_refused_is_followed_until_the_ledger_takes_it() {
    let fake = Fake::start().await;
    upstream_holds(&fake, "t-1", "queued");
    let gw = Gateway::start(Routes::upstream(&fake.url(), "poll_interval_ms = 100")).await;
    let http = gw.client();
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "x"}))
        .await;
    // The ledger refuses every task's end (a full disk, a lost connection).
    let db = sqlite_ledger(&gw);
    db.execute_batch(
        "CREATE TRIGGER refuse_ends BEFORE UPDATE OF finished_ms ON tasks \
         WHEN NEW.finished_ms IS NOT NULL BEGIN SELECT RAISE(ABORT, 'refused'); END;",
    )
    .unwrap();
    fake.take();
    fake.on("GET /v2/model-center/tasks/t-1", status("t-1", "completed"));
    // Its end refused, the task is asked about again (and its end written again).
    let asked = std::sync::atomic::AtomicUsize::new(0);
    eventually("the finished task is asked about twice", async || {
        let seen = fake.take().iter().filter(|s| s.method == "GET").count();
        asked.fetch_add(seen, std::sync::atomic::Ordering::Relaxed) + seen >= 2
    })
    .await;
    assert_eq!(ended(&http, std::slice::from_ref(&id)).await, ["queued"]);
    // The ledger takes writes again: the tracker, still following the task, writes
    // its end.
    db.execute_batch("DROP TRIGGER refuse_ends").unwrap();
    listed_as(&http, &id, "completed").await;
}

#[tokio::test]
async fn tasks_followed_under_a_name_no_replica_has_are_followed_again() {
    let fake = Fake::start().await;
    upstream_holds(&fake, "t-1", "completed");
    let routes = |tracker: &str| {
        Routes::upstream(&fake.url(), "poll_interval_ms = 100")
            .top(&format!("[tracker]\nlease_ms = 1000\n{tracker}"))
            .render()
    };
    let gw = Gateway::start(routes("enabled = false")).await;
    let http = gw.client();
    let id = http
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "x"}))
        .await;
    // A replica of a version before followers leased the task under its name, and
    // stopped: no heartbeat row has that name.
    let db = sqlite_ledger(&gw);
    let leased = db
        .execute(
            "UPDATE tasks SET lease_owner = 'replica-of-before', lease_until_ms = 1 \
             WHERE state = 'submitted'",
            [],
        )
        .unwrap();
    assert_eq!(leased, 1);
    gw.reload_with(&routes("")).await.expect("reloaded");
    listed_as(&http, &id, "completed").await;
}

#[tokio::test]
async fn a_reload_changes_how_many_status_requests_are_in_flight() {
    let fake = Fake::start().await;
    fake.on("POST /v2/model-center/tasks", Answer::queued("t-1"));
    let asked = "GET /v2/model-center/tasks/t-1";
    let held = fake.hold(asked, status("t-1", "queued"));
    let routes = |n: usize| {
        Routes::upstream(
            &fake.url(),
            &format!("poll_interval_ms = 100\npoll_max_in_flight = {n}"),
        )
        .render()
    };
    let gw = Gateway::start(routes(2)).await;
    let http = gw.client();
    for _ in 0..6 {
        http.submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "x"}))
            .await;
    }
    held.arrived(2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(held.count(), 2, "two status requests in flight at most");

    // More slots: the tasks waiting for one are asked about at once.
    gw.reload_with(&routes(5)).await.expect("reloaded");
    held.arrived(5).await;

    // Fewer: once the requests in flight are answered, one at a time. The tracker
    // takes a new limit at its next round (every 250 ms at the most).
    gw.reload_with(&routes(1)).await.expect("reloaded");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let one = fake.hold(asked, status("t-1", "queued"));
    held.release();
    one.arrived(1).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(one.count(), 1, "one status request in flight at most");
    one.release();
}

#[tokio::test]
async fn replicas_sharing_postgres_poll_each_task_one_at_a_time() {
    let pg = Postgres::start();
    let fake = Fake::start().await;
    let ids = ["t0", "t1", "t2", "t3"];
    let routes = Routes::upstream(&fake.url(), "poll_interval_ms = 200")
        .top(&format!("[ledger]\nurl = {:?}", pg.database("tracked")))
        .render();
    let (a, b) = (Proc::start(&routes).await, Proc::start(&routes).await);
    for (n, id) in ids.iter().enumerate() {
        fake.on("POST /v2/model-center/tasks", Answer::queued(id));
        let http = if n % 2 == 0 { a.client() } else { b.client() };
        http.submit(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": id}))
            .await;
    }
    // Status requests get no answer: each stays in flight until the provider's
    // query timeout (1 s), while both replicas look for due tasks every 250 ms.
    let _held: Vec<_> = ids
        .iter()
        .map(|id| {
            let queued = Answer::json(200, json!({"id": id, "status": "queued"}));
            fake.hold(&format!("GET /v2/model-center/tasks/{id}"), queued)
        })
        .collect();
    fake.take();
    // Well within the query timeout, and long enough for both replicas to have looked
    // for due tasks several times.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let seen = fake.take();
    for id in ids {
        let polls = seen.iter().filter(|s| s.path.ends_with(id)).count();
        // Only the replica holding the task's lease asks; the other leaves it alone
        // while that request is in flight.
        assert_eq!(polls, 1, "{id} was asked about {polls} times at once");
    }
}

/// A backlog of unfollowed tasks (here 3,000 appearing at once, as a dead replica's
/// or a rolling restart's do) is shared by the replicas alive: the first to look
/// takes batches one after another only up to its share, then one a round, while
/// the other claims the rest.
#[tokio::test]
async fn replicas_share_a_backlog_of_unfollowed_tasks() {
    let pg = Postgres::start();
    let url = pg.database("backlog");
    let fake = Fake::start().await;
    let routes = Routes::upstream(&fake.url(), "")
        .top(&format!("[ledger]\nurl = {url:?}"))
        .render();
    let (a, b) = (Proc::start(&routes).await, Proc::start(&routes).await);
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let alive = async || -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM replicas")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    eventually("both replicas are alive", async || alive().await == 2).await;
    // Due in a minute: nobody asks the provider about them during the test.
    sqlx::query(
        "INSERT INTO tasks (owner, endpoint, model, kind, fingerprint, state, provider, upstream_id, task_id, status, created_ms, updated_ms, next_poll_ms, poll_interval_ms) \
         SELECT 'demo', 'model-center', 'm1', 'video', 'f', 'submitted', 'up', 'u-' || n, 't-' || n, 'queued', m, m, m + 60000, 60000 \
         FROM generate_series(1, 3000) AS n, (SELECT (EXTRACT(EPOCH FROM now()) * 1000)::bigint AS m) AS now",
    )
    .execute(&pool)
    .await
    .unwrap();
    let followers = async || -> Vec<(Option<String>, i64)> {
        sqlx::query_as("SELECT lease_owner, COUNT(*) FROM tasks GROUP BY lease_owner ORDER BY 2")
            .fetch_all(&pool)
            .await
            .unwrap()
    };
    eventually("every task is followed", async || {
        followers().await.iter().all(|(owner, _)| owner.is_some())
    })
    .await;
    let shares = followers().await;
    assert_eq!(shares.len(), 2, "{shares:?}");
    assert!(shares[0].1 >= 1000, "one replica took most: {shares:?}");
    drop((a, b));
}

#[tokio::test]
async fn a_long_poll_on_one_replica_hears_what_the_other_replica_learned() {
    let pg = Postgres::start();
    let fake = Fake::start().await;
    fake.on("POST /v2/model-center/tasks", Answer::queued("x-1"));
    let status = |s: &str| {
        Answer::json(
            200,
            json!({"id": "x-1", "status": s, "urls": ["https://cdn.example/x.mp4"]}),
        )
    };
    fake.on("GET /v2/model-center/tasks/x-1", status("queued"));
    let routes = Routes::upstream(&fake.url(), "poll_interval_ms = 200")
        .top(&format!("[ledger]\nurl = {:?}", pg.database("woken")))
        .render();
    let secret = "a-task-secret-shared-by-both-replicas-0123456789";
    let dir = || crate::support::ConfigDir::new(&routes).with("task-secret", secret);
    let (a, b) = (
        Proc::start_in(dir(), &[], &[]).await,
        Proc::start_in(dir(), &[], &[]).await,
    );
    let id = a
        .client()
        .submit_id(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": "x"}))
        .await;
    // Both replicas wait; whichever tracker holds the task learns it is done.
    let waits = [a.client(), b.client()].map(|http| {
        let path = format!("{MODEL_CENTER}/{id}?wait=20&status=queued");
        tokio::spawn(async move {
            let asked = Instant::now();
            let r = http.get(&path, DEMO).await;
            (r.json()["status"].clone(), asked.elapsed())
        })
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    fake.on("GET /v2/model-center/tasks/x-1", status("completed"));
    for wait in waits {
        let (status, took) = wait.await.unwrap();
        assert_eq!(status, "completed");
        assert!(
            took < Duration::from_secs(20),
            "woken by the change, not the timeout"
        );
    }
}

#[tokio::test]
async fn the_tracker_s_metrics_count_its_tasks_requests_and_finishes_on_sqlite() {
    tracker_metrics(None).await;
}

#[tokio::test]
async fn the_tracker_s_metrics_count_its_tasks_requests_and_finishes_on_postgres() {
    let pg = Postgres::start();
    tracker_metrics(Some(&pg.database("metrics"))).await;
}

/// Five tasks followed until they end, on the ledger at `ledger` (the config
/// directory's SQLite file when `None`).
async fn tracker_metrics(ledger: Option<&str>) {
    let fake = Fake::start().await;
    let ids = ["m0", "m1", "m2", "m3", "m4"];
    let mut routes = Routes::upstream(&fake.url(), "poll_interval_ms = 100")
        .server("metrics_listen = \"127.0.0.1:0\"");
    if let Some(url) = ledger {
        routes = routes.top(&format!("[ledger]\nurl = {url:?}"));
    }
    let gw = Gateway::start(routes).await;
    for id in ids {
        // Submitted `queued`, then `processing`: a change, written back.
        upstream_holds(&fake, id, "processing");
        gw.client()
            .submit(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": id}))
            .await;
    }
    let admin = gw.admin();
    let tracked = r#"mediagate_tracker_tasks{provider="up"}"#;
    let requests = "mediagate_tracker_status_requests_total{";
    eventually("the five tasks counted, each asked about", async || {
        let m = admin.metrics().await;
        m.sum(&[tracked]) == 5.0 && m.sum(&[requests, r#"outcome="unfinished""#]) >= 5.0
    })
    .await;
    let m = admin.metrics().await;
    assert_eq!(m.sum(&[requests, r#"outcome="completed""#]), 0.0);
    assert_eq!(m.sum(&["mediagate_tracker_finish_gap_seconds_count"]), 0.0);

    for id in ids {
        fake.on(
            &format!("GET /v2/model-center/tasks/{id}"),
            status(id, "completed"),
        );
    }
    eventually("no task left to follow", async || {
        admin.metrics().await.sum(&[tracked]) == 0.0
    })
    .await;
    let m = admin.metrics().await;
    let up = r#"provider="up""#;
    assert_eq!(m.sum(&[requests, up, r#"outcome="completed""#]), 5.0);
    assert_eq!(m.sum(&[requests, r#"outcome="error""#]), 0.0);
    // Each task's end seen once, by a status request of the tracker.
    assert_eq!(
        m.sum(&["mediagate_tracker_finish_gap_seconds_count", up]),
        5.0
    );
    // Every request was due first; a poll the results cache answered is no request.
    let sent = m.sum(&[requests, up]);
    assert!(m.sum(&["mediagate_tracker_poll_delay_seconds_count", up]) >= sent);
    let asked_upstream = fake.take().iter().filter(|s| s.method == "GET").count();
    assert_eq!(sent, asked_upstream as f64);
    // What the unfinished answers taught was written back, at most once each.
    let statements = "mediagate_tracker_ledger_statements_total{";
    let polled = m.sum(&[statements, r#"statement="polled""#]);
    let unfinished = m.sum(&[requests, r#"outcome="unfinished""#]);
    assert!(
        polled >= 1.0 && polled <= unfinished,
        "{polled} of {unfinished}"
    );
    assert!(m.sum(&[statements, r#"statement="lease""#]) >= 1.0);
    assert!(m.sum(&[statements, r#"statement="count""#]) >= 2.0);
    assert_eq!(
        m.sum(&[r#"mediagate_tracker_behind_seconds{provider="up"}"#]),
        0.0
    );
    assert_eq!(m.sum(&["mediagate_ledger_errors_total"]), 0.0);
}

#[tokio::test]
async fn clients_waiting_on_a_shared_ledger_add_no_statement_each() {
    const CLIENTS: usize = 100;
    let pg = Postgres::start();
    let url = pg.database("waiting");
    let fake = Fake::start().await;
    // The tracker asks seldom: what the ledger runs beyond its own loops is the waits'.
    let routes = Routes::upstream(&fake.url(), "poll_interval_ms = 60000")
        .top(&format!("[ledger]\nurl = {url:?}"));
    let gw = Gateway::start(routes).await;
    let http = gw.client();
    let mut ids = Vec::new();
    for n in 0..CLIENTS {
        let up = format!("w{n}");
        fake.on("POST /v2/model-center/tasks", Answer::queued(&up));
        let queued = Answer::json(200, json!({"id": up, "status": "queued"}));
        fake.on(&format!("GET /v2/model-center/tasks/{up}"), queued);
        let task = json!({"model": "m1", "prompt": up});
        ids.push(http.submit_id(MODEL_CENTER, DEMO, &task).await);
    }
    // Every statement the gateway runs outside a transaction of its own is one.
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()";
    let commits = async || -> i64 { sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap() };
    let window = Duration::from_secs(4);
    let before = commits().await;
    tokio::time::sleep(window).await;
    let alone = commits().await - before;

    let waits: Vec<_> = ids
        .iter()
        .map(|id| {
            let (http, path) = (gw.client(), format!("{MODEL_CENTER}/{id}?wait=5"));
            tokio::spawn(async move { http.get(&path, DEMO).await.json()["status"].clone() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = commits().await;
    tokio::time::sleep(window).await;
    let waiting = commits().await - before;
    // Each client's own look at the ledger, twice a second, was eight statements here.
    assert!(
        waiting - alone < CLIENTS as i64,
        "{CLIENTS} clients waiting: {waiting} statements, {alone} without them"
    );
    for wait in waits {
        assert_eq!(
            wait.await.unwrap(),
            "queued",
            "unchanged when its wait is over"
        );
    }
}

/// An answer that says what the ledger knows already is written nowhere: the
/// tracker keeps its tasks' schedules in memory and writes back only a change.
#[tokio::test]
async fn an_unchanged_answer_adds_no_ledger_statement() {
    let fake = Fake::start().await;
    let ids = ["u0", "u1", "u2"];
    let routes = Routes::upstream(&fake.url(), "poll_interval_ms = 100")
        .server("metrics_listen = \"127.0.0.1:0\"")
        .top("[tracker]\nmax_interval_ms = 100");
    let gw = Gateway::start(routes).await;
    for id in ids {
        upstream_holds(&fake, id, "queued");
        gw.client()
            .submit(MODEL_CENTER, DEMO, &json!({"model": "m1", "prompt": id}))
            .await;
    }
    let admin = gw.admin();
    let unfinished =
        r#"mediagate_tracker_status_requests_total{provider="up",outcome="unfinished"}"#;
    let polled = r#"mediagate_tracker_ledger_statements_total{statement="polled"}"#;
    eventually("every task asked about ten times", async || {
        admin.metrics().await.sum(&[unfinished]) >= 30.0
    })
    .await;
    let m = admin.metrics().await;
    assert_eq!(m.sum(&[polled]), 0.0, "unchanged answers wrote nothing");
    // A change is written, once.
    fake.on("GET /v2/model-center/tasks/u1", status("u1", "processing"));
    let asked = m.sum(&[unfinished]);
    eventually("the change written back", async || {
        admin.metrics().await.sum(&[polled]) >= 1.0
    })
    .await;
    eventually("every task asked about ten times more", async || {
        admin.metrics().await.sum(&[unfinished]) >= asked + 30.0
    })
    .await;
    let m = admin.metrics().await;
    assert_eq!(m.sum(&[polled]), 1.0, "one change, one statement");
    assert_eq!(m.sum(&["mediagate_ledger_errors_total"]), 0.0);
    let listed = gw.client().get(MODEL_CENTER, DEMO).await.json();
    let statuses: Vec<_> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["status"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(statuses.iter().filter(|s| *s == "processing").count(), 1);
}

/// A replica killed with SIGKILL says nothing to anybody: once its heartbeat expires
/// (`lease_ms`), the other replica follows its unfinished tasks, and a client waiting
/// there hears how they ended.
#[tokio::test]
async fn a_killed_replica_s_tasks_are_followed_by_the_other_once_its_heartbeat_expires() {
    let ids = ["k0", "k1", "k2"];
    let (f, mut a, tasks) = Following::start("killed", &ids).await;
    let (fake, pool) = (&f.fake, f.pool.clone());
    let first = f.followers().await;
    let b = Proc::start_in(f.dir(), &[], &[]).await;
    a.kill();
    // Clients wait on the survivor (each wait asks once, and hears `queued`); then
    // the tasks end upstream, and only a tracker can tell the waiting clients.
    let waits: Vec<_> = tasks
        .iter()
        .map(|id| {
            let (http, path) = (
                b.client(),
                format!("{MODEL_CENTER}/{id}?wait=20&status=queued"),
            );
            tokio::spawn(async move { http.get(&path, DEMO).await.json()["status"].clone() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for id in ids {
        fake.on(
            &format!("GET /v2/model-center/tasks/{id}"),
            status(id, "completed"),
        );
    }
    for wait in waits {
        assert_eq!(wait.await.unwrap(), "completed", "woken, not timed out");
    }
    let states: Vec<String> = sqlx::query_scalar("SELECT state FROM tasks")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(states, ["completed"; 3]);
    assert!(first.iter().all(|f| f == &first[0]), "{first:?}");
}

/// A replica paused for longer than its heartbeat holds (a stalled process) finds on
/// waking that the other follows its tasks now: it leaves them to it, and they end as
/// usual.
#[tokio::test]
async fn a_replica_paused_past_its_heartbeat_leaves_its_tasks_to_the_other() {
    let ids = ["p0", "p1"];
    let (f, a, _) = Following::start("paused", &ids).await;
    let followers = async || f.followers().await;
    let first = followers().await[0].clone();
    let b = Proc::start_in(f.dir(), &[], &[]).await;
    a.pause(true);
    eventually("the other replica follows them", async || {
        followers().await.iter().all(|f| f.is_some() && f != &first)
    })
    .await;
    let second = followers().await;
    a.pause(false);
    a.wait_for_log("heartbeat had expired", 1).await;
    // Its next look claims nothing the other follows.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(followers().await, second);
    f.all_complete(&ids).await;
    assert!(b.count_in_log("heartbeat had expired") == 0, "{}", b.log());
}

/// Replicas whose wall clocks disagree by far more than a lease (here one runs 30 s
/// ahead, `lease_ms` 1 s) both keep to the server's clock for heartbeats: the one
/// ahead does not take the other for dead and its tasks with it, and both heartbeats
/// hold, in the server's time.
#[tokio::test]
async fn a_replica_whose_clock_runs_ahead_takes_no_task_from_a_live_one() {
    let ids = ["s0", "s1"];
    let (f, a, _) = Following::start("skewed", &ids).await;
    let pool = f.pool.clone();
    let followers = async || f.followers().await;
    let first = followers().await;
    let ahead = crate::support::clock_moved("+30s");
    let ahead: Vec<(&str, &str)> = ahead.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let b = Proc::start_in(f.dir(), &[], &ahead).await;
    let alive_for = async || -> Vec<i64> {
        sqlx::query_scalar(
            "SELECT alive_until_ms - CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT) FROM replicas ORDER BY name",
        )
        .fetch_all(&pool)
        .await
        .unwrap()
    };
    eventually("both replicas are alive", async || {
        alive_for().await.len() == 2
    })
    .await;
    // Three leases: the one ahead looks for dead replicas' tasks after each heartbeat.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert_eq!(followers().await, first, "{}", b.log());
    let left = alive_for().await;
    assert!(
        left.len() == 2 && left.iter().all(|ms| (0..=1500).contains(ms)),
        "each heartbeat holds for about a lease from the server's now: {left:?}"
    );
    f.all_complete(&ids).await;
    for replica in [&a, &b] {
        assert_eq!(
            replica.count_in_log("heartbeat had expired"),
            0,
            "{}",
            replica.log()
        );
    }
}

/// A gateway restarted on its SQLite ledger (the one before killed with SIGKILL)
/// follows the tasks the one before followed at once: the file is one process's,
/// so the old heartbeat (`lease_ms`, 30 s, longer than this test waits for anything)
/// need not expire first. Stopped cleanly, it gives them back for the next one.
#[tokio::test]
async fn a_gateway_restarted_on_its_sqlite_ledger_follows_the_tasks_of_the_one_before() {
    let fake = Fake::start().await;
    let ids = ["r0", "r1"];
    let routes = Routes::upstream(&fake.url(), "poll_interval_ms = 200").render();
    let mut gw = Proc::start(&routes).await;
    let mut tasks = Vec::new();
    for id in ids {
        upstream_holds(&fake, id, "queued");
        let task = json!({"model": "m1", "prompt": id});
        tasks.push(gw.client().submit_id(MODEL_CENTER, DEMO, &task).await);
    }
    let mut asked = Vec::new();
    eventually("both tasks followed", async || {
        asked.extend(fake.take().into_iter().filter(|s| s.method == "GET"));
        ids.iter()
            .all(|id| asked.iter().any(|s| s.path.ends_with(id)))
    })
    .await;
    gw.restart().await;
    fake.on("GET /v2/model-center/tasks/r0", status("r0", "completed"));
    // Nobody queries the tasks: the ledger learns how the first ended.
    eventually("the restarted gateway follows the tasks", async || {
        ended(&gw.client(), &tasks).await == ["completed", "queued"]
    })
    .await;
    gw.signal("TERM").await;
    gw.wait_exit(Duration::from_secs(20)).await;
    let db = gw.dir().path().join(".mediagate/ledger.db");
    let conn = rusqlite::Connection::open(db).unwrap();
    let followers: Vec<Option<String>> = conn
        .prepare("SELECT lease_owner FROM tasks WHERE state = 'submitted'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(followers, [None], "given back at the stop");
    fake.on("GET /v2/model-center/tasks/r1", status("r1", "completed"));
    gw.restart().await;
    eventually("the next gateway follows the task given back", async || {
        ended(&gw.client(), &tasks).await == ["completed", "completed"]
    })
    .await;
}

/// The gateway's SQLite ledger, opened beside it (to change what a test needs).
fn sqlite_ledger(gw: &Gateway) -> rusqlite::Connection {
    let db = rusqlite::Connection::open(gw.dir().path().join(".mediagate/ledger.db")).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    db
}

/// Wait until the listing (the ledger) gives task `id` the status `status`.
async fn listed_as(http: &crate::support::Http, id: &str, status: &str) {
    eventually(&format!("the ledger has the task {status}"), async || {
        ended(http, &[id.to_string()]).await == [status]
    })
    .await;
}

/// The statuses the listing (the ledger) gives `tasks`, in order.
async fn ended(http: &crate::support::Http, tasks: &[String]) -> Vec<String> {
    let listed = http.get(MODEL_CENTER, DEMO).await.json();
    let items = listed["data"].as_array().cloned().unwrap_or_default();
    tasks
        .iter()
        .map(|id| {
            items
                .iter()
                .find(|t| t["id"] == id.as_str())
                .and_then(|t| t["status"].as_str())
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// The fake upstream's status answer for task `id`: `s`, with a result when completed.
fn status(id: &str, s: &str) -> Answer {
    let urls = if s == "completed" {
        json!(["https://cdn.example/x.mp4"])
    } else {
        json!([])
    };
    Answer::json(200, json!({"id": id, "status": s, "urls": urls}))
}

/// Replica `a` of a fleet on a PostgreSQL ledger of its own (status requests every
/// 200 ms, `lease_ms` 1 s, one task secret for every replica), following tasks it
/// was sent, each held at its status upstream; what starts other replicas beside it.
struct Following {
    _pg: Postgres,
    fake: Fake,
    routes: String,
    pool: sqlx::PgPool,
}

impl Following {
    /// The fleet on database `name`, its first replica and the ids of `ids`, each a
    /// task submitted to it, held `queued` upstream and followed by it.
    async fn start(name: &str, ids: &[&str]) -> (Self, Proc, Vec<String>) {
        let pg = Postgres::start();
        let url = pg.database(name);
        let fake = Fake::start().await;
        let routes = Routes::upstream(&fake.url(), "poll_interval_ms = 200")
            .top(&format!("[ledger]\nurl = {url:?}"))
            .top("[tracker]\nlease_ms = 1000")
            .render();
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let f = Self {
            _pg: pg,
            fake,
            routes,
            pool,
        };
        let a = Proc::start_in(f.dir(), &[], &[]).await;
        let mut tasks = Vec::new();
        for id in ids {
            upstream_holds(&f.fake, id, "queued");
            let task = json!({"model": "m1", "prompt": id});
            tasks.push(a.client().submit_id(MODEL_CENTER, DEMO, &task).await);
        }
        eventually("the only replica follows every task", async || {
            f.followers().await.iter().all(Option::is_some)
        })
        .await;
        (f, a, tasks)
    }

    /// A replica's configuration directory.
    fn dir(&self) -> crate::support::ConfigDir {
        let secret = "a-task-secret-shared-by-both-replicas-0123456789";
        crate::support::ConfigDir::new(&self.routes).with("task-secret", secret)
    }

    /// The tasks `ids` complete upstream; back once the ledger has every one
    /// completed (a follower asked, and recorded it).
    async fn all_complete(&self, ids: &[&str]) {
        for id in ids {
            let path = format!("GET /v2/model-center/tasks/{id}");
            self.fake.on(&path, status(id, "completed"));
        }
        eventually("every task ends", async || {
            let states: Vec<String> = sqlx::query_scalar("SELECT state FROM tasks")
                .fetch_all(&self.pool)
                .await
                .unwrap();
            states.iter().all(|s| s == "completed")
        })
        .await;
    }

    /// Each task's follower, in the order of the tasks.
    async fn followers(&self) -> Vec<Option<String>> {
        sqlx::query_scalar("SELECT lease_owner FROM tasks ORDER BY id")
            .fetch_all(&self.pool)
            .await
            .unwrap()
    }
}

/// The fake upstream creates task `id` (`queued`) and answers its status requests `s`.
fn upstream_holds(fake: &Fake, id: &str, s: &str) {
    fake.on("POST /v2/model-center/tasks", Answer::queued(id));
    fake.on(&format!("GET /v2/model-center/tasks/{id}"), status(id, s));
}
