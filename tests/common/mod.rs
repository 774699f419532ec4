//! Shared harness for the integration tests.
//!
//! Tests drive the real `intake` binary (`env!("CARGO_BIN_EXE_intake")`, [`TestServer`])
//! over real HTTP on loopback, each with its own temporary data directory; tests that need time
//! to pass run the server in-process on a manual clock instead ([`in_process`]), still over
//! real HTTP. Both deref to a [`ServerClient`] with the shared request helpers.

pub mod backup;
pub mod browser;
pub mod ca;
pub mod cdp;
pub mod in_process;
pub mod netns;
pub mod nodes;
pub mod postgres;
pub mod receiver;
pub mod smtp;
pub mod sse;
pub mod visitor;

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Condvar, LazyLock, Mutex, OnceLock, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use intake::core::config::{Config, StorageBackend};
use serde_json::{Value, json};

pub const OWNER_EMAIL: &str = "owner@example.com";
pub const BODY_LIMIT: usize = 102_400;
/// Alphabet of the 26 characters that follow `rec_` in a record id.
pub const ID_ALPHABET: &str = "0123456789abcdefghjkmnpqrstvwxyz";

const START_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

/// Path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_intake")
}

/// A `Command` for the binary with a clean environment: no inherited
/// `INTAKE_*` variables, `RUST_LOG=info`.
pub fn intake_cmd() -> Command {
    with_test_env(Command::new(bin()))
}

/// `cmd`, which runs the binary (itself, or through another program such as `ip netns exec`),
/// with the environment the tests give it: no `INTAKE_*` of the test's own, logs at `info`.
pub fn with_test_env(mut cmd: Command) -> Command {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("INTAKE_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("RUST_LOG", "info");
    cmd.stdin(Stdio::null());
    cmd
}

/// An external program a test drives: `$env_var`, else Debian's `default` path. Missing, the
/// test fails naming the package to install; it never skips.
pub fn external_program(env_var: &str, default: &str, package: &str) -> PathBuf {
    let path = std::env::var_os(env_var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(default));
    assert!(
        path.exists(),
        "{} not found: install Debian's `{package}` package (.ci/run does) or set {env_var}",
        path.display()
    );
    path
}

/// Runs a short-lived CLI command to completion, with a deadline.
pub fn run_cli(cmd: &mut Command, timeout: Duration) -> Output {
    add_storage(cmd);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn intake");
    let out_reader = spawn_collector(child.stdout.take().unwrap());
    let err_reader = spawn_collector(child.stderr.take().unwrap());
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let out = out_reader.join().unwrap();
            let err = err_reader.join().unwrap();
            panic!(
                "command {cmd:?} did not finish within {timeout:?}\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&err)
            );
        }
        thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}

fn spawn_collector<R: Read + Send + 'static>(mut r: R) -> thread::JoinHandle<Vec<u8>> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

/// Result of `intake init --json`.
#[derive(Debug, Clone)]
pub struct InitOutput {
    pub password: String,
    pub token: String,
}

/// Runs `intake init --data-dir DIR --owner-email EMAIL --json` and parses
/// its stdout (exactly one JSON object).
pub fn init_data_dir(dir: &Path, email: &str) -> InitOutput {
    init_with(&["--data-dir".as_ref(), dir.as_os_str()], email)
}

/// Runs `intake init --config FILE --owner-email EMAIL --json`, like [`init_data_dir`].
pub fn init_with_config(config: &Path, email: &str) -> InitOutput {
    init_with(&["--config".as_ref(), config.as_os_str()], email)
}

fn init_with(args: &[&std::ffi::OsStr], email: &str) -> InitOutput {
    let out = run_cli(
        intake_cmd()
            .arg("init")
            .args(args)
            .arg("--owner-email")
            .arg(email)
            .arg("--json"),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "intake init failed: {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).expect("init stdout is UTF-8");
    let json: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("init --json stdout is not one JSON value ({e}): {stdout:?}"));
    let s = |k: &str| {
        json.get(k)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("init --json output lacks string key {k:?}: {json}"))
            .to_string()
    };
    assert_eq!(
        s("owner_email"),
        email,
        "init --json names the owner it made"
    );
    InitOutput {
        password: s("password"),
        token: s("token"),
    }
}

/// Prints the last 40 warnings and errors of `log`, the log of `server`: a failing test calls
/// it as it unwinds, to show what the server said about it (CI keeps only the output).
pub fn print_problems(server: &str, log: &LogBuffer) {
    let lines = log.lines();
    let problems: Vec<_> = lines
        .iter()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .collect();
    let shown = &problems[problems.len().saturating_sub(40)..];
    eprintln!(
        "--- {server}'s last {} warnings and errors (of {} log lines) ---",
        shown.len(),
        lines.len()
    );
    for line in shown {
        eprintln!("{line}");
    }
}

/// Everything a server child wrote on stderr (and stdout, prefixed with
/// `[stdout] `), across all runs of one `TestServer`.
#[derive(Clone, Default)]
pub struct LogBuffer {
    inner: Arc<(Mutex<Vec<String>>, Condvar)>,
}

impl LogBuffer {
    pub fn push(&self, line: String) {
        let (m, cv) = &*self.inner;
        m.lock().unwrap().push(line);
        cv.notify_all();
    }

    pub fn lines(&self) -> Vec<String> {
        self.inner.0.lock().unwrap().clone()
    }

    pub fn len(&self) -> usize {
        self.inner.0.lock().unwrap().len()
    }

    pub fn text(&self) -> String {
        self.lines().join("\n")
    }

    /// Waits until a line at index >= `from` satisfies `pred`, or until
    /// `timeout` elapses, or `give_up()` returns true. Returns the line.
    pub fn wait_for(
        &self,
        from: usize,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
        mut give_up: impl FnMut() -> bool,
    ) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let (m, cv) = &*self.inner;
        let mut guard = m.lock().unwrap();
        loop {
            if let Some(l) = guard.iter().skip(from).find(|l| pred(l)) {
                return Some(l.clone());
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            drop(guard);
            if give_up() {
                // One last look: the reader threads may have pushed the line
                // just before the process ended.
                let guard = m.lock().unwrap();
                return guard.iter().skip(from).find(|l| pred(l)).cloned();
            }
            guard = m.lock().unwrap();
            let wait = (deadline - now).min(Duration::from_millis(50));
            guard = cv.wait_timeout(guard, wait).unwrap().0;
        }
    }
}

