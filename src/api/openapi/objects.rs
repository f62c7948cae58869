//! The OpenAPI 3.1 objects the document is made of, typed: only the fields this
//! document uses. JSON Schemas stay `serde_json::Value`s (they come from routes.toml).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Document {
    pub openapi: &'static str,
    pub info: Info,
    pub tags: Vec<Tag>,
    pub paths: BTreeMap<String, PathItem>,
    pub components: Components,
    pub security: Vec<Security>,
}

#[derive(Serialize)]
pub(super) struct Info {
    pub title: &'static str,
    pub version: &'static str,
    pub description: &'static str,
}

#[derive(Serialize)]
pub(super) struct Tag {
    pub name: &'static str,
    pub description: &'static str,
}

/// `{"bearer": []}`: the scheme a request must satisfy; none for public operations.
pub(super) type Security = BTreeMap<&'static str, [(); 0]>;

#[derive(Serialize, Default)]
pub(super) struct PathItem {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub get: Option<Operation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub post: Option<Operation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delete: Option<Operation>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Operation {
    pub operation_id: String,
    pub summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub tags: [&'static str; 1],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<Parameter>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_body: Option<RequestBody>,
    pub responses: BTreeMap<String, Response>,
    /// `Some([])` for a public operation, overriding the document's Bearer default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security: Option<Vec<Security>>,
}

#[derive(Serialize)]
pub(super) struct Parameter {
    pub name: &'static str,
    #[serde(rename = "in")]
    pub location: &'static str,
    pub required: bool,
    pub description: &'static str,
    pub schema: Value,
}

#[derive(Serialize)]
pub(super) struct RequestBody {
    pub required: bool,
    pub content: BTreeMap<&'static str, MediaType>,
}

#[derive(Serialize, Clone)]
pub(super) struct MediaType {
    pub schema: Value,
}

/// A JSON body of `schema`.
pub(super) fn json_content(schema: Value) -> BTreeMap<&'static str, MediaType> {
    BTreeMap::from([("application/json", MediaType { schema })])
}

#[derive(Serialize)]
pub(super) struct Response {
    pub description: String,
    pub headers: BTreeMap<&'static str, Header>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<BTreeMap<&'static str, MediaType>>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub links: BTreeMap<&'static str, Link>,
}

/// A response header: inline, or a reference to `components.headers`.
#[derive(Serialize, Clone)]
#[serde(untagged)]
pub(super) enum Header {
    Ref {
        #[serde(rename = "$ref")]
        to: String,
    },
    Inline {
        description: &'static str,
        required: bool,
        schema: Value,
    },
}

impl Header {
    pub fn reference(name: &str) -> Self {
        Self::Ref {
            to: format!("#/components/headers/{name}"),
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Link {
    pub operation_id: String,
    pub parameters: BTreeMap<&'static str, &'static str>,
    pub description: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Components {
    pub schemas: BTreeMap<String, Value>,
    pub responses: BTreeMap<&'static str, Response>,
    pub headers: BTreeMap<&'static str, Header>,
    pub security_schemes: BTreeMap<&'static str, SecurityScheme>,
}

#[derive(Serialize)]
pub(super) struct SecurityScheme {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub scheme: &'static str,
    pub description: &'static str,
}
