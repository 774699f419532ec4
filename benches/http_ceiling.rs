//! HTTP ceiling for the ingest benchmark.
//!
//! A bare warp 0.4 server that answers every POST with `202 Accepted` and a
//! small JSON body, after reading the whole request body. It does the same
//! HTTP work as `intake serve` on its ingest path (accept, parse the request,
//! read the body, write a small JSON reply) but stores nothing, so its
//! throughput is the most this machine can give through warp/hyper/tokio.
//! `benches/ingest.sh` runs the same wrk load against it and against intake.
//!
//! Usage: `http_ceiling [--listen ADDR]` (default `127.0.0.1:8099`).
//! Prints `listening on http://ADDR` to stderr once bound; stops on SIGTERM or
//! Ctrl-C.

use std::net::SocketAddr;
use std::process::ExitCode;

use bytes::Bytes;
use warp::Filter;
use warp::http::StatusCode;

const DEFAULT_LISTEN: &str = "127.0.0.1:8099";
const REPLY_BODY: &str = r#"{"id":"rec_x","status":"accepted"}"#;

const USAGE: &str = concat!(
    "usage: http_ceiling [--listen ADDR]\n",
    "\n",
    "A bare warp server that answers every POST with 202 and a small JSON body.\n",
    "\n",
    "  --listen ADDR   address to bind (default 127.0.0.1:8099)\n",
);

fn parse_args() -> Result<SocketAddr, String> {
    let mut listen = DEFAULT_LISTEN.to_string();
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
                print!("{USAGE}");
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

fn main() -> ExitCode {
    let addr = match parse_args() {
        Ok(addr) => addr,
        Err(msg) => {
            eprintln!("http_ceiling: {msg}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("failed to build the tokio multi-thread runtime");

    let served: Result<(), String> = runtime.block_on(async move {
        let accept = warp::post().and(warp::body::bytes()).map(|body: Bytes| {
            // The body has been read in full; the ceiling keeps nothing.
            drop(body);
            warp::reply::with_status(
                warp::reply::with_header(REPLY_BODY, "content-type", "application/json"),
                StatusCode::ACCEPTED,
            )
        });

        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|err| format!("cannot bind {addr}: {err}"))?;
        let bound = listener.local_addr().unwrap_or(addr);
        eprintln!("listening on http://{bound}");

        warp::serve(accept)
            .incoming(listener)
            .graceful(shutdown_signal())
            .run()
            .await;
        Ok(())
    });

    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("http_ceiling: {msg}");
            ExitCode::FAILURE
        }
    }
}
