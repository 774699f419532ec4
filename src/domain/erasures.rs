//! Erasure: an owner's request to remove every record of one environment whose payload text
//! contains a query (a person's e-mail address, say: GDPR Art. 17) from every copy intake
//! keeps of it.
//!
//! [`start`] (owner only) finds the matches by the rule of search (`domain::search`: the
//! payload text contains `q`, case-insensitive) in a window of creation times that ends when
//! the erasure is asked for at the latest, so records sent later are never touched. A dry run
//! only counts them. A real one stores an [`ErasureRow`] (the query sealed, only while it runs)
//! with its audit entry, and [`run_schedule`] carries it out in the background, step by step,
//! each step resumed after a restart:
//!
//! 1. **Counting** the matches (`matched`).
//! 2. **Erasing** them, newest first, [`STEP_RECORDS`] per commit: each commit
//!    (`RecordWrite::Erase`) removes the records, empties their webhook deliveries' bodies and
//!    their attempts' response bodies (the rows stay, marked `erased`, so the log's counts stay
//!    true; a pending one is given up), logs each removal in the change log the search index
//!    follows, and, with `notify`, makes the usual `record.deleted` event and webhooks; it
//!    counts them on the erasure's row (`erased`) and moves its resume point, in the same
//!    commit. Its after-commit effects drop the change streams' shared frames of the
//!    partition (`Streams::erased`). Change-stream events name their record and read its
//!    payload when read, so an erased record's events carry none.
//! 3. **Sealing**, where a delete alone leaves bytes behind: a payload dictionary whose sample
//!    may have held an erased record is patched, the bytes only erased records had zeroed and
//!    the few records that read differently without them stored anew
//!    (`PayloadDictionaries::take_out_erased`).
//! 4. **Scrubbing**: the store overwrites the pages its deletes freed
//!    (`Store::scrub_free_space`; on PostgreSQL that is the database's own `VACUUM`, see the
//!    docs), again at each turn while an open read (a long export) keeps some of them.
//!
//! 5. Then the search index merges away the segments holding the erased records' postings
//!    (`SearchIndex::expunge_deleted`), after the store's work rather than beside it.
//!
//! Then the erasure is `finished`: the sealed query is dropped (only its keyed hash stays,
//! here and in the audit log, never the query itself) and a second audit entry records the
//! counts. Idempotency-Key claims keep only a keyed hash of what was sent and the record ids,
//! so a retry within their window answers the erased record's id and never stores it again.
//! Backups taken before an erasure still hold its records: `intake restore` lists the
//! erasures made after the backup it restores.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::core::background::run_nicer;
use crate::core::clock::Timestamp;
use crate::core::crypto::{Sealer, hex};
use crate::core::ids::RecordId;
use crate::core::ticker::Ticker;
use crate::domain::audit;
use crate::domain::endpoints::Endpoints;
use crate::domain::error::{Error, Missing, Result};
use crate::domain::handles::Handles;
use crate::domain::search::{self, SearchIndex};
use crate::domain::webhooks::deliveries::Hooks;
use crate::store::compression::TakenOut;
use crate::store::records::{BatchWrite, RecordWrite};
use crate::store::{
    AccountRow, Environment, ErasureRow, ErasureState, ErasureStep, IdKind, Partition, Store,
    time_key,
};

/// How often (real time) the schedule looks for running erasures.
pub const SCHEDULE_TICK: Duration = Duration::from_secs(1);
/// Records removed per commit: small enough that the ingest writer, which shares the store's
/// write lock, never waits long behind one; after each the erasure pauses twice as long
/// (`core::background::yield_write_lock`).
pub const STEP_RECORDS: usize = 100;
/// Matches read per search while counting.
const COUNT_PAGE: usize = 1_000;
/// Ids a dry run shows.
pub const DRY_RUN_NEWEST: usize = 10;
/// What separates the keyed hash of a query from the keyed hashes of other uses.
const QUERY_HASH_LABEL: &str = "erasure query";
/// How long the sealing step waits for the search index to apply the erasure's deletes.
const EXPUNGE_TIMEOUT: Duration = Duration::from_secs(120);
/// The nice value the erasure's thread runs at (the search indexer's default too).
const ERASURE_NICE: i32 = 10;

