//! `[families.*]` and `[schemas.*]`: every model with its providers and its compiled
//! parameter schema (shared by the models of a family).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::FastMap;
use crate::config::{
    DEFAULT_OPENAI_REQUEST, Endpoint, FamilyConfig, PriceConfig, Problems, RoutesFile, Scope,
};
use crate::models::{MAX_VIDEO_SECONDS, Model, ParamsValidator, ResultsPolicy, SECONDS_PARAMS};
use crate::models::{Price, price_examples};
use crate::providers::Provider;
use crate::providers::jq::{Jq, JqVars};
use crate::tasks::MediaKind;

pub(super) fn compile(
    file: &RoutesFile,
    providers: &FastMap<String, Arc<Provider>>,
    storage_on: bool,
    p: &mut Problems,
) -> FastMap<String, Arc<Model>> {
    let mut models: FastMap<String, Arc<Model>> = FastMap::default();
    for (family, cfg) in &file.families {
        let mut at = p.at(format!("families.{family}"));
        let Some((chain, validator, examples)) = compile_family(file, cfg, providers, &mut at)
        else {
            continue;
        };
        let openai_request = openai_request(cfg, &mut at);
        let mut endpoints = cfg.endpoints.clone();
        if openai_request.is_some() && !endpoints.contains(&Endpoint::OpenAiVideos) {
            endpoints.push(Endpoint::OpenAiVideos);
        }
        for id in &cfg.models {
            if id.is_empty() {
                at.push("models", "a model id is empty");
                continue;
            }
            let price = model_price(cfg, id, &examples, &mut at);
            let model = Model {
                price,
                id: id.clone(),
                family: family.clone(),
                kind: cfg.kind,
                endpoints: endpoints.clone(),
                openai_request: openai_request.clone(),
                upstream_model: cfg.upstream_models.get(id).unwrap_or(id).clone(),
                providers: chain.clone(),
                validator: validator.clone(),
                default_seconds: cfg.default_seconds,
                results: results_policy(cfg, id, storage_on),
            };
            if let Some(other) = models.insert(id.clone(), Arc::new(model)) {
                let msg = format!("`{id}` is also listed in family `{}`", other.family);
                at.push("models", msg);
            }
        }
    }
    models
}

/// The family's program from an OpenAI video request to its parameters, when its
/// models are served on `/v1/videos`: video families, unless `openai_videos = false`.
fn openai_request(cfg: &FamilyConfig, at: &mut Scope) -> Option<Arc<Jq>> {
    let listed = cfg.endpoints.contains(&Endpoint::OpenAiVideos);
    let served = cfg.kind == MediaKind::Video && cfg.openai_videos;
    if !served {
        if listed {
            let why = "lists `openai-videos`, which serves video families only, unless `openai_videos = false`";
            at.push("endpoints", why);
        }
        if cfg.openai_request.is_some() {
            at.push(
                "openai_request",
                "is for video families served on /v1/videos",
            );
        }
        return None;
    }
    let code = cfg
        .openai_request
        .as_deref()
        .unwrap_or(DEFAULT_OPENAI_REQUEST);
    Jq::at(at, "openai_request", code).map(Arc::new)
}

/// A model's price (its own, else its family's).
fn model_price(
    cfg: &FamilyConfig,
    id: &str,
    examples: &[Value],
    at: &mut Scope,
) -> Option<Arc<Price>> {
    match cfg.per_model.get(id).and_then(|m| m.price.as_ref()) {
        Some(own) => {
            let mut at = at.at(&format!("per_model.\"{id}\""));
            tried_price(own, cfg, id, examples, &mut at)
        }
        None => tried_price(cfg.price.as_ref()?, cfg, id, examples, at),
    }
}

/// A price compiled and tried on the schema's examples: a program that does not give
/// an amount for them is refused at load.
fn tried_price(
    price_cfg: &PriceConfig,
    cfg: &FamilyConfig,
    id: &str,
    examples: &[Value],
    at: &mut Scope,
) -> Option<Arc<Price>> {
    let price = Price::compile(price_cfg, at)?;
    let upstream = cfg.upstream_models.get(id).map_or(id, String::as_str);
    let vars = || JqVars::new(id, upstream, cfg.kind, None, None);
    for example in examples {
        let tried = price
            .estimate(example, vars())
            .and_then(|_| price.settle(example, &Value::Object(Default::default()), vars()));
        if let Err(e) = tried {
            at.push(
                "price",
                format!("for model `{id}` on the example {example}: {e}"),
            );
            return None;
        }
    }
    Some(Arc::new(price))
}

