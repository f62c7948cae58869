//! The one way a secret is read from the configuration: an environment variable, or a
//! file relative to the routes file. Values are trimmed; an empty one counts as unset.

use std::path::Path;

/// Where a secret may come from; the variable wins when both are set.
#[derive(Debug, Clone, Copy, Default)]
pub struct SecretSource<'a> {
    pub env: Option<&'a str>,
    pub file: Option<&'a Path>,
}

impl SecretSource<'_> {
    /// The secret, `Ok(None)` when neither source is configured. A configured variable
    /// that is unset (with no file to fall back on) and an unreadable file are errors
    /// naming the variable or the file, never the value.
    pub fn read(&self, dir: &Path) -> Result<Option<String>, String> {
        if let Some(var) = self.env
            && let Ok(value) = std::env::var(var)
            && !value.trim().is_empty()
        {
            return Ok(Some(value.trim().to_string()));
        }
        if let Some(file) = self.file {
            let path = dir.join(file);
            return std::fs::read_to_string(&path)
                .map(|s| Some(s.trim().to_string()))
                .map_err(|e| format!("cannot read secret file {}: {e}", path.display()));
        }
        match self.env {
            Some(var) => Err(format!("environment variable {var} is not set")),
            None => Ok(None),
        }
    }
}