fn spawn_line_reader<R: Read + Send + 'static>(
    r: R,
    log: LogBuffer,
    prefix: &'static str,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut reader = BufReader::new(r);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf);
                    log.push(format!("{prefix}{}", line.trim_end_matches(['\r', '\n'])));
                }
            }
        }
    })
}

/// A running `intake serve` child plus its log readers.
pub struct ServeProcess {
    pub child: Child,
    pub addr: SocketAddr,
    readers: Vec<thread::JoinHandle<()>>,
}

impl ServeProcess {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn join_readers(&mut self) {
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

/// Parses `listening on http://ADDR` (or `https://ADDR`, a TLS server) out of a log line.
pub fn parse_listen_line(line: &str) -> Option<SocketAddr> {
    let marker = ["listening on http://", "listening on https://"]
        .into_iter()
        .find(|m| line.contains(m))?;
    let idx = line.find(marker)?;
    let rest = &line[idx + marker.len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '[' | ']')))
        .unwrap_or(rest.len());
    let candidate = rest[..end].trim_end_matches(['.', ':']);
    candidate.parse().ok()
}

/// Spawns `intake serve` with the given arguments, collects its output into
/// `log`, and waits for the `listening on http://ADDR` line. Panics (with the
/// log) if the process exits first or the line does not appear in time.
pub fn spawn_serve(
    args: &[&std::ffi::OsStr],
    envs: &[(&str, &str)],
    log: &LogBuffer,
) -> ServeProcess {
    spawn_serve_with(intake_cmd(), args, envs, log)
}

/// [`spawn_serve`] through `cmd`, which runs the binary (from [`with_test_env`]).
pub fn spawn_serve_with(
    mut cmd: Command,
    args: &[&std::ffi::OsStr],
    envs: &[(&str, &str)],
    log: &LogBuffer,
) -> ServeProcess {
    cmd.arg("serve").args(args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    add_storage(&mut cmd);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let from = log.len();
    let mut child = cmd.spawn().expect("spawn intake serve");
    let stderr: ChildStderr = child.stderr.take().unwrap();
    let stdout: ChildStdout = child.stdout.take().unwrap();
    let readers = vec![
        spawn_line_reader(stderr, log.clone(), ""),
        spawn_line_reader(stdout, log.clone(), "[stdout] "),
    ];
    let mut exited = None;
    let line = log.wait_for(
        from,
        START_TIMEOUT,
        |l| parse_listen_line(l).is_some(),
        || {
            if let Ok(Some(st)) = child.try_wait() {
                exited = Some(st);
                true
            } else {
                false
            }
        },
    );
    match line {
        Some(l) => ServeProcess {
            addr: parse_listen_line(&l).unwrap(),
            child,
            readers,
        },
        None => {
            let _ = child.kill();
            let st = child.wait().ok();
            for r in readers {
                let _ = r.join();
            }
            panic!(
                "intake serve did not log `listening on http://ADDR` (exit status: {:?})\n--- log ---\n{}",
                exited.or(st),
                log.lines()[from..].join("\n")
            );
        }
    }
}

/// Sends SIGTERM to `pid`.
pub fn sigterm(pid: u32) {
    let st = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(st.success(), "kill -TERM {pid} failed");
}

/// Waits for a child to exit, with a deadline (kills it and panics if late).
pub fn wait_with_deadline(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            return st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("process did not exit within {timeout:?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
}

// ---------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------

/// A fully read HTTP response.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response body is not JSON ({e}); status {} body {:?}",
                self.status,
                self.text()
            )
        })
    }

    pub fn request_id(&self) -> String {
        self.header("x-request-id")
            .unwrap_or_else(|| panic!("response has no X-Request-Id header: {self:?}"))
            .to_string()
    }

    /// The `error.code` of an error body, if any.
    pub fn error_code(&self) -> Option<String> {
        let v: Value = serde_json::from_slice(&self.body).ok()?;
        v.pointer("/error/code")?.as_str().map(str::to_string)
    }

    pub fn describe(&self) -> String {
        format!("status {} body {}", self.status, self.text())
    }
}

/// An agent that returns 4xx/5xx as responses and opens a fresh connection
/// per request: no test depends on keep-alive behaviour (the dedicated
/// keep-alive test in data_api.rs checks that on raw sockets).
pub fn new_agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_idle_connections(0)
        .max_idle_connections_per_host(0)
        .max_redirects(0)
        .timeout_global(Some(timeout))
        .build()
        .into()
}

