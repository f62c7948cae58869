//! The parameter tables of docs/api.md (`mediagate models --markdown`): per endpoint,
//! the models that share a schema, with each parameter's type, whether it is required
//! and what it allows, read from the schema the gateway validates with.

use std::fmt::Write;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::sorted_models;
use crate::config::Endpoint;
use crate::models::Model;
use crate::snapshot::Snapshot;

/// Keywords the table reads; any other is shown as it is written.
const READ: [&str; 18] = [
    "type",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minItems",
    "maxItems",
    "uniqueItems",
    "items",
    "default",
    "description",
    "title",
];

pub fn markdown(snapshot: &Snapshot) -> String {
    let models = sorted_models(snapshot);
    let mut out = String::new();
    // `/v1/videos` takes OpenAI's fields, the same for every model (docs/api.md).
    for endpoint in Endpoint::ALL
        .into_iter()
        .filter(|e| *e != Endpoint::OpenAiVideos)
    {
        let _ = writeln!(out, "### `POST {}`\n", endpoint.path());
        let served: Vec<&Model> = models
            .iter()
            .copied()
            .filter(|m| m.served_on(endpoint))
            .collect();
        if served.is_empty() {
            out.push_str("No model is served here.\n\n");
        }
        for group in shared_schemas(&served) {
            let ids: Vec<String> = group.iter().map(|m| format!("`{}`", m.id)).collect();
            let _ = writeln!(out, "**{}** ({})\n", ids.join(", "), group[0].kind.as_str());
            table(&mut out, group[0].validator.schema());
        }
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

/// The models in groups with the same parameters (and kind), in order of their first
/// id: one table for each set of parameters.
fn shared_schemas<'m>(models: &[&'m Model]) -> Vec<Vec<&'m Model>> {
    let mut groups: Vec<Vec<&Model>> = Vec::new();
    for model in models {
        let same = |g: &&mut Vec<&Model>| {
            let first = g[0];
            first.kind == model.kind
                && (Arc::ptr_eq(&first.validator, &model.validator)
                    || first.validator.schema() == model.validator.schema())
        };
        match groups.iter_mut().find(same) {
            Some(group) => group.push(model),
            None => groups.push(vec![model]),
        }
    }
    groups
}

fn table(out: &mut String, schema: &Value) {
    let empty = Map::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    out.push_str("| parameter | type | required | allowed |\n|---|---|---|---|\n");
    // Required parameters first, then the others, each by name.
    let mut props: Vec<(&String, &Value)> = props.iter().collect();
    props.sort_by_key(|(name, _)| !required.contains(&name.as_str()));
    for (name, prop) in props {
        let required = match (required.contains(&name.as_str()), prop) {
            (_, Value::Bool(false)) => "—",
            (true, _) => "yes",
            (false, _) => "no",
        };
        let (ty, allowed) = describe(prop);
        let _ = writeln!(out, "| `{name}` | {ty} | {required} | {} |", cell(&allowed));
    }
    out.push('\n');
    if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
        out.push_str("Other parameters are accepted and passed on as given.\n\n");
    }
    let rest: Map<String, Value> = schema
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| {
            !["type", "properties", "required", "additionalProperties"].contains(&k.as_str())
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !rest.is_empty() {
        let _ = writeln!(out, "Also: `{}`\n", Value::Object(rest));
    }
}

/// A parameter's type and what it allows, in words.
fn describe(schema: &Value) -> (String, String) {
    let obj = match schema {
        Value::Bool(false) => return ("—".into(), "not accepted".into()),
        Value::Object(obj) => obj,
        _ => return ("any".into(), "anything".into()),
    };
    let ty = type_of(obj);
    let mut parts = limits(obj);
    if let Some(items) = obj.get("items") {
        let (_, each) = describe(items);
        if each != "any" {
            parts.push(format!("each {each}"));
        }
    }
    if let Some(default) = obj.get("default") {
        parts.push(format!("default `{default}`"));
    }
    let other: Map<String, Value> = obj
        .iter()
        .filter(|(k, _)| !READ.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !other.is_empty() {
        parts.push(format!("`{}`", Value::Object(other)));
    }
    for note in ["title", "description"] {
        if let Some(text) = obj.get(note).and_then(Value::as_str) {
            parts.push(text.to_string());
        }
    }
    let allowed = if parts.is_empty() {
        "any".to_string()
    } else {
        parts.join("; ")
    };
    (ty, allowed)
}

/// `string`, `integer or string`, `array of string`.
fn type_of(obj: &Map<String, Value>) -> String {
    let ty = match obj.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => {
            let names: Vec<&str> = ts.iter().filter_map(Value::as_str).collect();
            names.join(" or ")
        }
        _ => "any".into(),
    };
    match obj.get("items").and_then(Value::as_object) {
        Some(items) if ty == "array" => format!("array of {}", type_of(items)),
        _ => ty,
    }
}

