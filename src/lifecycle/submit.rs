//! A submit, from admission to its recorded outcome: the ledger's admission
//! (idempotency key, quota, the write-ahead row) → the model's providers in failover
//! order → the sealed id → the row completed. From its admission on (a write the
//! ledger makes whether anyone still waits for it), it runs to its end (bounded by
//! the providers' submit timeouts) — in the request's task while the
//! request waits for it, in a task of its own once the request is gone — so the
//! ledger always learns what the provider answered and paid work is never cancelled
//! half-way.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::TaskService;
use crate::access::ApiKey;
use crate::config::{Endpoint, QuotaConfig};
use crate::error::ApiError;
use crate::metrics::SpendMetrics;
use crate::models::Model;
use crate::money::{Budget, Micros};
use crate::providers::jq::JqVars;
use crate::providers::{Accepted, Provider, SubmitError};
use crate::snapshot::Snapshot;
use crate::tasks::ledger::{self, Admission, Answer, Ledger, NewTask, State, fingerprint};
use crate::tasks::openai::{Video, VideoAsked, VideoTimes};
use crate::tasks::{SubmitResponse, TaskId, TaskState, TaskStatus};

/// How often a retry with the same idempotency key looks whether the first request
/// has its answer.
const FIRST_REQUEST_LOOK: Duration = Duration::from_millis(50);

/// A submit the API has parsed and validated: what the service needs to run it.
pub struct SubmitOrder {
    pub snapshot: Arc<Snapshot>,
    /// The key's name: the task's owner.
    pub owner: Arc<str>,
    pub quota: Option<QuotaConfig>,
    /// The key's budget: the task's estimate must fit in what remains of it.
    pub budget: Option<Budget>,
    pub endpoint: Endpoint,
    pub model: Arc<Model>,
    /// Validated, integers normalised.
    pub params: Value,
    /// What the task counts toward usage and quotas.
    pub video_seconds: i64,
    pub idempotency_key: Option<String>,
    /// Where the outcome is posted: the request's `callback_url` or the key's own.
    pub callback_url: Option<String>,
    /// Whether the request named the callback URL: then it is part of what makes a
    /// retry the same request (the key's own URL is the operator's, not the client's).
    pub callback_in_request: bool,
    /// A submit on `/v1/videos`: what it asked for in OpenAI's terms, for its answer.
    pub openai: Option<VideoAsked>,
    /// What makes a retry the same request where `params` holds values made afresh
    /// by each request (an uploaded input's signed link, whose expiry moves): the
    /// parameters with those values replaced by what they stand for. `None`: `params`.
    pub same_request: Option<Value>,
}

impl SubmitOrder {
    /// A submit of `key`'s (its owner, quota and budget) of `model` with validated
    /// `params`: no idempotency key, callback or OpenAI shape until set.
    pub fn new(
        snapshot: Arc<Snapshot>,
        key: &ApiKey,
        endpoint: Endpoint,
        model: Arc<Model>,
        params: Value,
        video_seconds: i64,
    ) -> Self {
        Self {
            snapshot,
            owner: key.name.clone(),
            quota: key.quota,
            budget: key.budget,
            endpoint,
            model,
            params,
            video_seconds,
            idempotency_key: None,
            callback_url: None,
            callback_in_request: false,
            openai: None,
            same_request: None,
        }
    }
}

/// What a submit came to.
pub enum Submitted {
    /// A task the provider created.
    Created(SealedTask),
    /// The answer the first request with this idempotency key was given.
    Replayed(Answer),
}

/// A task the provider created, with its sealed id.
pub struct SealedTask {
    pub task: TaskId,
    pub id: String,
    pub status: TaskStatus,
    /// A submit on `/v1/videos`: its answer is the video object.
    pub openai: Option<VideoAsked>,
    /// When the tracker first asks about it.
    first_poll: Duration,
}

impl SealedTask {
    /// The client's answer.
    pub fn body(&self) -> SubmitResponse<'_> {
        SubmitResponse {
            id: &self.id,
            object: self.task.kind,
            model: &self.task.model,
            status: self.status,
            created: self.task.created,
        }
    }

    /// A submit on `/v1/videos`: the video object it is answered with.
    pub fn video<'a>(&'a self, asked: &'a VideoAsked, state: &'a TaskState) -> Video<'a> {
        let times = VideoTimes::default();
        Video::new(
            &self.id,
            &self.task.model,
            self.task.created,
            state,
            asked,
            times,
        )
    }

    /// The same answer as text, kept for a retry with the same idempotency key.
    fn answer(&self) -> Answer {
        let body = match &self.openai {
            Some(asked) => {
                let state = TaskState::of_status(self.status);
                serde_json::to_string(&self.video(asked, &state))
            }
            None => serde_json::to_string(&self.body()),
        };
        Answer {
            status: 200,
            body: body.unwrap_or_default(),
        }
    }
}

