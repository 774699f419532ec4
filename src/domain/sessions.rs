//! Dashboard logins: password login, session cookies, logout, and the login rate limit.
//!
//! A session is a random token in an HttpOnly cookie; the store keeps only its SHA-256 with
//! the account and an absolute expiry (`[accounts] session_ttl`); changing the password ends
//! the account's other sessions (`end_all_but`). Failed logins are counted per (account,
//! client address) and per client address in a sliding window (`LoginLimiter`, in memory: a
//! restart forgets them, which only ever helps a legitimate user). The client address is the
//! one `forwarded` resolves: behind trusted proxies, the one they forward.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use redb::{ReadableTable, WriteTransaction};
use serde::Deserialize;

use crate::core::clock::{Clock, Timestamp};
use crate::core::config::AccountsConfig;
use crate::core::crypto::secret_hash;
use crate::core::ids::random_base32;
use crate::domain::accounts::{self, account_by_id};
use crate::domain::error::{Error, Result};
use crate::store::{ACCOUNTS, AccountRow, RedbStore, SESSIONS, SessionRow, from_json, to_json};

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
pub async fn login(
    store: &RedbStore,
    clock: &dyn Clock,
    limiter: &LoginLimiter,
    login: Login,
    client: Option<IpAddr>,
) -> Result<Opened> {
    let now = clock.now();
    let email = login.email.trim().to_lowercase();
    let attempt = limiter.reserve(now, &email, client)?;
    let account = accounts::check_password(store, &email, login.password).await?;
    attempt.succeeded();
    let account = accounts::active(account)?;
    open(store, now, limiter.session_ttl, account)
}

