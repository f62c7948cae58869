//! Money as keys and operators see it: a task's `cost` in the answers of a key that
//! shows costs, the usage endpoint with what remains of a budget, the model list's
//! price, `mediagate usage` with spend, and an `unknown_outcome` task that stays
//! reserved until the operator resolves it. (The ledger's arithmetic itself, on both
//! engines and across replicas, is `money.rs`.)

use bytes::Bytes;
use http::Method;
use serde_json::{Value, json};

use crate::support::{
    Answer, DEMO, DEMO2, Fake, Gateway, Http, MODEL_CENTER, Routes, assert_error, family,
    model_center_provider, operator, shipped_routes,
};

/// `GET path` with `key`, as JSON, asserting 200.
async fn get_json(http: &Http, path: &str, key: &str) -> Value {
    let r = http.get(path, key).await;
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    r.json()
}

const DAY: u64 = 86_400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_shows_costs_sees_them_in_its_answers_and_its_usage() {
    // The shipped routes: `zeta-5.0` costs 0.02 an image; demo-2 shows costs and has
    // budgets of 100 a day and 1000 a month; demo shows none.
    let gw = Gateway::start(shipped_routes()).await;
    let http = gw.client();
    let image = json!({"model": "zeta-5.0", "prompt": "a fox"});
    let id = http.submit_id(MODEL_CENTER, DEMO2, &image).await;
    let first = http.query(MODEL_CENTER, DEMO2, &id).await;
    assert_eq!(first["cost"]["currency"], "USD", "{first}");
    assert_eq!(first["cost"]["estimate"], 0.02, "{first}");
    if first["status"] != "completed" {
        assert_eq!(first["cost"]["settled"], Value::Null, "{first}");
    }
    let done = http.wait_done(MODEL_CENTER, DEMO2, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["cost"]["settled"], 0.02, "{done}");
    let listed = get_json(&http, MODEL_CENTER, DEMO2).await;
    assert_eq!(listed["data"][0]["id"], id.as_str());
    assert_eq!(listed["data"][0]["cost"]["settled"], 0.02, "{listed}");

    // A key that does not show costs gets the seed's shape.
    let own = http.submit_id(MODEL_CENTER, DEMO, &image).await;
    let theirs = http.wait_done(MODEL_CENTER, DEMO, &own).await;
    assert!(theirs.get("cost").is_none(), "{theirs}");

    // The usage endpoint: the key's own line, totals, and its budgets' standing.
    let today = crate::support::unix_now() / DAY;
    let usage = get_json(&http, "/v2/usage", DEMO2).await;
    assert_eq!(usage["object"], "usage");
    assert_eq!(usage["key"], "demo-2");
    assert_eq!(usage["currency"], "USD");
    let line = &usage["data"][0];
    assert_eq!(usage["data"].as_array().map(Vec::len), Some(1), "{usage}");
    assert_eq!(line["model"], "zeta-5.0");
    assert_eq!(
        (line["tasks"].as_i64(), line["completed"].as_i64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        (line["spent"].as_f64(), line["reserved"].as_f64()),
        (Some(0.02), Some(0.0))
    );
    assert_eq!(usage["total"]["spent"], 0.02);
    let day = &usage["budget"]["per_day"];
    assert_eq!(
        (day["limit"].as_f64(), day["spent"].as_f64()),
        (Some(100.0), Some(0.02))
    );
    assert_eq!(day["remaining"], 99.98);
    assert_eq!(day["resets_at"].as_u64(), Some((today + 1) * DAY));
    assert_eq!(usage["budget"]["per_month"]["limit"], 1000.0);
    let resets = usage["budget"]["per_month"]["resets_at"].as_u64().unwrap();
    assert!(resets % DAY == 0 && resets > today * DAY && resets <= (today + 31) * DAY);
    // The same on the alpha path: usage is the key's.
    assert_eq!(get_json(&http, "/v1/alpha/usage", DEMO2).await, usage);
    // demo has no budget, and its own task only.
    let theirs = get_json(&http, "/v2/usage", DEMO).await;
    assert_eq!(theirs["budget"], Value::Null);
    assert_eq!(theirs["total"]["tasks"], 1);
    assert_eq!(theirs["total"]["spent"], 0.02);
    // A range that is not one.
    let r = http.get("/v2/usage?from=2026-02-30", DEMO2).await;
    assert_error(&r, 400, "invalid_parameter", Some("from"));
    let r = http.get("/v2/usage?to=99999-01-01", DEMO2).await;
    assert_error(&r, 400, "invalid_parameter", Some("to"));
    // A range that ends before it starts has nothing in it.
    let backwards = get_json(&http, "/v2/usage?from=2026-03-01&to=2026-02-01", DEMO2).await;
    assert_eq!(backwards["data"], json!([]));
    // A day before anything was submitted has nothing.
    let empty = get_json(&http, "/v2/usage?from=2020-01-01&to=2020-01-31", DEMO2).await;
    assert_eq!(empty["data"], json!([]));
    assert_eq!(empty["total"]["tasks"], 0);

    // The operator's view: spend per model, over both keys.
    let by_model = operator(gw.dir(), &["usage", "--by", "model"]);
    let zeta = by_model
        .lines()
        .find(|l| l.starts_with("zeta-5.0\t"))
        .unwrap_or_else(|| panic!("{by_model}"));
    assert_eq!(zeta, "zeta-5.0\t2\t2\t0\t0\t0.04\t0", "{by_model}");
}

/// The row number of the one `unknown_outcome` task, as `mediagate tasks` lists it.
fn unknown_row(gw: &Gateway) -> String {
    let unknown = operator(gw.dir(), &["tasks", "--state", "unknown_outcome"]);
    let line = unknown
        .lines()
        .nth(1)
        .unwrap_or_else(|| panic!("{unknown}"));
    line.split('\t').next().unwrap_or_default().to_string()
}

/// A priced family (1.5 a task) on a provider whose submits time out, the demo key
/// with a budget of 2 a day.
fn timing_out(fake: &Fake) -> Routes {
    let provider = model_center_provider(
        "up",
        &fake.url(),
        "connect_timeout_ms = 100\nsubmit_timeout_ms = 300",
    );
    Routes::new()
        .provider(provider)
        .family(family("test", &["up"], &["m1"]).to_string() + "price = { estimate = '1.5' }\n")
        .demo_key("budget = { per_day = 2.0 }")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_outcome_stays_reserved_until_the_operator_resolves_it() {
    let fake = Fake::start().await;
    let held = fake.hold("POST /v2/model-center/tasks", Answer::queued("late"));
    let gw = Gateway::start(timing_out(&fake)).await;
    let http = gw.client();
    let body = json!({"model": "m1", "prompt": "p"}).to_string();
    let submit = || async {
        let auth = format!("Bearer {DEMO}");
        let headers = [
            ("authorization", auth.as_str()),
            ("content-type", "application/json"),
        ];
        http.send(
            Method::POST,
            MODEL_CENTER,
            &headers,
            Bytes::from(body.clone()),
        )
        .await
    };
    // The provider may have the task: its outcome is unknown, its price reserved.
    assert_error(&submit().await, 504, "upstream_timeout", None);
    let over = submit().await;
    let message = assert_error(&over, 429, "budget_exceeded", None);
    assert!(
        message.contains("per_day") && message.contains("0.5 USD"),
        "{message}"
    );
    assert_eq!(fake.take().len(), 1, "the refused submit reached nobody");
    let usage = get_json(&http, "/v2/usage", DEMO).await;
    assert_eq!(usage["total"]["reserved"], 1.5, "{usage}");

    // The operator finds it failed at the provider: the reservation is given back.
    let row = &unknown_row(&gw);
    let said = operator(gw.dir(), &["tasks", "resolve", row, "--failed"]);
    assert!(said.contains("resolved as failed; settled at 0"), "{said}");
    let usage = get_json(&http, "/v2/usage", DEMO).await;
    assert_eq!(
        (
            usage["total"]["reserved"].as_f64(),
            usage["total"]["spent"].as_f64()
        ),
        (Some(0.0), Some(0.0))
    );
    assert_eq!(usage["budget"]["per_day"]["remaining"], 2.0);

    // Another one the operator finds completed: settled at its estimate.
    assert_error(&submit().await, 504, "upstream_timeout", None);
    let row = &unknown_row(&gw);
    let said = operator(gw.dir(), &["tasks", "resolve", row, "--completed"]);
    assert!(
        said.contains("resolved as completed; settled at 1.5"),
        "{said}"
    );
    let usage = get_json(&http, "/v2/usage", DEMO).await;
    assert_eq!(usage["total"]["spent"], 1.5, "{usage}");
    assert_eq!(usage["budget"]["per_day"]["remaining"], 0.5);
    held.release();
}
