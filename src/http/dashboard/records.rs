//! The record browser of an endpoint, `/dashboard/endpoints/{slug}/records`: one
//! environment's records newest first, a page at a time with the API's cursors, the API's
//! exact search, an export of what the page shows (CSV or NDJSON), and each record with its
//! payload (indented and highlighted), its webhook deliveries and a delete button for those
//! allowed to delete.
//!
//! It reads through the same domain functions as `GET …/data/{slug}`, `…/search` and
//! `…/{record_id}`, so it shows what the API answers; access is the viewer's as a member of
//! the endpoint (the owner everything, a collaborator what their permissions allow).

use askama::Template;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::endpoints::EndpointHead;
use super::logs::DeliveryRow;
use super::page::{
    Failure, Layout, Outcome, Pager, Pretty, environment, redirect, render, render_with,
};
use super::visitor::{User, signed_in, user_form};
use crate::domain::endpoints::DataAccess;
use crate::domain::error::Error;
use crate::domain::export;
use crate::domain::records::{self, parse_record_id};
use crate::domain::search;
use crate::domain::webhooks::deliveries::Hooks;
use crate::domain::webhooks::log::{self, DeliveryFilter, DeliveryViewer};
use crate::http::app::App;
use crate::http::reply::{export_file, query_params};
use crate::http::request::Request;
use crate::store::Permission;

/// Records per page (the API's list allows 30 at most).
const RECORDS_PER_PAGE: usize = 25;
/// How much of a payload a row of the list shows.
const PREVIEW_CHARS: usize = 160;
/// Deliveries shown on a record's page (its newest).
const RECORD_DELIVERIES: usize = 50;

/// A page of records as the API writes it.
#[derive(Deserialize)]
struct ApiPage {
    data: Vec<ApiRecord>,
    pagination: ApiPagination,
}

#[derive(Deserialize)]
struct ApiPagination {
    next_cursor: Option<String>,
}

#[derive(Deserialize)]
struct ApiRecord {
    id: String,
    payload: Box<RawValue>,
    created_at: String,
    updated_at: String,
}

fn parse<'a, T: Deserialize<'a>>(json: &'a str) -> Result<T, Error> {
    serde_json::from_str(json)
        .map_err(|e| Error::Internal(format!("cannot read a records page: {e}")))
}

/// One row of the list.
pub struct RecordRow {
    pub id: String,
    pub created_at: String,
    /// Whether it was replaced after it was created.
    pub replaced: bool,
    /// The start of its payload as stored (compact JSON).
    pub preview: String,
}

impl From<ApiRecord> for RecordRow {
    fn from(record: ApiRecord) -> RecordRow {
        let text = record.payload.get();
        let preview = match text.char_indices().nth(PREVIEW_CHARS) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None => text.to_string(),
        };
        RecordRow {
            replaced: record.updated_at != record.created_at,
            id: record.id,
            created_at: record.created_at,
            preview,
        }
    }
}

#[derive(Template)]
#[template(path = "dashboard/records.html")]
struct RecordsPage {
    layout: Layout,
    head: EndpointHead,
    environment: &'static str,
    q: String,
    /// Why the search could not run (shown beside the box).
    search_error: Option<String>,
    records: Vec<RecordRow>,
    pager: Pager,
}

/// What a records page starts from: the viewer, the page's header and the viewer's read
/// access to the environment the query names.
fn reading(
    app: &App,
    req: &Request,
    slug: &str,
) -> Result<(User, EndpointHead, DataAccess), Failure> {
    let user = signed_in(app, req)?;
    let environment = environment(&query_params(&req.query))?;
    let head = EndpointHead::load(app, &user, slug, "records")?.viewing(environment);
    let access = app
        .endpoints
        .member_access(&user.account, slug, environment, Permission::Read)?;
    Ok((user, head, access))
}

/// `GET /dashboard/endpoints/{slug}/records?environment=&q=&cursor=`.
pub fn list(app: &App, req: &Request, slug: &str) -> Outcome {
    let (user, head, access) = reading(app, req, slug)?;
    let environment = access.environment;
    let params = query_params(&req.query);
    let q = params
        .get("q")
        .map(|q| q.trim().to_string())
        .unwrap_or_default();
    let cursor = params
        .get("cursor")
        .map(String::as_str)
        .filter(|c| !c.is_empty());
    let store = app.handles.store.as_ref();
    let json = if q.is_empty() {
        Ok(records::list(store, &access, RECORDS_PER_PAGE, cursor)?)
    } else {
        let mut search_params = std::collections::HashMap::new();
        search_params.insert("q".to_string(), q.clone());
        search_params.insert("limit".to_string(), RECORDS_PER_PAGE.to_string());
        // The whole history, not the API's default 30 days: a browser is for finding things.
        search_params.insert("start".to_string(), "1970-01-01".to_string());
        if let Some(cursor) = cursor {
            search_params.insert("cursor".to_string(), cursor.to_string());
        }
        search::parse_request(&search_params, access.partition, app.handles.now()).and_then(
            |request| search::search(store, app.search.as_deref(), access.partition, &request),
        )
    };
    let (page, search_error) = match json {
        Ok(json) => (parse::<ApiPage>(&json)?, None),
        Err(err @ Error::InvalidParameter { .. }) => (
            ApiPage {
                data: Vec::new(),
                pagination: ApiPagination { next_cursor: None },
            },
            Some(super::page::readable(&err.to_string())),
        ),
        Err(err) => return Err(err.into()),
    };
    let pager = Pager::new(
        &format!("{}/records", head.path()),
        &[("environment", environment.as_str()), ("q", &q)],
        cursor,
        page.pagination.next_cursor,
    );
    let status = match search_error {
        Some(_) => http::StatusCode::BAD_REQUEST,
        None => http::StatusCode::OK,
    };
    let page = RecordsPage {
        layout: user.layout(app, format!("{} · Records", head.ep.name), "endpoints", req),
        head,
        environment: environment.as_str(),
        q,
        search_error,
        records: page.data.into_iter().map(RecordRow::from).collect(),
        pager,
    };
    render_with(status, &page)
}