/// Allowed values, ranges, lengths and counts.
fn limits(obj: &Map<String, Value>) -> Vec<String> {
    let mut parts = Vec::new();
    let code = |v: &Value| match v {
        Value::String(s) => format!("`{s}`"),
        other => format!("`{other}`"),
    };
    match obj.get("enum").and_then(Value::as_array).map(Vec::as_slice) {
        Some([only]) => parts.push(format!("only {}", code(only))),
        Some(values) => {
            let values: Vec<String> = values.iter().map(code).collect();
            parts.push(format!("one of {}", values.join(", ")));
        }
        None => {}
    }
    if let Some(value) = obj.get("const") {
        parts.push(format!("only {}", code(value)));
    }
    if obj.get("type").and_then(Value::as_str) == Some("boolean") && parts.is_empty() {
        parts.push("`true` or `false`".into());
    }
    let at = |k: &str| obj.get(k).map(|v| v.to_string());
    // `unit` is (one, many): "at most 1 item", "1 to 7 items".
    let span = |low: Option<String>, high: Option<String>, unit: (&str, &str)| {
        let unit = |n: &str| if n == "1" { unit.0 } else { unit.1 };
        match (low, high) {
            (Some(l), Some(h)) if l == h => Some(format!("exactly {l}{}", unit(&h))),
            (Some(l), Some(h)) => Some(format!("{l} to {h}{}", unit(&h))),
            (Some(l), None) => Some(format!("at least {l}{}", unit(&l))),
            (None, Some(h)) => Some(format!("at most {h}{}", unit(&h))),
            (None, None) => None,
        }
    };
    parts.extend(span(at("minimum"), at("maximum"), ("", "")));
    parts.extend(at("exclusiveMinimum").map(|v| format!("more than {v}")));
    parts.extend(at("exclusiveMaximum").map(|v| format!("less than {v}")));
    parts.extend(span(
        at("minLength"),
        at("maxLength"),
        (" character", " characters"),
    ));
    parts.extend(span(at("minItems"), at("maxItems"), (" item", " items")));
    if obj.get("uniqueItems") == Some(&Value::Bool(true)) {
        parts.push("no duplicates".into());
    }
    if let Some(pattern) = obj.get("pattern").and_then(Value::as_str) {
        parts.push(format!("matching `{pattern}`"));
    }
    if let Some(format) = obj.get("format").and_then(Value::as_str) {
        parts.push(format!("format `{format}`"));
    }
    parts
}

/// Text for a table cell: `|` would end it, a line break would end the row.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parameters_in_words() {
        let d = |s: Value| describe(&s);
        assert_eq!(
            d(json!({"type": "integer", "minimum": 5, "maximum": 10})),
            ("integer".into(), "5 to 10".into())
        );
        assert_eq!(
            d(json!({"type": "string", "enum": ["540p", "720p"]})),
            ("string".into(), "one of `540p`, `720p`".into())
        );
        assert_eq!(d(json!(false)), ("—".into(), "not accepted".into()));
        assert_eq!(
            d(
                json!({"type": "array", "maxItems": 7, "items": {"type": "string", "pattern": "^a|b$"}})
            ),
            (
                "array of string".into(),
                "at most 7 items; each matching `^a|b$`".into()
            )
        );
        assert_eq!(
            d(json!({"type": "string", "minLength": 1, "maxLength": 10})),
            ("string".into(), "1 to 10 characters".into())
        );
        assert_eq!(
            d(json!({"type": "boolean"})),
            ("boolean".into(), "`true` or `false`".into())
        );
        assert_eq!(d(json!({"type": "integer", "enum": [10]})).1, "only `10`");
        assert_eq!(
            d(json!({"type": "string", "minLength": 1})).1,
            "at least 1 character"
        );
        // What the table does not read is shown as written.
        assert_eq!(
            d(json!({"anyOf": [{"type": "string"}]})).1,
            r#"`{"anyOf":[{"type":"string"}]}`"#
        );
        assert_eq!(cell("`^(a|b)$`"), "`^(a\\|b)$`");
    }
}
