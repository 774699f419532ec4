//! The scrub of a store file's free pages while the server runs
//! ([`Store::scrub_free_space`](crate::store::Store::scrub_free_space)).
//!
//! redb copies a page to change it and frees the old one, which keeps its bytes until the page
//! is used again: a deleted record stays in the file, with every older copy of the pages that
//! held it. redb writes a page it hands out whole (zeros after its data), so the scrub has it
//! hand out every free page, to filler values in a table of its own, and deletes them after.
//!
//! What it relies on, read in redb 4.5 (`tree_store/page_store`, `transactions.rs`):
//! - A page freed by a commit is handed out again once no read snapshot older than that commit
//!   is open (a durable commit frees what the snapshots no longer need, and then its own).
//! - A write takes free pages before it grows the file, in a fixed order: the lowest region
//!   that has any, in it the smallest free block (a power of two of pages, lowest first among
//!   equals), a block from its first page up.
//! - A page is written when a commit flushes it: one a transaction takes and frees again
//!   before that (a B-tree branch it replaced) keeps the bytes it had.
//! - Growing doubles the file (up to regions of 4 GiB), and an aborted transaction gives back
//!   its pages and that growth.
//!
//! So no transaction of the scrub grows the file but the last of a file with few free pages
//! (below): it looks at the file's length after each value and aborts when it grew, and
//! before committing it shows [`ROOM`] pages free for the commit's own pages by writing as
//! many values and removing them.
//!
//! The hard part is the end: every commit takes a few free pages, and a page still free after
//! the last commit has not been overwritten. Those last pages must be ones the scrub wrote:
//! 1. Bulk: [`BATCH`] filler values a transaction while [`HEADROOM`] pages stay free for the
//!    other writers (shown the same way), until no more are.
//! 2. End, with no other write in between (the scrub holds the store's turn to begin one):
//!    fill all but the last [`TAIL`] free pages, and give back [`BESIDE`] filler values for
//!    the commits to come (clean, they may be taken anywhere). What is left free are the
//!    largest free blocks: write a reserve, a value in each free block of the largest order
//!    there are enough of, and delete it again. Its blocks are now the only free ones that
//!    large, and clean, so they are taken last. The last fill copies filler values (each copy
//!    takes a page and frees the old one only once committed, so every page it takes is
//!    written) until all but [`END_ROOM`] of the reserve's pages are taken, and its commit
//!    takes its pages from there. Every page that was free before has been written.
//!    When the free pages hold no reserve (a small file, one just compacted), the last
//!    commits may grow the file instead ([`Scrub::finish_small`]): enough filler values are
//!    written, then copies of them take every free page and the commit's own pages come from
//!    the growth, which later commits give back (redb trims a free end).
//! 3. Delete the filler, [`CLEAR_BATCH`] values a transaction (the first under the same turn,
//!    so the other writers find room again at once).
//!
//! A read snapshot keeps the pages freed after it began, the scrub's filler among them once
//! deleted: the scrub does not begin while a long one (an export, a backup) is open, and one
//! older than the end keeps the freed reserve, which the end sees and reports.
//!
//! It reaches free pages only. Bytes a transaction removed from a page still in use (a second
//! delete in a leaf it already copied moves the rest over them in place) stay in that page's
//! unused end until it is built anew: for an erasure's keys, that is done first
//! (`erased_leaves`).

use std::fs::File;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use redb::{
    ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition, TableError,
    WriteTransaction,
};

use super::{RedbStore, io_error};
use crate::store::{ScrubReport, StoreError};

/// Bytes of a page a value leaves to its key and its leaf's header: a value of 2^order pages
/// less this takes a block of that order, written whole.
const VALUE_SPARE: usize = 64;

/// The filler, keyed in the order written. It exists while a scrub runs, or after one was
/// interrupted until the next: not a table of the store, so no backup or compaction keeps it.
pub(super) const FILLER: TableDefinition<u64, &[u8]> = TableDefinition::new("scrub_filler");

