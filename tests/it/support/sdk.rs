//! The official OpenAI SDKs (the `openai` packages of PyPI and npm), installed by
//! `.ci/openai-sdk` under the target dir (on first use when `.ci/run` has not done it),
//! and the scripts of `tests/openai/` that drive them against a gateway.
//!
//! A machine that cannot install them (no python3 or node, no registry) skips the SDK
//! tests, saying so; in CI (`CI` set, or `MEDIAGATE_TESTS_NEED_SDK` as `.ci/run` sets
//! it) that fails them instead.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

use super::PATIENCE;

/// Where the SDKs are: the venv's python, the npm package's directory.
pub struct Sdks {
    pub python: PathBuf,
    pub node_dir: PathBuf,
}

/// The SDKs, installed now when they were not yet; `None`, said on stderr, when they
/// cannot be and the run is not CI's; in CI that fails the test.
pub fn available() -> Option<&'static Sdks> {
    match installed() {
        Ok(sdks) => Some(sdks),
        Err(why) if super::tool_required("MEDIAGATE_TESTS_NEED_SDK") => {
            panic!("the OpenAI SDKs cannot be installed: {why}")
        }
        Err(why) => {
            // Straight to stderr: the test harness keeps what `eprintln!` says of a
            // test that passes.
            let test = std::thread::current().name().unwrap_or("?").to_string();
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: the OpenAI SDKs cannot be installed ({why}); \
                 `bash .ci/openai-sdk` installs them (python3 and PyPI, node and npm)"
            );
            None
        }
    }
}

fn installed() -> Result<&'static Sdks, &'static str> {
    static SDKS: OnceLock<Result<Sdks, String>> = OnceLock::new();
    SDKS.get_or_init(install).as_ref().map_err(String::as_str)
}

fn install() -> Result<Sdks, String> {
    let stdout = super::run_ci_script("openai-sdk")?;
    let mut lines = stdout.lines().map(|l| PathBuf::from(l.trim()));
    let (Some(python), Some(node_dir)) = (lines.next(), lines.next()) else {
        return Err(format!("bash .ci/openai-sdk printed {stdout:?}"));
    };
    if !python.exists() || !node_dir.exists() {
        return Err(format!(
            "{} or {} is not there",
            python.display(),
            node_dir.display()
        ));
    }
    Ok(Sdks { python, node_dir })
}

/// A script of `tests/openai/`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/openai")
        .join(name)
}

/// Run `program args…` to its end (the gateway serves it meanwhile: nothing here
/// blocks the test's runtime) and parse the JSON object it printed last.
pub async fn run_json(program: &Path, args: &[&str]) -> Value {
    let child = tokio::process::Command::new(program)
        .args(args)
        .kill_on_drop(true)
        .output();
    // Three times the usual patience: an SDK run makes many requests.
    let out = tokio::time::timeout(PATIENCE * 3, child)
        .await
        .unwrap_or_else(|_| panic!("{} {args:?} did not finish", program.display()))
        .unwrap_or_else(|e| panic!("{} cannot run: {e}", program.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} {args:?} failed ({}):\n{stdout}\n{stderr}",
        program.display(),
        out.status
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}\n{stderr}"))
}
