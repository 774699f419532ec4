//! The Erase form of the Records tab, `/dashboard/endpoints/{slug}/erasures` (the endpoint's
//! owner only): erasing every record of one environment that mentions one person, in two
//! steps, then following the erasure; on top of `domain::erasures`, as the management API's
//! `…/erasures` is.
//!
//! 1. **Count matches** (`POST …/erasures/count`) is a dry run: the page comes back with the
//!    count and the newest matches' ids.
//! 2. **Erase** (`POST …/erasures`) takes the count typed by the owner, which the domain
//!    checks against a fresh count as it starts the erasure (else refused, nothing erased,
//!    the confirmation shown again with the count as it is now); then its page shows its
//!    progress.
//!
//! The query is usually the very identifier being erased (an e-mail address): it travels only
//! in form bodies and pages, never in a URL (which lands in logs and browser history).

use askama::Template;

use super::endpoints::EndpointHead;
use super::form::Form;
use super::page::{FailedForm, Failure, Layout, Outcome, environment, redirect, render};
use super::visitor::{User, signed_in, user_form};
use crate::core::clock::{MICROS_PER_SECOND, Timestamp, parse_date_or_rfc3339};
use crate::domain::erasures::{self, DryRun, ErasureRequest, ErasureView, Started};
use crate::domain::error::Error;
use crate::http::app::App;
use crate::http::reply::query_params;
use crate::http::request::Request;
use crate::store::{Environment, ErasureState};

/// What the Erase form holds, as typed.
struct Fields {
    q: String,
    /// UTC dates (`YYYY-MM-DD`), both days included; empty for an open end.
    start: String,
    end: String,
    notify: bool,
}

impl Fields {
    /// A fresh form: no window, notifying.
    fn blank() -> Fields {
        Fields {
            q: String::new(),
            start: String::new(),
            end: String::new(),
            notify: true,
        }
    }

    fn of(form: &Form) -> Fields {
        Fields {
            q: form.text("q").to_string(),
            start: form.text("start").to_string(),
            end: form.text("end").to_string(),
            notify: form.checked("notify"),
        }
    }

    /// The domain's request for these fields. The form's end is a day, included whole (the
    /// API's date means that day's 00:00). `expected`: the count the owner typed, which the
    /// domain checks against the records matching when the erasure starts.
    fn request(
        &self,
        environment: Environment,
        dry_run: bool,
        expected: Option<u64>,
    ) -> ErasureRequest {
        let given = |text: &str| Some(text.trim().to_string()).filter(|t| !t.is_empty());
        let end = given(&self.end).map(|end| end_of_day(&end).unwrap_or(end));
        ErasureRequest {
            environment: environment.as_str().to_string(),
            q: self.q.trim().to_string(),
            start: given(&self.start),
            end,
            dry_run,
            notify: self.notify,
            expected,
        }
    }
}

/// The last instant of the UTC day `date` (`YYYY-MM-DD`), as RFC 3339; `None` for any other
/// text (left to the domain to refuse or take).
fn end_of_day(date: &str) -> Option<String> {
    let midnight = parse_date_or_rfc3339(date).filter(|_| date.len() == 10)?;
    Some(Timestamp(midnight.as_micros() + 86_400 * MICROS_PER_SECOND - 1).to_rfc3339())
}

/// An erasure as the pages show it.
struct ErasureRow {
    view: ErasureView,
    /// The state in words and its chip's class.
    state: &'static str,
    chip: &'static str,
}

impl From<ErasureView> for ErasureRow {
    fn from(view: ErasureView) -> ErasureRow {
        let (state, chip) = match view.state {
            ErasureState::Running => ("Running", "pending"),
            ErasureState::Finished => ("Finished", "ok"),
            ErasureState::Failed => ("Failed", "danger"),
        };
        ErasureRow { view, state, chip }
    }
}

#[derive(Template)]
#[template(path = "dashboard/erasures.html")]
struct ErasuresPage {
    layout: Layout,
    head: EndpointHead,
    environment: &'static str,
    /// The other environment (a link to its Erase form).
    other_environment: &'static str,
    count_action: String,
    erase_action: String,
    fields: Fields,
    /// The count of `fields`, once counted: the confirmation step.
    counted: Option<DryRun>,
    erasures: Vec<ErasureRow>,
}

impl ErasuresPage {
    /// `n` records, in words.
    fn records(&self, n: &u64) -> String {
        match n {
            1 => "1 record".to_string(),
            n => format!("{n} records"),
        }
    }
}

