//! Idempotency claims and the request log.

use serde::{Deserialize, Serialize};

use super::*;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IdempotencyRow {
    /// A keyed hash of what the original request sent, or, in a row written by an earlier
    /// version, its plain SHA-256 (see `IdempotencyClaim::payload_hash`).
    pub payload_hash: String,
    pub record_id: String,
    pub created_at: Timestamp,
}

/// One data call. The fields after `request_id` came later: entries written before them
/// read as `None`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestLogRow {
    pub time: Timestamp,
    pub method: String,
    pub route: String,
    pub status: u16,
    pub key_id: Option<String>,
    pub latency_us: u64,
    pub environment: Environment,
    pub request_id: String,
    /// The error body's stable `code`, for an error response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The error body's message, shortened (see `http::error::logged`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The client's address (behind trusted proxies, the one they forwarded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Who held the key, once the key was recognised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<KeyHolder>,
    /// The record the call was about: the created record of a create, the path's record of a
    /// get, replace or delete (once its id parsed), the first record of a batch. `None` for a
    /// call about no one record (list, search, poll, export, stream) or one refused before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_id: Option<String>,
    /// For a batch, how many records it created (`record_id` is the first of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_count: Option<u32>,
}
