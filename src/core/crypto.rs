//! Secrets at rest: hashes for lookup, a sealing key for secrets that must be shown again, and
//! password hashing.
//!
//! - API keys and tokens are looked up by SHA-256 of the full key: the tables never hold a
//!   plain key, and a lookup by hash leaks nothing through timing about other keys.
//! - The spec needs API keys to be viewable again (detail page, Production tab), so each key is
//!   also stored sealed with XChaCha20-Poly1305 under a 256-bit key-encryption key kept in
//!   `<data_dir>/master.key` (mode 0600, created on first start). Copying the redb file alone
//!   does not reveal keys.
//! - Data that must be matched again but not be guessable from what is kept (a payload that
//!   may be an e-mail address) is kept as a keyed hash ([`Sealer::keyed_hash`]), under a key
//!   derived from `master.key`: without the key, a guess cannot be checked against the hash.
//! - Passwords are hashed with argon2id; async code runs that work through [`password_work`],
//!   off the async workers.

use std::io::Write;
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::LazyLock;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use crate::core::ids::random_bytes;

#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    #[error("cannot read or create the key-encryption key {path}: {source}")]
    KeyFile {
        path: String,
        source: std::io::Error,
    },
    #[error("the key-encryption key {0} is not 32 bytes long")]
    KeyFileSize(String),
    #[error("a sealed secret could not be opened (wrong master.key or corrupted data)")]
    Open,
    #[error("password hashing failed: {0}")]
    Password(String),
}

/// SHA-256 of a secret, the lookup key for API keys and tokens.
pub fn secret_hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

/// SHA-256 of arbitrary bytes.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Lowercase hex of `bytes`: digests as the API and the stores write them, and trace ids as
/// W3C Trace Context and OTLP/JSON do.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A non-secret, stable identifier for a key: `key_` + 16 hex digits of its hash.
pub fn key_id(hash: &[u8; 32]) -> String {
    hash_id("key_", hash)
}

/// A non-secret, stable identifier for a hashed secret: `prefix` + 16 hex digits of the hash.
pub fn hash_id(prefix: &str, hash: &[u8; 32]) -> String {
    let mut id = String::from(prefix);
    for b in &hash[..8] {
        id.push_str(&format!("{b:02x}"));
    }
    id
}

/// Seals and opens secrets that must be shown to their owner again, and computes keyed hashes
/// ([`Sealer::keyed_hash`]). Cloning it copies its keys (the webhook dispatcher holds its own).
#[derive(Clone)]
pub struct Sealer {
    cipher: XChaCha20Poly1305,
    /// The key of [`Sealer::keyed_hash`], derived from `master.key`, so that the sealing key
    /// itself serves one purpose only.
    hash_key: [u8; 32],
}

/// What the hash key is derived from `master.key` with (changing it changes every keyed hash).
const HASH_KEY_LABEL: &[u8] = b"intake keyed hash key v1";

/// HMAC-SHA256 of `parts`, one after the other, under `key`.
fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC takes a key of any length, so this cannot fail.
    let mut mac = match <Hmac<Sha256> as Mac>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    };
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

const NONCE_LEN: usize = 24;

/// File name of the key-encryption key in the data dir.
pub const MASTER_KEY_FILE: &str = "master.key";

/// Writes a key-encryption key to a new file `path` (mode 0600), synced to disk.
pub fn write_key_file(path: &Path, key: &[u8; 32]) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(key)?;
    file.sync_all()
}

impl Sealer {
    /// Loads `<data_dir>/master.key`, creating it (0600) on first use.
    pub fn load_or_create(data_dir: &Path) -> Result<Sealer, CryptoError> {
        Sealer::load(data_dir, true)
    }

    /// Loads `<data_dir>/master.key`, which must exist.
    pub fn load_existing(data_dir: &Path) -> Result<Sealer, CryptoError> {
        Sealer::load(data_dir, false)
    }

    fn load(data_dir: &Path, create: bool) -> Result<Sealer, CryptoError> {
        let path = data_dir.join(MASTER_KEY_FILE);
        let key_err = |source| CryptoError::KeyFile {
            path: path.display().to_string(),
            source,
        };
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(err) if create && err.kind() == std::io::ErrorKind::NotFound => {
                let key: [u8; 32] = random_bytes();
                write_key_file(&path, &key).map_err(key_err)?;
                key.to_vec()
            }
            Err(err) => return Err(key_err(err)),
        };
        let key: [u8; 32] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| CryptoError::KeyFileSize(path.display().to_string()))?;
        Ok(Sealer {
            cipher: XChaCha20Poly1305::new(&key.into()),
            hash_key: hmac_sha256(&key, &[HASH_KEY_LABEL]),
        })
    }

    /// A keyed hash (HMAC-SHA256) of `bytes` for the use `label` names: the same for the same
    /// label and bytes under the same `master.key`, so it can be compared and looked up (every
    /// node of a store has the store's key, see `domain::sealing_key`); without the key, a guess
    /// of `bytes` cannot be checked against it. Each use has its own label, so the hashes of one
    /// use never stand for another's.
    pub fn keyed_hash(&self, label: &str, bytes: &[u8]) -> [u8; 32] {
        // The label's length first: no label and bytes hash like another label and bytes.
        let label_len = (label.len() as u64).to_le_bytes();
        hmac_sha256(&self.hash_key, &[&label_len, label.as_bytes(), bytes])
    }

    pub fn seal(&self, plain: &[u8]) -> Vec<u8> {
        let nonce: [u8; NONCE_LEN] = random_bytes();
        let mut out = nonce.to_vec();
        // Encryption with a valid key and nonce cannot fail for in-memory buffers.
        match self.cipher.encrypt(XNonce::from_slice(&nonce), plain) {
            Ok(ct) => out.extend_from_slice(&ct),
            Err(_) => unreachable!("XChaCha20-Poly1305 encryption of a buffer does not fail"),
        }
        out
    }

    pub fn open(&self, sealed: &[u8]) -> Result<Vec<u8>, CryptoError> {
        if sealed.len() < NONCE_LEN {
            return Err(CryptoError::Open);
        }
        let (nonce, ct) = sealed.split_at(NONCE_LEN);
        self.cipher
            .decrypt(XNonce::from_slice(nonce), ct)
            .map_err(|_| CryptoError::Open)
    }

    pub fn open_string(&self, sealed: &[u8]) -> Result<String, CryptoError> {
        String::from_utf8(self.open(sealed)?).map_err(|_| CryptoError::Open)
    }
}