/// The Erase page of `slug` for `user`, with the form holding `fields` and, when counted,
/// the confirmation step.
fn erase_page(
    app: &App,
    req: &Request,
    user: &User,
    slug: &str,
    fields: Fields,
    counted: Option<DryRun>,
) -> Outcome {
    let environment = environment(&query_params(&req.query))?;
    // The owner check comes first: it refuses collaborators before anything is read.
    let erasures = erasures::list(&app.endpoints, &user.account, slug)?;
    let head = EndpointHead::load(app, user, slug, "records")?.viewing(environment);
    let base = format!("{}/erasures", head.path());
    let page = ErasuresPage {
        layout: user.layout(
            app,
            format!("{} · Erase records", head.ep.name),
            "endpoints",
            req,
        ),
        environment: environment.as_str(),
        other_environment: match environment {
            Environment::Sandbox => Environment::Production.as_str(),
            Environment::Production => Environment::Sandbox.as_str(),
        },
        count_action: format!("{base}/count"),
        erase_action: base,
        head,
        fields,
        counted,
        erasures: erasures.into_iter().map(ErasureRow::from).collect(),
    };
    render(&page)
}

/// The count of `fields` in `environment` (a dry run).
fn count_of(
    app: &App,
    user: &User,
    slug: &str,
    request: ErasureRequest,
) -> Result<DryRun, Failure> {
    match erasures::start(
        &app.endpoints,
        app.search.as_deref(),
        &user.account,
        slug,
        request,
    )? {
        Started::DryRun(counted) => Ok(counted),
        Started::Running(_) => Err(Error::Internal("a dry run started an erasure".into()).into()),
    }
}

/// `GET /dashboard/endpoints/{slug}/erasures?environment=`: the Erase form and the endpoint's
/// erasures. A refused form comes back here (`dashboard::refused`) with what was typed; a
/// refused confirmation with the count as it is now.
pub fn page(app: &App, req: &Request, slug: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let Some(failed) = req.extensions.get::<FailedForm>() else {
        return erase_page(app, req, &user, slug, Fields::blank(), None);
    };
    let fields = Fields::of(&failed.form);
    let counted = if failed.action.ends_with("/count") {
        None
    } else {
        let environment = environment(&query_params(&req.query))?;
        Some(count_of(
            app,
            &user,
            slug,
            fields.request(environment, true, None),
        )?)
    };
    erase_page(app, req, &user, slug, fields, counted)
}

/// `POST …/erasures/count?environment=`: step 1, the dry run; answers with the page (the
/// query cannot go into a redirect's URL).
pub async fn count(app: &App, req: &mut Request, slug: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let form = user_form(app, req, &user).await?;
    let environment = environment(&query_params(&req.query))?;
    let fields = Fields::of(&form);
    let counted = count_of(app, &user, slug, fields.request(environment, true, None))?;
    erase_page(app, req, &user, slug, fields, Some(counted))
}

/// `POST …/erasures?environment=`: step 2. The typed `count` must be the number of records
/// the fields match when the erasure starts (`ErasureRequest::expected`: refused otherwise,
/// nothing erased). Then on to the erasure's page.
pub async fn erase(app: &App, req: &mut Request, slug: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let form = user_form(app, req, &user).await?;
    let environment = environment(&query_params(&req.query))?;
    let fields = Fields::of(&form);
    let typed = form
        .text("count")
        .trim()
        .parse::<u64>()
        .ok()
        .filter(|n| *n > 0);
    let Some(expected) = typed else {
        return Err(Error::InvalidRequest(
            "Type the number of matching records to erase them. Nothing was erased.".into(),
        )
        .into());
    };
    let request = fields.request(environment, false, Some(expected));
    match erasures::start(
        &app.endpoints,
        app.search.as_deref(),
        &user.account,
        slug,
        request,
    )? {
        Started::Running(view) => Ok(redirect(&format!(
            "/dashboard/endpoints/{slug}/erasures/{}?done=erasure-started",
            view.id
        ))),
        Started::DryRun(_) => Err(Error::Internal("an erasure ran dry".into()).into()),
    }
}

#[derive(Template)]
#[template(path = "dashboard/erasure.html")]
struct ErasurePage {
    layout: Layout,
    head: EndpointHead,
    erasure: ErasureRow,
}

/// `GET …/erasures/{id}`: one erasure and its progress.
pub fn erasure(app: &App, req: &Request, slug: &str, id: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let view = erasures::get(&app.endpoints, &user.account, slug, id)?;
    let head = EndpointHead::load(app, &user, slug, "records")?.viewing(view.environment);
    let page = ErasurePage {
        layout: user.layout(app, format!("Erasure {}", view.id), "endpoints", req),
        head,
        erasure: ErasureRow::from(view),
    };
    render(&page)
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_end_date_includes_its_whole_day() {
        assert_eq!(
            super::end_of_day("2026-03-05").as_deref(),
            Some("2026-03-05T23:59:59.999999Z")
        );
        assert_eq!(super::end_of_day("2026-03-05T10:00:00Z"), None);
        assert_eq!(super::end_of_day("tomorrow"), None);
    }
}
