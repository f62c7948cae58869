//! Provider blocks of routes.toml: `[providers.NAME]` and its `submit` / `query`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// One upstream provider.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// `https://host[:port][/prefix]`, `http://…`, or `builtin:simulator`.
    pub base_url: String,
    #[serde(default)]
    pub auth: Option<AuthConfig>,
    /// Static headers sent on every call.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_ms: u64,
    #[serde(default = "default_submit_timeout")]
    pub submit_timeout_ms: u64,
    #[serde(default = "default_query_timeout")]
    pub query_timeout_ms: u64,
    /// How often the background tracker asks about an unfinished task at first; the
    /// interval grows by half at each unchanged answer, up to `[tracker]
    /// max_interval_ms`.
    #[serde(default = "default_poll_interval")]
    pub poll_interval_ms: u64,
    /// Status requests of the tracker in flight to this provider at most.
    #[serde(default = "default_poll_in_flight")]
    pub poll_max_in_flight: usize,
    /// Largest upstream answer (submit, status, result) read into memory; a longer one
    /// is an unusable answer.
    #[serde(default = "default_max_answer_bytes")]
    pub max_answer_bytes: usize,
    /// Extra PEM CA file trusted for this provider, besides the webpki roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Words that identify the upstream (brand, host) and are removed from error
    /// messages before they reach clients. The host and the secret are always removed.
    #[serde(default)]
    pub redact: Vec<String>,
    /// Private networks (CIDR blocks such as `10.20.0.0/16`, or single addresses) that
    /// links and redirects of this provider may lead into, e.g. storage on an internal
    /// network. Without it only the provider's own origin may be private.
    #[serde(default)]
    pub allow_private_networks: Vec<String>,
    pub submit: SubmitConfig,
    pub query: QueryConfig,
    /// Second request run when a task is completed, turning a result reference
    /// (a file id, a separate result endpoint) into URLs.
    #[serde(default)]
    pub result: Option<ResultConfig>,
    /// The result is only downloadable with our key: clients get a gateway URL that
    /// streams it from this request.
    #[serde(default)]
    pub content: Option<ContentConfig>,
    /// Stops an unfinished task (`DELETE …/{id}`); without it such a task cannot be
    /// cancelled (409 `not_cancelable`).
    #[serde(default)]
    pub cancel: Option<CancelConfig>,
}

/// `[providers.NAME.cancel]`: the request that stops an unfinished task; a 2xx
/// answer means it was stopped, unless `success` says otherwise.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelConfig {
    #[serde(default = "default_post")]
    pub method: String,
    /// jq producing the path (`$id` is the upstream id).
    pub path: String,
    /// jq producing an object of query parameters.
    #[serde(default)]
    pub query: Option<String>,
    /// jq over a 2xx answer's JSON body (null when it has none): `true` when the
    /// provider stopped the task, e.g. `.status == "canceled"`.
    #[serde(default)]
    pub success: Option<String>,
}

fn default_post() -> String {
    "POST".into()
}

fn default_max_answer_bytes() -> usize {
    1024 * 1024
}
fn default_connect_timeout() -> u64 {
    3_000
}
fn default_submit_timeout() -> u64 {
    30_000
}
fn default_query_timeout() -> u64 {
    10_000
}
fn default_poll_interval() -> u64 {
    5_000
}
fn default_poll_in_flight() -> usize {
    8
}

/// How our secret for a provider is sent.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// Header name; `Authorization` by default.
    #[serde(default = "default_auth_header")]
    pub header: String,
    /// Word before the secret (`Bearer`, `Token`, `Key`); empty for a bare secret.
    #[serde(default = "default_auth_scheme")]
    pub scheme: String,
    /// Environment variable holding the secret.
    pub secret_env: Option<String>,
    /// File holding the secret.
    pub secret_file: Option<PathBuf>,
}

fn default_auth_header() -> String {
    "authorization".into()
}
fn default_auth_scheme() -> String {
    "Bearer".into()
}

/// The submit call. jq programs see the validated parameters as `.`; the variables
/// are listed in `providers::jq::VARIABLES`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitConfig {
    #[serde(default = "default_post")]
    pub method: String,
    /// jq producing the path (appended to the base URL).
    pub path: String,
    /// jq producing an object of query parameters.
    #[serde(default)]
    pub query: Option<String>,
    /// jq producing the JSON body; the parameters with `model` added when absent.
    #[serde(default)]
    pub body: Option<String>,
    /// Static headers sent on submit only.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// jq predicate on the answer body that must be true for success (e.g. `.code == 0`).
    #[serde(default)]
    pub success: Option<String>,
    /// jq classifying an answer that failed `success`: `"rate_limited"`, `"auth"` or
    /// `"unavailable"` mean the upstream declined and created no task (the next
    /// provider is tried); anything else (the default) is an invalid request.
    #[serde(default)]
    pub refusal: Option<String>,
    /// jq extracting the upstream task id from the answer.
    pub id: String,
    /// jq extracting the upstream status from the submit answer, if it has one.
    #[serde(default)]
    pub status: Option<String>,
    /// jq extracting an error message from a refused submit.
    #[serde(default)]
    pub error_message: Option<String>,
}

fn default_get() -> String {
    "GET".into()
}

/// The status query. jq programs see the upstream answer as `.` and `$id` (the
/// upstream id) among the variables of `providers::jq::VARIABLES`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryConfig {
    #[serde(default = "default_get")]
    pub method: String,
    /// jq producing the path.
    pub path: String,
    /// jq producing an object of query parameters.
    #[serde(default)]
    pub query: Option<String>,
    /// jq extracting the upstream status word.
    pub status: String,
    /// Every upstream status word, exactly as written, mapped to one of ours.
    pub status_map: BTreeMap<String, super::TaskStatus>,
    /// jq extracting progress (0–100), if the upstream reports one.
    #[serde(default)]
    pub progress: Option<String>,
    /// jq producing the result URLs (a string or an array of strings).
    #[serde(default)]
    pub urls: Option<String>,
    /// jq extracting the failure code.
    #[serde(default)]
    pub error_code: Option<String>,
    /// jq extracting the failure message.
    #[serde(default)]
    pub error_message: Option<String>,
}

/// The optional second request of a completed task. `path` and `query` see the status
/// answer as `.`; `urls` sees this request's answer as `.`. `$id` is the upstream id.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResultConfig {
    #[serde(default = "default_get")]
    pub method: String,
    /// jq producing the path.
    pub path: String,
    /// jq producing an object of query parameters.
    #[serde(default)]
    pub query: Option<String>,
    /// jq producing the result URLs (a string or an array of strings).
    pub urls: String,
}

/// A content endpoint that needs our key. `path` and `query` see `{"urls": […]}` as
/// `.` (the URLs the query step found, possibly none) and `$id` (the upstream id).
/// A path that is an absolute URL is used as it is; redirects are followed, and our
/// headers only ever go to the provider's own origin.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentConfig {
    #[serde(default = "default_get")]
    pub method: String,
    /// jq producing the path.
    pub path: String,
    /// jq producing an object of query parameters.
    #[serde(default)]
    pub query: Option<String>,
    /// How clients reach the gateway, e.g. `https://media.example.com`; the content URL
    /// is this followed by `/v1/alpha/videos/{id}/content` (or the model-center path).
    /// Unset: formed from the request's `Host` header (and `X-Forwarded-Proto`).
    #[serde(default)]
    pub public_base_url: Option<String>,
    /// Time allowed until the upstream starts answering, and the longest pause
    /// while the body streams; there is no limit on the total time.
    #[serde(default = "default_query_timeout")]
    pub timeout_ms: u64,
}
