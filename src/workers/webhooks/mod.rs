//! The webhook dispatcher.
pub mod dispatch;
pub mod pacing;
pub mod proxy;
pub mod send;