/// redb's page size, which intake never changes.
const PAGE: u64 = 4096;
/// Filler values of a bulk transaction: 256 KiB written, so that one holds the write lock for
/// a few milliseconds (an ingest batch waits behind it); after each the scrub pauses twice as
/// long (`core::background::yield_write_lock`).
const BATCH: u64 = 64;
/// Free pages the bulk leaves to the other writers (512 KiB): several times what an ingest
/// batch takes between two bulk transactions, and what the end takes under the writers' turn.
/// Each bulk transaction shows them (a write and a removal each), which was most of its time:
/// measured with the test `measure_a_scrub_of_100_mb_of_free_pages`, showing 512 took 5-8 ms,
/// 128 take 1.1-2, its own 64 values 0.4-0.6 and its commit 1-1.5 (docs/src/benchmarks.md,
/// "Erasure").
const HEADROOM: u64 = 128;
/// Free pages shown before each commit: more than a commit takes for itself.
const ROOM: u64 = 16;
/// Free pages a commit that changes nothing is given: what it frees needs a few.
const NUDGE_ROOM: u64 = ROOM / 2;
/// Free pages the end keeps for the reserve.
const TAIL: u64 = 96;
/// The largest blocks (2^order pages) a reserve is made of.
const RESERVE_ORDER: u32 = 6;
/// Free pages kept besides the reserve, for the commits up to the last.
const BESIDE: u64 = ROOM + 8;
/// The reserve's pages the end's last commit is left.
const END_ROOM: u64 = ROOM + 8;
/// Free pages new values before the copies leave: enough of the reserve's blocks for a piece
/// larger than [`END_ROOM`] to be taken last.
const RESERVE_LEFT: u64 = END_ROOM + 16;
/// Free pages up to which the end of a file with no reserve ([`Scrub::finish_small`]) takes
/// them all: as many as an end begins with. More come only from read snapshots that closed
/// meanwhile, and the end is tried again.
const SMALL_END: u64 = BATCH + HEADROOM + TAIL + SLACK;
/// Filler values the copies of that end take beyond the free pages: the commit's own pages.
const SMALL_MARGIN: u64 = ROOM;
/// Filler values deleted a transaction: like a bulk transaction, a few milliseconds of the
/// write lock, followed by a pause twice as long. (2,048 back to back held it for 10-20 ms each
/// while the filler of 150 MiB went, which showed in the ingest p99 of the scrub's last
/// second: docs/src/benchmarks.md, "Erasure".)
const CLEAR_BATCH: u64 = 256;
/// How far the pages freed with the reserve may miss its size (the commit's own come and go).
const SLACK: u64 = 16;
/// Ends tried when something changed on the way, this long apart.
const END_ATTEMPTS: u32 = 5;
const PAUSE: Duration = Duration::from_millis(50);
/// How often, and how long apart, the end looks again whether a read snapshot still keeps the
/// freed reserve: a request's snapshot closes soon.
const HOLD_CHECKS: u32 = 5;
const HOLD_PAUSE: Duration = Duration::from_millis(10);

impl RedbStore {
    /// Overwrites the free pages of the file (see the module's documentation).
    pub(super) fn scrub_free_pages(&self) -> Result<ScrubReport, StoreError> {
        // First the pages in use that may keep erased bytes are freed (`erased_leaves`).
        self.rebuild_erased_leaves()?;
        let mut scrub = Scrub::new(self)?;
        if scrub.long_read_open() {
            scrub.report.held_by_snapshot = true;
            return Ok(scrub.report);
        }
        // What read snapshots closed since kept is freed first, then an interrupted scrub's
        // filler goes, and with it the keys it used.
        scrub.nudge()?;
        if !scrub.clear()? {
            scrub.report.held_by_snapshot = true;
            return Ok(scrub.report);
        }
        let scrubbed = scrub.run();
        // The filler goes whatever happened: it holds the free space.
        let cleared = scrub.clear();
        scrubbed?;
        if !cleared? {
            log::warn!(
                "{}: a read snapshot keeps the pages of the scrub's filler deleted so far; the \
                 rest stays until the next scrub",
                self.file.display()
            );
        }
        Ok(scrub.report)
    }
}

/// A scrub under way.
struct Scrub<'s> {
    store: &'s RedbStore,
    /// The store's file, opened again to read its length: the scrub does after each value it
    /// writes, and `fstat` of an open file costs less than `stat` of its path.
    file: File,
    /// The key of the next filler value.
    next: u64,
    report: ScrubReport,
    /// A filler value: zeros.
    filler: Vec<u8>,
    /// The scrub holds the turn to begin writes (see [`Scrub::begin`]).
    holds_turn: bool,
}