/// Opens a session for an account that just proved who it is. The password it proved must
/// still be the account's when the session is stored: a password change committed while the
/// old password was being checked ends every session, and must end this one too.
pub fn open(
    store: &RedbStore,
    now: Timestamp,
    ttl: Duration,
    account: AccountRow,
) -> Result<Opened> {
    let token = format!("{SESSION_PREFIX}{}", random_base32(32));
    let row = SessionRow {
        account_id: account.id,
        created_at: now,
        expires_at: now.plus(ttl),
    };
    let txn = store.write()?;
    let current = account_by_id(&txn.open_table(ACCOUNTS)?, account.id)?;
    if current.is_none_or(|current| current.password_hash != account.password_hash) {
        return Err(Error::InvalidCredentials);
    }
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
pub fn authenticate(store: &RedbStore, now: Timestamp, token: &str) -> Result<AccountRow> {
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
pub fn logout(store: &RedbStore, token: &str) -> Result<()> {
    let txn = store.write()?;
    txn.open_table(SESSIONS)?.remove(&secret_hash(token))?;
    txn.commit()?;
    Ok(())
}

/// Changes the account's password after checking the current one, and ends every other
/// session of the account in the same commit: whoever held one (a stolen cookie, a browser
/// left logged in) must log in with the new password. `keep_session`, the session that made
/// the change, stays; a change made with a token ends them all. Personal API tokens stay
/// valid (revoke them one by one): scripts keep working, as with GitHub's and Stripe's tokens.
///
/// The check of the current password counts against the login limits like a login, so a
/// stolen session or token cannot guess it faster than the login form could.
pub async fn change_password(
    store: &RedbStore,
    clock: &dyn Clock,
    limiter: &LoginLimiter,
    client: Option<IpAddr>,
    account: &AccountRow,
    change: accounts::PasswordChange,
    keep_session: Option<&str>,
) -> Result<()> {
    let attempt = limiter.reserve(clock.now(), &account.email, client)?;
    let password = match accounts::check_password_change(account, change).await {
        // Dropping the attempt leaves the failure counted.
        Err(Error::InvalidCredentials) => return Err(Error::InvalidCredentials),
        checked => {
            attempt.succeeded();
            checked?
        }
    };
    let txn = store.write()?;
    accounts::set_password_in(&txn, account.id, password)?;
    end_all_but(&txn, account.id, keep_session)?;
    txn.commit()?;
    Ok(())
}

/// Ends every session of the account except `keep` (a password change) inside `txn`.
fn end_all_but(txn: &WriteTransaction, account_id: u64, keep: Option<&str>) -> Result<()> {
    let keep = keep.map(secret_hash);
    remove_sessions(txn, |hash, row| {
        row.account_id == account_id && Some(*hash) != keep
    })?;
    Ok(())
}

/// Deletes expired sessions; returns how many.
pub fn purge_expired(store: &RedbStore, now: Timestamp) -> Result<usize> {
    let txn = store.write()?;
    let purged = remove_sessions(&txn, |_, row| row.expires_at <= now)?;
    txn.commit()?;
    Ok(purged)
}

/// Deletes the sessions `ended` picks; returns how many.
fn remove_sessions(
    txn: &WriteTransaction,
    ended: impl Fn(&[u8; 32], &SessionRow) -> bool,
) -> Result<usize> {
    let mut sessions = txn.open_table(SESSIONS)?;
    let mut picked = Vec::new();
    for entry in sessions.iter()? {
        let (hash, value) = entry?;
        let row: SessionRow = from_json(value.value())?;
        if ended(hash.value(), &row) {
            picked.push(*hash.value());
        }
    }
    for hash in &picked {
        sessions.remove(hash)?;
    }
    Ok(picked.len())
}

/// Failed logins in a sliding window, counted per (account, client address) and per client
/// address, never per account alone: a count that any address could fill would let anyone
/// lock the account holder out. Someone guessing one account's password from many addresses
/// gets `per_account` guesses per address, each address `per_address` over all accounts, and
/// every guess costs an argon2 check.
///
/// An attempt takes its failure slot before its password is checked ([`LoginLimiter::reserve`],
/// one lock for the check and the count), so parallel attempts cannot all pass the check
/// before any failure is counted; only a right password gives the slot back.
pub struct LoginLimiter {
    per_account: u32,
    per_address: u32,
    window: Duration,
    session_ttl: Duration,
    failures: Mutex<Failures>,
}

/// Who fails: an account (its e-mail address, also made-up ones) at a client address.
type Pair = (String, Option<IpAddr>);

#[derive(Default)]
struct Failures {
    by_pair: HashMap<Pair, VecDeque<Timestamp>>,
    by_address: HashMap<IpAddr, VecDeque<Timestamp>>,
}

/// A login attempt holding its failure slot while the password is checked. Dropping it leaves
/// the failure counted (a wrong password, or a client that went away meanwhile).
struct Attempt<'a> {
    limiter: &'a LoginLimiter,
    pair: Pair,
    at: Timestamp,
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

    fn failures(&self) -> std::sync::MutexGuard<'_, Failures> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts an attempt as failed, or refuses it with 429 while the account at this address,
    /// or the address, is at its limit.
    fn reserve(&self, now: Timestamp, email: &str, client: Option<IpAddr>) -> Result<Attempt<'_>> {
        let client = client.map(limited_address);
        let pair: Pair = (email.to_string(), client);
        let since = now.minus(self.window);
        let mut failures = self.failures();
        let pair_wait = failures
            .by_pair
            .get_mut(&pair)
            .and_then(|f| self.wait(f, since, self.per_account));
        let address_wait = client.and_then(|ip| {
            failures
                .by_address
                .get_mut(&ip)
                .and_then(|f| self.wait(f, since, self.per_address))
        });
        if let Some(until) = pair_wait.max(address_wait) {
            return Err(Error::TooManyLoginAttempts {
                retry_after_secs: secs_until(now, until),
            });
        }
        failures
            .by_pair
            .entry(pair.clone())
            .or_default()
            .push_back(now);
        if let Some(ip) = client {
            failures.by_address.entry(ip).or_default().push_back(now);
        }
        // Bound memory under a flood of made-up e-mail addresses: forget stale entries.
        if failures.by_pair.len() > 10_000 {
            failures
                .by_pair
                .retain(|_, f| f.back().is_some_and(|t| *t > since));
            failures
                .by_address
                .retain(|_, f| f.back().is_some_and(|t| *t > since));
        }
        Ok(Attempt {
            limiter: self,
            pair,
            at: now,
        })
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

    pub fn session_ttl(&self) -> Duration {
        self.session_ttl
    }
}

impl Attempt<'_> {
    /// The password was right: the account starts afresh at this address, and the address
    /// gets this attempt's slot back (but keeps its other failures, which may be guesses at
    /// other accounts).
    fn succeeded(self) {
        let mut failures = self.limiter.failures();
        failures.by_pair.remove(&self.pair);
        if let Some(slots) = self.pair.1.and_then(|ip| failures.by_address.get_mut(&ip))
            && let Some(mine) = slots.iter().rposition(|t| *t == self.at)
        {
            slots.remove(mine);
        }
    }
}

