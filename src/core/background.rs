//! Background threads that yield the CPU to requests: their nice value is raised, which Linux
//! keeps per thread and passes on to the threads they start. An unprivileged thread cannot
//! lower it again, so only a thread of its own (never a pooled one) is made nicer.
//!
//! A nicer thread still takes a whole core whenever the requests leave it one, and on a small
//! machine that shows in their latency: beside a paced ingest load, one busy thread at nice 10
//! raised its p99 1.4 times, two (a core each) 2.7 times (docs/src/benchmarks.md, "Erasure").
//! Long background work that may run beside other such work also [`pace`]s itself to a share
//! of a core.

use std::cell::Cell;
use std::time::Duration;

/// Sets the calling thread's nice value to `nice` (0 to 19; 0 leaves it). Failing to is
/// logged, not fatal: `what` then runs at normal priority.
pub fn lower_priority(nice: i32, what: &str) {
    if nice == 0 {
        return;
    }
    if let Err(err) = rustix::process::setpriority_process(Some(rustix::thread::gettid()), nice) {
        log::warn!("could not lower the priority of {what} to nice {nice}: {err}");
    }
}

/// Runs `work` on a new thread named `name` at nice `nice`, and waits for its result; an
/// error when no thread could be started or `work` panicked.
pub fn run_nicer<T: Send>(
    name: &str,
    nice: i32,
    work: impl FnOnce() -> T + Send,
) -> Result<T, String> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn_scoped(scope, || {
                lower_priority(nice, name);
                work()
            })
            .map_err(|err| format!("cannot start a thread for {name}: {err}"))?
            .join()
            .map_err(|_| format!("{name} panicked"))
    })
}

/// The longest one [`pace`] sleeps: a thread that ran long since its previous call (or last
/// paced itself in an earlier task) is not put to sleep for that long.
const MAX_PACE: Duration = Duration::from_millis(250);
/// The least CPU time a thread runs between two pauses of [`pace`]: calls before that only
/// read the clock, so a loop may call it at every small step.
const MIN_PACE: Duration = Duration::from_millis(10);

thread_local! {
    /// The calling thread's CPU time at its last pause of [`pace`].
    static PACED_AT: Cell<Option<Duration>> = const { Cell::new(None) };
}

/// Holds the calling thread to about `share` percent of a core (1 to 100): once it has run
/// (its CPU time, not the time since, which waiting for a core or the disk would lengthen) at
/// least [`MIN_PACE`] since its previous pause, sleeps so that it ran that share of the
/// time, at most [`MAX_PACE`]. Called between small steps of background work.
pub fn pace(share: u32) {
    let now = thread_cpu_time();
    let Some(at) = PACED_AT.get() else {
        PACED_AT.set(Some(now));
        return;
    };
    let ran = now.saturating_sub(at);
    if ran >= MIN_PACE {
        let share = share.clamp(1, 100);
        std::thread::sleep((ran * (100 - share) / share).min(MAX_PACE));
        PACED_AT.set(Some(now));
    }
}

/// The least pause of [`yield_write_lock`]: redb's write lock is not fair, and without a pause
/// the next transaction takes it again before a writer woken by its release gets it (a writer
/// waited up to 365 ms instead of 15 behind a dictionary's replacement).
const MIN_LOCK_PAUSE: Duration = Duration::from_millis(1);

/// Sleeps after a transaction of background work (an erasure's, a compaction's) that held the
/// store's write lock for `held`: twice as long, at least [`MIN_LOCK_PAUSE`], so that the
/// ingest writer has the lock, and the disk the commits after it flush, at least two thirds of
/// the time. With pauses only as long, an erasure's seconds of scrubbing showed in the ingest
/// p99 (docs/src/benchmarks.md, "Erasure").
pub fn yield_write_lock(held: Duration) {
    std::thread::sleep((held * 2).max(MIN_LOCK_PAUSE));
}

/// The CPU time the calling thread has used.
pub fn thread_cpu_time() -> Duration {
    let time = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(time.tv_sec).unwrap_or(0),
        u32::try_from(time.tv_nsec).unwrap_or(0),
    )
}

/// Spins until the calling thread has used `cpu` more of CPU time (or 5 s have passed): a
/// test's stand-in for background work.
#[cfg(test)]
pub fn spin_for(cpu: Duration) {
    let until = thread_cpu_time() + cpu;
    let started = std::time::Instant::now();
    while thread_cpu_time() < until && started.elapsed() < Duration::from_secs(5) {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{MAX_PACE, pace, spin_for, thread_cpu_time};

    /// What a thread that runs 20 ms of CPU between its calls to `pace(share)` ran and slept.
    fn ran_and_slept(share: u32) -> (Duration, Duration) {
        std::thread::spawn(move || {
            pace(share);
            let (mut ran, mut slept) = (Duration::ZERO, Duration::ZERO);
            for _ in 0..5 {
                let cpu = thread_cpu_time();
                spin_for(Duration::from_millis(20));
                ran += thread_cpu_time() - cpu;
                let asleep = Instant::now();
                pace(share);
                slept += asleep.elapsed();
            }
            assert!(ran >= Duration::from_millis(100), "ran {ran:?}");
            (ran, slept)
        })
        .join()
        .unwrap()
    }

    /// Paced to half a core, a thread sleeps as long as it ran; to 80 %, a quarter as long.
    #[test]
    fn pace_sleeps_for_the_share_of_the_core_left() {
        let (ran, slept) = ran_and_slept(50);
        assert!(slept >= ran, "ran {ran:?}, slept {slept:?}");
        let (ran, slept) = ran_and_slept(80);
        assert!(slept >= ran / 4, "ran {ran:?}, slept {slept:?}");
        // Less than at half a core (as long as it ran); a busy machine's late wake-ups add
        // to each of the five sleeps.
        assert!(slept < ran, "ran {ran:?}, slept {slept:?}");
    }

    #[test]
    fn a_pause_is_never_longer_than_max_pace() {
        std::thread::spawn(|| {
            pace(50);
            spin_for(MAX_PACE * 3);
            let asleep = Instant::now();
            pace(50);
            let slept = asleep.elapsed();
            assert!(slept >= MAX_PACE && slept < MAX_PACE * 2, "{slept:?}");
        })
        .join()
        .unwrap();
    }
}
