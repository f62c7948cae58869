//! Property-based fuzzing on stable Rust (proptest), one module per surface that reads
//! untrusted input: task ids, upstream answers through the shipped and documented jq
//! programs, redaction, and config loading; and the upstream pool held to the
//! hyper-util client it stands in for. (Routing and body reading are fuzzed beside
//! their code: `api::fuzz`, `edge::body::tests::fuzz`.)
//!
//! `cargo test --test fuzz` runs a few hundred cases of each; CI runs more with
//! `PROPTEST_CASES` (`.ci/run`). A failure proptest finds is saved under
//! `proptest-regressions/` and becomes a named regression test here.

mod answers;
mod config_loading;
mod redaction;
mod task_ids;
mod upstream_pool;
