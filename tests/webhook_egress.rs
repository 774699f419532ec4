//! Where deliveries may go, with the real binary: the environment's proxy variables never
//! carry a delivery, a target the SSRF guard refuses is given up at once without any
//! connection, and an explicit `[webhooks] proxy` carries allowed deliveries through a
//! CONNECT tunnel to the address the guard checked (`no_proxy` hosts go direct).

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::receiver::Receiver;
use common::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

/// A proxy on loopback: records the request line of every connection. In tunnel mode it
/// serves `CONNECT address:port` to a loopback address like a real proxy (200, then bytes
/// both ways); anything else gets 403.
struct Proxy {
    addr: SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Proxy {
    fn start(ip: &str, tunnel: bool) -> Proxy {
        let listener = TcpListener::bind((ip, 0)).expect("bind the proxy");
        let addr = listener.local_addr().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = lines.clone();
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let seen = seen.clone();
                thread::spawn(move || serve(stream, &seen, tunnel));
            }
        });
        Proxy { addr, lines }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }
}

fn serve(stream: TcpStream, seen: &Mutex<Vec<String>>, tunnel: bool) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).unwrap_or(0) == 0 {
        return;
    }
    let first = first.trim_end().to_string();
    seen.lock().unwrap().push(first.clone());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
    }
    let mut client = stream;
    let target = first
        .strip_prefix("CONNECT ")
        .and_then(|rest| rest.split(' ').next());
    // Only ever to loopback: a test sends nothing off this machine, whatever it is asked.
    let upstream = target
        .filter(|_| tunnel)
        .and_then(|t| t.parse::<SocketAddr>().ok())
        .filter(|t| t.ip().is_loopback())
        .and_then(|t| TcpStream::connect(t).ok());
    let Some(upstream) = upstream else {
        let _ = client.write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
    let (mut up_read, mut up_write) = (upstream.try_clone().unwrap(), upstream);
    let mut client_write = client.try_clone().unwrap();
    thread::spawn(move || {
        let _ = std::io::copy(&mut reader, &mut up_write);
        let _ = up_write.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut up_read, &mut client_write);
    let _ = client_write.shutdown(std::net::Shutdown::Write);
}

/// Posts a record to `slug` with a caller webhook to `url`; returns the record id.
fn write_with_callback(s: &TestServer, ep: &Endpoint, url: &str) -> String {
    let agent = new_agent(WAIT);
    let auth = format!("Bearer {}", ep.sandbox_key);
    let r = try_send(
        &agent,
        &format!("{}/api/v1/data/{}", s.base_url(), ep.slug),
        "POST",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("X-Webhook-Callback", url),
        ],
        Some(br#"{"n":1}"#),
    )
    .expect("POST");
    assert_status(&r, 202);
    r.json()["id"].as_str().unwrap().to_string()
}

/// Waits until the delivery of `record_id` satisfies `done`; returns it with its attempt log.
fn delivery_when(
    s: &TestServer,
    slug: &str,
    record_id: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let path = format!("/api/v1/manage/endpoints/{slug}/deliveries?record_id={record_id}");
    let deadline = Instant::now() + WAIT;
    loop {
        let r = s.manage("GET", &path, None);
        assert_status(&r, 200);
        if let Some(d) = r.json()["data"].as_array().and_then(|d| d.first().cloned())
            && done(&d)
        {
            let one = format!("/api/v1/manage/endpoints/{slug}/deliveries/{}", d["id"]);
            return s.manage("GET", &one, None).json();
        }
        assert!(
            Instant::now() < deadline,
            "delivery of {record_id}: {}",
            r.text()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// The delivery of `record_id` once it is no longer pending.
fn finished_delivery(s: &TestServer, slug: &str, record_id: &str) -> Value {
    delivery_when(s, slug, record_id, |d| d["state"] != "pending")
}

#[track_caller]
fn assert_refused_for_good(delivery: &Value) {
    assert_eq!(delivery["state"], "given_up", "{delivery}");
    assert_eq!(delivery["attempts"], 1, "given up at once: {delivery}");
    let error = delivery["attempt_log"][0]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(error.contains("is not allowed"), "{delivery}");
}

#[test]
fn proxy_variables_in_the_environment_never_carry_a_delivery() {
    // The proxy sits on an address the guard allows (127.0.0.2), as a proxy in an allowed
    // range would: a client that honoured the variables would reach it and ask it for the
    // refused targets.
    let proxy = Proxy::start("127.0.0.2", false);
    let url = proxy.url();
    let envs: Vec<(&str, &str)> = [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ]
    .into_iter()
    .map(|name| (name, url.as_str()))
    .collect();
    let s = TestServer::start_with_config_env(
        "[webhooks]\nallowed_cidrs = [\"127.0.0.2/32\"]\n",
        &envs,
    );
    let receiver = Receiver::start();
    let ep = s.create_endpoint("Hooks", &[]);
    let port = receiver.addr.port();
    for target in [
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://10.0.0.1/hook".to_string(),
        "http://[fd00::1]/hook".to_string(),
        // A name that resolves to loopback.
        format!("http://localhost:{port}/hook"),
    ] {
        let id = write_with_callback(&s, &ep, &target);
        assert_refused_for_good(&finished_delivery(&s, &ep.slug, &id));
    }
    assert_eq!(proxy.lines(), Vec::<String>::new(), "the proxy was used");
    assert!(receiver.requests().is_empty());
}

#[test]
fn a_configured_proxy_tunnels_to_the_checked_address() {
    let proxy = Proxy::start("127.0.0.1", true);
    let receiver = Receiver::start();
    let s = TestServer::start_with_config(&format!(
        "[webhooks]\nallowed_cidrs = [\"127.0.0.1/32\"]\nproxy = \"{}\"\nno_proxy = [\"localhost\"]\n",
        proxy.url()
    ));
    let ep = s.create_endpoint("Hooks", &[]);

    // An allowed target: through the proxy, which is asked for the address, not the name.
    let id = write_with_callback(&s, &ep, &receiver.url("/via-proxy"));
    let d = finished_delivery(&s, &ep.slug, &id);
    assert_eq!(d["state"], "delivered", "{d}");
    let got = receiver.wait_for(1, WAIT);
    assert_eq!(got[0].json()["data"]["id"], id.as_str());
    assert_eq!(
        proxy.lines(),
        vec![format!("CONNECT {} HTTP/1.1", receiver.addr)]
    );

    // A refused target: given up before anything reaches the proxy.
    let id = write_with_callback(&s, &ep, "http://10.0.0.1/hook");
    assert_refused_for_good(&finished_delivery(&s, &ep.slug, &id));
    assert_eq!(proxy.lines().len(), 1, "{:?}", proxy.lines());

    // A `no_proxy` host goes direct (localhost resolves to 127.0.0.1, which is allowed).
    let direct = format!("http://localhost:{}/direct", receiver.addr.port());
    let id = write_with_callback(&s, &ep, &direct);
    let d = finished_delivery(&s, &ep.slug, &id);
    assert_eq!(d["state"], "delivered", "{d}");
    assert_eq!(receiver.wait_for(2, WAIT).len(), 2);
    assert_eq!(proxy.lines().len(), 1, "{:?}", proxy.lines());
}

#[test]
fn a_proxy_that_refuses_the_tunnel_is_a_retried_failure() {
    let proxy = Proxy::start("127.0.0.1", false);
    let receiver = Receiver::start();
    let s = TestServer::start_with_config(&format!(
        "[webhooks]\nallowed_cidrs = [\"127.0.0.1/32\"]\nproxy = \"{}\"\n",
        proxy.url()
    ));
    let ep = s.create_endpoint("Hooks", &[]);
    let id = write_with_callback(&s, &ep, &receiver.url("/hook"));
    let delivery = delivery_when(&s, &ep.slug, &id, |d| d["attempts"] == 1);
    assert_eq!(delivery["state"], "pending", "retried: {delivery}");
    let error = delivery["attempt_log"][0]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(error.contains("403"), "{delivery}");
    assert!(receiver.requests().is_empty());
    assert_eq!(proxy.lines().len(), 1);
}
