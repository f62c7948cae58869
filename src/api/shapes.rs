//! The public response shapes: what clients receive from submit, query, the listings
//! and the model list.

use serde::Serialize;
use serde_json::Value;

use crate::models::Model;
use crate::tasks::MediaKind;
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

/// A model a key may submit, with the JSON Schema of a submit body for it.
#[derive(Debug, Serialize)]
pub struct ModelView<'a> {
    pub id: &'a str,
    pub object: &'static str,
    pub kind: MediaKind,
    pub parameters: Value,
}

impl<'a> ModelView<'a> {
    pub fn of(model: &'a Model) -> Self {
        Self {
            id: &model.id,
            object: "model",
            kind: model.kind,
            parameters: model.request_schema(),
        }
    }
}

/// The models of an endpoint, by id; always one page.
pub type ModelList<'a> = List<'a, ModelView<'a>>;

impl<'a> ModelList<'a> {
    pub fn of(models: &[&'a Model]) -> Self {
        Self {
            object: "list",
            data: models.iter().map(|m| ModelView::of(m)).collect(),
            first_id: models.first().map(|m| m.id.as_str()),
            last_id: models.last().map(|m| m.id.as_str()),
            has_more: false,
        }
    }
}
