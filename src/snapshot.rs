//! routes.toml compiled into one immutable snapshot: keys, models, validators,
//! providers with their clients, and the task-id sealer.
//!
//! A request pins one snapshot for its whole life, so a reload never shows it a mix
//! of old and new settings. Everything expensive (jq, JSON Schema, TLS roots) is
//! compiled here, never per request.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::auth::{ApiKey, KeyRing, key_digest};
use crate::config::read_secret;
use crate::config::{RoutesFile, ServerConfig, SimulatorConfig, TasksConfig};
use crate::key_limits::{KeyLimiter, KeyLimits};
use crate::provider::{Problems, Provider};
use crate::routing::Endpoint;
use crate::task::MediaKind;
use crate::task_id::TaskSealer;
use crate::validate::ParamsValidator;

/// `base_url` value that means "the built-in simulated provider".
pub const SIMULATOR_URL: &str = "builtin:simulator";

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

/// Everything a request needs, compiled from one routes file.
#[derive(Debug)]
pub struct Snapshot {
    pub server: ServerConfig,
    pub tasks: TasksConfig,
    pub simulator: SimulatorConfig,
    pub keys: KeyRing,
    pub models: HashMap<String, Arc<Model>>,
    pub providers: HashMap<String, Arc<Provider>>,
    pub sealer: TaskSealer,
    /// Per-key rate and concurrency limits.
    pub limits: KeyLimits,
    /// TLS server config, when `[server.tls]` is set.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Some provider points at the built-in simulator.
    pub uses_simulator: bool,
    /// Keys whose secret is a published demo value.
    pub demo_keys: Vec<String>,
}

/// What the load needs from the running process.
#[derive(Debug, Clone, Default)]
pub struct LoadContext {
    /// Address of the running simulator; `None` while only checking the file.
    pub simulator_addr: Option<SocketAddr>,
    /// What to do when the task-secret file is missing and `create_secret_file` is set.
    pub secret_file: SecretFileMode,
}

/// A missing task-secret file: created at start, an error on reload (a new secret
/// would make every outstanding task id unreadable), ignored by `check`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SecretFileMode {
    Create,
    MustExist,
    #[default]
    CheckOnly,
}

/// Shortest task secret accepted: ids are sealed with it, so it must resist guessing.
const MIN_SECRET_LEN: usize = 32;

