//! A small client of Chromium's DevTools protocol, for [`super::browser`]: launches a headless
//! Chromium and speaks to it over WebSocket, one connection per page, synchronously: a call
//! writes its request and reads until its answer, and the events read meanwhile go through
//! the page's event filter (which keeps what the tests must see, such as console errors).
//!
//! The `headless_chrome` crate did this until 2026-12-01. Its reader thread held the
//! connection's lock through a 100 ms read timeout, so every call waited about 100 ms for it
//! (rust-headless-chrome issue #446), and the dashboard tests, some hundred calls each, waited
//! more than they ran (docs/src/development.md, "Continuous integration").

use std::fs::File;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::{Message, WebSocket};

/// How long one call may go without a message from the browser, and how long the browser
/// may take to start.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Keeps what the tests must see of an event (`{"method", "params"}`), as a line of text.
pub type EventFilter = fn(&Value) -> Option<String>;

/// A running Chromium with a throwaway profile; killed when dropped.
pub struct Chromium {
    child: Child,
    port: u16,
    browser: Mutex<Connection>,
    _dir: tempfile::TempDir,
}

impl Chromium {
    /// Starts `program` with `flags`, a fresh profile, a window of `window` (width, height)
    /// CSS pixels and the DevTools server on a free loopback port, and connects to it.
    pub fn launch(program: &Path, flags: &[&str], window: (u32, u32)) -> Chromium {
        let dir = tempfile::tempdir().expect("chromium dir");
        let profile = dir.path().join("profile");
        let log = dir.path().join("chromium.log");
        let mut child = Command::new(program)
            .args(flags)
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("--remote-debugging-address=127.0.0.1")
            .arg("--remote-debugging-port=0")
            .arg(format!("--window-size={},{}", window.0, window.1))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).expect("chromium log"))
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        match connect_when_listening(&mut child, &profile.join("DevToolsActivePort")) {
            Ok((port, browser)) => Chromium {
                child,
                port,
                browser: Mutex::new(browser),
                _dir: dir,
            },
            Err(why) => {
                let _ = child.kill();
                let _ = child.wait();
                let output = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("chromium: {why}; its output:\n{output}");
            }
        }
    }

    /// A new browser context (its own cookies and storage) with one blank page, connected;
    /// `events` keeps what the tests must see of the page's events.
    pub fn new_page(&self, events: EventFilter) -> Page<'_> {
        let mut browser = self.browser.lock().expect("browser connection");
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

impl Drop for Chromium {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
        if let Ok(mut browser) = self.chromium.browser.lock() {
            let _ = browser.call(
                "Target.disposeBrowserContext",
                json!({ "browserContextId": self.context }),
            );
        }
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
