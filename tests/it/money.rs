//! Money: a key's budget holds at its edge under concurrent submits (one gateway on
//! SQLite, two replicas sharing PostgreSQL); a task's reservation is settled exactly
//! once when it ends (at what the provider reports for a completed task, at 0 for a
//! failed or cancelled one), also when several see the end at once and across a
//! `kill -9`; the ledger's spend equals its tasks' costs to the millionth; a refusal
//! says what remains and when it resets; prices that cannot work are refused at load.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::support::{
    Answer, ConfigDir, DEMO, DEMO2, Fake, Gateway, Http, MODEL_CENTER, Postgres, Proc, Reply,
    Routes, assert_error, check, eventually, family, replace_once, tasks_provider, unix_now,
};

const SUBMIT: &str = "POST /tasks";
const MILLION: i64 = 1_000_000;
const DAY: u64 = 86_400;

/// Replicas share the task secret, so that either answers the other's ids.
const SHARED_SECRET: &str = "a-task-secret-shared-by-both-replicas-0123456789";

/// 1.00 a task, whatever it asks for.
const FLAT: &str = "{ estimate = '1.00' }";
/// 0.10 a second: the requested seconds reserved, the delivered ones charged.
const BY_SECONDS: &str = "{ estimate = '(.duration // 5) * 0.10', settle = '($answer.seconds // .duration // 5) * 0.10' }";

/// Provider `one` at `fake` (`POST /tasks`, `GET /tasks/{id}`), with `extra` lines.
/// Its timeouts are long: status requests wait for the test's release, and a loaded
/// machine must not turn a submit into an unknown outcome.
fn provider(fake: &Fake, extra: &str) -> String {
    [
        ("connect_timeout_ms = 500", "connect_timeout_ms = 5000"),
        ("submit_timeout_ms = 1000", "submit_timeout_ms = 10000"),
        ("query_timeout_ms = 1000", "query_timeout_ms = 10000"),
    ]
    .iter()
    .fold(
        tasks_provider("one", &fake.url(), extra),
        |block, (from, to)| replace_once(&block, from, to),
    )
}

/// The same, with a cancel step: `POST /tasks/{id}/cancel`.
fn cancelable_provider(fake: &Fake) -> String {
    provider(fake, "") + "\n[providers.one.cancel]\npath = '\"/tasks/\\($id)/cancel\"'\n"
}

/// Family `f` of `models` on provider `one`, priced by `price` (an inline table).
fn priced_family(models: &[&str], price: &str) -> String {
    format!("{}price = {price}\n", family("f", &["one"], models))
}

fn body(duration: u32) -> Value {
    json!({"model": "m1", "prompt": "a fox", "duration": duration})
}

fn running() -> Answer {
    Answer::json(200, json!({"status": "running"}))
}

/// The provider's final answer for a task that delivered `seconds`.
fn done(seconds: u32) -> Answer {
    Answer::json(
        200,
        json!({"status": "done", "url": "https://cdn.example/v.mp4", "seconds": seconds}),
    )
}

/// A fake provider that creates task `t1` for every submit, and says it is running.
async fn busy_provider() -> Fake {
    let fake = Fake::start().await;
    fake.on(SUBMIT, Answer::json(200, json!({"id": "t1"})));
    fake.on("GET /tasks/t1", running());
    fake
}

/// Submit `body` as `key`, the provider creating its task `upstream` (running).
async fn submit_as(http: &Http, fake: &Fake, key: &str, upstream: &str, body: &Value) -> Reply {
    fake.on(SUBMIT, Answer::json(200, json!({"id": upstream})));
    fake.on(&format!("GET /tasks/{upstream}"), running());
    http.post_json(MODEL_CENTER, key, body).await
}

/// Submit and expect it accepted; the task's id.
async fn accepted(http: &Http, fake: &Fake, upstream: &str, body: &Value) -> String {
    let r = submit_as(http, fake, DEMO, upstream, body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["id"].as_str().unwrap().to_string()
}

async fn delete(http: &Http, id: &str) -> Reply {
    http.delete(&format!("{MODEL_CENTER}/{id}"), DEMO).await
}

fn submits_seen(fake: &Fake) -> usize {
    fake.take().iter().filter(|s| s.method == "POST").count()
}

/// Unix seconds of the UTC midnight after `t`.
fn next_midnight(t: u64) -> u64 {
    (t / DAY + 1) * DAY
}

/// Unix seconds of the first of the UTC month after `t` (civil calendar arithmetic,
/// written here independently of the gateway's).
fn next_month(t: u64) -> u64 {
    let days = (t / DAY) as i64;
    // Days since 1970-01-01 to (year, month), after H. Hinnant's `civil_from_days`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (year, month) = if month == 12 {
        (year + 1, 1)
    } else {
        (year, month + 1)
    };
    // And back: the first of that month.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    ((era * 146_097 + doe - 719_468) as u64) * DAY
}

/// A `budget_exceeded` refusal of a request sent at `asked` (Unix seconds): it names
/// the period, what remains of it and its reset; `Retry-After` is not past the reset.
#[track_caller]
fn assert_budget_refusal(r: &Reply, asked: u64, period: &str, remaining: &str, resets_at: u64) {
    let message = assert_error(r, 429, "budget_exceeded", None);
    assert!(message.contains(&format!("`{period}`")), "{message}");
    assert!(message.contains(&format!("({remaining})")), "{message}");
    assert!(
        message.contains(&format!("resets at {resets_at} ")),
        "{resets_at}: {message}"
    );
    let wait = r.header_u64("retry-after");
    assert!(
        (1..=resets_at - asked).contains(&wait),
        "Retry-After {wait}, {} s before the reset: {message}",
        resets_at - asked
    );
}

/// On PostgreSQL, what the budget grants of the owner (and day) matched by `$which`
/// hold and no task has reserved yet (`postgres_grants.rs`).
fn held_ahead(which: &str) -> String {
    format!(
        "(SELECT CAST(COALESCE(SUM(g.micros - (SELECT COALESCE(SUM(t.cost_estimate), 0) FROM tasks t WHERE t.budget_grant = g.id)), 0) AS BIGINT) FROM budget_grants g WHERE {which})"
    )
}

/// The ledger's database, read by the test beside the gateway.
enum Db {
    Sqlite(PathBuf),
    Postgres(sqlx::PgPool),
}

/// One priced task's money, as its row holds it.
#[derive(Debug, Clone, PartialEq)]
struct Cost {
    upstream_id: Option<String>,
    state: String,
    estimate: Option<i64>,
    settled: Option<i64>,
}

/// A [`Cost`] as read: upstream id, state, estimate, settled.
type CostRow = (Option<String>, String, Option<i64>, Option<i64>);

