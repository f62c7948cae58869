//! A model's price: `estimate` over the validated parameters (reserved at submit),
//! `settle` over the parameters with the provider's final answer as `$answer` (what a
//! completed task costs; the estimate without it). Each yields a number of currency
//! units, read as [`Micros`].

use jaq_json::Val;
use serde_json::Value;

use crate::config::{PriceConfig, Scope};
use crate::money::Micros;
use crate::providers::jq::{Jq, JqVars, from_json, to_json};

/// A compiled price.
#[derive(Debug)]
pub struct Price {
    estimate: Jq,
    settle: Option<Jq>,
    /// What the model list shows: the operator's description, else the programs.
    pub description: String,
}

impl Price {
    pub fn compile(cfg: &PriceConfig, at: &mut Scope) -> Option<Self> {
        let estimate = Jq::at(at, "price.estimate", &cfg.estimate);
        let settle = Jq::optional_at(at, "price.settle", &cfg.settle);
        let description = cfg
            .description
            .clone()
            .unwrap_or_else(|| match &cfg.settle {
                None => format!("estimate: {}", cfg.estimate),
                Some(settle) => format!("estimate: {}; settle: {settle}", cfg.estimate),
            });
        Some(Self {
            estimate: estimate?,
            settle: settle?,
            description,
        })
    }

    /// Whether a completed task's cost is read from the provider's answer (then the
    /// parameters are kept with the task, for the settlement).
    pub fn settles(&self) -> bool {
        self.settle.is_some()
    }

    /// What a submit of `params` reserves.
    pub fn estimate(&self, params: &Value, vars: JqVars) -> Result<Micros, String> {
        amount("estimate", self.estimate.first(from_json(params), &vars))
    }

    /// What a completed task of `params` costs, the provider having answered
    /// `answer`: `settle`'s amount, or the estimate without one.
    pub fn settle(&self, params: &Value, answer: &Value, vars: JqVars) -> Result<Micros, String> {
        match &self.settle {
            None => self.estimate(params, vars),
            Some(settle) => {
                let vars = vars.with_answer(from_json(answer));
                amount("settle", settle.first(from_json(params), &vars))
            }
        }
    }
}

/// A program's first output as an amount: a number of units, not negative.
fn amount(program: &str, out: Result<Option<Val>, String>) -> Result<Micros, String> {
    let value = match out {
        Ok(Some(v)) => to_json(&v),
        Ok(None) => return Err(format!("`{program}` yielded nothing")),
        Err(e) => return Err(format!("`{program}` failed: {e}")),
    };
    // Not the value itself: a `settle` program reads the provider's answer, whose
    // values (result URLs, tokens) are never quoted.
    let kind = match &value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    let units = value
        .as_f64()
        .ok_or_else(|| format!("`{program}` yielded {kind}, not a number"))?;
    Micros::from_units(units)
        .ok_or_else(|| format!("`{program}` yielded {units}, not an amount from 0 to 1e9"))
}

/// Parameters to try a price on at load: the schema's own `examples` (objects), else
/// one object made of each property's `default`, first example, `const` or first
/// `enum` value, or its `minimum`, and the same with only the required properties (a
/// submit may leave the others out: `.duration * 0.1` fails on it, `(.duration // 5)
/// * 0.1` does not).
pub fn examples(schema: &Value) -> Vec<Value> {
    if let Some(given) = schema.get("examples").and_then(Value::as_array) {
        let objects: Vec<Value> = given.iter().filter(|e| e.is_object()).cloned().collect();
        if !objects.is_empty() {
            return objects;
        }
    }
    let mut full = serde_json::Map::new();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            let value = prop
                .get("default")
                .or_else(|| prop.pointer("/examples/0"))
                .or_else(|| prop.get("const"))
                .or_else(|| prop.pointer("/enum/0"))
                .or_else(|| prop.get("minimum"));
            if let Some(value) = value {
                full.insert(name.clone(), value.clone());
            }
        }
    }
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let least: serde_json::Map<String, Value> = full
        .iter()
        .filter(|(name, _)| required.contains(&name.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut all = vec![Value::Object(full)];
    if least.len() < all[0].as_object().map_or(0, |o| o.len()) {
        all.push(Value::Object(least));
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Problems;
    use crate::tasks::MediaKind;
    use serde_json::json;

    fn price(estimate: &str, settle: Option<&str>) -> Price {
        let cfg = PriceConfig {
            estimate: estimate.into(),
            settle: settle.map(str::to_string),
            description: None,
        };
        let mut problems = Problems::default();
        Price::compile(&cfg, &mut problems.at("families.f")).expect("compiles")
    }

    fn vars() -> JqVars {
        JqVars::new("m", "m", MediaKind::Video, None, None)
    }

    #[test]
    fn the_estimate_reads_the_parameters_and_the_settlement_the_answer() {
        let p = price(
            r#".duration * 0.10 * (if .resolution == "1080p" then 2 else 1 end)"#,
            Some(".duration as $asked | ($answer.output.seconds // $asked) * 0.10"),
        );
        let params = json!({"duration": 4, "resolution": "1080p"});
        assert_eq!(p.estimate(&params, vars()), Ok(Micros(800_000)));
        let answer = json!({"output": {"seconds": 10}});
        assert_eq!(p.settle(&params, &answer, vars()), Ok(Micros(1_000_000)));
        // An answer that says nothing of it: the parameters decide.
        assert_eq!(p.settle(&params, &json!({}), vars()), Ok(Micros(400_000)));
        assert!(p.settles());
    }

    #[test]
    fn without_settle_the_estimate_is_the_price() {
        let p = price("0.25", None);
        assert_eq!(
            p.settle(&json!({}), &json!({"x": 1}), vars()),
            Ok(Micros(250_000))
        );
        assert!(!p.settles());
        assert_eq!(p.description, "estimate: 0.25");
    }

    #[test]
    fn what_is_not_an_amount_is_an_error_naming_the_program() {
        for (program, says) in [
            (r#""ten""#, "not a number"),
            ("-1", "not an amount"),
            ("empty", "yielded nothing"),
            (".missing * 2", "failed"),
        ] {
            let e = price(program, None)
                .estimate(&json!({}), vars())
                .unwrap_err();
            assert!(
                e.contains("`estimate`") && e.contains(says),
                "{program}: {e}"
            );
        }
    }

    #[test]
    fn examples_come_from_the_schema() {
        let schema = json!({"properties": {
            "duration": {"type": "integer", "minimum": 1, "default": 5},
            "resolution": {"enum": ["720p", "1080p"]},
            "seed": {"type": "integer", "minimum": 0},
            "prompt": {"type": "string"}
        }});
        assert_eq!(
            examples(&schema),
            [
                json!({"duration": 5, "resolution": "720p", "seed": 0}),
                json!({})
            ]
        );
        let required = json!({"required": ["duration"], "properties": {
            "duration": {"type": "integer", "minimum": 1},
            "seed": {"type": "integer", "minimum": 0}
        }});
        assert_eq!(
            examples(&required),
            [json!({"duration": 1, "seed": 0}), json!({"duration": 1})]
        );
        let given = json!({"examples": [{"duration": 8}], "properties": {}});
        assert_eq!(examples(&given), [json!({"duration": 8})]);
    }
}
