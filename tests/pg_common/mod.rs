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
    /// Runs the test `name` (its full path in the test binary, `module::test`) of this very test
    /// binary in a child process, with `env` set.
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

// ---------------------------------------------------------------------------------------------
// Fault injection (tests/cluster_faults.rs): admin SQL through psql, the server's processes,
// and signals to them. Everything here only adds to the helpers above.
// ---------------------------------------------------------------------------------------------

/// The `application_name` of the admin sessions opened by these helpers (so that a query for
/// the store's backends never finds them).
pub(crate) const ADMIN_APP: &str = "wheelpool-test-admin";

impl PgServer {
    /// The server's port on 127.0.0.1.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// A `psql` command (as the `postgres` user when root) connected to this server as an
    /// admin session named `app`; each statement is bounded by the server (10 s) so that a
    /// test never hangs on it.
    fn psql_command(&self, app: &str) -> Command {
        let mut cmd = self.command("psql");
        cmd.current_dir("/")
            .arg("-X")
            .arg("-q")
            .arg("-A")
            .arg("-t")
            .arg("-v")
            .arg("ON_ERROR_STOP=1")
            .arg("-d")
            .arg(format!(
                "host=127.0.0.1 port={} user=postgres dbname=postgres application_name={app} \
                 connect_timeout=10",
                self.port
            ));
        cmd
    }

    /// Runs `sql` in a fresh admin session (psql `-c`), statement timeout 10 s; gives its
    /// unaligned, tuples-only output. Panics (with psql's message) if it fails.
    pub(crate) fn psql(&self, sql: &str) -> String {
        let out = self
            .psql_command(ADMIN_APP)
            .env("PGOPTIONS", "-c statement_timeout=10000")
            .arg("-c")
            .arg(sql)
            .stdin(Stdio::null())
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts psql in the background on `script` (fed on stdin, one statement per line), as a
    /// session named `app`; killed on drop. No statement timeout: the script decides.
    pub(crate) fn spawn_psql(&self, app: &str, script: &str) -> PsqlChild {
        let mut session = self.psql_session(app);
        {
            use std::io::Write;
            let mut stdin = session.stdin.take().expect("psql stdin");
            stdin
                .write_all(script.as_bytes())
                .expect("write the psql script");
            // Dropped: psql sees the end of its script and exits after the last statement.
        }
        session
    }

    /// Starts an interactive psql session named `app`: statements go in with
    /// [`PsqlChild::send`]; [`PsqlChild::wait_output`] ends the input and waits for the exit.
    /// Killed on drop.
    pub(crate) fn psql_session(&self, app: &str) -> PsqlChild {
        let mut child = self
            .psql_command(app)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn psql");
        let stdin = child.stdin.take();
        PsqlChild { child, stdin }
    }

    /// Pids of the server's backends whose `application_name` is `app`.
    pub(crate) fn backend_pids(&self, app: &str) -> Vec<u32> {
        let out = self.psql(&format!(
            "SELECT pid FROM pg_stat_activity WHERE application_name = '{app}' \
             AND backend_type = 'client backend' ORDER BY pid"
        ));
        out.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| l.trim().parse().expect("a pid"))
            .collect()
    }

    /// The `state` column of pg_stat_activity for backend `pid` (`idle`, `active`,
    /// `idle in transaction`, ...), or `None` if there is no such backend.
    pub(crate) fn backend_state(&self, pid: u32) -> Option<String> {
        let out = self.psql(&format!(
            "SELECT coalesce(state, '?') FROM pg_stat_activity WHERE pid = {pid}"
        ));
        let line = out.trim();
        (!line.is_empty()).then(|| line.to_owned())
    }

    /// `pg_terminate_backend` on every backend whose `application_name` is `app`; gives how
    /// many it terminated.
    pub(crate) fn terminate_backends(&self, app: &str) -> usize {
        let out = self.psql(&format!(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE application_name = '{app}' AND backend_type = 'client backend'"
        ));
        out.trim().parse().expect("a count")
    }