impl Db {
    fn sqlite(dir: &ConfigDir) -> Self {
        Self::Sqlite(dir.path().join(".mediagate/ledger.db"))
    }

    async fn postgres(url: &str) -> Self {
        Self::Postgres(sqlx::PgPool::connect(url).await.expect("connect"))
    }

    /// The owner's `spend` rows, summed over days (and slots); on PostgreSQL less
    /// what budget grants hold ahead and no task has reserved yet.
    async fn spend(&self, owner: &str) -> i64 {
        const SQL: &str =
            "SELECT CAST(COALESCE(SUM(micros), 0) AS BIGINT) FROM spend WHERE owner = $1";
        match self {
            Self::Sqlite(path) => rusqlite::Connection::open(path)
                .and_then(|db| db.query_row(&SQL.replace('$', "?"), [owner], |r| r.get(0)))
                .expect("read spend"),
            Self::Postgres(pool) => {
                let sql = format!("SELECT ({SQL}) - {}", held_ahead("g.owner = $1"));
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .bind(owner)
                    .fetch_one(pool)
                    .await
                    .expect("read spend")
            }
        }
    }

    /// The owner's `spend` rows, summed, with what budget grants hold (PostgreSQL).
    async fn spend_with_held(&self, owner: &str) -> i64 {
        let Self::Postgres(pool) = self else {
            panic!("budget grants are PostgreSQL's");
        };
        sqlx::query_scalar(
            "SELECT CAST(COALESCE(SUM(micros), 0) AS BIGINT) FROM spend WHERE owner = $1",
        )
        .bind(owner)
        .fetch_one(pool)
        .await
        .expect("read spend")
    }

    /// The owner's tasks admitted against a budget grant, and the grants held now
    /// (PostgreSQL).
    async fn grants(&self, owner: &str) -> [i64; 2] {
        let Self::Postgres(pool) = self else {
            panic!("budget grants are PostgreSQL's");
        };
        let (tasks, grants) = sqlx::query_as("SELECT (SELECT COUNT(*) FROM tasks WHERE owner = $1 AND budget_grant IS NOT NULL), (SELECT COUNT(*) FROM budget_grants WHERE owner = $1)")
            .bind(owner)
            .fetch_one(pool)
            .await
            .expect("read grants");
        [tasks, grants]
    }

    /// What `sql` counts (PostgreSQL).
    async fn count(&self, sql: &'static str) -> i64 {
        let Self::Postgres(pool) = self else {
            panic!("PostgreSQL only");
        };
        sqlx::query_scalar(sql)
            .fetch_one(pool)
            .await
            .expect("count")
    }

    /// The owner's priced tasks, oldest first.
    async fn costs(&self, owner: &str) -> Vec<Cost> {
        const SQL: &str = "SELECT upstream_id, state, cost_estimate, cost_settled FROM tasks WHERE owner = $1 AND cost_estimate IS NOT NULL ORDER BY id";
        let rows: Vec<CostRow> = match self {
            Self::Sqlite(path) => rusqlite::Connection::open(path)
                .and_then(|db| {
                    let mut stmt = db.prepare(&SQL.replace('$', "?"))?;
                    stmt.query_map([owner], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                    })?
                    .collect()
                })
                .expect("read tasks"),
            Self::Postgres(pool) => sqlx::query_as(SQL)
                .bind(owner)
                .fetch_all(pool)
                .await
                .expect("read tasks"),
        };
        rows.into_iter()
            .map(|(upstream_id, state, estimate, settled)| Cost {
                upstream_id,
                state,
                estimate,
                settled,
            })
            .collect()
    }

    /// The owner's spend, checked against its tasks: the settled cost of each ended
    /// one and the reservation of each other, to the millionth.
    async fn spent(&self, owner: &str) -> i64 {
        let spend = self.spend(owner).await;
        let costs = self.costs(owner).await;
        let sum: i64 = costs
            .iter()
            .map(|c| c.settled.or(c.estimate).unwrap())
            .sum();
        assert_eq!(spend, sum, "spend of {owner} against its tasks {costs:#?}");
        spend
    }

    /// The one task the provider knows as `upstream`.
    async fn task(&self, owner: &str, upstream: &str) -> Cost {
        let costs = self.costs(owner).await;
        let mine: Vec<&Cost> = costs
            .iter()
            .filter(|c| c.upstream_id.as_deref() == Some(upstream))
            .collect();
        assert_eq!(mine.len(), 1, "{upstream} in {costs:#?}");
        mine[0].clone()
    }
}

/// Twenty submits at once at a budget's edge (1.00 each, 7.50 a day): seven fit,
/// thirteen are refused, each saying what remains, and the ledger never spends past
/// the budget.
async fn twenty_at_a_budgets_edge(replicas: &[Http], fake: &Fake, ledger: &Db) {
    let mut clients = JoinSet::new();
    for n in 0..20 {
        let http = replicas[n % replicas.len()].clone();
        clients.spawn(async move {
            let asked = unix_now();
            (asked, http.post_json(MODEL_CENTER, DEMO, &body(5)).await)
        });
    }
    let (mut taken, mut refused) = (0, 0);
    while let Some(joined) = clients.join_next().await {
        let (asked, r) = joined.unwrap();
        if r.status == 200 {
            taken += 1;
        } else {
            refused += 1;
            // Every refusal saw the seven others reserved: 0.5 remains.
            assert_budget_refusal(&r, asked, "per_day", "0.5 USD", next_midnight(asked));
        }
    }
    assert_eq!((taken, refused), (7, 13));
    assert_eq!(
        submits_seen(fake),
        7,
        "a refused submit never reaches the provider"
    );
    assert_eq!(ledger.spent("demo").await, 7 * MILLION);
    assert_eq!(ledger.costs("demo").await.len(), 7, "nor the ledger");
}

