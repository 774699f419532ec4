//! HTTPS: the server's rustls configuration (ring provider, TLS 1.2 and 1.3, ALPN `h2` and
//! `http/1.1`), certificate reload, and the self-signed development certificate.
//!
//! The certificate is served through a resolver that holds the current certified key: a
//! reload (SIGHUP) swaps it, so handshakes after the reload present the new certificate while
//! connections already open keep theirs and are never dropped. A reload that fails (unreadable
//! file, key not matching the certificate) keeps the previous certificate and logs why.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::ServerConfig;
use rustls::crypto::ring;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::core::config::TlsConfig;
use crate::core::crypto::sha256;

/// Folder of the data dir holding the self-signed development certificate.
const DEV_DIR: &str = "tls";
const DEV_CERT: &str = "self-signed-cert.pem";
const DEV_KEY: &str = "self-signed-key.pem";
/// Names the development certificate is valid for.
const DEV_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {path}: {message}")]
    Read { path: String, message: String },
    #[error("{0}")]
    Invalid(String),
    #[error("cannot write {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

/// Where the certificate chain and key are read from (again on every reload).
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The running server's TLS state: the acceptor and the reloadable certificate.
pub struct Tls {
    files: CertFiles,
    resolver: Arc<Resolver>,
    acceptor: TlsAcceptor,
}

impl Tls {
    /// Reads the configured certificate (making the self-signed one first when asked).
    pub fn load(config: &TlsConfig, data_dir: &Path) -> Result<Tls, TlsError> {
        let files = match (&config.cert, &config.key) {
            (Some(cert), Some(key)) => CertFiles {
                cert: cert.clone(),
                key: key.clone(),
            },
            _ => dev_certificate(data_dir)?,
        };
        let resolver = Arc::new(Resolver(RwLock::new(Arc::new(read_certified_key(&files)?))));
        let mut server = ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(|e| TlsError::Invalid(e.to_string()))?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Tls {
            files,
            resolver,
            acceptor: TlsAcceptor::from(Arc::new(server)),
        })
    }

    pub fn acceptor(&self) -> &TlsAcceptor {
        &self.acceptor
    }

    /// Reads the certificate files again; new handshakes use them from now on.
    pub fn reload(&self) -> Result<(), TlsError> {
        let key = read_certified_key(&self.files)?;
        *self.resolver.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(key);
        Ok(())
    }

    /// SHA-256 fingerprint of the leaf certificate served now.
    pub fn fingerprint(&self) -> String {
        let key = self.resolver.current();
        key.end_entity_cert()
            .map(|der| fingerprint(der))
            .unwrap_or_default()
    }
}

/// Serves the current certified key to every handshake.
#[derive(Debug)]
struct Resolver(RwLock<Arc<CertifiedKey>>);

impl Resolver {
    fn current(&self) -> Arc<CertifiedKey> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// Reads a PEM chain and key and checks that the key belongs to the leaf certificate.
fn read_certified_key(files: &CertFiles) -> Result<CertifiedKey, TlsError> {
    let read_err = |path: &Path, message: String| TlsError::Read {
        path: path.display().to_string(),
        message,
    };
    let chain = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| read_err(&files.cert, e.to_string()))?;
    if chain.is_empty() {
        return Err(read_err(&files.cert, "no CERTIFICATE in the file".into()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| read_err(&files.key, e.to_string()))?;
    let signing_key = ring::sign::any_supported_type(&key)
        .map_err(|e| read_err(&files.key, format!("unsupported private key: {e}")))?;
    let certified = CertifiedKey::new(chain, signing_key);
    certified.keys_match().map_err(|e| {
        TlsError::Invalid(format!(
            "the key {} does not belong to the certificate {}: {e}",
            files.key.display(),
            files.cert.display()
        ))
    })?;
    Ok(certified)
}

/// The self-signed certificate for localhost in `<data_dir>/tls/`, made on first use.
fn dev_certificate(data_dir: &Path) -> Result<CertFiles, TlsError> {
    let dir = data_dir.join(DEV_DIR);
    let files = CertFiles {
        cert: dir.join(DEV_CERT),
        key: dir.join(DEV_KEY),
    };
    if files.cert.exists() && files.key.exists() {
        return Ok(files);
    }
    let names: Vec<String> = DEV_NAMES.iter().map(|n| n.to_string()).collect();
    let made = rcgen::generate_simple_self_signed(names)
        .map_err(|e| TlsError::Invalid(format!("cannot make a self-signed certificate: {e}")))?;
    let write_err = |path: &Path| {
        let path = path.display().to_string();
        move |source| TlsError::Write { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(write_err(&dir))?;
    write_private(&files.key, made.signing_key.serialize_pem().as_bytes())
        .map_err(write_err(&files.key))?;
    std::fs::write(&files.cert, made.cert.pem()).map_err(write_err(&files.cert))?;
    log::info!(
        "made a self-signed certificate for {} in {}",
        DEV_NAMES.join(", "),
        files.cert.display()
    );
    Ok(files)
}

/// Writes a file only its owner can read.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(bytes)
}

/// `AB:CD:…`: the SHA-256 of a DER certificate, as browsers and `openssl x509 -fingerprint`
/// show it.
pub fn fingerprint(der: &[u8]) -> String {
    let mut out = String::with_capacity(95);
    for (i, byte) in sha256(der).iter().enumerate() {
        if i > 0 {
            out.push(':');
        }
        let _ = write!(out, "{byte:02X}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dev_certificate_is_made_once_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let config = TlsConfig {
            self_signed: true,
            ..TlsConfig::default()
        };
        let first = Tls::load(&config, dir.path()).unwrap().fingerprint();
        let again = Tls::load(&config, dir.path()).unwrap().fingerprint();
        assert_eq!(first, again);
        assert_eq!(first.len(), 95, "{first}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let key = dir.path().join(DEV_DIR).join(DEV_KEY);
            let mode = std::fs::metadata(key).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = rcgen::generate_simple_self_signed(vec!["a.test".to_string()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["b.test".to_string()]).unwrap();
        let cert = dir.path().join("a.pem");
        let key = dir.path().join("b.key");
        std::fs::write(&cert, a.cert.pem()).unwrap();
        std::fs::write(&key, b.signing_key.serialize_pem()).unwrap();
        let config = TlsConfig {
            cert: Some(cert),
            key: Some(key),
            ..TlsConfig::default()
        };
        let err = Tls::load(&config, dir.path()).err().unwrap().to_string();
        assert!(err.contains("does not belong"), "{err}");
        let config = TlsConfig {
            cert: Some(dir.path().join("missing.pem")),
            key: Some(dir.path().join("b.key")),
            ..TlsConfig::default()
        };
        let err = Tls::load(&config, dir.path()).err().unwrap().to_string();
        assert!(err.contains("missing.pem"), "{err}");
    }
}