/// Which provider a submit went to last, and how long it took to create the task:
/// for the access log, also when the submit failed.
#[derive(Debug, Default, Clone)]
pub struct Attempted {
    pub provider: Option<String>,
    pub upstream_time: Option<Duration>,
}

/// A submit that created no task, or may have.
enum Failure {
    /// Every provider declined: nothing exists upstream; the same request may be
    /// tried again.
    Refused(ApiError),
    /// The request itself was refused: nothing exists upstream; retrying is futile.
    Rejected(ApiError),
    /// It may exist upstream (at the named provider): never submitted again.
    Unknown(Box<(ApiError, String)>),
}

impl Failure {
    fn into_error(self) -> ApiError {
        match self {
            Self::Refused(e) | Self::Rejected(e) => e,
            Self::Unknown(unknown) => unknown.0,
        }
    }
}

impl TaskService {
    /// Run a submit (see the module documentation). The answer comes as soon as the
    /// outcome is known; the recording of it goes on if the caller goes away.
    pub async fn submit(&self, order: SubmitOrder) -> (Result<Submitted, ApiError>, Attempted) {
        let Some(ledger) = self.ledger.clone() else {
            let run = run_to_end(order, None, None, self.retries());
            let (outcome, attempted) = RunToEnd::new(self.submits.track_future(run)).await;
            return (outcome.map(Submitted::Created), attempted);
        };
        // From the admission on, the submit runs to its end whatever its caller does:
        // an admission is written even when nobody waits for it any more, and its row
        // with nobody to go on would end `unknown_outcome`, its key taken and its
        // estimate reserved, though nothing reached a provider.
        let (errors, spend) = (self.ledger_errors.clone(), self.spend.clone());
        let retries = self.retries();
        let admitted = RunToEnd::new(self.submits.track_future(async move {
            match admit(&ledger, &order, &errors).await {
                Ok((Admission::Fresh(row), estimate)) => {
                    let reserved = estimate.map(|estimate| {
                        spend.reserved(&order.owner, &order.model.id, estimate);
                        (spend, estimate)
                    });
                    let (outcome, attempted) =
                        run_to_end(order, Some((ledger, row)), reserved, retries).await;
                    Ok(Ok((outcome.map(Submitted::Created), attempted)))
                }
                Ok((other, _)) => Ok(Err((ledger, order, other))),
                Err(e) => Err(e),
            }
        }));
        match admitted.await {
            Ok(Ok(ran)) => ran,
            // An earlier submit with the key: answered from it, waited for here (a
            // caller gone no longer waits).
            Ok(Err((ledger, order, other))) => (
                admitted_before(&ledger, &order, other).await,
                Attempted::default(),
            ),
            Err(e) => (Err(e), Attempted::default()),
        }
    }
}

/// The ledger's admission: one transaction for the idempotency key, the quota, the
/// budget and the write-ahead row; with the estimate it reserves.
async fn admit(
    ledger: &Ledger,
    order: &SubmitOrder,
    ledger_errors: &Counter,
) -> Result<(Admission, Option<Micros>), ApiError> {
    let callback = order
        .callback_url
        .as_deref()
        .filter(|_| order.callback_in_request);
    let cost_estimate = estimate(order)?;
    let price_params = order
        .model
        .price
        .as_ref()
        .filter(|p| p.settles())
        .map(|_| order.params.to_string());
    let new = NewTask {
        cost_estimate,
        budget: order.budget,
        price_params,
        owner: &order.owner,
        endpoint: order.endpoint,
        model: &order.model.id,
        kind: order.model.kind,
        fingerprint: fingerprint(
            order.endpoint,
            &order.model.id,
            order.same_request.as_ref().unwrap_or(&order.params),
            callback,
        ),
        idempotency_key: order.idempotency_key.as_deref(),
        video_seconds: order.video_seconds,
        quota: order.quota,
        provider: order.model.providers.first().map(|p| p.name.as_str()),
        callback_url: order.callback_url.as_deref(),
        keep_days: order.model.results.keep_days.map(i64::from),
    };
    let span =
        crate::traces::span(|| crate::traces::traced!("ledger.admit", otel.kind = "internal"));
    let admitted = tracing::Instrument::instrument(ledger.admit(&new), span).await;
    let admission = admitted.map_err(|e| {
        ledger_errors.inc();
        tracing::error!(error = %e, "ledger write failed; submit refused before the provider");
        ApiError::ledger_unavailable()
    })?;
    Ok((admission, cost_estimate))
}

