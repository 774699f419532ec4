//! First-run setup: while the data dir has no owner, `serve` prints a one-time link to
//! `/dashboard/setup?token=…` where the owner account is created with an e-mail address and
//! a password of the owner's choosing (the alternative to `intake init`).
//!
//! The token is random, kept in memory as its SHA-256 only, valid for [`SETUP_TTL`] and used
//! at most once; a restart while there is still no owner prints a new one.

use std::sync::Mutex;
use std::time::Duration;

use subtle::ConstantTimeEq;

use crate::core::clock::Timestamp;
use crate::core::config::Config;
use crate::core::crypto::secret_hash;
use crate::core::ids::random_base32;
use crate::domain::accounts;
use crate::domain::error::Result;
use crate::store::Store;

/// How long a setup link works.
pub const SETUP_TTL: Duration = Duration::from_secs(3600);

struct Pending {
    hash: [u8; 32],
    expires_at: Timestamp,
}

/// The setup link of a server started without an owner, if any.
#[derive(Default)]
pub struct SetupLink {
    pending: Mutex<Option<Pending>>,
}

impl SetupLink {
    /// A link for a data dir without an owner: the state to keep, and the token to print.
    pub fn issue(now: Timestamp) -> (SetupLink, String) {
        let token = random_base32(32);
        let link = SetupLink {
            pending: Mutex::new(Some(Pending {
                hash: secret_hash(&token),
                expires_at: now.plus(SETUP_TTL),
            })),
        };
        (link, token)
    }

    /// Whether `token` is the live setup token.
    pub fn valid(&self, token: &str, now: Timestamp) -> bool {
        let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending
            .as_ref()
            .is_some_and(|p| p.expires_at > now && bool::from(p.hash.ct_eq(&secret_hash(token))))
    }

    /// Uses the token up: true once, for the live token only.
    pub fn consume(&self, token: &str, now: Timestamp) -> bool {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let live = pending
            .as_ref()
            .is_some_and(|p| p.expires_at > now && bool::from(p.hash.ct_eq(&secret_hash(token))));
        if live {
            *pending = None;
        }
        live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_works_once_and_expires() {
        let now = Timestamp(1_000_000);
        let (link, token) = SetupLink::issue(now);
        assert!(link.valid(&token, now));
        assert!(!link.valid("wrong", now));
        assert!(!link.valid(&token, now.plus(SETUP_TTL)));
        assert!(link.consume(&token, now));
        assert!(!link.consume(&token, now));
        assert!(!SetupLink::default().valid(&token, now));
    }
}

/// The dashboard's state in a running server.
#[derive(Default)]
pub struct Dashboard {
    /// The first-run setup link, while the data dir has no owner.
    pub setup: SetupLink,
}

impl Dashboard {
    /// The dashboard's state for a server starting on `store`. Without an owner account, a
    /// one-time setup link is made and printed in the log (the alternative to `intake init`);
    /// `config.public_url()` must already name the listening address.
    pub fn start(store: &dyn Store, config: &Config, now: Timestamp) -> Result<Dashboard> {
        let mut dashboard = Dashboard::default();
        if !accounts::has_owner(store)? {
            let (link, token) = SetupLink::issue(now);
            dashboard.setup = link;
            log::warn!(
                "this data dir has no owner account yet; create it at {}/dashboard/setup?token={token} \
                 (works once, for {} minutes), or provision one with: \
                 intake init --data-dir {} --owner-email you@example.com",
                config.public_url(),
                SETUP_TTL.as_secs() / 60,
                config.data_dir.display()
            );
        }
        Ok(dashboard)
    }
}
