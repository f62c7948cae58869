//! `[tasks]`: the task-id secret (and older ones still accepted) into the sealer.
//! The cache settings are read by the gateway as they are.

use std::path::Path;

use super::SecretFileMode;
use crate::config::{Scope, SecretSource, TasksConfig};
use crate::tasks::TaskSealer;

/// Shortest task secret accepted: ids are sealed with it, so it must resist guessing.
const MIN_SECRET_LEN: usize = 32;

pub(super) fn compile(
    cfg: &TasksConfig,
    dir: &Path,
    mode: SecretFileMode,
    at: &mut Scope,
) -> Option<TaskSealer> {
    let current = current_secret(cfg, dir, mode, at);
    let previous = previous_secrets(cfg, dir, at);
    Some(TaskSealer::new(&current?, &previous?))
}

/// The secret new ids are sealed with: from its variable, else its file.
fn current_secret(
    cfg: &TasksConfig,
    dir: &Path,
    mode: SecretFileMode,
    at: &mut Scope,
) -> Option<Vec<u8>> {
    let var = cfg.secret_env.as_deref();
    let from_env = SecretSource {
        env: var,
        file: None,
    };
    if let Ok(Some(secret)) = from_env.read(dir) {
        return at.check("secret_env", checked(secret, var.unwrap_or_default()));
    }
    let Some(file) = &cfg.secret_file else {
        let var = var.unwrap_or("(none)");
        let msg = format!("environment variable {var} is not set and no secret_file is configured");
        at.push("secret_env", msg);
        return None;
    };
    let path = dir.join(file);
    if cfg.create_secret_file && !path.exists() {
        return at.check("secret_file", missing_file(&path, mode));
    }
    let from_file = SecretSource {
        env: None,
        file: Some(file),
    };
    let secret = at.check("secret_file", from_file.read(dir))??;
    at.check("secret_file", checked(secret, &path.display().to_string()))
}

/// Older secrets: a comma-separated variable and a file with one per line.
fn previous_secrets(cfg: &TasksConfig, dir: &Path, at: &mut Scope) -> Option<Vec<Vec<u8>>> {
    let from_env = SecretSource {
        env: cfg.previous_secrets_env.as_deref(),
        file: None,
    };
    // An unset variable simply means no older secrets.
    let listed = from_env.read(dir).ok().flatten().unwrap_or_default();
    let mut previous: Vec<Vec<u8>> = split(&listed, ',');
    if let Some(file) = &cfg.previous_secrets_file {
        let from_file = SecretSource {
            env: None,
            file: Some(file),
        };
        let text = at.check("previous_secrets_file", from_file.read(dir))?;
        previous.extend(split(&text.unwrap_or_default(), '\n'));
    }
    Some(previous)
}

fn split(list: &str, by: char) -> Vec<Vec<u8>> {
    list.split(by)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.as_bytes().to_vec())
        .collect()
}

fn checked(secret: String, source: &str) -> Result<Vec<u8>, String> {
    if secret.len() < MIN_SECRET_LEN {
        return Err(format!(
            "the task secret from {source} is shorter than {MIN_SECRET_LEN} characters; use a long random value (e.g. `openssl rand -hex 32`)"
        ));
    }
    Ok(secret.into_bytes())
}

/// A configured secret file that does not exist yet.
fn missing_file(path: &Path, mode: SecretFileMode) -> Result<Vec<u8>, String> {
    match mode {
        SecretFileMode::Create => create_secret_file(path),
        SecretFileMode::MustExist => Err(format!(
            "{} has disappeared; restore it (a new secret would make every task id unreadable)",
            path.display()
        )),
        // `check`: the file would be created on the first start. A random secret,
        // never a fixed one, in case such a snapshot ever seals.
        SecretFileMode::CheckOnly => random_secret().map(String::into_bytes),
    }
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
