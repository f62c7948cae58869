//! Configuration: the shape of `routes.toml` (serde types that deny unknown fields, so
//! a typo is a load error), the problems collector every section reports into, and the
//! one secret reader. Compiling the file into the runtime form is `snapshot`'s job.

mod file;
mod network;
mod problems;
mod provider;
mod secret;

use std::path::Path;

pub use self::file::{
    BillingConfig, BudgetConfig, DEFAULT_OPENAI_REQUEST, Endpoint, FamilyConfig, KeyConfig,
    KeyLimitsConfig, LedgerConfig, LimitsConfig, LimitsTable, LogFormat, MediaKind, PriceConfig,
    QuotaConfig, RoutesFile, ServerConfig, SimulatorConfig, StorageConfig, TaskStatus, TasksConfig,
    TelemetryConfig, TlsConfig, TrackerConfig, WebhooksConfig, is_base_url,
};
pub use self::network::Network;
pub use self::problems::{LoadError, Problems, Scope};
pub use self::provider::{
    AuthConfig, CancelConfig, ContentConfig, ProviderConfig, QueryConfig, ResultConfig,
    SubmitConfig,
};
pub use self::secret::SecretSource;

/// Parse a routes file without compiling it.
pub fn read_routes(path: &Path) -> Result<RoutesFile, LoadError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LoadError::whole_file(path, format!("cannot read: {e}")))?;
    // toml's message already carries the line, column and offending key.
    toml::from_str(&text)
        .map_err(|e| LoadError::whole_file(path, e.to_string().trim_end().replace('\n', "\n    ")))
}

/// The directory relative paths in a routes file are resolved against.
pub fn config_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}
