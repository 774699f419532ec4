//! Log output off the request path.
//!
//! The server logs one line per request. env_logger formats each line on the thread that logs
//! it and appends it to a shared buffer ([`pipe`]); one background thread writes the buffer to
//! stderr at most [`GATHER`] after its first line, or as soon as it holds [`BATCH_BYTES`].
//! Why: stderr is usually a file or journald's pipe, and a `write` per line on a request thread
//! is a system call in every request's latency, and the whole request when the file system or
//! the pipe's reader stalls. Waking the writer thread for every line instead costs as much on
//! a two-core machine, hence the gathering (measured: a no-match search through one connection,
//! p50 41 → 25 µs; docs/src/benchmarks.md).
//!
//! Lines keep their order: they are appended under one lock. No line is dropped: while the
//! buffer holds [`MAX_PENDING`] bytes (a stderr that does not take them), a logging thread
//! waits, as it did when it wrote itself. [`flush`] returns once everything logged before it
//! has been written; `cli` calls it before the process exits and the panic hook before the
//! panic message.

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

/// How long the writer waits after the first line of a batch for more to come.
const GATHER: Duration = Duration::from_millis(20);
/// A batch this large is written at once.
const BATCH_BYTES: usize = 64 * 1024;
/// Beyond this many unwritten bytes, logging threads wait for the writer.
const MAX_PENDING: usize = 4 * 1024 * 1024;
/// How long [`flush`] and a waiting logging thread wait for the writer: a stderr that blocks
/// forever must not keep the process from exiting.
const WAIT_LIMIT: Duration = Duration::from_secs(2);

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    /// Bytes appended and bytes written since the start: a flush waits for `written` to
    /// reach the `appended` it saw.
    appended: u64,
    written: u64,
    flush_wanted: bool,
}

#[derive(Default)]
struct Shared {
    pending: Mutex<Pending>,
    /// The writer waits here for lines (and a flush request).
    wake_writer: Condvar,
    /// Flushes and logging threads held back by [`MAX_PENDING`] wait here for writes.
    written: Condvar,
}

impl Shared {
    /// A poisoned lock only means a logging thread panicked mid-append; the bytes are still
    /// worth writing.
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn append(&self, line: &[u8]) {
        let pending = self.lock();
        let mut pending = wait_while(&self.written, pending, Some(WAIT_LIMIT), |p| {
            p.bytes.len() >= MAX_PENDING
        });
        let was_empty = pending.bytes.is_empty();
        pending.bytes.extend_from_slice(line);
        pending.appended += line.len() as u64;
        let batch_full = pending.bytes.len() >= BATCH_BYTES;
        drop(pending);
        if was_empty || batch_full {
            self.wake_writer.notify_one();
        }
    }

    fn flush(&self) {
        let mut pending = self.lock();
        let target = pending.appended;
        pending.flush_wanted = true;
        self.wake_writer.notify_one();
        drop(wait_while(&self.written, pending, Some(WAIT_LIMIT), |p| {
            p.written < target
        }));
    }

    /// The writer thread's loop; runs for the life of the process.
    fn write_batches(&self, out: &mut dyn Write) {
        let mut batch = Vec::with_capacity(BATCH_BYTES);
        loop {
            let pending = wait_while(&self.wake_writer, self.lock(), None, |p| {
                p.bytes.is_empty() && !p.flush_wanted
            });
            let mut pending = wait_while(&self.wake_writer, pending, Some(GATHER), |p| {
                p.bytes.len() < BATCH_BYTES && !p.flush_wanted
            });
            std::mem::swap(&mut batch, &mut pending.bytes);
            let upto = pending.appended;
            pending.flush_wanted = false;
            drop(pending);
            // A failed write to stderr has nowhere to be reported; the lines are dropped, as
            // env_logger does with its own write errors.
            if !batch.is_empty() {
                let _ = out.write_all(&batch).and_then(|()| out.flush());
                batch.clear();
            }
            self.lock().written = upto;
            self.written.notify_all();
        }
    }
}

