//! `intake migrate --from-redb DATA_DIR --to URL`: copies a single-node install into an empty
//! PostgreSQL database (docs/src/scale-out.md). The source is read from one snapshot and left
//! untouched; the copy goes in batches of durable transactions, and is verified at the end by
//! comparing what the source handed over with what the database holds, kind by kind.

use crate::core::crypto::Sealer;
use crate::domain::sealing_key;
use crate::store::transfer::{Counts, Export, Item, Kind};
use crate::store::{Store, StoreError};

/// Rows written per transaction.
const BATCH: usize = 1_000;

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the destination store cannot take a copy (only PostgreSQL can)")]
    NotImportable,
    #[error(
        "the destination database already holds intake data: a copy goes only into an empty \
         database"
    )]
    NotEmpty,
    #[error("the destination's secrets are sealed with another master.key")]
    OtherKey,
    #[error("the copy does not match the source: {0}")]
    Mismatch(String),
}

/// Copies everything `from` holds into `to`, whose secrets are then sealed with `sealer`'s key
/// (the source's); `progress` is told the counts so far after each batch. Returns the counts
/// copied.
pub fn copy(
    from: &dyn Export,
    to: &dyn Store,
    sealer: &Sealer,
    progress: &mut dyn FnMut(&Counts),
) -> Result<Counts, MigrateError> {
    let import = to.import().ok_or(MigrateError::NotImportable)?;
    if !import.is_empty()? {
        return Err(MigrateError::NotEmpty);
    }
    // Sealed secrets are copied as they are: the database takes the source's key.
    if !sealing_key::is_the_store_key(to, sealer)? {
        return Err(MigrateError::OtherKey);
    }
    let mut copied = Counts::new();
    let mut batch: Vec<Item> = Vec::with_capacity(BATCH);
    from.export(&mut |item| {
        if let Some(kind) = item.kind() {
            *copied.entry(kind).or_default() += 1;
        }
        batch.push(item);
        if batch.len() == BATCH {
            import.import(&batch)?;
            batch.clear();
            progress(&copied);
        }
        Ok(())
    })?;
    import.import(&batch)?;
    progress(&copied);
    let held = import.counts()?;
    let mismatches: Vec<String> = held
        .iter()
        .filter_map(|(kind, held)| {
            let sent = copied.get(kind).copied().unwrap_or(0);
            (sent != *held).then(|| format!("{} {sent} copied, {held} stored", kind.name()))
        })
        .collect();
    if !mismatches.is_empty() {
        return Err(MigrateError::Mismatch(mismatches.join("; ")));
    }
    Ok(copied)
}

/// The counts as lines for people: `records: 1000`.
pub fn describe(counts: &Counts) -> Vec<String> {
    counts
        .iter()
        .map(|(kind, n): (&Kind, &u64)| format!("{}: {n}", kind.name()))
        .collect()
}
