//! HTTPS: a round trip with a certificate from a generated CA and a client that verifies it
//! (and refuses a certificate it does not trust), ALPN, reload on SIGHUP without dropping open
//! connections, the self-signed development certificate, and the plain-HTTP redirect listener.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::ca::Ca;
use common::{TestServer, raw_exchange};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use sha2::{Digest, Sha256};

const WAIT: Duration = Duration::from_secs(30);

fn client_config(trusted: &CertificateDer<'static>, alpn: &[&[u8]]) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    roots.add(trusted.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

type TlsStream = StreamOwned<ClientConnection, TcpStream>;

/// Connects and completes the handshake, verifying the server against `trusted`.
fn connect(
    addr: SocketAddr,
    trusted: &CertificateDer<'static>,
    alpn: &[&[u8]],
) -> Result<TlsStream, std::io::Error> {
    let tcp = TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(WAIT))?;
    let name = ServerName::try_from("localhost").unwrap();
    let conn = ClientConnection::new(client_config(trusted, alpn), name).unwrap();
    let mut stream = StreamOwned::new(conn, tcp);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock)?;
    }
    Ok(stream)
}

/// One keep-alive HTTP/1.1 GET on an open TLS connection: status and body.
fn get(stream: &mut TlsStream, path: &str) -> (u16, String) {
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    stream.flush().unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let (head_end, length) = loop {
        let n = stream.read(&mut chunk).unwrap();
        assert!(
            n > 0,
            "connection closed: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            break (end + 4, length);
        }
    };
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0);
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
    (status, body)
}

fn tls_config(dir: &Path, extra: &str) -> String {
    format!(
        "[tls]\ncert = {:?}\nkey = {:?}\n{extra}",
        dir.join("cert.pem"),
        dir.join("key.pem")
    )
}

