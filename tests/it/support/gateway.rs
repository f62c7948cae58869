//! Starting a gateway: in-process through `mediagate::start` (the default), or as the
//! real binary in a subprocess where the process itself is under test (signals, the
//! `check` command, kill and restart, its log output).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::routes::{UPSTREAM_KEY, UPSTREAM_KEY_FILE};
use super::{Http, PATIENCE, panics_here, watch_panics};

/// A fresh directory holding `routes.toml` (relative paths in it resolve here), the
/// key file that test provider blocks name, and whatever else the test puts in.
pub struct ConfigDir(tempfile::TempDir);

impl ConfigDir {
    pub fn new(routes: impl std::fmt::Display) -> Self {
        let dir = Self(tempfile::tempdir().expect("temp dir"));
        dir.write("routes.toml", &routes.to_string());
        dir.write(UPSTREAM_KEY_FILE, &format!("{UPSTREAM_KEY}\n"));
        dir
    }

    /// Put `contents` in `name`, beside the routes file.
    pub fn write(&self, name: &str, contents: &str) {
        std::fs::write(self.path().join(name), contents).expect("write into the config dir");
    }

    pub fn with(self, name: &str, contents: &str) -> Self {
        self.write(name, contents);
        self
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }

    pub fn routes_path(&self) -> PathBuf {
        self.path().join("routes.toml")
    }
}

/// A gateway served by this process, on the test's runtime. Stops on drop.
pub struct Gateway {
    pub addr: SocketAddr,
    pub tls_addr: Option<SocketAddr>,
    pub admin_addr: Option<SocketAddr>,
    running: mediagate::Running,
    dir: ConfigDir,
    panics_before: usize,
}

impl Gateway {
    /// Start on `routes` (a whole routes.toml, or a [`super::Routes`]) in a fresh
    /// directory.
    pub async fn start(routes: impl std::fmt::Display) -> Self {
        Self::start_in(ConfigDir::new(routes)).await
    }

    pub async fn start_in(dir: ConfigDir) -> Self {
        watch_panics();
        let panics_before = panics_here();
        let running = mediagate::start(&dir.routes_path())
            .await
            .unwrap_or_else(|e| panic!("the gateway did not start: {e}"));
        Self {
            addr: running.addr,
            tls_addr: running.tls_addr,
            admin_addr: running.admin_addr,
            running,
            dir,
            panics_before,
        }
    }

    pub fn dir(&self) -> &ConfigDir {
        &self.dir
    }

    /// Stop as SIGTERM does (submits in flight finish), keeping the directory for a
    /// restart.
    pub async fn stop(self) -> ConfigDir {
        self.running.stop().await.expect("a clean stop");
        self.dir
    }

    pub fn client(&self) -> Http {
        Http::new(self.addr)
    }

    /// A client of the admin listener (`server.metrics_listen`), where `/metrics` is.
    pub fn admin(&self) -> Http {
        Http::new(self.admin_addr.expect("the gateway has an admin listener"))
    }

    /// A client that speaks only HTTP/2 with prior knowledge (cleartext h2c).
    pub fn client_h2(&self) -> Http {
        Http::h2c(self.addr)
    }

    /// Read the routes file again, as SIGHUP does; the problems when refused.
    pub async fn reload(&self) -> Result<(), String> {
        self.running.reload().await.map_err(|e| e.to_string())
    }

    /// Replace the routes file and reload.
    pub async fn reload_with(&self, routes: &str) -> Result<(), String> {
        self.dir.write("routes.toml", routes);
        self.reload().await
    }

    /// Nothing of this gateway panicked, even where no client saw it (a detached task
    /// on the test's thread).
    #[track_caller]
    pub fn assert_no_panic(&self) {
        assert_eq!(panics_here(), self.panics_before, "the gateway panicked");
    }
}

