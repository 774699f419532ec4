//! A real SMTP server on loopback, for tests of e-mail sent by intake.
//!
//! [`SmtpServer::start`] listens on `127.0.0.1:0` and answers every connection in a thread of
//! its own, speaking just enough SMTP for lettre with `security = "none"`: the 220 greeting,
//! EHLO/HELO, AUTH PLAIN and LOGIN (only with [`SmtpServer::start_with_auth`], which then
//! requires them), MAIL FROM, RCPT TO, DATA (dot-stuffing undone), RSET, NOOP and QUIT. Each
//! message accepted after DATA is kept as a [`Received`].
//!
//! ```ignore
//! let smtp = SmtpServer::start();
//! let s = TestServer::start_with_config(&smtp.config_toml("Intake <intake@example.com>"));
//! // ... something that makes intake send an e-mail ...
//! let got = smtp.wait_for(1, Duration::from_secs(30));
//! assert_eq!(got[0].to, ["ada@example.com"]);
//! assert_eq!(got[0].subject(), "intake test e-mail");
//! assert!(got[0].body_text().contains("http://"));
//! ```
//!
//! To test failures, [`SmtpServer::fail_with`] makes it answer every `RCPT TO` with a given
//! code and text: `451` (or any 4xx) is temporary, `550` (any 5xx) permanent.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// How long a connection may stay silent before the server drops it.
const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
const NAME: &str = "intake-test-smtp";

/// One message the server accepted.
#[derive(Clone, Debug)]
pub struct Received {
    /// The envelope sender (`MAIL FROM`), without the angle brackets.
    pub from: String,
    /// The envelope recipients (`RCPT TO`), without the angle brackets.
    pub to: Vec<String>,
    /// The message as transmitted (headers, blank line, body; CRLF line ends), with the
    /// transport's dot-stuffing undone.
    pub data: String,
    /// The user name the client authenticated as, if it did.
    pub auth: Option<String>,
}

impl Received {
    /// The first header called `name` (any case), unfolded, with RFC 2047 encoded words
    /// (`=?utf-8?b?...?=`, `=?utf-8?q?...?=`) decoded.
    pub fn header(&self, name: &str) -> Option<String> {
        let (head, _) = self.split();
        let mut unfolded: Vec<String> = Vec::new();
        for line in head.split("\r\n") {
            match unfolded.last_mut() {
                Some(last) if line.starts_with([' ', '\t']) => last.push_str(line),
                _ => unfolded.push(line.to_string()),
            }
        }
        unfolded.iter().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| decode_words(value.trim()))
        })
    }

    /// The decoded `Subject` (empty if there is none).
    pub fn subject(&self) -> String {
        self.header("Subject").unwrap_or_default()
    }

    /// The body as text: its `Content-Transfer-Encoding` (7bit, 8bit, quoted-printable or
    /// base64) undone, read as UTF-8, with `\n` line ends.
    pub fn body_text(&self) -> String {
        let (_, body) = self.split();
        let encoding = self
            .header("Content-Transfer-Encoding")
            .unwrap_or_default()
            .to_ascii_lowercase();
        let bytes = match encoding.as_str() {
            "quoted-printable" => decode_quoted_printable(body),
            "base64" => {
                let compact: String = body.chars().filter(|c| !c.is_whitespace()).collect();
                STANDARD
                    .decode(compact)
                    .unwrap_or_else(|e| panic!("body is not valid base64 ({e}): {body:?}"))
            }
            _ => body.as_bytes().to_vec(),
        };
        String::from_utf8_lossy(&bytes).replace("\r\n", "\n")
    }

    fn split(&self) -> (&str, &str) {
        self.data.split_once("\r\n\r\n").unwrap_or((&self.data, ""))
    }
}

struct Shared {
    received: Mutex<Vec<Received>>,
    arrived: Condvar,
    fail: Mutex<Option<(u16, String)>>,
    credentials: Option<(String, String)>,
    stopping: AtomicBool,
}

/// The server; it stops when dropped.
pub struct SmtpServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl SmtpServer {
    /// A server that accepts mail from anyone, without authentication.
    pub fn start() -> SmtpServer {
        SmtpServer::spawn(None)
    }

    /// A server that advertises `AUTH PLAIN LOGIN` and accepts mail only after a successful
    /// login with these credentials (535 for others, 530 for MAIL before AUTH).
    pub fn start_with_auth(username: &str, password: &str) -> SmtpServer {
        SmtpServer::spawn(Some((username.to_string(), password.to_string())))
    }