#[test]
fn https_round_trip_with_a_verified_chain_and_alpn() {
    let certs = tempfile::tempdir().unwrap();
    let ca = Ca::new("intake test CA");
    ca.issue_to(
        &certs.path().join("cert.pem"),
        &certs.path().join("key.pem"),
    );
    let s = TestServer::start_with_config(&tls_config(certs.path(), ""));
    assert!(
        s.log
            .text()
            .contains(&format!("listening on https://{}", s.addr())),
        "{}",
        s.log.text()
    );

    let mut stream = connect(s.addr(), &ca.der(), &[b"http/1.1"]).unwrap();
    assert_eq!(stream.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (status, body) = get(&mut stream, "/healthz");
    assert_eq!((status, body.as_str()), (200, r#"{"status":"ok"}"#));
    // Keep-alive: a second request on the same TLS connection. (Not /readyz: it answers 503
    // while the search index is still being opened at start.)
    assert_eq!(get(&mut stream, "/healthz").0, 200);

    let h2 = connect(s.addr(), &ca.der(), &[b"h2", b"http/1.1"]).unwrap();
    assert_eq!(h2.conn.alpn_protocol(), Some(&b"h2"[..]));
    assert!(matches!(
        h2.conn.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_3 | rustls::ProtocolVersion::TLSv1_2)
    ));

    // A client that does not trust the issuing CA refuses the certificate.
    let other = Ca::new("some other CA");
    let refused = connect(s.addr(), &other.der(), &[b"http/1.1"])
        .err()
        .unwrap();
    assert!(
        refused.to_string().contains("UnknownIssuer")
            || refused.to_string().contains("invalid peer certificate"),
        "{refused}"
    );
    // Plain HTTP on the TLS port gets no HTTP answer.
    let mut plain = TcpStream::connect(s.addr()).unwrap();
    plain.set_read_timeout(Some(WAIT)).unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(!answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
}

#[test]
fn sighup_reloads_the_certificate_without_dropping_connections() {
    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = (certs.path().join("cert.pem"), certs.path().join("key.pem"));
    let (old_ca, new_ca) = (Ca::new("old CA"), Ca::new("new CA"));
    old_ca.issue_to(&cert, &key);
    let s = TestServer::start_with_config(&tls_config(certs.path(), ""));
    let mut open = connect(s.addr(), &old_ca.der(), &[b"http/1.1"]).unwrap();
    assert_eq!(get(&mut open, "/healthz").0, 200);
    assert!(connect(s.addr(), &new_ca.der(), &[]).is_err());

    new_ca.issue_to(&cert, &key);
    let from = s.log.len();
    hangup(s.pid());
    s.log
        .wait_for(
            from,
            WAIT,
            |l| l.contains("TLS certificate reloaded"),
            || false,
        )
        .unwrap_or_else(|| panic!("no reload logged:\n{}", s.log.text()));

    let mut fresh = connect(s.addr(), &new_ca.der(), &[]).unwrap();
    assert_eq!(get(&mut fresh, "/healthz").0, 200);
    assert!(connect(s.addr(), &old_ca.der(), &[]).is_err());
    // The connection opened before the reload still serves requests.
    assert_eq!(get(&mut open, "/healthz").0, 200);

    // A broken file is refused and the server keeps the certificate it has.
    std::fs::write(&cert, "not a certificate").unwrap();
    let from = s.log.len();
    hangup(s.pid());
    s.log
        .wait_for(from, WAIT, |l| l.contains("not reloaded"), || false)
        .unwrap_or_else(|| panic!("no failed reload logged:\n{}", s.log.text()));
    let mut still = connect(s.addr(), &new_ca.der(), &[]).unwrap();
    assert_eq!(get(&mut still, "/healthz").0, 200);
}

#[test]
fn dev_tls_makes_a_self_signed_certificate_once_and_logs_its_fingerprint() {
    let mut s = TestServer::start_with_args(&["--dev-tls".as_ref()]);
    let cert_path = s.data_dir().join("tls").join("self-signed-cert.pem");
    let pem = std::fs::read(&cert_path).unwrap();
    let der = CertificateDer::from_pem_slice(&pem).unwrap();
    let fingerprint: Vec<String> = Sha256::digest(&der)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect();
    let fingerprint = fingerprint.join(":");
    assert!(
        s.log.text().contains(&format!("fingerprint {fingerprint}")),
        "{}",
        s.log.text()
    );
    let mut stream = connect(s.addr(), &der, &[]).unwrap();
    assert_eq!(get(&mut stream, "/healthz").0, 200);

    // Kept across restarts: the same certificate is served again.
    assert!(s.sigterm_and_wait().success());
    s.restart_with_args(&["--dev-tls".as_ref()]);
    assert_eq!(std::fs::read(&cert_path).unwrap(), pem);
    let mut stream = connect(s.addr(), &der, &[]).unwrap();
    assert_eq!(get(&mut stream, "/healthz").0, 200);
}

#[test]
fn the_plain_http_listener_only_redirects_to_https() {
    let certs = tempfile::tempdir().unwrap();
    let ca = Ca::new("intake test CA");
    ca.issue_to(
        &certs.path().join("cert.pem"),
        &certs.path().join("key.pem"),
    );
    let s = TestServer::start_with_config(&tls_config(
        certs.path(),
        "redirect_listen = \"127.0.0.1:0\"\n",
    ));
    let line = s
        .log
        .wait_for(
            0,
            WAIT,
            |l| l.contains("redirecting plain HTTP on "),
            || false,
        )
        .unwrap();
    let at: SocketAddr = line
        .split("redirecting plain HTTP on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    let request = b"POST /api/v1/data/abc?limit=5 HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 0\r\n\r\n";
    let (resp, _) = raw_exchange(at, request, WAIT);
    assert_eq!(resp.status, 308, "{}", resp.describe());
    assert_eq!(
        resp.header("location"),
        Some(format!("https://{}/api/v1/data/abc?limit=5", s.addr()).as_str())
    );
}

fn hangup(pid: u32) {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}
