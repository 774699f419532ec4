//! The Webhooks tab (endpoint owner): each environment's subscriptions in a table (filter,
//! state, health, latest recovery), the form to add one and the caller webhooks' recovery;
//! and one page per subscription with its settings form, health, recovery, test event, recent
//! deliveries and delete. Every form of a subscription answers on its page.
//!
//! The first subscription is the spec's owner webhook. Saving a form changes what it shows and
//! keeps the rest (an empty auth value keeps the stored one).

use askama::Template;

use super::endpoints::EndpointHead;
use super::form::Form;
use super::logs::{DeliveryRow, newest_rows};
use super::page::{Failure, Layout, Outcome, Pretty, redirect, render};
use super::visitor::{signed_in, user_form};
use crate::domain::error::Error;
use crate::domain::webhooks::log::DeliveryFilter;
use crate::domain::webhooks::recovery::{self, RecoveryRequest};
use crate::domain::webhooks::subscriptions::{
    self, PendingDeliveries, RecoveryView, SubscriptionChange, SubscriptionConfig,
    SubscriptionView, Which,
};
use crate::http::app::App;
use crate::http::request::Request;
use crate::store::{Environment, EventType};
use crate::workers::dispatcher::probe::TestResult;

/// The newest deliveries a subscription's page lists.
const SUBSCRIPTION_DELIVERIES: usize = 10;

/// One environment's subscriptions and its caller webhooks' latest recovery.
struct Settings {
    environment: &'static str,
    subscriptions: Vec<SubscriptionView>,
    caller_recovery: Option<RecoveryView>,
}

#[derive(Template)]
#[template(path = "dashboard/webhooks.html")]
struct WebhooksPage {
    layout: Layout,
    head: EndpointHead,
    settings: Vec<Settings>,
    event_types: [&'static str; 3],
    /// The time now in UTC as the date pickers take it (`2026-11-20T08:00`).
    now_utc: String,
}

/// `GET /dashboard/endpoints/{slug}/webhooks`.
pub fn page(app: &App, req: &Request, slug: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let head = EndpointHead::load(app, &user, slug, "webhooks")?;
    let service = app.subscriptions();
    let mut settings = Vec::new();
    for environment in [Environment::Sandbox, Environment::Production] {
        settings.push(Settings {
            environment: environment.as_str(),
            subscriptions: service.list(&user.account, slug, environment)?.data,
            caller_recovery: recovery::caller_recovery(&service, &user.account, slug, environment)?,
        });
    }
    let page = WebhooksPage {
        layout: user.layout(
            app,
            format!("{} · Webhooks", head.ep.name),
            "endpoints",
            req,
        ),
        head,
        settings,
        event_types: EventType::ALL.map(EventType::as_str),
        now_utc: picker_now(app),
    };
    render(&page)
}

/// A test event just sent, shown on its subscription's page.
struct Tested {
    result: TestResult,
    /// The event's body, indented.
    pretty_body: Pretty,
}

#[derive(Template)]
#[template(path = "dashboard/webhook.html")]
struct SubscriptionPage {
    layout: Layout,
    head: EndpointHead,
    environment: &'static str,
    sub: SubscriptionView,
    /// It is the environment's first subscription, the spec's owner webhook.
    owner_webhook: bool,
    event_types: [&'static str; 3],
    tested: Option<Tested>,
    /// Its newest deliveries.
    deliveries: Vec<DeliveryRow>,
    now_utc: String,
}

impl SubscriptionPage {
    /// Where its forms post: `…/webhooks/{environment}/subscriptions/{id}` (which also saves).
    fn base(&self) -> String {
        format!(
            "/dashboard/endpoints/{}/webhooks/{}/subscriptions/{}",
            self.head.ep.slug, self.environment, self.sub.id
        )
    }

    /// Its rate limit as the form field shows it: empty for none.
    fn rate_text(&self) -> String {
        self.sub
            .rate_limit
            .map(|r| r.to_string())
            .unwrap_or_default()
    }