    fn spawn(credentials: Option<(String, String)>) -> SmtpServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the test SMTP server");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Shared {
            received: Mutex::new(Vec::new()),
            arrived: Condvar::new(),
            fail: Mutex::new(None),
            credentials,
            stopping: AtomicBool::new(false),
        });
        let acceptor = thread::spawn({
            let shared = shared.clone();
            move || {
                for stream in listener.incoming() {
                    if shared.stopping.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let shared = shared.clone();
                    thread::spawn(move || {
                        // A client that hangs up early is not the test's concern.
                        let _ = serve(stream, &shared);
                    });
                }
            }
        });
        SmtpServer {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The `[smtp]` section that points intake at this server (`security = "none"`, with
    /// the credentials of [`SmtpServer::start_with_auth`]), sending as `from`. Top-level keys
    /// must come before it in a config file.
    pub fn config_toml(&self, from: &str) -> String {
        let mut toml = format!(
            "[smtp]\nhost = \"127.0.0.1\"\nport = {}\nsecurity = \"none\"\nfrom = {}\n\
             timeout = \"10s\"\n",
            self.port(),
            toml_string(from)
        );
        if let Some((username, password)) = &self.shared.credentials {
            toml.push_str(&format!(
                "username = {}\npassword = {}\n",
                toml_string(username),
                toml_string(password)
            ));
        }
        toml
    }

    /// Waits until at least `n` messages have arrived; returns all of them in arrival order.
    /// Panics (listing what did arrive) after `timeout`.
    #[track_caller]
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        let mut received = self.shared.received.lock().unwrap();
        while received.len() < n {
            let now = Instant::now();
            if now >= deadline {
                panic!(
                    "expected {n} e-mails within {timeout:?}, got {}: {:#?}",
                    received.len(),
                    *received
                );
            }
            received = self
                .shared
                .arrived
                .wait_timeout(received, deadline - now)
                .unwrap()
                .0;
        }
        received.clone()
    }

    /// Every message received so far, in arrival order.
    pub fn messages(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// `Some((code, text))`: answer every `RCPT TO` with `code text` from now on (e.g.
    /// `(550, "5.1.1 mailbox unavailable")`); `None`: accept recipients again.
    pub fn fail_with(&self, answer: Option<(u16, String)>) {
        *self.shared.fail.lock().unwrap() = answer;
    }
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Unblock `accept` so the acceptor sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// One SMTP session.
fn serve(stream: TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
    let mut out = stream.try_clone()?;
    let mut input = BufReader::new(stream);
    let mut reply = |text: &str| -> std::io::Result<()> {
        out.write_all(text.as_bytes())?;
        out.write_all(b"\r\n")?;
        out.flush()
    };
    reply(&format!("220 {NAME} ESMTP ready"))?;
    let mut from: Option<String> = None;
    let mut to: Vec<String> = Vec::new();
    let mut auth: Option<String> = None;
    while let Some(line) = read_line(&mut input)? {
        let (verb, arg) = line.split_once(' ').unwrap_or((&line, ""));
        match verb.to_ascii_uppercase().as_str() {
            "EHLO" if shared.credentials.is_some() => {
                reply(&format!("250-{NAME}\r\n250 AUTH PLAIN LOGIN"))?;
            }
            "EHLO" | "HELO" => reply(&format!("250 {NAME}"))?,
            "AUTH" => {
                let Some((username, password)) = &shared.credentials else {
                    reply("502 5.5.1 AUTH not available")?;
                    continue;
                };
                let (mechanism, initial) = arg.split_once(' ').unwrap_or((arg, ""));
                let given = match mechanism.to_ascii_uppercase().as_str() {
                    "PLAIN" => {
                        let response = if initial.is_empty() {
                            reply("334 ")?;
                            read_line(&mut input)?.unwrap_or_default()
                        } else {
                            initial.to_string()
                        };
                        let decoded = decode_base64_text(&response);
                        let mut parts = decoded.split('\0').skip(1);
                        parts
                            .next()
                            .zip(parts.next())
                            .map(|(u, p)| (u.into(), p.into()))
                    }
                    "LOGIN" => {
                        reply("334 VXNlcm5hbWU6")?;
                        let user = decode_base64_text(&read_line(&mut input)?.unwrap_or_default());
                        reply("334 UGFzc3dvcmQ6")?;
                        let pass = decode_base64_text(&read_line(&mut input)?.unwrap_or_default());
                        Some((user, pass))
                    }
                    _ => {
                        reply("504 5.5.4 Unrecognized authentication type")?;
                        continue;
                    }
                };
                if given.as_ref() == Some(&(username.clone(), password.clone())) {
                    auth = Some(username.clone());
                    reply("235 2.7.0 Authentication successful")?;
                } else {
                    reply("535 5.7.8 Authentication credentials invalid")?;
                }
            }
            "MAIL" if shared.credentials.is_some() && auth.is_none() => {
                reply("530 5.7.0 Authentication required")?;
            }
            "MAIL" => {
                from = Some(angle_address(arg));
                to.clear();
                reply("250 2.1.0 OK")?;
            }
            "RCPT" if from.is_none() => reply("503 5.5.1 MAIL first")?,
            "RCPT" => {
                let fail = shared.fail.lock().unwrap().clone();
                match fail {
                    Some((code, text)) => reply(&format!("{code} {text}"))?,
                    None => {
                        to.push(angle_address(arg));
                        reply("250 2.1.5 OK")?;
                    }
                }
            }
            "DATA" if to.is_empty() => reply("503 5.5.1 RCPT first")?,
            "DATA" => {
                reply("354 End data with <CR><LF>.<CR><LF>")?;
                let mut data = String::new();
                loop {
                    let Some(line) = read_line(&mut input)? else {
                        return Ok(());
                    };
                    if line == "." {
                        break;
                    }
                    data.push_str(line.strip_prefix('.').unwrap_or(&line));
                    data.push_str("\r\n");
                }
                let message = Received {
                    from: from.take().unwrap_or_default(),
                    to: std::mem::take(&mut to),
                    data,
                    auth: auth.clone(),
                };
                shared.received.lock().unwrap().push(message);
                shared.arrived.notify_all();
                reply("250 2.0.0 OK queued")?;
            }
            "RSET" => {
                from = None;
                to.clear();
                reply("250 2.0.0 OK")?;
            }
            "NOOP" => reply("250 2.0.0 OK")?,
            "QUIT" => {
                reply("221 2.0.0 Bye")?;
                return Ok(());
            }
            _ => reply("502 5.5.2 Command not recognized")?,
        }
    }
    Ok(())
}

/// One line without its CRLF; `None` at the end of the stream.
fn read_line(input: &mut impl BufRead) -> std::io::Result<Option<String>> {
    let mut buf = Vec::new();
    if input.read_until(b'\n', &mut buf)? == 0 {
        return Ok(None);
    }
    let line = String::from_utf8_lossy(&buf);
    Ok(Some(line.trim_end_matches(['\r', '\n']).to_string()))
}

/// `FROM:<a@example.com> BODY=8BITMIME` → `a@example.com`.
fn angle_address(arg: &str) -> String {
    match (arg.find('<'), arg.find('>')) {
        (Some(start), Some(end)) if start < end => arg[start + 1..end].to_string(),
        _ => arg
            .split_once(':')
            .map_or(arg, |(_, a)| a)
            .trim()
            .to_string(),
    }
}

fn decode_base64_text(text: &str) -> String {
    let bytes = STANDARD.decode(text.trim()).unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn toml_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Quoted-printable (RFC 2045): `=XX` bytes and `=` soft line breaks.
fn decode_quoted_printable(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'=' {
            out.push(bytes[i]);
            i += 1;
        } else if bytes[i + 1..].starts_with(b"\r\n") {
            i += 3;
        } else if bytes[i + 1..].starts_with(b"\n") {
            i += 2;
        } else {
            let hex = std::str::from_utf8(&bytes[i + 1..(i + 3).min(bytes.len())]).unwrap_or("");
            match u8::from_str_radix(hex, 16) {
                Ok(b) if hex.len() == 2 => {
                    out.push(b);
                    i += 3;
                }
                _ => {
                    out.push(b'=');
                    i += 1;
                }
            }
        }
    }
    out
}

/// Decodes RFC 2047 encoded words in a header value; whitespace between two encoded words is
/// dropped, as the RFC says.
fn decode_words(value: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    let mut after_word = false;
    while let Some(start) = rest.find("=?") {
        let decoded = rest[start + 2..].split_once("?=").and_then(|(word, tail)| {
            let mut parts = word.splitn(3, '?');
            let (_charset, encoding, text) = (parts.next()?, parts.next()?, parts.next()?);
            let bytes = match encoding.to_ascii_lowercase().as_str() {
                "b" => STANDARD.decode(text).ok()?,
                "q" => decode_quoted_printable(&text.replace('_', " ")),
                _ => return None,
            };
            Some((String::from_utf8_lossy(&bytes).into_owned(), tail))
        });
        match decoded {
            Some((text, tail)) => {
                let between = &rest[..start];
                if !(after_word && between.trim().is_empty()) {
                    out.push_str(between);
                }
                out.push_str(&text);
                rest = tail;
                after_word = true;
            }
            None => {
                out.push_str(&rest[..start + 2]);
                rest = &rest[start + 2..];
                after_word = false;
            }
        }
    }
    out.push_str(rest);
    out
}
