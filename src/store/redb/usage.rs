//! [`UsageStore`] on redb.

use super::RedbStore;
use crate::store::usage::UsageStore;

impl UsageStore for RedbStore {}
