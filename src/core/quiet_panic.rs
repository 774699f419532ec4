//! Panics that intake turns into errors.
//!
//! redb answers some damage in its file by panicking (`unreachable!` while walking a damaged
//! page). Where intake can give a clean error instead, it runs the code through [`catch`]: the
//! panic is caught on this thread and its message returned, and the process's panic hook
//! (`log_output`) prints nothing for it, since the caller reports it as an error.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

thread_local! {
    static CATCHING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`; a panic in it becomes `Err(message)`. Only for code whose state is dropped when
/// it fails (opening a file, not a half-done change to shared state).
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let was = CATCHING.with(|c| c.replace(true));
    let result = catch_unwind(AssertUnwindSafe(f));
    CATCHING.with(|c| c.set(was));
    result.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".to_string())
    })
}

/// Whether the current thread is inside [`catch`]: the panic hook stays quiet then.
pub fn catching() -> bool {
    CATCHING.with(Cell::get)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_its_message_and_the_flag_is_restored() {
        assert_eq!(catch(|| 7), Ok(7));
        assert!(!catching());
        let caught = catch(|| -> u8 {
            assert!(catching());
            panic!("damaged page {}", 3)
        });
        assert_eq!(caught, Err("damaged page 3".to_string()));
        assert!(!catching());
        assert_eq!(catch(|| -> () { panic!("static") }), Err("static".into()));
    }
}
