//! The top-level tables of `routes.toml`, exactly as an operator writes them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::provider::ProviderConfig;

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
    /// The task ledger: where every task is recorded.
    #[serde(default)]
    pub ledger: LedgerConfig,
    /// Where completed tasks' results are kept.
    #[serde(default)]
    pub storage: StorageConfig,
    /// The currency prices and budgets are written in.
    #[serde(default)]
    pub billing: BillingConfig,
    /// The background tracker that follows unfinished tasks in the ledger.
    #[serde(default)]
    pub tracker: TrackerConfig,
    /// Signed webhooks sent when a task finishes.
    #[serde(default)]
    pub webhooks: WebhooksConfig,
    /// Per-key limits every key gets unless its own `limits` says otherwise, and
    /// where replicas share them.
    #[serde(default)]
    pub limits: LimitsTable,
    /// OpenTelemetry traces exported over OTLP/HTTP; off unless `otlp_endpoint` is set.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
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
    /// TLS listener, beside the plain one.
    pub tls: Option<TlsConfig>,
    /// Separate listener for `/metrics` (and `/healthz`), without client auth. When
    /// unset, `/metrics` is served on the main listeners only to requests carrying the
    /// metrics token (`metrics_token_env` / `metrics_token_file`), and not at all
    /// without one.
    pub metrics_listen: Option<SocketAddr>,
    /// Environment variable holding the bearer token `/metrics` asks for on the main
    /// listeners (wins over the file).
    pub metrics_token_env: Option<String>,
    /// File holding that token.
    pub metrics_token_file: Option<PathBuf>,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// How long in-flight requests may take to finish after SIGTERM or Ctrl-C.
    pub shutdown_grace_ms: u64,
    /// After SIGTERM, keep accepting (with `/readyz` answering 503) this long, so that
    /// load balancers take the instance out before its listeners close.
    pub shutdown_delay_ms: u64,
    /// Upper bound on one whole request, upstream calls included.
    pub request_timeout_ms: u64,
    /// Time a client has to send the request headers (slow-header protection).
    pub header_read_timeout_ms: u64,
    /// Time a client has to send the whole request body (slow-body protection): 408.
    pub body_read_timeout_ms: u64,
    /// Open client connections at most, all listeners together; more are closed at once.
    pub max_connections: usize,
    /// Open connections one client address (IPv6: one /64) may hold; more are closed
    /// at once. 0 turns the cap off. Trusted proxies are exempt.
    pub max_connections_per_ip: usize,
    /// Open connections of the admin (metrics) listener at most.
    pub admin_max_connections: usize,
    /// A connection without a request in progress this long is closed (HTTP/2
    /// connections included, which the header read timeout does not cover).
    pub idle_timeout_ms: u64,
    /// Peers (CIDR blocks or addresses) that carry many clients, such as a load
    /// balancer: exempt from `max_connections_per_ip`.
    pub trusted_proxies: Vec<String>,
    /// Header in which trusted proxies name the client (e.g. `x-forwarded-for`: its
    /// rightmost address that is not itself a trusted proxy). Read only on requests
    /// from `trusted_proxies`; each such request then holds one of that client's
    /// `max_connections_per_ip` slots while it is in progress.
    pub client_ip_header: Option<String>,
    /// Log format: "text" or "json".
    pub log_format: LogFormat,
    /// Check the routes file and the certificate files for changes this often and
    /// reload when they changed; 0 turns the watch off (SIGHUP always works).
    pub reload_poll_ms: u64,
    /// Serve the OpenAPI document of the client API at `/openapi.json`, without
    /// client authentication.
    pub openapi: bool,
    /// Threads serving connections, each with its own runtime and upstream pools;
    /// 0: one per CPU the process may use.
    pub workers: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            tls: None,
            metrics_listen: None,
            metrics_token_env: None,
            metrics_token_file: None,
            max_body_bytes: 1024 * 1024,
            shutdown_grace_ms: 30_000,
            shutdown_delay_ms: 0,
            request_timeout_ms: 120_000,
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 30_000,
            max_connections: 10_000,
            max_connections_per_ip: 256,
            admin_max_connections: 32,
            idle_timeout_ms: 60_000,
            trusted_proxies: Vec::new(),
            client_ip_header: None,
            log_format: LogFormat::Text,
            reload_poll_ms: 0,
            openapi: true,
            workers: 0,
        }
    }
}

