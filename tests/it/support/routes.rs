//! Routes files: the shipped one made test-friendly, and a builder for small ones.

use std::fmt;
use std::path::Path;

use super::{DEMO, DEMO2, sha256_hex};

/// An environment variable no test sets: named as the task secret's variable, so that
/// a gateway in this process takes its secret from the file, whatever the
/// environment of the test run holds.
const NEVER_SET: &str = "MEDIAGATE_TESTS_NEVER_SET";

/// The file in every config dir holding our key for fake upstreams, and the key.
pub const UPSTREAM_KEY_FILE: &str = "upstream.key";
pub const UPSTREAM_KEY: &str = "upstream-secret-123";

/// The shipped routes.toml, as in the repository.
pub fn shipped_routes_file() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("routes.toml"))
        .expect("routes.toml is in the repository")
}

/// The shipped routes.toml, made test-friendly: a free port, fast simulated tasks, no
/// per-key rate limit (tests poll many tasks fast; the limits have tests of their
/// own), and the task secret from its file only.
pub fn shipped_routes() -> String {
    [
        (r#"listen = "127.0.0.1:8080""#, r#"listen = "127.0.0.1:0""#),
        ("queued_ms = 1000", "queued_ms = 300"),
        ("processing_ms = 2000", "processing_ms = 300"),
        ("rate_per_second = 100 ", "rate_per_second = 0 "),
        ("poll_cache_ttl_ms = 1000", "poll_cache_ttl_ms = 0"),
        (
            r#"secret_env = "MEDIAGATE_TASK_SECRET""#,
            &format!("secret_env = {NEVER_SET:?}"),
        ),
        (
            r#"previous_secrets_env = "MEDIAGATE_TASK_SECRETS_PREVIOUS""#,
            &format!("previous_secrets_env = {NEVER_SET:?}"),
        ),
    ]
    .iter()
    .fold(shipped_routes_file(), |text, (from, to)| {
        replace_once(&text, from, to)
    })
}

/// `text` with the single occurrence of `from` replaced by `to`. Panics when `from`
/// does not occur exactly once, so an edit of routes.toml cannot silently make a test
/// run on another configuration than it means to.
pub fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "expected exactly one `{from}` in the routes file"
    );
    text.replacen(from, to, 1)
}

/// A small routes file: a free port, the task secret in `task-secret` beside it, fast
/// simulated tasks, the two demo keys, the `video` and `alpha` schemas; then what the
/// test adds.
#[derive(Clone, Default)]
pub struct Routes {
    server: Vec<String>,
    top: Vec<String>,
    demo_key: Vec<String>,
    demo2_key: Vec<String>,
    providers: Vec<String>,
    families: Vec<String>,
    storage: Option<String>,
    storage_settings: Vec<String>,
    poll_cache_ttl_ms: u64,
}

impl Routes {
    pub fn new() -> Self {
        Self::default()
    }

    /// The built-in simulator as provider `up`, serving `models` (family `test`).
    pub fn simulated(models: &[&str]) -> Self {
        Self::new()
            .provider(model_center_provider("up", "builtin:simulator", ""))
            .family(family("test", &["up"], models))
    }

    /// The simulator as provider `up` serving `m1`, asked about by the tracker every
    /// 100 ms.
    pub fn tracked_simulator() -> Self {
        Self::new()
            .provider(model_center_provider(
                "up",
                "builtin:simulator",
                "poll_interval_ms = 100",
            ))
            .family(family("test", &["up"], &["m1"]))
    }

    /// A model-center provider `up` at `base_url` (with `extra` lines), serving `m1`.
    pub fn upstream(base_url: &str, extra: &str) -> Self {
        Self::new()
            .provider(model_center_provider("up", base_url, extra))
            .family(family("test", &["up"], &["m1"]))
    }

    /// Lines added to `[server]` (may end by opening `[server.tls]`).
    pub fn server(mut self, lines: &str) -> Self {
        self.server.push(lines.to_string());
        self
    }

    /// Top-level tables (e.g. `[limits]`).
    pub fn top(mut self, toml: &str) -> Self {
        self.top.push(toml.to_string());
        self
    }

    /// `[storage] url`: where results are kept. Unset: `none` (results stay at the
    /// provider, and a test's fake upstream sees no downloads it did not ask for).
    pub fn storage(mut self, url: &str) -> Self {
        self.storage = Some(url.to_string());
        self
    }

    /// Lines added to `[storage]`, after its `url`.
    pub fn storage_setting(mut self, line: &str) -> Self {
        self.storage_settings.push(line.to_string());
        self
    }

    /// `[tasks] poll_cache_ttl_ms`: how long an unfinished state is reused (0 unless
    /// set here, so that each query asks the provider).
    pub fn poll_cache_ttl_ms(mut self, ms: u64) -> Self {
        self.poll_cache_ttl_ms = ms;
        self
    }

    /// Lines added to the `demo` key (sk-demo), e.g. its own `limits`.
    pub fn demo_key(mut self, lines: &str) -> Self {
        self.demo_key.push(lines.to_string());
        self
    }

    /// Lines added to the `demo-2` key (sk-demo-2).
    pub fn demo2_key(mut self, lines: &str) -> Self {
        self.demo2_key.push(lines.to_string());
        self
    }

    /// A `[providers.NAME]` block.
    pub fn provider(mut self, block: impl fmt::Display) -> Self {
        self.providers.push(block.to_string());
        self
    }

    /// A `[families.NAME]` block.
    pub fn family(mut self, block: impl fmt::Display) -> Self {
        self.families.push(block.to_string());
        self
    }