    /// The postmaster's pid: the first line of `<data>/postmaster.pid`.
    pub(crate) fn postmaster_pid(&self) -> u32 {
        let text = std::fs::read_to_string(self.data().join("postmaster.pid"))
            .expect("read postmaster.pid (is the server running?)");
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("a pid on the first line of postmaster.pid")
    }

    /// Freezes the whole server: SIGSTOP to the postmaster, then to each of its children
    /// (found by parent pid in /proc after the postmaster is stopped, so that it forks no new
    /// one meanwhile). Everything is continued when the guard drops.
    pub(crate) fn freeze(&self) -> Stopped {
        let postmaster = self.postmaster_pid();
        let mut stopped = Stopped::new(&[postmaster]);
        stopped.stop_more(&children_of(postmaster));
        stopped
    }
}

/// A background psql session (see [`PgServer::spawn_psql`]); killed on drop.
#[derive(Debug)]
pub(crate) struct PsqlChild {
    child: Child,
    /// Open for an interactive session ([`PgServer::psql_session`]).
    stdin: Option<std::process::ChildStdin>,
}

impl PsqlChild {
    /// Sends more of the script (an interactive session: psql runs each line as it comes).
    pub(crate) fn send(&mut self, sql: &str) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("an interactive psql session");
        stdin.write_all(sql.as_bytes()).expect("write to psql");
        stdin.flush().expect("flush psql's stdin");
    }

    /// Waits (at most `timeout`) for psql to exit; gives its output (unaligned, tuples only),
    /// or `None` if it still runs. Panics with its messages if it failed.
    pub(crate) fn wait_output(&mut self, timeout: Duration) -> Option<String> {
        use std::io::Read;
        // The end of the script, for an interactive session.
        drop(self.stdin.take());
        let end = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for psql") {
                let mut out = String::new();
                if let Some(o) = self.child.stdout.as_mut() {
                    let _ = o.read_to_string(&mut out);
                }
                if !status.success() {
                    let mut err = String::new();
                    if let Some(e) = self.child.stderr.as_mut() {
                        let _ = e.read_to_string(&mut err);
                    }
                    panic!("background psql failed ({status}): {out}{err}");
                }
                return Some(out);
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for PsqlChild {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pids whose parent is `parent` (from /proc/<pid>/stat).
pub(crate) fn children_of(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) state ppid ...": the command may hold spaces and parentheses.
        let rest = &stat[stat.rfind(')')? + 1..];
        let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
        (ppid == parent).then_some(pid)
    })
    .collect()
}

/// Sends `signal` (a name, as `kill -s` takes it) to `pid`; gives whether `kill` succeeded
/// (it fails for a process that has exited).
pub(crate) fn signal(pid: u32, signal: &str) -> bool {
    Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Processes stopped with SIGSTOP; each gets SIGCONT when [`cont`](Self::cont) is called or
/// the guard drops (also when the test panics), so no test leaves a stopped process behind.
#[derive(Debug)]
pub(crate) struct Stopped {
    pids: Vec<u32>,
}

impl Stopped {
    /// SIGSTOP to each of `pids`.
    pub(crate) fn new(pids: &[u32]) -> Stopped {
        let mut s = Stopped { pids: Vec::new() };
        s.stop_more(pids);
        s
    }

    /// SIGSTOP to more processes, continued with the rest.
    pub(crate) fn stop_more(&mut self, pids: &[u32]) {
        for &pid in pids {
            // Recorded first: a process stopped but not recorded would never be continued.
            self.pids.push(pid);
            signal(pid, "STOP");
        }
    }

    /// The stopped processes.
    pub(crate) fn pids(&self) -> &[u32] {
        &self.pids
    }

    /// SIGCONT to every stopped process, children before the first (the postmaster of a
    /// frozen server).
    pub(crate) fn cont(mut self) {
        self.cont_all();
    }

    fn cont_all(&mut self) {
        for pid in self.pids.drain(..).rev() {
            signal(pid, "CONT");
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.cont_all();
    }
}
