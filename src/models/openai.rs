//! An OpenAI video request (`POST /v1/videos`) made a model's parameters: its fields
//! checked in OpenAI's terms, the family's `openai_request` program run over them,
//! the result validated by the model's schema, and a refusal named after the OpenAI
//! field it came from.

use serde_json::{Value, json};

use super::{MAX_VIDEO_SECONDS, Model};
use crate::error::ApiError;
use crate::providers::jq::{JqVars, from_json, to_json};

/// The fields of an OpenAI video request, as sent (`model` aside).
#[derive(Debug, Default, Clone)]
pub struct OpenAiRequest {
    pub prompt: Option<String>,
    pub seconds: Option<String>,
    pub size: Option<String>,
    /// A URL the provider can fetch: the request's own, or the gateway's signed link
    /// to an uploaded file.
    pub input_reference: Option<String>,
}

/// Which OpenAI field a model parameter comes from, for a refusal that names it;
/// the default program's names (a family's own program may use others: those are
/// named as they are).
fn openai_field(param: &str) -> &str {
    match param {
        "duration" | "seconds" => "seconds",
        "aspect_ratio" | "resolution" => "size",
        "first_image" | "reference_images" => "input_reference",
        other => other,
    }
}

impl Model {
    /// The model's parameters for `req`, validated; refusals name the OpenAI field.
    pub fn openai_params(&self, req: &OpenAiRequest) -> Result<Value, ApiError> {
        let Some(program) = &self.openai_request else {
            return Err(ApiError::unknown_model(&self.id, "/v1/videos"));
        };
        let input = openai_input(req)?;
        let schema = from_json(self.validator.schema());
        let vars = JqVars::new(
            &self.id,
            &self.upstream_model,
            self.kind,
            None,
            Some(schema),
        );
        let mut params = match program.first(from_json(&input), &vars) {
            Ok(Some(v)) => to_json(&v),
            Ok(None) => Value::Null,
            Err(e) => {
                tracing::warn!(model = %self.id, error = %e, "openai_request failed");
                let msg = format!(
                    "the request cannot be made parameters of model `{}`: {e}",
                    self.id
                );
                return Err(ApiError::invalid_parameter("model", msg));
            }
        };
        if !params.is_object() {
            let msg = format!(
                "the request cannot be made parameters of model `{}`",
                self.id
            );
            return Err(ApiError::invalid_parameter("model", msg));
        }
        self.validator.check(&self.id, &mut params).map_err(|e| {
            let Some(param) = e.param.clone() else {
                return e;
            };
            let field = openai_field(&param).to_string();
            if field == param {
                return e;
            }
            let message = format!("`{field}`: {}", e.message);
            ApiError {
                message: message.into(),
                param: Some(field),
                ..e
            }
        })?;
        Ok(params)
    }
}

/// The program's input: the request with `seconds` a number and `size` also as
/// `width` and `height`, each checked in OpenAI's terms first.
fn openai_input(req: &OpenAiRequest) -> Result<Value, ApiError> {
    let seconds = match req.seconds.as_deref() {
        None => None,
        Some(text) => Some(
            whole(text, 6)
                .map(i64::from)
                .filter(|s| (1..=MAX_VIDEO_SECONDS).contains(s))
                .ok_or_else(|| {
                    let msg = format!(
                        "`seconds` must be a whole number of seconds from 1 to {MAX_VIDEO_SECONDS}, as a string (\"8\")"
                    );
                    ApiError::invalid_parameter("seconds", msg)
                })?,
        ),
    };
    let (width, height) = match req.size.as_deref() {
        None => (None, None),
        Some(size) => {
            let (w, h) = size_of(size).ok_or_else(|| {
                let msg = "`size` must be WIDTHxHEIGHT in pixels, such as \"1280x720\"";
                ApiError::invalid_parameter("size", msg.into())
            })?;
            (Some(w), Some(h))
        }
    };
    Ok(json!({
        "prompt": req.prompt,
        "seconds": seconds,
        "size": req.size,
        "width": width,
        "height": height,
        "input_reference": req.input_reference,
    }))
}

/// `WIDTHxHEIGHT`, each a positive number of at most five digits.
fn size_of(size: &str) -> Option<(u32, u32)> {
    let (w, h) = size.split_once('x')?;
    let dim = |t| whole(t, 5).filter(|&n| n > 0);
    Some((dim(w)?, dim(h)?))
}

/// A whole number of at most `max_digits` digits, nothing else (no sign, no point).
fn whole(text: &str, max_digits: usize) -> Option<u32> {
    let ok =
        !text.is_empty() && text.len() <= max_digits && text.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| text.parse().ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_width_x_height() {
        assert_eq!(size_of("1280x720"), Some((1280, 720)));
        for bad in [
            "1280", "x720", "0x720", "1280x", "1280X720", "+1x2", "123456x1",
        ] {
            assert_eq!(size_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn seconds_are_digits_in_range() {
        let req = |s: &str| OpenAiRequest {
            seconds: Some(s.into()),
            ..OpenAiRequest::default()
        };
        assert_eq!(openai_input(&req("8")).unwrap()["seconds"], 8);
        for bad in ["", "0", "8.5", "-1", "abc", "100000"] {
            let e = openai_input(&req(bad)).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("seconds"), "{bad}");
        }
    }
}
