//! [`ChangesStore`] on redb.

use super::RedbStore;
use crate::store::changes::ChangesStore;

impl ChangesStore for RedbStore {}