/// Every problem found in a routes file, each with its key path.
#[derive(Debug)]
pub struct LoadError {
    pub file: PathBuf,
    pub problems: Vec<(String, String)>,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (key, msg)) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            if key.is_empty() {
                write!(f, "{}: {msg}", self.file.display())?;
            } else {
                write!(f, "{}: {key}: {msg}", self.file.display())?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for LoadError {}

/// Published demo keys: warned about at every start.
const DEMO_KEYS: [&str; 2] = ["sk-demo", "sk-demo-2"];

impl Snapshot {
    /// Read, parse and compile a routes file.
    pub fn load(path: &Path, ctx: &LoadContext) -> Result<Self, LoadError> {
        Self::build(read_routes(path)?, path, ctx)
    }

    /// Compile an already parsed routes file read from `path`.
    pub fn build(file: RoutesFile, path: &Path, ctx: &LoadContext) -> Result<Self, LoadError> {
        Self::compile(file, config_dir(path), ctx).map_err(|problems| LoadError {
            file: path.to_path_buf(),
            problems,
        })
    }

    /// Compile a parsed routes file; `dir` anchors relative paths in it.
    pub fn compile(
        file: RoutesFile,
        dir: &Path,
        ctx: &LoadContext,
    ) -> Result<Self, Vec<(String, String)>> {
        let mut p = Problems::default();

        let mut uses_simulator = false;
        let mut providers = HashMap::new();
        for (name, cfg) in &file.providers {
            let base = if cfg.base_url == SIMULATOR_URL {
                uses_simulator = true;
                // While checking, any address will do: nothing is sent.
                format!(
                    "http://{}",
                    ctx.simulator_addr
                        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 9)))
                )
            } else {
                cfg.base_url.clone()
            };
            if let Some(provider) = Provider::compile(name, cfg, &base, dir, &mut p) {
                providers.insert(name.clone(), Arc::new(provider));
            }
        }

        let mut models: HashMap<String, Arc<Model>> = HashMap::new();
        for (family, cfg) in &file.families {
            let key = |k: &str| format!("families.{family}.{k}");
            if cfg.models.is_empty() {
                p.push(key("models"), "lists no model");
            }
            if cfg.endpoints.is_empty() {
                p.push(key("endpoints"), "lists no endpoint");
            }
            if cfg.providers.is_empty() {
                p.push(key("providers"), "lists no provider");
            }
            let mut chain = Vec::new();
            for name in &cfg.providers {
                match providers.get(name) {
                    Some(provider) => chain.push(provider.clone()),
                    None if file.providers.contains_key(name) => {} // reported with the provider
                    None => p.push(key("providers"), format!("no provider named `{name}`")),
                }
            }
            for upstream in cfg.upstream_models.keys() {
                if !cfg.models.contains(upstream) {
                    p.push(
                        key("upstream_models"),
                        format!("`{upstream}` is not one of this family's models"),
                    );
                }
            }
            let schema = match family_schema(&file.schemas, cfg) {
                Ok(s) => s,
                Err(e) => {
                    p.push(key("schema"), e);
                    continue;
                }
            };
            let validator = match ParamsValidator::compile(schema, cfg.allow_unknown_params) {
                Ok(v) => Arc::new(v),
                Err(e) => {
                    p.push(key("params"), format!("invalid JSON Schema: {e}"));
                    continue;
                }
            };
            for id in &cfg.models {
                if id.is_empty() {
                    p.push(key("models"), "a model id is empty");
                    continue;
                }
                let model = Model {
                    id: id.clone(),
                    family: family.clone(),
                    kind: cfg.kind,
                    endpoints: cfg.endpoints.clone(),
                    upstream_model: cfg.upstream_models.get(id).unwrap_or(id).clone(),
                    providers: chain.clone(),
                    validator: validator.clone(),
                };
                if let Some(other) = models.insert(id.clone(), Arc::new(model)) {
                    p.push(
                        key("models"),
                        format!("`{id}` is also listed in family `{}`", other.family),
                    );
                }
            }
        }

        for (k, msg) in KeyLimiter::check(&file.limits) {
            p.push(format!("limits.{k}"), msg);
        }
        let mut limits = Vec::new();
        let mut demo_keys = Vec::new();
        let mut keys = Vec::new();
        let mut names = HashSet::new();
        let mut digests = HashSet::new();
        for (i, k) in file.keys.iter().enumerate() {
            let key = |f: &str| format!("keys[{i}].{f}");
            if k.name.trim().is_empty() {
                p.push(key("name"), "must not be empty");
            } else if !names.insert(k.name.as_str()) {
                p.push(key("name"), format!("`{}` is used by another key", k.name));
            }
            let digest = match (&k.sha256, &k.env) {
                (Some(hex_digest), None) => {
                    let mut d = [0u8; 32];
                    match hex::decode_to_slice(hex_digest.trim(), &mut d) {
                        Ok(()) => Some(d),
                        Err(_) => {
                            p.push(
                                key("sha256"),
                                "must be 64 hex digits (printf %s KEY | sha256sum)",
                            );
                            None
                        }
                    }
                }
                (None, Some(var)) => match std::env::var(var) {
                    Ok(v) if !v.trim().is_empty() => Some(key_digest(v.trim())),
                    _ => {
                        p.push(key("env"), format!("environment variable {var} is not set"));
                        None
                    }
                },
                _ => {
                    p.push(key("sha256"), "set exactly one of sha256 or env");
                    None
                }
            };
            if let Some(allowed) = &k.models {
                for m in allowed {
                    if !models.contains_key(m)
                        && !file.families.values().any(|f| f.models.contains(m))
                    {
                        p.push(key("models"), format!("no model named `{m}`"));
                    }
                }
            }
            let own = file.limits.with(k.limits.as_ref());
            for (f, msg) in KeyLimiter::check(&own) {
                p.push(key(&format!("limits.{f}")), msg);
            }
            limits.push((Arc::<str>::from(k.name.as_str()), own));
            if let Some(d) = digest {
                // The same secret twice would make one of the keys unreachable.
                if !digests.insert(d) {
                    p.push(key("sha256"), "the same secret as another key");
                }
                if DEMO_KEYS.iter().any(|demo| key_digest(demo) == d) {
                    demo_keys.push(k.name.clone());
                }
                keys.push(ApiKey::new(
                    &k.name,
                    d,
                    k.models.as_ref().map(|m| m.iter().cloned().collect()),
                ));
            }
        }
        if file.keys.is_empty() {
            p.push("keys".into(), "at least one client key is required");
        }

        let sealer = match task_secrets(&file.tasks, dir, ctx.secret_file) {
            Ok(secrets) => Some(TaskSealer::new(&secrets.current, &secrets.previous)),
            Err((k, e)) => {
                p.push(format!("tasks.{k}"), e);
                None
            }
        };
        if file.server.max_body_bytes == 0 {
            p.push("server.max_body_bytes".into(), "must be greater than 0");
        }
        if !(1..=tokio::sync::Semaphore::MAX_PERMITS).contains(&file.server.max_connections) {
            p.push(
                "server.max_connections".into(),
                "must be greater than 0 and not absurdly large",
            );
        }
        let tls = match &file.server.tls {
            Some(cfg) => match crate::tls::server_config(cfg, dir) {
                Ok(c) => Some(c),
                Err((k, e)) => {
                    p.push(format!("server.tls.{k}"), e);
                    None
                }
            },
            None => None,
        };

        match sealer {
            Some(sealer) if p.0.is_empty() => Ok(Self {
                server: file.server,
                tasks: file.tasks,
                simulator: file.simulator,
                keys: KeyRing::new(keys),
                models,
                providers,
                sealer,
                limits: KeyLimits::new(limits),
                tls,
                uses_simulator,
                demo_keys,
            }),
            _ => Err(p.0),
        }
    }

    /// The model `id` if it is served on `endpoint`.
    pub fn model(&self, id: &str, endpoint: Endpoint) -> Option<&Arc<Model>> {
        self.models
            .get(id)
            .filter(|m| m.endpoints.contains(&endpoint))
    }
}

