//! The shape of `routes.toml`, exactly as an operator writes it.
//!
//! These types only describe the file; [`crate::snapshot`] compiles them into the
//! runtime form (hashed keys, compiled jq and JSON Schema, HTTP clients). Every table
//! denies unknown fields so a typo is a load error, not a silently ignored setting.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// The whole routes file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutesFile {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub tasks: TasksConfig,
    #[serde(default)]
    pub simulator: SimulatorConfig,
    /// Client API keys.
    #[serde(default, rename = "keys")]
    pub keys: Vec<KeyConfig>,
    /// Upstream providers by name.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Named JSON Schemas that families build on.
    #[serde(default)]
    pub schemas: BTreeMap<String, toml::Table>,
    /// Model families by name: a shared parameter schema and the models that use it.
    #[serde(default)]
    pub families: BTreeMap<String, FamilyConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Plain HTTP listener (HTTP/1.1 and cleartext HTTP/2).
    pub listen: SocketAddr,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// How long in-flight requests may take to finish after SIGTERM or Ctrl-C.
    pub shutdown_grace_ms: u64,
    /// Upper bound on one whole request, upstream calls included.
    pub request_timeout_ms: u64,
    /// Log format: "text" or "json".
    pub log_format: LogFormat,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            max_body_bytes: 4 * 1024 * 1024,
            shutdown_grace_ms: 30_000,
            request_timeout_ms: 120_000,
            log_format: LogFormat::Text,
        }
    }
}

#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Where the task-id secret comes from, and how long results are cached.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TasksConfig {
    /// Environment variable holding the current secret (takes precedence over the file).
    pub secret_env: Option<String>,
    /// File holding the current secret.
    pub secret_file: Option<PathBuf>,
    /// Create `secret_file` with a random secret when it does not exist (demo setups).
    pub create_secret_file: bool,
    /// Environment variable with older secrets, comma separated, still accepted to open ids.
    pub previous_secrets_env: Option<String>,
    /// File with older secrets, one per line.
    pub previous_secrets_file: Option<PathBuf>,
    /// How long a finished (completed/failed) result stays cached.
    pub terminal_cache_ttl_ms: u64,
    /// How long an unfinished status is reused for other queries of the same task.
    pub poll_cache_ttl_ms: u64,
    /// Most task results kept in the cache.
    pub cache_capacity: u64,
}

impl Default for TasksConfig {
    fn default() -> Self {
        Self {
            secret_env: Some("MEDIAGATE_TASK_SECRET".into()),
            secret_file: None,
            create_secret_file: false,
            previous_secrets_env: Some("MEDIAGATE_TASK_SECRETS_PREVIOUS".into()),
            previous_secrets_file: None,
            terminal_cache_ttl_ms: 3_600_000,
            poll_cache_ttl_ms: 1_000,
            cache_capacity: 100_000,
        }
    }
}

/// The built-in simulated provider, reached as `base_url = "builtin:simulator"`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimulatorConfig {
    /// Loopback address it listens on; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Time a task spends `queued`.
    pub queued_ms: u64,
    /// Time a task spends `processing` before it completes or fails.
    pub processing_ms: u64,
}

impl Default for SimulatorConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            queued_ms: 1_000,
            processing_ms: 2_000,
        }
    }
}

/// One client API key.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// Name shown in logs and used as the owner of the key's tasks.
    pub name: String,
    /// Hex SHA-256 of the key (`printf %s KEY | sha256sum`).
    pub sha256: Option<String>,
    /// Environment variable holding the key itself.
    pub env: Option<String>,
    /// Models this key may use; all models when absent.
    pub models: Option<Vec<String>>,
}

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
    /// Extra PEM CA file trusted for this provider, besides the webpki roots.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Words that identify the upstream (brand, host) and are removed from error
    /// messages before they reach clients. The host and the secret are always removed.
    #[serde(default)]
    pub redact: Vec<String>,
    pub submit: SubmitConfig,
    pub query: QueryConfig,
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
/// are listed in [`crate::provider::transform::VARIABLES`].
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
    /// jq extracting the upstream task id from the answer.
    pub id: String,
    /// jq extracting the upstream status from the submit answer, if it has one.
    #[serde(default)]
    pub status: Option<String>,
    /// jq extracting an error message from a refused submit.
    #[serde(default)]
    pub error_message: Option<String>,
}

fn default_post() -> String {
    "POST".into()
}
fn default_get() -> String {
    "GET".into()
}

/// The status query. jq programs see the upstream answer as `.` and `$id` (the
/// upstream id) among the variables of [`crate::provider::transform::VARIABLES`].
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
    pub status_map: BTreeMap<String, crate::task::TaskStatus>,
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

/// A family of models sharing a kind, an endpoint, providers and a parameter schema.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FamilyConfig {
    pub kind: crate::task::MediaKind,
    /// Endpoints that accept the family's models.
    #[serde(default = "default_endpoints")]
    pub endpoints: Vec<crate::routing::Endpoint>,
    /// Providers in failover order.
    pub providers: Vec<String>,
    /// Model identifiers, matched exactly.
    pub models: Vec<String>,
    /// Upstream model names, where they differ from ours.
    #[serde(default)]
    pub upstream_models: BTreeMap<String, String>,
    /// Named schema from `[schemas]` that `params` is laid over.
    #[serde(default)]
    pub schema: Option<String>,
    /// JSON Schema of the parameters (everything but `model`). Laid over `schema`:
    /// each entry of `properties` adds or replaces one parameter, other keywords
    /// replace the base's.
    #[serde(default)]
    pub params: Option<toml::Table>,
    /// Accept parameters the schema does not list.
    #[serde(default)]
    pub allow_unknown_params: bool,
}

fn default_endpoints() -> Vec<crate::routing::Endpoint> {
    vec![crate::routing::Endpoint::ModelCenter]
}
