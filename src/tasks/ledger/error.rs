//! What can go wrong with the ledger, whichever engine holds it. Callers log it
//! (`%e`) and answer 503 `ledger_unavailable` where a request waits on it; the
//! variants tell a broken database from a row this build cannot read.

use std::fmt;

/// Longest value of a corrupt column quoted in the message: enough to recognise it,
/// not a whole row copied into logs.
const QUOTED: usize = 64;

/// A ledger that could not be reached, or answered what it should not.
#[derive(Debug)]
pub enum LedgerError {
    /// The engine failed (connection, I/O, constraint, a writer that stopped): its
    /// driver's message, for the logs.
    Unavailable(String),
    /// A row holds a value this build does not know (written by a newer version, or
    /// by hand): it is reported, never taken for another.
    Corrupt { column: &'static str, value: String },
    /// Admission lost its race with other writers of the same key every time it was
    /// tried (the key released and taken again in between).
    Busy,
}

impl LedgerError {
    pub(super) fn corrupt(column: &'static str, value: &str) -> Self {
        let value = match value.char_indices().nth(QUOTED) {
            Some((end, _)) => format!("{}…", &value[..end]),
            None => value.to_owned(),
        };
        Self::Corrupt { column, value }
    }
}

impl fmt::Display for LedgerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unavailable(message) => f.write_str(message),
            Self::Corrupt { column, value } => {
                write!(f, "a ledger row holds an unknown {column} `{value}`")
            }
            Self::Busy => f.write_str("the ledger admission kept losing its race; gave up"),
        }
    }
}

impl std::error::Error for LedgerError {}

impl From<sqlx::Error> for LedgerError {
    fn from(e: sqlx::Error) -> Self {
        Self::Unavailable(e.to_string())
    }
}

impl From<rusqlite::Error> for LedgerError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Unavailable(e.to_string())
    }
}
