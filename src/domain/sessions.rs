//! Dashboard logins: password login, session cookies, logout, and the login rate limit.
//!
//! A session is a random token in an HttpOnly cookie; the store keeps only its SHA-256 with
//! the account and an absolute expiry (`[accounts] session_ttl`); changing the password ends
//! the account's other sessions. Failed logins are counted per (account, client address) and
//! per client address in a sliding window, behind [`LoginThrottle`]; this server's
//! [`LoginLimiter`] keeps them in memory: a restart forgets them, which only ever helps a
//! legitimate user. The client address is the one `forwarded` resolves: behind trusted
//! proxies, the one they forward.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::core::clock::Timestamp;
use crate::core::config::AccountsConfig;
use crate::core::crypto::{hash_id, secret_hash};
use crate::core::ids::random_base32;
use crate::domain::accounts;
use crate::domain::error::{Error, Result};
use crate::domain::handles::Handles;
use crate::store::cluster::{ClusterStore, LoginLimits};
use crate::store::{AccountRow, SessionRow, Store};

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

/// Checks a login against the rate limit and the password, then opens a session that lasts
/// `ttl`.
pub async fn login(
    handles: &Handles,
    throttle: &dyn LoginThrottle,
    ttl: Duration,
    login: Login,
    client: Option<IpAddr>,
) -> Result<Opened> {
    let now = handles.now();
    let email = login.email.trim().to_lowercase();
    // Returning before `succeeded` leaves the failure counted.
    let attempt = throttle.reserve(now, &email, client)?;
    let account = accounts::check_password(handles.store.as_ref(), &email, login.password).await?;
    throttle.succeeded(attempt);
    let account = accounts::active(account)?;
    open(handles, now, ttl, account)
}

/// Opens a session for an account that just proved who it is. The password it proved must
/// still be the account's when the session is stored: a password change committed while the
/// old password was being checked ends every session, and must end this one too.
pub fn open(
    handles: &Handles,
    now: Timestamp,
    ttl: Duration,
    account: AccountRow,
) -> Result<Opened> {
    let token = format!("{SESSION_PREFIX}{}", random_base32(32));
    let hash = secret_hash(&token);
    let row = SessionRow {
        account_id: account.id,
        created_at: now,
        expires_at: now.plus(ttl),
    };
    handles.write(|tx| {
        let current = tx.account(account.id)?;
        if current.is_none_or(|current| current.password_hash != account.password_hash) {
            return Err(Error::InvalidCredentials);
        }
        tx.insert_session(&hash, &row)?;
        Ok(())
    })?;
    Ok(Opened {
        token,
        account,
        expires_at: row.expires_at,
    })
}

/// The account of a live session.
pub fn authenticate(store: &dyn Store, now: Timestamp, token: &str) -> Result<AccountRow> {
    let snapshot = store.read()?;
    let row = snapshot
        .session(&secret_hash(token))?
        .ok_or(Error::SessionExpired)?;
    if row.expires_at <= now {
        return Err(Error::SessionExpired);
    }
    let account = snapshot
        .account(row.account_id)?
        .ok_or(Error::SessionExpired)?;
    accounts::active(account)
}

/// Ends a session; logging out twice is fine.
pub fn logout(handles: &Handles, token: &str) -> Result<()> {
    let hash = secret_hash(token);
    handles.write(|tx| Ok(tx.delete_session(&hash)?))
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
    handles: &Handles,
    throttle: &dyn LoginThrottle,
    client: Option<IpAddr>,
    account: &AccountRow,
    change: accounts::PasswordChange,
    keep_session: Option<&str>,
) -> Result<()> {
    let attempt = throttle.reserve(handles.now(), &account.email, client)?;
    let password = match accounts::check_password_change(account, change).await {
        // Returning before `succeeded` leaves the failure counted.
        Err(Error::InvalidCredentials) => return Err(Error::InvalidCredentials),
        checked => {
            throttle.succeeded(attempt);
            checked?
        }
    };
    let keep = keep_session.map(secret_hash);
    handles.write(|tx| {
        accounts::set_password_in(tx, account.id, &password)?;
        tx.delete_sessions_of(account.id, keep.as_ref())?;
        Ok(())
    })
}

/// A session as its account sees it listed: never its cookie.
#[derive(Debug, Serialize)]
pub struct SessionView {
    pub id: String,
    pub created_at: String,
    pub expires_at: String,
    /// Whether it is the session of the call that lists them.
    pub current: bool,
}

