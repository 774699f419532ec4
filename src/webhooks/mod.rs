//! Webhooks: how a receiver can check that a request came from intake, for each endpoint and
//! environment.
//!
//! - [`signing`]: Standard Webhooks signatures: the `whsec_` secret format, the `v1,`
//!   HMAC-SHA256 entry over `{webhook-id}.{webhook-timestamp}.{body}`, and the
//!   `webhook-signature` header with one entry per key.
//! - [`secrets`]: the signing secret of each endpoint and environment: made with the
//!   endpoint, stored sealed, viewed by the owner and collaborators and reissued by the owner
//!   through the management API, and [`secrets::signing_keys`], the keys a sender signs with
//!   at a given time (two during the 24-hour changeover after a reissue).
//!
//! Sending is not part of this module: nothing calls [`secrets::signing_keys`] or
//! [`signing::signature_header`] outside the tests yet.

pub mod secrets;
pub mod signing;
