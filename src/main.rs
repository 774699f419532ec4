// jemalloc: the request path allocates many small, short-lived buffers (glibc's allocator
// spent about a tenth of the CPU time there under load), and the store's page cache keeps
// 4 KiB pages that it evicts in no particular order. jemalloc's small slabs (four such pages
// each) are given back as their pages are evicted; mimalloc's 64 KiB pages stayed in use
// while one block in them did, and a long mixed load's RSS climbed to 1.6 times jemalloc's
// with the same live heap (docs/src/benchmarks.md, "Memory allocator").
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read when it starts (`_RJEM_MALLOC_CONF` in the environment still
/// overrides each): one background thread hands freed memory back to the system after about a
/// second whether or not the thread that freed it allocates again (an idle indexing thread
/// never does), and `muzzy_decay_ms:0` hands it back at once (`MADV_DONTNEED`) rather than
/// lazily (`MADV_FREE`), which would keep counting it in RSS until the kernel needs it.
// jemalloc reads a `const char *` by that name: a thin pointer to the options' first byte.
#[unsafe(export_name = "_rjem_malloc_conf")]
#[used]
static MALLOC_CONF: Option<&std::ffi::c_char> = Some(
    // SAFETY: the pointer is to the first byte of a static C string, valid for ever.
    unsafe { &*JEMALLOC_OPTIONS.as_ptr() },
);
const JEMALLOC_OPTIONS: &std::ffi::CStr =
    c"background_thread:true,max_background_threads:1,dirty_decay_ms:1000,muzzy_decay_ms:0";

fn main() {
    std::process::exit(intake::cli::run());
}
