//! Parameter validation: each family's JSON Schema, compiled once at load.

use jsonschema::error::ValidationErrorKind;
use serde_json::Value;

use crate::error::ApiError;

/// A compiled parameter schema shared by the models of one family.
pub struct ParamsValidator {
    validator: jsonschema::Validator,
    /// The schema exactly as validated (published by the model list and OpenAPI).
    schema: Value,
    /// Parameter names the schema lists, for "allowed parameters" messages.
    known: Vec<String>,
    /// Where the schema declares integers (`None`: nowhere).
    integers: Option<Integers>,
}

impl std::fmt::Debug for ParamsValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParamsValidator")
            .field("known", &self.known)
            .finish_non_exhaustive()
    }
}

impl ParamsValidator {
    /// Compile a schema. Unless `allow_unknown` is set, parameters the schema does not
    /// list are refused (`additionalProperties: false` is added when absent).
    pub fn compile(mut schema: Value, allow_unknown: bool) -> Result<Self, String> {
        let obj = schema
            .as_object_mut()
            .ok_or_else(|| "the schema must be a table".to_string())?;
        obj.entry("type").or_insert_with(|| "object".into());
        if !allow_unknown {
            obj.entry("additionalProperties")
                .or_insert(Value::Bool(false));
        }
        let known = obj
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        let validator = jsonschema::validator_for(&schema).map_err(|e| e.to_string())?;
        Ok(Self {
            validator,
            integers: Integers::of(&schema),
            schema,
            known,
        })
    }

    /// The JSON Schema the parameters (everything but `model`) are validated with.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Check parameters for `model`; the first problem becomes a 400 naming the field.
    /// Numbers the schema calls integers leave written as integers: JSON Schema takes
    /// `10.0` and `1e3` for integers, and what is counted and forwarded is `10`.
    pub fn check(&self, model: &str, params: &mut Value) -> Result<(), ApiError> {
        // The common case is valid: the cheap check first, errors only on failure.
        if !self.validator.is_valid(params)
            && let Some(err) = self.validator.iter_errors(params).next()
        {
            return Err(self.describe(model, &err));
        }
        match &self.integers {
            None => Ok(()),
            Some(integers) => integers.normalize(params).map_err(|(top, number)| {
                let msg = format!(
                    "invalid `{top}` for model `{model}`: {} is not an integer from {} to {}",
                    crate::error::quote(&number.to_string()),
                    i64::MIN,
                    i64::MAX
                );
                ApiError::invalid_parameter(top, msg)
            }),
        }
    }

    fn describe(&self, model: &str, err: &jsonschema::ValidationError<'_>) -> ApiError {
        let path = err.instance_path().as_str();
        // `/reference_images/3` → `reference_images`: clients name top-level fields.
        let top = path
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or("")
            .replace("~1", "/")
            .replace("~0", "~");
        match err.kind() {
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                let name = unexpected.first().cloned().unwrap_or_default();
                let allowed = if self.known.is_empty() {
                    "none".to_string()
                } else {
                    self.known.join(", ")
                };
                ApiError::unknown_parameter(
                    name.clone(),
                    format!(
                        "parameter `{}` is not accepted by model `{model}`; allowed parameters: {allowed}",
                        crate::error::quote(&name)
                    ),
                )
            }
            ValidationErrorKind::Required { property } => {
                let name = property.as_str().unwrap_or("").to_string();
                ApiError::invalid_parameter(
                    name.clone(),
                    format!("parameter `{name}` is required by model `{model}`"),
                )
            }
            ValidationErrorKind::FalseSchema => ApiError::unknown_parameter(
                top.clone(),
                format!(
                    "parameter `{}` cannot be specified for model `{model}`",
                    crate::error::quote(&top)
                ),
            ),
            _ => {
                // The library's message quotes the value, which may be a megabyte.
                let mut what = err.to_string();
                let value = err.instance().to_string();
                let quoted = crate::error::quote(&value);
                if quoted.len() < value.len() {
                    what = what.replace(&value, &quoted);
                }
                ApiError::invalid_parameter(
                    top.clone(),
                    format!(
                        "invalid `{}` for model `{model}`: {what}",
                        crate::error::quote(&top)
                    ),
                )
            }
        }
    }
}

