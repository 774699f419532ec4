//! Webhook receiver for the webhook and soak benchmarks (`benches/webhooks.sh`, `benches/soak.sh`).
//!
//! Answers every POST with `200 OK` at once, after reading the body, and notes when each
//! arrived (wall-clock microseconds, taken before the body is read, so as close to the first
//! byte as the server can tell) with its `X-svc-Record-Id`. The script reads the notes back
//! and steers it:
//!
//! - `GET /stats`: `{"count", "failed", "first_us", "last_us"}` of the arrivals so far (and
//!   the POSTs failed on purpose, see `PUT /failing`);
//! - `GET /arrivals`: one line per arrival, `<arrival_us> <record id>`;
//! - `DELETE /arrivals`: forgets them (between phases);
//! - `PUT /hold`: from now on POSTs wait, unanswered, until `DELETE /hold`; a held POST is
//!   noted as arriving at its release. Holding the dispatcher's few connections lets a
//!   backlog of deliveries build up, so their drain can be timed apart from the writes.
//! - `PUT /failing/P`: from now on P % of the POSTs (0 to 99) are answered `503` and not
//!   noted: first attempts only (`X-svc-Delivery-Attempt: 1`), evenly spread, so that every
//!   delivery the sender retries gets through on its second attempt. Failing one first
//!   attempt in `(100 - P) / P` does it: each adds one retry. `/stats` counts them (`failed`).
//!
//! Usage: `webhook_receiver [--listen ADDR]` (default `127.0.0.1:8098`). Prints
//! `listening on http://ADDR` to stderr once bound; stops on SIGTERM or Ctrl-C.

mod support;

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::watch;
use warp::Filter;
use warp::http::StatusCode;

const DEFAULT_LISTEN: &str = "127.0.0.1:8098";

const USAGE: &str = concat!(
    "usage: webhook_receiver [--listen ADDR]\n",
    "\n",
    "Answers every POST with 200 and notes its arrival time and X-svc-Record-Id;\n",
    "GET /stats, GET /arrivals and DELETE /arrivals read and reset the notes;\n",
    "PUT /hold makes POSTs wait until DELETE /hold;\n",
    "PUT /failing/P answers 503 to P % of the POSTs (first attempts only).\n",
    "\n",
    "  --listen ADDR   address to bind (default 127.0.0.1:8098)\n",
);

/// Arrival time (µs since the Unix epoch) and record id of each delivery received.
type Arrivals = Arc<Mutex<Vec<(u64, String)>>>;

/// What `PUT /failing/P` sets: the share of POSTs to fail, and the counts it goes by.
#[derive(Default)]
struct Failing {
    percent: u64,
    first_attempts: u64,
    failed: u64,
}

impl Failing {
    /// Whether to fail this POST: a first attempt, when failing it keeps the failed POSTs at
    /// `percent` % of all (each failed first attempt brings one retry, which gets through).
    fn fail(&mut self, attempt: Option<&str>) -> bool {
        if self.percent == 0 || attempt != Some("1") {
            return false;
        }
        self.first_attempts += 1;
        let due = (self.failed + 1) * (100 - self.percent) <= self.first_attempts * self.percent;
        self.failed += u64::from(due);
        due
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn receiver(
    arrivals: Arrivals,
) -> impl Filter<Extract = (impl warp::Reply,), Error = warp::Rejection> + Clone {
    let held = Arc::new(watch::Sender::new(false));
    let failing = Arc::new(Mutex::new(Failing::default()));
    let noted = arrivals.clone();
    let gate = held.clone();
    let failer = failing.clone();
    let deliveries = warp::post()
        .map(now_us)
        .and(warp::header::optional::<String>("x-svc-record-id"))
        .and(warp::header::optional::<String>("x-svc-delivery-attempt"))
        .and(warp::body::bytes())
        .then(
            move |at: u64, record: Option<String>, attempt: Option<String>, _body: Bytes| {
                let (noted, mut gate, failer) = (noted.clone(), gate.subscribe(), failer.clone());
                async move {
                    let was_held = *gate.borrow_and_update();
                    let at = match was_held && gate.wait_for(|held| !held).await.is_ok() {
                        true => now_us(),
                        false => at,
                    };
                    let fail = failer
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .fail(attempt.as_deref());
                    if fail {
                        return warp::reply::with_status(
                            "failing",
                            StatusCode::SERVICE_UNAVAILABLE,
                        );
                    }
                    let mut all = noted.lock().unwrap_or_else(PoisonError::into_inner);
                    all.push((at, record.unwrap_or_default()));
                    warp::reply::with_status("ok", StatusCode::OK)
                }
            },
        );
    let set_failing = {
        let failing = failing.clone();
        warp::put()
            .and(warp::path!("failing" / u64))
            .map(move |percent: u64| {
                let mut failing = failing.lock().unwrap_or_else(PoisonError::into_inner);
                failing.percent = percent.min(99);
                format!("failing {} %", failing.percent)
            })
    };
    let hold = {
        let held = held.clone();
        warp::put().and(warp::path("hold")).map(move || {
            held.send_replace(true);
            "held"
        })
    };
    let release = warp::delete().and(warp::path("hold")).map(move || {
        held.send_replace(false);
        "released"
    });
    let read = arrivals.clone();
    let stats = warp::get().and(warp::path("stats")).map(move || {
        let failed = failing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .failed;
        let all = read.lock().unwrap_or_else(PoisonError::into_inner);
        let first = all.iter().map(|a| a.0).min().unwrap_or(0);
        let last = all.iter().map(|a| a.0).max().unwrap_or(0);
        format!(
            "{{\"count\":{},\"failed\":{failed},\"first_us\":{first},\"last_us\":{last}}}",
            all.len()
        )
    });
    let read = arrivals.clone();
    let list = warp::get().and(warp::path("arrivals")).map(move || {
        let all = read.lock().unwrap_or_else(PoisonError::into_inner);
        let mut text = String::with_capacity(all.len() * 48);
        for (at, record) in all.iter() {
            let _ = writeln!(text, "{at} {record}");
        }
        text
    });
    let reset = warp::delete().and(warp::path("arrivals")).map(move || {
        arrivals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        "reset"
    });
    hold.map(|r| Box::new(r) as Box<dyn warp::Reply>)
        .or(release.map(|r| Box::new(r) as Box<dyn warp::Reply>))
        .unify()
        .or(set_failing.map(|r| Box::new(r) as Box<dyn warp::Reply>))
        .unify()
        .or(deliveries.map(|r| Box::new(r) as Box<dyn warp::Reply>))
        .unify()
        .or(stats.map(|r| Box::new(r) as Box<dyn warp::Reply>))
        .unify()
        .or(list.map(|r| Box::new(r) as Box<dyn warp::Reply>))
        .unify()
        .or(reset.map(|r| Box::new(r) as Box<dyn warp::Reply>))
        .unify()
}

fn main() -> ExitCode {
    support::run(
        "webhook_receiver",
        DEFAULT_LISTEN,
        USAGE,
        receiver(Arrivals::default()),
    )
}
