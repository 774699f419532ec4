//! The Webhooks tab (endpoint owner): the owner webhook of each environment (its first
//! subscription): URL, custom auth header name and value, enabled. Saving changes what the
//! form shows and keeps the rest (an empty auth value keeps the stored one); removing deletes
//! it.

use askama::Template;

use super::endpoints::EndpointHead;
use super::page::{Layout, Outcome, redirect, render};
use super::visitor::{signed_in, user_form};
use crate::domain::error::{Error, Missing};
use crate::domain::webhooks::subscriptions::{
    self, SubscriptionChange, SubscriptionConfig, SubscriptionView, Which,
};
use crate::http::app::App;
use crate::http::request::Request;
use crate::store::Environment;

/// One environment's settings form.
struct Settings {
    environment: &'static str,
    current: Option<SubscriptionView>,
}

#[derive(Template)]
#[template(path = "dashboard/webhooks.html")]
struct WebhooksPage {
    layout: Layout,
    head: EndpointHead,
    settings: Vec<Settings>,
}

/// `GET /dashboard/endpoints/{slug}/webhooks`.
pub fn page(app: &App, req: &Request, slug: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let head = EndpointHead::load(app, &user, slug, "webhooks")?;
    let mut settings = Vec::new();
    for environment in [Environment::Sandbox, Environment::Production] {
        let current = match app
            .subscriptions()
            .get(&user.account, slug, environment, Which::First)
        {
            Ok(view) => Some(view),
            Err(Error::NotFound(Missing::Webhook)) => None,
            Err(err) => return Err(err.into()),
        };
        settings.push(Settings {
            environment: environment.as_str(),
            current,
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
    };
    render(&page)
}

fn back(slug: &str, done: &str) -> Outcome {
    Ok(redirect(&format!(
        "/dashboard/endpoints/{slug}/webhooks?done={done}"
    )))
}

/// `POST …/webhooks/{environment}`: saves (replaces) the settings.
pub async fn save(app: &App, req: &mut Request, slug: &str, environment: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let form = user_form(app, req, &user).await?;
    let environment = subscriptions::environment_param(environment)?;
    let optional = |name: &str| {
        let text = form.text(name).trim();
        (!text.is_empty()).then(|| text.to_string())
    };
    let url = form.text("url").trim().to_string();
    let enabled = form.checked("enabled");
    let service = app.subscriptions();
    let change = SubscriptionChange {
        url: Some(url.clone()),
        auth_header: match form.checked("clear_auth") {
            true => None,
            false => optional("auth_header").map(Some),
        },
        auth_value: match form.checked("clear_auth") {
            true => Some(None),
            false => optional("auth_value").map(Some),
        },
        enabled: Some(enabled),
        ..SubscriptionChange::default()
    };
    match service.update(&user.account, slug, environment, Which::First, change) {
        Err(Error::NotFound(Missing::Webhook)) => {
            let config = SubscriptionConfig {
                url,
                auth_header: optional("auth_header"),
                auth_value: optional("auth_value"),
                enabled,
                description: String::new(),
                event_types: Vec::new(),
                rate_limit: None,
            };
            service.put_first(&user.account, slug, environment, config)?;
        }
        done => {
            done?;
        }
    }
    back(slug, "webhook")
}

/// `POST …/webhooks/{environment}/delete`.
pub async fn delete(app: &App, req: &mut Request, slug: &str, environment: &str) -> Outcome {
    let user = signed_in(app, req)?;
    user_form(app, req, &user).await?;
    let environment = subscriptions::environment_param(environment)?;
    app.subscriptions()
        .delete(&user.account, slug, environment, Which::First)?;
    back(slug, "webhook-removed")
}
