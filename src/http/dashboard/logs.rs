//! The log tabs of an endpoint: the request log (filter by environment and status class,
//! paginated), the webhook delivery log with each delivery's attempts and manual redelivery,
//! and this month's usage with the requests-per-day chart and the webhook success rate.
//! Every list is one page at a time (a cursor from the service), never the whole log.

use askama::Template;

use super::chart;
use super::endpoints::EndpointHead;
use super::page::{Layout, Outcome, Pager, Pretty, environment, redirect, render};
use super::visitor::{User, signed_in, user_form};
use crate::domain::error::{Error, Missing};
use crate::domain::usage::{self, MonthUsage};
use crate::domain::webhooks::log::{
    self, AttemptView, DeliveryFilter, DeliveryView, DeliveryViewer, Outcomes, ShownState, Withheld,
};
use crate::http::app::App;
use crate::http::reply::id_param;
use crate::http::reply::query_params;
use crate::http::request::Request;
use crate::store::{DeliveryState, Environment, Partition};
use crate::workers::request_log::{self, EntryView, HolderView, Naming};

/// Entries per page of the request log.
const REQUESTS_PER_PAGE: usize = 50;
/// Deliveries per page of the delivery log.
const DELIVERIES_PER_PAGE: usize = 25;
/// The success rate counts at most this many of the month's newest deliveries.
const OUTCOMES_CAP: usize = 1_000;

/// A request-log entry as the pages show it.
struct EntryRow {
    entry: EntryView,
    /// Whose key made the call: an e-mail address, or the owner's default key.
    who: String,
    /// For an error, its body as the API answered it, as far as the log keeps it (code and
    /// message; no body of a call is kept).
    error_body: Option<Pretty>,
}

impl EntryRow {
    fn new(entry: EntryView) -> EntryRow {
        let who = match &entry.holder {
            None => String::new(),
            Some(HolderView {
                email: Some(email), ..
            }) => email.clone(),
            // Gone, or another collaborator's call seen by a collaborator.
            Some(HolderView {
                account_id: Some(id),
                ..
            }) => format!("collaborator account {id}"),
            Some(_) => format!("owner default key ({})", entry.environment),
        };
        let error_body = entry.code.as_ref().map(|code| {
            let body = serde_json::json!({"error": {
                "code": code,
                "message": entry.message.as_deref().unwrap_or_default(),
                "request_id": entry.request_id,
            }});
            Pretty::of(&body.to_string())
        });
        EntryRow {
            entry,
            who,
            error_body,
        }
    }
}

/// One page of a filtered log (requests or deliveries), as its dashboard page lists it.
struct LogListing<T> {
    environment: Environment,
    entries: Vec<T>,
    /// Why the filter was refused; nothing is then listed.
    error: Option<String>,
    pager: Pager,
}

impl<T> LogListing<T> {
    /// What the log page `tab` of `head`, shown from `cursor` with the form's `filters`, lists
    /// for `listed` (the environment, its entries and the next page's cursor). A refused
    /// filter is said on the page (in the sandbox, listing nothing); any other error fails it.
    fn shown(
        listed: Result<(Environment, Vec<T>, Option<String>), Error>,
        head: &EndpointHead,
        tab: &str,
        filters: &[(&str, &str)],
        cursor: Option<&str>,
    ) -> Result<LogListing<T>, Error> {
        let (environment, entries, next_cursor, error) = match listed {
            Ok((environment, entries, next_cursor)) => (environment, entries, next_cursor, None),
            Err(err @ Error::InvalidParameter { .. }) => (
                Environment::Sandbox,
                Vec::new(),
                None,
                Some(err.to_string()),
            ),
            Err(err) => return Err(err),
        };
        let mut params = vec![("environment", environment.as_str())];
        params.extend_from_slice(filters);
        let pager = Pager::new(
            &format!("{}/{tab}", head.path()),
            &params,
            cursor,
            next_cursor,
        );
        Ok(LogListing {
            environment,
            entries,
            error,
            pager,
        })
    }
}

/// The request log's filter form, as sent (shown back as typed, even when refused).
#[derive(Default)]
struct RequestFilterForm {
    status: String,
    code: String,
    method: String,
    holder: String,
    request_id: String,
}

#[derive(Template)]
#[template(path = "dashboard/requests.html")]
struct RequestsPage {
    layout: Layout,
    head: EndpointHead,
    environment: &'static str,
    form: RequestFilterForm,
    /// The collaborators to choose from, as account id and e-mail address.
    holders: Vec<(u64, String)>,
    /// Why the filter was refused; the page then lists nothing.
    error: Option<String>,
    entries: Vec<EntryRow>,
    pager: Pager,
}

