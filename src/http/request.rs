//! One HTTP request as every handler sees it (API and dashboard alike), and the body limits.

use std::net::IpAddr;
use std::pin::Pin;

use bytes::{Buf, Bytes};
use futures_util::{Stream, TryStreamExt};
use http::{HeaderMap, Method};

use crate::core::clock::Timestamp;

pub type BodyStream = Pin<Box<dyn Stream<Item = std::result::Result<Bytes, warp::Error>> + Send>>;

/// Limit of POST and PUT bodies on data routes: 100 KB as the spec says.
pub const MAX_DATA_BODY: usize = 102_400;
/// Limit of management request bodies.
pub const MAX_MANAGE_BODY: usize = 65_536;

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
    pub request_id: String,
}

/// The request body as a stream of `Bytes` chunks.
pub(super) fn body_bytes(
    body: impl Stream<Item = std::result::Result<impl Buf, warp::Error>> + Send + 'static,
) -> impl Stream<Item = std::result::Result<Bytes, warp::Error>> + Send {
    body.map_ok(|mut buf| buf.copy_to_bytes(buf.remaining()))
}
