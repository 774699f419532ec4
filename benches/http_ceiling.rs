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

mod support;

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

fn main() -> ExitCode {
    let accept = warp::post().and(warp::body::bytes()).map(|body: Bytes| {
        // The body has been read in full; the ceiling keeps nothing.
        drop(body);
        warp::reply::with_status(
            warp::reply::with_header(REPLY_BODY, "content-type", "application/json"),
            StatusCode::ACCEPTED,
        )
    });
    support::run("http_ceiling", DEFAULT_LISTEN, USAGE, accept)
}
