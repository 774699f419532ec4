//! A webhook receiver on loopback: HTTP/1.1 over `std::net`, written here so the tests see
//! exactly what intake sends.
//!
//! It reads the request line, the headers and a `Content-Length` body, records the request,
//! and answers with the next [`Reply`] of its script (or the default reply once the script is
//! used up), then closes the connection. A reply can be delayed to make intake time out.
//!
//! ```ignore
//! let r = Receiver::start();
//! r.script([Reply::status(503), Reply::status(200)]);
//! // ... point a webhook at r.url("/hook") and write a record ...
//! let got = r.wait_for(1, Duration::from_secs(30));
//! assert_eq!(got[0].header("webhook-id"), Some(record_id));
//! ```

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// One scripted answer.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// How long to wait before answering.
    pub delay: Duration,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: format!("answer {status}"),
            delay: Duration::ZERO,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn body(mut self, body: &str) -> Reply {
        self.body = body.to_string();
        self
    }

    pub fn delay(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }
}

/// One request as it arrived.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Names lowercased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// When its body had been read.
    pub at: Instant,
    /// Where it came from.
    pub peer: SocketAddr,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body_text()))
    }
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    default: Option<Reply>,
    requests: Vec<Received>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    arrived: Condvar,
}

pub struct Receiver {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Receiver {
    /// Listens on an ephemeral loopback port; answers 200 until scripted otherwise.
    pub fn start() -> Receiver {
        Receiver::start_on(std::net::Ipv4Addr::LOCALHOST)
    }

    /// [`Receiver::start`] on an ephemeral port of `address`.
    pub fn start_on(address: std::net::Ipv4Addr) -> Receiver {
        let listener = TcpListener::bind((address, 0)).expect("bind receiver");
        let addr = listener.local_addr().expect("receiver address");
        let shared = Arc::new(Shared::default());
        let accepting = shared.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let shared = accepting.clone();
                thread::spawn(move || serve(stream, &shared));
            }
        });
        Receiver { addr, shared }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Answers the next requests with `replies`, in order.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.state.lock().unwrap().script.extend(replies);
    }

    /// The answer once the script is used up (200 unless set).
    pub fn always(&self, reply: Reply) {
        self.shared.state.lock().unwrap().default = Some(reply);
    }

    pub fn requests(&self) -> Vec<Received> {
        self.shared.state.lock().unwrap().requests.clone()
    }

    /// Waits until at least `n` requests have arrived; panics after `timeout`.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.state.lock().unwrap();
        while state.requests.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "timed out after {timeout:?} waiting for {n} webhook requests; got {}",
                state.requests.len()
            );
            state = self.shared.arrived.wait_timeout(state, left).unwrap().0;
        }
        state.requests.clone()
    }
}

fn serve(stream: TcpStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let Ok(peer) = stream.peer_addr() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    let Some(request) = read_request(&mut reader, peer) else {
        return;
    };
    let reply = {
        let mut state = shared.state.lock().unwrap();
        state.requests.push(request);
        shared.arrived.notify_all();
        let default = state.default.clone();
        state
            .script
            .pop_front()
            .or(default)
            .unwrap_or_else(|| Reply::status(200))
    };
    // The one sleep of the harness: a receiver that answers slowly.
    thread::sleep(reply.delay);
    let mut head = format!(
        "HTTP/1.1 {} Scripted\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\
         Connection: close\r\n",
        reply.status,
        reply.body.len()
    );
    for (name, value) in &reply.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = writer.write_all(head.as_bytes());
    let _ = writer.write_all(reply.body.as_bytes());
    let _ = writer.flush();
}

fn read_request(reader: &mut BufReader<TcpStream>, peer: SocketAddr) -> Option<Received> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Received {
        method,
        path,
        headers,
        body,
        at: Instant::now(),
        peer,
    })
}

/// A sandbox endpoint whose owner webhook points at a receiver of its own that always
/// answers 200: a write to it, once delivered, shows the scheduler has looked at the clock's
/// current time (due deliveries are taken oldest due first, in the same look).
pub struct Probe {
    slug: String,
    key: String,
    receiver: Receiver,
}

impl Probe {
    pub fn new(s: &super::ServerClient) -> Probe {
        let ep = s.create_endpoint("Probe", &[]);
        let receiver = Receiver::start();
        let path = format!("/api/v1/manage/endpoints/{}/webhooks/sandbox", ep.slug);
        let config = serde_json::json!({ "url": receiver.url("/probe") });
        super::assert_status(&s.manage("PUT", &path, Some(&config)), 200);
        Probe {
            slug: ep.slug,
            key: ep.sandbox_key,
            receiver,
        }
    }

    /// Returns once the scheduler has looked at the due list at the clock's time now.
    pub fn look(&self, s: &super::ServerClient) {
        let before = self.receiver.requests().len();
        s.create_record(
            &self.slug,
            &self.key,
            &serde_json::json!({ "probe": before }),
        );
        self.receiver.wait_for(before + 1, Duration::from_secs(30));
    }
}
