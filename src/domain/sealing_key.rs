//! The key-encryption key (`master.key` in each data dir) and the store: every node of a store
//! must seal with the same key, or secrets one node sealed could not be opened by another. The
//! first node to open a store seals a known value into it; every node checks that its own key
//! opens that value before it writes anything.

use crate::core::crypto::Sealer;
use crate::store::{Store, StoreError};

/// The name of the shared value sealed with the store's key.
const KEY_CHECK: &str = "master_key_check";

/// Whether `sealer`'s key is the key of `store` (becoming it when the store has none yet).
pub fn is_the_store_key(store: &dyn Store, sealer: &Sealer) -> Result<bool, StoreError> {
    let check = store.shared_value(KEY_CHECK, &sealer.seal(KEY_CHECK.as_bytes()))?;
    Ok(sealer.open(&check).is_ok())
}
