//! A PostgreSQL cluster of the test's own, in a temporary directory on a free port:
//! initdb and pg_ctl from the machine's PostgreSQL (`/usr/lib/postgresql/*/bin`). As
//! root they run as the `postgres` user, since PostgreSQL refuses to run as root.

use std::path::PathBuf;
use std::process::Command;

/// A running cluster; stopped and removed on drop.
pub struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl Postgres {
    pub fn start() -> Self {
        super::services();
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .ok()
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|b| b.join("initdb").exists())
            .max()
            .expect(
                "PostgreSQL is installed (/usr/lib/postgresql/*/bin; .ci/services installs it)",
            );
        let dir = tempfile::tempdir().expect("temp dir");
        let as_postgres = running_as_root();
        if as_postgres {
            let ok = Command::new("chown")
                .arg("postgres")
                .arg(dir.path())
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chown postgres {}", dir.path().display());
        }
        let port = free_port();
        let pg = Self {
            dir,
            bin,
            port,
            as_postgres,
        };
        let data = pg.dir.path().join("data");
        pg.run(
            "initdb",
            &[
                "-D",
                path(&data),
                "--auth=trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
            ],
        );
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            path(pg.dir.path())
        );
        let log = pg.dir.path().join("log");
        pg.run(
            "pg_ctl",
            &[
                "-D",
                path(&data),
                "-l",
                path(&log),
                "-o",
                &options,
                "-w",
                "start",
            ],
        );
        pg
    }

    /// A new, empty database; its URL.
    pub fn database(&self, name: &str) -> String {
        let port = self.port.to_string();
        self.run(
            "createdb",
            &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", name],
        );
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let program = self.bin.join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        let out = cmd.args(args).output().expect("PostgreSQL tools run");
        assert!(
            out.status.success(),
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let program = self.bin.join("pg_ctl");
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        let _ = cmd
            .arg("-D")
            .arg(&data)
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().expect("temporary paths are UTF-8")
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A loopback port nothing listens on (at the moment it is asked).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
