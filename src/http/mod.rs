//! HTTP: everything that speaks HTTP, above the services.
//!
//! - [`app`]: `App`, the state a request handler is given (the services' handles).
//! - [`api`]: one warp filter, the route table, thin handlers of the data and management API,
//!   and the single mapping from errors to statuses and error codes (`api::error`).
//! - [`dashboard`]: the server-rendered dashboard at `/dashboard` (and the invitation pages at
//!   `/invitations/{token}`): its own router, session and CSRF-checked forms, security
//!   headers, askama templates (`templates/dashboard/`), embedded assets, the first-run setup
//!   link; pages call the same service functions as the management API. Each endpoint's API
//!   test page (`dashboard::testpage`) is built from its `openapi::endpoint_document`.
//! - [`openapi`]: the OpenAPI 3.1 document of the whole API, built from one declaration per
//!   operation, with each endpoint's own data-API document and code samples.
//! - [`forwarded`]: the client's address: the TCP peer, or behind trusted reverse proxies
//!   (`[http] trusted_proxies`) the address they forwarded; the login limits count by it.

pub mod api;
pub mod app;
pub mod dashboard;
pub mod forwarded;
pub mod openapi;