/// TLS termination: a certificate chain and its key, PEM files, read again on reload.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Address of the TLS listener (HTTP/1.1 and HTTP/2 by ALPN).
    pub listen: SocketAddr,
    /// PEM certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
    /// Time a client has to complete the TLS handshake.
    #[serde(default = "default_handshake_timeout_ms")]
    pub handshake_timeout_ms: u64,
}

fn default_handshake_timeout_ms() -> u64 {
    10_000
}

/// Per-key limits. A rate of 0 or a concurrency of 0 turns that limit off.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitsConfig {
    /// Sustained requests per second, all routes together.
    pub rate_per_second: f64,
    /// Requests let through at once above the sustained rate.
    pub burst: u32,
    /// Separate sustained rate for submits (`POST`), on top of the general one.
    pub submit_rate_per_second: Option<f64>,
    /// Burst for submits; defaults to the submit rate rounded up.
    pub submit_burst: Option<u32>,
    /// Requests of one key in progress at once; more are refused with 503.
    pub max_concurrent_requests: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            rate_per_second: 100.0,
            burst: 200,
            submit_rate_per_second: None,
            submit_burst: None,
            max_concurrent_requests: 256,
        }
    }
}

/// `[limits]`: the limits every key gets unless its own `limits` says otherwise (the
/// fields of [`LimitsConfig`]), and the Redis through which replicas share them.
#[derive(Debug, Deserialize, Clone, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsTable {
    /// Sustained requests per second, all routes together.
    pub rate_per_second: f64,
    /// Requests let through at once above the sustained rate.
    pub burst: u32,
    /// Separate sustained rate for submits (`POST`), on top of the general one.
    pub submit_rate_per_second: Option<f64>,
    /// Burst for submits; defaults to the submit rate rounded up.
    pub submit_burst: Option<u32>,
    /// Requests of one key in progress at once; more are refused with 503.
    pub max_concurrent_requests: usize,
    /// `redis://HOST:PORT/DB` or `rediss://…` (TLS): every key's limits hold for all
    /// replicas together. Unset: each replica keeps its own.
    pub shared: Option<String>,
    /// Environment variable holding the Redis password (wins over the file).
    pub shared_password_env: Option<String>,
    /// File holding the Redis password.
    pub shared_password_file: Option<PathBuf>,
    /// Longest a request waits for Redis; past it, and until Redis answers again,
    /// each replica applies its `local_share` of every limit.
    pub shared_timeout_ms: u64,
    /// How long a request's place among a key's requests in progress outlives the
    /// replica that took it (renewed while the request lasts).
    pub shared_lease_ms: u64,
    /// Each replica's share of every limit while Redis cannot be reached.
    pub local_share: f64,
    /// How many milliseconds of a key's arrivals a replica holds ahead of need (rate
    /// cells and places granted by Redis before they are needed); 0: every request
    /// asks Redis.
    pub shared_stock_ms: u64,
}

impl Default for LimitsTable {
    fn default() -> Self {
        let d = LimitsConfig::default();
        Self {
            rate_per_second: d.rate_per_second,
            burst: d.burst,
            submit_rate_per_second: d.submit_rate_per_second,
            submit_burst: d.submit_burst,
            max_concurrent_requests: d.max_concurrent_requests,
            shared: None,
            shared_password_env: None,
            shared_password_file: None,
            shared_timeout_ms: 50,
            shared_lease_ms: 10_000,
            local_share: 0.5,
            shared_stock_ms: 20,
        }
    }
}

impl LimitsTable {
    /// The limits every key gets unless it says otherwise.
    pub fn defaults(&self) -> LimitsConfig {
        LimitsConfig {
            rate_per_second: self.rate_per_second,
            burst: self.burst,
            submit_rate_per_second: self.submit_rate_per_second,
            submit_burst: self.submit_burst,
            max_concurrent_requests: self.max_concurrent_requests,
        }
    }
}

