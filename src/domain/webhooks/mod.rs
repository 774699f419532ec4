//! Webhooks: signed deliveries of every write to the endpoint owner's receiver and to the
//! caller's (`X-Webhook-Callback`).
//!
//! - [`signing`]: Standard Webhooks signatures: the `whsec_` secret format, the `v1,`
//!   HMAC-SHA256 entry over `{webhook-id}.{webhook-timestamp}.{body}`, the
//!   `webhook-signature` header with one entry per key, and every header of a request.
//! - [`secrets`]: the signing secret of each endpoint and environment: made with the
//!   endpoint, stored sealed, viewed by the owner and collaborators and reissued by the owner
//!   through the management API, and [`secrets::signing_keys`], the keys a sender signs with
//!   at a given time (two during the 24-hour changeover after a reissue).
//! - [`deliveries`]: creating deliveries in the commit of the write that causes them.
//! - [`subscriptions`]: the owner's subscriptions of each endpoint and environment (the spec's
//!   owner webhook is the first).
//! - [`targets`]: a URL checked against the server's egress rule when it is saved.
//! - [`health`]: each subscription's health, and the circuit breaker that disables a failing
//!   one.
//! - [`recovery`]: bulk recovery of a subscription's (or the caller webhooks') given-up and
//!   skipped deliveries.
//! - [`log`]: the delivery log with every attempt, and manual redelivery.
//! - [`policy`]: the retry policy: what an answer means, when the next attempt is due, the
//!   attempt budgets, and whose given-up deliveries the owner is e-mailed about.
//! - [`outcomes`]: what an attempt leaves behind, committed in groups with the owner's
//!   failure e-mail.
//! - [`test_events`]: a test event sent to a subscription, logged as a finished delivery
//!   marked as a test.
//!
//! Sending lives in `workers::dispatcher`: a scheduler thread claims due deliveries for a pool
//! of workers, capped per receiver, retrying at most half of them; a result writer commits
//! every attempt, the next due time and the owner's failure e-mail in groups; the HTTP side of
//! one attempt (`send`: no redirects, one timeout, the SSRF guard on resolved addresses, the
//! body bounded by [`RESPONSE_BODY_LIMIT`], `Retry-After`, no proxy from the environment) and
//! the explicit outbound proxy (`proxy`).

pub mod deliveries;
pub mod health;
pub mod log;
pub mod outcomes;
pub mod policy;
pub mod recovery;
pub mod secrets;
pub mod signing;
pub mod subscriptions;
pub mod targets;
pub mod test_events;

/// How much of a receiver's response body an attempt keeps in the delivery log (bytes; cut at
/// a character boundary, invalid UTF-8 replaced).
pub const RESPONSE_BODY_LIMIT: usize = 4096;
