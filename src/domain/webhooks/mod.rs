//! Webhooks: signed deliveries of every write to the endpoint owner's receiver and to the
//! caller's (`X-Webhook-Callback`).
//!
//! - [`signing`]: Standard Webhooks signatures: the `whsec_` secret format, the `v1,`
//!   HMAC-SHA256 entry over `{webhook-id}.{webhook-timestamp}.{body}`, and the
//!   `webhook-signature` header with one entry per key.
//! - [`secrets`]: the signing secret of each endpoint and environment: made with the
//!   endpoint, stored sealed, viewed by the owner and collaborators and reissued by the owner
//!   through the management API, and [`secrets::signing_keys`], the keys a sender signs with
//!   at a given time (two during the 24-hour changeover after a reissue).
//! - [`deliveries`]: creating deliveries in the commit of the write that causes them.
//! - [`owner`]: the owner webhook of each endpoint and environment.
//! - [`dispatch`]: the dispatcher: a scheduler thread claims due deliveries for a pool of
//!   workers (capped per receiver, retries at most half of them), the retry policy, and a
//!   result writer that commits every attempt, the next due time and the owner's failure
//!   e-mail in groups.
//! - [`send`]: the HTTP side of one attempt with ureq: no redirects, one timeout, the SSRF
//!   guard on resolved addresses, the bounded response body, `Retry-After`, no proxy from
//!   the environment.
//! - [`proxy`]: the explicit outbound proxy (`[webhooks] proxy`, `no_proxy`): a CONNECT
//!   tunnel to the target address the guard checked.
//! - [`log`]: the delivery log with every attempt, and manual redelivery.

pub mod deliveries;
pub mod log;
pub mod owner;
pub mod secrets;
pub mod signing;

pub use crate::workers::webhooks::send::RESPONSE_BODY_LIMIT;