/// Sends one request with `headers`, and `body` as JSON (with its Content-Type) when given.
pub fn try_send_json(
    agent: &ureq::Agent,
    url: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Result<Resp, ureq::Error> {
    let bytes = body.map(|b| serde_json::to_vec(b).expect("a JSON value serialises"));
    let mut h = headers.to_vec();
    if bytes.is_some() {
        h.push(("Content-Type", "application/json"));
    }
    try_send(agent, url, method, &h, bytes.as_deref())
}

/// Sends one request. `body: None` sends no body at all.
pub fn try_send(
    agent: &ureq::Agent,
    url: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<Resp, ureq::Error> {
    let mut b = ureq::http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let mut resp = match body {
        Some(bytes) => agent.run(b.body(bytes.to_vec())?)?,
        None => agent.run(b.body(())?)?,
    };
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let body = resp
        .body_mut()
        .with_config()
        .limit(64 << 20)
        .read_to_vec()?;
    Ok(Resp {
        status,
        headers,
        body,
    })
}

/// A raw HTTP/1.1 exchange over a fresh TCP connection: writes `request`
/// (ignoring write errors), then reads one response (headers plus a body of
/// `Content-Length` bytes) with a read timeout. Returns the response and how
/// long it took to arrive.
pub fn raw_exchange(addr: SocketAddr, request: &[u8], timeout: Duration) -> (Resp, Duration) {
    let started = Instant::now();
    let s = TcpStream::connect(addr).expect("connect");
    (exchange_on(s, request, timeout), started.elapsed())
}

/// [`raw_exchange`] from the local address `from`: any address of 127.0.0.0/8 works on
/// loopback, so one test can play clients at several addresses (login limits per address).
pub fn raw_exchange_from(
    from: IpAddr,
    addr: SocketAddr,
    request: &[u8],
    timeout: Duration,
) -> Resp {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        None,
    )
    .expect("socket");
    socket
        .bind(&SocketAddr::new(from, 0).into())
        .unwrap_or_else(|e| panic!("bind {from}: {e}"));
    socket
        .connect_timeout(&addr.into(), timeout)
        .unwrap_or_else(|e| panic!("connect from {from} to {addr}: {e}"));
    exchange_on(socket.into(), request, timeout)
}

fn exchange_on(mut s: TcpStream, request: &[u8], timeout: Duration) -> Resp {
    s.set_read_timeout(Some(timeout)).unwrap();
    s.set_write_timeout(Some(timeout)).unwrap();
    let _ = s.write_all(request);
    let _ = s.flush();
    read_response(&mut s).unwrap_or_else(|e| panic!("{e}"))
}

/// `POST /api/v1/auth/login` to the server (or proxy) at `addr`, from the local address `from`,
/// with `extra` headers (`X-Forwarded-For`...).
pub fn login_from(
    from: IpAddr,
    addr: SocketAddr,
    extra: &[(&str, &str)],
    email: &str,
    password: &str,
) -> Resp {
    let body = json!({ "email": email, "password": password }).to_string();
    let extra: String = extra.iter().map(|(k, v)| format!("{k}: {v}\r\n")).collect();
    let request = format!(
        "POST /api/v1/auth/login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}",
        body.len()
    );
    raw_exchange_from(from, addr, request.as_bytes(), Duration::from_secs(60))
}

/// Reads one HTTP/1.1 response (head plus `Content-Length` body) from `s`,
/// using the stream's read timeout.
pub fn read_response(s: &mut TcpStream) -> Result<Resp, String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let header_end;
    loop {
        if let Some(p) = find_subslice(&buf, b"\r\n\r\n") {
            header_end = p + 4;
            break;
        }
        match s.read(&mut chunk) {
            Ok(0) => {
                return Err(format!(
                    "connection closed before a full response head arrived; got {:?}",
                    String::from_utf8_lossy(&buf)
                ));
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => {
                return Err(format!(
                    "no response head ({e}); got {:?}",
                    String::from_utf8_lossy(&buf)
                ));
            }
        }
    }
    let head = String::from_utf8_lossy(&buf[..header_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    let mut body = buf[header_end..].to_vec();
    let want = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok());
    if let Some(want) = want {
        while body.len() < want {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&chunk[..n]),
            }
        }
        body.truncate(want);
    }
    Ok(Resp {
        status,
        headers,
        body,
    })
}

fn find_subslice(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

/// Asserts that `resp` is an error with `status` and `code`, that the body has
/// the documented shape, and that `error.request_id` equals `X-Request-Id`.
#[track_caller]
pub fn assert_error(resp: &Resp, status: u16, code: &str) {
    assert_eq!(
        resp.status,
        status,
        "expected {status} {code}, got {}",
        resp.describe()
    );
    let v: Value = serde_json::from_slice(&resp.body).unwrap_or_else(|e| {
        panic!(
            "error body is not JSON ({e}): {} (expected {status} {code})",
            resp.text()
        )
    });
    let err = v
        .get("error")
        .unwrap_or_else(|| panic!("error body lacks `error` object: {v}"));
    assert_eq!(
        err.get("code").and_then(Value::as_str),
        Some(code),
        "wrong error code (status {}) body {v}",
        resp.status
    );
    let msg = err.get("message").and_then(Value::as_str).unwrap_or("");
    assert!(!msg.trim().is_empty(), "error.message is empty: {v}");
    let rid = err
        .get("request_id")
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("error.request_id missing: {v}"));
    assert!(!rid.is_empty(), "error.request_id is empty: {v}");
    assert_eq!(
        resp.header("x-request-id"),
        Some(rid),
        "X-Request-Id header must equal error.request_id; headers {:?}",
        resp.headers
    );
}

#[track_caller]
pub fn assert_status(resp: &Resp, status: u16) {
    assert_eq!(
        resp.status,
        status,
        "unexpected response: {}",
        resp.describe()
    );
}

/// The error message of an error response.
pub fn error_message(resp: &Resp) -> String {
    resp.json()
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Whether `id` is a well-formed record id.
pub fn is_record_id(id: &str) -> bool {
    match id.strip_prefix("rec_") {
        Some(rest) => rest.len() == 26 && rest.chars().all(|c| ID_ALPHABET.contains(c)),
        None => false,
    }
}

/// A well-formed record id that will never exist.
pub fn unknown_record_id() -> String {
    "rec_00000000000000000000000000".to_string()
}

/// Parses an RFC 3339 timestamp in UTC (`Z` or `+00:00`) into
/// (seconds since the epoch, nanoseconds). Returns None for anything else.
pub fn parse_rfc3339_utc(s: &str) -> Option<(i64, u32)> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        if t.bytes().all(|c| c.is_ascii_digit()) {
            t.parse().ok()
        } else {
            None
        }
    };
    if b[4] != b'-'
        || b[7] != b'-'
        || !(b[10] == b'T' || b[10] == b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let (y, mo, d, h, mi, sec) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut nanos = 0u32;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits: String = frac.chars().take_while(|c| c.is_ascii_digit()).collect();
        if digits.is_empty() || digits.len() > 9 {
            return None;
        }
        nanos = format!("{digits:0<9}").parse().ok()?;
        rest = &frac[digits.len()..];
    }
    if !(rest == "Z" || rest == "z" || rest == "+00:00") {
        return None;
    }
    // Days from civil (Howard Hinnant).
    let (yy, m) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some((days * 86_400 + h * 3600 + mi * 60 + sec, nanos))
}

