//! [`RecordsRead`] and [`RecordsStore`] on redb.

use super::RedbStore;
use super::tx::Tables;
use crate::store::records::{RecordsRead, RecordsStore};

impl<T: Tables> RecordsRead for T {}

impl RecordsStore for RedbStore {}
