//! The beat of the server's periodic tasks (retention, session sweeps, usage flushes): a
//! tokio interval that also ends when the server stops.

use std::time::Duration;

use tokio::sync::watch;

/// The beat of a periodic task: ticks every `period` until the server stops.
pub struct Ticker {
    interval: tokio::time::Interval,
    stopped: watch::Receiver<bool>,
}

impl Ticker {
    pub fn new(period: Duration, stopped: watch::Receiver<bool>) -> Ticker {
        Ticker {
            interval: tokio::time::interval(period),
            stopped,
        }
    }

    /// Waits for the next tick; `false` once the server is stopping.
    pub async fn tick(&mut self) -> bool {
        if *self.stopped.borrow() {
            return false;
        }
        tokio::select! {
            _ = self.interval.tick() => true,
            _ = self.stopped.changed() => false,
        }
    }
}