fn edge_routes(fake: &Fake) -> Routes {
    Routes::new()
        .provider(provider(fake, ""))
        .family(priced_family(&["m1"], FLAT))
        .demo_key("budget = { per_day = 7.5 }")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_submits_at_a_budgets_edge_never_spend_past_it_on_sqlite() {
    let fake = busy_provider().await;
    let gw = Gateway::start(edge_routes(&fake)).await;
    let ledger = Db::sqlite(gw.dir());
    twenty_at_a_budgets_edge(&[gw.client()], &fake, &ledger).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_submits_on_two_replicas_sharing_postgres_never_spend_past_the_budget() {
    let pg = Postgres::start();
    let url = pg.database("edge");
    let fake = busy_provider().await;
    let [a, b] = two_replicas(edge_routes(&fake), &url).await;
    let ledger = Db::postgres(&url).await;
    twenty_at_a_budgets_edge(&[a.client(), b.client()], &fake, &ledger).await;
}

/// Two gateways on `routes`, sharing the PostgreSQL ledger at `url` and a task secret.
async fn two_replicas(routes: Routes, url: &str) -> [Proc; 2] {
    let routes = routes.top(&format!("[ledger]\nurl = {url:?}")).render();
    let dir = || ConfigDir::new(&routes).with("task-secret", SHARED_SECRET);
    [
        Proc::start_in(dir(), &[], &[]).await,
        Proc::start_in(dir(), &[], &[]).await,
    ]
}

/// What the demo key may spend a day in the tests of budgets granted ahead.
const BUSY_BUDGET: i64 = 300;

/// The demo key with a budget of [`BUSY_BUDGET`] a day, submitting to a model priced
/// 1.00 a task on two replicas sharing database `name` of `pg`: the replicas, the
/// ledger, the provider (kept for as long as the replicas run).
async fn busy_key_replicas(pg: &Postgres, name: &str) -> ([Proc; 2], Db, Fake) {
    let url = pg.database(name);
    let fake = busy_provider().await;
    let routes = Routes::new()
        .provider(provider(&fake, ""))
        .family(priced_family(&["m1"], FLAT))
        .demo_key(&format!("budget = {{ per_day = {BUSY_BUDGET} }}"));
    let replicas = two_replicas(routes, &url).await;
    (replicas, Db::postgres(&url).await, fake)
}

/// A busy key on two replicas sharing PostgreSQL: each replica admits it against a
/// share of its budget granted ahead (its tasks name the grant), what is spent never
/// passes the budget, and what the replicas held comes back once they go quiet; the
/// budget then fills to its last unit, and the next submit is refused with nothing
/// remaining.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_key_is_admitted_against_grants_ahead_and_its_budget_still_fills_exactly() {
    let pg = Postgres::start();
    let (replicas, ledger, _fake) = busy_key_replicas(&pg, "grants").await;
    // Sixteen clients, eight on each replica, each submitting 25 times in a row.
    let mut clients = JoinSet::new();
    for n in 0..16 {
        let http = replicas[n % 2].client();
        clients.spawn(async move {
            let mut taken = 0;
            for _ in 0..25 {
                let r = http.post_json(MODEL_CENTER, DEMO, &body(5)).await;
                if r.status == 200 {
                    taken += 1;
                } else {
                    assert_error(&r, 429, "budget_exceeded", None);
                }
            }
            taken
        });
    }
    let mut taken = 0;
    while let Some(joined) = clients.join_next().await {
        taken += joined.unwrap();
    }
    assert!(
        taken <= BUSY_BUDGET,
        "{taken} admitted on a budget of {BUSY_BUDGET}"
    );
    let [granted, held] = ledger.grants("demo").await;
    assert!(granted > 0, "no task was admitted against a grant");
    assert!(
        ledger.spend_with_held("demo").await <= BUSY_BUDGET * MILLION,
        "reserved and held ahead past the budget"
    );
    eventually("the replicas give back what they hold", async || {
        ledger.grants("demo").await[1] == 0
    })
    .await;
    assert_eq!(ledger.spent("demo").await, taken * MILLION, "held: {held}");
    assert_eq!(ledger.spend_with_held("demo").await, taken * MILLION);
    fill_the_budget(&[&replicas[0], &replicas[1]], taken, &ledger).await;
}

/// A replica killed while it holds a grant: the grant stays counted (nothing is spent
/// past the budget meanwhile), and once it has expired the other replica's next grant
/// of the key gives back what it held unused; the budget then fills to its last unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_held_by_a_replica_killed_comes_back_once_it_expires() {
    let pg = Postgres::start();
    let ([mut a, b], ledger, _fake) = busy_key_replicas(&pg, "grant_kill").await;
    let busy = busy_until_it_holds_a_grant(&a, &ledger).await;
    a.kill();
    busy.join_all().await;
    assert!(
        ledger.grants("demo").await[1] > 0,
        "the dead replica's grant"
    );
    let expired = "SELECT COUNT(*) FROM budget_grants WHERE expires_ms < mediagate_now_ms()";
    eventually("the grant expires", async || {
        ledger.count(expired).await > 0
    })
    .await;
    // The other replica, busy in turn, asks for a grant of its own: the expired one
    // is given back first; its own goes back when it is quiet again.
    burst(&b.client(), 8, 10).join_all().await;
    eventually("every grant is given back", async || {
        ledger.grants("demo").await[1] == 0
    })
    .await;
    let reserved = ledger.spent("demo").await;
    assert_eq!(ledger.spend_with_held("demo").await, reserved);
    fill_the_budget(&[&b], reserved / MILLION, &ledger).await;
}

/// A replica stopped gracefully while it holds a grant gives it back before it exits,
/// rather than leaving it to expire: the spend is its tasks' at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_stopped_gives_back_its_grants_before_it_exits() {
    let pg = Postgres::start();
    let ([mut a, _b], ledger, _fake) = busy_key_replicas(&pg, "grant_stop").await;
    let busy = busy_until_it_holds_a_grant(&a, &ledger).await;
    a.signal("TERM").await;
    assert!(a.wait_exit(Duration::from_secs(20)).await.success());
    busy.join_all().await;
    assert_eq!(ledger.grants("demo").await[1], 0, "a grant left to expire");
    let reserved = ledger.spent("demo").await;
    assert!(reserved > 0);
    assert_eq!(ledger.spend_with_held("demo").await, reserved);
}

/// Eight clients submitting on `replica` until it holds a grant of the demo key's
/// budget; they go on until it stops answering.
async fn busy_until_it_holds_a_grant(replica: &Proc, ledger: &Db) -> JoinSet<()> {
    let busy = burst(&replica.client(), 8, usize::MAX);
    eventually("the busy replica holds a grant", async || {
        ledger.grants("demo").await[1] > 0
    })
    .await;
    busy
}

/// The rest of the demo key's budget from `taken` units, one submit at a time on
/// `replicas` in turn: every unit is taken, and the next submit is refused with
/// nothing remaining.
async fn fill_the_budget(replicas: &[&Proc], taken: i64, ledger: &Db) {
    for n in taken..BUSY_BUDGET {
        let replica = replicas[n as usize % replicas.len()];
        let r = replica
            .client()
            .post_json(MODEL_CENTER, DEMO, &body(5))
            .await;
        assert_eq!(r.status, 200, "submit {n}: {}", r.text());
    }
    let asked = unix_now();
    let r = replicas[0]
        .client()
        .post_json(MODEL_CENTER, DEMO, &body(5))
        .await;
    assert_budget_refusal(&r, asked, "per_day", "0 USD", next_midnight(asked));
    assert_eq!(ledger.spent("demo").await, BUSY_BUDGET * MILLION);
}

