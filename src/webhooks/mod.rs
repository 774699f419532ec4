//! Webhooks.
//!
//! - [`deliveries`]: creating deliveries in the commit of the write that causes them.

pub mod deliveries;
