//! [`WebhooksRead`], [`WebhooksWrite`] and [`WebhooksStore`] on redb.

use super::RedbStore;
use super::tx::{RedbWrite, Tables};
use crate::store::webhooks::{WebhooksRead, WebhooksStore, WebhooksWrite};

impl<T: Tables> WebhooksRead for T {}

impl WebhooksWrite for RedbWrite<'_> {}

impl WebhooksStore for RedbStore {}
