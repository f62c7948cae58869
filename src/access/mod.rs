//! Who may call: client keys (Bearer authentication, model permissions) and the
//! per-key limits. The layers that apply them to a request are in `api`.

mod ahead;
pub mod keys;
pub mod limits;
pub mod shared;

pub use self::keys::{ApiKey, KeyRing, key_digest};
pub use self::limits::{KeyLimiter, KeyLimits, LimitExceeded, RateHeaders};
pub use self::shared::{InProgress, SharedLimits, SharedSettings};
