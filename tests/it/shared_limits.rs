//! Per-key limits shared by replicas through a real Redis (`[limits] shared`): one
//! rate for the fleet, one cap on requests in progress (a dead replica's places come
//! back when their leases expire), and each replica alone with its share while Redis
//! is away, shared again once it is back.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{
    Answer, DEMO, DEMO2, Fake, Gateway, Held, Http, MODEL_CENTER, Proc, Redis, Reply, Routes,
    eventually,
};

const UNKNOWN_TASK: &str = "/v2/model-center/tasks/task_unknown";

/// `[limits]` sharing through `redis`, with `extra` lines.
fn shared(redis: &Redis, extra: &str) -> String {
    format!(
        "[limits]\nshared = {:?}\nlocal_share = 0.5\n{extra}\n",
        redis.url()
    )
}

/// Open a few connections to each replica's every serving thread, so that each has
/// its Redis connection before the part under test.
async fn warm_up(clients: &[Http]) {
    for http in clients {
        let asks = (0..8).map(|_| {
            let http = http.clone();
            tokio::spawn(async move { http.get(UNKNOWN_TASK, DEMO2).await.status.as_u16() })
        });
        for ask in asks {
            assert_eq!(ask.await.unwrap(), 404);
        }
    }
}

/// A refusal by the rate: 429, `Retry-After`, the bucket's headers.
fn assert_rate_limited(r: &Reply, burst: u64) {
    assert_eq!(r.status, 429, "{:?}", r.text());
    assert_eq!(r.error_code(), "rate_limited");
    let retry = r.header_u64("retry-after");
    assert!(retry >= 1, "Retry-After {retry}");
    assert_eq!(r.header_u64("x-ratelimit-limit"), burst);
    assert_eq!(r.header_u64("x-ratelimit-remaining"), 0);
}

