//! The public response shapes: what clients receive from submit, query, the listings
//! and the model list.

use serde::Serialize;
use serde_json::Value;

use crate::config::Endpoint;
use crate::models::Model;
use crate::money::Micros;
use crate::tasks::MediaKind;
use crate::tasks::ledger::UsageRow;
pub use crate::tasks::openai::Video;
pub use crate::tasks::{SubmitResponse, TaskView};

/// A page of a collection (`object` is `"list"`): `after=last_id` asks for the next.
#[derive(Debug, Serialize)]
pub struct List<'a, T> {
    pub object: &'static str,
    pub data: Vec<T>,
    pub first_id: Option<&'a str>,
    pub last_id: Option<&'a str>,
    pub has_more: bool,
}

/// A page of tasks, newest first.
pub type TaskList<'a> = List<'a, TaskView<'a>>;

/// A page of `/v1/videos`, in the OpenAI SDK's cursor page shape.
pub type VideoList<'a> = List<'a, Video<'a>>;

/// A model a key may submit, with the JSON Schema of a submit body for it.
#[derive(Debug, Serialize)]
pub struct ModelView<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub kind: MediaKind,
    pub parameters: Value,
    /// What a task of it costs, when it has a price.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price: Option<PriceView<'a>>,
    /// On `/v1/models` only, the two fields of OpenAI's `Model` the SDKs type: when
    /// it was created (not known: 0) and who owns it (the gateway).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owned_by: Option<&'static str>,
}

/// A model's price as the model list describes it.
#[derive(Debug, Serialize)]
pub struct PriceView<'a> {
    pub currency: &'a str,
    pub description: &'a str,
}

impl<'a> ModelView<'a> {
    /// The model as `endpoint` lists it; its price in `currency`.
    pub fn of(model: &'a Model, currency: &'a str, endpoint: Endpoint) -> Self {
        let openai = endpoint == Endpoint::OpenAiVideos;
        Self {
            id: &model.id,
            object: "model",
            kind: model.kind,
            parameters: model.request_schema(),
            price: model.price.as_ref().map(|p| PriceView {
                currency,
                description: &p.description,
            }),
            created: openai.then_some(0),
            owned_by: openai.then_some("mediagate"),
        }
    }
}

/// The models of an endpoint, by id; always one page.
pub type ModelList<'a> = List<'a, ModelView<'a>>;

impl<'a> ModelList<'a> {
    pub fn of(models: &[&'a Model], currency: &'a str, endpoint: Endpoint) -> Self {
        Self {
            object: "list",
            data: models
                .iter()
                .map(|m| ModelView::of(m, currency, endpoint))
                .collect(),
            first_id: models.first().map(|m| m.id.as_str()),
            last_id: models.last().map(|m| m.id.as_str()),
            has_more: false,
        }
    }
}

/// `GET {usage}`: the key's own usage over a range of UTC days.
#[derive(Debug, Serialize)]
pub struct UsageReport<'a> {
    pub object: &'static str,
    /// The key's name.
    pub key: &'a str,
    pub currency: &'a str,
    pub from: String,
    pub to: String,
    /// Per day and model, in that order.
    pub data: Vec<UsageLine>,
    pub total: UsageLine,
    /// What remains of the key's budgets today and this month; `null` without one.
    pub budget: Option<BudgetView>,
}

/// Tasks of one day and model (or all of them, as a total: no `date` nor `model`).
#[derive(Debug, Serialize, Default)]
pub struct UsageLine {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Tasks the providers created.
    pub tasks: i64,
    pub completed: i64,
    pub failed: i64,
    pub video_seconds: i64,
    /// What finished tasks cost.
    pub spent: Micros,
    /// What unfinished tasks hold reserved.
    pub reserved: Micros,
}

impl UsageLine {
    pub fn of(row: &UsageRow) -> Self {
        Self {
            date: Some(crate::calendar::date_of_days(row.day)),
            model: Some(row.model.clone()),
            tasks: row.submitted,
            completed: row.completed,
            failed: row.failed,
            video_seconds: row.video_seconds,
            spent: Micros(row.spent),
            reserved: Micros(row.reserved),
        }
    }

    /// The sum of `lines`.
    pub fn total(lines: &[Self]) -> Self {
        let mut total = Self::default();
        for l in lines {
            total.tasks = total.tasks.saturating_add(l.tasks);
            total.completed = total.completed.saturating_add(l.completed);
            total.failed = total.failed.saturating_add(l.failed);
            total.video_seconds = total.video_seconds.saturating_add(l.video_seconds);
            total.spent = Micros(total.spent.0.saturating_add(l.spent.0));
            total.reserved = Micros(total.reserved.0.saturating_add(l.reserved.0));
        }
        total
    }
}

/// A key's budgets as they stand; a period it does not bound is `null`.
#[derive(Debug, Serialize)]
pub struct BudgetView {
    pub per_day: Option<BudgetPeriod>,
    pub per_month: Option<BudgetPeriod>,
}

/// One period of a budget: its limit, what was spent and reserved in it, what
/// remains, and when it starts again (Unix seconds, 00:00 UTC).
#[derive(Debug, Serialize)]
pub struct BudgetPeriod {
    pub limit: Micros,
    pub spent: Micros,
    pub remaining: Micros,
    pub resets_at: u64,
}
