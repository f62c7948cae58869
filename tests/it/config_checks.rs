//! Settings that cannot work together are refused at load (and by `mediagate check`),
//! naming the key: a submit that may outlast the request it belongs to, webhooks that
//! could not be signed or sent, caps that do not fit, a video family that leaves the
//! length of its tasks unsaid.

use crate::support::{ConfigDir, Routes, family, tasks_provider};

async fn problems_of(routes: Routes) -> String {
    let dir = ConfigDir::new(routes);
    match mediagate::start(&dir.routes_path()).await {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    }
}

#[tokio::test]
async fn a_submit_longer_than_the_request_is_refused() {
    let with = |submit_timeout_ms: u64, server: &str| {
        let provider = tasks_provider("one", "http://127.0.0.1:9", "").replace(
            "submit_timeout_ms = 1000",
            &format!("submit_timeout_ms = {submit_timeout_ms}"),
        );
        Routes::new()
            .server(server)
            .provider(provider)
            .family(family("f", &["one"], &["m1"]))
    };
    // 60 s of submit and the default 30 s of body fit in the default 120 s.
    let fits = problems_of(with(60_000, "")).await;
    assert!(!fits.contains("submit_timeout_ms"), "{fits}");
    // 100 s of submit and 30 s of body do not.
    let e = problems_of(with(100_000, "")).await;
    assert!(e.contains("providers.one.submit_timeout_ms"), "{e}");
    assert!(e.contains("request_timeout_ms"), "{e}");
    // Nor does a 1 s submit in a short request.
    let short = "request_timeout_ms = 300\nbody_read_timeout_ms = 100";
    let e = problems_of(with(1000, short)).await;
    assert!(e.contains("providers.one.submit_timeout_ms"), "{e}");
    // A whole request lasts an hour at most (and a tenth of a second at least).
    for (ms, refused) in [(3_600_000, false), (3_600_001, true), (99, true)] {
        let e = problems_of(with(1000, &format!("request_timeout_ms = {ms}"))).await;
        let out_of_range = "server.request_timeout_ms: must be between 100 and 3600000";
        assert_eq!(e.contains(out_of_range), refused, "{ms}: {e}");
    }
}

/// A connection's timeouts can neither be 0 (every connection closed, every body
/// timed out at once) nor longer than an hour.
#[tokio::test]
async fn connection_timeouts_out_of_range_are_refused() {
    for key in [
        "idle_timeout_ms",
        "header_read_timeout_ms",
        "body_read_timeout_ms",
    ] {
        for (ms, refused) in [(0, true), (3_600_001, true), (1, false)] {
            let server = format!("{key} = {ms}");
            let e = problems_of(Routes::simulated(&["m1"]).server(&server)).await;
            let out_of_range = format!("server.{key}: must be between 1 and 3600000");
            assert_eq!(e.contains(&out_of_range), refused, "{server}: {e}");
        }
    }
}