/// `mediagate` with the environment variables it reads cleared (S3 storage reads every
/// `AWS_*`: a test gives the ones it means) and its log on stderr at `info`.
fn binary(cwd: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_mediagate"));
    cmd.current_dir(cwd)
        .env("RUST_LOG", "info")
        .env_remove("MEDIAGATE_TASK_SECRET")
        .env_remove("MEDIAGATE_TASK_SECRETS_PREVIOUS")
        .env_remove("MEDIAGATE_LOG_FORMAT");
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("AWS_") {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// Run an operator command (`tasks`, `usage`, …) on the ledger of the routes file in
/// `dir`; its standard output, which must be a success.
pub fn operator(dir: &ConfigDir, args: &[&str]) -> String {
    let out = binary(dir.path())
        .arg("--config")
        .arg(dir.routes_path())
        .args(args)
        .output()
        .expect("mediagate runs");
    assert!(
        out.status.success(),
        "mediagate {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Run `mediagate check FILE` in `cwd` with `env` set.
pub fn check(cwd: &Path, file: &Path, env: &[(&str, &str)]) -> Output {
    let mut cmd = binary(cwd);
    cmd.arg("check").arg(file);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run mediagate check")
}

/// The real binary serving in a subprocess; its log is collected. Killed on drop.
pub struct Proc {
    pub addr: SocketAddr,
    pub tls_addr: Option<SocketAddr>,
    pub admin_addr: Option<SocketAddr>,
    dir: ConfigDir,
    args: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
    log: Arc<Mutex<Vec<String>>>,
}

/// The address after `marker` (e.g. "listening on http://") in a log line, text or JSON.
fn address_after(line: &str, marker: &str) -> Option<SocketAddr> {
    let at = line.find(marker)?;
    let rest = &line[at + marker.len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == ':'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

type Addresses = (SocketAddr, Option<SocketAddr>, Option<SocketAddr>);

impl Proc {
    pub fn dir(&self) -> &ConfigDir {
        &self.dir
    }

    pub async fn start(routes: impl std::fmt::Display) -> Self {
        Self::start_in(ConfigDir::new(routes), &[], &[]).await
    }

    /// `mediagate serve --config routes.toml ARGS` in `dir`, with `env` set.
    pub async fn start_in(dir: ConfigDir, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut proc = Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls_addr: None,
            admin_addr: None,
            dir,
            args: args.iter().map(|a| a.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            child: None,
            log: Arc::default(),
        };
        proc.launch().await;
        proc
    }

    async fn launch(&mut self) {
        let mut cmd = binary(self.dir.path());
        cmd.arg("serve")
            .arg("--config")
            .arg(self.dir.routes_path())
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start mediagate");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = tokio::sync::oneshot::channel::<Addresses>();
        let sink = self.log.clone();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            let (mut tls, mut admin) = (None, None);
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                tls = tls.or(address_after(&line, "listening on https://"));
                admin = admin.or(address_after(&line, "metrics listener on http://"));
                // The plain address is logged last: every listener is up by then.
                if let Some(addr) = address_after(&line, "listening on http://")
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send((addr, tls, admin));
                }
                sink.lock().unwrap().push(line);
            }
        });
        match tokio::time::timeout(PATIENCE, rx).await {
            Ok(Ok((addr, tls, admin))) => {
                (self.addr, self.tls_addr, self.admin_addr) = (addr, tls, admin);
                self.child = Some(child);
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("mediagate did not start; log:\n{}", self.log());
            }
        }
    }

    pub fn client(&self) -> Http {
        Http::new(self.addr)
    }

    /// Everything the process logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    pub fn count_in_log(&self, needle: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Wait until `needle` has been logged `times` times in all.
    pub async fn wait_for_log(&self, needle: &str, times: usize) {
        let deadline = Instant::now() + PATIENCE;
        while self.count_in_log(needle) < times {
            assert!(
                Instant::now() < deadline,
                "`{needle}` was not logged {times} times:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A memory figure of the process from `/proc/PID/status`, in KiB: `VmRSS` (now)
    /// or `VmHWM` (the peak so far).
    pub fn memory_kib(&self, field: &str) -> u64 {
        let pid = self.child.as_ref().expect("running").id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
    }

    /// Send `sig` (`HUP` or `TERM`), once the process has taken the signal over: the
    /// gateway announces its listeners before its SIGTERM handler is in place, and a
    /// signal in between would end it by the default action.
    pub async fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let number: u32 = match sig {
            "HUP" => 1,
            "TERM" => 15,
            other => panic!("no signal {other} in the tests"),
        };
        let caught = || {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            status
                .lines()
                .find_map(|l| l.strip_prefix("SigCgt:"))
                .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
                .is_some_and(|mask| mask & (1 << (number - 1)) != 0)
        };
        let deadline = Instant::now() + PATIENCE;
        while !caught() {
            assert!(
                Instant::now() < deadline,
                "mediagate never took SIG{sig} over"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill -{sig} {pid}");
    }

    /// Pause (SIGSTOP) or resume (SIGCONT) the process: a stall no handler sees, as
    /// of a process swapped out or a machine suspended.
    pub fn pause(&self, paused: bool) {
        let pid = self.child.as_ref().expect("running").id();
        let sig = if paused { "-STOP" } else { "-CONT" };
        let ok = Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill {sig} {pid}");
    }

    /// Rewrite the routes file, send SIGHUP, and wait for the outcome to be logged.
    /// True when the new file was taken.
    pub async fn reload_with(&self, routes: &str) -> bool {
        const TAKEN: &str = "configuration reloaded";
        const REFUSED: &str = "configuration NOT reloaded";
        let before = self.count_in_log(TAKEN) + self.count_in_log(REFUSED);
        self.dir.write("routes.toml", routes);
        self.signal("HUP").await;
        let deadline = Instant::now() + PATIENCE;
        while self.count_in_log(TAKEN) + self.count_in_log(REFUSED) == before {
            assert!(Instant::now() < deadline, "no reload:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.log
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|l| l.contains(TAKEN) || l.contains(REFUSED))
            .is_some_and(|l| l.contains(TAKEN))
    }

    /// Kill (SIGKILL) and start again with the same files and arguments.
    pub async fn restart(&mut self) {
        self.kill();
        self.launch().await;
    }

    /// Kill (SIGKILL): the process ends at once, without a word to anyone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Wait for the process to exit, at most `limit`.
    pub async fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().expect("wait for mediagate") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("mediagate did not exit; log:\n{}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}