/// The account's live sessions, newest first; `current` is the caller's own session, if the
/// caller used one.
pub fn list(
    store: &dyn Store,
    now: Timestamp,
    account: &AccountRow,
    current: Option<&str>,
) -> Result<Vec<SessionView>> {
    let current = current.map(secret_hash);
    let mut sessions: Vec<_> = store
        .read()?
        .sessions(account.id)?
        .into_iter()
        .filter(|(_, row)| row.expires_at > now)
        .collect();
    sessions.sort_by_key(|(_, row)| std::cmp::Reverse(row.created_at));
    Ok(sessions
        .iter()
        .map(|(hash, row)| SessionView {
            id: hash_id("ses_", hash),
            created_at: row.created_at.to_rfc3339(),
            expires_at: row.expires_at.to_rfc3339(),
            current: current.as_ref() == Some(hash),
        })
        .collect())
}

/// Ends every session of the account but `keep` (the caller's, when it used one; a call made
/// with a token ends them all); returns how many live ones ended.
pub fn sign_out_others(
    handles: &Handles,
    account: &AccountRow,
    keep: Option<&str>,
) -> Result<usize> {
    let keep = keep.map(secret_hash);
    let now = handles.now();
    handles.write(|tx| {
        // Expired ones go too, but only live ones count: they are what the list showed.
        let ended = tx
            .sessions(account.id)?
            .iter()
            .filter(|(hash, row)| Some(hash) != keep.as_ref() && row.expires_at > now)
            .count();
        tx.delete_sessions_of(account.id, keep.as_ref())?;
        Ok(ended)
    })
}

/// Deletes expired sessions; returns how many.
pub fn purge_expired(store: &dyn Store, now: Timestamp) -> Result<usize> {
    Ok(store.purge_expired_sessions(now)?)
}

/// The login rate limit, as the login and password-change calls use it: an attempt takes its
/// failure slot before its password is checked ([`LoginThrottle::reserve`], which checks the
/// limit and counts in one step), so parallel attempts cannot all pass the check before any
/// failure is counted; only a right password gives the slot back
/// ([`LoginThrottle::succeeded`]). An attempt never given back stays a failure (a wrong
/// password, or a client that went away meanwhile).
///
/// [`LoginLimiter`] counts in this process's memory, which is right for one server. Several
/// nodes behind one address must share the counts, or each node multiplies the limits:
/// [`SharedLoginLimiter`] keeps the failures in the shared store (`ClusterStore`), reserves
/// with one atomic check-and-count, and gives a slot back by removing that one failure.
pub trait LoginThrottle: Send + Sync {
    /// Counts an attempt of `email` from `client` at `now` as failed, or refuses it with
    /// [`Error::TooManyLoginAttempts`] while the account at this address, or the address, is
    /// at its limit.
    fn reserve(&self, now: Timestamp, email: &str, client: Option<IpAddr>) -> Result<Reservation>;

    /// The password of a reserved attempt was right: the account starts afresh at this
    /// address, and the address gets this attempt's slot back (but keeps its other failures,
    /// which may be guesses at other accounts).
    fn succeeded(&self, attempt: Reservation);
}

/// A failure counted by [`LoginThrottle::reserve`] while the password is checked: who tried,
/// from where (as counted: see [`limited_address`]), and when.
#[derive(Debug)]
pub struct Reservation {
    pub email: String,
    pub address: Option<IpAddr>,
    pub at: Timestamp,
    /// The failure's slot in a shared count ([`SharedLoginLimiter`]).
    pub slot: Option<u64>,
}

/// The [`LoginThrottle`] of one server: failed logins in a sliding window, in memory,
/// counted per (account, client address) and per client address, never per account alone: a
/// count that any address could fill would let anyone lock the account holder out. Someone
/// guessing one account's password from many addresses gets `per_account` guesses per
/// address, each address `per_address` over all accounts, and every guess costs an argon2
/// check. One lock covers the check and the count of a reservation.
pub struct LoginLimiter {
    per_account: u32,
    per_address: u32,
    window: Duration,
    failures: Mutex<Failures>,
}

/// Who fails: an account (its e-mail address, also made-up ones) at a client address.
type Pair = (String, Option<IpAddr>);

#[derive(Default)]
struct Failures {
    by_pair: HashMap<Pair, VecDeque<Timestamp>>,
    by_address: HashMap<IpAddr, VecDeque<Timestamp>>,
}

