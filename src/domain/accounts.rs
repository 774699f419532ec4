//! Accounts and their personal API tokens: provisioning the owner (`intake init`), member
//! accounts created by accepting an invitation, authenticating the management API, passwords,
//! and suspension.
//!
//! There is one server owner (role `owner`); every other account is a `member` that works on
//! the endpoints it was invited to. Tokens are stored by SHA-256 only; the plain token is shown
//! once, when it is created. A token may have an expiry, after which it is refused (and listed
//! as expired until revoked). Dashboard logins, and password changes (which end sessions), are
//! in `sessions`. Passwords are hashed and
//! checked off the async workers (`crypto::password_work`), before any write transaction.

use serde::{Deserialize, Serialize};

use crate::core::clock::{Clock, Timestamp, parse_date_or_rfc3339};
use crate::core::crypto::{hash_id, hash_password, password_work, secret_hash, verify_password};
use crate::core::ids::{TOKEN_PREFIX, new_token, random_base32};
use crate::domain::error::{Error, Missing, Result};
use crate::domain::handles::Handles;
use crate::store::{self, AccountRow, IdKind, Role, Store, TokenRow, WriteTx};

/// A password's length, in characters (the OpenAPI document says these too).
pub const MIN_PASSWORD_CHARS: usize = 10;
pub const MAX_PASSWORD_CHARS: usize = 1024;
const MAX_TOKEN_NAME_CHARS: usize = 100;

/// What `intake init` prints once: the only time the password and token are shown.
#[derive(Debug, Serialize)]
pub struct Provisioned {
    pub owner_email: String,
    pub password: String,
    pub token: String,
}

/// An account as the management API shows it.
#[derive(Debug, Serialize)]
pub struct AccountView {
    pub id: u64,
    pub email: String,
    pub role: Role,
    pub suspended: bool,
    pub created_at: String,
}

impl From<&AccountRow> for AccountView {
    fn from(row: &AccountRow) -> Self {
        AccountView {
            id: row.id,
            email: row.email.clone(),
            role: row.role,
            suspended: row.suspended,
            created_at: row.created_at.to_rfc3339(),
        }
    }
}

/// A token as listed: never the token itself.
#[derive(Debug, Serialize)]
pub struct TokenView {
    pub id: String,
    pub name: String,
    pub created_at: String,
    /// When it stops working; `null`: never.
    pub expires_at: Option<String>,
    /// Whether it has stopped working (expired) when it is listed.
    pub expired: bool,
}

/// A token just created: the only time `token` is shown.
#[derive(Debug, Serialize)]
pub struct NewTokenView {
    #[serde(flatten)]
    pub view: TokenView,
    pub token: String,
}

/// Body of `POST /api/v1/manage/tokens`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewToken {
    pub name: String,
    /// When the token stops working: RFC 3339, or a date (`YYYY-MM-DD`, midnight UTC);
    /// absent or `null`: never.
    #[serde(default)]
    pub expires_at: Option<String>,
}

/// Body of `POST /api/v1/manage/account/password`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasswordChange {
    pub current_password: String,
    pub new_password: String,
}

/// A password that meets the length rule, as its argon2id hash: what accounts are created
/// and updated with. Hashing happens before the write transaction that stores it, so no
/// writer waits for argon2.
pub struct NewPassword {
    hash: String,
}

impl NewPassword {
    /// Checks and hashes `password` on the calling thread (the command line).
    fn hash_here(password: &str) -> Result<NewPassword> {
        valid_password(password)?;
        let hash = hash_password(password)?;
        Ok(NewPassword { hash })
    }

    /// [`NewPassword::hash_here`] for async code: off the async workers.
    pub async fn hash(password: String) -> Result<NewPassword> {
        password_work(move || NewPassword::hash_here(&password)).await?
    }
}

/// Creates the owner account with a generated password and a first token.
/// Refuses when the data dir already has an owner. Runs from the command line, on a store no
/// server has open, so nothing waits on the commit's effects.
pub fn provision_owner(store: &dyn Store, clock: &dyn Clock, email: &str) -> Result<Provisioned> {
    let email = normalize_email(email)?;
    let password = random_base32(24);
    let hashed = NewPassword::hash_here(&password)?;
    let token = new_token();
    let now = clock.now();
    store::write(store, |tx| {
        let account = insert_owner(tx, &email, &hashed, now)?;
        let owner_token = TokenRow {
            account_id: account.id,
            name: "owner (intake init)".into(),
            created_at: now,
            expires_at: None,
        };
        insert_token(tx, &token, &owner_token, now)
    })?;
    Ok(Provisioned {
        owner_email: email,
        password,
        token,
    })
}

/// Creates the owner account with the password the owner chose (the dashboard's first-run
/// setup). Refuses when the data dir already has an owner.
pub async fn create_owner(
    handles: &Handles,
    now: Timestamp,
    email: &str,
    password: String,
) -> Result<AccountRow> {
    let email = normalize_email(email)?;
    let hashed = NewPassword::hash(password).await?;
    handles.write(|tx| insert_owner(tx, &email, &hashed, now))
}

