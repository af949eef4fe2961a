//! A throwaway PostgreSQL server for the cluster tests: `initdb` into a fresh temporary
//! directory, `pg_ctl start` on a free port of 127.0.0.1 with trust authentication, and
//! `pg_ctl stop -m immediate` plus removal of the directory on drop (also when the test
//! panics). Running as root, every server command runs as the `postgres` system user (the
//! server refuses to run as root).
//!
//! Each server has its own directory and port, so tests may run in parallel.

#![allow(dead_code)] // each test file uses a different subset

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Where the Debian packages put PostgreSQL 15 (override with `WHEELPOOL_PG_BIN`).
const DEFAULT_BIN: &str = "/usr/lib/postgresql/15/bin";

/// Upper bound for anything that should happen "soon"; it only decides how long a broken run
/// takes to fail.
pub(crate) const LONG: Duration = Duration::from_secs(60);

/// Polls `cond` every 5 ms until it holds (true) or `timeout` passes (false).
pub(crate) fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A running (or stopped) throwaway server.
#[derive(Debug)]
pub(crate) struct PgServer {
    base: PathBuf,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl PgServer {
    /// Creates and starts a server; panics with the reason if it cannot.
    pub(crate) fn start() -> PgServer {
        let bin = PathBuf::from(std::env::var("WHEELPOOL_PG_BIN").unwrap_or(DEFAULT_BIN.into()));
        assert!(
            bin.join("initdb").exists(),
            "PostgreSQL server binaries not found in {} (install postgresql-15, or set \
             WHEELPOOL_PG_BIN to the directory holding initdb and pg_ctl)",
            bin.display()
        );
        let as_postgres = std::fs::metadata("/proc/self")
            .map(|m| m.uid() == 0)
            .unwrap_or(false);
        let server = PgServer {
            base: fresh_dir(),
            bin,
            port: 0,
            as_postgres,
        };
        if as_postgres {
            run(Command::new("chown").arg("postgres:").arg(&server.base));
        }
        let data = server.data();
        run(server
            .command("initdb")
            .args([
                "--auth=trust",
                "--username=postgres",
                "--encoding=UTF8",
                "--locale=C",
            ])
            .arg("--no-sync")
            .arg("-D")
            .arg(&data));
        server.start_on_free_port()
    }

    /// A libpq connection string for the server.
    pub(crate) fn url(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres connect_timeout=5",
            self.port
        )
    }

    /// Stops the server at once (`-m immediate`: clients are cut off, as in a crash).
    pub(crate) fn stop(&self) {
        run(self
            .command("pg_ctl")
            .args(["stop", "-m", "immediate", "-w", "-D"])
            .arg(self.data()));
    }

    /// Starts the stopped server again, on the same port and data.
    pub(crate) fn restart(&self) {
        let ok = self.try_start(self.port);
        assert!(ok, "restart failed; log:\n{}", self.log());
    }

    fn start_on_free_port(mut self) -> PgServer {
        for _ in 0..5 {
            let port = free_port();
            if self.try_start(port) {
                self.port = port;
                return self;
            }
        }
        panic!("the server did not start; log:\n{}", self.log());
    }

    /// Starts the server on `port`. `fsync=off` only matters if the machine crashes (the data
    /// is thrown away anyway); commits stay synchronous, so an immediate stop loses none.
    fn try_start(&self, port: u16) -> bool {
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off",
            self.base.display()
        );
        let status = self
            .command("pg_ctl")
            .args(["start", "-w", "-t", "60", "-D"])
            .arg(self.data())
            .arg("-l")
            .arg(self.base.join("log"))
            .arg("-o")
            .arg(options)
            .stdout(Stdio::null())
            .status()
            .expect("run pg_ctl");
        status.success()
    }

    /// The server's log so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.base.join("log")).unwrap_or_default()
    }

    /// The server's directory (data, socket, log); removed on drop.
    pub(crate) fn dir(&self) -> &Path {
        &self.base
    }

    fn data(&self) -> PathBuf {
        self.base.join("data")
    }

    fn command(&self, tool: &str) -> Command {
        let path = self.bin.join(tool);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if self.port != 0 {
            let _ = self
                .command("pg_ctl")
                .args(["stop", "-m", "immediate", "-w", "-D"])
                .arg(self.data())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// A new empty directory under the system's temp dir, unique to this process and call.
fn fresh_dir() -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "wheelpool-pg-{}-{}-{nanos}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create a temp dir");
    dir
}

/// A port nothing listens on right now (the OS picks it).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

/// Runs `cmd`, panicking with its output if it fails.
fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A child process whose stdout the test reads line by line (through a reader thread, so a
/// silent child fails the test after [`LONG`] instead of hanging it); killed on drop.
#[derive(Debug)]
pub(crate) struct ChildNode {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl ChildNode {
    /// Runs the test `name` of this very test binary in a child process, with `env` set.
    pub(crate) fn spawn_test(name: &str, env: &[(&str, &str)]) -> ChildNode {
        let exe = std::env::current_exe().expect("test binary path");
        let mut cmd = Command::new(exe);
        cmd.args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn the child node");
        let stdout = child.stdout.take().expect("child stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        ChildNode { child, lines }
    }

    /// What follows `marker` in the first line of the child's output that holds it (the test
    /// harness may print its own text before it on the same line).
    pub(crate) fn after_marker(&mut self, marker: &str) -> String {
        let end = Instant::now() + LONG;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no {marker:?} from the child within {LONG:?}: {e}"));
            if let Some((_, rest)) = line.split_once(marker) {
                return rest.trim().to_owned();
            }
        }
    }

    /// Kills the child (SIGKILL: no cleanup, like a crash) and reaps it.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildNode {
    fn drop(&mut self) {
        self.kill();
    }
}
