//! Background threads that yield the CPU to requests: their nice value is raised, which Linux
//! keeps per thread and passes on to the threads they start. An unprivileged thread cannot
//! lower it again, so only a thread of its own (never a pooled one) is made nicer.

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
