//! The record browser of an endpoint, `/dashboard/endpoints/{slug}/records`: one
//! environment's records as a table whose columns are the payload's fields (`table`), newest
//! or oldest first within a date range, a page at a time with opaque cursors, the API's
//! exact search, an export of what the table shows, and each record with its payload
//! (indented and highlighted), its webhook deliveries, and Edit and Delete for those allowed;
//! creating and replacing a record with a JSON editor is `editor`.
//!
//! It reads and writes through the same domain functions as the data API, so it shows what
//! the API answers; access is the viewer's as a member of the endpoint (the owner
//! everything, a collaborator what their permissions allow).

mod editor;
mod table;

use std::collections::HashMap;
use std::time::Duration;

use askama::Template;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::endpoints::EndpointHead;
use super::logs::{DeliveryRow, newest_rows};
use super::page::{
    Failure, Layout, Outcome, Pager, Pretty, environment, redirect, render, render_with,
};
use super::visitor::{User, signed_in, user_form};
use crate::core::clock::parse_date_or_rfc3339;
use crate::domain::endpoints::DataAccess;
use crate::domain::error::Error;
use crate::domain::export;
use crate::domain::records::{self, parse_record_id};
use crate::domain::schema::TopLevel;
use crate::domain::search;
use crate::domain::webhooks::deliveries::Hooks;
use crate::domain::webhooks::log::DeliveryFilter;
use crate::http::app::App;
use crate::http::reply::{export_file, query_params};
use crate::http::request::Request;
use crate::store::records::ScanOrder;
use crate::store::{Environment, Permission};
pub use editor::{edit_page, new_page, save_edit, save_new};
use table::Table;

/// Records per page (the API's list allows 30 at most).
const RECORDS_PER_PAGE: usize = 25;
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

/// The time window the table and its export show, read from `from` and `to` (dates, or RFC
/// 3339 times; UTC) as the inclusive RFC 3339 bounds search and export take. A `to` that is
/// a date means the end of that day.
#[derive(Default)]
struct Window {
    start: Option<String>,
    end: Option<String>,
}

impl Window {
    fn read(params: &HashMap<String, String>) -> Result<Window, Error> {
        let field = |name: &str| {
            params
                .get(name)
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        let (from, to) = (field("from"), field("to"));
        let time = |name: &'static str, text: &str| {
            parse_date_or_rfc3339(text).ok_or_else(|| Error::InvalidParameter {
                name,
                reason: "it must be a date (YYYY-MM-DD) or an RFC 3339 time, in UTC".into(),
            })
        };
        let start = match from.as_str() {
            "" => None,
            text => Some(time("from", text)?),
        };
        let end = match to.as_str() {
            "" => None,
            text if text.len() == 10 => Some(
                time("to", text)?
                    .plus(Duration::from_secs(86_400))
                    .minus(Duration::from_micros(1)),
            ),
            text => Some(time("to", text)?),
        };
        if let (Some(start), Some(end)) = (start, end)
            && start > end
        {
            return Err(Error::InvalidParameter {
                name: "from",
                reason: "it is after “to”".into(),
            });
        }
        Ok(Window {
            start: start.map(|t| t.to_rfc3339()),
            end: end.map(|t| t.to_rfc3339()),
        })
    }

    /// `start` and `end` as search and export read them.
    fn params(&self) -> HashMap<String, String> {
        let mut params = HashMap::new();
        params.extend(self.start.clone().map(|v| ("start".to_string(), v)));
        params.extend(self.end.clone().map(|v| ("end".to_string(), v)));
        params
    }
}

/// The order the table shows, from `order=oldest` (newest first otherwise).
fn order_param(params: &HashMap<String, String>) -> Result<ScanOrder, Error> {
    match params.get("order").map(String::as_str) {
        None | Some("" | "newest") => Ok(ScanOrder::NewestFirst),
        Some("oldest") => Ok(ScanOrder::OldestFirst),
        Some(_) => Err(Error::InvalidParameter {
            name: "order",
            reason: "it must be newest or oldest".into(),
        }),
    }
}