/// The body of `POST …/endpoints/{slug}/erasures`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErasureRequest {
    pub environment: String,
    pub q: String,
    #[serde(default)]
    pub start: Option<String>,
    #[serde(default)]
    pub end: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
    #[serde(default = "notify_by_default")]
    pub notify: bool,
    /// The count a dry run answered (the dashboard's typed confirmation): the erasure starts
    /// only while exactly that many records match, else 409 `conflict` and nothing is erased.
    #[serde(default)]
    pub expected: Option<u64>,
}

fn notify_by_default() -> bool {
    true
}

/// What a dry run answers.
#[derive(Debug, Serialize)]
pub struct DryRun {
    pub matched: u64,
    /// The newest matches' record ids, newest first (at most [`DRY_RUN_NEWEST`]).
    pub newest: Vec<String>,
}

/// An erasure as its owner sees it.
#[derive(Debug, Serialize)]
pub struct ErasureView {
    pub id: String,
    pub environment: Environment,
    pub state: ErasureState,
    pub matched: u64,
    pub erased: u64,
    pub notify: bool,
    /// The window it covers (RFC 3339; `start` is `null` when it reaches back to the first
    /// record).
    pub start: Option<String>,
    pub end: String,
    pub created_at: String,
    pub finished_at: Option<String>,
    pub error: Option<String>,
}

impl ErasureView {
    fn of(row: &ErasureRow) -> ErasureView {
        let time_of = |id: u128| Timestamp(i64::try_from(id >> 64).unwrap_or(i64::MAX));
        ErasureView {
            id: erasure_id(row.id),
            environment: row.partition.environment(),
            state: row.state,
            matched: row.matched,
            erased: row.erased,
            notify: row.notify,
            start: (row.lower > 0).then(|| time_of(row.lower).to_rfc3339()),
            end: time_of(row.upper).to_rfc3339(),
            created_at: row.created_at.to_rfc3339(),
            finished_at: row.finished_at.map(Timestamp::to_rfc3339),
            error: row.error.clone(),
        }
    }
}

/// What [`start`] did.
pub enum Started {
    DryRun(DryRun),
    Running(ErasureView),
}

/// The public id of erasure `id`.
pub fn erasure_id(id: u64) -> String {
    format!("era_{id}")
}

/// The erasure `text` names (`era_…`), if it names one.
pub fn parse_erasure_id(text: &str) -> Option<u64> {
    text.strip_prefix("era_")?.parse().ok()
}

/// Counts, or starts erasing, the records of endpoint `slug` that `request` matches (its
/// owner only).
pub fn start(
    endpoints: &Endpoints,
    index: Option<&dyn SearchIndex>,
    owner: &AccountRow,
    slug: &str,
    request: ErasureRequest,
) -> Result<Started> {
    let endpoint = endpoints.owned_row(owner, slug)?;
    let environment =
        Environment::parse(&request.environment).ok_or_else(|| Error::InvalidParameter {
            name: "environment",
            reason: "it must be sandbox or production".into(),
        })?;
    let now = endpoints.handles.now();
    let mut params = HashMap::from([("q".to_string(), request.q)]);
    params.extend(request.start.map(|start| ("start".to_string(), start)));
    params.extend(request.end.map(|end| ("end".to_string(), end)));
    let q = search::query_param(&params)?.ok_or_else(|| Error::InvalidParameter {
        name: "q",
        reason: "it is required".into(),
    })?;
    let (lower, upper) = search::window_ids(&params, None, Some(now))?;
    // Never later than now: a record sent after the request is not the request's.
    let upper = upper.min((u128::from(time_key(now)) << 64) | u128::from(u64::MAX));
    let partition = Partition::new(endpoint.id, environment);
    let store = endpoints.handles.store.as_ref();
    if request.dry_run {
        let mut newest = Vec::new();
        let matched = count_matches(store, index, partition, &q, (lower, upper), |page| {
            newest.extend(
                page.ids()
                    .take(DRY_RUN_NEWEST - newest.len().min(DRY_RUN_NEWEST))
                    .map(|id| RecordId(id).to_string()),
            );
        })?;
        return Ok(Started::DryRun(DryRun { matched, newest }));
    }
    if let Some(expected) = request.expected {
        let matched = count_matches(store, index, partition, &q, (lower, upper), |_| {})?;
        if matched != expected {
            return Err(Error::Conflict(format!(
                "{matched} records match now, not the {expected} expected. Nothing was erased."
            )));
        }
    }
    let sealer = &endpoints.sealer;
    let row = endpoints.handles.write(|tx| {
        let row = ErasureRow {
            id: tx.next_id(IdKind::Erasure)?,
            partition,
            query_hash: query_hash(sealer, &q),
            query_sealed: Some(sealer.seal(q.as_bytes())),
            lower,
            upper,
            notify: request.notify,
            state: ErasureState::Running,
            step: ErasureStep::Counting,
            matched: 0,
            erased: 0,
            erased_ids: None,
            resume_below: upper.saturating_add(1),
            created_at: now,
            finished_at: None,
            created_by: owner.id,
            error: None,
        };
        tx.put_erasure(&row)?;
        audit::record(
            tx,
            now,
            endpoint.id,
            owner,
            "erasure.started",
            audit_details(&row),
        )?;
        Ok(row)
    })?;
    Ok(Started::Running(ErasureView::of(&row)))
}