/// A key's own limits: each setting given replaces the default from `[limits]`.
#[derive(Debug, Deserialize, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct KeyLimitsConfig {
    pub rate_per_second: Option<f64>,
    pub burst: Option<u32>,
    pub submit_rate_per_second: Option<f64>,
    pub submit_burst: Option<u32>,
    pub max_concurrent_requests: Option<usize>,
}

impl LimitsConfig {
    /// These defaults with a key's own settings laid over them.
    pub fn with(&self, own: Option<&KeyLimitsConfig>) -> LimitsConfig {
        let Some(own) = own else {
            return self.clone();
        };
        LimitsConfig {
            rate_per_second: own.rate_per_second.unwrap_or(self.rate_per_second),
            burst: own.burst.unwrap_or(self.burst),
            submit_rate_per_second: own.submit_rate_per_second.or(self.submit_rate_per_second),
            submit_burst: own.submit_burst.or(self.submit_burst),
            max_concurrent_requests: own
                .max_concurrent_requests
                .unwrap_or(self.max_concurrent_requests),
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
    /// Most bytes the results cache holds (URLs, messages, keys and overhead), so an
    /// upstream answering with long results cannot make it grow past this.
    pub cache_capacity_bytes: u64,
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
            cache_capacity_bytes: 64 * 1024 * 1024,
        }
    }
}

/// The task ledger: a durable record of every task (idempotent submits, recovery,
/// usage, quotas, listing).
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct LedgerConfig {
    /// `sqlite://PATH` (relative to the routes file), `postgres://…` (shared by
    /// replicas), or `none` (stateless: no idempotency, quotas, listing or recovery).
    pub url: String,
    /// How long an `Idempotency-Key` is remembered.
    pub idempotency_ttl_hours: u64,
    /// How long a retry waits for the first request with its key to finish before
    /// it is answered 409.
    pub idempotency_wait_ms: u64,
    /// Connections to the database at most.
    pub max_connections: u32,
    /// Days a finished task is kept; older ones are deleted, their usage kept as
    /// per-day sums. 0: kept forever.
    pub keep_days: u64,
    /// Rows a retention batch looks at (and deletes at most) in one statement.
    pub prune_batch: u64,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        Self {
            url: "sqlite://.mediagate/ledger.db".into(),
            idempotency_ttl_hours: 24,
            idempotency_wait_ms: 10_000,
            max_connections: 8,
            keep_days: 90,
            prune_batch: 25,
        }
    }
}

/// `[telemetry]`: traces of requests, ledger writes, upstream calls and copies,
/// exported over OTLP/HTTP (protobuf). Read once at start, like `ledger.url`.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP base URL, e.g. `http://collector:4318` (spans are
    /// posted to `/v1/traces` under it). Unset: no traces, no exporter.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Share of new traces sampled (0.0–1.0); a request continuing a trace follows
    /// its parent's decision.
    pub sampling_ratio: f64,
    /// Further resource attributes (e.g. `deployment.environment`).
    pub resource_attributes: BTreeMap<String, String>,
    /// Longest wait before finished spans are exported.
    pub export_interval_ms: u64,
    /// Finished spans waiting for export at most; more are dropped, never waited for.
    pub max_queue_size: usize,
    /// How long one export may take before it counts as failed.
    pub export_timeout_ms: u64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: "mediagate".into(),
            sampling_ratio: 1.0,
            resource_attributes: BTreeMap::new(),
            export_interval_ms: 5_000,
            max_queue_size: 2_048,
            export_timeout_ms: 10_000,
        }
    }
}