/// Send `n` requests of `key` at once, alternating between `clients`; the answers.
async fn at_once(clients: &[Http], key: &'static str, n: usize) -> Vec<Reply> {
    let asks: Vec<_> = (0..n)
        .map(|i| {
            let http = clients[i % clients.len()].clone();
            tokio::spawn(async move { http.get(UNKNOWN_TASK, key).await })
        })
        .collect();
    let mut replies = Vec::new();
    for ask in asks {
        replies.push(ask.await.unwrap());
    }
    replies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_hold_one_rate_between_them() {
    let redis = Redis::start().await;
    let routes = Routes::simulated(&["m1"])
        .top(&shared(&redis, "shared_timeout_ms = 2000"))
        .demo_key("limits = { rate_per_second = 10, burst = 10 }");
    let (a, b) = (
        Gateway::start(routes.clone()).await,
        Gateway::start(routes).await,
    );
    let clients = [a.client(), b.client()];
    warm_up(&clients).await;

    let started = Instant::now();
    let replies = at_once(&clients, DEMO, 60).await;
    let took = started.elapsed();
    let admitted: Vec<_> = replies.iter().filter(|r| r.status == 404).collect();
    for r in &admitted {
        assert_eq!(r.header_u64("x-ratelimit-limit"), 10);
    }
    for r in replies.iter().filter(|r| r.status != 404) {
        assert_rate_limited(r, 10);
    }
    // The whole burst, plus what the rate refilled while the 60 were answered.
    let refilled = (took.as_secs_f64() * 10.0) as usize;
    assert!(
        refilled < 9,
        "the 60 requests took {took:?}: too long to tell one shared burst from two"
    );
    assert!(
        (10..=11 + refilled).contains(&admitted.len()),
        "{} of 60 admitted in {took:?} (10 per replica would be 20)",
        admitted.len()
    );
    assert!(!redis.keys("mediagate:limits:demo:rate").is_empty());
    a.assert_no_panic();
    b.assert_no_panic();
}

/// `GET` an unknown task: 404 when admitted, 503 when the key has no place left.
async fn probe(http: &Http) -> http::StatusCode {
    let r = http.get(UNKNOWN_TASK, DEMO).await;
    if r.status == 503 {
        assert_eq!(r.error_code(), "too_many_concurrent_requests");
        assert!(r.header("retry-after").is_some());
    }
    r.status
}

/// Submits that wait at the fake upstream (their answers are held): each holds one
/// of the key's places while it waits.
fn submits(http: &Http, n: usize) -> Vec<tokio::task::JoinHandle<Result<Reply, String>>> {
    (0..n)
        .map(|i| {
            let http = http.clone();
            let body = json!({"model": "m1", "prompt": format!("held {i}")}).to_string();
            tokio::spawn(async move {
                let auth = format!("Bearer {DEMO}");
                let headers = [
                    ("authorization", auth.as_str()),
                    ("content-type", "application/json"),
                ];
                http.try_send(http::Method::POST, MODEL_CENTER, &headers, body)
                    .await
            })
        })
        .collect()
}

#[tokio::test]
async fn requests_in_progress_are_capped_for_the_fleet_and_a_dead_replica_gives_its_places_back() {
    let redis = Redis::start().await;
    let fake = Fake::start().await;
    let held = fake.hold("POST /v2/model-center/tasks", Answer::queued("up-1"));
    let routes = Routes::upstream(&fake.url(), "")
        .top(&shared(
            &redis,
            "shared_timeout_ms = 2000\nshared_lease_ms = 3000",
        ))
        .demo_key("limits = { rate_per_second = 0, max_concurrent_requests = 4 }")
        .render();
    let (mut a, b) = (Proc::start(&routes).await, Proc::start(&routes).await);
    let (on_a, on_b) = (a.client(), b.client());
    warm_up(&[on_a.clone(), on_b.clone()]).await;

    let mut waiting = submits(&on_a, 2);
    waiting.extend(submits(&on_b, 2));
    held.arrived(4).await;
    // A fifth request, on either replica, finds no place.
    assert_eq!(probe(&on_a).await, 503);
    assert_eq!(probe(&on_b).await, 503);

    // A dies holding two places: they stay taken until their leases expire (3 s)…
    a.kill();
    assert_eq!(
        probe(&on_b).await,
        503,
        "the dead replica's places are held"
    );
    // …then come back, and only those: B takes two more, and the next is refused.
    eventually("the dead replica's places come back", async || {
        probe(&on_b).await == 404
    })
    .await;
    let more = vec![
        take_place(&on_b, &held).await,
        take_place(&on_b, &held).await,
    ];
    assert_eq!(held.count(), 6);
    assert_eq!(probe(&on_b).await, 503);

    held.release();
    for submit in waiting.into_iter().skip(2).chain(more) {
        assert_eq!(submit.await.unwrap().expect("answered").status, 200);
    }
    // Every place is given back when its request ends (told to Redis just after):
    // four requests at once all find one.
    eventually("every place is given back", async || {
        let free = (0..4).map(|_| {
            let on_b = on_b.clone();
            tokio::spawn(async move { probe(&on_b).await })
        });
        let mut all = true;
        for status in free {
            all &= status.await.unwrap() == 404;
        }
        all
    })
    .await;
}

/// A held submit on `http` that found a place. A place given back is told to Redis
/// just after its request ends, so a submit refused for want of one is sent again.
async fn take_place(http: &Http, held: &Held) -> tokio::task::JoinHandle<Result<Reply, String>> {
    let (taken, deadline) = (held.count(), Instant::now() + Duration::from_secs(10));
    loop {
        let submit = submits(http, 1).pop().expect("one submit");
        while held.count() == taken && !submit.is_finished() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if held.count() > taken {
            return submit;
        }
        let refused = submit.await.unwrap().expect("answered");
        assert_eq!(refused.status, 503, "{:?}", refused.text());
        assert!(Instant::now() < deadline, "no place came free");
    }
}

#[tokio::test]
async fn redis_away_each_replica_applies_its_share_and_shares_again_once_back() {
    let mut redis = Redis::start().await;
    // A slow rate, so that nothing refills while the test runs: counts are exact.
    let routes = Routes::simulated(&["m1"])
        .server("metrics_listen = \"127.0.0.1:0\"")
        .top(&shared(&redis, "shared_timeout_ms = 500"))
        .demo_key("limits = { rate_per_second = 0.001, burst = 10 }")
        .render();
    let (a, b) = (Proc::start(&routes).await, Proc::start(&routes).await);
    let clients = [a.client(), b.client()];
    warm_up(&clients).await;

    // Shared: 8 of the 10 taken through A.
    let replies = at_once(&clients[..1], DEMO, 8).await;
    assert!(replies.iter().all(|r| r.status == 404));

    // Redis goes away under load: nothing fails for it, and each replica alone
    // admits its half of the burst (5), whatever the fleet took before.
    let load = tokio::spawn({
        let clients = clients.clone();
        async move { at_once(&clients, DEMO2, 200).await }
    });
    redis.kill();
    let replies = at_once(&clients, DEMO, 40).await;
    let admitted = replies.iter().filter(|r| r.status == 404).count();
    for r in replies.iter().filter(|r| r.status != 404) {
        assert_rate_limited(r, 5);
    }
    assert_eq!(admitted, 10, "5 on each replica, by its local share");
    for r in load.await.unwrap() {
        assert_eq!(r.status, 404, "{:?}", r.text());
    }
    for gw in [&a, &b] {
        let m = Http::new(gw.admin_addr.unwrap()).metrics().await;
        assert_eq!(m.sum(&["mediagate_shared_limits_available"]), 0.0);
        assert_eq!(m.sum(&["mediagate_shared_limits_outages_total"]), 1.0);
        assert!(m.sum(&["mediagate_shared_limits_decided_locally_total"]) >= 20.0);
        // Said once, however many requests were decided alone.
        assert_eq!(gw.count_in_log("Redis does not answer"), 1, "{}", gw.log());
        assert!(!gw.log().contains("password"));
    }

    // Redis is back (empty): each replica finds it by itself, without a restart.
    redis.launch().await;
    for gw in [&a, &b] {
        let admin = Http::new(gw.admin_addr.unwrap());
        let http = gw.client();
        eventually("the replica shares its limits again", async || {
            http.get(UNKNOWN_TASK, DEMO2).await;
            admin
                .metrics()
                .await
                .sum(&["mediagate_shared_limits_available"])
                == 1.0
        })
        .await;
        gw.wait_for_log("Redis answers again", 1).await;
    }
    // Shared again: 10 for the fleet. B alone has spent its 5 and would refuse all.
    let replies = at_once(&clients[..1], DEMO, 8).await;
    assert!(replies.iter().all(|r| r.status == 404));
    let replies = at_once(&clients[1..], DEMO, 4).await;
    let admitted = replies.iter().filter(|r| r.status == 404).count();
    assert_eq!(admitted, 2, "the fleet's last 2 of 10");
    for r in replies.iter().filter(|r| r.status != 404) {
        assert_rate_limited(r, 10);
    }
}

#[tokio::test]
async fn shared_settings_that_cannot_work_are_refused_without_quoting_a_password() {
    let problems = |limits: &str| {
        let dir = crate::support::ConfigDir::new(Routes::simulated(&["m1"]).top(limits));
        async move {
            match mediagate::start(&dir.routes_path()).await {
                Ok(_) => String::new(),
                Err(e) => e.to_string(),
            }
        }
    };
    let e = problems("[limits]\nshared = \"redis://:hunter2@127.0.0.1:6379/0\"").await;
    assert!(
        e.contains("limits.shared") && e.contains("shared_password_env"),
        "{e}"
    );
    assert!(!e.contains("hunter2"), "{e}");
    let e = problems("[limits]\nshared = \"127.0.0.1:6379\"").await;
    assert!(e.contains("limits.shared"), "{e}");
    let e = problems(
        "[limits]\nshared = \"redis://127.0.0.1:6379/0\"\nshared_password_env = \"MEDIAGATE_TEST_NEVER_SET\"",
    )
    .await;
    assert!(e.contains("limits.shared_password_env"), "{e}");
    let e = problems("[limits]\nshared_password_file = \"redis-password\"").await;
    assert!(e.contains("limits.shared"), "{e}");
    let e = problems(
        "[limits]\nshared = \"redis://127.0.0.1:6379/0\"\nlocal_share = 0\nshared_timeout_ms = 0\nshared_lease_ms = 10\nshared_stock_ms = 1001",
    )
    .await;
    for key in [
        "local_share",
        "shared_timeout_ms",
        "shared_lease_ms",
        "shared_stock_ms",
    ] {
        assert!(e.contains(&format!("limits.{key}")), "{key}: {e}");
    }
}

#[tokio::test]
async fn the_redis_password_is_read_from_its_file() {
    let mut redis = Redis::start().await;
    redis.kill();
    redis.launch_with_password("s3cret-redis-pw").await;
    let routes = Routes::simulated(&["m1"])
        .server("metrics_listen = \"127.0.0.1:0\"")
        .top(&shared(
            &redis,
            "shared_timeout_ms = 2000\nshared_password_file = \"redis-password\"",
        ))
        .demo_key("limits = { rate_per_second = 0.001, burst = 2 }");
    let dir = crate::support::ConfigDir::new(routes).with("redis-password", "s3cret-redis-pw\n");
    let gw = Gateway::start_in(dir).await;
    let http = gw.client();
    assert_eq!(http.get(UNKNOWN_TASK, DEMO).await.status, 404);
    assert_eq!(http.get(UNKNOWN_TASK, DEMO).await.status, 404);
    assert_rate_limited(&http.get(UNKNOWN_TASK, DEMO).await, 2);
    // Through Redis, not alone: it was never away.
    let m = gw.admin().metrics().await;
    assert_eq!(
        m.sum(&["mediagate_shared_limits_decided_locally_total"]),
        0.0
    );
    assert!(!redis.keys("mediagate:limits:demo:rate").is_empty());
}

/// `n` requests of `key` from `conns` clients at a time, each sending its next as soon
/// as its last is answered, taking turns over `clients`; the answers.
async fn closed_loop(clients: &[Http], key: &'static str, n: usize, conns: usize) -> Vec<Reply> {
    let loops: Vec<_> = (0..conns)
        .map(|c| {
            let http = clients[c % clients.len()].clone();
            let mine = n / conns + usize::from(c < n % conns);
            tokio::spawn(async move {
                let mut replies = Vec::with_capacity(mine);
                for _ in 0..mine {
                    replies.push(http.get(UNKNOWN_TASK, key).await);
                }
                replies
            })
        })
        .collect();
    let mut replies = Vec::with_capacity(n);
    for l in loops {
        replies.extend(l.await.unwrap());
    }
    replies
}

/// Calls to Redis of one kind (`admit`: a request waited for it), and requests
/// admitted from what a replica held ahead, summed over `gateways`.
async fn redis_use(gateways: &[&Gateway]) -> (f64, f64) {
    let (mut admit, mut ahead) = (0.0, 0.0);
    for gw in gateways {
        let m = gw.admin().metrics().await;
        admit += m.sum(&["mediagate_shared_limits_calls_total", "call=\"admit\""]);
        ahead += m.sum(&["mediagate_shared_limits_decided_ahead_total"]);
    }
    (admit, ahead)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_key_is_admitted_mostly_without_asking_redis_and_never_past_its_budget() {
    let redis = Redis::start().await;
    // demo-2 (the defaults): far above what the test sends; demo: a burst of 1,000 that
    // refills at one a second, so that the budget of a run is the burst, give or take
    // one.
    let limits = "shared_timeout_ms = 2000\nshared_stock_ms = 100\n\
                  rate_per_second = 10000\nburst = 10000\nmax_concurrent_requests = 1000";
    let routes = Routes::simulated(&["m1"])
        .server("metrics_listen = \"127.0.0.1:0\"")
        .top(&shared(&redis, limits))
        .demo_key("limits = { rate_per_second = 1, burst = 1000, max_concurrent_requests = 0 }");
    let (a, b) = (
        Gateway::start(routes.clone()).await,
        Gateway::start(routes).await,
    );
    let clients = [a.client(), b.client()];
    warm_up(&clients).await;

    // Within its limits: every request admitted, most of them without a round trip.
    let (admit_before, ahead_before) = redis_use(&[&a, &b]).await;
    let replies = closed_loop(&clients, DEMO2, 2000, 16).await;
    assert!(replies.iter().all(|r| r.status == 404));
    assert!(
        replies
            .iter()
            .all(|r| r.header_u64("x-ratelimit-limit") == 10_000)
    );
    let (admit, ahead) = redis_use(&[&a, &b]).await;
    let (admit, ahead) = (admit - admit_before, ahead - ahead_before);
    assert!(
        admit < 500.0 && ahead > 1500.0,
        "of 2000 requests, {admit} waited for Redis, {ahead} were decided ahead"
    );
    // Places held ahead and unused go back once the key is idle.
    eventually("the places held ahead go back", async || {
        redis.zcard("mediagate:limits:demo-2:in_progress") == 0
    })
    .await;

    // Past its budget: never more than the burst and what the rate refilled meanwhile
    // admitted by the fleet, at most what the replicas held ahead less; each refusal
    // decided in Redis, most admissions not.
    let started = Instant::now();
    let (admit_before, _) = redis_use(&[&a, &b]).await;
    let replies = closed_loop(&clients, DEMO, 1500, 16).await;
    let refilled = started.elapsed().as_secs() + 1;
    let (admit, _) = redis_use(&[&a, &b]).await;
    let admitted = replies.iter().filter(|r| r.status == 404).count();
    let refused = replies.len() - admitted;
    for r in replies.iter().filter(|r| r.status != 404) {
        assert_rate_limited(r, 1000);
    }
    assert!(
        admitted as u64 <= 1000 + refilled,
        "{admitted} admitted: more than the burst and {refilled} refilled"
    );
    // At most a sixteenth of the burst in each replica's stock.
    assert!(admitted >= 1000 - 2 * 62, "{admitted} admitted");
    assert!(
        admit - admit_before < (refused + admitted / 2) as f64,
        "{} calls for {admitted} admitted and {refused} refused",
        admit - admit_before
    );
    a.assert_no_panic();
    b.assert_no_panic();
}

/// `[limits] shared` applies at startup only: a reload that turns it off (or on) is
/// refused, rather than leave the key limits following the file while the Redis
/// client stays the one started with; the limit stays the fleet's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_turns_sharing_off_or_on_is_refused() {
    let redis = Redis::start().await;
    let limits = "limits = { rate_per_second = 1, burst = 2 }";
    let plain = Routes::simulated(&["m1"]).demo_key(limits);
    let sharing = plain
        .clone()
        .top(&shared(&redis, "shared_timeout_ms = 2000"));
    let gw = Gateway::start(sharing).await;
    let refused = gw.reload_with(&plain.render()).await.unwrap_err();
    assert!(refused.contains("limits.shared"), "{refused}");
    let http = gw.client();
    let statuses: Vec<u16> = at_once(&[http], DEMO, 4)
        .await
        .iter()
        .map(|r| r.status.as_u16())
        .collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 404).count(),
        2,
        "the burst of 2 still holds: {statuses:?}"
    );
    let alone = Gateway::start(Routes::simulated(&["m1"]).demo_key(limits)).await;
    let refused = alone
        .reload_with(&plain.top(&shared(&redis, "")).render())
        .await
        .unwrap_err();
    assert!(refused.contains("limits.shared"), "{refused}");
}
