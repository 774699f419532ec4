//! Handlers of the data API under `/api/v1/data/{slug}`.
//!
//! Checks run in this fixed order (docs/src/errors.md documents it): route and method
//! (404/405, done by the router) → Authorization header (401) → key known (401) → endpoint
//! for this key (404) → endpoint active (403) → key holder's account not suspended (403) →
//! production key deployed (403) → key permission for the method (403) → monthly quota (429)
//! → record id (400) → Content-Type (415) → body size (413) → `X-Webhook-*` headers (400) →
//! JSON (400) → required fields (400) → Idempotency-Key (400/409).

use http::{Method, StatusCode};
use warp::reply::Response;

use super::CallLog;
use crate::core::clock::Timestamp;
use crate::domain::batch;
use crate::domain::endpoints::{DataAccess, KeyGrant};
use crate::domain::error::Error;
use crate::domain::export;
use crate::domain::poll;
use crate::domain::records;
use crate::domain::search;
use crate::domain::usage;
use crate::domain::webhooks::deliveries::{self, Hooks};
use crate::http::app::App;
use crate::http::error::Result;
use crate::http::reply::{self, bearer, query_params, read_body, require_json};
use crate::http::request::{MAX_DATA_BODY, Request};
use crate::store::{Environment, Partition, Permission};

pub async fn handle(
    app: &App,
    req: &mut Request,
    slug: &str,
    record_id: Option<&str>,
    call_log: &mut CallLog,
) -> Result<Response> {
    let needed = match (&req.method, record_id) {
        (&Method::POST, _) => Permission::Create,
        (&Method::PUT, _) => Permission::Replace,
        (&Method::DELETE, _) => Permission::Delete,
        _ => Permission::Read,
    };
    let access = authorize(app, req, slug, needed, call_log)?;
    count_call(app, req, &access)?;
    match (&req.method, record_id) {
        (&Method::GET, None) => {
            let params = query_params(&req.query);
            let limit = crate::core::cursor::limit_param(
                &params,
                records::LIST_LIMIT_DEFAULT,
                records::LIST_LIMIT_MAX,
            )?;
            let page = records::list(
                app.handles.store.as_ref(),
                &access,
                limit,
                params.get("cursor").map(String::as_str),
            )?;
            Ok(reply::json_text(StatusCode::OK, page))
        }
        (&Method::POST, None) => {
            // The stamp is created_at; it counts as in flight for poll until the write is
            // stored or refused (see `poll`).
            let stamp = app.in_flight.stamp(app.handles.clock.as_ref());
            let body = json_body(req).await?;
            let hooks = hooks(app, req, &access, stamp.at)?;
            let accepted = records::create(
                &app.ingest,
                &app.endpoints.sealer,
                &access,
                hooks,
                &body,
                idempotency_key(req)?,
            )
            .await?;
            call_log.about(&accepted.id);
            Ok(reply::json(StatusCode::ACCEPTED, &accepted))
        }
        (&Method::GET, Some(id)) => {
            let id = records::parse_record_id(id)?;
            call_log.about(id);
            let record = records::get(app.handles.store.as_ref(), &access, id)?;
            Ok(reply::json_text(StatusCode::OK, record))
        }
        (&Method::PUT, Some(id)) => {
            let id = records::parse_record_id(id)?;
            call_log.about(id);
            let body = json_body(req).await?;
            let hooks = hooks(app, req, &access, req.received_at)?;
            let accepted = records::replace(&app.ingest, &access, id, hooks, &body).await?;
            Ok(reply::json(StatusCode::ACCEPTED, &accepted))
        }
        (&Method::DELETE, Some(id)) => {
            let id = records::parse_record_id(id)?;
            call_log.about(id);
            let hooks = hooks(app, req, &access, req.received_at)?;
            let accepted = records::delete(&app.ingest, &access, id, hooks).await?;
            Ok(reply::json(StatusCode::ACCEPTED, &accepted))
        }
        // The router only lets the methods above through.
        _ => Err(crate::http::error::HttpError::MethodNotAllowed(
            "GET, POST, PUT, DELETE".into(),
        )),
    }
}