/// Where completed tasks' results are kept, so that their links outlive the
/// provider's.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// `file://PATH` (relative to the routes file), `s3://BUCKET/PREFIX` (endpoint,
    /// region and credentials from the standard AWS environment variables), or `none`
    /// (results stay at the provider, for as long as it keeps them). Unset:
    /// `file://.mediagate/media`, or `none` when the ledger is off (stored results are
    /// recorded in the ledger).
    pub url: Option<String>,
    /// How long a signed link to a stored result is valid.
    pub link_ttl_secs: u64,
    /// How clients reach the gateway, e.g. `https://media.example.com`: the base of
    /// the links to kept results. Unset: the address the asking client used (none
    /// for a webhook: the path alone), or the provider's `content.public_base_url`.
    pub public_base_url: Option<String>,
    /// Copies running at once.
    pub max_in_flight: usize,
    /// Longest a copy may take before it is abandoned and retried.
    pub copy_timeout_ms: u64,
    /// How long a failed copy is retried before the task keeps its provider's links.
    pub retry_for_hours: u64,
    /// How long a finished task's webhook waits for the copy of its results, so that
    /// the receiver that fetches them at once is served from storage; 0: no wait.
    pub webhook_wait_ms: u64,
    /// S3 only: a request for a stored result is answered with a redirect (302) to a
    /// presigned URL of its object, valid `link_ttl_secs`: the bytes go from the
    /// bucket to the client, not through the gateway.
    pub direct_links: bool,
}

impl Default for StorageConfig {
    fn default() -> Self {
        Self {
            url: None,
            link_ttl_secs: 24 * 3600,
            public_base_url: None,
            max_in_flight: 4,
            copy_timeout_ms: 600_000,
            retry_for_hours: 24,
            webhook_wait_ms: 60_000,
            direct_links: false,
        }
    }
}

/// Whether `url` can be a base of the links clients get (`public_base_url`): http or
/// https, a host, no query. A trailing `/` is allowed (and trimmed where it is used).
pub fn is_base_url(url: &str) -> bool {
    url.trim_end_matches('/')
        .parse::<http::Uri>()
        .is_ok_and(|u| {
            matches!(u.scheme_str(), Some("http" | "https"))
                && u.host().is_some()
                && u.query().is_none()
        })
}

/// The background tracker: it follows every unfinished task in the ledger until it is
/// completed or failed, so that long-polling clients learn the outcome at once.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct TrackerConfig {
    /// Off: tasks are only asked about when a client queries them.
    pub enabled: bool,
    /// Longest interval between two status requests of one task.
    pub max_interval_ms: u64,
    /// A task unfinished after this long is given up: `failed`, `tracking_expired`.
    pub max_age_hours: u64,
    /// How long a replica's heartbeat holds the tasks it follows (written every
    /// quarter of this); a replica that dies leaves them to others after this.
    pub lease_ms: u64,
}

impl Default for TrackerConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_interval_ms: 60_000,
            max_age_hours: 48,
            lease_ms: 30_000,
        }
    }
}

/// `[webhooks]`: how finished tasks are delivered to `callback_url`s.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct WebhooksConfig {
    /// One delivery attempt: connection, request and answer.
    pub timeout_ms: u64,
    /// The wait before the first retry; it doubles at each failure (with jitter).
    pub first_retry_ms: u64,
    /// The longest wait between two attempts.
    pub max_retry_interval_ms: u64,
    /// How long a delivery is retried before it is given up.
    pub retry_for_hours: u64,
    /// Deliveries in progress at once, per replica.
    pub max_in_flight: usize,
    /// Of those, at most this many to one receiver (a callback URL's scheme, host and
    /// port); a quarter of `max_in_flight` when not set.
    pub max_in_flight_per_receiver: Option<usize>,
    /// Of those, at most this many for one key's tasks; half of `max_in_flight` when
    /// not set.
    pub max_in_flight_per_key: Option<usize>,
    /// How much of a receiver's answer is read (the rest is dropped).
    pub max_answer_bytes: usize,
    /// Hosts (as written in the URL) that may be sent callbacks over plain `http://`.
    pub allow_http_hosts: Vec<String>,
    /// Private networks (CIDR or single addresses) callbacks may be sent into.
    pub allow_private_networks: Vec<String>,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        Self {
            timeout_ms: 10_000,
            first_retry_ms: 5_000,
            max_retry_interval_ms: 3_600_000,
            retry_for_hours: 24,
            max_in_flight: 32,
            max_in_flight_per_receiver: None,
            max_in_flight_per_key: None,
            max_answer_bytes: 4_096,
            allow_http_hosts: Vec::new(),
            allow_private_networks: Vec::new(),
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
    /// This key's own limits, laid over `[limits]`.
    #[serde(default)]
    pub limits: Option<KeyLimitsConfig>,
    /// Daily allowance (UTC days), enforced at submit; needs the ledger.
    #[serde(default)]
    pub quota: Option<QuotaConfig>,
    /// Refuse submits without an `Idempotency-Key` header; needs the ledger.
    #[serde(default)]
    pub require_idempotency_key: bool,
    /// Spend allowed per UTC day and month, in `[billing] currency`; needs the ledger.
    #[serde(default)]
    pub budget: Option<BudgetConfig>,
    /// Task answers (query, listing, webhook) carry the task's `cost`.
    #[serde(default)]
    pub show_cost: bool,
    /// Where this key's finished tasks are posted when a submit names no
    /// `callback_url`; needs the ledger and a webhook secret.
    pub webhook_url: Option<String>,
    /// Environment variable holding the key's webhook signing secret(s): `whsec_…`,
    /// several separated by spaces while rotating (each delivery is signed with each).
    pub webhook_secret_env: Option<String>,
    /// File (relative to the routes file) holding the webhook secret(s).
    pub webhook_secret_file: Option<PathBuf>,
    /// The secret(s) written here: for the published demo secret; real secrets belong
    /// in a variable or a file, out of the routes file.
    pub webhook_secret: Option<String>,
}

