//! The record editor: `…/records/new` creates a record and `…/records/{id}/edit` replaces
//! one, from a JSON editor (a monospace text area). Its script checks the JSON's syntax, the
//! required fields and the top-level types of the endpoint's schema before sending; the
//! server then checks it for real, through the API's own `records::create` and
//! `records::replace` (payload rules, size limit, schema), queues it like an API write (so
//! webhooks announce it) and notes it in the audit log with who made it. A refusal shows the
//! editor again with the reason and the text as typed.

use askama::Template;

use super::{ApiRecord, member_hooks, parse, reading};
use crate::domain::endpoints::DataAccess;
use crate::domain::records::{self, MAX_PAYLOAD_BYTES, parse_record_id};
use crate::domain::schema::TopLevel;
use crate::http::app::App;
use crate::http::dashboard::endpoints::EndpointHead;
use crate::http::dashboard::page::{
    Failure, Layout, Outcome, Pretty, environment, redirect, render,
};
use crate::http::dashboard::visitor::{User, large_user_form, signed_in};
use crate::http::reply::query_params;
use crate::http::request::Request;
use crate::store::Permission;

/// The largest editor form: a payload at the limit, every byte of it percent-encoded, and
/// the CSRF token.
const MAX_FORM_BYTES: usize = 3 * MAX_PAYLOAD_BYTES + 4096;

#[derive(Template)]
#[template(path = "dashboard/record_editor.html")]
struct EditorPage {
    layout: Layout,
    head: EndpointHead,
    environment: &'static str,
    /// The path the form posts to (its environment goes in the query).
    action: String,
    /// The record replaced; `None` for a new one.
    record_id: Option<String>,
    /// The text the editor starts with.
    payload: String,
    /// What the script checks before sending, as JSON (see `records.js`).
    checks: String,
    max_bytes: usize,
    script: &'static str,
}

/// The editor: of a new record (`record` is `None`) or of the stored record `record`, for a
/// member who may write with `needed`.
fn editor_page(
    app: &App,
    req: &Request,
    slug: &str,
    needed: Permission,
    record: Option<&str>,
) -> Outcome {
    let user = signed_in(app, req)?;
    let environment = environment(&query_params(&req.query))?;
    let head = EndpointHead::load(app, &user, slug, "records")?.viewing(environment);
    let access = writing(app, &user, slug, environment, needed)?;
    let top = access
        .endpoint
        .schema
        .as_deref()
        .map(TopLevel::of)
        .unwrap_or_default();
    let (action, record_id, payload, title) = match record {
        Some(id) => {
            // The editor shows the stored payload: reading it takes the read permission.
            let (_, _, access) = reading(app, req, slug)?;
            let id = parse_record_id(id)?;
            let stored: ApiRecord = parse(&records::get(app.handles.store.as_ref(), &access, id)?)?;
            (
                format!("{}/records/{id}/edit", head.path()),
                Some(stored.id.clone()),
                Pretty::of(stored.payload.get()).text,
                format!("Edit record {}", stored.id),
            )
        }
        None => (
            format!("{}/records/new", head.path()),
            None,
            skeleton(&top, &access.endpoint.required_fields),
            "New record".to_string(),
        ),
    };
    let layout = user.layout(app, title, "endpoints", req);
    let payload = layout.kept(&action, "payload", &payload).to_string();
    let page = EditorPage {
        checks: checks(&top, &access.endpoint.required_fields),
        layout,
        head,
        environment: environment.as_str(),
        action,
        record_id,
        payload,
        max_bytes: MAX_PAYLOAD_BYTES,
        script: super::super::assets::records_js_url(),
    };
    render(&page)
}

/// The member's access for a write with `needed` (403 without the permission, or for
/// production before the endpoint is deployed).
fn writing(
    app: &App,
    user: &User,
    slug: &str,
    environment: crate::store::Environment,
    needed: Permission,
) -> Result<DataAccess, Failure> {
    let access = app
        .endpoints
        .member_access(&user.account, slug, environment, needed)?;
    records::member_may_write(&access.endpoint, access.environment)?;
    Ok(access)
}

/// A new record's starting text: an object with the fields the endpoint requires (by its
/// required fields and its schema's `required`), each a placeholder of its schema type.
fn skeleton(top: &TopLevel, required_fields: &[String]) -> String {
    let mut names: Vec<&String> = Vec::new();
    for name in required_fields.iter().chain(&top.required) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if names.is_empty() {
        return "{}".to_string();
    }
    let members: Vec<String> = names
        .iter()
        .map(|name| {
            let types = top
                .properties
                .iter()
                .find(|(property, _)| property == *name)
                .map(|(_, types)| types.as_slice())
                .unwrap_or_default();
            let placeholder = match types.first().map(String::as_str) {
                Some("string") => "\"\"",
                Some("integer" | "number") => "0",
                Some("boolean") => "false",
                Some("array") => "[]",
                Some("object") => "{}",
                _ => "null",
            };
            format!(
                "  {}: {placeholder}",
                serde_json::Value::from(name.as_str())
            )
        })
        .collect();
    format!("{{\n{}\n}}", members.join(",\n"))
}