#[tokio::test]
async fn webhook_settings_that_cannot_work_are_refused_without_quoting_secrets() {
    let simulated = || Routes::simulated(&["m1"]);
    // A default URL needs a secret to sign with, and must itself be acceptable.
    let e =
        problems_of(simulated().demo_key(r#"webhook_url = "https://hooks.example.com/x""#)).await;
    assert!(e.contains("keys[0].webhook_url"), "{e}");
    assert!(e.contains("secret"), "{e}");
    let e = problems_of(simulated().demo_key(
        "webhook_url = \"http://10.0.0.8/x\"\nwebhook_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"",
    ))
    .await;
    assert!(
        e.contains("keys[0].webhook_url") && e.contains("https"),
        "{e}"
    );
    // A secret that is not one is named by its key, never quoted.
    let not_a_secret = "sk-live-0123456789abcdef0123456789";
    let e = problems_of(simulated().demo_key(&format!("webhook_secret = {not_a_secret:?}"))).await;
    assert!(e.contains("keys[0].webhook_secret"), "{e}");
    assert!(!e.contains(not_a_secret), "{e}");
    // Webhooks are owed in the ledger: none without one.
    let stateless = simulated().top("[ledger]\nurl = \"none\"").demo_key(
        "webhook_url = \"https://hooks.example.com/x\"\nwebhook_secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"",
    );
    let e = problems_of(stateless).await;
    assert!(
        e.contains("keys[0].webhook_url") && e.contains("ledger"),
        "{e}"
    );
    let e = problems_of(simulated().top("[webhooks]\nallow_private_networks = [\"10.0.0.0/33\"]"))
        .await;
    assert!(e.contains("webhooks.allow_private_networks"), "{e}");
}

#[tokio::test]
async fn more_workers_than_can_make_sense_are_refused() {
    let e = problems_of(Routes::simulated(&["m1"]).server("workers = 5000")).await;
    assert!(e.contains("server.workers"), "{e}");
    let fine = problems_of(Routes::simulated(&["m1"]).server("workers = 3")).await;
    assert!(fine.is_empty(), "{fine}");
}

/// Sizes of semaphores the gateway makes (connections, polls, deliveries, a key's
/// requests in progress) beyond what tokio allows are refused by name, not a panic.
#[tokio::test]
async fn absurdly_large_caps_are_refused_by_name() {
    const HUGE: &str = "18446744073709551615";
    let provider = tasks_provider(
        "one",
        "http://127.0.0.1:9",
        &format!("poll_max_in_flight = {HUGE}"),
    );
    let routes = Routes::new()
        .server(&format!("admin_max_connections = {HUGE}"))
        .top(&format!(
            "[limits]\nmax_concurrent_requests = {HUGE}\n\n[webhooks]\nmax_in_flight = {HUGE}\n"
        ))
        .provider(provider)
        .family(family("f", &["one"], &["m1"]));
    let e = problems_of(routes).await;
    for key in [
        "server.admin_max_connections",
        "providers.one.poll_max_in_flight",
        "limits.max_concurrent_requests",
        "webhooks.max_in_flight",
    ] {
        assert!(e.contains(key), "{key} not named in: {e}");
    }
}

#[tokio::test]
async fn a_video_family_must_say_how_long_a_task_without_a_length_is() {
    let with = |family_block: String| {
        Routes::new()
            .provider(tasks_provider("one", "http://127.0.0.1:9", ""))
            .family(family_block)
    };
    let base = family("f", &["one"], &["m1"]).to_string();
    let e = problems_of(with(base.replace("default_seconds = 5\n", ""))).await;
    assert!(e.contains("families.f.default_seconds"), "{e}");
    assert!(e.contains("a video family must say"), "{e}");
    // A family whose schema requires the length needs none.
    let required = base.replace(
        "default_seconds = 5\n",
        "params.required = [\"prompt\", \"duration\"]\n",
    );
    assert_eq!(problems_of(with(required)).await, "");
    for absurd in ["0", "3601"] {
        let e = problems_of(with(base.replace("= 5\n", &format!("= {absurd}\n")))).await;
        assert!(
            e.contains("families.f.default_seconds: must be from 1 to 3600"),
            "{e}"
        );
    }
}

/// A receiver's and a key's share of the webhook attempts are parts of the pool.
#[tokio::test]
async fn webhook_shares_must_fit_in_the_pool() {
    let with = |lines: &str| {
        Routes::simulated(&["m1"]).top(&format!("[webhooks]\nmax_in_flight = 8\n{lines}"))
    };
    let e = problems_of(with(
        "max_in_flight_per_receiver = 0\nmax_in_flight_per_key = 9",
    ))
    .await;
    for key in [
        "webhooks.max_in_flight_per_receiver",
        "webhooks.max_in_flight_per_key",
    ] {
        assert!(e.contains(key), "{key} not named in: {e}");
    }
    let fine = problems_of(with(
        "max_in_flight_per_receiver = 8\nmax_in_flight_per_key = 1",
    ))
    .await;
    assert!(fine.is_empty(), "{fine}");
}

#[tokio::test]
async fn storage_settings_that_cannot_work_are_refused() {
    let with = |url: &str, lines: &str| {
        let mut routes = Routes::simulated(&["m1"]).storage(url);
        for line in lines.lines() {
            routes = routes.storage_setting(line);
        }
        routes
    };
    // Direct links are presigned URLs of a bucket: local files have none.
    let e = problems_of(with("file://media", "direct_links = true")).await;
    assert!(e.contains("storage.direct_links"), "{e}");
    assert!(e.contains("s3://"), "{e}");
    // S3 presigns for 7 days at most.
    let e = problems_of(with(
        "s3://bucket/p",
        "direct_links = true\nlink_ttl_secs = 700000",
    ))
    .await;
    assert!(e.contains("storage.link_ttl_secs"), "{e}");
    assert!(!e.contains("storage.direct_links"), "{e}");
    // A results setting for a model the family does not list.
    let routes = Routes::new()
        .provider(tasks_provider("one", "http://127.0.0.1:9", ""))
        .family(
            family("f", &["one"], &["m1"]).to_string()
                + "[families.f.per_model.m9]\nkeep_days = 1\n",
        );
    let e = problems_of(routes).await;
    assert!(e.contains("families.f.per_model"), "{e}");
    assert!(e.contains("`m9`"), "{e}");
}

#[tokio::test]
async fn retention_shorter_than_a_remembered_key_is_refused() {
    let with = |ledger: &str| {
        Routes::new()
            .provider(tasks_provider("one", "http://127.0.0.1:9", ""))
            .family(family("f", &["one"], &["m1"]))
            .top(&format!("[ledger]\n{ledger}"))
    };
    // A task pruned while its key is remembered would be submitted again on a retry.
    let e = problems_of(with("keep_days = 1\nidempotency_ttl_hours = 48")).await;
    assert!(e.contains("ledger.keep_days"), "{e}");
    let e = problems_of(with("prune_batch = 0")).await;
    assert!(e.contains("ledger.prune_batch"), "{e}");
    for fits in ["keep_days = 2\nidempotency_ttl_hours = 48", "keep_days = 0"] {
        let ok = problems_of(with(fits)).await;
        assert!(!ok.contains("keep_days"), "{fits}: {ok}");
    }
}

#[tokio::test]
async fn a_tracker_lease_shorter_than_a_second_is_refused() {
    let with = |tracker: &str| {
        Routes::new()
            .provider(tasks_provider("one", "http://127.0.0.1:9", ""))
            .family(family("f", &["one"], &["m1"]))
            .top(&format!("[tracker]\n{tracker}"))
    };
    // A heartbeat every few milliseconds would find itself expired at every round,
    // and its replica forget its tasks each time.
    for short in ["lease_ms = 0", "lease_ms = 999"] {
        let e = problems_of(with(short)).await;
        assert!(e.contains("tracker.lease_ms"), "{short}: {e}");
    }
    let ok = problems_of(with("lease_ms = 1000")).await;
    assert!(!ok.contains("lease_ms"), "{ok}");
}

/// Webhook attempts and copies need time to be made and a pause between tries, and
/// are retried for a bounded time: a 0 would post to a failing receiver at the pool's
/// rate, or give every attempt up at once.
#[tokio::test]
async fn webhook_and_copy_timings_out_of_range_are_refused() {
    let with =
        |table: &str, lines: &str| Routes::simulated(&["m1"]).top(&format!("[{table}]\n{lines}"));
    for (table, line, problem) in [
        ("webhooks", "timeout_ms = 0", "webhooks.timeout_ms"),
        ("webhooks", "first_retry_ms = 0", "webhooks.first_retry_ms"),
        (
            "webhooks",
            "retry_for_hours = 0",
            "webhooks.retry_for_hours",
        ),
        (
            "webhooks",
            "retry_for_hours = 9000000000000",
            "webhooks.retry_for_hours",
        ),
        (
            "webhooks",
            "max_retry_interval_ms = 18446744073709551615",
            "webhooks.max_retry_interval_ms",
        ),
        (
            "webhooks",
            "max_retry_interval_ms = 99",
            "webhooks.max_retry_interval_ms",
        ),
    ] {
        let e = problems_of(with(table, line)).await;
        assert!(e.contains(problem), "{line}: {e}");
    }
    let ok = problems_of(with(
        "webhooks",
        "timeout_ms = 100\nfirst_retry_ms = 100\nmax_retry_interval_ms = 31536000000",
    ))
    .await;
    assert!(!ok.contains("webhooks."), "{ok}");
    let e = problems_of(with("ledger", "idempotency_ttl_hours = 0")).await;
    assert!(e.contains("ledger.idempotency_ttl_hours"), "{e}");
    for (line, problem) in [
        ("copy_timeout_ms = 0", "storage.copy_timeout_ms"),
        ("retry_for_hours = 0", "storage.retry_for_hours"),
    ] {
        let routes = Routes::simulated(&["m1"]).storage_setting(line);
        let e = problems_of(routes).await;
        assert!(e.contains(problem), "{line}: {e}");
    }
}
