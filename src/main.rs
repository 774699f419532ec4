// mimalloc: the request path allocates many small, short-lived buffers; glibc's allocator
// spent about a tenth of the CPU time there under load (see docs/src/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(intake::cli::run());
}
