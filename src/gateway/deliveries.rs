//! Webhook delivery: every replica leases due deliveries from the ledger (a row is
//! owed from the moment a task with a callback URL is recorded finished), posts the
//! task in the shape a query answers, signed the Standard Webhooks way with the
//! owner key's secrets, and writes the outcome back: 2xx delivered, 410 gone, anything
//! else (or no answer within `[webhooks] timeout_ms`) retried with exponential backoff
//! and jitter until `retry_for_hours` have passed. Delivery is at least once: a
//! replica that dies mid-attempt leaves its lease to expire and the attempt is made
//! again, with the same `webhook-id`, so receivers drop the duplicate.
//!
//! Each receiver (a callback URL's origin) and each key gets a share of the attempts
//! in flight, and a receiver that does not answer is left alone for a while
//! (`shares.rs`): a delivery that cannot start for either reason is put back in the
//! ledger untried, so one key's backlog at a dead receiver does not hold everyone's.
//!
//! Connections go only to addresses the callback rule allows, judged on the resolved
//! address (the guarded connector of `outbound`); redirects are not followed and at most
//! `max_answer_bytes` of an answer is read.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use http::{Request, header};
use http_body_util::{BodyExt, Full, Limited};
use tokio::sync::Semaphore;

use super::Gateway;
use super::rounds::Rounds;
use super::shares::{self, Contact, Held, NotNow, ShareLimits, Shares, receiver_of};
use crate::config::{Endpoint, WebhooksConfig};
use crate::lifecycle::links;
use crate::outbound::{CallError, UpstreamClient};
use crate::snapshot::Snapshot;
use crate::tasks::ledger::{Delivery, DeliveryOutcome, Ledger, PutBack, TaskRecord, now_ms};
use crate::tasks::openai::VideoEvent;
use crate::tasks::{Cost, TaskView, recorded_state};
use crate::webhooks::WebhookSigner;

/// Deliveries leased at once; when there were as many, the next batch follows at once.
const BATCH: i64 = 32;
/// How often the backlog gauges are refreshed and idle shares forgotten.
const BACKLOG_EVERY: Duration = Duration::from_secs(5);

/// Deliver webhooks until the gateway stops.
pub async fn run(gateway: Arc<Gateway>) {
    let Some(ledger) = gateway.tasks.ledger().cloned() else {
        return;
    };
    let mut deliverer = Deliverer::new(gateway.clone(), ledger);
    // A task that finished here owes its webhook now: no need to wait for the tick.
    let finished = Some(gateway.tasks.subscribe());
    super::rounds::until_stopped(&gateway, finished, &mut deliverer).await;
}

/// The loop's state: the client and pool of the snapshot last seen, and the shares
/// of the pool that receivers and keys hold.
struct Deliverer {
    gateway: Arc<Gateway>,
    ledger: Arc<Ledger>,
    client: Option<(Arc<Snapshot>, UpstreamClient)>,
    slots: Arc<Semaphore>,
    slots_max: usize,
    shares: Arc<Mutex<Shares>>,
    housekeeping_due: tokio::time::Instant,
}

impl Rounds for Deliverer {
    /// The snapshot's settings followed, the gauges refreshed now and then, then one
    /// look at the ledger.
    async fn round(&mut self) -> bool {
        let snapshot = self.gateway.snapshot();
        self.follow(&snapshot);
        self.housekeeping().await;
        self.lease_and_start(&snapshot).await
    }
}

impl Deliverer {
    fn new(gateway: Arc<Gateway>, ledger: Arc<Ledger>) -> Self {
        let limits = ShareLimits::of(&gateway.snapshot().webhooks.settings);
        Self {
            gateway,
            ledger,
            client: None,
            slots: Arc::new(Semaphore::new(1)),
            slots_max: 1,
            shares: Arc::new(Mutex::new(Shares::new(limits))),
            housekeeping_due: tokio::time::Instant::now(),
        }
    }

    /// The callback rule and the caps follow reloads.
    fn follow(&mut self, snapshot: &Arc<Snapshot>) {
        if self
            .client
            .as_ref()
            .is_some_and(|(s, _)| Arc::ptr_eq(s, snapshot))
        {
            return;
        }
        let settings = &snapshot.webhooks.settings;
        match delivery_client(snapshot) {
            Ok(c) => self.client = Some((snapshot.clone(), c)),
            Err(e) => tracing::error!(error = %e, "webhooks: cannot build the HTTP client"),
        }
        if settings.max_in_flight.max(1) != self.slots_max {
            self.slots_max = settings.max_in_flight.max(1);
            self.slots = Arc::new(Semaphore::new(self.slots_max));
        }
        shares::lock(&self.shares).set_limits(ShareLimits::of(settings));
    }