/// `clients` submitting `each` times in a row as the demo key, until the gateway
/// stops answering; each admitted or refused by the budget.
fn burst(http: &Http, clients: usize, each: usize) -> JoinSet<()> {
    let mut set = JoinSet::new();
    for _ in 0..clients {
        let http = http.clone();
        set.spawn(async move {
            for _ in 0..each {
                let Ok(r) = http.try_post_json(MODEL_CENTER, DEMO, &body(5)).await else {
                    break;
                };
                if r.status != 200 {
                    assert_error(&r, 429, "budget_exceeded", None);
                }
            }
        });
    }
    set
}

/// Two keys at their budgets' edges, each submitting to both replicas at once: the
/// replicas' batches of admissions hold both owners' locks, and never deadlock; each
/// key gets exactly what its budget holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_keys_at_their_budgets_edges_on_two_replicas_sharing_postgres() {
    let pg = Postgres::start();
    let url = pg.database("edges");
    let fake = busy_provider().await;
    let routes = edge_routes(&fake).demo2_key("budget = { per_day = 4.5 }");
    let replicas = two_replicas(routes, &url).await;
    let mut clients = JoinSet::new();
    for n in 0..40 {
        let http = replicas[n % 2].client();
        let key = if n / 2 % 2 == 0 { DEMO } else { DEMO2 };
        clients.spawn(async move { (key, http.post_json(MODEL_CENTER, key, &body(5)).await) });
    }
    let mut taken = std::collections::HashMap::new();
    while let Some(joined) = clients.join_next().await {
        let (key, r) = joined.unwrap();
        if r.status == 200 {
            *taken.entry(key).or_insert(0) += 1;
        } else {
            assert_error(&r, 429, "budget_exceeded", None);
        }
    }
    assert_eq!((taken[DEMO], taken[DEMO2]), (7, 4));
    assert_eq!(submits_seen(&fake), 11);
    let ledger = Db::postgres(&url).await;
    assert_eq!(ledger.spent("demo").await, 7 * MILLION);
    assert_eq!(ledger.spent("demo-2").await, 4 * MILLION);
}

/// Where a gateway keeps its ledger in a test run on either engine.
enum Engine {
    Sqlite,
    Postgres(Postgres),
}

impl Engine {
    /// A gateway on `routes` with its ledger on this engine; the ledger, to read.
    async fn start(&self, routes: Routes) -> (Gateway, Db) {
        match self {
            Self::Sqlite => {
                let gw = Gateway::start(routes).await;
                let ledger = Db::sqlite(gw.dir());
                (gw, ledger)
            }
            Self::Postgres(pg) => {
                let url = pg.database("money");
                let gw = Gateway::start(routes.top(&format!("[ledger]\nurl = {url:?}"))).await;
                (gw, Db::postgres(&url).await)
            }
        }
    }
}

