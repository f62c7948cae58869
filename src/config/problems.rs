//! Problems found while loading a routes file, each under the key path of the setting
//! at fault (`providers.acme.submit.path`), so `mediagate check` can say exactly where.

use std::fmt;
use std::path::{Path, PathBuf};

/// Every problem found so far, each as (key path, what is wrong).
#[derive(Debug, Default)]
pub struct Problems {
    found: Vec<(String, String)>,
}

impl Problems {
    /// Problems under `path`: keys pushed through the scope are prefixed with it.
    pub fn at(&mut self, path: impl Into<String>) -> Scope<'_> {
        Scope {
            path: path.into(),
            problems: self,
        }
    }

    /// A problem of the whole file (`key` empty) or of a top-level key.
    pub fn push(&mut self, key: impl Into<String>, msg: impl Into<String>) {
        self.found.push((key.into(), msg.into()));
    }

    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    pub fn len(&self) -> usize {
        self.found.len()
    }

    /// The load error for `file`.
    pub fn into_error(self, file: &Path) -> LoadError {
        LoadError {
            file: file.to_path_buf(),
            problems: self.found,
        }
    }
}

/// A view of [`Problems`] under one key path.
pub struct Scope<'a> {
    path: String,
    problems: &'a mut Problems,
}

impl Scope<'_> {
    /// A problem of `key` under this scope (`""`: the scope itself).
    pub fn push(&mut self, key: &str, msg: impl Into<String>) {
        let path = self.join(key);
        self.problems.push(path, msg);
    }

    /// A narrower scope: `key` under this one.
    pub fn at(&mut self, key: &str) -> Scope<'_> {
        Scope {
            path: self.join(key),
            problems: self.problems,
        }
    }

    /// A problem of `key` when `value` is outside `range`.
    pub fn within(&mut self, key: &str, value: u64, range: std::ops::RangeInclusive<u64>) {
        if !range.contains(&value) {
            let msg = format!("must be between {} and {}", range.start(), range.end());
            self.push(key, msg);
        }
    }

    /// The value, or `None` with its error recorded under `key`.
    pub fn check<T>(&mut self, key: &str, result: Result<T, String>) -> Option<T> {
        result.map_err(|e| self.push(key, e)).ok()
    }

    /// Problems found in the whole file so far (to tell whether a block added any).
    pub fn count(&self) -> usize {
        self.problems.len()
    }

    fn join(&self, key: &str) -> String {
        match (self.path.is_empty(), key.is_empty()) {
            (_, true) => self.path.clone(),
            (true, false) => key.to_string(),
            (false, false) => format!("{}.{key}", self.path),
        }
    }
}

/// A routes file that does not load: every problem, each with its key path.
#[derive(Debug)]
pub struct LoadError {
    pub file: PathBuf,
    pub problems: Vec<(String, String)>,
}

impl LoadError {
    /// A single problem with the file as a whole (unreadable, not TOML, …).
    pub fn whole_file(file: &Path, msg: impl Into<String>) -> Self {
        Self {
            file: file.to_path_buf(),
            problems: vec![(String::new(), msg.into())],
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_prefix_their_keys() {
        let mut p = Problems::default();
        p.push("keys", "at least one");
        {
            let mut provider = p.at("providers.acme");
            provider.push("base_url", "bad");
            provider.at("submit").push("path", "jq: broken");
            provider.push("", "whole block");
            assert_eq!(provider.check("auth", Err::<(), _>("unset".into())), None);
            assert_eq!(provider.check("auth", Ok::<_, String>(3)), Some(3));
        }
        let e = p.into_error(Path::new("routes.toml"));
        let keys: Vec<&str> = e.problems.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "keys",
                "providers.acme.base_url",
                "providers.acme.submit.path",
                "providers.acme",
                "providers.acme.auth"
            ]
        );
        assert!(
            e.to_string()
                .starts_with("routes.toml: keys: at least one\n")
        );
    }
}
