// mimalloc: the request path allocates many small, short-lived buffers; glibc's allocator
// spent about a tenth of the CPU time there under load (see docs/src/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` of mimalloc.h (the same in its versions 2 and 3); libmimalloc-sys
/// names no constant for it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

fn main() {
    // Memory freed is returned to the system at once rather than after mimalloc's default
    // 10 ms: under a write load the delayed pages (and those of tantivy's indexing thread,
    // which ends at every commit) were a third of the peak RSS (docs/src/operations.md).
    // A default only: MIMALLOC_PURGE_DELAY in the environment still sets it.
    // SAFETY: mi_option_set_default only stores the option's value; no allocation is live
    // that depends on it.
    unsafe { libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, 0) };
    std::process::exit(intake::cli::run());
}