/// What an admission that is not a fresh row means for the request.
async fn admitted_before(
    ledger: &Ledger,
    order: &SubmitOrder,
    admission: Admission,
) -> Result<Submitted, ApiError> {
    match admission {
        // Not before: a fresh row is submitted, not answered from here.
        Admission::Fresh(_) => Err(ApiError::submit_outcome_unknown()),
        Admission::Replay(answer) => Ok(Submitted::Replayed(answer)),
        Admission::InFlight(row) => {
            let wait = Duration::from_millis(order.snapshot.ledger.idempotency_wait_ms);
            first_answer(ledger, row, wait)
                .await
                .map(Submitted::Replayed)
        }
        Admission::Mismatch => Err(ApiError::idempotency_key_reused()),
        Admission::OutcomeUnknown => Err(ApiError::submit_outcome_unknown()),
        Admission::QuotaExceeded { what, resets_ms } => Err(quota_exceeded(what, resets_ms)),
        Admission::BudgetExceeded {
            period,
            remaining,
            resets_ms,
        } => {
            let (resets_in, resets_at) = reset(resets_ms);
            let currency = &order.snapshot.billing.currency;
            Err(ApiError::budget_exceeded(
                period.as_str(),
                &format!("{remaining} {currency}"),
                resets_in,
                resets_at,
            ))
        }
    }
}

/// What the task reserves: its model's estimate for the parameters; nothing without
/// a price. A price that cannot be computed refuses the submit (it cannot be billed).
fn estimate(order: &SubmitOrder) -> Result<Option<Micros>, ApiError> {
    let Some(price) = &order.model.price else {
        return Ok(None);
    };
    let model = &order.model;
    let vars = JqVars::new(&model.id, &model.upstream_model, model.kind, None, None);
    price.estimate(&order.params, vars).map(Some).map_err(|e| {
        tracing::warn!(model = %model.id, error = %e, "a price could not be estimated");
        ApiError::price_unavailable(&model.id, &e)
    })
}

/// A future awaited where it is (no task of its own, no wake-up across tasks) that,
/// if its caller drops it before its end (the client left, the request timed out),
/// goes on in a task of its own: an admitted submit is never cut half-way, and in
/// the request's trace (dropped within the request, its trace is current).
struct RunToEnd<F: Future + Send + 'static>(Option<Pin<Box<F>>>);

impl<F: Future + Send + 'static> RunToEnd<F> {
    fn new(future: F) -> Self {
        Self(Some(Box::pin(future)))
    }
}

impl<F: Future + Send + 'static> Future for RunToEnd<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(future) = self.0.as_mut() else {
            return Poll::Pending;
        };
        let output = ready!(future.as_mut().poll(cx));
        self.0 = None;
        Poll::Ready(output)
    }
}

impl<F: Future + Send + 'static> Drop for RunToEnd<F> {
    fn drop(&mut self) {
        if let Some(rest) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(crate::traces::carried(async move {
                rest.await;
            }));
        }
    }
}

/// The submit from the first provider on: forwarded, and its outcome written to the
/// row. A refusal settles the row's reservation (`reserved`) at 0, in the ledger and
/// in the metrics. Retries of a failed write run as `retries` says.
async fn run_to_end(
    order: SubmitOrder,
    row: Option<(Arc<Ledger>, i64)>,
    reserved: Option<(SpendMetrics, Micros)>,
    retries: Retries,
) -> (Result<SealedTask, ApiError>, Attempted) {
    let mut attempted = Attempted::default();
    let ledger = row.as_ref().map(|(l, row)| (&**l, *row));
    let outcome = forward(&order, ledger, &mut attempted).await;
    if let Some((ledger, row)) = row {
        let written = Written::of(&outcome);
        let settle = reserved.map(|(spend, estimate)| {
            move || spend.settled(&order.owner, &order.model.id, estimate, Micros::ZERO)
        });
        record(ledger, row, written, settle, retries).await;
    }
    (outcome.map_err(Failure::into_error), attempted)
}

/// Where the retries of an outcome's write run: among the submits a graceful stop
/// waits for, their waits cut short when it begins.
#[derive(Clone)]
struct Retries {
    submits: TaskTracker,
    stopping: CancellationToken,
}

impl TaskService {
    fn retries(&self) -> Retries {
        Retries {
            submits: self.submits.clone(),
            stopping: self.stopping.clone(),
        }
    }
}