    pub fn render(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Routes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            r#"
[server]
listen = "127.0.0.1:0"
{server}

[tasks]
secret_env = "{NEVER_SET}"
previous_secrets_env = "{NEVER_SET}"
secret_file = "task-secret"
create_secret_file = true
poll_cache_ttl_ms = {poll_cache_ttl_ms}

[simulator]
queued_ms = 100
processing_ms = 100

[storage]
url = "{storage}"
{storage_settings}

{top}

[[keys]]
name = "demo"
sha256 = "{demo}"
{demo_key}

[[keys]]
name = "demo-2"
sha256 = "{demo2}"
{demo2_key}

{SCHEMAS}
{providers}
{families}
"#,
            server = self.server.join("\n"),
            top = self.top.join("\n"),
            poll_cache_ttl_ms = self.poll_cache_ttl_ms,
            storage = self.storage.as_deref().unwrap_or("none"),
            storage_settings = self.storage_settings.join("\n"),
            demo = sha256_hex(DEMO),
            demo_key = self.demo_key.join("\n"),
            demo2 = sha256_hex(DEMO2),
            demo2_key = self.demo2_key.join("\n"),
            providers = self.providers.join("\n"),
            families = self.families.join("\n"),
        )
    }
}

const SCHEMAS: &str = r#"
[schemas.video]
required = ["prompt"]
[schemas.video.properties]
prompt = { type = "string", minLength = 1 }
duration = { type = "integer", minimum = 1 }
aspect_ratio = { type = "string" }
resolution = { type = "string" }
first_image = { type = "string" }
last_image = { type = "string" }
reference_images = { type = "array", items = { type = "string" } }

[schemas.alpha]
required = ["prompt"]
[schemas.alpha.properties]
prompt = { type = "string", minLength = 1 }
aspect_ratio = { type = "string" }
seconds = { type = "integer" }
"#;

/// A provider speaking our own model-center protocol (as the simulator does) at
/// `base_url`; `extra` lines go into its table (auth, timeouts).
pub fn model_center_provider(name: &str, base_url: &str, extra: &str) -> String {
    provider_block(
        name,
        &format!("base_url = \"{base_url}\"\n{extra}\n"),
        r#"path = '"/v2/model-center/tasks"'
body = '{model: $upstream_model} + .'
id = '.id'
status = '.status'
"#,
        r#"path = '"/v2/model-center/tasks/\($id | @uri)"'
status = '.status'
status_map = { queued = "queued", processing = "processing", completed = "completed", failed = "failed" }
urls = '.urls'
"#,
    )
}

/// [`tasks_provider`] with a content step: `GET /files/{id}` streams the result.
pub fn tasks_provider_with_files(name: &str, base_url: &str) -> String {
    tasks_provider(name, base_url, "")
        + &format!("\n[providers.{name}.content]\npath = '\"/files/\\($id)\"'\n")
}

/// A plain provider with our key from [`UPSTREAM_KEY_FILE`] and short timeouts (1 s):
/// `POST /tasks` → `{id}`, `GET /tasks/{id}` → `{status, url, reason}`; `extra`
/// lines go into its table.
pub fn tasks_provider(name: &str, base_url: &str, extra: &str) -> String {
    let table = format!(
        r#"base_url = "{base_url}"
auth = {{ secret_file = "{UPSTREAM_KEY_FILE}" }}
connect_timeout_ms = 500
submit_timeout_ms = 1000
query_timeout_ms = 1000
{extra}"#
    );
    provider_block(
        name,
        &table,
        r#"path = '"/tasks"'
id = '.id'"#,
        r#"path = '"/tasks/\($id | @uri)"'
status = '.status'
status_map = { queued = "queued", running = "processing", done = "completed", failed = "failed" }
urls = '.url'
error_message = '.reason'
"#,
    )
}

/// A `[providers.NAME]` block: its `table` (base URL, auth, timeouts), then the
/// programs of its submit and query steps.
fn provider_block(name: &str, table: &str, submit: &str, query: &str) -> String {
    format!(
        "\n[providers.{name}]\n{table}\n[providers.{name}.submit]\n{submit}\n[providers.{name}.query]\n{query}"
    )
}

/// A video family on the model center served by `providers`, with `models`.
pub fn family(name: &str, providers: &[&str], models: &[&str]) -> Family {
    Family {
        name: name.to_string(),
        alpha: false,
        providers: providers.iter().map(|p| p.to_string()).collect(),
        models: models.iter().map(|m| m.to_string()).collect(),
        upstream: Vec::new(),
    }
}

/// A `[families.NAME]` block; see [`family`].
pub struct Family {
    name: String,
    alpha: bool,
    providers: Vec<String>,
    models: Vec<String>,
    upstream: Vec<(String, String)>,
}

impl Family {
    /// On `/v1/alpha/videos`, with the alpha schema.
    pub fn alpha(mut self) -> Self {
        self.alpha = true;
        self
    }

    /// `model` is called `upstream` by the provider.
    pub fn upstream(mut self, model: &str, upstream: &str) -> Self {
        self.upstream
            .push((model.to_string(), upstream.to_string()));
        self
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |items: &[String]| {
            items
                .iter()
                .map(|i| format!("{i:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (endpoint, schema) = if self.alpha {
            ("alpha-videos", "alpha")
        } else {
            ("model-center", "video")
        };
        let upstream = self
            .upstream
            .iter()
            .map(|(m, u)| format!("{m:?} = {u:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        write!(
            f,
            r#"
[families.{name}]
kind = "video"
endpoints = ["{endpoint}"]
providers = [{providers}]
models = [{models}]
upstream_models = {{ {upstream} }}
schema = "{schema}"
default_seconds = 5
"#,
            name = self.name,
            providers = list(&self.providers),
            models = list(&self.models),
        )
    }
}
