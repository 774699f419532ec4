//! mail on PostgreSQL: unimplemented stubs, replaced by the real implementation.

#![allow(unused_variables, unused_imports)]

use crate::core::clock::Timestamp;
use crate::store::mail::*;
use crate::store::postgres::{PgStore, PgTx};
use crate::store::*;

impl MailRead for PgTx<'_> {
    fn mail(&self, id: u64) -> Result<Option<MailRow>, StoreError> {
        unimplemented!()
    }
    fn mail_page(&self, before: Option<u64>, limit: usize) -> Result<Vec<MailRow>, StoreError> {
        unimplemented!()
    }
    fn queued_mail(&self, after: u64, limit: usize) -> Result<Vec<MailRow>, StoreError> {
        unimplemented!()
    }
}

impl MailWrite for PgTx<'_> {
    fn insert_mail(&mut self, row: &MailRow) -> Result<(), StoreError> {
        unimplemented!()
    }
    fn put_mail(&mut self, row: &MailRow) -> Result<(), StoreError> {
        unimplemented!()
    }
}

impl MailStore for PgStore {
    fn purge_mail(&self, cutoff: Timestamp) -> Result<usize, StoreError> {
        unimplemented!()
    }
}