/// Stores the owner account in `tx`, unless the data dir has one.
fn insert_owner(
    tx: &mut dyn WriteTx,
    email: &str,
    password: &NewPassword,
    now: Timestamp,
) -> Result<AccountRow> {
    if tx.any_account()? {
        return Err(Error::Conflict(
            "This data dir already has an owner; `intake init` runs once per data dir.".into(),
        ));
    }
    insert_account(tx, email, password, Role::Owner, now)
}

/// Creates a member account in `tx` (accepting an invitation). The e-mail must be free.
pub fn create_member(
    tx: &mut dyn WriteTx,
    email: &str,
    password: &NewPassword,
    now: Timestamp,
) -> Result<AccountRow> {
    if tx.account_by_email(email)?.is_some() {
        return Err(Error::LoginRequired);
    }
    insert_account(tx, email, password, Role::Member, now)
}

fn insert_account(
    tx: &mut dyn WriteTx,
    email: &str,
    password: &NewPassword,
    role: Role,
    now: Timestamp,
) -> Result<AccountRow> {
    let row = AccountRow {
        id: tx.next_id(IdKind::Account)?,
        email: email.to_string(),
        password_hash: password.hash.clone(),
        role,
        created_at: now,
        suspended: false,
    };
    tx.insert_account(&row)?;
    Ok(row)
}

/// Stores a personal token `row` in `tx`; only its hash is kept.
fn insert_token(
    tx: &mut dyn WriteTx,
    token: &str,
    row: &TokenRow,
    now: Timestamp,
) -> Result<TokenView> {
    let hash = secret_hash(token);
    tx.insert_token(&hash, row)?;
    Ok(token_view(&hash, row, now))
}

fn token_view(hash: &[u8; 32], row: &TokenRow, now: Timestamp) -> TokenView {
    TokenView {
        id: hash_id("tok_", hash),
        name: row.name.clone(),
        created_at: row.created_at.to_rfc3339(),
        expires_at: row.expires_at.map(Timestamp::to_rfc3339),
        expired: token_expired(row, now),
    }
}

fn token_expired(row: &TokenRow, now: Timestamp) -> bool {
    row.expires_at.is_some_and(|at| at <= now)
}

/// Whether an owner has been provisioned.
pub fn has_owner(store: &dyn Store) -> Result<bool> {
    Ok(store.read()?.any_account()?)
}

/// Resolves a personal API token to its (not suspended) account; an expired token is
/// refused as an unknown one is.
pub fn authenticate_token(store: &dyn Store, now: Timestamp, token: &str) -> Result<AccountRow> {
    if !token.starts_with(TOKEN_PREFIX) {
        return Err(Error::InvalidToken);
    }
    let snapshot = store.read()?;
    let token_row = snapshot
        .token(&secret_hash(token))?
        .filter(|row| !token_expired(row, now))
        .ok_or(Error::InvalidToken)?;
    let account = snapshot
        .account(token_row.account_id)?
        .ok_or(Error::InvalidToken)?;
    active(account)
}

/// Refuses suspended accounts.
pub fn active(account: AccountRow) -> Result<AccountRow> {
    if account.suspended {
        Err(Error::AccountSuspended)
    } else {
        Ok(account)
    }
}

/// The account registered under `email`, with its password checked (off the async workers).
pub async fn check_password(
    store: &dyn Store,
    email: &str,
    password: String,
) -> Result<AccountRow> {
    let email = email.trim().to_lowercase();
    let account = store.read()?.account_by_email(&email)?;
    // For an unknown address, spend the same argon2 work as for a real account, so the
    // answer's timing does not reveal which addresses have accounts.
    let hash = account.as_ref().map(|a| a.password_hash.clone());
    let matches = password_work(move || match &hash {
        Some(hash) => verify_password(&password, hash),
        None => verify_password(&password, dummy_password_hash()),
    })
    .await?;
    match account {
        Some(account) if matches => Ok(account),
        _ => Err(Error::InvalidCredentials),
    }
}

/// A password hash with the same parameters as real ones, for unknown addresses.
fn dummy_password_hash() -> &'static str {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| hash_password(&random_base32(24)).unwrap_or_default())
}

/// Creates a personal API token for `account`.
pub fn create_token(
    handles: &Handles,
    account: &AccountRow,
    new: NewToken,
) -> Result<NewTokenView> {
    let name = new.name.trim();
    if name.is_empty() || name.chars().count() > MAX_TOKEN_NAME_CHARS {
        return Err(Error::InvalidRequest(format!(
            "`name` must be 1 to {MAX_TOKEN_NAME_CHARS} characters."
        )));
    }
    let now = handles.now();
    let expires_at = match new.expires_at.as_deref() {
        None => None,
        Some(text) => Some(
            parse_date_or_rfc3339(text)
                .filter(|at| *at > now)
                .ok_or_else(|| {
                    Error::InvalidRequest(
                        "`expires_at` must be a time (RFC 3339) or a date (YYYY-MM-DD) in the \
                         future, or null for a token that does not expire."
                            .into(),
                    )
                })?,
        ),
    };
    let row = TokenRow {
        account_id: account.id,
        name: name.to_string(),
        created_at: now,
        expires_at,
    };
    let token = new_token();
    let view = handles.write(|tx| insert_token(tx, &token, &row, now))?;
    Ok(NewTokenView { view, token })
}

