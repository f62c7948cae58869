//! Retention (`[ledger] keep_days`): finished tasks older than that leave the ledger,
//! and what the key and the operator are told about usage and spend stays the same to
//! the unit, on SQLite and on PostgreSQL; an unfinished task stays, and so does one
//! whose webhook is still owed.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::support::{
    ConfigDir, DEMO, Gateway, Http, MODEL_CENTER, Postgres, Routes, eventually, family,
    model_center_provider, operator,
};

const DAY_MS: i64 = 86_400_000;
/// Usage over every day there is.
const USAGE: &str = "/v2/usage?from=2000-01-01";

/// The ledger's database, written by the test beside the gateway: the test makes
/// tasks old by moving their times back, as the days passing would.
enum Db {
    Sqlite(PathBuf),
    Postgres(sqlx::PgPool),
}

impl Db {
    async fn run(&self, sql: &str) {
        match self {
            Self::Sqlite(path) => {
                let db = rusqlite::Connection::open(path).expect("open the ledger");
                db.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
                db.execute(sql, []).expect(sql);
            }
            Self::Postgres(pool) => {
                sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
                    .execute(pool)
                    .await
                    .expect(sql);
            }
        }
    }

    async fn count(&self, sql: &str) -> i64 {
        match self {
            Self::Sqlite(path) => rusqlite::Connection::open(path)
                .and_then(|db| db.query_row(sql, [], |r| r.get(0)))
                .expect(sql),
            Self::Postgres(pool) => sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
                .fetch_one(pool)
                .await
                .expect(sql),
        }
    }
}

/// The simulator as provider `up`, its model `m1` at 1.00 a task (1.50 when it asks
/// for 10 seconds), the tracker asking every 100 ms; tasks kept a day.
fn routes(ledger: &str) -> Routes {
    let price = "{ estimate = 'if .duration == 10 then 1.50 else 1.00 end' }";
    Routes::new()
        .server("metrics_listen = \"127.0.0.1:0\"")
        .provider(model_center_provider(
            "up",
            "builtin:simulator",
            "poll_interval_ms = 100",
        ))
        .family(format!(
            "{}price = {price}\n",
            family("test", &["up"], &["m1"])
        ))
        .top(&format!(
            "[ledger]\n{ledger}\nkeep_days = 1\nprune_batch = 2\n"
        ))
}

/// What the key and the operator are told of usage.
async fn usage(http: &Http, dir: &ConfigDir) -> (Value, String) {
    let r = http.get(USAGE, DEMO).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let table = operator(dir, &["usage", "--since", "2000-01-01"]);
    (r.json(), table)
}

/// On the default SQLite file, or on PostgreSQL at `postgres`.
async fn pruned_tasks_still_count(postgres: Option<String>) {
    let ledger = postgres
        .as_ref()
        .map_or(String::new(), |url| format!("url = {url:?}"));
    let gw = Gateway::start(routes(&ledger)).await;
    let db = match &postgres {
        None => Db::Sqlite(gw.dir().path().join(".mediagate/ledger.db")),
        Some(url) => Db::Postgres(sqlx::PgPool::connect(url).await.expect("connect")),
    };
    let http = gw.client();
    for n in 0..7 {
        let duration = if n % 2 == 0 { 5 } else { 10 };
        let body = json!({"model": "m1", "prompt": format!("fox {n}"), "duration": duration});
        let id = http.submit_id(MODEL_CENTER, DEMO, &body).await;
        let done = http.wait_done(MODEL_CENTER, DEMO, &id).await;
        assert_eq!(done["status"], "completed", "{done}");
    }
    // Three days pass for all of them: submitted, ended and spent three days ago.
    // One of them never ended (its outcome is unknown): it stays, reserved.
    let back = 3 * DAY_MS;
    db.run(&format!("UPDATE tasks SET created_ms = created_ms - {back}, updated_ms = updated_ms - {back}, finished_ms = finished_ms - {back}")).await;
    db.run("UPDATE spend SET day = day - 3").await;
    db.run("UPDATE tasks SET state = 'unknown_outcome', finished_ms = NULL, cost_settled = NULL WHERE id = (SELECT MIN(id) FROM tasks)").await;
    // Of the six that ended, one's webhook was delivered (its delivery goes with it)
    // and one's is still owed (it stays; due in a long time, so that the deliverer
    // leaves it pending).
    let delivery = |state: &str, row: &str| {
        format!(
            "INSERT INTO deliveries (task_row, url, state, created_ms, next_attempt_ms) SELECT id, 'https://hooks.example/h', '{state}', 0, 4000000000000 FROM tasks WHERE id = ({row})"
        )
    };
    db.run(&delivery("delivered", "SELECT MAX(id) FROM tasks"))
        .await;
    let owed = "SELECT MAX(id) FROM tasks WHERE id < (SELECT MAX(id) FROM tasks)";
    db.run(&delivery("pending", owed)).await;
    let before = usage(&http, gw.dir()).await;
    assert_eq!(before.0["total"]["tasks"], 7, "{}", before.0);
    assert_eq!(before.0["total"]["completed"], 6, "{}", before.0);
    assert_eq!(before.0["total"]["reserved"], 1.0, "{}", before.0);

    // A restart prunes at once: five tasks, in batches of two rows.
    let gw = Gateway::start_in(gw.stop().await).await;
    let admin = gw.admin();
    eventually(
        "the five finished tasks that owe nothing pruned",
        async || {
            admin
                .metrics()
                .await
                .sum(&["mediagate_ledger_pruned_tasks_total"])
                == 5.0
        },
    )
    .await;
    assert_eq!(db.count("SELECT COUNT(*) FROM tasks").await, 2);
    let unfinished = "SELECT COUNT(*) FROM tasks WHERE state = 'unknown_outcome'";
    assert_eq!(db.count(unfinished).await, 1);
    let still_owed = "SELECT COUNT(*) FROM deliveries d JOIN tasks t ON t.id = d.task_row WHERE d.state = 'pending'";
    assert_eq!(db.count(still_owed).await, 1);
    assert_eq!(db.count("SELECT COUNT(*) FROM deliveries").await, 1);
    let http = gw.client();
    assert_eq!(usage(&http, gw.dir()).await, before);

    // Today's tasks add to the pruned days' usage as they did before.
    let body = json!({"model": "m1", "prompt": "one more", "duration": 5});
    let id = http.submit_id(MODEL_CENTER, DEMO, &body).await;
    http.wait_done(MODEL_CENTER, DEMO, &id).await;
    let (after, _) = usage(&http, gw.dir()).await;
    assert_eq!(after["total"]["tasks"], 8, "{after}");
    assert_eq!(
        after["total"]["spent"].as_f64(),
        Some(before.0["total"]["spent"].as_f64().unwrap() + 1.0),
        "{after}"
    );
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruned_tasks_still_count_in_usage_on_sqlite() {
    pruned_tasks_still_count(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruned_tasks_still_count_in_usage_on_postgres() {
    let pg = Postgres::start();
    pruned_tasks_still_count(Some(pg.database("retention"))).await;
}