/// With room for two tasks a day: a failed task and a cancelled one each give their
/// reservation back, once, however often their end is seen.
async fn failed_and_cancelled_tasks_give_their_reservation_back_once(engine: Engine) {
    let fake = Fake::start().await;
    let routes = Routes::new()
        .server("metrics_listen = \"127.0.0.1:0\"")
        .provider(cancelable_provider(&fake))
        .family(priced_family(&["m1"], FLAT))
        .demo_key("budget = { per_day = 2.0 }");
    let (gw, ledger) = engine.start(routes).await;
    let http = gw.client();
    let failing = accepted(&http, &fake, "t1", &body(5)).await;
    let cancelled = accepted(&http, &fake, "t2", &body(5)).await;
    let asked = unix_now();
    let r = submit_as(&http, &fake, DEMO, "t3", &body(5)).await;
    assert_budget_refusal(&r, asked, "per_day", "0 USD", next_midnight(asked));

    fake.on(
        "GET /tasks/t1",
        Answer::json(200, json!({"status": "failed", "reason": "refused"})),
    );
    // Seen failed three times: given back once.
    for _ in 0..3 {
        let task = http.query(MODEL_CENTER, DEMO, &failing).await;
        assert_eq!(task["status"], "failed", "{task}");
    }
    assert_eq!(ledger.task("demo", "t1").await.settled, Some(0));
    assert_eq!(ledger.spent("demo").await, MILLION);
    // Room for one task again, not two.
    accepted(&http, &fake, "t3", &body(5)).await;
    let asked = unix_now();
    let r = submit_as(&http, &fake, DEMO, "t4", &body(5)).await;
    assert_budget_refusal(&r, asked, "per_day", "0 USD", next_midnight(asked));

    // Deleted twice: cancelled at the provider once, given back once.
    fake.on("POST /tasks/t2/cancel", Answer::json(200, json!({})));
    for _ in 0..2 {
        let r = delete(&http, &cancelled).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let task = http.query(MODEL_CENTER, DEMO, &cancelled).await;
    assert_eq!(task["error"]["code"], "canceled", "{task}");
    assert_eq!(ledger.task("demo", "t2").await.settled, Some(0));
    assert_eq!(ledger.spent("demo").await, MILLION);
    accepted(&http, &fake, "t4", &body(5)).await;
    let asked = unix_now();
    let r = submit_as(&http, &fake, DEMO, "t5", &body(5)).await;
    assert_budget_refusal(&r, asked, "per_day", "0 USD", next_midnight(asked));

    // Two ended at 0, two reserved: the spend is their sum, to the millionth.
    let costs: Vec<(Option<i64>, Option<i64>)> = ledger
        .costs("demo")
        .await
        .iter()
        .map(|c| (c.estimate, c.settled))
        .collect();
    let reserved = (Some(MILLION), None);
    let given_back = (Some(MILLION), Some(0));
    assert_eq!(costs, [given_back, given_back, reserved, reserved]);
    assert_eq!(ledger.spent("demo").await, 2 * MILLION);
    let metrics = gw.admin().metrics().await;
    let demo = ["key=\"demo\"", "model=\"m1\""];
    let sum = |name: &str| metrics.sum(&[&[name][..], &demo[..]].concat());
    assert_eq!(sum("mediagate_spend_reserved"), 4.0);
    assert_eq!(sum("mediagate_spend_released"), 2.0);
    assert_eq!(sum("mediagate_spend_settled"), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_and_cancelled_tasks_give_their_reservation_back_once_on_sqlite() {
    failed_and_cancelled_tasks_give_their_reservation_back_once(Engine::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_and_cancelled_tasks_give_their_reservation_back_once_on_postgres() {
    failed_and_cancelled_tasks_give_their_reservation_back_once(
        Engine::Postgres(Postgres::start()),
    )
    .await;
}

/// A submit the provider refuses created nothing: its reservation is given back at
/// once (the room fits the next submit), and the metrics say nothing stays reserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_the_provider_refuses_gives_its_reservation_back() {
    let fake = Fake::start().await;
    let routes = Routes::new()
        .server("metrics_listen = \"127.0.0.1:0\"")
        .provider(provider(&fake, ""))
        .family(priced_family(&["m1"], FLAT))
        .demo_key("budget = { per_day = 1.0 }");
    let gw = Gateway::start(routes).await;
    let ledger = Db::sqlite(gw.dir());
    let http = gw.client();
    let bad = json!({"error": {"message": "prompt not allowed"}});
    fake.on(SUBMIT, Answer::json(400, bad));
    let r = http.post_json(MODEL_CENTER, DEMO, &body(5)).await;
    assert!(r.status.is_client_error(), "{} {}", r.status, r.text());
    assert_ne!(r.status, 429, "{}", r.text());
    let refused = ledger.costs("demo").await;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(
        (refused[0].state.as_str(), refused[0].settled),
        ("refused", Some(0))
    );
    assert_eq!(ledger.spent("demo").await, 0);
    accepted(&http, &fake, "t1", &body(5)).await;
    assert_eq!(ledger.spent("demo").await, MILLION);

    let metrics = gw.admin().metrics().await;
    let sum = |name: &str| metrics.sum(&[name, "key=\"demo\""]);
    assert_eq!(sum("mediagate_spend_reserved"), 2.0);
    // Still reserved (reserved - released): the accepted task's 1.00 only.
    assert_eq!(sum("mediagate_spend_released"), 1.0);
    assert_eq!(sum("mediagate_spend_settled"), 0.0);
}

/// A submit whose outcome is unknown (the provider hung up) may exist upstream: it
/// stays reserved, and the next submit that needs its room is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_of_unknown_outcome_stays_reserved() {
    let fake = Fake::start().await;
    let routes = Routes::new()
        .provider(provider(&fake, ""))
        .family(priced_family(&["m1"], FLAT))
        .demo_key("budget = { per_day = 1.5 }");
    let gw = Gateway::start(routes).await;
    let ledger = Db::sqlite(gw.dir());
    let http = gw.client();
    fake.on(SUBMIT, Answer::hang_up());
    let r = http.post_json(MODEL_CENTER, DEMO, &body(5)).await;
    assert_error(&r, 502, "upstream_error", None);
    let unknown = ledger.costs("demo").await;
    assert_eq!(
        (unknown[0].state.as_str(), unknown[0].settled),
        ("unknown_outcome", None)
    );
    assert_eq!(ledger.spent("demo").await, MILLION);
    let asked = unix_now();
    let r = submit_as(&http, &fake, DEMO, "t1", &body(5)).await;
    assert_budget_refusal(&r, asked, "per_day", "0.5 USD", next_midnight(asked));
}

/// Two replicas sharing PostgreSQL, both following tasks every 100 ms: the
/// provider's final answer reaches the tracker, a client's query on one replica and
/// another's on the second at once. The task is settled once, at the delivered
/// seconds: in the ledger, and in the replicas' metrics summed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_seen_at_once_by_the_tracker_and_two_replicas_settles_once() {
    let pg = Postgres::start();
    let url = pg.database("once");
    let fake = Fake::start().await;
    let routes = Routes::new()
        .server("metrics_listen = \"127.0.0.1:0\"")
        .provider(provider(&fake, "poll_interval_ms = 100"))
        .family(priced_family(&["m1"], BY_SECONDS))
        .top(&format!("[ledger]\nurl = {url:?}"))
        .render();
    let dir = || ConfigDir::new(&routes).with("task-secret", SHARED_SECRET);
    let (a, b) = (
        Proc::start_in(dir(), &[], &[]).await,
        Proc::start_in(dir(), &[], &[]).await,
    );
    let ledger = Db::postgres(&url).await;
    // Every status request waits for the test: the final answer goes to all at once.
    fake.on(SUBMIT, Answer::json(200, json!({"id": "t1"})));
    let held = fake.hold("GET /tasks/t1", done(7));
    let id = a.client().submit_id(MODEL_CENTER, DEMO, &body(4)).await;
    let mut queries = JoinSet::new();
    for http in [a.client(), b.client()] {
        let id = id.clone();
        queries.spawn(async move { http.query(MODEL_CENTER, DEMO, &id).await });
    }
    // One request per replica at least (a replica's tracker and query share one).
    held.arrived(2).await;
    let pool = match &ledger {
        Db::Postgres(pool) => pool.clone(),
        Db::Sqlite(_) => unreachable!(),
    };
    eventually("a tracker leased the task", async || {
        sqlx::query_scalar::<_, Option<String>>("SELECT lease_owner FROM tasks")
            .fetch_one(&pool)
            .await
            .unwrap()
            .is_some()
    })
    .await;
    assert_eq!(ledger.spent("demo").await, 400_000, "4 s reserved");
    held.release();
    while let Some(task) = queries.join_next().await {
        assert_eq!(task.unwrap()["status"], "completed");
    }

    let settled = ledger.task("demo", "t1").await;
    assert_eq!(
        (settled.estimate, settled.settled),
        (Some(400_000), Some(700_000))
    );
    assert_eq!(settled.state, "completed");
    assert_eq!(ledger.spent("demo").await, 700_000, "7 s charged, once");
    let admins = [a.admin_addr.unwrap(), b.admin_addr.unwrap()].map(Http::new);
    let total = async |name: &str| {
        let mut sum = 0.0;
        for admin in &admins {
            sum += admin.metrics().await.sum(&[name, "key=\"demo\""]);
        }
        sum
    };
    eventually("the settlement is counted", async || {
        total("mediagate_spend_settled").await >= 0.7
    })
    .await;
    // Seen again on both: nothing more is settled.
    for http in [a.client(), b.client()] {
        assert_eq!(
            http.query(MODEL_CENTER, DEMO, &id).await["status"],
            "completed"
        );
    }
    assert_eq!(total("mediagate_spend_settled").await, 0.7);
    assert_eq!(total("mediagate_spend_released").await, 0.4);
    assert_eq!(total("mediagate_spend_reserved").await, 0.4);
    assert_eq!(ledger.spent("demo").await, 700_000);
}

/// The provider delivered 10 s where 4 were asked: 1.00 is charged, not 0.40. A
/// model of the family with its own price (no `settle`) is charged its estimate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlement_charges_the_seconds_the_provider_reports() {
    let fake = Fake::start().await;
    let routes = Routes::new().provider(provider(&fake, "")).family(
        priced_family(&["m1", "m2"], BY_SECONDS)
            + "[families.f.per_model.\"m2\"]\nprice = { estimate = '0.25' }\n",
    );
    let gw = Gateway::start(routes).await;
    let ledger = Db::sqlite(gw.dir());
    let http = gw.client();
    let id = accepted(&http, &fake, "t1", &body(4)).await;
    assert_eq!(ledger.spent("demo").await, 400_000);
    let other = json!({"model": "m2", "prompt": "a fox", "duration": 4});
    let flat = accepted(&http, &fake, "t2", &other).await;
    assert_eq!(ledger.spent("demo").await, 650_000);

    fake.on("GET /tasks/t1", done(10));
    fake.on("GET /tasks/t2", done(10));
    for id in [&id, &flat] {
        assert_eq!(
            http.query(MODEL_CENTER, DEMO, id).await["status"],
            "completed"
        );
    }
    let by_seconds = ledger.task("demo", "t1").await;
    assert_eq!(
        (by_seconds.estimate, by_seconds.settled),
        (Some(400_000), Some(MILLION))
    );
    let fixed = ledger.task("demo", "t2").await;
    assert_eq!(
        (fixed.estimate, fixed.settled),
        (Some(250_000), Some(250_000))
    );
    assert_eq!(ledger.spent("demo").await, 1_250_000);
}

/// `kill -9` after the reservation, before the provider finished: the restarted
/// gateway settles the task once, at what was delivered, in place of the reservation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_reserved_before_a_kill_9_is_settled_once_after_the_restart() {
    let fake = Fake::start().await;
    let routes = Routes::new()
        .server("metrics_listen = \"127.0.0.1:0\"")
        .provider(provider(&fake, "poll_interval_ms = 100"))
        .family(priced_family(&["m1"], BY_SECONDS))
        .demo_key("budget = { per_day = 5.0 }");
    let mut gw = Proc::start(routes).await;
    let ledger = Db::sqlite(gw.dir());
    let id = accepted(&gw.client(), &fake, "t1", &body(4)).await;
    assert_eq!(
        gw.client().query(MODEL_CENTER, DEMO, &id).await["status"],
        "processing"
    );
    eventually("the reservation is in the file", async || {
        ledger.spend("demo").await == 400_000
    })
    .await;
    // The provider finishes while the gateway asks: the answer never reaches it.
    let held = fake.hold("GET /tasks/t1", done(10));
    held.arrived(1).await;
    gw.restart().await;
    let reserved = ledger.task("demo", "t1").await;
    assert_eq!(
        (reserved.state.as_str(), reserved.settled),
        ("submitted", None)
    );
    assert_eq!(ledger.spent("demo").await, 400_000, "still reserved");
    held.release();

    let http = gw.client();
    assert_eq!(
        http.query(MODEL_CENTER, DEMO, &id).await["status"],
        "completed"
    );
    // Seen again: settled once all the same.
    assert_eq!(
        http.query(MODEL_CENTER, DEMO, &id).await["status"],
        "completed"
    );
    let settled = ledger.task("demo", "t1").await;
    assert_eq!(
        (settled.state.as_str(), settled.settled),
        ("completed", Some(MILLION))
    );
    assert_eq!(ledger.spent("demo").await, MILLION);
    let metrics = Http::new(gw.admin_addr.unwrap()).metrics().await;
    assert_eq!(
        metrics.sum(&["mediagate_spend_settled", "key=\"demo\""]),
        1.0
    );
    assert_eq!(
        metrics.sum(&["mediagate_spend_released", "key=\"demo\""]),
        0.4
    );
}

