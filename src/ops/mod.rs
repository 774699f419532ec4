//! Operations.
pub mod backup;