/// The erasure `id` of endpoint `slug` (its owner only).
pub fn get(endpoints: &Endpoints, owner: &AccountRow, slug: &str, id: &str) -> Result<ErasureView> {
    let endpoint = endpoints.owned_row(owner, slug)?;
    let row = parse_erasure_id(id)
        .map(|id| endpoints.handles.store.read()?.erasure(id))
        .transpose()?
        .flatten()
        .filter(|row| row.partition.endpoint() == endpoint.id)
        .ok_or(Error::NotFound(Missing::Erasure))?;
    Ok(ErasureView::of(&row))
}

/// The erasures of endpoint `slug`, newest first (its owner only).
pub fn list(endpoints: &Endpoints, owner: &AccountRow, slug: &str) -> Result<Vec<ErasureView>> {
    let endpoint = endpoints.owned_row(owner, slug)?;
    let rows = endpoints
        .handles
        .store
        .read()?
        .endpoint_erasures(endpoint.id)?;
    Ok(rows.iter().map(ErasureView::of).collect())
}

/// The keyed hash of a folded query: it tells whether two erasures were for the same text, and
/// cannot be reversed without the data dir's key.
fn query_hash(sealer: &Sealer, folded_q: &str) -> String {
    hex(&sealer.keyed_hash(QUERY_HASH_LABEL, folded_q.as_bytes()))
}

/// What the audit log keeps of an erasure: never the query.
fn audit_details(row: &ErasureRow) -> serde_json::Value {
    let view = ErasureView::of(row);
    serde_json::json!({
        "id": view.id,
        "environment": view.environment,
        "start": view.start,
        "end": view.end,
        "query_hash": row.query_hash,
        "notify": row.notify,
        "matched": row.matched,
        "erased": row.erased,
    })
}

/// Counts the matches of `q` in `window`, showing each page to `visit`.
fn count_matches(
    store: &dyn Store,
    index: Option<&dyn SearchIndex>,
    partition: Partition,
    q: &str,
    (lower, mut upper): (u128, u128),
    mut visit: impl FnMut(&search::MatchPage),
) -> Result<u64> {
    let mut matched = 0;
    loop {
        let page = search::matches(store, index, partition, q, (lower, upper), COUNT_PAGE)?;
        matched += page.ids().count() as u64;
        visit(&page);
        match page.next_below {
            Some(below) if below > lower => upper = below - 1,
            _ => return Ok(matched),
        }
    }
}

/// What the background work needs.
#[derive(Clone)]
pub struct ErasureWork {
    pub handles: Handles,
    pub sealer: Sealer,
    pub index: Option<Arc<dyn SearchIndex>>,
    /// How soon every other node of a shared store drops its copies of erased records held
    /// in memory (`workers::cluster`); zero on a store of one node.
    pub nodes_follow_within: Duration,
}

/// Carries out every running erasure, looked for every [`SCHEDULE_TICK`] (on a shared store,
/// one node at a time, `domain::jobs`).
pub async fn run_schedule(work: ErasureWork, mut ticker: Ticker) {
    while ticker.tick().await {
        let running = match work
            .handles
            .store
            .read()
            .and_then(|tx| tx.running_erasures())
        {
            Ok(rows) => rows,
            Err(err) => {
                log::warn!("cannot look for running erasures: {err}");
                continue;
            }
        };
        if running.is_empty() {
            continue;
        }
        let (job, now) = (work.clone(), work.handles.now());
        // On a thread of its own at a lower priority: an erasure's work (compressing every
        // record anew, matching payloads) yields the CPU to requests.
        let turn = tokio::task::spawn_blocking(move || {
            run_nicer("erasure", ERASURE_NICE, || {
                let store = job.handles.store.clone();
                crate::domain::jobs::run(store.as_ref(), "erasure", now, SCHEDULE_TICK, || {
                    for row in running {
                        let id = row.id;
                        if let Err(err) = advance(&job, row) {
                            log::error!("erasure {}: {err}", erasure_id(id));
                        }
                    }
                })
            })
        })
        .await;
        match turn {
            Ok(Ok(_)) => {}
            Ok(Err(err)) => log::error!("erasure task failed: {err}"),
            Err(err) => log::error!("erasure task failed: {err}"),
        }
    }
}