/// One transaction of the scrub.
#[derive(Default)]
struct Step {
    /// Keys to remove first (the reserve's).
    remove: Range<u64>,
    /// The oldest filler values to copy (rewrite as they are): a copy takes a page, and
    /// frees the one it replaces only once committed.
    copies: u64,
    /// The values' size: a block of 2^order pages (filler: one page).
    order: u32,
    /// Values to write.
    values: u64,
    /// Free pages to show before committing.
    room: u64,
    /// Commits; otherwise only measures (a probe).
    commit: bool,
    /// The file may grow (the end of a file with few free pages, [`Scrub::finish_small`]).
    may_grow: bool,
}

/// How a transaction of the scrub ended.
enum Outcome {
    /// Committed, or (a probe) aborted with every value written.
    Done,
    /// The file would have grown: aborted, after this many values fit.
    Full { fitted: u64 },
}

/// The reserve the end writes: every free block of one order, each written whole.
struct Reserve {
    order: u32,
    /// Its keys.
    keys: Range<u64>,
    /// Free pages besides it once written.
    beside: u64,
}

impl Reserve {
    fn pages(&self) -> u64 {
        (self.keys.end - self.keys.start) << self.order
    }
}

/// How an end ([`Scrub::finish`]) went.
enum End {
    /// Every page that was free has been written.
    Done,
    /// More pages are free than an end takes: back to the bulk.
    MoreFree,
    /// The free pages hold no blocks for a reserve ([`Scrub::finish_small`] takes over).
    NoReserve,
    /// A read snapshot keeps the freed reserve.
    Held,
    /// Something changed on the way (pages a closed snapshot kept came free): again.
    Again,
}

/// How writing the reserve went.
enum Placed {
    Reserve(Reserve),
    /// The free pages hold no blocks for one, or leave too few pages besides.
    NoRoom,
    /// Something changed on the way.
    Again,
}

/// How a transaction deleting filler ended.
enum Cleared {
    More,
    /// The table is gone.
    Done,
    /// No room to commit: read snapshots keep the pages deleted before.
    NoRoom,
}