#[derive(Template)]
#[template(path = "dashboard/records.html")]
struct RecordsPage {
    layout: Layout,
    head: EndpointHead,
    environment: &'static str,
    q: String,
    from: String,
    to: String,
    oldest_first: bool,
    /// The export's `start`, `end` and `order`, which the Export form carries.
    export_params: Vec<(&'static str, String)>,
    /// Why the search or the dates could not be used (shown beside the form).
    filter_error: Option<String>,
    table: Table,
    pager: Pager,
    script: &'static str,
    can_create: bool,
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

/// Whether `user` may write records with `needed` to `environment` from the dashboard (the
/// buttons show only then; the pages and posts check it again).
fn may_write(
    app: &App,
    user: &User,
    slug: &str,
    environment: Environment,
    needed: Permission,
) -> bool {
    app.endpoints
        .member_row(&user.account, slug)
        .is_ok_and(|(row, membership)| {
            membership.permits(&row, needed).is_ok()
                && records::member_may_write(&row, environment).is_ok()
        })
}

/// The page of records the table shows: browsed in `order` within `window`, or, with a
/// search, the search's page (always newest first).
fn records_page(
    app: &App,
    access: &DataAccess,
    q: &str,
    window: &Window,
    order: ScanOrder,
    cursor: Option<&str>,
) -> Result<String, Error> {
    let store = app.handles.store.as_ref();
    let mut params = window.params();
    if q.is_empty() {
        let ids = search::window_ids(&params, None, None)?;
        return records::browse(store, access, order, ids, RECORDS_PER_PAGE, cursor);
    }
    params.insert("q".to_string(), q.to_string());
    params.insert("limit".to_string(), RECORDS_PER_PAGE.to_string());
    // The whole history unless a date says otherwise, not the API's default 30 days: a
    // browser is for finding things.
    params
        .entry("start".to_string())
        .or_insert_with(|| "1970-01-01".to_string());
    if let Some(cursor) = cursor {
        params.insert("cursor".to_string(), cursor.to_string());
    }
    let request = search::parse_request(&params, access.partition, app.handles.now())?;
    search::search(store, app.search.as_deref(), access.partition, &request)
}

/// `GET /dashboard/endpoints/{slug}/records?environment=&q=&from=&to=&order=&cursor=`.
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
    let typed = |name: &str| {
        params
            .get(name)
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let (from, to) = (typed("from"), typed("to"));
    let (window, order, filters) =
        match Window::read(&params).and_then(|window| Ok((window, order_param(&params)?))) {
            Ok((window, order)) => (window, order, Ok(())),
            Err(err) => (Window::default(), ScanOrder::NewestFirst, Err(err)),
        };
    // A search is newest first whatever the order says (the search service walks that way).
    let oldest_first = order == ScanOrder::OldestFirst && q.is_empty();
    let json = filters.and_then(|()| records_page(app, &access, &q, &window, order, cursor));
    let (page, filter_error) = match json {
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
    let order_text = if oldest_first { "oldest" } else { "" };
    let mut pager = Pager::new(
        &format!("{}/records", head.path()),
        &[
            ("environment", environment.as_str()),
            ("q", &q),
            ("from", &from),
            ("to", &to),
            ("order", order_text),
        ],
        cursor,
        page.pagination.next_cursor,
    );
    if oldest_first {
        pager = pager.oldest_first();
    }
    let status = match filter_error {
        Some(_) => http::StatusCode::BAD_REQUEST,
        None => http::StatusCode::OK,
    };
    let schema = access.endpoint.schema.as_deref().map(TopLevel::of);
    let rows: Vec<table::Record> = page
        .data
        .iter()
        .map(|r| table::Record {
            id: r.id.clone(),
            created_at: r.created_at.clone(),
            updated_at: r.updated_at.clone(),
            payload: &r.payload,
        })
        .collect();
    let mut export_params: Vec<(&'static str, String)> = Vec::new();
    export_params.extend(window.start.clone().map(|v| ("start", v)));
    export_params.extend(window.end.clone().map(|v| ("end", v)));
    export_params.push((
        "order",
        if oldest_first { "asc" } else { "desc" }.to_string(),
    ));
    let page = RecordsPage {
        layout: user.layout(app, format!("{} · Records", head.ep.name), "endpoints", req),
        can_create: may_write(app, &user, slug, environment, Permission::Create),
        head,
        environment: environment.as_str(),
        q,
        from,
        to,
        oldest_first,
        export_params,
        filter_error,
        table: table::table(&rows, schema.as_ref()),
        pager,
        script: super::assets::records_js_url(),
    };
    render_with(status, &page)
}

/// `GET /dashboard/endpoints/{slug}/records/export?environment=&q=&start=&end=&order=&format=`:
/// what the records table shows (its environment, its search over the whole history or its
/// dates, its order), every record of it, as a CSV (the default) or NDJSON file. It is the
/// API's export; the session and the member's read access are checked again while it runs.
pub async fn export(app: &App, req: &mut Request, slug: &str) -> Outcome {
    let (user, _, access) = reading(app, req, slug)?;
    let shown = query_params(&req.query);
    let mut params = HashMap::new();
    params.insert(
        "format".to_string(),
        shown
            .get("format")
            .cloned()
            .unwrap_or_else(|| "csv".to_string()),
    );
    for name in ["q", "start", "end", "order"] {
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
    can_edit: bool,
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
    let deliveries = newest_rows(app, &user, slug, environment, &of_record, RECORD_DELIVERIES)?;
    let page = RecordPage {
        layout: user.layout(app, format!("Record {}", record.id), "endpoints", req),
        can_delete: may_write(app, &user, slug, environment, Permission::Delete),
        can_edit: may_write(app, &user, slug, environment, Permission::Replace),
        head,
        environment: environment.as_str(),
        payload: Pretty::of(record.payload.get()),
        id: record.id,
        created_at: record.created_at,
        updated_at: record.updated_at,
        deliveries,
    };
    render(&page)
}

/// The webhook context of a write a member makes from the dashboard (no caller webhook:
/// those are asked for by a data call's headers).
fn member_hooks(access: &DataAccess, req: &Request, at: crate::core::clock::Timestamp) -> Hooks {
    Hooks {
        endpoint_slug: access.endpoint.slug.clone(),
        environment: access.environment,
        at,
        caller: None,
        trace: req.trace,
    }
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
    let hooks = member_hooks(&access, req, app.handles.now());
    records::delete_as_member(&app.ingest, &app.handles, &access, &user.account, id, hooks).await?;
    Ok(redirect(&format!(
        "/dashboard/endpoints/{slug}/records?environment={}&done=record-deleted",
        environment.as_str()
    )))
}
