//! An S3-compatible server of the test's own: moto (PyPI), installed by `.ci/moto` in a
//! venv under the target dir (on first use when `.ci/run` has not done it), started on
//! a loopback port and speaking S3 over plain HTTP with SigV4 (any key is accepted),
//! path-style. Killed on drop.
//!
//! A gateway that uses it runs as a subprocess ([`super::Proc`]): S3 storage reads its
//! endpoint and credentials from the process's environment ([`env`]).
//!
//! A machine that cannot install moto (no python3, no PyPI) skips the S3 tests, saying
//! so; in CI (`CI` set, or `MEDIAGATE_TESTS_NEED_S3` as `.ci/run` sets it) that fails
//! them instead.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Method;

use super::{Http, PATIENCE, Reply, free_port};

/// The bucket every test server has.
pub const BUCKET: &str = "media";

/// The environment a gateway process needs to keep results in the S3 at `port`.
pub fn env(port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")),
        ("AWS_ACCESS_KEY_ID", "mediagate-test-key".into()),
        ("AWS_SECRET_ACCESS_KEY", "mediagate-test-secret".into()),
        ("AWS_REGION", "us-east-1".into()),
    ]
}

/// Whether the S3 tests can run here: moto is installed (now, when it was not yet).
/// False, said on stderr, when it cannot be and the run is not CI's; in CI that fails
/// the test.
pub fn available() -> bool {
    match python() {
        Ok(_) => true,
        Err(why) if super::tool_required("MEDIAGATE_TESTS_NEED_S3") => {
            panic!("moto (the S3 server of the S3 tests) cannot be installed: {why}")
        }
        Err(why) => {
            // Straight to stderr: the test harness keeps what `eprintln!` says of a
            // test that passes.
            let test = std::thread::current().name().unwrap_or("?").to_string();
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: no S3 server: moto cannot be installed ({why}); \
                 `bash .ci/moto` installs it (python3 and PyPI)"
            );
            false
        }
    }
}

/// The venv's python, once per test process: `.ci/moto` installs moto when missing.
fn python() -> Result<&'static Path, &'static str> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PYTHON
        .get_or_init(install)
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(String::as_str)
}

fn install() -> Result<PathBuf, String> {
    let out = super::run_ci_script("moto")?;
    let python = PathBuf::from(out.trim());
    if !python.exists() {
        return Err(format!("{} is not there", python.display()));
    }
    Ok(python)
}

/// A running moto server with [`BUCKET`] in it.
pub struct S3 {
    port: u16,
    child: Child,
    /// Its log (moto logs each request).
    log: tempfile::NamedTempFile,
    http: Http,
}

impl S3 {
    /// On a free port; `None` (the test is skipped) when moto cannot be installed
    /// outside CI.
    pub async fn start() -> Option<Self> {
        available().then_some(())?;
        Some(Self::start_on(free_port()).await)
    }

    /// On `port` (where a gateway may have been told to look already).
    pub async fn start_on(port: u16) -> Self {
        assert!(available(), "moto is not installed");
        let python = python().expect("moto is installed");
        let log = tempfile::NamedTempFile::new().expect("a log file");
        let child = Command::new(python)
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p"])
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(log.reopen().expect("the log file"))
            .stderr(log.reopen().expect("the log file"))
            .spawn()
            .expect("start moto");
        let mut s3 = Self {
            port,
            child,
            log,
            http: Http::new(SocketAddr::from(([127, 0, 0, 1], port))),
        };
        s3.wait_until_up().await;
        let r = s3
            .http
            .send(Method::PUT, &format!("/{BUCKET}"), &[], Bytes::new())
            .await;
        assert_eq!(r.status, 200, "creating the bucket: {}", r.text());
        s3
    }

    async fn wait_until_up(&mut self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("moto's status") {
                panic!("moto exited ({status}):\n{}", self.log());
            }
            if self
                .http
                .try_send(Method::GET, "/", &[], Bytes::new())
                .await
                .is_ok()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "moto did not answer on port {}:\n{}",
                self.port,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `key` of the bucket, read with a plain GET (moto asks for no signature).
    pub async fn object(&self, key: &str) -> Reply {
        self.http.get_bare(&format!("/{BUCKET}/{key}")).await
    }

    /// `method` of `path` (with its query) on the server, as a browser following a
    /// direct link sends it: no key, no signature of its own.
    pub async fn fetch(&self, method: http::Method, path: &str) -> Reply {
        self.http.send(method, path, &[], "").await
    }

    /// What moto logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