/// A family's parameter schema: its `params` laid over the named base `schema`.
fn family_schema(
    schemas: &std::collections::BTreeMap<String, toml::Table>,
    family: &crate::config::FamilyConfig,
) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    let to_json = |t: &toml::Table| serde_json::to_value(t).map_err(|e| e.to_string());
    let mut schema = match &family.schema {
        Some(name) => to_json(
            schemas
                .get(name)
                .ok_or_else(|| format!("no schema named `{name}` in [schemas]"))?,
        )?,
        None => Value::Object(Default::default()),
    };
    let overlay = match &family.params {
        Some(params) => to_json(params)?,
        None if family.schema.is_some() => return Ok(schema),
        None => return Err("set `schema` or `params`".into()),
    };
    let (Value::Object(base), Value::Object(overlay)) = (&mut schema, overlay) else {
        return Err("schemas must be tables".into());
    };
    for (k, v) in overlay {
        match (k.as_str(), base.get_mut(&k), v) {
            ("properties", Some(Value::Object(props)), Value::Object(more)) => props.extend(more),
            (_, _, v) => {
                base.insert(k, v);
            }
        }
    }
    Ok(schema)
}

/// The directory relative paths in a routes file are resolved against.
pub fn config_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Parse a routes file without compiling it.
pub fn read_routes(path: &Path) -> Result<RoutesFile, LoadError> {
    let fail = |msg: String| LoadError {
        file: path.to_path_buf(),
        problems: vec![(String::new(), msg)],
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(format!("cannot read: {e}")))?;
    // toml's message already carries the line, column and offending key.
    toml::from_str(&text).map_err(|e| fail(e.to_string().trim_end().replace('\n', "\n    ")))
}