/// `[billing]`: what the amounts of prices and budgets are in.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, default)]
pub struct BillingConfig {
    /// A code shown beside every amount (ISO 4217 or the operator's own, e.g. credits).
    pub currency: String,
}

impl Default for BillingConfig {
    fn default() -> Self {
        Self {
            currency: "USD".into(),
        }
    }
}

/// A key's budget, in `[billing] currency`: what its tasks may cost per UTC day and
/// per UTC month, reserved at submit and settled on what was delivered.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    pub per_day: Option<f64>,
    pub per_month: Option<f64>,
}

/// A model's price, jq programs yielding an amount in `[billing] currency`.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    /// Over the validated parameters, at submit: what is reserved.
    pub estimate: String,
    /// Over the parameters with the provider's final answer as `$answer`: what a
    /// completed task costs. Without it the estimate is the price.
    pub settle: Option<String>,
    /// Shown with the model in the model list; the programs are shown without it.
    pub description: Option<String>,
}

/// A key's daily allowance. Failed tasks give their share back.
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(deny_unknown_fields)]
pub struct QuotaConfig {
    /// Tasks submitted per day.
    pub tasks_per_day: Option<u64>,
    /// Requested seconds of video per day (`duration` or `seconds` of each task).
    pub video_seconds_per_day: Option<u64>,
}

/// A family of models sharing a kind, an endpoint, providers and a parameter schema.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FamilyConfig {
    pub kind: MediaKind,
    /// Endpoints that accept the family's models.
    #[serde(default = "default_endpoints")]
    pub endpoints: Vec<Endpoint>,
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
    /// Seconds a video task produces when its submit names no `duration` / `seconds`
    /// (counted toward usage and `video_seconds_per_day`).
    #[serde(default)]
    pub default_seconds: Option<u32>,
    /// Copy a completed task's results into `[storage]` (when it is on).
    #[serde(default = "default_true")]
    pub keep_results: bool,
    /// A result larger than this is not copied: the task keeps its provider's links.
    #[serde(default = "default_max_result_bytes")]
    pub max_result_bytes: u64,
    /// Stored results are deleted this many days after they were stored.
    #[serde(default = "default_keep_days")]
    pub keep_days: u32,
    /// `keep_results`, `max_result_bytes`, `keep_days` or `price` of one model, laid
    /// over the family's: `[families.NAME.per_model."MODEL"]`.
    #[serde(default)]
    pub per_model: BTreeMap<String, PerModelConfig>,
    /// What a task of the family's models costs; without one, nothing.
    #[serde(default)]
    pub price: Option<PriceConfig>,
    /// Serve the family's models on `/v1/videos` (video families only).
    #[serde(default = "default_true")]
    pub openai_videos: bool,
    /// jq from an OpenAI video request (`prompt`, `seconds`, `size`, `width`,
    /// `height`, `input_reference`) to the model's parameters; `$params` is the
    /// model's parameter schema. Without one, [`DEFAULT_OPENAI_REQUEST`].
    #[serde(default)]
    pub openai_request: Option<String>,
}