/// The address failures are counted under: an IPv4 address (also written IPv4-mapped), or
/// the /64 network of an IPv6 address, the usual size of one subscriber's allocation: anyone
/// given one holds 2^64 addresses.
fn limited_address(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        v4 => v4,
    }
}

fn secs_until(now: Timestamp, until: Timestamp) -> u64 {
    let micros = until.as_micros().saturating_sub(now.as_micros()).max(0);
    u64::try_from(micros)
        .unwrap_or(0)
        .div_ceil(1_000_000)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp(1_800_000_000_000_000);

    fn limiter(per_account: u32, per_address: u32) -> LoginLimiter {
        LoginLimiter::new(&AccountsConfig {
            login_failures_per_account: per_account,
            login_failures_per_address: per_address,
            ..AccountsConfig::default()
        })
    }

    fn ip(text: &str) -> Option<IpAddr> {
        Some(text.parse().unwrap())
    }

    fn refused(result: Result<Attempt<'_>>) -> bool {
        matches!(result, Err(Error::TooManyLoginAttempts { .. }))
    }

    #[tokio::test]
    async fn a_session_is_not_opened_with_a_password_changed_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let store = RedbStore::open(&dir.path().join("t.redb"), 1 << 20).unwrap();
        let clock = crate::core::clock::ManualClock::new(NOW);
        let owner = accounts::provision_owner(&store, &clock, "o@example.com").unwrap();
        // The login checked the password of this row...
        let checked = accounts::check_password(&store, "o@example.com", owner.password.clone())
            .await
            .unwrap();
        // ...and the password changed before the session was stored.
        let change = accounts::PasswordChange {
            current_password: owner.password,
            new_password: "second-password".into(),
        };
        let limiter = limiter(5, 20);
        change_password(&store, &clock, &limiter, None, &checked, change, None)
            .await
            .unwrap();
        let ttl = Duration::from_secs(3600);
        let stale = open(&store, NOW, ttl, checked);
        assert!(matches!(stale, Err(Error::InvalidCredentials)));
        let fresh = accounts::check_password(&store, "o@example.com", "second-password".into())
            .await
            .unwrap();
        assert!(open(&store, NOW, ttl, fresh).is_ok());
    }

    #[test]
    fn an_ipv6_client_counts_as_its_64_and_ipv4_as_itself_mapped_or_not() {
        let limiter = limiter(100, 2);
        let _ = limiter.reserve(NOW, "a@example.com", ip("2001:db8:0:7::1"));
        let _ = limiter.reserve(NOW, "b@example.com", ip("2001:db8:0:7:ffff::9"));
        assert!(refused(limiter.reserve(
            NOW,
            "c@example.com",
            ip("2001:db8:0:7::2")
        )));
        assert!(!refused(limiter.reserve(
            NOW,
            "c@example.com",
            ip("2001:db8:0:8::1")
        )));

        let _ = limiter.reserve(NOW, "a@example.com", ip("192.0.2.1"));
        let _ = limiter.reserve(NOW, "b@example.com", ip("::ffff:192.0.2.1"));
        assert!(refused(limiter.reserve(
            NOW,
            "c@example.com",
            ip("192.0.2.1")
        )));
        assert!(!refused(limiter.reserve(
            NOW,
            "c@example.com",
            ip("192.0.2.2")
        )));
    }

    #[test]
    fn a_right_password_clears_its_pair_and_gives_back_only_its_own_slot() {
        let limiter = limiter(2, 5);
        let a = ip("192.0.2.1");
        let _ = limiter.reserve(NOW, "owner@example.com", a);
        let _ = limiter.reserve(NOW, "guess@example.com", a);
        limiter
            .reserve(NOW, "owner@example.com", a)
            .map(Attempt::succeeded)
            .unwrap();
        // The owner starts afresh at `a`: two more failures before it is refused.
        let _ = limiter.reserve(NOW, "owner@example.com", a);
        let _ = limiter.reserve(NOW, "owner@example.com", a);
        assert!(refused(limiter.reserve(NOW, "owner@example.com", a)));
        // The address kept its other failures (4 of 5 now): one more, then refused.
        assert!(!refused(limiter.reserve(NOW, "other@example.com", a)));
        assert!(refused(limiter.reserve(NOW, "other@example.com", a)));
    }
}
