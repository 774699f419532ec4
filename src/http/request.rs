//! One HTTP request as every handler sees it (API and dashboard alike), and the body limits.

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{Buf, Bytes};
use futures_util::{Stream, TryStreamExt};
use http::{HeaderMap, Method};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::core::clock::Timestamp;

pub type BodyStream = Pin<Box<dyn Stream<Item = std::result::Result<Bytes, warp::Error>> + Send>>;

/// Limit of POST and PUT bodies on data routes: 100 KB as the spec says.
pub const MAX_DATA_BODY: usize = crate::domain::records::MAX_PAYLOAD_BYTES;
/// Limit of management request bodies.
pub const MAX_MANAGE_BODY: usize = 65_536;

/// Memory that request bodies may hold at once (`[http] body_memory_mb`), counted in KiB of
/// each body's declared length (its limit when it declares none): a body is read only once its
/// share is free, and the share stays taken until the request is answered, so bodies waiting
/// in the ingest queue count too. A request that finds no room within [`BODY_BUDGET_WAIT`]
/// (or its body deadline, if sooner) is refused with 503 `server_busy` and `Retry-After`.
#[derive(Clone)]
pub struct BodyBudget {
    free: Arc<Semaphore>,
    kib: usize,
}

/// Longest wait for room in the [`BodyBudget`].
pub const BODY_BUDGET_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl BodyBudget {
    pub fn new(megabytes: usize) -> BodyBudget {
        let kib = megabytes.saturating_mul(1024).min(Semaphore::MAX_PERMITS);
        BodyBudget {
            free: Arc::new(Semaphore::new(kib)),
            kib,
        }
    }

    /// KiB taken by bodies now.
    pub fn held_kib(&self) -> u64 {
        self.kib.saturating_sub(self.free.available_permits()) as u64
    }

    /// Waits until `bytes` fit, at most until `deadline`; `None` when they did not in time.
    pub async fn take(
        &self,
        bytes: usize,
        deadline: tokio::time::Instant,
    ) -> Option<OwnedSemaphorePermit> {
        let kib = u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX);
        let acquire = self.free.clone().acquire_many_owned(kib);
        tokio::time::timeout_at(deadline, acquire).await.ok()?.ok()
    }
}

/// The address of the connection's peer, put on each request by the server.
#[derive(Clone, Copy, Debug)]
pub struct PeerAddr(pub IpAddr);

/// One HTTP request, as the handlers see it.
pub struct Request {
    /// The client's address, when the request came through the server's listener: the peer,
    /// or the address a trusted proxy forwarded (`forwarded::client_address`). Everything that
    /// needs the client's address reads it here.
    pub client: Option<IpAddr>,
    pub method: Method,
    pub path: String,
    pub query: String,
    pub headers: HeaderMap,
    pub body: BodyStream,
    /// When the request arrived: the record's created_at for a create.
    pub received_at: Timestamp,
    /// By when the whole body must have arrived (`[http] body_timeout`).
    pub body_deadline: tokio::time::Instant,
    /// The memory request bodies share, and this request's share of it once its body is read.
    pub body_budget: BodyBudget,
    pub body_share: Option<OwnedSemaphorePermit>,
    pub request_id: String,
    /// The trace this request is part of (`core::trace`): the server's span of it while
    /// telemetry is on, else the caller's `traceparent` as sent. Its writes pass it on to
    /// their webhook deliveries.
    pub trace: Option<crate::core::trace::TraceContext>,
    /// What one layer hands to a later step of the same request (the dashboard keeps the
    /// form it read, to show it again if the service refuses it).
    pub extensions: http::Extensions,
}

/// The request body as a stream of `Bytes` chunks.
pub(super) fn body_bytes(
    body: impl Stream<Item = std::result::Result<impl Buf, warp::Error>> + Send + 'static,
) -> impl Stream<Item = std::result::Result<Bytes, warp::Error>> + Send {
    body.map_ok(|mut buf| buf.copy_to_bytes(buf.remaining()))
}
