//! The schemas of the document: the public answers (`api::shapes`, the error body)
//! and one submit body per model, named so that a client generator gets a type per
//! model.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::config::Endpoint;
use crate::models::Model;

/// `{"$ref": "#/components/schemas/NAME"}`.
pub(super) fn reference(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

/// The schemas of the answers, by component name.
pub(super) fn answers() -> BTreeMap<String, Value> {
    task_answers()
        .into_iter()
        .chain(other_answers())
        .chain(usage_answers())
        .map(|(name, s)| (name.to_string(), s))
        .collect()
}

fn kind() -> Value {
    json!({"type": "string", "enum": ["video", "image"]})
}

/// What submit, query and listing answer.
fn task_answers() -> [(&'static str, Value); 5] {
    let kind = kind();
    let status = json!({"type": "string", "enum": ["queued", "processing", "completed", "failed"]});
    let id = json!({"type": "string", "description": "The task id: store it to query the task."});
    let created = json!({"type": "integer", "minimum": 0, "description": "Unix seconds."});
    [
        (
            "Submitted",
            closed(
                &["id", "object", "model", "status", "created"],
                json!({
                    "id": id, "object": kind, "model": {"type": "string"}, "status": status,
                    "created": created,
                }),
            ),
        ),
        (
            "Task",
            closed(
                &[
                    "id", "object", "model", "status", "created", "urls", "error",
                ],
                json!({
                    "id": id, "object": kind, "model": {"type": "string"}, "status": status,
                    "created": created,
                    "progress": {"type": "integer", "minimum": 0, "maximum": 100,
                                 "description": "Only when the provider reports one."},
                    "video_url": {"type": "string", "description": "The first result of a video model."},
                    "image_url": {"type": "string", "description": "The first result of an image model."},
                    "urls": {"type": "array", "items": {"type": "string"}},
                    "error": {"anyOf": [{"type": "null"}, reference("TaskError")]},
                    "cost": reference("TaskCost"),
                }),
            ),
        ),
        (
            "TaskCost",
            closed(
                &["currency", "estimate", "settled"],
                json!({
                    "currency": {"type": "string", "description": "`[billing] currency`."},
                    "estimate": {"type": "number", "minimum": 0, "description": "Reserved at submit."},
                    "settled": {"type": ["number", "null"], "minimum": 0,
                                "description": "What the task cost, once it has ended (failed: 0)."},
                }),
            ),
        ),
        (
            "TaskError",
            closed(
                &["code", "message"],
                json!({
                    "code": {"type": "string"}, "message": {"type": "string"},
                }),
            ),
        ),
        ("TaskList", list("Task")),
    ]
}

/// The model list, the error body, health and readiness.
fn other_answers() -> [(&'static str, Value); 5] {
    let kind = kind();
    [
        (
            "Model",
            closed(
                &["id", "object", "kind", "parameters"],
                json!({
                    "id": {"type": "string", "description": "Exactly as configured; percent-encode it in a path."},
                    "object": {"const": "model"},
                    "kind": kind,
                    "parameters": {"type": "object",
                                   "description": "The JSON Schema (2020-12) of a submit body for this model, `model` included."},
                    "price": closed(&["currency", "description"], json!({
                        "currency": {"type": "string"},
                        "description": {"type": "string", "description": "How a task of this model is priced."},
                    })),
                    "created": {"type": "integer", "description": "On `/v1/models` only (OpenAI's `Model`): 0, not known."},
                    "owned_by": {"const": "mediagate", "description": "On `/v1/models` only (OpenAI's `Model`)."},
                }),
            ),
        ),
        ("ModelList", list("Model")),
        (
            "Error",
            closed(
                &["error"],
                json!({
                    "error": closed(&["message", "type", "code", "param"], json!({
                        "message": {"type": "string", "description": "For people."},
                        "type": {"type": "string"},
                        "code": {"type": "string", "description": "What to branch on."},
                        "param": {"type": ["string", "null"], "description": "The field at fault."},
                    })),
                }),
            ),
        ),
        (
            "Health",
            closed(&["status"], json!({"status": {"const": "ok"}})),
        ),
        (
            "Ready",
            closed(&["status"], json!({"status": {"const": "ready"}})),
        ),
    ]
}

/// The usage report, its lines and a budget's standing.
fn usage_answers() -> [(&'static str, Value); 3] {
    let amount = json!({"type": "number", "minimum": 0});
    let count = json!({"type": "integer", "minimum": 0});
    [
        (
            "Usage",
            closed(
                &[
                    "object", "key", "currency", "from", "to", "data", "total", "budget",
                ],
                json!({
                    "object": {"const": "usage"},
                    "key": {"type": "string", "description": "Your key's name."},
                    "currency": {"type": "string"},
                    "from": {"type": "string", "format": "date"},
                    "to": {"type": "string", "format": "date"},
                    "data": {"type": "array", "items": reference("UsageLine"),
                             "description": "Per UTC day and model, in that order."},
                    "total": reference("UsageLine"),
                    "budget": {"anyOf": [{"type": "null"}, closed(&["per_day", "per_month"], json!({
                        "per_day": {"anyOf": [{"type": "null"}, reference("BudgetPeriod")]},
                        "per_month": {"anyOf": [{"type": "null"}, reference("BudgetPeriod")]},
                    }))]},
                }),
            ),
        ),
        (
            "UsageLine",
            closed(
                &[
                    "tasks",
                    "completed",
                    "failed",
                    "video_seconds",
                    "spent",
                    "reserved",
                ],
                json!({
                    "date": {"type": "string", "format": "date"},
                    "model": {"type": "string"},
                    "tasks": count, "completed": count, "failed": count, "video_seconds": count,
                    "spent": amount, "reserved": amount,
                }),
            ),
        ),
        (
            "BudgetPeriod",
            closed(
                &["limit", "spent", "remaining", "resets_at"],
                json!({
                    "limit": amount, "spent": amount, "remaining": amount,
                    "resets_at": {"type": "integer", "description": "Unix seconds, 00:00 UTC."},
                }),
            ),
        ),
    ]
}

/// An object with exactly these properties, `required` of them always present.
fn closed(required: &[&str], properties: Value) -> Value {
    json!({
        "type": "object",
        "required": required,
        "properties": properties,
        "additionalProperties": false,
    })
}

/// A collection page of `item`s.
pub(super) fn list(item: &str) -> Value {
    closed(
        &["object", "data", "first_id", "last_id", "has_more"],
        json!({
            "object": {"const": "list"},
            "data": {"type": "array", "items": reference(item)},
            "first_id": {"type": ["string", "null"]},
            "last_id": {"type": ["string", "null"]},
            "has_more": {"type": "boolean"},
        }),
    )
}

/// Every model's submit body, under a component name made of its id.
pub(super) struct SubmitBodies {
    /// Model id → component name.
    names: BTreeMap<String, String>,
}

impl SubmitBodies {
    /// Names for `models`, sorted by id: ids keep their ASCII letters, digits, `.`,
    /// `-` and `_`; a space becomes `_` and any other character `uXXXX` (component
    /// names allow no more); the rare clash gets a number.
    pub fn name(models: &[&Model], schemas: &mut BTreeMap<String, Value>) -> Self {
        let mut names = BTreeMap::new();
        for model in models {
            let base = format!("Submit.{}", component_safe(&model.id));
            let mut name = base.clone();
            let mut n = 1;
            while schemas.contains_key(&name) {
                n += 1;
                name = format!("{base}.{n}");
            }
            schemas.insert(name.clone(), model.request_schema());
            names.insert(model.id.clone(), name);
        }
        Self { names }
    }

    /// The submit body of `endpoint`: one of its models' bodies, told apart by `model`.
    pub fn body(&self, models: &[&Model], endpoint: Endpoint) -> Value {
        let served: Vec<(&str, &str)> = models
            .iter()
            .filter(|m| m.served_on(endpoint))
            .filter_map(|m| Some((m.id.as_str(), self.names.get(&m.id)?.as_str())))
            .collect();
        if served.is_empty() {
            return json!({
                "type": "object",
                "required": ["model"],
                "properties": {"model": {"type": "string"}},
                "description": "No model is served on this endpoint now.",
            });
        }
        let mapping: BTreeMap<&str, String> = served
            .iter()
            .map(|(id, name)| (*id, format!("#/components/schemas/{name}")))
            .collect();
        json!({
            "oneOf": served.iter().map(|(_, name)| reference(name)).collect::<Vec<_>>(),
            "discriminator": {"propertyName": "model", "mapping": mapping},
        })
    }
}

/// `id` with only the characters component names allow.
fn component_safe(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for c in id.chars() {
        match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '-' | '_' => out.push(c),
            ' ' => out.push('_'),
            other => out.push_str(&format!("u{:04X}", u32::from(other))),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_names_keep_what_they_may_and_spell_out_the_rest() {
        assert_eq!(component_safe("sd_2.0_special"), "sd_2.0_special");
        assert_eq!(
            component_safe("eta 1.0 文生视频"),
            "eta_1.0_u6587u751Fu89C6u9891"
        );
        assert_eq!(component_safe("a/b+c"), "au002Fbu002Bc");
    }
}
