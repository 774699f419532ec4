//! What the benchmark servers (`http_ceiling`, `webhook_receiver`) share: the `--listen`
//! argument and stopping on SIGTERM or Ctrl-C.

use std::net::SocketAddr;

/// The `--listen ADDR` argument (or `default`); `--help` prints `usage` and exits.
pub fn listen_arg(default: &str, usage: &str) -> Result<SocketAddr, String> {
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
pub async fn shutdown_signal() {
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
pub async fn serve<F>(addr: SocketAddr, filter: F) -> Result<(), String>
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