/// The account's tokens, oldest first, expired ones marked.
pub fn list_tokens(
    store: &dyn Store,
    now: Timestamp,
    account: &AccountRow,
) -> Result<Vec<TokenView>> {
    let mut tokens = store.read()?.tokens(account.id)?;
    tokens.sort_by_key(|(_, row)| row.created_at);
    Ok(tokens
        .iter()
        .map(|(hash, row)| token_view(hash, row, now))
        .collect())
}

/// Revokes one of the account's tokens; it stops working at once.
pub fn revoke_token(handles: &Handles, account: &AccountRow, token_id: &str) -> Result<()> {
    handles.write(|tx| {
        let (hash, _) = tx
            .tokens(account.id)?
            .into_iter()
            .find(|(hash, _)| hash_id("tok_", hash) == token_id)
            .ok_or(Error::NotFound(Missing::Token))?;
        tx.delete_token(&hash)?;
        Ok(())
    })
}

/// The new password of `change`, hashed, once its current password is checked (off the async
/// workers). [`crate::domain::sessions::change_password`] stores it with [`set_password_in`], in the
/// commit that ends the account's other sessions.
pub async fn check_password_change(
    account: &AccountRow,
    change: PasswordChange,
) -> Result<NewPassword> {
    let PasswordChange {
        current_password,
        new_password,
    } = change;
    let hash = account.password_hash.clone();
    if !password_work(move || verify_password(&current_password, &hash)).await? {
        return Err(Error::InvalidCredentials);
    }
    NewPassword::hash(new_password).await
}

/// Stores `password` as the account's, in `tx`.
pub fn set_password_in(
    tx: &mut dyn WriteTx,
    account_id: u64,
    password: &NewPassword,
) -> Result<()> {
    update_account_in(tx, account_id, |row| {
        row.password_hash.clone_from(&password.hash)
    })?;
    Ok(())
}

/// Accounts read at a time while listing them all.
const ACCOUNTS_PAGE: usize = 500;

/// Every account (server owner only), oldest first.
pub fn list_accounts(store: &dyn Store, caller: &AccountRow) -> Result<Vec<AccountView>> {
    require_server_owner(caller)?;
    let snapshot = store.read()?;
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let page = snapshot.accounts_page(after, ACCOUNTS_PAGE)?;
        out.extend(page.iter().map(AccountView::from));
        match page.last() {
            Some(last) if page.len() == ACCOUNTS_PAGE => after = last.id,
            _ => return Ok(out),
        }
    }
}

/// Suspends or reinstates a member account (server owner only).
pub fn set_suspended(
    handles: &Handles,
    caller: &AccountRow,
    account_id: u64,
    suspended: bool,
) -> Result<AccountView> {
    require_server_owner(caller)?;
    if account_id == caller.id {
        return Err(Error::Conflict(
            "The owner account cannot be suspended.".into(),
        ));
    }
    let row =
        handles.write(|tx| update_account_in(tx, account_id, |row| row.suspended = suspended))?;
    Ok(AccountView::from(&row))
}

/// Changes the account's row in `tx`.
fn update_account_in(
    tx: &mut dyn WriteTx,
    account_id: u64,
    change: impl Fn(&mut AccountRow),
) -> Result<AccountRow> {
    let mut row = tx
        .account(account_id)?
        .ok_or(Error::NotFound(Missing::Account))?;
    change(&mut row);
    tx.put_account(&row)?;
    Ok(row)
}

pub fn require_server_owner(account: &AccountRow) -> Result<()> {
    if account.role == Role::Owner {
        Ok(())
    } else {
        Err(Error::ServerOwnerOnly)
    }
}

/// Refuses a new password of the wrong length; [`NewPassword::hash`] checks it too, this lets
/// a caller refuse a bad body before it looks anything up.
pub fn valid_password(password: &str) -> Result<()> {
    let chars = password.chars().count();
    if (MIN_PASSWORD_CHARS..=MAX_PASSWORD_CHARS).contains(&chars) {
        Ok(())
    } else {
        Err(Error::InvalidRequest(format!(
            "The password must be {MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters."
        )))
    }
}

pub fn normalize_email(email: &str) -> Result<String> {
    let email = email.trim().to_lowercase();
    let valid = email.len() <= 254
        && !email.chars().any(|c| c.is_whitespace() || c.is_control())
        && email.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty() && !domain.contains('@') && domain.contains('.')
        });
    if valid {
        Ok(email)
    } else {
        Err(Error::InvalidRequest(format!(
            "`{email}` is not a valid e-mail address."
        )))
    }
}