/// `POST /api/v1/data/{slug}/batch` (`domain::batch`). Its checks run in the order of a
/// single POST's up to the permission; then Content-Type (415) → body size (413) →
/// `X-Webhook-*` headers (400) → the records (400, or 413 for too many or one too large) →
/// Idempotency-Key (400) → monthly quota, counting the records (429) → commit (409 for a
/// reused Idempotency-Key). A refused batch counts nothing against the quota.
pub async fn batch(
    app: &App,
    req: &mut Request,
    slug: &str,
    call_log: &mut CallLog,
) -> Result<Response> {
    let access = authorize(app, req, slug, Permission::Create, call_log)?;
    let format = match reply::media_type(
        &req.headers,
        &["application/x-ndjson", "application/json"],
        "application/x-ndjson (one record per line) or application/json (an array of records)",
    )? {
        "application/json" => batch::Format::JsonArray,
        _ => batch::Format::Ndjson,
    };
    // One stamp for the batch: every record's created_at (see `records::create`).
    let stamp = app.in_flight.stamp(app.handles.clock.as_ref());
    let body = read_body(req, batch::MAX_BODY_BYTES).await?;
    let hooks = hooks(app, req, &access, stamp.at)?;
    let payloads = batch::parse(&body, format, &access.payload_rules())?;
    let claim = batch::idempotency_claim(&app.endpoints.sealer, idempotency_key(req)?, &payloads)?;
    let accepted = batch::create(
        &app.ingest,
        &app.usage,
        usage::monthly_quota(&access.endpoint, &app.config.usage),
        &access,
        hooks,
        payloads,
        claim,
    )
    .await?;
    call_log.about_batch(&accepted);
    Ok(reply::json(StatusCode::ACCEPTED, &accepted))
}

/// `GET /api/v1/data/{slug}/search`.
pub fn search(app: &App, req: &Request, slug: &str, call_log: &mut CallLog) -> Result<Response> {
    let access = authorize(app, req, slug, Permission::Read, call_log)?;
    count_call(app, req, &access)?;
    let request =
        search::parse_request(&query_params(&req.query), access.partition, req.received_at)?;
    let started = std::time::Instant::now();
    let page = search::search(
        app.handles.store.as_ref(),
        app.search.as_deref(),
        access.partition,
        &request,
    )?;
    app.metrics
        .search_seconds
        .observe_duration(started.elapsed());
    Ok(reply::json_text(StatusCode::OK, page))
}

/// `GET /api/v1/data/{slug}/poll`.
pub fn poll(app: &App, req: &Request, slug: &str, call_log: &mut CallLog) -> Result<Response> {
    let access = authorize(app, req, slug, Permission::Read, call_log)?;
    count_call(app, req, &access)?;
    let (start, limit) = poll::parse_request(&query_params(&req.query), access.partition)?;
    let bound = poll::visibility_bound(
        &app.in_flight,
        app.handles.store.as_ref(),
        app.handles.clock.as_ref(),
        app.config.poll.hold_back,
    )?;
    let page = poll::poll(
        app.handles.store.as_ref(),
        &access,
        start,
        limit,
        req.received_at,
        bound,
    )?;
    if let Some(after) = page.continues_after {
        app.poll_read_ahead
            .start(&app.handles.store, access.partition, after, limit);
    }
    Ok(reply::json_text(StatusCode::OK, page.json))
}

/// `GET /api/v1/data/{slug}/export` (`domain::export`): streamed from one snapshot; the key
/// is checked again as it runs.
pub async fn export(
    app: &App,
    req: &mut Request,
    slug: &str,
    call_log: &mut CallLog,
) -> Result<Response> {
    let access = authorize(app, req, slug, Permission::Read, call_log)?;
    count_call(app, req, &access)?;
    let request = export::parse_request(&query_params(&req.query))?;
    let watch = export::Watch::key(
        app.handles.store.clone(),
        KeyGrant::new(
            bearer(&req.headers).unwrap_or_default(),
            slug,
            Permission::Read,
        ),
        app.endpoints.access_changes(),
    );
    let label = format!("{slug} ({})", req.request_id);
    let file = reply::export_file(&app.exports, access.partition, watch, request, slug, label);
    Ok(file.await?)
}

