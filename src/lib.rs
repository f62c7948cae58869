pub mod body;
pub mod config;
pub mod error;
pub mod routing;
pub mod task;
pub mod task_id;
pub mod validate;
pub mod provider { pub mod transform; }