/// Waits before each new try of a submit's outcome whose write failed: about 20 s in
/// all, well within the minute after which the sweep takes a row left `submitting`
/// for a crashed submit's. Once the gateway stops, one last try at once.
const RECORD_RETRIES: [Duration; 4] = [
    Duration::from_millis(250),
    Duration::from_secs(1),
    Duration::from_secs(4),
    Duration::from_secs(15),
];

/// The outcome on the submit's row; a refusal that ended it settles its reservation
/// (`settle`). A write that fails is tried again a few times, in a task of its own
/// among the submits (the client has its answer meanwhile; a graceful stop waits for
/// it): the provider may have the task, and a row left `submitting` would end
/// `unknown_outcome`, its reservation held.
async fn record(
    ledger: Arc<Ledger>,
    row: i64,
    outcome: Written,
    settle: Option<impl FnOnce() + Send + 'static>,
    retries: Retries,
) {
    let span =
        crate::traces::span(|| crate::traces::traced!("ledger.record", otel.kind = "internal"));
    let first = tracing::Instrument::instrument(outcome.write(&ledger, row), span).await;
    let ended = match first {
        Ok(ended) => ended,
        Err(e) => {
            tracing::warn!(row, upstream_id = outcome.upstream_id(), error = %e, "ledger update failed after the submit; trying again");
            let Retries { submits, stopping } = retries;
            submits.spawn(async move {
                let mut last = None;
                for wait in RECORD_RETRIES {
                    let stopping = tokio::select! {
                        () = tokio::time::sleep(wait) => false,
                        () = stopping.cancelled() => true,
                    };
                    match outcome.write(&ledger, row).await {
                        Ok(ended) => return settled_if(ended, settle),
                        Err(e) => last = Some(e),
                    }
                    if stopping {
                        break;
                    }
                }
                if let Some(e) = last {
                    tracing::error!(row, upstream_id = outcome.upstream_id(), error = %e, "ledger update failed after the submit");
                }
            });
            return;
        }
    };
    settled_if(ended, settle);
}

/// The reservation settled (`settle`) when the outcome's write `ended` the row.
fn settled_if(ended: bool, settle: Option<impl FnOnce()>) {
    if ended && let Some(settle) = settle {
        settle();
    }
}

/// A submit's outcome as its row records it, owned: written again when the first
/// write failed.
enum Written {
    Created {
        provider: String,
        upstream_id: String,
        task_id: String,
        status: TaskStatus,
        answer: Answer,
        first_poll: Duration,
    },
    /// Every provider declined (no answer kept), or the request was refused (its
    /// answer kept for a retry with the key).
    Refused(Option<Answer>),
    /// It may exist at the named provider.
    Unknown(String),
}

impl Written {
    fn of(outcome: &Result<SealedTask, Failure>) -> Self {
        match outcome {
            Ok(created) => Self::Created {
                provider: created.task.provider.clone(),
                upstream_id: created.task.upstream_id.clone(),
                task_id: created.id.clone(),
                status: created.status,
                answer: created.answer(),
                first_poll: created.first_poll,
            },
            Err(Failure::Refused(_)) => Self::Refused(None),
            Err(Failure::Rejected(e)) => Self::Refused(Some(error_answer(e))),
            Err(Failure::Unknown(unknown)) => Self::Unknown(unknown.1.clone()),
        }
    }

    fn upstream_id(&self) -> Option<&str> {
        match self {
            Self::Created { upstream_id, .. } => Some(upstream_id),
            _ => None,
        }
    }

    /// The statement that records it on row `row`; whether it ended the task there
    /// (a refusal that found the row unended).
    async fn write(&self, ledger: &Ledger, row: i64) -> Result<bool, ledger::LedgerError> {
        match self {
            Self::Created {
                provider,
                upstream_id,
                task_id,
                status,
                answer,
                first_poll,
            } => {
                let done = ledger::Created {
                    provider,
                    upstream_id,
                    task_id,
                    status: *status,
                    answer,
                    first_poll: *first_poll,
                };
                ledger.created(row, &done).await.map(|()| false)
            }
            Self::Refused(answer) => ledger.refused(row, answer.as_ref()).await,
            Self::Unknown(provider) => ledger.outcome_unknown(row, provider).await.map(|()| false),
        }
    }
}