/// `GET /api/v1/data/{slug}/stream`: the change stream as Server-Sent Events (see
/// `domain::stream`). It resumes after `Last-Event-ID`, or after `?cursor=` (a saved event
/// id) when the header is absent; the header wins because a browser's `EventSource`
/// reconnects to the same URL with it.
pub fn stream(app: &App, req: &Request, slug: &str, call_log: &mut CallLog) -> Result<Response> {
    let access = authorize(app, req, slug, Permission::Read, call_log)?;
    count_call(app, req, &access)?;
    let params = query_params(&req.query);
    let last_event_id = match req.headers.get("last-event-id") {
        Some(value) => Some(value.to_str().map_err(|_| Error::InvalidParameter {
            name: "Last-Event-ID",
            reason: "it is not the id of an event of this endpoint's stream".into(),
        })?),
        None => params.get("cursor").map(String::as_str),
    };
    // The stream checks the key again for as long as it is open (`domain::stream`).
    let grant = KeyGrant::new(
        bearer(&req.headers).unwrap_or_default(),
        slug,
        Permission::Read,
    );
    let body = app.streams.open(&access, grant, last_event_id)?;
    Ok(reply::event_stream(body))
}

/// Counts the call against the endpoint's monthly quota (429 once it is reached).
fn count_call(app: &App, req: &Request, access: &DataAccess) -> Result<()> {
    let quota = usage::monthly_quota(&access.endpoint, &app.config.usage);
    Ok(app.usage.count(req.received_at, access.partition, quota)?)
}

/// The `Idempotency-Key` header, if sent (checked by the service).
fn idempotency_key(req: &Request) -> Result<Option<&str>> {
    match req.headers.get("idempotency-key") {
        Some(v) => Ok(Some(v.to_str().map_err(|_| Error::InvalidIdempotencyKey)?)),
        None => Ok(None),
    }
}

/// Authorises the call and fills in where it is logged. A refused call on an existing
/// endpoint is logged too (with the key id once the key is known), so the owner sees failed
/// attempts.
fn authorize(
    app: &App,
    req: &Request,
    slug: &str,
    needed: Permission,
    call_log: &mut CallLog,
) -> Result<DataAccess> {
    let key = bearer(&req.headers);
    match app.endpoints.authorize_data_key(key, slug, needed) {
        Ok(access) => {
            call_log.partition = Some(access.partition);
            call_log.environment = Some(access.environment);
            call_log.key_id = Some(access.key_id.clone());
            call_log.holder = Some(access.holder);
            Ok(access)
        }
        Err(err) => {
            let environment = match key {
                Some(k) if k.starts_with(Environment::Production.key_prefix()) => {
                    Environment::Production
                }
                _ => Environment::Sandbox,
            };
            if let Ok(Some(endpoint_id)) = app.endpoints.id_for_slug(slug) {
                call_log.partition = Some(Partition::new(endpoint_id, environment));
                call_log.environment = Some(environment);
                // Refused after the key was recognised (403): say whose key it was.
                if let (
                    Some(key),
                    Error::EndpointInactive
                    | Error::AccountSuspended
                    | Error::EndpointNotDeployed
                    | Error::MissingPermission(_),
                ) = (key, &err)
                {
                    if let Some((key_id, holder)) = app.endpoints.key_identity(key) {
                        call_log.key_id = Some(key_id);
                        call_log.holder = Some(holder);
                    }
                }
            }
            Err(err.into())
        }
    }
}

/// The webhook context of a write, with the caller's webhook if its headers ask for one.
fn hooks(app: &App, req: &Request, access: &DataAccess, at: Timestamp) -> Result<Hooks> {
    Ok(Hooks {
        endpoint_slug: access.endpoint.slug.clone(),
        environment: access.environment,
        at,
        caller: deliveries::caller_webhook(&req.headers, &app.endpoints.sealer, access.holder)?,
        trace: req.trace,
    })
}

async fn json_body(req: &mut Request) -> Result<bytes::Bytes> {
    require_json(&req.headers)?;
    read_body(req, MAX_DATA_BODY).await
}
