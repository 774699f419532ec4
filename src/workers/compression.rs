//! Trains the store's payload dictionary when it is due (`store::compression`): checked every
//! few seconds, trained on a blocking thread so neither the write path nor the runtime waits.

use std::time::Duration;

use crate::core::ticker::Ticker;
use crate::domain::handles::Handles;

/// How often the store is asked whether a dictionary is due (counters only).
pub const CHECK_EVERY: Duration = Duration::from_secs(1);
/// Checks skipped after a training failed, so a failure is logged every 10 minutes, not every
/// second.
const CHECKS_AFTER_FAILURE: u32 = 600;

/// Runs until `ticker` stops; does nothing for a store that trains no dictionaries.
pub async fn run(handles: Handles, mut ticker: Ticker) {
    let store = handles.store.clone();
    if store.payload_dictionaries().is_none() {
        return;
    }
    let mut skip = 0;
    while ticker.tick().await {
        if skip > 0 {
            skip -= 1;
            continue;
        }
        if !store
            .payload_dictionaries()
            .is_some_and(|dictionaries| dictionaries.dictionary_due())
        {
            continue;
        }
        let store = store.clone();
        let now = handles.now();
        let trained = tokio::task::spawn_blocking(move || {
            store
                .payload_dictionaries()
                .map(|dictionaries| dictionaries.train_dictionary(now))
        })
        .await;
        match trained {
            Ok(Some(Ok(Some(d)))) => log::info!(
                "payload dictionary {} ({} bytes) trained on {} records ({} bytes): it stores \
                 them in {:.0} % of their size",
                d.id,
                d.bytes,
                d.sample_records,
                d.sample_bytes,
                d.sample_share * 100.0
            ),
            Ok(Some(Ok(None)) | None) => {}
            Ok(Some(Err(err))) => {
                log::error!(
                    "training a payload dictionary failed (tried again in 10 minutes): {err}"
                );
                skip = CHECKS_AFTER_FAILURE;
            }
            Err(err) => {
                log::error!("the payload dictionary task failed: {err}");
                skip = CHECKS_AFTER_FAILURE;
            }
        }
    }
}
