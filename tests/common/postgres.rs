//! Throwaway PostgreSQL clusters for the tests: Debian's server binaries (`postgresql`
//! package), a fresh `initdb` in a temporary folder, listening on a free loopback port.
//!
//! [`shared`] starts one cluster per test process, lazily, that tests take fresh databases
//! from ([`Cluster::database`]); [`Cluster::start`] gives a test a cluster of its own (to
//! restart or stop it under load). Each postmaster runs as a child of a thread that lives as
//! long as the test process and is asked to die with that thread (`PR_SET_PDEATHSIG`), so a
//! test process that ends, even by a panic or a signal, leaves no server behind; its folder
//! goes with the next run (see [`sweep`]).
//!
//! When the tests run as root, the server runs as the `postgres` user the package creates
//! (PostgreSQL refuses to run as root).
//!
//! For failover, [`Cluster::start_primary`] and [`Cluster::standby`] give a primary and a
//! streaming standby it replicates to synchronously; [`Cluster::kill9`], [`Cluster::freeze`]
//! and [`Cluster::promote`] are what goes wrong with the one and what is done with the other.
//!
//! This file is also compiled into the library's own tests (`store::postgres`), by path, which
//! use only the shared cluster's databases: hence the `allow`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// A transaction open on a psql session of its own ([`Cluster::hold_transaction`]); rolled
/// back when dropped uncommitted.
pub struct HeldTransaction {
    psql: Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
}

impl HeldTransaction {
    /// Runs `sql` in the transaction, whose last statement returns one row of one value;
    /// returns that value once the database has answered.
    pub fn run(&mut self, sql: &str) -> String {
        let stdin = self.stdin.as_mut().expect("psql's stdin");
        writeln!(stdin, "{sql}").expect("write to psql");
        let mut line = String::new();
        self.stdout
            .read_line(&mut line)
            .expect("read psql's output");
        line.trim().to_string()
    }

    pub fn commit(mut self) {
        let mut stdin = self.stdin.take().expect("psql's stdin");
        stdin.write_all(b"COMMIT;\n").expect("write to psql");
        drop(stdin);
        let status = self.psql.wait().expect("wait for psql");
        assert!(status.success(), "psql's COMMIT failed: {status}");
    }
}

impl Drop for HeldTransaction {
    fn drop(&mut self) {
        if self.stdin.take().is_some() {
            let _ = self.psql.kill();
            let _ = self.psql.wait();
        }
    }
}

/// Where every cluster's folder lives: `intake-pg-<pid>-<n>` below it.
fn base_dir() -> PathBuf {
    std::env::temp_dir()
}

const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The server's binaries: `$INTAKE_TEST_PG_BIN`, else the newest of
/// `/usr/lib/postgresql/*/bin`.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("INTAKE_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "no PostgreSQL server in /usr/lib/postgresql: install Debian's `postgresql` \
             package (.ci/run does) or set INTAKE_TEST_PG_BIN"
        ),
    }
}

/// The uid and gid the server runs as: `postgres` when the tests run as root.
fn server_user() -> Option<(u32, u32)> {
    if rustix::process::geteuid().as_raw() != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
    let line = passwd
        .lines()
        .find(|l| l.starts_with("postgres:"))
        .expect("the tests run as root and there is no `postgres` user to run PostgreSQL as");
    let fields: Vec<&str> = line.split(':').collect();
    Some((fields[2].parse().unwrap(), fields[3].parse().unwrap()))
}

/// A command of the server's, as the user it runs as.
fn server_command(program: &str) -> Command {
    let mut cmd = Command::new(bin_dir().join(program));
    if let Some((uid, gid)) = server_user() {
        cmd.uid(uid).gid(gid);
    }
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LC_ALL", "C.UTF-8");
    cmd
}

