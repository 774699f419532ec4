//! Usage counters: data calls per partition and month (the quota) and per day (the dashboard chart).

pub trait UsageStore {}