/// `GET /dashboard/endpoints/{slug}/records/export?environment=&q=&format=`: what the records
/// page shows (its environment, its search over the whole history), every record of it,
/// oldest first, as a CSV (the default) or NDJSON file. It is the API's export; the session
/// and the member's read access are checked again while it runs.
pub async fn export(app: &App, req: &mut Request, slug: &str) -> Outcome {
    let (user, _, access) = reading(app, req, slug)?;
    let shown = query_params(&req.query);
    let mut params = std::collections::HashMap::new();
    params.insert(
        "format".to_string(),
        shown
            .get("format")
            .cloned()
            .unwrap_or_else(|| "csv".to_string()),
    );
    for name in ["q", "start", "end"] {
        if let Some(value) = shown.get(name).map(|v| v.trim()).filter(|v| !v.is_empty()) {
            params.insert(name.to_string(), value.to_string());
        }
    }
    let request = export::parse_request(&params)?;
    let watch = export::Watch::member(
        app.endpoints.clone(),
        user.session().to_string(),
        slug.to_string(),
        access.environment,
    );
    let label = format!("{slug} (dashboard, account {})", user.account.id);
    let file = export_file(&app.exports, access.partition, watch, request, slug, label);
    Ok(file.await?)
}

#[derive(Template)]
#[template(path = "dashboard/record.html")]
struct RecordPage {
    layout: Layout,
    head: EndpointHead,
    environment: &'static str,
    id: String,
    created_at: String,
    updated_at: String,
    payload: Pretty,
    deliveries: Vec<DeliveryRow>,
    can_delete: bool,
}

/// `GET /dashboard/endpoints/{slug}/records/{id}?environment=`.
pub fn record(app: &App, req: &Request, slug: &str, id: &str) -> Outcome {
    let (user, head, access) = reading(app, req, slug)?;
    let environment = access.environment;
    let id = parse_record_id(id)?;
    let record: ApiRecord = parse(&records::get(app.handles.store.as_ref(), &access, id)?)?;
    let of_record = DeliveryFilter {
        record: Some(id),
        ..DeliveryFilter::default()
    };
    let deliveries = log::list(
        app.handles.store.as_ref(),
        &DeliveryViewer::member(&app.endpoints, &user.account, slug)?,
        environment,
        &of_record,
        RECORD_DELIVERIES,
        None,
    )?
    .data
    .into_iter()
    .map(DeliveryRow::new)
    .collect();
    let can_delete = app
        .endpoints
        .member_access(&user.account, slug, environment, Permission::Delete)
        .is_ok();
    let page = RecordPage {
        layout: user.layout(app, format!("Record {}", record.id), "endpoints", req),
        head,
        environment: environment.as_str(),
        payload: Pretty::of(record.payload.get()),
        id: record.id,
        created_at: record.created_at,
        updated_at: record.updated_at,
        deliveries,
        can_delete,
    };
    render(&page)
}

/// `POST /dashboard/endpoints/{slug}/records/{id}/delete?environment=`: queues the delete
/// like `DELETE …/data/{slug}/{id}` (webhooks announce it) and notes who did it in the audit
/// log.
pub async fn delete(app: &App, req: &mut Request, slug: &str, id: &str) -> Outcome {
    let user = signed_in(app, req)?;
    user_form(app, req, &user).await?;
    let environment = environment(&query_params(&req.query))?;
    let access =
        app.endpoints
            .member_access(&user.account, slug, environment, Permission::Delete)?;
    let id = parse_record_id(id)?;
    // Only what exists can be deleted from here (the API's delete of a missing id is a 202).
    records::get(app.handles.store.as_ref(), &access, id)?;
    let hooks = Hooks {
        endpoint_slug: access.endpoint.slug.clone(),
        environment,
        at: app.handles.now(),
        caller: None,
        trace: req.trace,
    };
    records::delete_as_member(&app.ingest, &app.handles, &access, &user.account, id, hooks).await?;
    Ok(redirect(&format!(
        "/dashboard/endpoints/{slug}/records?environment={}&done=record-deleted",
        environment.as_str()
    )))
}