#[track_caller]
pub fn ts(s: &Value) -> (i64, u32) {
    let st = s
        .as_str()
        .unwrap_or_else(|| panic!("timestamp is not a string: {s}"));
    parse_rfc3339_utc(st).unwrap_or_else(|| panic!("not an RFC 3339 UTC timestamp: {st:?}"))
}

// ---------------------------------------------------------------------------
// Test server
// ---------------------------------------------------------------------------

/// An endpoint as returned by the management API.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub slug: String,
    pub sandbox_key: String,
    pub production_key: String,
    pub json: Value,
}

impl Endpoint {
    pub fn from_json(v: &Value) -> Endpoint {
        let s = |k: &str| {
            v.get(k)
                .and_then(Value::as_str)
                .unwrap_or_else(|| panic!("endpoint object lacks string {k:?}: {v}"))
                .to_string()
        };
        Endpoint {
            slug: s("slug"),
            sandbox_key: s("sandbox_key"),
            production_key: s("production_key"),
            json: v.clone(),
        }
    }
}

/// The binary under test, serving a temp data dir of its own. Derefs to its [`ServerClient`]
/// for the request helpers.
pub struct TestServer {
    pub dir: tempfile::TempDir,
    pub password: String,
    pub log: LogBuffer,
    proc: Option<ServeProcess>,
    client: ServerClient,
}

impl TestServer {
    /// Fresh temp data dir provisioned by `intake init`, then `intake serve`
    /// on an ephemeral port.
    ///
    /// `init` hashes the owner password with argon2, which takes about a
    /// second in a debug build; to keep the suite fast it runs once per test
    /// binary and each test gets a private copy of that freshly initialised
    /// (never served) data dir. `tests/cli.rs` exercises `init` itself.
    pub fn start() -> TestServer {
        TestServer::start_with_args(&[])
    }

    /// The server `proc` spawned on `dir`, which `init` provisioned.
    fn running(
        dir: tempfile::TempDir,
        init: InitOutput,
        log: LogBuffer,
        proc: ServeProcess,
    ) -> Self {
        TestServer {
            client: ServerClient::new(proc.addr, init.token),
            dir,
            password: init.password,
            log,
            proc: Some(proc),
        }
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    pub fn pid(&self) -> u32 {
        self.proc.as_ref().expect("server not running").pid()
    }

    /// SIGKILL, then wait for the process.
    pub fn kill9(&mut self) {
        if let Some(mut p) = self.proc.take() {
            let _ = p.child.kill();
            let _ = p.child.wait();
            p.join_readers();
        }
    }

    /// SIGTERM, then wait (with a deadline) for the exit status.
    pub fn sigterm_and_wait(&mut self) -> ExitStatus {
        let mut p = self.proc.take().expect("server not running");
        sigterm(p.pid());
        let st = wait_with_deadline(&mut p.child, STOP_TIMEOUT);
        p.join_readers();
        st
    }

    /// Starts the server again on the same data dir (new ephemeral port).
    /// The previous process must have been stopped.
    pub fn restart(&mut self) {
        self.restart_with_args(&[]);
    }
}

impl std::ops::Deref for TestServer {
    type Target = ServerClient;

    fn deref(&self) -> &ServerClient {
        &self.client
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_problems("the server", &self.log);
        }
        if let Some(mut p) = self.proc.take() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
        release_storage(self.dir.path());
    }
}

/// HTTP to one running server (the binary or [`in_process::InProcessServer`]): its address,
/// an agent and the owner's token, with the request helpers the tests share.
pub struct ServerClient {
    pub agent: ureq::Agent,
    pub owner_token: String,
    addr: SocketAddr,
}