/// `per_month` in its own currency: the refusal names the month's remainder and the
/// first of the next month.
#[tokio::test]
async fn a_months_budget_refusal_names_what_remains_and_the_first_of_next_month() {
    let fake = Fake::start().await;
    let routes = Routes::new()
        .top("[billing]\ncurrency = \"credits\"")
        .provider(provider(&fake, ""))
        .family(priced_family(&["m1"], FLAT))
        .demo_key("budget = { per_day = 10.0, per_month = 2.5 }");
    let gw = Gateway::start(routes).await;
    let http = gw.client();
    accepted(&http, &fake, "t1", &body(5)).await;
    accepted(&http, &fake, "t2", &body(5)).await;
    let asked = unix_now();
    let r = submit_as(&http, &fake, DEMO, "t3", &body(5)).await;
    assert_budget_refusal(&r, asked, "per_month", "0.5 credits", next_month(asked));
    // Another key has a budget of its own (here: none).
    let r = submit_as(&http, &fake, DEMO2, "t3", &body(5)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(Db::sqlite(gw.dir()).spent("demo").await, 2 * MILLION);
}

#[test]
fn next_month_is_the_first_of_the_following_utc_month() {
    // 2024-02-29 12:00 → 2024-03-01; 2025-12-31 23:59:59 → 2026-01-01.
    assert_eq!(next_month(1_709_208_000), 1_709_251_200);
    assert_eq!(next_month(1_767_225_599), 1_767_225_600);
    assert_eq!(next_month(1_767_225_600), 1_769_904_000);
}

/// `mediagate check` refuses a price that does not compile, that fails on the
/// schema's examples or that yields a negative amount for them, and a negative
/// budget, each by its key.
#[test]
fn prices_and_budgets_that_cannot_work_are_refused_by_check() {
    let check_with = |family: String, key: &str| {
        let routes = Routes::new()
            .provider(tasks_provider("one", "http://127.0.0.1:9", ""))
            .family(family)
            .demo_key(key);
        let dir = ConfigDir::new(routes);
        let out = check(dir.path(), &dir.routes_path(), &[]);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (ok, text) = check_with(priced_family(&["m1"], BY_SECONDS), "");
    assert!(ok, "{text}");
    for (price, key, says) in [
        (
            "{ estimate = '.duration *' }",
            "families.f.price.estimate",
            "",
        ),
        (
            "{ estimate = 'error(\"no price\")' }",
            "families.f.price",
            "no price",
        ),
        // A submit may leave `duration` out: the price must still give an amount.
        (
            "{ estimate = '.duration * 0.10' }",
            "families.f.price",
            "on the example {}",
        ),
        (
            "{ estimate = '(.duration // 5) * -0.10' }",
            "families.f.price",
            "not an amount",
        ),
        (
            "{ estimate = '1', settle = '(($answer.seconds // 0) - 5) * 0.1' }",
            "families.f.price",
            "`settle`",
        ),
    ] {
        let (ok, text) = check_with(priced_family(&["m1"], price), "");
        assert!(!ok, "{price} passed: {text}");
        assert!(
            text.lines().any(|l| l.contains(key) && l.contains(says)),
            "{price}: no line naming {key} ({says}) in\n{text}"
        );
    }
    let per_model = priced_family(&["m1", "m2"], FLAT)
        + "[families.f.per_model.\"m2\"]\nprice = { estimate = '-1' }\n";
    let (ok, text) = check_with(per_model, "");
    assert!(!ok, "{text}");
    assert!(
        text.contains("families.f.per_model.\"m2\".price") && text.contains("`m2`"),
        "{text}"
    );
    let (ok, text) = check_with(priced_family(&["m1"], FLAT), "budget = { per_day = -1.0 }");
    assert!(!ok, "{text}");
    assert!(text.contains("keys[0].budget.per_day"), "{text}");
}

/// How a task of the property test ends.
#[derive(Debug, Clone, Copy)]
enum End {
    /// At the amount given (its estimate when none), seen `n` times.
    Completed(Option<i64>),
    /// Failed, cancelled or given up: the same end for the ledger.
    Failed,
    /// The provider refused the submit.
    Refused,
    /// The submit's outcome is unknown: reserved until the operator decides.
    Unknown,
    /// Unknown, then resolved by the operator (completed at the amount, or failed).
    Resolved(bool, Option<i64>),
    /// Still running.
    Running,
}

#[derive(Debug, Clone)]
struct RandomTask {
    owner: usize,
    /// Millionths; `None`: its model has no price.
    estimate: Option<i64>,
    end: End,
    /// How often its end is reported (a second report must change nothing).
    reports: usize,
    /// How many later submits come before its end.
    ends_after: usize,
}

fn random_task() -> impl proptest::strategy::Strategy<Value = RandomTask> {
    use proptest::prelude::*;
    let amount = || prop::option::weighted(0.7, 0..=4_999_999i64);
    let end = prop_oneof![
        3 => amount().prop_map(End::Completed),
        2 => Just(End::Failed),
        1 => Just(End::Refused),
        1 => Just(End::Unknown),
        1 => (any::<bool>(), amount()).prop_map(|(done, a)| End::Resolved(done, a)),
        1 => Just(End::Running),
    ];
    (
        0..3usize,
        prop::option::weighted(0.9, 0..=2_999_999i64),
        end,
        1..=3usize,
        0..4usize,
    )
        .prop_map(|(owner, estimate, end, reports, ends_after)| RandomTask {
            owner,
            estimate,
            end,
            reports,
            ends_after,
        })
}

/// What the test expects of one admitted task: its estimate, its settled cost.
type Expected = (Option<i64>, Option<i64>);

/// Drive `tasks` through `ledger` (owners `{prefix}o0`…, the first with `budget`),
/// checking each admission against the budget as the test counts it; what each
/// owner's tasks should hold.
async fn drive(
    ledger: &mediagate::tasks::ledger::Ledger,
    prefix: &str,
    tasks: &[RandomTask],
    budget: mediagate::money::Budget,
) -> Result<Vec<Vec<Expected>>, proptest::test_runner::TestCaseError> {
    use mediagate::config::Endpoint;
    use mediagate::money::{Micros, Period};
    use mediagate::tasks::ledger::{Admission, Answer, Created, NewTask};
    use mediagate::tasks::{MediaKind, TaskError, TaskState, TaskStatus};
    use proptest::prelude::*;

    let owners: Vec<String> = (0..3).map(|n| format!("{prefix}o{n}")).collect();
    let mut spent = [0i64; 3];
    let mut expected: Vec<Vec<Expected>> = vec![Vec::new(); 3];
    // Admissions and ends interleaved: task i is admitted at 2i, ended at 2(i+k)+1.
    let mut events: Vec<(usize, bool, usize)> = Vec::new();
    for (i, t) in tasks.iter().enumerate() {
        events.push((2 * i, true, i));
        events.push((2 * (i + t.ends_after) + 1, false, i));
    }
    events.sort();
    let mut rows: Vec<Option<(i64, usize)>> = vec![None; tasks.len()];
    let answer = Answer {
        status: 200,
        body: "{}".into(),
    };
    let state = |status, error: bool| TaskState {
        status,
        progress: None,
        urls: vec![],
        error: error.then(|| TaskError {
            code: "failed".into(),
            message: "failed".into(),
        }),
    };
    for (_, admit, i) in events {
        let t = &tasks[i];
        let (owner, cost) = (t.owner, t.estimate.unwrap_or(0));
        if admit {
            let new = NewTask {
                owner: &owners[owner],
                endpoint: Endpoint::ModelCenter,
                model: "m",
                kind: MediaKind::Video,
                fingerprint: format!("fp{i}"),
                idempotency_key: None,
                video_seconds: 5,
                quota: None,
                provider: Some("p"),
                callback_url: None,
                keep_days: None,
                cost_estimate: t.estimate.map(Micros),
                budget: (owner == 0).then_some(budget),
                price_params: None,
            };
            let over = |limit: Option<Micros>| limit.filter(|l| spent[owner] + cost > l.0);
            let refusal = match (owner, over(budget.per_day), over(budget.per_month)) {
                // In neither: the month's, whose reset lets it in.
                (0, _, Some(month)) => Some((Period::Month, month.0 - spent[0])),
                (0, Some(day), None) => Some((Period::Day, day.0 - spent[0])),
                _ => None,
            };
            match (ledger.admit(&new).await.unwrap(), refusal) {
                (Admission::Fresh(row), None) => {
                    rows[i] = Some((row, expected[owner].len()));
                    expected[owner].push((t.estimate, None));
                    spent[owner] += cost;
                }
                (
                    Admission::BudgetExceeded {
                        period, remaining, ..
                    },
                    Some((want, left)),
                ) => {
                    prop_assert_eq!(period, want);
                    prop_assert_eq!(remaining, Micros(left.max(0)));
                }
                (got, want) => prop_assert!(false, "task {i}: {got:?}, expected {want:?}"),
            }
            continue;
        }
        let Some((row, n)) = rows[i] else { continue };
        let upstream = format!("{prefix}u{i}");
        let created = Created {
            provider: "p",
            upstream_id: &upstream,
            task_id: &format!("{prefix}task{i}"),
            status: TaskStatus::Queued,
            answer: &answer,
            first_poll: std::time::Duration::from_secs(3600),
        };
        // What the task costs in the end: `None` while it stays reserved.
        let settled = match t.end {
            End::Running => {
                ledger.created(row, &created).await.unwrap();
                None
            }
            End::Refused => {
                ledger.refused(row, Some(&answer)).await.unwrap();
                Some(0)
            }
            End::Completed(amount) | End::Resolved(true, amount) | End::Resolved(false, amount) => {
                let unknown = !matches!(t.end, End::Completed(_));
                let completed = matches!(t.end, End::Completed(_) | End::Resolved(true, _));
                match unknown {
                    true => ledger.outcome_unknown(row, "p").await.unwrap(),
                    false => ledger.created(row, &created).await.unwrap(),
                }
                for report in 0..t.reports {
                    // A later report, with another amount, is ignored.
                    let amount = match report {
                        0 => amount.map(Micros),
                        r => Some(Micros(amount.unwrap_or(0) + r as i64)),
                    };
                    let first = match unknown {
                        true => ledger.resolve(row, completed, amount).await.unwrap(),
                        false => {
                            let status = state(TaskStatus::Completed, false);
                            ledger
                                .finished("p", &upstream, &status, amount)
                                .await
                                .unwrap()
                        }
                    };
                    prop_assert_eq!(first, report == 0, "task {}: report {}", i, report);
                }
                Some(if completed { amount.unwrap_or(cost) } else { 0 })
            }
            End::Failed => {
                ledger.created(row, &created).await.unwrap();
                for report in 0..t.reports {
                    let failed = state(TaskStatus::Failed, true);
                    let first = ledger
                        .finished("p", &upstream, &failed, Some(Micros::ZERO))
                        .await
                        .unwrap();
                    prop_assert_eq!(first, report == 0, "task {}: report {}", i, report);
                }
                Some(0)
            }
            End::Unknown => {
                ledger.outcome_unknown(row, "p").await.unwrap();
                None
            }
        };
        if let (Some(estimate), Some(settled)) = (t.estimate, settled) {
            expected[owner][n].1 = Some(settled);
            spent[owner] += settled - estimate;
        }
    }
    Ok(expected)
}

impl Db {
    /// `(owner, day) → micros` of the `spend` rows of owners starting with `prefix`
    /// (on PostgreSQL, summed over slots, less what budget grants hold unused), and
    /// the same summed from their priced tasks (settled, else reserved).
    async fn by_day(&self, prefix: &str) -> [Vec<(String, i64, i64)>; 2] {
        const SPEND: &str = "SELECT owner, day, CAST(SUM(micros) AS BIGINT) FROM spend WHERE owner LIKE $1 GROUP BY owner, day ORDER BY owner, day";
        const TASKS: &str = "SELECT owner, created_ms / 86400000, CAST(SUM(COALESCE(cost_settled, cost_estimate)) AS BIGINT) FROM tasks WHERE owner LIKE $1 AND cost_estimate IS NOT NULL GROUP BY owner, created_ms / 86400000 ORDER BY owner, 2";
        let like = format!("{prefix}%");
        let mut out = [Vec::new(), Vec::new()];
        for (sql, rows) in [SPEND, TASKS].into_iter().zip(out.iter_mut()) {
            *rows = match self {
                Self::Sqlite(path) => rusqlite::Connection::open(path)
                    .and_then(|db| {
                        let mut stmt = db.prepare(&sql.replace('$', "?"))?;
                        stmt.query_map([&like], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                            .collect()
                    })
                    .expect("read the ledger"),
                Self::Postgres(pool) => sqlx::query_as(sqlx::AssertSqlSafe(sql.replace(
                    "CAST(SUM(micros) AS BIGINT)",
                    &format!(
                        "CAST(SUM(micros) AS BIGINT) - {}",
                        held_ahead("g.owner = spend.owner AND g.day = spend.day")
                    ),
                )))
                .bind(&like)
                .fetch_all(pool)
                .await
                .expect("read the ledger"),
            };
        }
        out
    }
}

/// Random tasks of three owners (the first with a random budget) through the
/// ledger's own API: every admission agrees with the budget as counted here, every
/// task holds the cost its end gives it, and the `spend` rows per owner and day are
/// the sum of their tasks' costs, to the millionth.
fn spend_equals_the_tasks_costs(postgres: bool) {
    use mediagate::money::{Budget, Micros};
    use mediagate::tasks::ledger::{Ledger, LedgerUrl};
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let pg = postgres.then(Postgres::start);
    let shared = pg.as_ref().map(|pg| {
        let url = pg.database("property");
        rt.block_on(async {
            let ledger = Ledger::open(&LedgerUrl::Postgres(url.clone()), 4).await;
            (ledger.unwrap().unwrap(), Db::postgres(&url).await)
        })
    });
    let config = Config {
        cases: 16,
        failure_persistence: None,
        ..Config::default()
    };
    let budget = (
        prop::option::of(0..=9_000_000i64),
        prop::option::of(0..=12_000_000i64),
    );
    let strategy = (prop::collection::vec(random_task(), 10..=30), budget);
    let case = std::sync::atomic::AtomicUsize::new(0);
    let outcome = TestRunner::new(config).run(&strategy, |(tasks, (day, month))| {
        // Each case its own owners (on PostgreSQL they share a database).
        let prefix = format!(
            "c{}-",
            case.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let budget = Budget {
            per_day: day.map(Micros),
            per_month: month.map(Micros),
        };
        rt.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let own;
            let (ledger, db) = match &shared {
                Some((ledger, db)) => (ledger, db),
                None => {
                    let url = LedgerUrl::parse("sqlite://ledger.db", dir.path()).unwrap();
                    own = (
                        Ledger::open(&url, 2).await.unwrap().unwrap(),
                        Db::Sqlite(dir.path().join("ledger.db")),
                    );
                    (&own.0, &own.1)
                }
            };
            let expected = drive(ledger, &prefix, &tasks, budget).await?;
            for (n, want) in expected.iter().enumerate() {
                let owner = format!("{prefix}o{n}");
                let got: Vec<Expected> = db
                    .costs(&owner)
                    .await
                    .iter()
                    .map(|c| (c.estimate, c.settled))
                    .collect();
                // Unpriced tasks hold no cost and are not among the priced rows.
                let priced: Vec<Expected> =
                    want.iter().filter(|e| e.0.is_some()).cloned().collect();
                prop_assert_eq!(&got, &priced, "owner {}", owner);
                let total: i64 = priced.iter().map(|(e, s)| s.or(*e).unwrap()).sum();
                prop_assert_eq!(db.spend(&owner).await, total, "owner {}", owner);
            }
            let [spend, tasks] = db.by_day(&prefix).await;
            prop_assert_eq!(spend, tasks);
            Ok(())
        })
    });
    if let Err(e) = outcome {
        panic!("{e}");
    }
}

#[test]
fn ledger_spend_equals_the_tasks_costs_over_random_tasks_on_sqlite() {
    spend_equals_the_tasks_costs(false);
}

#[test]
fn ledger_spend_equals_the_tasks_costs_over_random_tasks_on_postgres() {
    spend_equals_the_tasks_costs(true);
}