/// `GET /dashboard/endpoints/{slug}/requests?environment=&status=&code=&method=&holder=&request_id=&cursor=`.
/// A refused filter is said on the page, above the form it came from.
pub fn requests(app: &App, req: &Request, slug: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let params = query_params(&req.query);
    let mut head = EndpointHead::load(app, &user, slug, "requests")?;
    head.viewing = environment(&params).ok();
    let (endpoint, membership) = app.endpoints.member_row(&user.account, slug)?;
    let naming = Naming::of(user.account.id, &membership);
    let text = |name: &str| params.get(name).cloned().unwrap_or_default();
    let form = RequestFilterForm {
        status: text("status"),
        code: text("code"),
        method: text("method"),
        holder: text("holder"),
        request_id: text("request_id"),
    };
    let cursor = params.get("cursor").map(String::as_str);
    let listed = environment(&params).and_then(|environment| {
        let filter = request_log::parse_filter(&params)?;
        // The search box sends a request id alone: it is looked for in both environments.
        if let (Some(id), None) = (&filter.request_id, params.get("environment")) {
            let partitions = [Environment::Sandbox, Environment::Production]
                .map(|environment| Partition::new(endpoint.id, environment));
            return match app
                .request_log
                .entry(app.handles.store.as_ref(), naming, partitions, id)
            {
                Ok(entry) => {
                    let environment = Environment::parse(entry.environment).unwrap_or(environment);
                    Ok((environment, vec![entry], None))
                }
                Err(Error::NotFound(_)) => Ok((environment, Vec::new(), None)),
                Err(err) => Err(err),
            };
        }
        let page = app.request_log.list(
            app.handles.store.as_ref(),
            naming,
            Partition::new(endpoint.id, environment),
            REQUESTS_PER_PAGE,
            cursor,
            &filter,
        )?;
        Ok((environment, page.data, page.pagination.next_cursor))
    });
    let listing = LogListing::shown(
        listed,
        &head,
        "requests",
        &[
            ("status", &form.status),
            ("code", &form.code),
            ("method", &form.method),
            ("holder", &form.holder),
            ("request_id", &form.request_id),
        ],
        cursor,
    )?;
    let page = RequestsPage {
        layout: user.layout(
            app,
            format!("{} · Requests", head.ep.name),
            "endpoints",
            req,
        ),
        holders: request_log::holders(app.handles.store.as_ref(), naming, endpoint.id)?,
        head,
        environment: listing.environment.as_str(),
        form,
        error: listing.error,
        entries: listing.entries.into_iter().map(EntryRow::new).collect(),
        pager: listing.pager,
    };
    render(&page)
}

#[derive(Template)]
#[template(path = "dashboard/request.html")]
struct RequestPage {
    layout: Layout,
    head: EndpointHead,
    row: EntryRow,
}

/// `GET /dashboard/endpoints/{slug}/requests/{request_id}`: one entry, in either environment.
pub fn request(app: &App, req: &Request, slug: &str, request_id: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let mut head = EndpointHead::load(app, &user, slug, "requests")?;
    let (endpoint, membership) = app.endpoints.member_row(&user.account, slug)?;
    let entry = app.request_log.entry(
        app.handles.store.as_ref(),
        Naming::of(user.account.id, &membership),
        [Environment::Sandbox, Environment::Production].map(|e| Partition::new(endpoint.id, e)),
        request_id,
    )?;
    head.viewing = Environment::parse(entry.environment);
    let page = RequestPage {
        layout: user.layout(app, format!("Request {request_id}"), "endpoints", req),
        head,
        row: EntryRow::new(entry),
    };
    render(&page)
}

/// A delivery's state as a chip: its CSS class and its words (never colour alone).
pub struct Chip {
    pub class: &'static str,
    pub words: String,
}

impl Chip {
    fn of(d: &DeliveryView) -> Chip {
        let (class, words) = match d.shown {
            ShownState::Delivered => ("ok", "Delivered".to_string()),
            ShownState::Failing => (
                "warn",
                format!("Failing · {} of {} attempts", d.attempts, d.max_attempts),
            ),
            ShownState::Pending => ("pending", "Pending".to_string()),
            ShownState::GivenUp => (
                "danger",
                format!("Given up · {} of {} attempts", d.attempts, d.max_attempts),
            ),
            ShownState::Skipped => ("muted", "Skipped".to_string()),
            ShownState::Cancelled => ("muted", "Cancelled".to_string()),
        };
        Chip { class, words }
    }
}

