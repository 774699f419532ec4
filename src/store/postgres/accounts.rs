//! accounts on PostgreSQL: unimplemented stubs, replaced by the real implementation.

#![allow(unused_variables, unused_imports)]

use crate::core::clock::Timestamp;
use crate::store::accounts::*;
use crate::store::postgres::{PgStore, PgTx};
use crate::store::*;

impl AccountsRead for PgTx<'_> {
    fn account(&self, id: u64) -> Result<Option<AccountRow>, StoreError> {
        unimplemented!()
    }
    fn account_by_email(&self, email: &str) -> Result<Option<AccountRow>, StoreError> {
        unimplemented!()
    }
    fn any_account(&self) -> Result<bool, StoreError> {
        unimplemented!()
    }
    fn accounts_page(&self, after: u64, limit: usize) -> Result<Vec<AccountRow>, StoreError> {
        unimplemented!()
    }
    fn token(&self, hash: &[u8; 32]) -> Result<Option<TokenRow>, StoreError> {
        unimplemented!()
    }
    fn tokens(&self, account_id: u64) -> Result<Vec<([u8; 32], TokenRow)>, StoreError> {
        unimplemented!()
    }
    fn session(&self, hash: &[u8; 32]) -> Result<Option<SessionRow>, StoreError> {
        unimplemented!()
    }
    fn notifications(&self, account_id: u64) -> Result<Vec<NotificationRow>, StoreError> {
        unimplemented!()
    }
    fn notification(
        &self,
        account_id: u64,
        id: u64,
    ) -> Result<Option<NotificationRow>, StoreError> {
        unimplemented!()
    }
}

impl AccountsWrite for PgTx<'_> {
    fn insert_account(&mut self, row: &AccountRow) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn put_account(&mut self, row: &AccountRow) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn insert_token(&mut self, hash: &[u8; 32], row: &TokenRow) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn delete_token(&mut self, hash: &[u8; 32]) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn insert_session(&mut self, hash: &[u8; 32], row: &SessionRow) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn delete_session(&mut self, hash: &[u8; 32]) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn delete_sessions_of(
        &mut self,
        account_id: u64,
        keep: Option<&[u8; 32]>,
    ) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn put_notification(
        &mut self,
        account_id: u64,
        row: &NotificationRow,
    ) -> Result<(), StoreError> {
        unimplemented!()
    }
}

impl AccountsStore for PgStore {
    fn purge_expired_sessions(&self, now: Timestamp) -> Result<usize, StoreError> {
        unimplemented!()
    }
}