/// The places of a schema where integers are declared: the value itself, members of an
/// object (`properties`) and elements of an array (`items`).
#[derive(Debug, Default)]
struct Integers {
    here: bool,
    properties: Vec<(String, Integers)>,
    items: Option<Box<Integers>>,
}

impl Integers {
    /// `None` when the schema declares no integer anywhere.
    fn of(schema: &Value) -> Option<Self> {
        let here = match schema.get("type") {
            Some(Value::String(t)) => t == "integer",
            // `["integer", "null"]` is an integer; with "number" any number is taken as is.
            Some(Value::Array(ts)) => {
                ts.iter().any(|t| t == "integer") && !ts.iter().any(|t| t == "number")
            }
            _ => false,
        };
        let properties: Vec<(String, Integers)> = schema
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(name, s)| Some((name.clone(), Self::of(s)?)))
            .collect();
        let items = schema.get("items").and_then(Self::of).map(Box::new);
        (here || !properties.is_empty() || items.is_some()).then_some(Self {
            here,
            properties,
            items,
        })
    }

    /// Rewrite every integer-valued number at a declared place of `params` as an
    /// integer; a number no `i64` holds is refused, with the top-level field it is in.
    fn normalize(&self, params: &mut Value) -> Result<(), (String, serde_json::Number)> {
        let Value::Object(map) = params else {
            return Ok(());
        };
        for (name, integers) in &self.properties {
            if let Some(value) = map.get_mut(name) {
                integers.visit(value).map_err(|n| (name.clone(), n))?;
            }
        }
        Ok(())
    }

    fn visit(&self, value: &mut Value) -> Result<(), serde_json::Number> {
        // 2^63: the first float past i64::MAX (which floats cannot write exactly).
        const END: f64 = 9_223_372_036_854_775_808.0;
        match value {
            Value::Number(n) if self.here && !n.is_i64() => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && (-END..END).contains(&f) => {
                    // In range and integral, so the conversion is exact.
                    *value = Value::from(f as i64);
                    Ok(())
                }
                _ => Err(n.clone()),
            },
            Value::Object(map) => {
                for (name, integers) in &self.properties {
                    if let Some(member) = map.get_mut(name) {
                        integers.visit(member)?;
                    }
                }
                Ok(())
            }
            Value::Array(elements) => match &self.items {
                Some(integers) => elements.iter_mut().try_for_each(|e| integers.visit(e)),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn alpha_open() -> ParamsValidator {
        ParamsValidator::compile(
            json!({
                "required": ["prompt"],
                "properties": {
                    "prompt": {"type": "string", "minLength": 1},
                    "seconds": {"type": "integer", "enum": [4, 8, 12]},
                    "reference_images": {"type": "array", "maxItems": 2, "items": {"type": "string"}}
                }
            }),
            false,
        )
        .unwrap()
    }

    #[test]
    fn accepts_allowed_values() {
        let v = alpha_open();
        v.check("m", &mut json!({"prompt": "a cat", "seconds": 12}))
            .unwrap();
    }

    #[test]
    fn refusal_names_the_field_and_what_is_allowed() {
        let v = alpha_open();
        let e = v
            .check("m", &mut json!({"prompt": "a", "seconds": 10}))
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("seconds"));
        assert!(
            e.message.contains("[4,8,12]") || e.message.contains("4"),
            "{}",
            e.message
        );

        let e = v.check("m", &mut json!({"seconds": 4})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("prompt"));
        assert!(e.message.contains("required"));

        let e = v
            .check(
                "m",
                &mut json!({"prompt": "a", "reference_images": ["a", "b", "c"]}),
            )
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("reference_images"));
    }

    #[test]
    fn unknown_parameters_are_refused_with_the_allowed_list() {
        let v = alpha_open();
        let e = v
            .check("m", &mut json!({"prompt": "a", "colour": "red"}))
            .unwrap_err();
        assert_eq!(e.code, "unknown_parameter");
        assert_eq!(e.param.as_deref(), Some("colour"));
        assert!(
            e.message.contains("prompt, reference_images, seconds"),
            "{}",
            e.message
        );
    }

    #[test]
    fn unknown_parameters_pass_when_the_route_allows_them() {
        let v =
            ParamsValidator::compile(json!({"properties": {"prompt": {"type": "string"}}}), true)
                .unwrap();
        v.check("m", &mut json!({"prompt": "a", "extra": 1}))
            .unwrap();
    }

    #[test]
    fn the_published_schema_is_the_one_validated() {
        let v = alpha_open();
        assert_eq!(v.schema()["type"], "object");
        assert_eq!(v.schema()["additionalProperties"], false);
        assert_eq!(
            v.schema()["properties"]["seconds"]["enum"],
            json!([4, 8, 12])
        );
        let open =
            ParamsValidator::compile(json!({"properties": {"prompt": {"type": "string"}}}), true)
                .unwrap();
        assert!(open.schema().get("additionalProperties").is_none());
    }

    #[test]
    fn integers_written_as_floats_leave_as_integers() {
        let v = alpha_open();
        for written in [json!(12.0), json!(1.2e1), json!(12)] {
            let mut params = json!({"prompt": "a", "seconds": written});
            v.check("m", &mut params).unwrap();
            assert!(params["seconds"].is_i64(), "{params}");
            assert_eq!(params["seconds"], 12);
        }
        let nested = ParamsValidator::compile(
            json!({"properties": {
                "frames": {"type": "array", "items": {"type": "integer"}},
                "crop": {"type": "object", "properties": {"x": {"type": ["integer", "null"]}}},
                "scale": {"type": "number"}
            }}),
            false,
        )
        .unwrap();
        let mut params = json!({"frames": [1.0, 2], "crop": {"x": 3e0}, "scale": 2.0});
        nested.check("m", &mut params).unwrap();
        assert_eq!(
            params.to_string(),
            r#"{"crop":{"x":3},"frames":[1,2],"scale":2.0}"#
        );
    }

    #[test]
    fn integers_no_i64_holds_are_refused_naming_the_field() {
        let v = ParamsValidator::compile(
            json!({"properties": {"seconds": {"type": "integer"}}}),
            false,
        )
        .unwrap();
        for huge in ["18446744073709551615", "1e19", "-1e300"] {
            let mut params: Value =
                serde_json::from_str(&format!(r#"{{"seconds": {huge}}}"#)).unwrap();
            let e = v.check("m", &mut params).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("seconds"), "{huge}");
            assert!(
                e.message.contains("is not an integer from"),
                "{}",
                e.message
            );
        }
    }

    #[test]
    fn a_huge_value_is_quoted_short() {
        let v = alpha_open();
        let long = "x".repeat(1_000_000);
        let e = v
            .check("m", &mut json!({"prompt": "a", "seconds": long.clone()}))
            .unwrap_err();
        assert!(e.message.len() < 1_000, "{} bytes", e.message.len());
        let e = v
            .check("m", &mut json!({"prompt": "a", long.clone(): 1}))
            .unwrap_err();
        assert!(e.message.len() < 1_000, "{} bytes", e.message.len());
        assert!(e.param.as_deref().is_some_and(|p| p.len() < 1_000));
    }

    #[test]
    fn a_broken_schema_is_a_load_error() {
        assert!(
            ParamsValidator::compile(json!({"properties": {"a": {"type": "nonsense"}}}), false)
                .is_err()
        );
    }
}
