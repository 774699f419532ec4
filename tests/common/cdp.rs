//! A small client of Chromium's DevTools protocol, for [`super::browser`]: launches a headless
//! Chromium and speaks to it over WebSocket, one connection per page, synchronously: a call
//! writes its request and reads until its answer, and the events read meanwhile go through
//! the page's event filter (which keeps what the tests must see, such as console errors).
//!
//! The `headless_chrome` crate did this until 2026-12-02. Its reader thread held the
//! connection's lock through a 100 ms read timeout, so every call waited about 100 ms for it
//! (rust-headless-chrome issue #446), and the dashboard tests, some hundred calls each, waited
//! more than they ran (docs/src/development.md, "Continuous integration").

use std::fs::File;
use std::net::TcpStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock, PoisonError, mpsc};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

/// How long one call may go without a message from the browser, and how long the browser
/// may take to start.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Keeps what the tests must see of an event (`{"method", "params"}`), as a line of text.
pub type EventFilter = fn(&Value) -> Option<String>;

/// A running Chromium with a throwaway profile.
pub struct Chromium {
    port: u16,
    browser: Mutex<Connection>,
}

/// Where the test processes' Chromium profiles go, one folder per process named by its id.
fn profiles_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("chromium")
}

impl Chromium {
    /// The test process's Chromium, started by the first caller: one browser serves every
    /// test, each in browser contexts of its own (cookies and storage apart), where one a
    /// test cost about a second of CPU to start.
    ///
    /// It lives as long as the test process however that ends: it is started with the
    /// parent-death signal set to SIGKILL, which the kernel sends when the *thread* that
    /// started it ends, from a thread that never does.
    pub fn shared(program: &Path, flags: &[&str], window: (u32, u32)) -> &'static Chromium {
        static SHARED: OnceLock<Chromium> = OnceLock::new();
        // Callers arriving while the first starts it wait for it (`get_or_init`).
        SHARED.get_or_init(|| {
            let program = program.to_path_buf();
            let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
            let (started, start) = mpsc::channel();
            std::thread::Builder::new()
                .name("chromium".into())
                .spawn(move || {
                    let _ = started.send(Chromium::launch(&program, &flags, window));
                    loop {
                        std::thread::park();
                    }
                })
                .expect("spawn the chromium thread");
            start
                .recv()
                .expect("the chromium thread answers")
                .unwrap_or_else(|e| panic!("{e}"))
        })
    }

    /// Starts `program` with `flags`, a fresh profile, a window of `window` (width, height)
    /// CSS pixels and the DevTools server on a free loopback port, and connects to it.
    fn launch(program: &Path, flags: &[String], window: (u32, u32)) -> Result<Chromium, String> {
        let dir = profiles_dir().join(std::process::id().to_string());
        remove_dead_processes_profiles();
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let profile = dir.join("profile");
        let log = dir.join("chromium.log");
        let stderr = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut command = Command::new(program);
        command
            .args(flags)
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("--remote-debugging-address=127.0.0.1")
            .arg("--remote-debugging-port=0")
            .arg(format!("--window-size={},{}", window.0, window.1))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        // SAFETY: prctl is async-signal-safe, and the closure touches nothing else.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("start {}: {e}", program.display()))?;
        match connect_when_listening(&mut child, &profile.join("DevToolsActivePort")) {
            Ok((port, browser)) => Ok(Chromium {
                port,
                browser: Mutex::new(browser),
            }),
            Err(why) => {
                let _ = child.kill();
                let _ = child.wait();
                let output = std::fs::read_to_string(&log).unwrap_or_default();
                Err(format!("chromium: {why}; its output:\n{output}"))
            }
        }
    }

    /// A new browser context (its own cookies and storage) with one blank page, connected;
    /// `events` keeps what the tests must see of the page's events.
    pub fn new_page(&self, events: EventFilter) -> Page<'_> {
        // A test that panicked while holding it leaves the connection as usable as before.
        let mut browser = self.browser.lock().unwrap_or_else(PoisonError::into_inner);
        let context = browser
            .call("Target.createBrowserContext", json!({}))
            .expect("new browser context")["browserContextId"]
            .as_str()
            .expect("browserContextId")
            .to_string();
        let target = browser
            .call(
                "Target.createTarget",
                json!({ "url": "about:blank", "browserContextId": context }),
            )
            .expect("new tab")["targetId"]
            .as_str()
            .expect("targetId")
            .to_string();
        drop(browser);
        let connection = Connection::open(self.port, &format!("/devtools/page/{target}"), events)
            .unwrap_or_else(|e| panic!("{e}"));
        Page {
            chromium: self,
            context,
            connection: Mutex::new(connection),
        }
    }
}

