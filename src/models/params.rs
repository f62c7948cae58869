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
            schema,
            known,
        })
    }

    /// The JSON Schema the parameters (everything but `model`) are validated with.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// Check parameters for `model`; the first problem becomes a 400 naming the field.
    pub fn check(&self, model: &str, params: &Value) -> Result<(), ApiError> {
        // The common case is valid: the cheap check first, errors only on failure.
        if self.validator.is_valid(params) {
            return Ok(());
        }
        let Some(err) = self.validator.iter_errors(params).next() else {
            return Ok(());
        };
        Err(self.describe(model, &err))
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
                        "parameter `{name}` is not accepted by model `{model}`; allowed parameters: {allowed}"
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
                format!("parameter `{top}` cannot be specified for model `{model}`"),
            ),
            _ => ApiError::invalid_parameter(
                top.clone(),
                format!("invalid `{top}` for model `{model}`: {}", err),
            ),
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
        v.check("m", &json!({"prompt": "a cat", "seconds": 12}))
            .unwrap();
    }

    #[test]
    fn refusal_names_the_field_and_what_is_allowed() {
        let v = alpha_open();
        let e = v
            .check("m", &json!({"prompt": "a", "seconds": 10}))
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("seconds"));
        assert!(
            e.message.contains("[4,8,12]") || e.message.contains("4"),
            "{}",
            e.message
        );

        let e = v.check("m", &json!({"seconds": 4})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("prompt"));
        assert!(e.message.contains("required"));

        let e = v
            .check(
                "m",
                &json!({"prompt": "a", "reference_images": ["a", "b", "c"]}),
            )
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("reference_images"));
    }

    #[test]
    fn unknown_parameters_are_refused_with_the_allowed_list() {
        let v = alpha_open();
        let e = v
            .check("m", &json!({"prompt": "a", "colour": "red"}))
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
        v.check("m", &json!({"prompt": "a", "extra": 1})).unwrap();
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
    fn a_broken_schema_is_a_load_error() {
        assert!(
            ParamsValidator::compile(json!({"properties": {"a": {"type": "nonsense"}}}), false)
                .is_err()
        );
    }
}