impl ServerClient {
    /// A client with a fresh agent: connections to an earlier server are dead.
    pub fn new(addr: SocketAddr, owner_token: String) -> ServerClient {
        ServerClient {
            agent: new_agent(Duration::from_secs(30)),
            owner_token,
            addr,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The owner's view of an environment's webhook signing secret (asserts 200).
    pub fn webhook_secret(&self, slug: &str, env: &str) -> Value {
        let path = format!("/api/v1/manage/endpoints/{slug}/webhook-secrets/{env}");
        let r = self.manage("GET", &path, None);
        assert_status(&r, 200);
        r.json()
    }

    /// The current signing secret (`whsec_…`) of an environment.
    pub fn webhook_signing_secret(&self, slug: &str, env: &str) -> String {
        let view = self.webhook_secret(slug, env);
        match view["secret"].as_str() {
            Some(secret) => secret.to_string(),
            None => panic!("no secret in {view}"),
        }
    }

    /// `GET /readyz`'s status once it is 200, or its last status when `limit` has passed (a
    /// server just started may still be building its search index).
    pub fn ready_status_within(&self, limit: Duration) -> u16 {
        let deadline = Instant::now() + limit;
        loop {
            let ready = self.request("GET", "/readyz", &[], None);
            if ready.status == 200 || Instant::now() >= deadline {
                return ready.status;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Resp {
        let url = format!("{}{}", self.base_url(), path);
        try_send(&self.agent, &url, method, headers, body)
            .unwrap_or_else(|e| panic!("{method} {path}: transport error: {e}"))
    }

    /// Management call with the owner token; JSON body if given.
    pub fn manage(&self, method: &str, path: &str, body: Option<&Value>) -> Resp {
        let auth = format!("Bearer {}", self.owner_token);
        self.manage_with(method, path, Some(&auth), body)
    }

    /// The sandbox deliveries of endpoint `slug` as the API lists them (the newest 100, newest
    /// first), once `done` holds for them; panics after 30 s.
    pub fn sandbox_deliveries_once(
        &self,
        slug: &str,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let path = format!("/api/v1/manage/endpoints/{slug}/deliveries?limit=100");
        loop {
            let list = self.manage("GET", &path, None).json()["data"]
                .as_array()
                .expect("data")
                .clone();
            if done(&list) {
                return list;
            }
            assert!(Instant::now() < deadline, "timed out: {list:#?}");
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn manage_with(
        &self,
        method: &str,
        path: &str,
        authorization: Option<&str>,
        body: Option<&Value>,
    ) -> Resp {
        let h: Vec<(&str, &str)> = authorization
            .map(|a| ("Authorization", a))
            .into_iter()
            .collect();
        self.request_json(method, path, &h, body)
    }

    /// [`ServerClient::request`] with `body` as JSON (and its Content-Type) when given.
    pub fn request_json(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Resp {
        let url = format!("{}{}", self.base_url(), path);
        try_send_json(&self.agent, &url, method, headers, body)
            .unwrap_or_else(|e| panic!("{method} {path}: transport error: {e}"))
    }

    /// Creates an endpoint through the management API (asserts 201).
    pub fn create_endpoint(&self, name: &str, required_fields: &[&str]) -> Endpoint {
        let mut body = json!({ "name": name });
        if !required_fields.is_empty() {
            body["required_fields"] = json!(required_fields);
        }
        let r = self.manage("POST", "/api/v1/manage/endpoints", Some(&body));
        assert_status(&r, 201);
        Endpoint::from_json(&r.json())
    }

    pub fn deploy(&self, slug: &str) -> Value {
        let r = self.manage(
            "POST",
            &format!("/api/v1/manage/endpoints/{slug}/deploy"),
            None,
        );
        assert_status(&r, 200);
        r.json()
    }

    pub fn patch_endpoint(&self, slug: &str, body: &Value) -> Value {
        let r = self.manage(
            "PATCH",
            &format!("/api/v1/manage/endpoints/{slug}"),
            Some(body),
        );
        assert_status(&r, 200);
        r.json()
    }

    /// Data call with `Authorization: Bearer KEY`; optional JSON body is
    /// sent with `Content-Type: application/json`.
    pub fn data(&self, method: &str, path: &str, key: &str, body: Option<&Value>) -> Resp {
        self.data_with(method, path, key, &[], body)
    }

    /// `GET /api/v1/data/{slug}/export{query}`, read to its end.
    pub fn export(&self, slug: &str, key: &str, query: &str) -> Resp {
        self.data(
            "GET",
            &format!("/api/v1/data/{slug}/export{query}"),
            key,
            None,
        )
    }

    /// Stores `payloads` with one batch; returns their ids in order.
    pub fn store_all(&self, slug: &str, key: &str, payloads: &[Value]) -> Vec<String> {
        let body: String = payloads.iter().map(|p| format!("{p}\n")).collect();
        let r = self.request(
            "POST",
            &format!("/api/v1/data/{slug}/batch"),
            &[
                ("Authorization", &format!("Bearer {key}")),
                ("Content-Type", "application/x-ndjson"),
            ],
            Some(body.as_bytes()),
        );
        assert_status(&r, 202);
        r.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["id"].as_str().unwrap().to_string())
            .collect()
    }

    /// Every record the poll feed of `slug` gives from its beginning, page by page (100 a
    /// page), in the feed's order.
    pub fn poll_from_start(&self, slug: &str, key: &str) -> Vec<Value> {
        let mut records = Vec::new();
        let mut query = "since=1970-01-01&limit=100".to_string();
        loop {
            let page = self.data(
                "GET",
                &format!("/api/v1/data/{slug}/poll?{query}"),
                key,
                None,
            );
            assert_eq!(page.status, 200, "{}", page.describe());
            let page = page.json();
            records.extend(page["data"].as_array().expect("poll data").iter().cloned());
            match page["next_cursor"].as_str() {
                Some(cursor) => query = format!("cursor={cursor}&limit=100"),
                None => return records,
            }
        }
    }

    /// [`ServerClient::data`] with `extra` headers (for example `X-Webhook-Callback`).
    pub fn data_with(
        &self,
        method: &str,
        path: &str,
        key: &str,
        extra: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Resp {
        let auth = format!("Bearer {key}");
        let mut h = vec![("Authorization", auth.as_str())];
        h.extend_from_slice(extra);
        self.request_json(method, path, &h, body)
    }

    pub fn post_record(&self, slug: &str, key: &str, payload: &Value) -> Resp {
        self.data("POST", &format!("/api/v1/data/{slug}"), key, Some(payload))
    }

    /// POSTs and asserts 202; returns the response body.
    /// The endpoint's audit log as the owner reads it (`GET …/audit`), as text.
    pub fn audit_text(&self, slug: &str) -> String {
        let r = self.manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{slug}/audit"),
            None,
        );
        assert_status(&r, 200);
        r.text()
    }

    pub fn create_record(&self, slug: &str, key: &str, payload: &Value) -> Value {
        let r = self.post_record(slug, key, payload);
        assert_status(&r, 202);
        r.json()
    }

    pub fn get_record(&self, slug: &str, key: &str, id: &str) -> Resp {
        self.data("GET", &format!("/api/v1/data/{slug}/{id}"), key, None)
    }

    pub fn put_record(&self, slug: &str, key: &str, id: &str, payload: &Value) -> Resp {
        self.data(
            "PUT",
            &format!("/api/v1/data/{slug}/{id}"),
            key,
            Some(payload),
        )
    }

    pub fn delete_record(&self, slug: &str, key: &str, id: &str) -> Resp {
        self.data("DELETE", &format!("/api/v1/data/{slug}/{id}"), key, None)
    }

    pub fn list(&self, slug: &str, key: &str, query: &str) -> Resp {
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        self.data("GET", &format!("/api/v1/data/{slug}{q}"), key, None)
    }

    /// Follows `next_cursor` through every page; returns all records and the
    /// number of pages.
    pub fn list_all(&self, slug: &str, key: &str, limit: usize) -> (Vec<Value>, usize) {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let q = match &cursor {
                Some(c) => format!("limit={limit}&cursor={}", url_encode(c)),
                None => format!("limit={limit}"),
            };
            let r = self.list(slug, key, &q);
            assert_status(&r, 200);
            let v = r.json();
            let data = v["data"]
                .as_array()
                .unwrap_or_else(|| panic!("list response lacks data array: {v}"))
                .clone();
            assert!(
                data.len() <= limit,
                "page has {} > limit {limit}",
                data.len()
            );
            pages += 1;
            out.extend(data);
            match v.pointer("/pagination/next_cursor") {
                Some(Value::String(c)) => cursor = Some(c.clone()),
                None | Some(Value::Null) => break,
                Some(other) => panic!("next_cursor is not a string: {other}"),
            }
            assert!(pages < 1000, "pagination does not terminate");
        }
        (out, pages)
    }

    /// Ids of every record visible with `key`, newest first.
    pub fn list_ids(&self, slug: &str, key: &str) -> Vec<String> {
        self.list_all(slug, key, 30)
            .0
            .iter()
            .map(|r| r["id"].as_str().expect("record id").to_string())
            .collect()
    }

    /// GETs the record and returns its JSON; if it is not immediately
    /// visible, polls briefly only to say in the panic message whether it
    /// showed up late (read-after-write violated) or never.
    #[track_caller]
    pub fn expect_record(&self, slug: &str, key: &str, id: &str) -> Value {
        let r = self.get_record(slug, key, id);
        if r.status == 200 {
            return r.json();
        }
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(3) {
            let again = self.get_record(slug, key, id);
            if again.status == 200 {
                panic!(
                    "record {id} not visible right after its 202 (first GET: {}); it appeared after {:?}",
                    r.describe(),
                    started.elapsed()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!("record {id} is not readable: {}", r.describe());
    }

    /// Fetches the endpoint's request log (one page).
    pub fn request_log(&self, slug: &str, query: &str) -> Resp {
        let q = if query.is_empty() {
            String::new()
        } else {
            format!("?{query}")
        };
        self.manage(
            "GET",
            &format!("/api/v1/manage/endpoints/{slug}/requests{q}"),
            None,
        )
    }

    /// Polls the request log (environment filter `env`) until `pred` holds
    /// for its first page (limit 100), with a deadline.
    pub fn wait_request_log(
        &self,
        slug: &str,
        env: &str,
        timeout: Duration,
        pred: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let r = self.request_log(slug, &format!("environment={env}&limit=100"));
            assert_status(&r, 200);
            let v = r.json();
            let data = v["data"]
                .as_array()
                .unwrap_or_else(|| panic!("request log lacks data array: {v}"))
                .clone();
            if pred(&data) {
                return data;
            }
            if Instant::now() > deadline {
                panic!(
                    "request log condition not met within {timeout:?}; last page: {}",
                    serde_json::to_string_pretty(&data).unwrap()
                );
            }
            thread::sleep(Duration::from_millis(25));
        }
    }
}

struct Template {
    dir: PathBuf,
    init: InitOutput,
}

static TEMPLATE: std::sync::OnceLock<Template> = std::sync::OnceLock::new();

/// Copies a data dir initialised once per test process into `dest`.
fn initialised_copy(dest: &Path) -> InitOutput {
    let t = TEMPLATE.get_or_init(|| {
        // Lives in Cargo's per-target scratch dir; leftovers of finished
        // test processes are removed here.
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
        if let Ok(entries) = std::fs::read_dir(root) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name.strip_prefix("intake-template-") {
                    if !Path::new(&format!("/proc/{pid}")).exists() {
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        let dir = root.join(format!("intake-template-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create template dir");
        if on_postgres() {
            // The template's database, which each copy's is made from.
            let cluster = postgres::shared();
            cluster.psql("postgres", &format!("CREATE DATABASE {TEMPLATE_DATABASE}"));
            assign_database(&dir, cluster.url(TEMPLATE_DATABASE));
        }
        let init = init_data_dir(&dir, OWNER_EMAIL);
        Template { dir, init }
    });
    copy_dir(&t.dir, dest);
    if on_postgres() {
        // The copied master.key is the one the template database's secrets are sealed with.
        let url = postgres::shared().database_from(Some(TEMPLATE_DATABASE));
        assign_database(dest, url);
    }
    t.init.clone()
}

/// The database `intake init` provisions once per test process on PostgreSQL (never served:
/// `CREATE DATABASE ... TEMPLATE` needs it unused).
const TEMPLATE_DATABASE: &str = "init_db";

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

pub fn serve_args(dir: &Path) -> Vec<&std::ffi::OsStr> {
    vec![
        "--data-dir".as_ref(),
        dir.as_os_str(),
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
    ]
}

/// Percent-encodes everything except unreserved characters.
pub fn url_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ---------------------------------------------------------------------------
// Servers with extra `serve` arguments (added for tests/poll.rs)
// ---------------------------------------------------------------------------

impl TestServer {
    /// [`TestServer::start`] with extra `serve` arguments, for example
    /// `--config FILE`.
    pub fn start_with_args(extra: &[&std::ffi::OsStr]) -> TestServer {
        TestServer::start_in(tempfile::tempdir().expect("tempdir"), extra)
    }

    /// [`TestServer::start_with_args`] on a data dir the caller prepared (for example one
    /// with a small file system mounted on it).
    pub fn start_in(dir: tempfile::TempDir, extra: &[&std::ffi::OsStr]) -> TestServer {
        TestServer::start_in_env(dir, extra, &[])
    }

    /// [`TestServer::start_in`] with extra environment variables for `serve`.
    fn start_in_env(
        dir: tempfile::TempDir,
        extra: &[&std::ffi::OsStr],
        envs: &[(&str, &str)],
    ) -> TestServer {
        let init = initialised_copy(dir.path());
        let log = LogBuffer::default();
        let mut args = serve_args(dir.path());
        args.extend_from_slice(extra);
        let proc = spawn_serve(&args, envs, &log);
        TestServer::running(dir, init, log, proc)
    }

    /// [`TestServer::restart`] with extra `serve` arguments (pass the same
    /// ones as at start to keep the configuration).
    pub fn restart_with_args(&mut self, extra: &[&std::ffi::OsStr]) {
        assert!(self.proc.is_none(), "restart() while the server still runs");
        let mut args = serve_args(self.dir.path());
        args.extend_from_slice(extra);
        let p = spawn_serve(&args, &[], &self.log);
        self.client = ServerClient::new(p.addr, self.client.owner_token.clone());
        self.proc = Some(p);
    }
}

// ---------------------------------------------------------------------------
// Servers with a config file (added for tests/mail.rs)
// ---------------------------------------------------------------------------

impl TestServer {
    /// [`TestServer::start`] with a config file holding `toml` (for example the `[smtp]`
    /// section of [`smtp::SmtpServer::config_toml`]). The file is `intake.toml` in the data
    /// dir; `--data-dir` and `--listen` still come from the command line.
    pub fn start_with_config(toml: &str) -> TestServer {
        TestServer::start_with_config_env(toml, &[])
    }

    /// [`TestServer::start_with_config`] with extra environment variables for `serve`, for
    /// example `RUST_LOG=debug` (tests/security.rs).
    pub fn start_with_config_env(toml: &str, envs: &[(&str, &str)]) -> TestServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write_config(dir.path(), toml);
        TestServer::start_in_env(dir, &["--config".as_ref(), config.as_os_str()], envs)
    }

    /// [`TestServer::restart`] with the config file rewritten to `toml` (which may differ
    /// from the one the server ran with before).
    pub fn restart_with_config(&mut self, toml: &str) {
        let config = write_config(self.dir.path(), toml);
        self.restart_with_args(&["--config".as_ref(), config.as_os_str()]);
    }
}

fn write_config(dir: &Path, toml: &str) -> PathBuf {
    let path = dir.join("intake.toml");
    std::fs::write(&path, toml).expect("write config file");
    path
}

// ---------------------------------------------------------------------------
// Session cookies (added for tests/security.rs)
// ---------------------------------------------------------------------------

/// The value of the `intake_session` cookie a response sets (panics if it sets none).
pub fn session_cookie(resp: &Resp) -> String {
    resp.headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("set-cookie"))
        .filter_map(|(_, v)| v.split(';').next()?.strip_prefix("intake_session="))
        .find(|value| !value.is_empty())
        .unwrap_or_else(|| panic!("no intake_session cookie set: {}", resp.describe()))
        .to_string()
}

// ---------------------------------------------------------------------------
// The storage backend: INTAKE_TEST_BACKEND
// ---------------------------------------------------------------------------

/// Where the servers of the tests keep their data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The data dir's redb files (the default).
    Redb,
    /// A database of its own for each data dir, in the test process's PostgreSQL cluster
    /// ([`postgres::shared`]).
    Postgres,
}

/// The backend `INTAKE_TEST_BACKEND` names: `redb` (or unset) or `postgres`. Anything else
/// fails the test rather than quietly testing redb.
pub fn backend() -> Backend {
    static BACKEND: OnceLock<Backend> = OnceLock::new();
    *BACKEND.get_or_init(|| match std::env::var("INTAKE_TEST_BACKEND") {
        Err(std::env::VarError::NotPresent) => Backend::Redb,
        Ok(name) if name.is_empty() || name == "redb" => Backend::Redb,
        Ok(name) if name == "postgres" => Backend::Postgres,
        Ok(name) => panic!("INTAKE_TEST_BACKEND={name:?}: use `redb` or `postgres`"),
        Err(err) => panic!("INTAKE_TEST_BACKEND: {err}"),
    })
}

pub fn on_postgres() -> bool {
    backend() == Backend::Postgres
}

/// For a test about redb's own files (the disk-full guard, the search index, backup
/// archives): on PostgreSQL it does not apply, so this prints why and returns true, and the
/// test returns.
pub fn redb_only(why: &str) -> bool {
    if on_postgres() {
        eprintln!("redb only, not run on PostgreSQL: {why}");
    }
    on_postgres()
}

/// The PostgreSQL counterpart of a redb-only test: on redb this prints why and returns true,
/// and the test returns.
pub fn postgres_only(why: &str) -> bool {
    if !on_postgres() {
        eprintln!("PostgreSQL only, not run on redb: {why}");
    }
    !on_postgres()
}

/// The database of each data dir a server of this process has used, by absolute path: a
/// server started again on a data dir finds its data.
/// (A panic while it is held leaves it usable: the map itself is never half-changed.)
static DATABASES: LazyLock<Mutex<HashMap<PathBuf, String>>> = LazyLock::new(Mutex::default);

fn database_key(data_dir: &Path) -> PathBuf {
    std::path::absolute(data_dir).expect("an absolute data dir path")
}

/// Gives `data_dir` the database at `url` (a copy of the template's, see
/// [`initialised_copy`]).
fn assign_database(data_dir: &Path, url: String) {
    let previous = DATABASES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(database_key(data_dir), url);
    assert!(
        previous.is_none(),
        "{} already has a database",
        data_dir.display()
    );
}

/// Gives `data_dir` the database at `url` (one of [`postgres::Cluster::restore`]'s): its
/// servers use it, and it is dropped with the last of them.
pub fn use_database(data_dir: &Path, url: String) {
    assign_database(data_dir, url);
}

/// On PostgreSQL, the whole database of `data_dir` (schema and data) as a plain `pg_dump`
/// script that [`postgres::Cluster::restore`] loads again; `None` on redb.
pub fn dump_database(data_dir: &Path) -> Option<Vec<u8>> {
    on_postgres().then(|| postgres::shared().dump(&database_of(data_dir)))
}

/// The database of `data_dir`: a new empty one the first time.
pub fn database_of(data_dir: &Path) -> String {
    DATABASES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .entry(database_key(data_dir))
        .or_insert_with(|| postgres::shared().database())
        .clone()
}

/// Drops the database of `data_dir`, whose server is gone for good (the cluster lives as long
/// as the test process; a test binary starts hundreds of servers).
pub fn release_storage(data_dir: &Path) {
    let url = DATABASES
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(&database_key(data_dir));
    if let Some(url) = url {
        postgres::shared().drop_database(&url);
    }
}

/// The storage part of the config of every server the tests start on `data_dir`, as the
/// `INTAKE_STORAGE__*` variables that set it: none on redb (the data dir's files), and on
/// PostgreSQL the data dir's database ([`database_of`]). The binary gets them through its
/// environment ([`add_storage`]), an in-process server through the same loader
/// ([`config_with_storage`]).
pub fn storage_vars(data_dir: &Path) -> Vec<(String, String)> {
    match backend() {
        Backend::Redb => Vec::new(),
        Backend::Postgres => vec![
            ("INTAKE_STORAGE__BACKEND".into(), "postgres".into()),
            (
                "INTAKE_STORAGE__POSTGRES__URL".into(),
                database_of(data_dir),
            ),
            ("INTAKE_STORAGE__POSTGRES__TLS".into(), "disable".into()),
        ],
    }
}

/// Sets the storage of `intake serve`, `init`, `restore` or `account` ([`storage_vars`] of the data dir
/// it will use, as it works that out: `--data-dir`, else the config file and the
/// environment); the other commands open no store. A config that names its database itself
/// (tests/cluster.rs: several nodes on one) keeps it.
fn add_storage(cmd: &mut Command) {
    if !on_postgres() {
        return;
    }
    let args: Vec<OsString> = cmd.get_args().map(OsString::from).collect();
    if !args.first().is_some_and(|command| {
        ["serve", "init", "restore", "account"]
            .iter()
            .any(|c| command == c)
    }) {
        return;
    }
    let flag = |name: &str| {
        args.iter()
            .rposition(|a| a == name)
            .and_then(|at| args.get(at + 1))
            .map(PathBuf::from)
    };
    let vars: Vec<(OsString, OsString)> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_os_string(), v?.to_os_string())))
        .collect();
    // A config the binary refuses needs no store.
    let Ok(config) = Config::load_with_env(flag("--config").as_deref(), vars) else {
        return;
    };
    if config.storage.backend == StorageBackend::Postgres {
        return;
    }
    let data_dir = flag("--data-dir").unwrap_or(config.data_dir);
    let data_dir = match cmd.get_current_dir() {
        Some(cwd) => cwd.join(data_dir),
        None => data_dir,
    };
    for (k, v) in storage_vars(&data_dir) {
        cmd.env(k, v);
    }
}

/// The config of an in-process server on `data_dir`: `toml`, with [`storage_vars`] applied
/// as the binary applies its environment (unless `toml` names its database itself, as
/// [`add_storage`] leaves it).
pub fn config_with_storage(toml: &str, data_dir: &Path) -> Config {
    let file = tempfile::NamedTempFile::new().expect("temp config file");
    std::fs::write(file.path(), toml).expect("write the config file");
    let load = |vars: Vec<(String, String)>| {
        let vars = vars.into_iter().map(|(k, v)| (k.into(), v.into()));
        Config::load_with_env(Some(file.path()), vars).unwrap_or_else(|e| panic!("config: {e}"))
    };
    let mut config = load(Vec::new());
    if config.storage.backend != StorageBackend::Postgres {
        config = load(storage_vars(data_dir));
    }
    config.data_dir = data_dir.to_path_buf();
    config
}

/// On PostgreSQL, everything `data_dir`'s database holds, as `pg_dump --data-only` prints it
/// with `bytea` values (the stored rows) in the escape format, which leaves their printable
/// bytes as they are; `None` on redb, whose data is the data dir's files.
pub fn database_dump(data_dir: &Path) -> Option<Vec<u8>> {
    if !on_postgres() {
        return None;
    }
    let url = database_of(data_dir);
    Some(postgres::pg_dump(
        &["--data-only", "--dbname", &url],
        &[("PGOPTIONS", "-c bytea_output=escape")],
    ))
}

// ---------------------------------------------------------------------------
// Collaborators (tests/permissions.rs, tests/stream.rs)
// ---------------------------------------------------------------------------

/// The password of the accounts [`add_collaborator`] makes.
pub const COLLABORATOR_PASSWORD: &str = "collaborator-password";

/// A collaborator who accepted an invitation as a new account.
pub struct Collaborator {
    pub id: u64,
    pub sandbox_key: String,
    pub cookie: String,
}

impl Collaborator {
    /// See [`authorization_of_session`].
    pub fn authorization(&self, s: &ServerClient) -> String {
        authorization_of_session(s, &self.cookie)
    }
}

/// `Authorization: Bearer …` with a new personal token of the account of session `cookie`,
/// made with the cookie: what a read whose answer holds keys takes (the cookie alone is
/// refused with `token_required`).
pub fn authorization_of_session(s: &ServerClient, cookie: &str) -> String {
    let cookie = format!("intake_session={cookie}");
    let r = s.request_json(
        "POST",
        "/api/v1/manage/tokens",
        &[("Cookie", cookie.as_str())],
        Some(&json!({ "name": "tests" })),
    );
    assert_status(&r, 201);
    format!("Bearer {}", r.json()["token"].as_str().expect("token"))
}

pub fn invitations_path(slug: &str) -> String {
    format!("/api/v1/manage/endpoints/{slug}/invitations")
}

/// Invites `email` with `permissions` and accepts as a new account.
pub fn add_collaborator(
    s: &ServerClient,
    slug: &str,
    email: &str,
    permissions: &[&str],
) -> Collaborator {
    let r = s.manage(
        "POST",
        &invitations_path(slug),
        Some(&json!({"email": email, "permissions": permissions})),
    );
    assert_status(&r, 201);
    let url = r.json()["accept_url"]
        .as_str()
        .expect("accept_url")
        .to_string();
    let token = url.rsplit('/').next().unwrap();
    let body = json!({ "password": COLLABORATOR_PASSWORD }).to_string();
    let r = s.request(
        "POST",
        &format!("/api/v1/invitations/{token}/accept"),
        &[("Content-Type", "application/json")],
        Some(body.as_bytes()),
    );
    assert_status(&r, 200);
    let v = r.json();
    Collaborator {
        id: v["account"]["id"].as_u64().expect("account id"),
        sandbox_key: v["endpoint"]["sandbox_key"]
            .as_str()
            .expect("sandbox_key")
            .to_string(),
        cookie: session_cookie(&r),
    }
}
