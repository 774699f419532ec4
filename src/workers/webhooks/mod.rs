//! The webhook dispatcher.
pub mod dispatch;
pub mod proxy;
pub mod send;