/// The default `openai_request`: each OpenAI field to the parameter the model's schema
/// has for it (`seconds` → `duration`, else `seconds`; `size` → `aspect_ratio` and
/// `resolution` as the shorter side, e.g. `720p`; `input_reference` → `first_image`,
/// else `reference_images`). A field the schema has no parameter for is passed under
/// the first name, so that the schema refuses it; `resolution` alone is left out where
/// the schema has none (the model's id fixes it).
pub const DEFAULT_OPENAI_REQUEST: &str = r#"
def takes($p): ($params.properties // {})[$p] | . != null and . != false;
def gcd($a; $b): if $b == 0 then $a else gcd($b; $a % $b) end;
{prompt}
+ (if .seconds == null then {}
   elif takes("duration") or (takes("seconds") | not) then {duration: .seconds}
   else {seconds: .seconds} end)
+ (if .size == null then {} else
     gcd(.width; .height) as $g
     | {aspect_ratio: "\(.width / $g | floor):\(.height / $g | floor)"}
     + (if takes("resolution") then {resolution: "\([.width, .height] | min)p"} else {} end)
   end)
+ (if .input_reference == null then {}
   elif takes("first_image") or (takes("reference_images") | not) then {first_image: .input_reference}
   else {reference_images: [.input_reference]} end)
"#;

/// One model's own settings; what it leaves out is the family's.
#[derive(Debug, Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct PerModelConfig {
    pub keep_results: Option<bool>,
    pub max_result_bytes: Option<u64>,
    pub keep_days: Option<u32>,
    pub price: Option<PriceConfig>,
}

fn default_true() -> bool {
    true
}

fn default_max_result_bytes() -> u64 {
    2 * 1024 * 1024 * 1024
}

fn default_keep_days() -> u32 {
    30
}

fn default_endpoints() -> Vec<Endpoint> {
    vec![Endpoint::ModelCenter]
}

/// The only four statuses a client ever sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    Queued,
    Processing,
    Completed,
    Failed,
}

impl TaskStatus {
    /// Completed and failed tasks never change again, so they can be cached for long.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Processing => "processing",
            Self::Completed => "completed",
            Self::Failed => "failed",
        }
    }
}

/// What a model produces; decides `object` and `video_url` versus `image_url`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MediaKind {
    Video,
    Image,
}

impl MediaKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Video => "video",
            Self::Image => "image",
        }
    }
}

/// A submission family of the service interface: the collection a model is served on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
pub enum Endpoint {
    /// `/v2/model-center/tasks`
    #[serde(rename = "model-center")]
    ModelCenter,
    /// `/v1/alpha/videos`
    #[serde(rename = "alpha-videos")]
    AlphaVideos,
    /// `/v1/videos`: the OpenAI Videos API's shapes, every video model.
    #[serde(rename = "openai-videos")]
    OpenAiVideos,
}

impl Endpoint {
    pub const ALL: [Endpoint; 3] = [
        Endpoint::ModelCenter,
        Endpoint::AlphaVideos,
        Endpoint::OpenAiVideos,
    ];

    /// Its name in routes.toml and in the ledger's `endpoint` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ModelCenter => "model-center",
            Self::AlphaVideos => "alpha-videos",
            Self::OpenAiVideos => "openai-videos",
        }
    }

    /// The collection path clients submit to.
    pub fn path(self) -> &'static str {
        match self {
            Self::ModelCenter => "/v2/model-center/tasks",
            Self::AlphaVideos => "/v1/alpha/videos",
            Self::OpenAiVideos => "/v1/videos",
        }
    }

    /// The collection listing the models clients may submit here.
    pub fn models_path(self) -> &'static str {
        match self {
            Self::ModelCenter => "/v2/model-center/models",
            Self::AlphaVideos => "/v1/alpha/models",
            Self::OpenAiVideos => "/v1/models",
        }
    }

    /// Where a key reads its own usage and spend (the same on each: it is the key's).
    pub fn usage_path(self) -> &'static str {
        match self {
            Self::ModelCenter => "/v2/usage",
            Self::AlphaVideos => "/v1/alpha/usage",
            Self::OpenAiVideos => "/v1/usage",
        }
    }
}