/// Takes erasure `row` through its remaining steps. A store error leaves it where it got to,
/// for the next turn; what cannot succeed by waiting fails it.
pub fn advance(work: &ErasureWork, mut row: ErasureRow) -> Result<()> {
    let store = work.handles.store.as_ref();
    // The endpoint is checked at every turn: one deleted meanwhile is purged whole anyway.
    let endpoint = match store.read()?.endpoint(row.partition.endpoint())? {
        Some(endpoint) if endpoint.deleted_at.is_none() => endpoint,
        _ => {
            return finish(
                work,
                row,
                Some("the endpoint was deleted: its purge removes every record".into()),
            );
        }
    };
    let q = match row
        .query_sealed
        .as_deref()
        .map(|sealed| work.sealer.open_string(sealed))
    {
        Some(Ok(q)) => q,
        _ => return finish(work, row, Some("its query cannot be opened".into())),
    };
    let index = work.index.as_deref();
    // Each step's time goes to the log: what an erasure of many records spends, where.
    let started = Instant::now();
    if row.step == ErasureStep::Counting {
        let window = (row.lower, row.upper);
        row.matched = count_matches(store, index, row.partition, &q, window, |_| {})?;
        row.step = ErasureStep::Erasing;
        row = save(work, row)?;
        log::info!(
            "erasure {}: {} matching records counted in {}",
            erasure_id(row.id),
            row.matched,
            took(started)
        );
    }
    let started = Instant::now();
    while row.step == ErasureStep::Erasing {
        if row.resume_below <= row.lower {
            log::info!(
                "erasure {}: {} records erased in {}",
                erasure_id(row.id),
                row.erased,
                took(started)
            );
            // The other nodes of a shared store drop their copies held in memory at their
            // heartbeat, which runs in real time: the erasure goes on once each has had one.
            std::thread::sleep(work.nodes_follow_within);
            row.step = ErasureStep::Sealing;
            row = save(work, row)?;
            break;
        }
        let window = (row.lower, row.resume_below - 1);
        let page = search::matches(store, index, row.partition, &q, window, STEP_RECORDS)?;
        let at = work.handles.now();
        let write = RecordWrite::Erase {
            partition: row.partition,
            ids: page.ids().map(RecordId).collect(),
            at,
            notify: row.notify,
            erasure: row.id,
            resume_below: page.next_below.unwrap_or(row.lower),
        };
        let hooks = Hooks {
            endpoint_slug: endpoint.slug.clone(),
            environment: row.partition.environment(),
            at,
            caller: None,
            trace: None,
        };
        let committing = Instant::now();
        let applied = store.apply_batch(&[BatchWrite {
            write: &write,
            webhooks: &hooks,
        }])?;
        work.handles.committed(applied.effects);
        crate::core::background::yield_write_lock(committing.elapsed());
        row = store
            .read()?
            .erasure(row.id)?
            .ok_or_else(|| Error::Internal("an erasure vanished while it ran".into()))?;
    }
    if matches!(row.step, ErasureStep::Sealing | ErasureStep::Scrubbing) {
        return seal_and_scrub(work, row, index, &q);
    }
    Ok(())
}

