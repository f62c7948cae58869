//! A Redis server of the test's own: the machine's `redis-server` (Debian's package;
//! `.ci/services` installs it) on a free loopback port, nothing saved to disk. It can be
//! stopped and started again on the same port. Killed on drop.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{PATIENCE, free_port};

pub struct Redis {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
    password: Option<String>,
}

impl Redis {
    pub async fn start() -> Self {
        let mut redis = Self {
            port: free_port(),
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
            password: None,
        };
        redis.launch().await;
        redis
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Start again on the same port (after [`Redis::kill`]), empty.
    pub async fn launch(&mut self) {
        self.launch_with(&[]).await;
    }

    /// Start again (after [`Redis::kill`]) asking clients for `password`.
    pub async fn launch_with_password(&mut self, password: &str) {
        self.password = Some(password.to_string());
        self.launch_with(&["--requirepass", password]).await;
    }

    async fn launch_with(&mut self, args: &[&str]) {
        assert!(self.child.is_none(), "redis-server is already running");
        super::services();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(args)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs (Debian's redis-server package; .ci/services installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + PATIENCE;
        while !self.answers().await {
            assert!(Instant::now() < deadline, "redis-server never answered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Kill the server (SIGKILL): its port refuses connections until relaunched.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Whether it answers PING.
    async fn answers(&self) -> bool {
        let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await else {
            return false;
        };
        if let Some(pw) = &self.password {
            let mut ok = [0u8; 5];
            let auth = format!("AUTH {pw}\r\n");
            if s.write_all(auth.as_bytes()).await.is_err() || s.read_exact(&mut ok).await.is_err() {
                return false;
            }
        }
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").await.is_ok()
            && s.read_exact(&mut buf).await.is_ok()
            && &buf == b"+PONG\r\n"
    }

    /// Keys whose name starts with `prefix`, with `redis-cli`.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.cli(&["--scan", "--pattern", &format!("{prefix}*")])
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Members of the sorted set `key` (0 when there is none).
    pub fn zcard(&self, key: &str) -> u64 {
        let out = self.cli(&["zcard", key]);
        out.trim()
            .parse()
            .unwrap_or_else(|_| panic!("ZCARD {key}: {out}"))
    }

    /// `redis-cli` with `args`: what it printed.
    fn cli(&self, args: &[&str]) -> String {
        let mut cli = Command::new("redis-cli");
        if let Some(pw) = &self.password {
            cli.env("REDISCLI_AUTH", pw);
        }
        let out = cli
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}
