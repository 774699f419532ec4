//! What the benchmark servers (`http_ceiling`, `webhook_receiver`) share: their whole `main`
//! but the filter: the `--listen` argument, the runtime, and stopping on SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::process::ExitCode;

/// The `main` of the benchmark server `name`: the `--listen` argument (`default`; `--help`
/// prints `usage`), a multi-thread tokio runtime, and `filter` served on it until SIGTERM or
/// Ctrl-C. Errors go to stderr after `name: `; bad arguments exit with 2, the rest with 1.
pub fn run<F>(name: &str, default: &str, usage: &str, filter: F) -> ExitCode
where
    F: warp::Filter + Clone + Send + Sync + 'static,
    F::Extract: warp::Reply,
{
    let addr = match listen_arg(default, usage) {
        Ok(addr) => addr,
        Err(msg) => {
            eprintln!("{name}: {msg}\n\n{usage}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("{name}: cannot build the tokio runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(addr, filter)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("{name}: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// The `--listen ADDR` argument (or `default`); `--help` prints `usage` and exits.
fn listen_arg(default: &str, usage: &str) -> Result<SocketAddr, String> {
    let mut listen = default.to_string();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => {
                listen = args
                    .next()
                    .ok_or_else(|| "--listen needs a value".to_string())?;
            }
            // `cargo bench` passes `--bench` to harness = false targets.
            "--bench" => {}
            "-h" | "--help" => {
                print!("{usage}");
                std::process::exit(0);
            }
            other => match other.strip_prefix("--listen=") {
                Some(value) => listen = value.to_string(),
                None => return Err(format!("unknown argument: {other}")),
            },
        }
    }
    listen
        .parse()
        .map_err(|err| format!("invalid --listen address {listen:?}: {err}"))
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(err) => {
                eprintln!("cannot install SIGTERM handler: {err}");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Binds `addr`, says where on stderr, and serves `filter` until [`shutdown_signal`].
async fn serve<F>(addr: SocketAddr, filter: F) -> Result<(), String>
where
    F: warp::Filter + Clone + Send + Sync + 'static,
    F::Extract: warp::Reply,
{
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|err| format!("cannot bind {addr}: {err}"))?;
    let bound = listener.local_addr().unwrap_or(addr);
    eprintln!("listening on http://{bound}");
    warp::serve(filter)
        .incoming(listener)
        .graceful(shutdown_signal())
        .run()
        .await;
    Ok(())
}