    /// Whether its filter names the event type `name` (the box is ticked).
    fn ticked(&self, name: &str) -> bool {
        self.sub.event_types.iter().any(|t| t.as_str() == name)
    }
}

/// `GET /dashboard/endpoints/{slug}/webhooks/{environment}/subscriptions/{id}`.
pub fn subscription_page(
    app: &App,
    req: &Request,
    slug: &str,
    environment: Environment,
    id: &str,
) -> Outcome {
    subscription_page_with(app, req, slug, environment, id, None)
}

fn subscription_page_with(
    app: &App,
    req: &Request,
    slug: &str,
    environment: Environment,
    id: &str,
    tested: Option<Tested>,
) -> Outcome {
    let user = signed_in(app, req)?;
    let head = EndpointHead::load(app, &user, slug, "webhooks")?.viewing(environment);
    // A path that names no subscription is a page that does not exist.
    let number = subscriptions::subscription_param(id).map_err(|_| Failure::NotFound)?;
    let listed = app
        .subscriptions()
        .list(&user.account, slug, environment)?
        .data;
    let id = subscriptions::subscription_id(number);
    let owner_webhook = listed.first().is_some_and(|first| first.id == id);
    let sub = listed
        .into_iter()
        .find(|sub| sub.id == id)
        .ok_or_else(|| Which::Id(number).missing())?;
    let of_subscription = DeliveryFilter {
        subscription: Some(number),
        ..DeliveryFilter::default()
    };
    let deliveries = newest_rows(
        app,
        &user,
        slug,
        environment,
        &of_subscription,
        SUBSCRIPTION_DELIVERIES,
    )?;
    let page = SubscriptionPage {
        layout: user.layout(
            app,
            format!(
                "{} · Webhooks · {id} ({})",
                head.ep.name,
                environment.as_str()
            ),
            "endpoints",
            req,
        ),
        head,
        environment: environment.as_str(),
        sub,
        owner_webhook,
        event_types: EventType::ALL.map(EventType::as_str),
        tested,
        deliveries,
        now_utc: picker_now(app),
    };
    render(&page)
}

/// `POST …/webhooks/{environment}/subscriptions/{id}/test`: sends a test event now and shows
/// the subscription's page with the receiver's answer.
pub async fn test_event(
    app: &App,
    req: &mut Request,
    slug: &str,
    environment: &str,
    id: &str,
) -> Outcome {
    let user = signed_in(app, req)?;
    user_form(app, req, &user).await?;
    let environment = subscriptions::environment_param(environment)?;
    let number = subscriptions::subscription_param(id)?;
    let result = app
        .send_test_event(&user.account, slug, environment, Which::Id(number))
        .await?;
    let tested = Tested {
        pretty_body: Pretty::of(&result.request_body),
        result,
    };
    subscription_page_with(app, req, slug, environment, id, Some(tested))
}

/// The Webhooks tab, saying `done`.
fn back(slug: &str, done: &str) -> Outcome {
    Ok(redirect(&format!(
        "/dashboard/endpoints/{slug}/webhooks?done={done}"
    )))
}

/// The page of the subscription `id` (`sub_N`), saying `done`.
fn back_to(slug: &str, environment: Environment, id: &str, done: &str) -> Outcome {
    Ok(redirect(&format!(
        "/dashboard/endpoints/{slug}/webhooks/{}/subscriptions/{id}?done={done}",
        environment.as_str()
    )))
}

/// A form field, trimmed; `None` when empty.
fn optional(form: &Form, name: &str) -> Option<String> {
    let text = form.text(name).trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The event boxes ticked; none (or all three) means every event.
fn event_types(form: &Form) -> Vec<String> {
    let ticked: Vec<String> = form.all("event_types").map(str::to_string).collect();
    match ticked.len() == EventType::ALL.len() {
        true => Vec::new(),
        false => ticked,
    }
}

/// The rate limit field: empty for none.
fn rate_limit(form: &Form) -> Result<Option<u32>, Error> {
    optional(form, "rate_limit")
        .map(|text| {
            text.parse::<u32>().map_err(|_| {
                Error::InvalidWebhook(
                    "the rate limit must be a whole number of deliveries a second".into(),
                )
            })
        })
        .transpose()
}

/// What a subscription's form changes: every field it shows.
fn change(form: &Form) -> Result<SubscriptionChange, Error> {
    let clear_auth = form.checked("clear_auth");
    Ok(SubscriptionChange {
        url: Some(form.text("url").to_string()),
        auth_header: match clear_auth {
            true => None,
            false => optional(form, "auth_header").map(Some),
        },
        auth_value: match clear_auth {
            true => Some(None),
            false => optional(form, "auth_value").map(Some),
        },
        enabled: Some(form.checked("enabled")),
        description: form.get("description").map(str::to_string),
        event_types: form.get("events_shown").map(|_| event_types(form)),
        rate_limit: form
            .get("rate_limit")
            .map(|_| rate_limit(form))
            .transpose()?,
    })
}

/// A new subscription from its form.
fn config(form: &Form) -> Result<SubscriptionConfig, Error> {
    Ok(SubscriptionConfig {
        url: form.text("url").to_string(),
        auth_header: optional(form, "auth_header"),
        auth_value: optional(form, "auth_value"),
        enabled: form.checked("enabled"),
        description: form.text("description").to_string(),
        event_types: event_types(form),
        rate_limit: rate_limit(form)?,
    })
}

/// `POST …/webhooks/{environment}/subscriptions`: adds a subscription.
pub async fn create(app: &App, req: &mut Request, slug: &str, environment: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let form = user_form(app, req, &user).await?;
    let environment = subscriptions::environment_param(environment)?;
    let added = app
        .subscriptions()
        .create(&user.account, slug, environment, config(&form)?)
        .await?;
    back_to(slug, environment, &added.id, "subscription-added")
}

/// What a subscription's own form asks: `change` (save), `delete` or `recover`.
pub enum Action {
    Change,
    Delete,
    Recover,
}

/// `POST …/webhooks/{environment}/subscriptions/{id}[/delete|/recover]`.
pub async fn subscription(
    app: &App,
    req: &mut Request,
    slug: &str,
    environment: &str,
    id: &str,
    action: Action,
) -> Outcome {
    let user = signed_in(app, req)?;
    let form = user_form(app, req, &user).await?;
    let environment = subscriptions::environment_param(environment)?;
    let number = subscriptions::subscription_param(id)?;
    let which = Which::Id(number);
    let id = &subscriptions::subscription_id(number);
    let service = app.subscriptions();
    match action {
        Action::Change => {
            service
                .update(&user.account, slug, environment, which, change(&form)?)
                .await?;
            back_to(slug, environment, id, "subscription-saved")
        }
        Action::Delete => {
            let pending = match form.checked("cancel_pending") {
                true => PendingDeliveries::Cancel,
                false => PendingDeliveries::Keep,
            };
            service.delete(&user.account, slug, environment, which, pending)?;
            // Its page is gone: the tab says what became of its deliveries.
            back(
                slug,
                match pending {
                    PendingDeliveries::Cancel => "subscription-removed-cancelled",
                    PendingDeliveries::Keep => "subscription-removed",
                },
            )
        }
        Action::Recover => {
            let request = recovery_request(&form);
            recovery::start(
                &service,
                &user.account,
                slug,
                environment,
                Some(which),
                request,
            )?;
            back_to(slug, environment, id, "recovery-started")
        }
    }
}

/// `POST …/webhooks/{environment}/caller-recovery`.
pub async fn recover_callers(
    app: &App,
    req: &mut Request,
    slug: &str,
    environment: &str,
) -> Outcome {
    let user = signed_in(app, req)?;
    let form = user_form(app, req, &user).await?;
    let environment = subscriptions::environment_param(environment)?;
    let request = recovery_request(&form);
    recovery::start(
        &app.subscriptions(),
        &user.account,
        slug,
        environment,
        None,
        request,
    )?;
    back(slug, "recovery-started")
}

/// The time now as a date picker's value in UTC (to the minute), shown beside the pickers.
fn picker_now(app: &App) -> String {
    app.handles.now().to_rfc3339().chars().take(16).collect()
}

/// A recovery window from the date pickers (`datetime-local`, read as UTC: their labels say
/// so, and a browser's picker has no zone of its own).
fn recovery_request(form: &Form) -> RecoveryRequest {
    RecoveryRequest {
        since: utc(form.text("since")),
        until: optional(form, "until").map(|text| utc(&text)),
    }
}

/// A `datetime-local` value (`2026-11-20T08:00`) as RFC 3339 in UTC; anything else as it is.
fn utc(text: &str) -> String {
    let text = text.trim();
    match text.len() {
        16 if text.as_bytes().get(10) == Some(&b'T') => format!("{text}:00Z"),
        19 if text.as_bytes().get(10) == Some(&b'T') => format!("{text}Z"),
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn date_pickers_are_read_as_utc() {
        assert_eq!(utc("2026-11-20T08:00"), "2026-11-20T08:00:00Z");
        assert_eq!(utc("2026-11-20T08:00:30"), "2026-11-20T08:00:30Z");
        assert_eq!(utc("2026-11-20"), "2026-11-20");
        assert_eq!(
            utc(" 2026-11-20T08:00:00+01:00 "),
            "2026-11-20T08:00:00+01:00"
        );
    }
}