impl<'s> Scrub<'s> {
    fn new(store: &'s RedbStore) -> Result<Scrub<'s>, StoreError> {
        let file = File::open(&store.file).map_err(|err| io_error(&store.file, err))?;
        Ok(Scrub {
            store,
            file,
            next: 0,
            report: ScrubReport::default(),
            filler: vec![0; PAGE as usize - VALUE_SPARE],
            holds_turn: false,
        })
    }

    fn run(&mut self) -> Result<(), StoreError> {
        let mut attempts = 0;
        loop {
            let bulk = || Step {
                values: BATCH,
                room: HEADROOM,
                commit: true,
                ..Step::default()
            };
            while !self.long_read_open() {
                let started = Instant::now();
                if !matches!(self.step(bulk())?, Outcome::Done) {
                    break;
                }
                crate::core::background::yield_write_lock(started.elapsed());
            }
            let store = self.store;
            let turn = store.writers();
            self.holds_turn = true;
            let end = self.finish().and_then(|end| match end {
                End::NoReserve => self.finish_small(),
                end => Ok(end),
            });
            let end = end.and_then(|end| {
                // The end took the free space: some goes back before the other writers' turn.
                if !matches!(end, End::MoreFree) {
                    self.clear_batch()?;
                }
                Ok(end)
            });
            self.holds_turn = false;
            drop(turn);
            let end = end?;
            match end {
                End::Done => return Ok(()),
                End::MoreFree => continue,
                End::NoReserve => unreachable!("finish_small takes the end over"),
                End::Held => {
                    self.report.held_by_snapshot = true;
                    return Ok(());
                }
                End::Again => {}
            }
            attempts += 1;
            if attempts == END_ATTEMPTS {
                self.report.unreached_pages = TAIL;
                return Ok(());
            }
            thread::sleep(PAUSE);
        }
    }

    /// The end, with no other write in between (see the module's documentation).
    fn finish(&mut self) -> Result<End, StoreError> {
        // An export begun meanwhile would keep every page the end frees: the other writers
        // keep the room the bulk left them instead.
        if self.long_read_open() {
            return Ok(End::Held);
        }
        self.nudge()?;
        let Some(free) = self.probe(0, BATCH + HEADROOM + TAIL)? else {
            return Ok(End::MoreFree);
        };
        if free > TAIL && !self.commit(free - TAIL)? {
            return Ok(End::Again);
        }
        // The commits up to the last take their pages from the newest filler, given back:
        // clean, it may be taken before or after the rest.
        let given = self.step(Step {
            remove: self.next.saturating_sub(BESIDE)..self.next,
            room: ROOM,
            commit: true,
            ..Step::default()
        })?;
        if let Outcome::Full { .. } = given {
            return Ok(End::NoReserve);
        }
        let reserve = match self.place_reserve()? {
            Placed::Reserve(reserve) => reserve,
            Placed::NoRoom => {
                return Ok(End::NoReserve);
            }
            Placed::Again => return Ok(End::Again),
        };
        let freed = self.step(Step {
            remove: reserve.keys.clone(),
            room: ROOM,
            commit: true,
            ..Step::default()
        })?;
        if let Outcome::Full { .. } = freed {
            return Ok(End::Again);
        }
        let expected = reserve.beside + reserve.pages();
        let mut checks = 0;
        let free = loop {
            let Some(free) = self.probe(0, expected + SLACK)? else {
                return Ok(End::Again);
            };
            if free + SLACK >= expected {
                break free;
            }
            // A read snapshot older than the delete keeps the reserve's blocks, and every
            // page freed since it began.
            checks += 1;
            if checks == HOLD_CHECKS {
                return Ok(End::Held);
            }
            thread::sleep(HOLD_PAUSE);
            self.nudge()?;
        };
        // The reserve's blocks are the only free ones of their size, and so taken last.
        let blocks = reserve.keys.end - reserve.keys.start;
        if self.probe(reserve.order, blocks + 1)? != Some(blocks) {
            return Ok(End::Again);
        }
        // The last fill copies filler values rather than writing new ones: a transaction
        // writing new values frees again, never written, the branch pages it replaces, and the
        // last of those stays free; one copying values only takes pages, all written.
        let copies = |free: u64| free.saturating_sub(END_ROOM + free / 64 + 4);
        let have = self.filler_values()?;
        let mut free = free;
        if have < copies(free) {
            // Too few: new values first. They take the smaller pieces before the reserve's
            // blocks; what they free again is among the smallest pieces after, which the
            // copies take before the largest piece left of the reserve's blocks.
            // Each new one is a page fewer to copy as well as a value more to copy.
            let more = (copies(free) - have).div_ceil(2) + 8;
            if more + ROOM + RESERVE_LEFT > free {
                return Ok(End::NoReserve);
            }
            if !self.commit(more)? {
                return Ok(End::Again);
            }
            let Some(now) = self.probe(0, free + SLACK)? else {
                return Ok(End::Again);
            };
            free = now;
        }
        let copied = self.step(Step {
            copies: copies(free),
            commit: true,
            ..Step::default()
        })?;
        if let Outcome::Full { .. } = copied {
            return Ok(End::Again);
        }
        Ok(End::Done)
    }

    /// The end of a file whose free pages hold no reserve (a small one, or one just
    /// compacted): every free page is taken by the last commits, which may grow the file for
    /// their own pages (later commits give the free end back). First enough filler values
    /// exist (writing new ones may free again pages it took, never written, as any
    /// transaction writing new values does); then copies of them take every page free, and
    /// copies free nothing before their commit.
    fn finish_small(&mut self) -> Result<End, StoreError> {
        let before = self.file_len()?;
        self.nudge()?;
        let Some(free) = self.probe(0, SMALL_END)? else {
            return Ok(End::Again);
        };
        let copies = free + SMALL_MARGIN + free / 64;
        let have = self.filler_values()?;
        if have < copies {
            self.step(Step {
                values: copies - have,
                commit: true,
                may_grow: true,
                ..Step::default()
            })?;
        }
        let Some(free) = self.probe(0, SMALL_END)? else {
            return Ok(End::Again);
        };
        let copies = (free + SMALL_MARGIN + free / 64).min(self.filler_values()?);
        self.step(Step {
            copies,
            commit: true,
            may_grow: true,
            ..Step::default()
        })?;
        let grown = self.file_len()?.saturating_sub(before);
        if grown > 0 {
            log::info!(
                "{}: the scrub's last commits grew it by {grown} bytes, given back by later ones",
                self.store.file.display()
            );
        }
        Ok(End::Done)
    }

    /// Writes the reserve in the free pages the end kept: a value in every free block of the
    /// largest order up to [`RESERVE_ORDER`] they hold enough of with [`BESIDE`] pages left,
    /// and checks that no other block of that order is left free.
    fn place_reserve(&mut self) -> Result<Placed, StoreError> {
        for order in (1..=RESERVE_ORDER).rev() {
            let block = 1 << order;
            let Some(blocks) = self.probe(order, 2 * TAIL / block)? else {
                return Ok(Placed::Again);
            };
            if blocks * block < END_ROOM + 8 {
                continue;
            }
            let Some(free) = self.probe(0, 2 * TAIL)? else {
                return Ok(Placed::Again);
            };
            // Smaller blocks would leave fewer pages besides.
            if free < blocks * block + BESIDE {
                return Ok(Placed::NoRoom);
            }
            let keys = self.next..self.next + blocks;
            let placed = self.step(Step {
                order,
                values: blocks,
                room: ROOM,
                commit: true,
                ..Step::default()
            })?;
            if let Outcome::Full { .. } = placed {
                return Ok(Placed::Again);
            }
            if self.probe(order, 1)? != Some(0) {
                return Ok(Placed::Again);
            }
            let Some(beside) = self.probe(0, 2 * TAIL)? else {
                return Ok(Placed::Again);
            };
            return Ok(Placed::Reserve(Reserve {
                order,
                keys,
                beside,
            }));
        }
        Ok(Placed::NoRoom)
    }

    /// Writes `values` filler values and commits, showing [`ROOM`] pages free first; `false`
    /// when they did not fit.
    fn commit(&mut self, values: u64) -> Result<bool, StoreError> {
        let outcome = self.step(Step {
            values,
            room: ROOM,
            commit: true,
            ..Step::default()
        })?;
        Ok(matches!(outcome, Outcome::Done))
    }

    /// A commit that changes nothing: it frees what the read snapshots closed since kept.
    /// Skipped with fewer than [`NUDGE_ROOM`] free pages.
    fn nudge(&mut self) -> Result<(), StoreError> {
        if self.probe(0, NUDGE_ROOM)?.is_some() {
            return Ok(());
        }
        let txn = self.begin()?;
        let before = self.file_len()?;
        txn.commit()?;
        self.unchanged(before, "committing")?;
        self.report.transactions += 1;
        Ok(())
    }

    /// How many values of blocks of 2^`order` pages fit in the free pages, when fewer than
    /// `cap` do.
    fn probe(&mut self, order: u32, cap: u64) -> Result<Option<u64>, StoreError> {
        let outcome = self.step(Step {
            order,
            values: cap,
            ..Step::default()
        })?;
        Ok(match outcome {
            Outcome::Done => None,
            Outcome::Full { fitted } => Some(fitted),
        })
    }

    /// Runs one transaction of the scrub.
    fn step(&mut self, step: Step) -> Result<Outcome, StoreError> {
        let txn = self.begin()?;
        // Read in the transaction: another writer may grow the file before it begins.
        let before = self.file_len()?;
        let large;
        let value = match step.order {
            0 => self.filler.as_slice(),
            order => {
                large = vec![0; ((PAGE as usize) << order) - VALUE_SPARE];
                large.as_slice()
            }
        };
        let mut key = self.next;
        let full = 'fill: {
            let mut table = txn.open_table(FILLER)?;
            for reserve in step.remove.clone() {
                table.remove(reserve)?;
            }
            let filler_len = self.filler.len();
            let oldest = table
                .iter()?
                .filter_map(|entry| match entry {
                    Ok((key, value)) => {
                        (value.value().len() == filler_len).then(|| Ok(key.value()))
                    }
                    Err(err) => Some(Err(err)),
                })
                .take(usize::try_from(step.copies).unwrap_or(usize::MAX))
                .collect::<Result<Vec<u64>, _>>()?;
            if (oldest.len() as u64) < step.copies {
                break 'fill Some(0);
            }
            let grew =
                || -> Result<bool, StoreError> { Ok(!step.may_grow && self.file_len()? > before) };
            for (fitted, copied) in oldest.into_iter().enumerate() {
                table.insert(copied, self.filler.as_slice())?;
                if grew()? {
                    break 'fill Some(fitted as u64);
                }
            }
            for fitted in 0..step.values {
                table.insert(key, value)?;
                if grew()? {
                    break 'fill Some(fitted);
                }
                key += 1;
            }
            for shown in 0..step.room {
                table.insert(key + shown, self.filler.as_slice())?;
                if grew()? {
                    break 'fill Some(step.values + shown);
                }
            }
            for shown in 0..step.room {
                table.remove(key + shown)?;
            }
            None
        };
        if full.is_some() || !step.commit {
            txn.abort()?;
            self.unchanged(before, "giving back its pages")?;
            return Ok(match full {
                Some(fitted) => Outcome::Full { fitted },
                None => Outcome::Done,
            });
        }
        txn.commit()?;
        if !step.may_grow {
            self.unchanged(before, "committing")?;
        }
        self.report.transactions += 1;
        self.report.bytes_overwritten += (((key - self.next) << step.order) + step.copies) * PAGE;
        self.next = key;
        Ok(Outcome::Done)
    }