/// argon2id hash in PHC string format.
pub fn hash_password(password: &str) -> Result<String, CryptoError> {
    let salt_bytes: [u8; 16] = random_bytes();
    let salt =
        SaltString::encode_b64(&salt_bytes).map_err(|e| CryptoError::Password(e.to_string()))?;
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| CryptoError::Password(e.to_string()))
}

/// Checks a password against a stored PHC hash (constant-time inside argon2).
pub fn verify_password(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc)
        .map(|hash| {
            argon2::Argon2::default()
                .verify_password(password.as_bytes(), &hash)
                .is_ok()
        })
        .unwrap_or(false)
}

/// Runs password work ([`hash_password`], [`verify_password`]) from async code: on tokio's
/// blocking pool, never on an async worker, where one argon2 call (19 MiB, tens of
/// milliseconds of CPU in a release build) would stall every request sharing the worker. At
/// most one call per CPU runs at a time: a burst of logins waits for a slot instead of
/// growing the blocking pool by a thread and 19 MiB per request.
pub async fn password_work<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, CryptoError> {
    static SLOTS: LazyLock<Semaphore> = LazyLock::new(|| {
        Semaphore::new(std::thread::available_parallelism().map_or(1, NonZeroUsize::get))
    });
    let failed = |e: &dyn std::fmt::Display| CryptoError::Password(format!("the task failed: {e}"));
    let slot = SLOTS.acquire().await.map_err(|e| failed(&e))?;
    // The slot moves into the task: it is held until argon2 returns, even if the request
    // that asked is dropped meanwhile.
    tokio::task::spawn_blocking(move || {
        let _slot = slot;
        work()
    })
    .await
    .map_err(|e| failed(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_secrets_open_only_with_their_key() {
        let dir = tempfile::tempdir().unwrap();
        let sealer = Sealer::load_or_create(dir.path()).unwrap();
        let sealed = sealer.seal(b"tm_test_abc");
        assert_eq!(sealer.open(&sealed).unwrap(), b"tm_test_abc");
        // Reloading reads the same key file.
        let again = Sealer::load_or_create(dir.path()).unwrap();
        assert_eq!(again.open(&sealed).unwrap(), b"tm_test_abc");
        let other = tempfile::tempdir().unwrap();
        let stranger = Sealer::load_or_create(other.path()).unwrap();
        assert!(stranger.open(&sealed).is_err());
        let mut tampered = sealed.clone();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        assert!(sealer.open(&tampered).is_err());
    }

    #[test]
    fn keyed_hashes_depend_on_the_key_the_label_and_the_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let sealer = Sealer::load_or_create(dir.path()).unwrap();
        let hash = sealer.keyed_hash("use", b"ann@example.com");
        assert_eq!(hash, sealer.keyed_hash("use", b"ann@example.com"));
        assert_eq!(
            hash,
            Sealer::load_existing(dir.path())
                .unwrap()
                .keyed_hash("use", b"ann@example.com"),
            "the same key file, the same hash"
        );
        let other = tempfile::tempdir().unwrap();
        let stranger = Sealer::load_or_create(other.path()).unwrap();
        assert_ne!(hash, stranger.keyed_hash("use", b"ann@example.com"));
        assert_ne!(hash, sealer.keyed_hash("other use", b"ann@example.com"));
        assert_ne!(hash, sealer.keyed_hash("use", b"bob@example.com"));
        assert_ne!(hash, sha256(b"ann@example.com"), "not a plain hash");
        assert_ne!(
            sealer.keyed_hash("ab", b"c"),
            sealer.keyed_hash("a", b"bc"),
            "where the label ends is part of what is hashed"
        );
    }

    #[test]
    fn passwords_verify() {
        let phc = hash_password("correct horse").unwrap();
        assert!(phc.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &phc));
        assert!(!verify_password("wrong", &phc));
        assert!(!verify_password("x", "not a hash"));
    }
}
