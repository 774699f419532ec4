//! Dashboard logins: password login, session cookies, logout, and the login rate limit.
//!
//! A session is a random token in an HttpOnly cookie; the store keeps only its SHA-256 with
//! the account and an absolute expiry (`[accounts] session_ttl`). Failed logins are counted per
//! account and per client address in a sliding window (`LoginLimiter`, in memory: a restart
//! forgets them, which only ever helps a legitimate user).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use redb::ReadableTable;
use serde::Deserialize;

use crate::accounts::{self, account_by_id};
use crate::clock::{Clock, Timestamp};
use crate::config::AccountsConfig;
use crate::crypto::secret_hash;
use crate::error::{Error, Result};
use crate::ids::random_base32;
use crate::storage::{ACCOUNTS, AccountRow, SESSIONS, SessionRow, Store, from_json, to_json};

/// Name of the session cookie.
pub const COOKIE: &str = "intake_session";
const SESSION_PREFIX: &str = "ise_";

/// Body of `POST /api/v1/auth/login`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Login {
    pub email: String,
    pub password: String,
}

/// A session just opened: the cookie value and when it expires.
pub struct Opened {
    pub token: String,
    pub account: AccountRow,
    pub expires_at: Timestamp,
}

/// Checks a login against the rate limit and the password, then opens a session.
pub fn login(
    store: &Store,
    clock: &dyn Clock,
    limiter: &LoginLimiter,
    login: Login,
    client: Option<IpAddr>,
) -> Result<Opened> {
    let now = clock.now();
    let email = login.email.trim().to_lowercase();
    limiter.check(now, &email, client)?;
    let account = match accounts::check_password(store, &email, &login.password) {
        Ok(account) => account,
        Err(err) => {
            limiter.failed(now, &email, client);
            return Err(err);
        }
    };
    limiter.succeeded(&email);
    let account = accounts::active(account)?;
    open(store, now, limiter.session_ttl, account)
}

/// Opens a session for an account that just proved who it is.
pub fn open(store: &Store, now: Timestamp, ttl: Duration, account: AccountRow) -> Result<Opened> {
    let token = format!("{SESSION_PREFIX}{}", random_base32(32));
    let row = SessionRow {
        account_id: account.id,
        created_at: now,
        expires_at: now.plus(ttl),
    };
    let txn = store.write()?;
    txn.open_table(SESSIONS)?
        .insert(&secret_hash(&token), to_json(&row)?.as_slice())?;
    txn.commit()?;
    Ok(Opened {
        token,
        account,
        expires_at: row.expires_at,
    })
}

/// The account of a live session.
pub fn authenticate(store: &Store, now: Timestamp, token: &str) -> Result<AccountRow> {
    let txn = store.read()?;
    let row: SessionRow = match txn.open_table(SESSIONS)?.get(&secret_hash(token))? {
        Some(v) => from_json(v.value())?,
        None => return Err(Error::SessionExpired),
    };
    if row.expires_at <= now {
        return Err(Error::SessionExpired);
    }
    let account =
        account_by_id(&txn.open_table(ACCOUNTS)?, row.account_id)?.ok_or(Error::SessionExpired)?;
    accounts::active(account)
}

/// Ends a session; logging out twice is fine.
pub fn logout(store: &Store, token: &str) -> Result<()> {
    let txn = store.write()?;
    txn.open_table(SESSIONS)?.remove(&secret_hash(token))?;
    txn.commit()?;
    Ok(())
}

/// Deletes expired sessions; returns how many.
pub fn purge_expired(store: &Store, now: Timestamp) -> Result<usize> {
    let txn = store.write()?;
    let purged = {
        let mut sessions = txn.open_table(SESSIONS)?;
        let mut expired = Vec::new();
        for entry in sessions.iter()? {
            let (hash, value) = entry?;
            let row: SessionRow = from_json(value.value())?;
            if row.expires_at <= now {
                expired.push(*hash.value());
            }
        }
        for hash in &expired {
            sessions.remove(hash)?;
        }
        expired.len()
    };
    txn.commit()?;
    Ok(purged)
}

/// Failed logins per account and per client address in a sliding window.
pub struct LoginLimiter {
    per_account: u32,
    per_address: u32,
    window: Duration,
    session_ttl: Duration,
    failures: Mutex<Failures>,
}

#[derive(Default)]
struct Failures {
    by_account: HashMap<String, VecDeque<Timestamp>>,
    by_address: HashMap<IpAddr, VecDeque<Timestamp>>,
}

impl LoginLimiter {
    pub fn new(config: &AccountsConfig) -> LoginLimiter {
        LoginLimiter {
            per_account: config.login_failures_per_account,
            per_address: config.login_failures_per_address,
            window: config.login_window,
            session_ttl: config.session_ttl,
            failures: Mutex::default(),
        }
    }

    /// Refuses with 429 while either the account or the address is at its limit.
    fn check(&self, now: Timestamp, email: &str, client: Option<IpAddr>) -> Result<()> {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let since = now.minus(self.window);
        let account_wait = failures
            .by_account
            .get_mut(email)
            .and_then(|f| self.wait(f, since, self.per_account));
        let address_wait = client.and_then(|ip| {
            failures
                .by_address
                .get_mut(&ip)
                .and_then(|f| self.wait(f, since, self.per_address))
        });
        match account_wait.max(address_wait) {
            Some(until) => Err(Error::TooManyLoginAttempts {
                retry_after_secs: secs_until(now, until),
            }),
            None => Ok(()),
        }
    }

    /// When the oldest failure leaves the window, if `failures` is at `limit`.
    fn wait(
        &self,
        failures: &mut VecDeque<Timestamp>,
        since: Timestamp,
        limit: u32,
    ) -> Option<Timestamp> {
        while failures.front().is_some_and(|t| *t <= since) {
            failures.pop_front();
        }
        (failures.len() >= limit as usize)
            .then(|| failures.front().map(|t| t.plus(self.window)))
            .flatten()
    }

    fn failed(&self, now: Timestamp, email: &str, client: Option<IpAddr>) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures
            .by_account
            .entry(email.to_string())
            .or_default()
            .push_back(now);
        if let Some(ip) = client {
            failures.by_address.entry(ip).or_default().push_back(now);
        }
        // Bound memory under a flood of made-up e-mail addresses: forget stale entries.
        if failures.by_account.len() > 10_000 {
            let since = now.minus(self.window);
            failures
                .by_account
                .retain(|_, f| f.back().is_some_and(|t| *t > since));
            failures
                .by_address
                .retain(|_, f| f.back().is_some_and(|t| *t > since));
        }
    }

    fn succeeded(&self, email: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.by_account.remove(email);
    }

    pub fn session_ttl(&self) -> Duration {
        self.session_ttl
    }
}

fn secs_until(now: Timestamp, until: Timestamp) -> u64 {
    let micros = until.as_micros().saturating_sub(now.as_micros()).max(0);
    u64::try_from(micros)
        .unwrap_or(0)
        .div_ceil(1_000_000)
        .max(1)
}