/// The last steps, where a delete alone leaves bytes behind: patching a payload dictionary
/// that may hold pieces of an erased record, overwriting the free pages (which the patch
/// frees more of), then the search index's merge. The merge runs after the store's work, not
/// beside it: each alone costs the requests little, the two together a lot (beside the merge,
/// the patch and the scrub raised the ingest p99 2.1-2.6 times; one after the other, 1.4-1.6
/// times, for an erasure a few seconds longer: docs/src/benchmarks.md, "Erasure"). Neither
/// frees what the other overwrites. A merge with nothing left to merge (at a later turn) is
/// quick.
fn seal_and_scrub(
    work: &ErasureWork,
    mut row: ErasureRow,
    index: Option<&dyn SearchIndex>,
    q: &str,
) -> Result<()> {
    let store = work.handles.store.as_ref();
    let id = erasure_id(row.id);
    seal_dictionaries(work, &mut row, q)?;
    let started = Instant::now();
    let scrub = store.scrub_free_space()?;
    if let Some(scrub) = &scrub {
        log::info!(
            "erasure {id}: {} MiB of the store file's free pages overwritten in {} \
             transactions, {}",
            scrub.bytes_overwritten >> 20,
            scrub.transactions,
            took(started)
        );
    }
    if let Some(index) = index {
        let started = Instant::now();
        index.expunge_deleted(EXPUNGE_TIMEOUT)?;
        log::info!(
            "erasure {id}: search index segments merged without deleted documents in {}",
            took(started)
        );
    }
    if let Some(scrub) = scrub
        && !scrub.complete()
    {
        // Pages an open read (a long export) still keeps, or that came free while the scrub
        // ended: the next turn tries again.
        log::info!(
            "erasure {id}: {} free pages of the store file not overwritten yet{}; the next turn \
             tries again",
            scrub.unreached_pages,
            if scrub.held_by_snapshot {
                " (an open read keeps some)"
            } else {
                ""
            }
        );
        return Ok(());
    }
    finish(work, row, None)
}

/// The Sealing step: what only erased records held is taken out of the payload dictionaries
/// whose sample may have held one of them. Then the erasure is at Scrubbing.
fn seal_dictionaries(work: &ErasureWork, row: &mut ErasureRow, q: &str) -> Result<()> {
    if row.step != ErasureStep::Sealing {
        return Ok(());
    }
    let store = work.handles.store.as_ref();
    if let (Some(dictionaries), Some(ids)) = (store.payload_dictionaries(), row.erased_ids) {
        let started = Instant::now();
        let id = erasure_id(row.id);
        match dictionaries.take_out_erased(row.partition, ids, q, work.handles.now())? {
            TakenOut::Nothing => {}
            TakenOut::Patched {
                dictionaries,
                bytes_zeroed,
                records,
            } => log::info!(
                "erasure {id}: {dictionaries} payload dictionaries patched ({bytes_zeroed} bytes \
                 zeroed, {records} records stored anew) in {}",
                took(started)
            ),
            TakenOut::Replaced(replaced) => log::info!(
                "erasure {id}: payload dictionaries replaced ({} records stored anew, {} \
                 removed) in {}",
                replaced.records,
                replaced.dictionaries_removed,
                took(started)
            ),
        }
    }
    row.step = ErasureStep::Scrubbing;
    *row = save(work, row.clone())?;
    Ok(())
}

/// The time since `started`, for the log of an erasure's steps.
fn took(started: Instant) -> String {
    format!("{:.1} s", started.elapsed().as_secs_f64())
}

/// Stores `row` as it is now.
fn save(work: &ErasureWork, row: ErasureRow) -> Result<ErasureRow> {
    work.handles.write(|tx| {
        tx.put_erasure(&row)?;
        Ok(())
    })?;
    Ok(row)
}

/// Ends erasure `row`: finished, or failed with `error`. Its sealed query goes; the audit log
/// records the end with the counts.
fn finish(work: &ErasureWork, mut row: ErasureRow, error: Option<String>) -> Result<()> {
    let now = work.handles.now();
    row.state = match error {
        None => ErasureState::Finished,
        Some(_) => ErasureState::Failed,
    };
    row.step = ErasureStep::Done;
    row.error = error;
    row.finished_at = Some(now);
    row.query_sealed = None;
    work.handles.write(|tx| {
        tx.put_erasure(&row)?;
        let actor = tx.account(row.created_by)?;
        if let Some(actor) = actor {
            let action = match row.state {
                ErasureState::Failed => "erasure.failed",
                _ => "erasure.finished",
            };
            audit::record(
                tx,
                now,
                row.partition.endpoint(),
                &actor,
                action,
                audit_details(&row),
            )?;
        }
        Ok::<_, Error>(())
    })?;
    log::info!(
        "erasure {}: {} of {} matching records erased",
        erasure_id(row.id),
        row.erased,
        row.matched
    );
    Ok(())
}
