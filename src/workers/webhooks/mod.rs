//! The webhook dispatcher.
pub mod dispatch;
pub mod pacing;
pub mod probe;
pub mod proxy;
pub mod send;
