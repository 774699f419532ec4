// mimalloc: the request path allocates many small, short-lived buffers; glibc's allocator
// spent about a tenth of the CPU time there under load (see docs/src/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` of mimalloc.h (the same in its versions 2 and 3); libmimalloc-sys
/// names no constant for it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// `mi_option_page_reclaim_on_free` of mimalloc.h version 3 (the version libmimalloc-sys
/// builds by default; version 2 numbers its options otherwise).
const MI_OPTION_PAGE_RECLAIM_ON_FREE: libmimalloc_sys::mi_option_t = 35;

fn main() {
    // Defaults only: MIMALLOC_PURGE_DELAY and MIMALLOC_PAGE_RECLAIM_ON_FREE in the
    // environment still set them.
    // SAFETY: mi_option_set_default only stores the option's value; no allocation is live
    // that depends on it.
    unsafe {
        // Memory freed is returned to the system at once rather than after mimalloc's default
        // 10 ms: under a write load the delayed pages (and those of tantivy's indexing thread,
        // which ends at every commit) were a third of the peak RSS (docs/src/operations.md).
        libmimalloc_sys::mi_option_set_default(MI_OPTION_PURGE_DELAY, 0);
        // A page left by a thread that has ended is taken over by the thread that frees a
        // block in it, so its free space is used again. tantivy starts new indexing threads at
        // every commit (several a second under load). With mimalloc's default the soak's RSS
        // crept up once retention began deleting, to 2-4 times the live heap; with this, its
        // last window stayed within 10 % of its first (docs/src/benchmarks.md, "Soak").
        if libmimalloc_sys::mi_version() >= 30000 {
            libmimalloc_sys::mi_option_set_default(MI_OPTION_PAGE_RECLAIM_ON_FREE, 1);
        }
    }
    std::process::exit(intake::cli::run());
}
