//! The models the gateway serves: each with its kind, the endpoints it is served on,
//! its upstream name, its providers in failover order, and the JSON Schema its
//! parameters are validated with ([`params`]).

mod params;

use std::sync::Arc;

pub use self::params::ParamsValidator;
use crate::config::Endpoint;
use crate::providers::{Call, Provider};
use crate::tasks::MediaKind;

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
}

impl Model {
    /// Whether clients of `endpoint` may use this model.
    pub fn served_on(&self, endpoint: Endpoint) -> bool {
        self.endpoints.contains(&endpoint)
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