    /// Every few seconds: the backlog gauges, and what the shares keep of receivers
    /// and keys gone quiet dropped.
    async fn housekeeping(&mut self) {
        if tokio::time::Instant::now() < self.housekeeping_due {
            return;
        }
        self.housekeeping_due = tokio::time::Instant::now() + BACKLOG_EVERY;
        shares::lock(&self.shares).forget_idle(now_ms());
        let metrics = &self.gateway.metrics;
        match self.ledger.delivery_backlog().await {
            Ok(b) => {
                metrics.webhooks_pending.set(b.pending);
                let age = b.oldest_ms.map_or(0, |t| (now_ms() - t).max(0) / 1000);
                metrics.webhook_oldest_pending_seconds.set(age);
            }
            Err(e) => tracing::warn!(error = %e, "webhooks: the backlog cannot be read"),
        }
    }

    /// One look at the ledger: lease what can start now, start each delivery whose
    /// receiver and key have room, put the others back. Whether as many were leased
    /// as asked for (then the next look follows at once).
    async fn lease_and_start(&self, snapshot: &Snapshot) -> bool {
        let Some((_, http)) = &self.client else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            return false;
        };
        let settings = &snapshot.webhooks.settings;
        // Long enough for one attempt and the write of its outcome.
        let lease =
            Duration::from_millis(settings.timeout_ms).saturating_mul(2) + Duration::from_secs(5);
        // Lease only what can start now: a lease runs while its delivery waits.
        let free = match self.slots.available_permits() {
            0 => {
                drop(self.slots.acquire().await);
                self.slots.available_permits()
            }
            n => n,
        };
        let batch = BATCH.min(free as i64).max(1);
        let me = &self.gateway.replica;
        let copy_wait = Duration::from_millis(snapshot.storage.webhook_wait_ms);
        let due = match self
            .ledger
            .claim_deliveries(me, lease, batch, copy_wait)
            .await
        {
            Ok(due) => due,
            Err(e) => {
                self.gateway.metrics.ledger_errors.inc();
                tracing::warn!(error = %e, "webhooks: the ledger cannot be read");
                Vec::new()
            }
        };
        let full = due.len() as i64 == batch;
        let mut not_now = Vec::new();
        for delivery in due {
            let receiver = receiver_of(&delivery.url);
            match Held::take(&self.shares, &receiver, &delivery.owner, now_ms()) {
                Ok(held) => self.start(delivery, held, http).await,
                Err(wait) => not_now.push(put_back(&self.gateway, delivery, wait, settings)),
            }
        }
        // Together, so that SQLite commits them in one group.
        join_all(not_now).await;
        full
    }

    /// The attempt in a task of its own, holding a place in the pool and its shares.
    async fn start(&self, delivery: Delivery, held: Held, http: &UpstreamClient) {
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            return;
        };
        let (gateway, http) = (self.gateway.clone(), http.clone());
        tokio::spawn(async move {
            attempt(&gateway, &http, delivery, held).await;
            drop(slot);
        });
    }
}

/// One attempt at `delivery`: the callback URL judged by the rule as configured now
/// (a reload may have taken its host off `allow_http_hosts`, or its network off
/// `allow_private_networks`), as at submit; its addresses are judged at connect.
async fn try_once(
    ledger: &Ledger,
    snapshot: &Snapshot,
    http: &UpstreamClient,
    delivery: &Delivery,
) -> Attempt {
    if let Err(why) = snapshot.webhooks.callbacks.check(&delivery.url) {
        return Attempt::failed("refused", None, format!("the callback URL {why}"));
    }
    let row = match ledger.row(delivery.task_row).await {
        Ok(Some(row)) => row,
        Ok(None) => {
            return Attempt::failed("not_sent", None, "the task's ledger row is gone".into());
        }
        Err(e) => {
            return Attempt::failed("not_sent", None, format!("the ledger cannot be read: {e}"));
        }
    };
    match Message::of(&row, snapshot) {
        Ok(message) => {
            // Its own trace (the ledger keeps no trace context of the submit); its
            // `traceparent` goes to the receiver.
            let span = crate::traces::span(|| {
                crate::traces::traced!(
                    "webhook.delivery",
                    otel.kind = "client",
                    mediagate.task_row = delivery.task_row
                )
            });
            let sent = send(http, &delivery.url, &message, &snapshot.webhooks.settings);
            tracing::Instrument::instrument(sent, span).await
        }
        Err(e) => Attempt::failed("not_sent", None, e),
    }
}

