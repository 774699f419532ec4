//! HTTP.
pub mod api;
pub mod app;
pub mod dashboard;
pub mod forwarded;
pub mod openapi;