/// What the editor's script checks, as JSON: the fields that must be present (`required`),
/// those that must not be null either (the endpoint's required fields), and each schema
/// property's allowed types.
fn checks(top: &TopLevel, required_fields: &[String]) -> String {
    let types: serde_json::Map<String, serde_json::Value> = top
        .properties
        .iter()
        .filter(|(_, types)| !types.is_empty())
        .map(|(name, types)| (name.clone(), serde_json::json!(types)))
        .collect();
    serde_json::json!({
        "required": top.required,
        "notNull": required_fields,
        "types": types,
        "maxBytes": MAX_PAYLOAD_BYTES,
    })
    .to_string()
}

/// `GET /dashboard/endpoints/{slug}/records/new?environment=`.
pub fn new_page(app: &App, req: &Request, slug: &str) -> Outcome {
    editor_page(app, req, slug, Permission::Create, None)
}

/// `GET /dashboard/endpoints/{slug}/records/{id}/edit?environment=`.
pub fn edit_page(app: &App, req: &Request, slug: &str, id: &str) -> Outcome {
    editor_page(app, req, slug, Permission::Replace, Some(id))
}

/// The posted editor: the member, their write access and the payload's bytes.
async fn posted(
    app: &App,
    req: &mut Request,
    slug: &str,
    needed: Permission,
) -> Result<(User, DataAccess, Vec<u8>), Failure> {
    let user = signed_in(app, req)?;
    let form = large_user_form(app, req, &user, MAX_FORM_BYTES).await?;
    let environment = environment(&query_params(&req.query))?;
    let access = writing(app, &user, slug, environment, needed)?;
    let payload = form.text("payload").as_bytes().to_vec();
    Ok((user, access, payload))
}

/// `POST /dashboard/endpoints/{slug}/records/new?environment=`: creates the record as
/// `POST …/data/{slug}` would, audited as `record.created`.
pub async fn save_new(app: &App, req: &mut Request, slug: &str) -> Outcome {
    let (user, access, payload) = posted(app, req, slug, Permission::Create).await?;
    // As the API's create: its time is its id's, and poll counts it in flight until stored.
    let stamp = app.in_flight.stamp(app.handles.clock.as_ref());
    let hooks = member_hooks(&access, req, stamp.at);
    let accepted = records::create_as_member(
        &app.ingest,
        &app.handles,
        &app.endpoints.sealer,
        &access,
        &user.account,
        hooks,
        &payload,
    )
    .await?;
    drop(stamp);
    Ok(saved(slug, &access, &accepted.id, "record-created"))
}

/// `POST /dashboard/endpoints/{slug}/records/{id}/edit?environment=`: replaces the record's
/// payload as `PUT …/data/{slug}/{id}` would, audited as `record.replaced`.
pub async fn save_edit(app: &App, req: &mut Request, slug: &str, id: &str) -> Outcome {
    let (user, access, payload) = posted(app, req, slug, Permission::Replace).await?;
    let id = parse_record_id(id)?;
    // Only what exists can be replaced from here.
    records::get(app.handles.store.as_ref(), &access, id)?;
    let hooks = member_hooks(&access, req, app.handles.now());
    let accepted = records::replace_as_member(
        &app.ingest,
        &app.handles,
        &access,
        &user.account,
        id,
        hooks,
        &payload,
    )
    .await?;
    Ok(saved(slug, &access, &accepted.id, "record-replaced"))
}

/// The redirect after a saved write: the record's page, with the flash `done`.
fn saved(slug: &str, access: &DataAccess, id: &str, done: &str) -> warp::reply::Response {
    redirect(&format!(
        "/dashboard/endpoints/{slug}/records/{id}?environment={}&done={done}",
        access.environment.as_str()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_records_text_has_the_required_fields_with_placeholders_of_their_types() {
        let top = TopLevel::of(
            r#"{"required":["sku","qty","tags"],"properties":{"sku":{"type":"string"},"qty":{"type":"integer"},"tags":{"type":"array"}}}"#,
        );
        assert_eq!(
            skeleton(&top, &["customer".to_string(), "sku".to_string()]),
            "{\n  \"customer\": null,\n  \"sku\": \"\",\n  \"qty\": 0,\n  \"tags\": []\n}"
        );
        assert_eq!(skeleton(&TopLevel::default(), &[]), "{}");
    }
}