/// Removes the folders of clusters whose test process has ended.
fn sweep() {
    let Ok(entries) = std::fs::read_dir(base_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix("intake-pg-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A free loopback port (free when asked; the server binds it right after).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
}

/// One running cluster.
pub struct Cluster {
    dir: PathBuf,
    port: u16,
    /// `-c name=value` settings beyond the defaults of [`Cluster::run`].
    settings: Vec<String>,
    /// The postmaster, owned by its keeper thread; `None` while stopped.
    postmaster: Mutex<Option<Keeper>>,
    next_db: AtomicU64,
}

/// The thread a postmaster is the child of: it waits for orders and stops the server when told
/// to (or dies with the process, taking the server with it).
struct Keeper {
    orders: mpsc::Sender<Order>,
    done: mpsc::Receiver<()>,
    /// The postmaster's process id.
    pid: rustix::process::Pid,
}

enum Order {
    /// Stop with this signal and wait for the exit.
    Stop(rustix::process::Signal),
}

static SHARED: OnceLock<Cluster> = OnceLock::new();

/// The test process's shared cluster, started on first use.
pub fn shared() -> &'static Cluster {
    SHARED.get_or_init(Cluster::start)
}

impl Cluster {
    /// `initdb` into a new folder, then starts the server on a free loopback port.
    pub fn start() -> Cluster {
        Cluster::start_with(|_| Vec::new())
    }

    /// A cluster that accepts TLS with the certificate chain `cert_pem` and its key.
    pub fn start_tls(cert_pem: &str, key_pem: &str) -> Cluster {
        Cluster::start_with(|dir| {
            let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
            std::fs::write(&cert, cert_pem).expect("write the certificate");
            std::fs::write(&key, key_pem).expect("write the key");
            // PostgreSQL takes only a key its own user owns and alone may read.
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
                .expect("chmod the key");
            if let Some((uid, gid)) = server_user() {
                for file in [&cert, &key] {
                    std::os::unix::fs::chown(file, Some(uid), Some(gid)).expect("chown");
                }
            }
            vec![
                "ssl=on".into(),
                format!("ssl_cert_file={}", cert.display()),
                format!("ssl_key_file={}", key.display()),
            ]
        })
    }

    /// `initdb`, then `settings` (given the cluster's folder, where it may write files), then
    /// the server started.
    fn start_with(settings: impl FnOnce(&Path) -> Vec<String>) -> Cluster {
        sweep();
        let dir = cluster_dir("");
        let data = dir.join("data");
        let out = server_command("initdb")
            .args([
                "--auth=trust",
                "--username=intake",
                "--encoding=UTF8",
                "--no-sync",
            ])
            .arg("-D")
            .arg(&data)
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let settings = settings(&dir);
        let cluster = Cluster {
            dir,
            port: free_port(),
            settings,
            postmaster: Mutex::new(None),
            next_db: AtomicU64::new(0),
        };
        cluster.run();
        cluster
    }

    /// Starts the postmaster (again) and waits until it accepts connections.
    pub fn run(&self) {
        let mut slot = self.postmaster.lock().unwrap();
        assert!(slot.is_none(), "the cluster is already running");
        let (orders, order_rx) = mpsc::channel();
        let (done_tx, done) = mpsc::channel();
        let (started_tx, started) = mpsc::channel::<Result<u32, String>>();
        let mut cmd = server_command("postgres");
        cmd.arg("-D")
            .arg(self.dir.join("data"))
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", &format!("port={}", self.port)])
            .args([
                "-c",
                &format!("unix_socket_directories={}", self.dir.display()),
            ])
            .args(["-c", "max_connections=400", "-c", "shared_buffers=64MB"])
            .args(["-c", "fsync=on", "-c", "synchronous_commit=on"])
            .args(self.settings.iter().flat_map(|s| ["-c", s.as_str()]))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(self.dir.join("server.log"))
                    .map(Stdio::from)
                    .unwrap_or_else(|_| Stdio::null()),
            );
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::QUIT,
                ))
                .map_err(std::io::Error::from)
            });
        }
        std::thread::Builder::new()
            .name("postmaster".into())
            .spawn(move || {
                let child: std::io::Result<Child> = cmd.spawn();
                let mut child = match child {
                    Ok(child) => {
                        let _ = started_tx.send(Ok(child.id()));
                        child
                    }
                    Err(err) => {
                        let _ = started_tx.send(Err(err.to_string()));
                        return;
                    }
                };
                // Until told otherwise, wait; a dropped sender (the cluster gone) stops it.
                let signal = match order_rx.recv() {
                    Ok(Order::Stop(signal)) => signal,
                    Err(_) => rustix::process::Signal::QUIT,
                };
                if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                    let _ = rustix::process::kill_process(pid, signal);
                }
                let _ = child.wait();
                let _ = done_tx.send(());
            })
            .expect("spawn the postmaster's thread");
        let pid = match started.recv() {
            Ok(Ok(pid)) => rustix::process::Pid::from_raw(pid as i32).expect("a process id"),
            Ok(Err(err)) => panic!("cannot start postgres: {err}"),
            Err(_) => panic!("the postmaster's thread ended before starting it"),
        };
        *slot = Some(Keeper { orders, done, pid });
        drop(slot);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let out = Command::new(bin_dir().join("pg_isready"))
                .args(self.client_args())
                .output()
                .expect("run pg_isready");
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not accept connections within {READY_TIMEOUT:?}; its log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server: `immediate` as a crash would (SIGQUIT: no checkpoint, crash
    /// recovery at the next start), otherwise a fast shutdown (SIGINT). A frozen server is
    /// woken first, so that it can.
    pub fn stop(&self, immediate: bool) {
        let keeper = self.postmaster.lock().unwrap().take();
        if let Some(keeper) = keeper {
            signal_tree(keeper.pid, rustix::process::Signal::CONT);
            let signal = if immediate {
                rustix::process::Signal::QUIT
            } else {
                rustix::process::Signal::INT
            };
            let _ = keeper.orders.send(Order::Stop(signal));
            let _ = keeper.done.recv_timeout(Duration::from_secs(60));
        }
    }

    /// `kill -9` of the postmaster and every process it started, all at once, as when its
    /// machine dies (the connections close: the kernel is still there).
    pub fn kill9(&self) {
        let keeper = self.postmaster.lock().unwrap().take();
        if let Some(keeper) = keeper {
            signal_tree(keeper.pid, rustix::process::Signal::KILL);
            let _ = keeper
                .orders
                .send(Order::Stop(rustix::process::Signal::KILL));
            let _ = keeper.done.recv_timeout(Duration::from_secs(60));
        }
    }

    /// SIGSTOP of the postmaster and every process it started: a hung (or cut off) server
    /// whose kernel still accepts connections and acknowledges what is sent, and answers
    /// nothing. [`Cluster::stop`] (and so dropping the cluster) wakes it to stop it.
    pub fn freeze(&self) {
        if let Some(keeper) = self.postmaster.lock().unwrap().as_ref() {
            signal_tree(keeper.pid, rustix::process::Signal::STOP);
        }
    }

    /// A cluster that also listens on `address` (which must exist when it starts) and lets
    /// the hosts of `subnet` in, as it does the loopback (`tests/partition.rs`).
    pub fn start_also_on(address: std::net::Ipv4Addr, subnet: &str) -> Cluster {
        Cluster::start_with(|dir| {
            let hba = dir.join("data").join("pg_hba.conf");
            let mut rules = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
            rules.push_str(&format!("host all all {subnet} trust\n"));
            std::fs::write(&hba, rules).expect("write pg_hba.conf");
            vec![format!("listen_addresses=127.0.0.1,{address}")]
        })
    }

    /// A primary that replicates synchronously to the standbys made of it
    /// ([`Cluster::standby`]): a commit returns once a standby has it on disk.
    pub fn start_primary() -> Cluster {
        Cluster::start_with(|_| vec!["synchronous_standby_names=*".into()])
    }

    /// A streaming standby of this cluster (`pg_basebackup -R`), started on a port of its
    /// own; returns once this cluster replicates to it synchronously.
    pub fn standby(&self) -> Cluster {
        let dir = cluster_dir("standby-");
        let out = server_command("pg_basebackup")
            .args(self.client_args())
            .args(["-R", "-X", "stream", "--checkpoint=fast", "--no-sync"])
            .arg("-D")
            .arg(dir.join("data"))
            .output()
            .expect("run pg_basebackup");
        assert!(
            out.status.success(),
            "pg_basebackup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let standby = Cluster {
            dir,
            port: free_port(),
            settings: Vec::new(),
            postmaster: Mutex::new(None),
            next_db: AtomicU64::new(0),
        };
        standby.run();
        let deadline = Instant::now() + READY_TIMEOUT;
        while self.psql(
            "postgres",
            "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
        ) != "1"
        {
            assert!(
                Instant::now() < deadline,
                "the standby did not become synchronous; its log:\n{}",
                standby.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        standby
    }

    /// Promotes this standby to a primary (`pg_ctl promote`) and waits until it takes writes.
    pub fn promote(&self) {
        let out = server_command("pg_ctl")
            .args(["promote", "-w", "-t", "60", "-D"])
            .arg(self.dir.join("data"))
            .output()
            .expect("run pg_ctl promote");
        assert!(
            out.status.success(),
            "pg_ctl promote failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// As `pg_ctl restart -m immediate`: a crash and a restart on the same port.
    pub fn restart_immediate(&self) {
        self.stop(true);
        self.run();
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    /// The URL of database `name`.
    pub fn url(&self, name: &str) -> String {
        format!("postgresql://intake@127.0.0.1:{}/{name}", self.port)
    }

    /// The options that connect a client program to this server, as the tests' user.
    fn client_args(&self) -> [String; 6] {
        let port = self.port.to_string();
        ["-h", "127.0.0.1", "-p", &port, "-U", "intake"].map(String::from)
    }

    /// psql on database `db`, as the tests' user, without a `.psqlrc` (`-X`) and stopping at
    /// the first error.
    fn psql_command(&self, db: &str) -> Command {
        let mut cmd = Command::new("psql");
        cmd.args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
            .args(self.client_args())
            .args(["-d", db])
            .env_clear()
            .env("PATH", "/usr/bin:/bin");
        cmd
    }

    /// Runs SQL on database `db` with psql; panics with its error when it fails.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = self
            .psql_command(db)
            .args(["-A", "-t", "-c", sql])
            .output()
            .expect("run psql (Debian's postgresql-client)");
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A transaction begun on database `db` (a name or URL) in a psql session of its own,
    /// which has its transaction id already: open until [`HeldTransaction::commit`].
    pub fn hold_transaction(&self, db: &str) -> HeldTransaction {
        let mut psql = self
            .psql_command(db)
            .args(["-A", "-t"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run psql (Debian's postgresql-client)");
        let mut stdin = psql.stdin.take().expect("psql's stdin");
        stdin
            .write_all(b"BEGIN;\nSELECT pg_current_xact_id();\n")
            .expect("write to psql");
        let mut xid = String::new();
        let mut stdout = BufReader::new(psql.stdout.take().expect("psql's stdout"));
        stdout.read_line(&mut xid).expect("read psql's output");
        assert!(
            xid.trim().parse::<u64>().is_ok(),
            "psql said {xid:?} for its transaction id"
        );
        HeldTransaction {
            psql,
            stdin: Some(stdin),
            stdout,
        }
    }

    /// The database at `url` (one of [`Cluster::url`]'s), schema and data, as a plain SQL
    /// script without owners or privileges, so [`Cluster::restore`] can load it anywhere.
    pub fn dump(&self, url: &str) -> Vec<u8> {
        pg_dump(&["--no-owner", "--no-privileges", "--dbname", url], &[])
    }

    /// A new database holding what the SQL `script` makes (a [`Cluster::dump`]); returns its
    /// URL.
    pub fn restore(&self, script: &[u8]) -> String {
        let url = self.database();
        self.psql_script(database_name(&url), script);
        url
    }

    /// Runs the SQL `script` on database `db` with psql, stopping at the first error; returns
    /// what it prints (unaligned, tuples only, as it is: `COPY … TO STDOUT` rows too), and
    /// panics with the error when it fails.
    pub fn psql_script(&self, db: &str, script: &[u8]) -> Vec<u8> {
        let mut child = self
            .psql_command(db)
            .args(["-A", "-t", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run psql (Debian's postgresql-client)");
        let mut stdin = child.stdin.take().expect("psql's stdin");
        let script = script.to_vec();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            // psql stops reading at the first error: the rest of the script is not needed.
            let _ = stdin.write_all(&script);
        });
        let out = child.wait_with_output().expect("wait for psql");
        let _ = writer.join();
        assert!(
            out.status.success(),
            "psql script on {db} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// A new empty database; returns its URL.
    pub fn database(&self) -> String {
        self.database_from(None)
    }

    /// A new database copied from `template` (a database no one is connected to), or empty;
    /// returns its URL.
    pub fn database_from(&self, template: Option<&str>) -> String {
        let name = format!("t{}", self.next_db.fetch_add(1, Ordering::Relaxed));
        let sql = match template {
            Some(t) => format!("CREATE DATABASE {name} TEMPLATE {t}"),
            None => format!("CREATE DATABASE {name}"),
        };
        self.psql("postgres", &sql);
        self.url(&name)
    }

    /// Drops the database at `url` (one of [`Cluster::url`]'s), closing its connections.
    /// Never panics, as it runs in `Drop`: a failure is only printed.
    pub fn drop_database(&self, url: &str) {
        let name = database_name(url);
        let out = self
            .psql_command("postgres")
            .arg("-c")
            .arg(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .output();
        match out {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "cannot drop database {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(err) => eprintln!("cannot run psql to drop database {name}: {err}"),
        }
    }
}

/// Runs pg_dump with `args` and the environment `vars`; returns what it prints, and panics
/// with its error when it fails.
pub fn pg_dump(args: &[&str], vars: &[(&str, &str)]) -> Vec<u8> {
    let out = Command::new(bin_dir().join("pg_dump"))
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .envs(vars.iter().copied())
        .output()
        .expect("run pg_dump");
    assert!(
        out.status.success(),
        "pg_dump failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// The name of the database at `url` (one of [`Cluster::url`]'s).
pub fn database_name(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or_default()
}

/// Sends `signal` to the postmaster `pid` and to every process whose parent it is (the
/// backends, the WAL writer and sender, the checkpointer...). The postmaster is stopped
/// first, so that it starts no process the signal would miss and its children are still its
/// own when they are looked up.
fn signal_tree(pid: rustix::process::Pid, signal: rustix::process::Signal) {
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::STOP);
    for child in children(pid.as_raw_nonzero().get()) {
        if let Some(child) = rustix::process::Pid::from_raw(child) {
            let _ = rustix::process::kill_process(child, signal);
        }
    }
    let _ = rustix::process::kill_process(pid, signal);
}

/// The processes whose parent is `parent`: the kernel's list of them, or else every process
/// whose parent it is.
fn children(parent: i32) -> Vec<i32> {
    if let Ok(list) = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children")) {
        return list
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
    }
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let child: i32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
            let ppid: i32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            (ppid == parent).then_some(child)
        })
        .collect()
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop(true);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A new folder for a cluster of this test process (`kind` tells a standby's apart), open to
/// the server's user.
fn cluster_dir(kind: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = base_dir().join(format!(
        "intake-pg-{}-{kind}{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create the cluster folder");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
        .expect("open the cluster folder to the server's user");
    dir
}