/// Give back a delivery that cannot start now, due again when `wait` says; given up
/// instead when its time is up (it would be put back past `retry_for_hours`).
async fn put_back(gateway: &Gateway, delivery: Delivery, wait: NotNow, settings: &WebhooksConfig) {
    let Some(ledger) = gateway.tasks.ledger() else {
        return;
    };
    let give_up_at = give_up_at(&delivery, settings);
    let put_back = if now_ms() >= give_up_at {
        gateway.metrics.webhook_delivery("expired");
        let error = format!("not tried again in time: {}", wait.why.reason());
        tracing::warn!(
            row = delivery.task_row,
            host = delivery_host(&delivery.url),
            error,
            attempts = delivery.attempts,
            "webhook given up"
        );
        PutBack::Expired { error }
    } else {
        gateway.metrics.webhook_put_back(wait.why.label());
        PutBack::Until {
            next_ms: wait.until_ms.min(give_up_at),
        }
    };
    let me = &gateway.replica;
    if let Err(e) = ledger.delivery_put_back(delivery.id, me, &put_back).await {
        gateway.metrics.ledger_errors.inc();
        tracing::warn!(row = delivery.task_row, error = %e, "webhooks: the delivery cannot be put back");
    }
}

fn delivery_client(snapshot: &Snapshot) -> Result<UpstreamClient, String> {
    let settings = &snapshot.webhooks.settings;
    UpstreamClient::new(
        Duration::from_millis(settings.timeout_ms),
        None,
        snapshot.webhooks.callbacks.reach(),
        settings.max_answer_bytes,
    )
}

/// One attempt at one leased delivery, and its outcome written back.
async fn attempt(gateway: &Gateway, http: &UpstreamClient, delivery: Delivery, held: Held) {
    let Some(ledger) = gateway.tasks.ledger() else {
        return;
    };
    let snapshot = gateway.snapshot();
    let settings = &snapshot.webhooks.settings;
    let result = try_once(ledger, &snapshot, http, &delivery).await;
    gateway.metrics.webhook_attempt(result.label);
    let host = delivery_host(&delivery.url);
    if let Some(cooldown_ms) = held.end(result.contact()) {
        tracing::info!(
            host,
            cooldown_ms,
            "webhook receiver not answering: its deliveries wait"
        );
    }
    let outcome = result.outcome(&delivery, settings);
    match &outcome {
        DeliveryOutcome::Delivered { status } => {
            gateway.metrics.webhook_delivery("delivered");
            tracing::debug!(row = delivery.task_row, host, status, "webhook delivered");
        }
        DeliveryOutcome::Gone => {
            gateway.metrics.webhook_delivery("gone");
            tracing::info!(
                row = delivery.task_row,
                host,
                "webhook receiver answered 410: no more attempts"
            );
        }
        DeliveryOutcome::Expired { error, .. } => {
            gateway.metrics.webhook_delivery("expired");
            tracing::warn!(
                row = delivery.task_row,
                host,
                error,
                attempts = delivery.attempts + 1,
                "webhook given up"
            );
        }
        DeliveryOutcome::Retry { error, next_ms, .. } => {
            let in_s = (next_ms - now_ms()).max(0) / 1000;
            tracing::info!(
                row = delivery.task_row,
                host,
                error,
                retry_in_s = in_s,
                "webhook attempt failed"
            );
        }
    }
    let me = &gateway.replica;
    if let Err(e) = ledger.delivery_attempted(delivery.id, me, &outcome).await {
        gateway.metrics.ledger_errors.inc();
        tracing::warn!(row = delivery.task_row, error = %e, "webhooks: the outcome cannot be written");
    }
}

/// The host a callback goes to, for logs: never its path or query, which may carry
/// the receiver's own tokens.
fn delivery_host(url: &str) -> String {
    url.parse::<http::Uri>()
        .ok()
        .and_then(|u| u.host().map(str::to_string))
        .unwrap_or_default()
}

/// A signed message: the task as a query answers it.
struct Message {
    id: String,
    body: Bytes,
    signer: Arc<WebhookSigner>,
}

