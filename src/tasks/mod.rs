//! Tasks: what the gateway knows about a task, the sealed id that carries it, and the
//! cache of upstream answers.
//!
//! - [`state`]: the four statuses, the media kind, a normalised upstream answer;
//! - [`id`]: sealed, self-contained task ids (the only way a query finds its task);
//! - [`cache`]: results cache with request coalescing (moka);
//! - [`ledger`]: the durable record of every task (SQLite or PostgreSQL);
//! - [`view`]: the public task shape, from a state or a ledger row;
//! - [`openai`]: the same task in the OpenAI Videos API's shapes.

pub mod cache;
pub mod id;
pub mod ledger;
pub mod openai;
pub mod state;
pub mod view;

pub use self::cache::{CacheLimits, CacheStats, TaskCache};
pub use self::id::{TaskId, TaskSealer};
pub use self::state::{MediaKind, TaskError, TaskState, TaskStatus};
pub use self::view::{Cost, SubmitResponse, TaskView, recorded_state};