impl LoginLimiter {
    pub fn new(config: &AccountsConfig) -> LoginLimiter {
        LoginLimiter {
            per_account: config.login_failures_per_account,
            per_address: config.login_failures_per_address,
            window: config.login_window,
            failures: Mutex::default(),
        }
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, Failures> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
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
}

impl LoginThrottle for LoginLimiter {
    fn reserve(&self, now: Timestamp, email: &str, client: Option<IpAddr>) -> Result<Reservation> {
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
        if let Some(ip) = client {
            failures.by_address.entry(ip).or_default().push_back(now);
        }
        failures.by_pair.entry(pair).or_default().push_back(now);
        // Bound memory under a flood of made-up e-mail addresses: forget stale entries.
        if failures.by_pair.len() > 10_000 {
            failures
                .by_pair
                .retain(|_, f| f.back().is_some_and(|t| *t > since));
            failures
                .by_address
                .retain(|_, f| f.back().is_some_and(|t| *t > since));
        }
        Ok(Reservation {
            email: email.to_string(),
            address: client,
            at: now,
            slot: None,
        })
    }

    fn succeeded(&self, attempt: Reservation) {
        let mut failures = self.failures();
        let Reservation {
            email, address, at, ..
        } = attempt;
        failures.by_pair.remove(&(email, address));
        if let Some(slots) = address.and_then(|ip| failures.by_address.get_mut(&ip))
            && let Some(mine) = slots.iter().rposition(|t| *t == at)
        {
            slots.remove(mine);
        }
    }
}

/// The [`LoginThrottle`] of a node sharing its store with others: the same limits as
/// [`LoginLimiter`], counted in the store, so they hold for the cluster as a whole. A store
/// that cannot be reached refuses the attempt (503), never lets it through uncounted.
pub struct SharedLoginLimiter {
    store: Arc<dyn Store>,
    limits: LoginLimits,
}

impl SharedLoginLimiter {
    pub fn new(store: Arc<dyn Store>, config: &AccountsConfig) -> SharedLoginLimiter {
        SharedLoginLimiter {
            store,
            limits: LoginLimits {
                per_account: config.login_failures_per_account,
                per_address: config.login_failures_per_address,
                window: config.login_window,
            },
        }
    }

    fn cluster(&self) -> Result<&dyn ClusterStore> {
        self.store.cluster().ok_or_else(|| {
            Error::Internal("the shared login limit needs a store shared by nodes".into())
        })
    }
}

impl LoginThrottle for SharedLoginLimiter {
    fn reserve(&self, now: Timestamp, email: &str, client: Option<IpAddr>) -> Result<Reservation> {
        let client = client.map(limited_address);
        match self
            .cluster()?
            .reserve_login(email, client, now, self.limits)?
        {
            Ok(slot) => Ok(Reservation {
                email: email.to_string(),
                address: client,
                at: now,
                slot: Some(slot),
            }),
            Err(until) => Err(Error::TooManyLoginAttempts {
                retry_after_secs: secs_until(now, until),
            }),
        }
    }

    fn succeeded(&self, attempt: Reservation) {
        let Some(slot) = attempt.slot else {
            return;
        };
        let given_back = self.cluster().and_then(|cluster| {
            Ok(cluster.login_succeeded(slot, &attempt.email, attempt.address)?)
        });
        if let Err(err) = given_back {
            log::warn!("cannot give a login slot back: {err}");
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
    use std::sync::Arc;

    use super::*;
    use crate::core::clock::ManualClock;
    use crate::domain::handles::Unattended;

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

    fn refused(result: Result<Reservation>) -> bool {
        matches!(result, Err(Error::TooManyLoginAttempts { .. }))
    }

    #[tokio::test]
    async fn a_session_is_not_opened_with_a_password_changed_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::open_embedded(&dir.path().join("t.redb"), 1 << 20, 0).unwrap();
        let clock = Arc::new(ManualClock::new(NOW));
        let handles = Handles::new(store.clone(), clock.clone(), Arc::new(Unattended));
        let owner =
            accounts::provision_owner(store.as_ref(), clock.as_ref(), "o@example.com").unwrap();
        // The login checked the password of this row...
        let checked =
            accounts::check_password(store.as_ref(), "o@example.com", owner.password.clone())
                .await
                .unwrap();
        // ...and the password changed before the session was stored.
        let change = accounts::PasswordChange {
            current_password: owner.password,
            new_password: "second-password".into(),
        };
        let limiter = limiter(5, 20);
        change_password(&handles, &limiter, None, &checked, change, None)
            .await
            .unwrap();
        let ttl = Duration::from_secs(3600);
        let stale = open(&handles, NOW, ttl, checked);
        assert!(matches!(stale, Err(Error::InvalidCredentials)));
        let fresh =
            accounts::check_password(store.as_ref(), "o@example.com", "second-password".into())
                .await
                .unwrap();
        assert!(open(&handles, NOW, ttl, fresh).is_ok());
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
            .map(|attempt| limiter.succeeded(attempt))
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