    /// Deletes the filler; `false` when read snapshots keep the pages it freed, so that
    /// deleting more would grow the file (the next scrub deletes the rest).
    fn clear(&mut self) -> Result<bool, StoreError> {
        loop {
            let started = Instant::now();
            match self.clear_batch()? {
                Cleared::More => crate::core::background::yield_write_lock(started.elapsed()),
                Cleared::Done => return Ok(true),
                Cleared::NoRoom => return Ok(false),
            }
        }
    }

    /// Deletes up to [`CLEAR_BATCH`] filler values, and the table once empty.
    fn clear_batch(&mut self) -> Result<Cleared, StoreError> {
        match self.store.db.begin_read()?.open_table(FILLER) {
            Err(TableError::TableDoesNotExist(_)) => return Ok(Cleared::Done),
            opened => opened?,
        };
        let txn = self.begin()?;
        let before = self.file_len()?;
        let cleared = 'clear: {
            let mut table = txn.open_table(FILLER)?;
            let above = table.last()?.map_or(0, |(key, _)| key.value() + 1);
            for shown in 0..ROOM {
                table.insert(above + shown, self.filler.as_slice())?;
                if self.file_len()? > before {
                    break 'clear Cleared::NoRoom;
                }
            }
            for shown in 0..ROOM {
                table.remove(above + shown)?;
            }
            for _ in 0..CLEAR_BATCH {
                if table.pop_first()?.is_none() {
                    break;
                }
            }
            match table.is_empty()? {
                true => Cleared::Done,
                false => Cleared::More,
            }
        };
        match cleared {
            Cleared::NoRoom => {
                txn.abort()?;
                self.unchanged(before, "giving back its pages")?;
                return Ok(Cleared::NoRoom);
            }
            Cleared::Done => {
                txn.delete_table(FILLER)?;
            }
            Cleared::More => {}
        }
        txn.commit()?;
        self.unchanged(before, "committing")?;
        self.report.transactions += 1;
        Ok(cleared)
    }

    /// A write transaction, begun in turn with the other writers' unless the scrub holds the
    /// turn (its end): a writer waits for one transaction of the scrub at most.
    fn begin(&self) -> Result<WriteTransaction, StoreError> {
        self.store.check_free_space()?;
        let _writers = (!self.holds_turn).then(|| self.store.writers());
        Ok(self.store.db.begin_write()?)
    }

    /// Filler values of one page written so far (and any reserve still kept).
    fn filler_values(&self) -> Result<u64, StoreError> {
        match self.store.db.begin_read()?.open_table(FILLER) {
            Err(TableError::TableDoesNotExist(_)) => Ok(0),
            opened => Ok(opened?.len()?),
        }
    }

    /// Whether a long read snapshot (an export, a backup) is open.
    fn long_read_open(&self) -> bool {
        self.store.long_reads.load(Ordering::SeqCst) > 0
    }

    fn file_len(&self) -> Result<u64, StoreError> {
        self.file
            .metadata()
            .map(|meta| meta.len())
            .map_err(|err| io_error(&self.store.file, err))
    }

    /// An error when the file grew past `before`, which the scrub must never make it.
    fn unchanged(&self, before: u64, doing: &str) -> Result<(), StoreError> {
        let after = self.file_len()?;
        if after > before {
            return Err(StoreError::Backend(
                format!(
                    "the scrub of {} grew it from {before} to {after} bytes {doing}",
                    self.store.file.display()
                )
                .into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