/// Waits on `condvar` while `condition` holds, for at most `limit` when one is given.
fn wait_while<'a>(
    condvar: &Condvar,
    pending: MutexGuard<'a, Pending>,
    limit: Option<Duration>,
    condition: impl FnMut(&mut Pending) -> bool,
) -> MutexGuard<'a, Pending> {
    match limit {
        Some(limit) => match condvar.wait_timeout_while(pending, limit, condition) {
            Ok((guard, _)) => guard,
            Err(poisoned) => poisoned.into_inner().0,
        },
        None => condvar
            .wait_while(pending, condition)
            .unwrap_or_else(PoisonError::into_inner),
    }
}

static SHARED: OnceLock<Arc<Shared>> = OnceLock::new();

/// The writer env_logger writes formatted lines to (`Target::Pipe`). The first call starts the
/// writer thread and installs the panic hook; if the thread cannot start, lines go straight to
/// stderr as before.
pub fn pipe() -> Box<dyn Write + Send> {
    match SHARED.get().cloned().or_else(start) {
        Some(shared) => Box::new(Pipe(shared)),
        None => Box::new(std::io::stderr()),
    }
}

/// Waits until every line logged before this call is written (or the writer is stuck for
/// [`WAIT_LIMIT`]).
pub fn flush() {
    if let Some(shared) = SHARED.get() {
        shared.flush();
    }
}

fn start() -> Option<Arc<Shared>> {
    let shared = Arc::new(Shared::default());
    let writer = Arc::clone(&shared);
    std::thread::Builder::new()
        .name("log-writer".into())
        .spawn(move || writer.write_batches(&mut std::io::stderr()))
        .ok()?;
    let shared = Arc::clone(SHARED.get_or_init(|| shared));
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        flush();
        // A caught panic is reported by its caller as an error.
        if !crate::core::quiet_panic::catching() {
            previous(info);
        }
    }));
    Some(shared)
}

struct Pipe(Arc<Shared>);

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.append(buf);
        Ok(buf.len())
    }

    /// env_logger flushes after every line; the writer thread writes it soon, and waiting for
    /// that here would put the write back on the caller's path.
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the writer thread wrote so far, readable while it runs.
    #[derive(Clone, Default)]
    struct Written(Arc<Mutex<Vec<u8>>>);

    impl Write for Written {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("not poisoned").extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Written {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("not poisoned").clone()).expect("utf-8")
        }
    }

    fn lines(range: std::ops::Range<usize>) -> String {
        range.map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn lines_keep_their_order_and_flush_waits_until_they_are_written() {
        let shared = Arc::new(Shared::default());
        let written = Written::default();
        let (writer, mut out) = (Arc::clone(&shared), written.clone());
        // Runs until the test process ends, as the real writer does.
        std::thread::spawn(move || writer.write_batches(&mut out));

        // One `write_all` per line, as env_logger writes its formatted lines.
        let mut pipe = Pipe(Arc::clone(&shared));
        for line in lines(0..100).split_inclusive('\n') {
            pipe.write_all(line.as_bytes()).expect("appended");
        }
        shared.flush();
        assert_eq!(written.text(), lines(0..100));

        // Lines from several threads: each thread's own lines stay in order, none is lost, and
        // batches larger than BATCH_BYTES are written whole.
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let mut pipe = Pipe(Arc::clone(&shared));
                std::thread::spawn(move || {
                    for i in 0..5000 {
                        let line = format!("thread {t} line {i:05}\n");
                        pipe.write_all(line.as_bytes()).expect("appended");
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("logging thread");
        }
        shared.flush();
        let text = written.text();
        assert_eq!(text.lines().count(), 100 + 4 * 5000);
        for t in 0..4 {
            let prefix = format!("thread {t} line ");
            let own: Vec<&str> = text.lines().filter(|l| l.starts_with(&prefix)).collect();
            let expected: Vec<String> = (0..5000).map(|i| format!("{prefix}{i:05}")).collect();
            assert!(own == expected, "thread {t}: lines lost or out of order");
        }
    }
}