impl Message {
    fn of(row: &TaskRecord, snapshot: &Snapshot) -> Result<Self, String> {
        let key = snapshot
            .keys
            .named(&row.owner)
            .ok_or("the task's key is no longer configured")?;
        let signer = key
            .webhook_signer
            .clone()
            .ok_or("the task's key has no webhook secret")?;
        let body = Bytes::from(task_body(row, snapshot).ok_or("the task has no recorded outcome")?);
        Ok(Self {
            id: message_id(row),
            body,
            signer,
        })
    }

    /// The `webhook-signature` of this message sent at `timestamp`.
    fn signature(&self, timestamp: u64) -> String {
        self.signer.sign(&self.id, timestamp, &self.body)
    }
}

/// Stable per event, so that a receiver drops a repeated delivery: derived from the
/// task id and its terminal status.
fn message_id(row: &TaskRecord) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(row.task_id.as_deref().unwrap_or_default().as_bytes());
    ctx.update(b"\0");
    ctx.update(row.state.as_str().as_bytes());
    format!("msg_{}", hex::encode(&ctx.finish().as_ref()[..16]))
}

/// The task as `GET …/{id}` answers it once finished; a task submitted on
/// `/v1/videos` as OpenAI's event (`video.completed`, `video.failed`: the receiver
/// retrieves the video by the id).
fn task_body(row: &TaskRecord, snapshot: &Snapshot) -> Option<Vec<u8>> {
    let id = row.task_id.as_deref()?;
    let mut state = Arc::new(recorded_state(row)?);
    if row.endpoint == Endpoint::OpenAiVideos {
        let event_id = message_id(row);
        let at = row.finished_ms.unwrap_or(row.updated_ms).max(0) as u64 / 1000;
        let event = VideoEvent::new(&event_id, id, state.status, at);
        return serde_json::to_vec(&event).ok();
    }
    // The sealed id says when the task was created, exactly as a query answers.
    let (kind, model, created) = match snapshot.sealer.open(id) {
        Some(task) => (task.kind, task.model, task.created),
        None => (row.kind, row.model.clone(), (row.created_ms / 1000) as u64),
    };
    let provider = row
        .provider
        .as_deref()
        .and_then(|p| snapshot.providers.get(p));
    // No request whose Host could complete a content link: the path alone, unless
    // the provider names a public base URL.
    let provider = provider.map(|p| &**p);
    links::make_public(
        snapshot,
        &mut state,
        provider,
        &model,
        row.endpoint,
        id,
        || None,
    );
    let shows_cost = snapshot.keys.named(&row.owner).is_some_and(|k| k.show_cost);
    let currency = snapshot.billing.currency.as_str();
    let cost = Cost::of(currency, row.cost_estimate, row.cost_settled).filter(|_| shows_cost);
    let view = TaskView::new(id, kind, &model, created, &state).with_cost(cost);
    serde_json::to_vec(&view).ok()
}

/// What one attempt came to, before the retry policy is applied.
struct Attempt {
    /// One of `metrics::WEBHOOK_ATTEMPT_RESULTS`.
    label: &'static str,
    status: Option<u16>,
    error: Option<String>,
}

impl Attempt {
    fn failed(label: &'static str, status: Option<u16>, error: String) -> Self {
        Self {
            label,
            status,
            error: Some(error),
        }
    }

    /// What the attempt says of its receiver: whether it is up.
    fn contact(&self) -> Contact {
        match self.label {
            "success" | "http_error" => Contact::Answered,
            "timeout" | "unreachable" => Contact::NoAnswer,
            _ => Contact::Unknown,
        }
    }

    fn outcome(self, delivery: &Delivery, settings: &WebhooksConfig) -> DeliveryOutcome {
        let Some(error) = self.error else {
            return match self.status {
                Some(410) => DeliveryOutcome::Gone,
                status => DeliveryOutcome::Delivered {
                    status: status.unwrap_or(200),
                },
            };
        };
        let now = now_ms();
        let give_up_at = give_up_at(delivery, settings);
        if now >= give_up_at {
            return DeliveryOutcome::Expired {
                status: self.status,
                error,
            };
        }
        let wait = backoff(delivery.attempts + 1, settings, jitter());
        DeliveryOutcome::Retry {
            status: self.status,
            error,
            next_ms: (now + wait.as_millis() as i64).min(give_up_at),
        }
    }
}

