//! The Webhooks tab (endpoint owner): each environment's subscriptions with their filters,
//! rate limits and health (last success, failure streak, disabled by the circuit breaker),
//! forms to add, change, switch, delete and recover them, and the caller webhooks' recovery.
//!
//! The first subscription is the spec's owner webhook. Saving a form changes what it shows and
//! keeps the rest (an empty auth value keeps the stored one).

use askama::Template;

use super::endpoints::EndpointHead;
use super::form::Form;
use super::page::{Layout, Outcome, Pretty, redirect, render};
use super::visitor::{signed_in, user_form};
use crate::domain::error::Error;
use crate::domain::webhooks::recovery::{self, RecoveryRequest};
use crate::domain::webhooks::subscriptions::{
    self, PendingDeliveries, RecoveryView, SubscriptionChange, SubscriptionConfig,
    SubscriptionView, Which,
};
use crate::http::app::App;
use crate::http::request::Request;
use crate::store::{Environment, EventType};
use crate::workers::dispatcher::probe::TestResult;

/// One environment's subscriptions and its caller webhooks' latest recovery.
struct Settings {
    environment: &'static str,
    subscriptions: Vec<SubscriptionView>,
    caller_recovery: Option<RecoveryView>,
}

/// A test event just sent, shown beside its subscription.
struct Tested {
    environment: &'static str,
    subscription: String,
    result: TestResult,
    /// The event's body, indented.
    pretty_body: Pretty,
}

impl Tested {
    pub fn is_for(&self, environment: &str, subscription: &str) -> bool {
        self.environment == environment && self.subscription == subscription
    }
}

#[derive(Template)]
#[template(path = "dashboard/webhooks.html")]
struct WebhooksPage {
    layout: Layout,
    head: EndpointHead,
    settings: Vec<Settings>,
    event_types: [&'static str; 3],
    tested: Option<Tested>,
}

/// `GET /dashboard/endpoints/{slug}/webhooks`.
pub fn page(app: &App, req: &Request, slug: &str) -> Outcome {
    page_with(app, req, slug, None)
}

fn page_with(app: &App, req: &Request, slug: &str, tested: Option<Tested>) -> Outcome {
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
        tested,
    };
    render(&page)
}

/// `POST …/webhooks/{environment}/subscriptions/{id}/test`: sends a test event now and shows
/// the page with the receiver's answer beside the subscription.
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
        environment: environment.as_str(),
        subscription: subscriptions::subscription_id(number),
        pretty_body: Pretty::of(&result.request_body),
        result,
    };
    page_with(app, req, slug, Some(tested))
}

/// A rate limit as its form field shows it: empty for none.
pub fn rate_text(rate_limit: Option<u32>) -> String {
    rate_limit.map(|r| r.to_string()).unwrap_or_default()
}

/// Whether `sub`'s filter names the event type `name` (its box is ticked).
pub fn ticked(sub: &SubscriptionView, name: &str) -> bool {
    sub.event_types.iter().any(|t| t.as_str() == name)
}

fn back(slug: &str, done: &str) -> Outcome {
    Ok(redirect(&format!(
        "/dashboard/endpoints/{slug}/webhooks?done={done}"
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
    app.subscriptions()
        .create(&user.account, slug, environment, config(&form)?)
        .await?;
    back(slug, "subscription-added")
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
    let which = Which::Id(subscriptions::subscription_param(id)?);
    let service = app.subscriptions();
    let done = match action {
        Action::Change => {
            service
                .update(&user.account, slug, environment, which, change(&form)?)
                .await?;
            "subscription-saved"
        }
        Action::Delete => {
            let pending = match form.checked("cancel_pending") {
                true => PendingDeliveries::Cancel,
                false => PendingDeliveries::Keep,
            };
            service.delete(&user.account, slug, environment, which, pending)?;
            match pending {
                PendingDeliveries::Cancel => "subscription-removed-cancelled",
                PendingDeliveries::Keep => "subscription-removed",
            }
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
            "recovery-started"
        }
    };
    back(slug, done)
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

/// A recovery window from the date pickers (`datetime-local`, read as UTC).
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