/// A delivery as the pages show it (the delivery log, a record's deliveries).
pub struct DeliveryRow {
    pub delivery: DeliveryView,
    pub chip: Chip,
}

impl DeliveryRow {
    pub fn new(delivery: DeliveryView) -> DeliveryRow {
        DeliveryRow {
            chip: Chip::of(&delivery),
            delivery,
        }
    }

    /// What the viewer is not shown of the URL, in words (beside what is shown of it).
    pub fn url_note(&self) -> Option<&'static str> {
        match (&self.delivery.url, self.withheld(Withheld::Url)) {
            (None, _) => Some("withheld: the owner's subscription"),
            (Some(_), true) => Some("path and query withheld"),
            (Some(_), false) => None,
        }
    }

    fn withheld(&self, part: Withheld) -> bool {
        self.delivery.withheld.contains(&part)
    }
}

/// The newest `limit` deliveries of `filter` in `environment`, as `user` may see them: the
/// short lists of a record's page and a subscription's page.
pub fn newest_rows(
    app: &App,
    user: &User,
    slug: &str,
    environment: Environment,
    filter: &DeliveryFilter,
    limit: usize,
) -> Result<Vec<DeliveryRow>, Error> {
    let viewer = DeliveryViewer::member(&app.endpoints, &user.account, slug)?;
    let page = log::list(
        app.handles.store.as_ref(),
        &viewer,
        environment,
        filter,
        limit,
        None,
    )?;
    Ok(page.data.into_iter().map(DeliveryRow::new).collect())
}

/// The delivery log's filter form, as sent.
#[derive(Default)]
struct DeliveryFilterForm {
    state: String,
    kind: String,
    url: String,
}

#[derive(Template)]
#[template(path = "dashboard/deliveries.html")]
struct DeliveriesPage {
    layout: Layout,
    head: EndpointHead,
    environment: &'static str,
    form: DeliveryFilterForm,
    /// Why the filter was refused; the page then lists nothing.
    error: Option<String>,
    deliveries: Vec<DeliveryRow>,
    pager: Pager,
}

/// `GET /dashboard/endpoints/{slug}/deliveries?environment=&state=&kind=&url=&cursor=`. A
/// refused filter is said on the page, above the form it came from.
pub fn deliveries(app: &App, req: &Request, slug: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let params = query_params(&req.query);
    let mut head = EndpointHead::load(app, &user, slug, "deliveries")?;
    head.viewing = environment(&params).ok();
    let viewer = DeliveryViewer::member(&app.endpoints, &user.account, slug)?;
    let text = |name: &str| params.get(name).cloned().unwrap_or_default();
    let form = DeliveryFilterForm {
        state: text("state"),
        kind: text("kind"),
        url: text("url"),
    };
    let cursor = params.get("cursor").map(String::as_str);
    let listed = environment(&params).and_then(|environment| {
        let filter = log::DeliveryFilter::from_params(&params)?;
        let page = log::list(
            app.handles.store.as_ref(),
            &viewer,
            environment,
            &filter,
            DELIVERIES_PER_PAGE,
            cursor,
        )?;
        Ok((environment, page.data, page.pagination.next_cursor))
    });
    let listing = LogListing::shown(
        listed,
        &head,
        "deliveries",
        &[
            ("state", &form.state),
            ("kind", &form.kind),
            ("url", &form.url),
        ],
        cursor,
    )?;
    let page = DeliveriesPage {
        layout: user.layout(
            app,
            format!("{} · Deliveries", head.ep.name),
            "endpoints",
            req,
        ),
        head,
        environment: listing.environment.as_str(),
        form,
        error: listing.error,
        deliveries: listing.entries.into_iter().map(DeliveryRow::new).collect(),
        pager: listing.pager,
    };
    render(&page)
}

/// An attempt as the page shows it.
struct AttemptRow {
    attempt: AttemptView,
    response_body: Option<Pretty>,
}

#[derive(Template)]
#[template(path = "dashboard/delivery.html")]
struct DeliveryPage {
    layout: Layout,
    head: EndpointHead,
    row: DeliveryRow,
    /// The event body; `None` when withheld from the viewer.
    body: Option<Pretty>,
    attempts: Vec<AttemptRow>,
    /// The owner may retry a pending delivery now.
    can_retry: bool,
    /// The owner may redeliver a given-up, skipped or cancelled delivery.
    can_redeliver: bool,
}

