//! [`MailRead`] and [`MailWrite`] on redb.

use super::tx::{RedbWrite, Tables};
use super::{OUTBOX, to_json};
use crate::store::mail::{MailRead, MailWrite};
use crate::store::{MailRow, StoreError};

impl<T: Tables> MailRead for T {}

impl MailWrite for RedbWrite<'_> {
    fn insert_mail(&mut self, row: &MailRow) -> Result<(), StoreError> {
        self.table(OUTBOX)?
            .insert(row.id, to_json(row)?.as_slice())?;
        self.effects.mail_queued = true;
        Ok(())
    }
}

impl crate::store::mail::MailStore for super::RedbStore {}