/// Submit to the model's providers in order; the next is tried only when one proves
/// it created no task. Each attempt is named on the ledger row first.
async fn forward(
    order: &SubmitOrder,
    ledger: Option<(&Ledger, i64)>,
    attempted: &mut Attempted,
) -> Result<SealedTask, Failure> {
    let model = &order.model;
    let mut refusal = None;
    for (n, provider) in model.providers.iter().enumerate() {
        attempted.provider = Some(provider.name.clone());
        // The row names the first provider from the start; each next one is noted.
        if n > 0
            && let Some((ledger, row)) = ledger
            && let Err(e) = ledger.attempt(row, &provider.name).await
        {
            tracing::warn!(row, error = %e, "ledger update failed before a provider attempt");
        }
        let span = crate::traces::span(|| {
            crate::traces::traced!(
                "upstream submit",
                otel.kind = "client",
                mediagate.provider = provider.name.as_str(),
                mediagate.step = "submit",
                mediagate.attempt = n as i64 + 1,
                http.response.status_code = tracing::field::Empty,
            )
        });
        let submitted = provider.submit(model.call(), &order.params);
        match tracing::Instrument::instrument(submitted, span).await {
            Ok(accepted) => {
                attempted.upstream_time = Some(accepted.upstream_time);
                return seal(order, provider, accepted);
            }
            Err(SubmitError::Refused(e)) => {
                let e = ApiError::from(e);
                tracing::warn!(provider = %provider.name, code = e.code, "provider refused the submit; trying the next one");
                refusal = Some(e);
            }
            Err(SubmitError::Rejected(e)) => return Err(Failure::Rejected(e.into())),
            Err(SubmitError::Unknown(e)) => {
                return Err(Failure::Unknown(Box::new((
                    e.into(),
                    provider.name.clone(),
                ))));
            }
        }
    }
    let e = refusal.unwrap_or_else(|| ApiError::no_provider("the model has no usable provider"));
    Err(Failure::Refused(e))
}

/// The created task's sealed id.
fn seal(
    order: &SubmitOrder,
    provider: &Provider,
    accepted: Accepted,
) -> Result<SealedTask, Failure> {
    let task = TaskId {
        provider: provider.name.clone(),
        upstream_id: accepted.upstream_id,
        model: order.model.id.clone(),
        kind: order.model.kind,
        owner: order.owner.to_string(),
        created: unix_now(),
        openai: order.endpoint == Endpoint::OpenAiVideos,
    };
    match order.snapshot.sealer.seal(&task) {
        Ok(id) => Ok(SealedTask {
            task,
            id,
            status: accepted.status,
            openai: order.openai.clone(),
            first_poll: provider.poll_interval(),
        }),
        Err(_) => {
            // The task exists upstream: its id is logged so that it can be recovered.
            tracing::error!(
                provider = %provider.name,
                upstream_id = %provider.for_log(&task.upstream_id),
                "upstream task id too long to seal; the task was created upstream"
            );
            let e = ApiError::upstream_bad_answer("submit", "its task id is too long");
            Err(Failure::Unknown(Box::new((e, provider.name.clone()))))
        }
    }
}

/// The first request with this idempotency key is still being submitted: its answer
/// once it has one (polling its row) within `wait`, else 409.
async fn first_answer(ledger: &Ledger, row: i64, wait: Duration) -> Result<Answer, ApiError> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let seen = ledger.row(row).await.map_err(|e| {
            tracing::warn!(error = %e, "ledger read failed");
            ApiError::ledger_unavailable()
        })?;
        let Some(seen) = seen else {
            return Err(ApiError::idempotency_key_in_use());
        };
        if let Some(answer) = seen.answer() {
            return Ok(answer);
        }
        match seen.state {
            State::Submitting => {}
            State::UnknownOutcome => return Err(ApiError::submit_outcome_unknown()),
            // Refused and released: the client may try again as a new request.
            _ => return Err(ApiError::idempotency_key_in_use()),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ApiError::idempotency_key_in_use());
        }
        tokio::time::sleep(FIRST_REQUEST_LOOK).await;
    }
}

fn quota_exceeded(what: &str, resets_ms: i64) -> ApiError {
    let (resets_in, resets_at) = reset(resets_ms);
    ApiError::quota_exceeded(what, resets_in, resets_at)
}

/// How long until `resets_ms`, and that moment in Unix seconds.
fn reset(resets_ms: i64) -> (Duration, u64) {
    let now = ledger::now_ms();
    let resets_in = Duration::from_millis(u64::try_from(resets_ms - now).unwrap_or(0));
    (resets_in, u64::try_from(resets_ms / 1000).unwrap_or(0))
}

/// An error answer as the ledger keeps it.
fn error_answer(e: &ApiError) -> Answer {
    Answer {
        status: e.status.as_u16(),
        body: e.body_text(),
    }
}

/// Unix seconds in the ledger's clock, as the task's other times are written.
fn unix_now() -> u64 {
    ledger::now_ms().max(0) as u64 / 1000
}