/// Waits until Chromium writes the port it took and the browser's WebSocket path to
/// `port_file` (it does once it listens), then connects to the browser.
fn connect_when_listening(
    child: &mut Child,
    port_file: &Path,
) -> Result<(u16, Connection), String> {
    let deadline = Instant::now() + CALL_TIMEOUT;
    loop {
        if let Ok(text) = std::fs::read_to_string(port_file) {
            let mut lines = text.lines();
            if let (Some(Ok(port)), Some(path)) = (lines.next().map(str::parse), lines.next()) {
                return Ok((port, Connection::open(port, path, |_| None)?));
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited ({status}) at its start"));
        }
        if Instant::now() > deadline {
            return Err(format!("not listening after {CALL_TIMEOUT:?}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Removes the profiles of test processes that have ended (their Chromium went with them).
fn remove_dead_processes_profiles() {
    let Ok(entries) = std::fs::read_dir(profiles_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let pid = name.to_str().and_then(|n| n.parse::<u32>().ok());
        if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// One page (tab) in a browser context of its own; the context is closed when dropped.
pub struct Page<'c> {
    chromium: &'c Chromium,
    context: String,
    connection: Mutex<Connection>,
}

impl Page<'_> {
    /// Calls `method` with `params` on the page and returns its result, or the browser's
    /// error as text.
    pub fn call(&self, method: &str, params: Value) -> Result<Value, String> {
        self.connection
            .lock()
            .expect("page connection")
            .call(method, params)
    }

    /// What the event filter kept since the last call of this, oldest first. Events are read
    /// during calls: those sent before the last call's answer are here.
    pub fn take_events(&self) -> Vec<String> {
        std::mem::take(&mut self.connection.lock().expect("page connection").kept)
    }
}

impl Drop for Page<'_> {
    fn drop(&mut self) {
        let mut browser = self
            .chromium
            .browser
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let _ = browser.call(
            "Target.disposeBrowserContext",
            json!({ "browserContextId": self.context }),
        );
    }
}

/// One WebSocket connection to the DevTools server (the browser's or a page's).
struct Connection {
    socket: WebSocket<TcpStream>,
    next_id: u64,
    events: EventFilter,
    kept: Vec<String>,
}

impl Connection {
    fn open(port: u16, path: &str, events: EventFilter) -> Result<Connection, String> {
        let url = format!("ws://127.0.0.1:{port}{path}");
        let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("{url}: {e}"))?;
        stream
            .set_read_timeout(Some(CALL_TIMEOUT))
            .and_then(|()| stream.set_nodelay(true))
            .map_err(|e| format!("{url}: {e}"))?;
        let (socket, _) = tungstenite::client(url.as_str(), stream)
            .map_err(|e| format!("WebSocket to {url}: {e}"))?;
        Ok(Connection {
            socket,
            next_id: 0,
            events,
            kept: Vec::new(),
        })
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let socket = &mut self.socket;
        self.next_id += 1;
        let id = self.next_id;
        let request = json!({ "id": id, "method": method, "params": params });
        socket
            .send(Message::text(request.to_string()))
            .map_err(|e| format!("{method}: send: {e}"))?;
        loop {
            let text = match socket.read() {
                Ok(Message::Text(text)) => text,
                Ok(_) => continue,
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(format!("{method}: no answer within {CALL_TIMEOUT:?}"));
                }
                Err(e) => return Err(format!("{method}: {e}")),
            };
            let message: Value = serde_json::from_str(text.as_str())
                .map_err(|e| format!("{method}: a message that is not JSON: {e}"))?;
            if message["id"].as_u64() == Some(id) {
                return match message.get("error") {
                    Some(error) => Err(format!("{method}: {error}")),
                    None => Ok(message["result"].clone()),
                };
            }
            if message.get("method").is_some() {
                if let Some(line) = (self.events)(&message) {
                    self.kept.push(line);
                }
            }
        }
    }
}