/// `GET /dashboard/endpoints/{slug}/deliveries/{id}`: every attempt, as the viewer may see
/// them.
pub fn delivery(app: &App, req: &Request, slug: &str, id: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let id = id_param(id, Missing::Delivery)?;
    let viewer = DeliveryViewer::member(&app.endpoints, &user.account, slug)?;
    let detail = log::detail(app.handles.store.as_ref(), &viewer, id)?;
    let mut head = EndpointHead::load(app, &user, slug, "deliveries")?;
    head.viewing = Environment::parse(detail.delivery.environment);
    let state = detail.delivery.state;
    let page = DeliveryPage {
        layout: user.layout(app, format!("Delivery {id}"), "endpoints", req),
        can_retry: head.owner && state == DeliveryState::Pending,
        can_redeliver: head.owner && detail.delivery.redeliverable,
        head,
        body: detail.body.as_deref().map(Pretty::of),
        attempts: detail
            .attempt_log
            .into_iter()
            .map(|attempt| AttemptRow {
                response_body: attempt.response_body.as_deref().map(Pretty::of),
                attempt,
            })
            .collect(),
        row: DeliveryRow::new(detail.delivery),
    };
    render(&page)
}

/// What an owner's post does to one delivery.
#[derive(Clone, Copy)]
pub enum DeliveryAction {
    /// A given-up, skipped or cancelled delivery, with a fresh budget of attempts.
    Redeliver,
    /// A pending delivery's next attempt, now.
    Retry,
}

/// `POST …/deliveries/{id}/redeliver` and `…/retry` (owner).
pub async fn act(
    app: &App,
    req: &mut Request,
    slug: &str,
    id: &str,
    action: DeliveryAction,
) -> Outcome {
    let user = signed_in(app, req)?;
    user_form(app, req, &user).await?;
    let owner = DeliveryViewer::owner(&app.endpoints, &user.account, slug)?;
    let id = id_param(id, Missing::Delivery)?;
    let done = match action {
        DeliveryAction::Redeliver => {
            log::redeliver(&app.handles, &owner, id)?;
            "redelivered"
        }
        DeliveryAction::Retry => {
            log::retry_now(&app.handles, &owner, &user.account, id)?;
            "retried"
        }
    };
    Ok(redirect(&format!(
        "/dashboard/endpoints/{slug}/deliveries/{id}?done={done}"
    )))
}

/// Webhook outcomes of one environment this month, as the page shows them.
struct Rate {
    environment: &'static str,
    outcomes: Outcomes,
    /// Delivered among finished deliveries, in percent; `None` before any finished.
    percent: Option<u64>,
}

#[derive(Template)]
#[template(path = "dashboard/usage.html")]
struct UsagePage {
    layout: Layout,
    head: EndpointHead,
    month: String,
    this_month: Option<MonthUsage>,
    months: Vec<MonthUsage>,
    quota: Option<u64>,
    chart: String,
    rates: Vec<Rate>,
    outcomes_cap: usize,
}

/// `GET /dashboard/endpoints/{slug}/usage` (owner).
pub fn usage(app: &App, req: &Request, slug: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let head = EndpointHead::load(app, &user, slug, "usage")?;
    let endpoint = app.endpoints.owned_row(&user.account, slug)?;
    let now = app.handles.now();
    let month_start = now.start_of_month();
    let (year, month) = now.year_month();
    let month = format!("{year:04}-{month:02}");
    let days = app.usage.days(endpoint.id, month_start, now)?;
    let mut rates = Vec::new();
    for environment in [Environment::Sandbox, Environment::Production] {
        let outcomes = log::outcomes_since(
            app.handles.store.as_ref(),
            Partition::new(endpoint.id, environment),
            month_start,
            OUTCOMES_CAP,
        )?;
        let finished = outcomes.delivered + outcomes.given_up;
        rates.push(Rate {
            environment: environment.as_str(),
            percent: (finished > 0).then(|| outcomes.delivered * 100 / finished),
            outcomes,
        });
    }
    let mut months = app.usage.months(endpoint.id)?;
    let this_month = months
        .iter()
        .position(|m| m.month == month)
        .map(|i| months.remove(i));
    let page = UsagePage {
        layout: user.layout(app, format!("{} · Usage", head.ep.name), "endpoints", req),
        head,
        month,
        this_month,
        months,
        quota: usage::monthly_quota(&endpoint, &app.config.usage),
        chart: chart::requests_per_day(&days),
        rates,
        outcomes_cap: OUTCOMES_CAP,
    };
    render(&page)
}
