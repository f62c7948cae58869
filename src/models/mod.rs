//! The models the gateway serves: each with its kind, the endpoints it is served on,
//! its upstream name, its providers in failover order, and the JSON Schema its
//! parameters are validated with ([`params`]).

mod openai;
mod params;
mod price;

use std::sync::Arc;

use serde_json::{Value, json};

pub use self::openai::OpenAiRequest;
pub use self::params::ParamsValidator;
pub use self::price::{Price, examples as price_examples};
use crate::config::Endpoint;
use crate::error::ApiError;
use crate::providers::jq::Jq;
use crate::providers::{Call, Provider};
use crate::tasks::MediaKind;

pub use crate::tasks::ledger::MAX_TASK_SECONDS as MAX_VIDEO_SECONDS;

/// The parameters a video's length is asked for with.
pub const SECONDS_PARAMS: [&str; 2] = ["duration", "seconds"];

/// A published model.
#[derive(Debug)]
pub struct Model {
    pub id: String,
    pub family: String,
    pub kind: MediaKind,
    pub endpoints: Vec<Endpoint>,
    pub upstream_model: String,
    /// In failover order.
    pub providers: Vec<Arc<Provider>>,
    pub validator: Arc<ParamsValidator>,
    /// Seconds a video task produces when the submit does not say.
    pub default_seconds: Option<u32>,
    /// Whether, and how, its results are kept in storage.
    pub results: ResultsPolicy,
    /// What a task costs; `None`: nothing.
    pub price: Option<Arc<Price>>,
    /// From an OpenAI video request to the model's parameters; `Some` exactly when the
    /// model is served on `/v1/videos`.
    pub openai_request: Option<Arc<Jq>>,
}

/// The family's `keep_results`, `keep_days` and `max_result_bytes`, storage allowing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultsPolicy {
    /// Days a stored result is kept; `None`: results are not copied (the family
    /// says so, or storage is off).
    pub keep_days: Option<u32>,
    /// A larger result is not copied.
    pub max_bytes: u64,
}

impl Model {
    /// Whether clients of `endpoint` may use this model.
    pub fn served_on(&self, endpoint: Endpoint) -> bool {
        self.endpoints.contains(&endpoint)
    }

    /// Seconds of video a submit of validated `params` produces, for usage and quotas:
    /// its `duration` or `seconds`, else the family's `default_seconds`; 0 for images.
    pub fn video_seconds(&self, params: &Value) -> Result<i64, ApiError> {
        if self.kind != MediaKind::Video {
            return Ok(0);
        }
        let asked = SECONDS_PARAMS
            .iter()
            .find_map(|&name| Some((name, params.get(name).filter(|v| !v.is_null())?)));
        let Some((name, value)) = asked else {
            return Ok(self.default_seconds.map_or(0, i64::from));
        };
        match value.as_i64() {
            Some(seconds) if (1..=MAX_VIDEO_SECONDS).contains(&seconds) => Ok(seconds),
            _ => Err(ApiError::invalid_parameter(
                name,
                format!(
                    "invalid `{name}` for model `{}`: a whole number of seconds from 1 to {MAX_VIDEO_SECONDS} is expected",
                    self.id
                ),
            )),
        }
    }

    /// The JSON Schema of a whole submit body for this model: its parameters as
    /// validated, with the fields the gateway reads itself ([`gateway_fields`]).
    pub fn request_schema(&self) -> Value {
        let mut schema = self.validator.schema().clone();
        let Value::Object(obj) = &mut schema else {
            return schema;
        };
        let fields = gateway_fields(&self.id);
        if let Value::Object(props) = obj.entry("properties").or_insert_with(|| json!({})) {
            for (name, field) in &fields {
                props.insert((*name).into(), field.clone());
            }
        }
        if let Value::Array(required) = obj.entry("required").or_insert_with(|| json!([])) {
            required.retain(|r| r != "model");
            required.insert(0, "model".into());
        }
        schema
    }

    /// The model as a provider's programs see it.
    pub fn call(&self) -> Call<'_> {
        Call {
            model: &self.id,
            upstream_model: &self.upstream_model,
            kind: self.kind,
        }
    }
}

/// The fields of a submit body that the gateway reads itself, beside the model's own
/// parameters (which the model's schema describes).
fn gateway_fields(id: &str) -> [(&'static str, Value); 2] {
    [
        (
            "model",
            json!({
                "type": "string",
                "const": id,
                "description": "The model identifier, exactly as listed.",
            }),
        ),
        (
            "callback_url",
            json!({
                // `null` is read as no callback URL, as clients that send every
                // field of their own request type do.
                "type": ["string", "null"],
                "format": "uri",
                "maxLength": crate::webhooks::target::MAX_URL_LEN,
                "description": "Where the finished task is posted (a signed webhook, in the shape a query answers). An absolute https:// URL outside private networks; the key must have a webhook secret. Without it (or with null), the key's own webhook_url, if any.",
            }),
        ),
    ]
}