/// The current task-id secret and the older ones still accepted.
struct TaskSecrets {
    current: Vec<u8>,
    previous: Vec<Vec<u8>>,
}

fn task_secrets(
    cfg: &TasksConfig,
    dir: &Path,
    mode: SecretFileMode,
) -> Result<TaskSecrets, (&'static str, String)> {
    let from_env = cfg
        .secret_env
        .as_deref()
        .and_then(|v| std::env::var(v).ok())
        .filter(|v| !v.trim().is_empty());
    let current = match (from_env, &cfg.secret_file) {
        (Some(secret), _) => {
            let var = cfg.secret_env.as_deref().unwrap_or_default();
            checked_secret(secret.trim(), var).map_err(|e| ("secret_env", e))?
        }
        (None, Some(file)) => {
            let path = dir.join(file);
            match std::fs::read_to_string(&path) {
                Ok(s) => checked_secret(s.trim(), &path.display().to_string())
                    .map_err(|e| ("secret_file", e))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && cfg.create_secret_file => {
                    match mode {
                        SecretFileMode::Create => {
                            create_secret_file(&path).map_err(|e| ("secret_file", e))?
                        }
                        SecretFileMode::MustExist => {
                            return Err((
                                "secret_file",
                                format!(
                                    "{} has disappeared; restore it (a new secret would make every task id unreadable)",
                                    path.display()
                                ),
                            ));
                        }
                        // `check`: the file would be created on the first start. A random
                        // secret, never a fixed one, in case such a snapshot ever seals.
                        SecretFileMode::CheckOnly => random_secret()
                            .map_err(|e| ("secret_file", e))?
                            .into_bytes(),
                    }
                }
                Err(e) => {
                    return Err((
                        "secret_file",
                        format!("cannot read {}: {e}", path.display()),
                    ));
                }
            }
        }
        (None, None) => {
            let var = cfg.secret_env.as_deref().unwrap_or("(none)");
            return Err((
                "secret_env",
                format!("environment variable {var} is not set and no secret_file is configured"),
            ));
        }
    };
    let mut previous: Vec<Vec<u8>> = Vec::new();
    if let Some(list) = cfg
        .previous_secrets_env
        .as_deref()
        .and_then(|v| std::env::var(v).ok())
    {
        previous.extend(
            list.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| s.as_bytes().to_vec()),
        );
    }
    if let Some(file) = &cfg.previous_secrets_file {
        let text = read_secret(None, Some(file), dir).map_err(|e| ("previous_secrets_file", e))?;
        previous.extend(
            text.unwrap_or_default()
                .lines()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| s.as_bytes().to_vec()),
        );
    }
    Ok(TaskSecrets { current, previous })
}

fn checked_secret(secret: &str, source: &str) -> Result<Vec<u8>, String> {
    if secret.len() < MIN_SECRET_LEN {
        return Err(format!(
            "the task secret from {source} is shorter than {MIN_SECRET_LEN} characters; use a long random value (e.g. `openssl rand -hex 32`)"
        ));
    }
    Ok(secret.as_bytes().to_vec())
}

fn random_secret() -> Result<String, String> {
    use ring::rand::SecureRandom;
    let mut raw = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut raw)
        .map_err(|_| "no system randomness".to_string())?;
    Ok(hex::encode(raw))
}

fn create_secret_file(path: &Path) -> Result<Vec<u8>, String> {
    let secret = random_secret()?;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    std::io::Write::write_all(&mut f, secret.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    tracing::info!(file = %path.display(), "created a new task-id secret");
    Ok(secret.into_bytes())
}
