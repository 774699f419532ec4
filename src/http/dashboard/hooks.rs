//! The Webhooks tab (endpoint owner): the owner webhook of each environment: URL, custom
//! auth header name and value, enabled; saving replaces it, removing deletes it.

use askama::Template;

use super::endpoints::EndpointHead;
use super::page::{Layout, Outcome, redirect, render};
use super::visitor::{signed_in, user_form};
use crate::domain::error::{Error, Missing};
use crate::domain::webhooks::owner::{self, OwnerWebhookConfig, OwnerWebhookView};
use crate::http::app::App;
use crate::http::request::Request;
use crate::store::Environment;

/// One environment's settings form.
struct Settings {
    environment: &'static str,
    current: Option<OwnerWebhookView>,
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
        let current = match owner::get(
            &app.endpoints,
            app.store.as_ref(),
            &user.account,
            slug,
            environment,
        ) {
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
    let environment = owner::environment_param(environment)?;
    let optional = |name: &str| {
        let text = form.text(name).trim();
        (!text.is_empty()).then(|| text.to_string())
    };
    let config = OwnerWebhookConfig {
        url: form.text("url").trim().to_string(),
        auth_header: optional("auth_header"),
        auth_value: optional("auth_value"),
        enabled: form.checked("enabled"),
    };
    owner::put(
        &app.endpoints,
        &app.handles,
        &app.endpoints.sealer,
        &user.account,
        slug,
        environment,
        config,
    )?;
    back(slug, "webhook")
}

/// `POST …/webhooks/{environment}/delete`.
pub async fn delete(app: &App, req: &mut Request, slug: &str, environment: &str) -> Outcome {
    let user = signed_in(app, req)?;
    user_form(app, req, &user).await?;
    let environment = owner::environment_param(environment)?;
    owner::delete(
        &app.endpoints,
        &app.handles,
        &user.account,
        slug,
        environment,
    )?;
    back(slug, "webhook-removed")
}