/// A family's providers in failover order, its validator, its parameter examples.
type CompiledFamily = (Vec<Arc<Provider>>, Arc<ParamsValidator>, Vec<Value>);

/// A family's provider chain, validator and the parameter examples its prices are
/// tried on; `None` when its schema does not compile.
fn compile_family(
    file: &RoutesFile,
    cfg: &FamilyConfig,
    providers: &FastMap<String, Arc<Provider>>,
    at: &mut Scope,
) -> Option<CompiledFamily> {
    for (list, empty) in [
        (cfg.models.is_empty(), "models"),
        (cfg.endpoints.is_empty(), "endpoints"),
        (cfg.providers.is_empty(), "providers"),
    ] {
        if list {
            at.push(empty, format!("lists no {}", empty.trim_end_matches('s')));
        }
    }
    let mut chain = Vec::new();
    for name in &cfg.providers {
        match providers.get(name) {
            Some(provider) => chain.push(provider.clone()),
            None if file.providers.contains_key(name) => {} // reported with the provider
            None => at.push("providers", format!("no provider named `{name}`")),
        }
    }
    for (field, named) in [
        (
            "upstream_models",
            cfg.upstream_models.keys().collect::<Vec<_>>(),
        ),
        ("per_model", cfg.per_model.keys().collect()),
    ] {
        for id in named.into_iter().filter(|id| !cfg.models.contains(id)) {
            at.push(field, format!("`{id}` is not one of this family's models"));
        }
    }
    let schema = at.check("schema", family_schema(&file.schemas, cfg))?;
    check_default_seconds(cfg, &schema, at);
    let examples = price_examples(&schema);
    let validator = ParamsValidator::compile(schema, cfg.allow_unknown_params)
        .map_err(|e| format!("invalid JSON Schema: {e}"));
    Some((chain, Arc::new(at.check("params", validator)?), examples))
}

/// A model's results settings: its own `per_model` entry over its family's.
fn results_policy(cfg: &FamilyConfig, id: &str, storage_on: bool) -> ResultsPolicy {
    let own = cfg.per_model.get(id).cloned().unwrap_or_default();
    let keep = own.keep_results.unwrap_or(cfg.keep_results);
    ResultsPolicy {
        keep_days: (storage_on && keep).then_some(own.keep_days.unwrap_or(cfg.keep_days)),
        max_bytes: own.max_result_bytes.unwrap_or(cfg.max_result_bytes),
    }
}

/// A video task is counted for the seconds it produces: a family whose submits may leave
/// the length out says how long its videos are then.
fn check_default_seconds(cfg: &FamilyConfig, schema: &Value, at: &mut Scope) {
    let Some(seconds) = cfg.default_seconds else {
        let required = schema.get("required").and_then(Value::as_array);
        let always_said = required.is_some_and(|r| {
            r.iter()
                .any(|name| SECONDS_PARAMS.iter().any(|s| name == s))
        });
        if cfg.kind == MediaKind::Video && !always_said {
            let msg = "a video family must say how many seconds a task produces when its submit names no `duration` or `seconds` (they count toward usage and quotas)";
            at.push("default_seconds", msg);
        }
        return;
    };
    if cfg.kind != MediaKind::Video {
        at.push("default_seconds", "only video families produce seconds");
    } else if !(1..=MAX_VIDEO_SECONDS).contains(&i64::from(seconds)) {
        let msg = format!("must be from 1 to {MAX_VIDEO_SECONDS}");
        at.push("default_seconds", msg);
    }
}

/// A family's parameter schema: its `params` laid over the named base `schema`.
fn family_schema(
    schemas: &BTreeMap<String, toml::Table>,
    family: &FamilyConfig,
) -> Result<Value, String> {
    let to_json = |t: &toml::Table| serde_json::to_value(t).map_err(|e| e.to_string());
    let mut schema = match &family.schema {
        Some(name) => to_json(
            schemas
                .get(name)
                .ok_or_else(|| format!("no schema named `{name}` in [schemas]"))?,
        )?,
        None => Value::Object(Default::default()),
    };
    let overlay = match &family.params {
        Some(params) => to_json(params)?,
        None if family.schema.is_some() => return Ok(schema),
        None => return Err("set `schema` or `params`".into()),
    };
    let (Value::Object(base), Value::Object(overlay)) = (&mut schema, overlay) else {
        return Err("schemas must be tables".into());
    };
    for (k, v) in overlay {
        match (k.as_str(), base.get_mut(&k), v) {
            ("properties", Some(Value::Object(props)), Value::Object(more)) => props.extend(more),
            (_, _, v) => {
                base.insert(k, v);
            }
        }
    }
    Ok(schema)
}
