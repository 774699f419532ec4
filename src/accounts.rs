//! Accounts and their tokens: provisioning the owner (`intake init`) and authenticating the
//! management API's bearer tokens.

use redb::ReadableTableMetadata;

use crate::clock::Clock;
use crate::crypto::{hash_password, secret_hash};
use crate::error::{Error, Result};
use crate::ids::{TOKEN_PREFIX, new_token, random_base32};
use crate::storage::{
    ACCOUNT_EMAILS, ACCOUNTS, AccountRow, Role, Store, TOKENS, TokenRow, from_json, next_id,
    to_json,
};

/// What `intake init` prints once: the only time the password and token are shown.
#[derive(Debug, serde::Serialize)]
pub struct Provisioned {
    pub owner_email: String,
    pub password: String,
    pub token: String,
}

/// Creates the owner account with a generated password and a first token.
/// Refuses when the data dir already has an owner.
pub fn provision_owner(store: &Store, clock: &dyn Clock, email: &str) -> Result<Provisioned> {
    let email = normalize_email(email)?;
    let password = random_base32(24);
    let password_hash = hash_password(&password).map_err(|e| Error::Internal(e.to_string()))?;
    let token = new_token();
    let now = clock.now();

    let txn = store.write()?;
    {
        let mut accounts = txn.open_table(ACCOUNTS)?;
        if !accounts.is_empty()? {
            return Err(Error::Conflict(
                "This data dir already has an owner; `intake init` runs once per data dir.".into(),
            ));
        }
        let id = next_id(&txn, "next_account_id")?;
        let row = AccountRow {
            id,
            email: email.clone(),
            password_hash,
            role: Role::Owner,
            created_at: now,
        };
        accounts.insert(id, to_json(&row)?.as_slice())?;
        txn.open_table(ACCOUNT_EMAILS)?.insert(email.as_str(), id)?;
        let token_row = TokenRow {
            account_id: id,
            name: "owner (intake init)".into(),
            created_at: now,
        };
        txn.open_table(TOKENS)?
            .insert(&secret_hash(&token), to_json(&token_row)?.as_slice())?;
    }
    txn.commit()?;
    Ok(Provisioned {
        owner_email: email,
        password,
        token,
    })
}

/// Whether an owner has been provisioned.
pub fn has_owner(store: &Store) -> Result<bool> {
    let txn = store.read()?;
    let accounts = txn.open_table(ACCOUNTS)?;
    Ok(!accounts.is_empty()?)
}

/// Resolves a bearer token to its account.
pub fn authenticate_token(store: &Store, token: Option<&str>) -> Result<AccountRow> {
    let token = token.ok_or(Error::MissingToken)?;
    if !token.starts_with(TOKEN_PREFIX) {
        return Err(Error::InvalidToken);
    }
    let txn = store.read()?;
    let tokens = txn.open_table(TOKENS)?;
    let token_row: TokenRow = match tokens.get(&secret_hash(token))? {
        Some(v) => from_json(v.value())?,
        None => return Err(Error::InvalidToken),
    };
    let accounts = txn.open_table(ACCOUNTS)?;
    let account = accounts
        .get(token_row.account_id)?
        .ok_or(Error::InvalidToken)?;
    Ok(from_json(account.value())?)
}

fn normalize_email(email: &str) -> Result<String> {
    let email = email.trim().to_lowercase();
    let valid = email.len() <= 254
        && !email.chars().any(char::is_whitespace)
        && email
            .split_once('@')
            .is_some_and(|(local, domain)| !local.is_empty() && domain.contains('.'));
    if valid {
        Ok(email)
    } else {
        Err(Error::InvalidRequest(format!(
            "`{email}` is not a valid e-mail address."
        )))
    }
}
