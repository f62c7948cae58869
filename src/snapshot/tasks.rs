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

/// Older secrets: a comma-separated variable and a file with one per line. Each must
/// be as long as a current one: an id sealed with a short old secret could be forged
/// by guessing it just as well.
fn previous_secrets(cfg: &TasksConfig, dir: &Path, at: &mut Scope) -> Option<Vec<Vec<u8>>> {
    let before = at.count();
    let var = cfg.previous_secrets_env.as_deref();
    let from_env = SecretSource {
        env: var,
        file: None,
    };
    // An unset variable simply means no older secrets.
    let listed = from_env.read(dir).ok().flatten().unwrap_or_default();
    let mut previous = Vec::new();
    for (n, secret) in split(&listed, ',').enumerate() {
        let source = format!("{} (entry {})", var.unwrap_or_default(), n + 1);
        previous.extend(at.check("previous_secrets_env", checked(secret, &source)));
    }
    if let Some(file) = &cfg.previous_secrets_file {
        let from_file = SecretSource {
            env: None,
            file: Some(file),
        };
        let text = at.check("previous_secrets_file", from_file.read(dir))?;
        for (n, secret) in split(&text.unwrap_or_default(), '\n').enumerate() {
            let source = format!("{} (line {})", dir.join(file).display(), n + 1);
            previous.extend(at.check("previous_secrets_file", checked(secret, &source)));
        }
    }
    (at.count() == before).then_some(previous)
}

fn split(list: &str, by: char) -> impl Iterator<Item = String> + '_ {
    list.split(by)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Problems;

    fn compile_with_previous(lines: &str) -> Vec<(String, String)> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("current"), "c".repeat(64)).unwrap();
        std::fs::write(dir.path().join("previous"), lines).unwrap();
        let cfg = TasksConfig {
            secret_env: None,
            secret_file: Some("current".into()),
            previous_secrets_env: None,
            previous_secrets_file: Some("previous".into()),
            ..TasksConfig::default()
        };
        let mut problems = Problems::default();
        let sealer = compile(
            &cfg,
            dir.path(),
            SecretFileMode::MustExist,
            &mut problems.at("tasks"),
        );
        let problems = problems.into_error(Path::new("r")).problems;
        assert_eq!(sealer.is_some(), problems.is_empty());
        problems
    }

    #[test]
    fn previous_secrets_are_held_to_the_same_length() {
        let long = "p".repeat(32);
        assert!(compile_with_previous(&format!("{long}\n\n{long}q\n")).is_empty());
        let problems = compile_with_previous(&format!("{long}\nshort-old-secret\n"));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].0, "tasks.previous_secrets_file");
        assert!(problems[0].1.contains("line 2"), "{problems:?}");
        assert!(!problems[0].1.contains("short-old-secret"), "{problems:?}");
    }
}