/// When a delivery is given up: `retry_for_hours` after its task's outcome.
fn give_up_at(delivery: &Delivery, settings: &WebhooksConfig) -> i64 {
    let hours = i64::try_from(settings.retry_for_hours).unwrap_or(i64::MAX);
    delivery
        .created_ms
        .saturating_add(hours.saturating_mul(3_600_000))
}

/// The wait after the `n`th failed attempt: `first_retry_ms` doubled each time, at
/// most `max_retry_interval_ms`, of which the last half is random (`jitter` in 0..1)
/// so that receivers coming back are not hit by every sender at once.
fn backoff(n: i64, settings: &WebhooksConfig, jitter: f64) -> Duration {
    let doubled = settings
        .first_retry_ms
        .saturating_mul(1u64 << (n.clamp(1, 40) - 1));
    let full = doubled.min(settings.max_retry_interval_ms.max(settings.first_retry_ms));
    Duration::from_millis(full / 2 + ((full / 2) as f64 * jitter.clamp(0.0, 1.0)) as u64)
}

fn jitter() -> f64 {
    use ring::rand::SecureRandom;
    let mut raw = [0u8; 4];
    let _ = ring::rand::SystemRandom::new().fill(&mut raw);
    f64::from(u32::from_le_bytes(raw)) / f64::from(u32::MAX)
}

/// Post the message; the answer's status decides, and at most `max_answer_bytes` of
/// its body is read (so the connection can be kept).
async fn send(
    http: &UpstreamClient,
    url: &str,
    message: &Message,
    settings: &WebhooksConfig,
) -> Attempt {
    let timestamp = now_ms().max(0) as u64 / 1000;
    let request = Request::post(url)
        .header(header::CONTENT_TYPE, "application/json")
        .header(
            header::USER_AGENT,
            concat!("mediagate-webhooks/", env!("CARGO_PKG_VERSION")),
        )
        .header("webhook-id", &message.id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", message.signature(timestamp))
        .body(Full::new(message.body.clone()));
    let request = match request {
        Ok(r) => r,
        Err(_) => {
            return Attempt::failed("not_sent", None, "the callback URL is not usable".into());
        }
    };
    let timeout = Duration::from_millis(settings.timeout_ms);
    let started = tokio::time::Instant::now();
    let response = match http.open(request, timeout).await {
        Ok(response) => response,
        Err(CallError::TimedOut) => {
            return Attempt::failed("timeout", None, "no answer in time".into());
        }
        Err(CallError::Forbidden) => {
            let e = "the callback URL resolves into a private network";
            return Attempt::failed("refused", None, e.into());
        }
        Err(e) => return Attempt::failed("unreachable", None, e.to_string()),
    };
    let status = response.status().as_u16();
    let rest = timeout.saturating_sub(started.elapsed());
    let drain = Limited::new(response.into_body(), settings.max_answer_bytes).collect();
    let _ = tokio::time::timeout(rest, drain).await;
    if response_is_success(status) {
        Attempt {
            label: "success",
            status: Some(status),
            error: None,
        }
    } else if status == 410 {
        Attempt {
            label: "http_error",
            status: Some(410),
            error: None,
        }
    } else {
        Attempt::failed(
            "http_error",
            Some(status),
            format!("the receiver answered {status}"),
        )
    }
}

fn response_is_success(status: u16) -> bool {
    (200..300).contains(&status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter_in_the_upper_half() {
        let s = WebhooksConfig::default();
        assert_eq!(backoff(1, &s, 1.0), Duration::from_secs(5));
        assert_eq!(backoff(1, &s, 0.0), Duration::from_millis(2_500));
        assert_eq!(backoff(2, &s, 1.0), Duration::from_secs(10));
        assert_eq!(backoff(5, &s, 1.0), Duration::from_secs(80));
        assert_eq!(backoff(20, &s, 1.0), Duration::from_secs(3_600));
        assert_eq!(backoff(1_000, &s, 0.5), Duration::from_millis(2_700_000));
    }

    #[test]
    fn defaults_retry_for_a_day_with_dozens_of_attempts() {
        let s = WebhooksConfig::default();
        let (mut at, mut attempts) = (Duration::ZERO, 1);
        while at < Duration::from_secs(s.retry_for_hours * 3_600) {
            at += backoff(attempts, &s, 0.5);
            attempts += 1;
        }
        assert!(s.retry_for_hours >= 24);
        assert!(
            (25..=60).contains(&attempts),
            "{attempts} attempts in a day"
        );
    }
}
