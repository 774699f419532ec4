//! Behind a reverse proxy: a real nginx (Debian's, installed by `.ci/run`) in front of the
//! binary, with nginx's default `Host` handling (rewritten to the upstream's address) and
//! `X-Forwarded-For $proxy_add_x_forwarded_for`. Through it the dashboard's forms work when
//! `public_url` names the proxy, and the login limits see each client's own address when
//! `[http] trusted_proxies` names the proxy. Without that, a forwarded address is ignored.
//!
//! The test starts nginx itself: an unprivileged single process on a free loopback port, with
//! its configuration, logs and temporary files in a temp dir. Clients play different addresses
//! by binding 127.0.0.2 and 127.0.0.3 before connecting.

use crate::common;

use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::visitor::{Visitor, login};
use common::*;

const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A free port on 127.0.0.1 (free when asked; nginx binds it right after).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

/// nginx proxying `127.0.0.1:port` to `upstream`, stopped when dropped.
struct Nginx {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Nginx {
    fn start(port: u16, upstream: SocketAddr) -> Nginx {
        let dir = tempfile::tempdir().expect("tempdir");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, config(dir.path(), addr, upstream)).expect("write nginx.conf");
        let global = format!(
            "daemon off; master_process off; pid {};",
            dir.path().join("nginx.pid").display()
        );
        let mut child = Command::new(external_program("NGINX", "/usr/sbin/nginx", "nginx-light"))
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(&conf)
            .args(["-g", &global])
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn nginx");
        let deadline = Instant::now() + START_TIMEOUT;
        while TcpStream::connect(addr).is_err() {
            let exited = child.try_wait().expect("try_wait nginx");
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "nginx did not listen on {addr} (exit status {exited:?}); error.log:\n{}",
                std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Nginx { child, addr, dir }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// The whole nginx configuration: files under `dir`, the one proxy, nothing else.
fn config(dir: &Path, listen: SocketAddr, upstream: SocketAddr) -> String {
    let dir = dir.display();
    format!(
        "events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen {listen};
        location / {{
            proxy_pass http://{upstream};
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }}
    }}
}}
"
    )
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let log = std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default();
        if std::thread::panicking() && !log.is_empty() {
            eprintln!("--- nginx error.log ---\n{log}");
        }
    }
}

/// The binary behind nginx: `public_url` is nginx's address, nginx (127.0.0.1) a trusted
/// proxy, and at most two failed logins per account and address.
fn behind_nginx() -> (TestServer, Nginx) {
    let port = free_port();
    let server = TestServer::start_with_config(&format!(
        "public_url = \"http://127.0.0.1:{port}\"\n\n\
         [http]\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n\
         [accounts]\nlogin_failures_per_account = 2\n"
    ));
    let nginx = Nginx::start(port, server.addr());
    (server, nginx)
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
fn dashboard_forms_work_through_nginx_when_public_url_names_it() {
    let (s, nginx) = behind_nginx();
    let agent = new_agent(Duration::from_secs(60));
    let mut v = Visitor::new(nginx.url(), &agent);
    v.origin = Some(nginx.url());
    // nginx sends `Host: 127.0.0.1:<the server's port>`; the browser's `Origin` is nginx's.
    let token = login(&mut v, OWNER_EMAIL, &s.password);
    let r = v.post(
        "/dashboard/endpoints",
        &[("name", "Through nginx"), ("csrf", &token)],
        &[],
    );
    assert_eq!(r.status, 303, "{}", r.describe());
    let location = r.header("location").expect("location").to_string();
    assert!(location.ends_with("?done=created"), "{location}");
    let page = v.get(&location);
    assert_eq!(page.status, 200, "{}", page.describe());
    assert!(page.text().contains("Through nginx"));

    // Another origin is still refused, through the proxy too.
    v.origin = Some("http://evil.example".into());
    let r = v.post(
        "/dashboard/endpoints",
        &[("name", "Forged"), ("csrf", &token)],
        &[],
    );
    assert_eq!(r.status, 403, "{}", r.describe());
    let listed = s.manage("GET", "/api/v1/manage/endpoints", None).json();
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(1), "{listed}");
}

#[test]
fn login_limits_see_each_client_address_through_nginx() {
    let (s, nginx) = behind_nginx();
    let (attacker, owner) = (ip("127.0.0.2"), ip("127.0.0.3"));
    for _ in 0..2 {
        let r = login_from(attacker, nginx.addr, &[], OWNER_EMAIL, "wrong-password");
        assert_error(&r, 401, "invalid_credentials");
    }
    let r = login_from(attacker, nginx.addr, &[], OWNER_EMAIL, &s.password);
    assert_error(&r, 429, "too_many_login_attempts");
    // nginx (127.0.0.1) forwards the owner's own address, which has no failures.
    let r = login_from(owner, nginx.addr, &[], OWNER_EMAIL, &s.password);
    assert_status(&r, 200);
    let r = login_from(attacker, nginx.addr, &[], OWNER_EMAIL, &s.password);
    assert_error(&r, 429, "too_many_login_attempts");
}

#[test]
fn forwarded_addresses_count_only_from_trusted_proxies() {
    // 127.0.0.2 is a trusted proxy; 127.0.0.1 is not.
    let s = TestServer::start_with_config(
        "[http]\ntrusted_proxies = [\"127.0.0.2\"]\n\n\
         [accounts]\nlogin_failures_per_account = 2\n",
    );
    let (direct, proxy) = (ip("127.0.0.1"), ip("127.0.0.2"));
    // A client that is no proxy cannot pose as other clients, in either header.
    for (header, value) in [
        ("X-Forwarded-For", "203.0.113.1"),
        ("Forwarded", "for=203.0.113.2"),
    ] {
        let r = login_from(
            direct,
            s.addr(),
            &[(header, value)],
            OWNER_EMAIL,
            "wrong-password",
        );
        assert_error(&r, 401, "invalid_credentials");
    }
    let r = login_from(
        direct,
        s.addr(),
        &[("X-Forwarded-For", "203.0.113.3")],
        OWNER_EMAIL,
        &s.password,
    );
    assert_error(&r, 429, "too_many_login_attempts");

    // From the trusted proxy, the right-most address it forwards is the client, counted on
    // its own: 203.0.113.9 is refused after its two failures, 203.0.113.10 is not. What is
    // left of it came from the client and is not believed (127.0.0.1 is refused).
    let as_client = |client| [("X-Forwarded-For", client)];
    for _ in 0..2 {
        let xff = as_client("203.0.113.9");
        let r = login_from(proxy, s.addr(), &xff, OWNER_EMAIL, "wrong-password");
        assert_error(&r, 401, "invalid_credentials");
    }
    let xff = as_client("203.0.113.9");
    let r = login_from(proxy, s.addr(), &xff, OWNER_EMAIL, &s.password);
    assert_error(&r, 429, "too_many_login_attempts");
    let xff = as_client("127.0.0.1, 203.0.113.10");
    assert_status(
        &login_from(proxy, s.addr(), &xff, OWNER_EMAIL, &s.password),
        200,
    );
}
