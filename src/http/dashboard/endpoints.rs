//! Endpoint pages: the list with the create form, and the detail page with its Sandbox and
//! Production tabs (keys, webhook signing secrets, deploy workflow, settings, active switch).
//! Every other endpoint tab starts with the same header ([`EndpointHead`]).

use askama::Template;

use super::form::Form;
use super::keys::{KeyPanel, MaskedSecret};
use super::page::{Failure, Layout, Outcome, redirect, render};
use super::visitor::{User, signed_in, user_form};
use crate::domain::api_keys::Holder;
use crate::domain::deploy::{self, Note};
use crate::domain::endpoint_deletion;
use crate::domain::endpoints::{DeployRejectionView, EndpointPatch, EndpointView, NewEndpoint};
use crate::domain::error::Error;
use crate::domain::webhooks::secrets::{self, SecretView};
use crate::domain::webhooks::signing;
use crate::http::app::App;
use crate::http::request::Request;
use crate::store::Environment;

/// The header of every tab of an endpoint: name, badges, base URL, tabs.
pub struct EndpointHead {
    pub ep: EndpointView,
    /// The tab shown: `sandbox`, `production`, `collaborators`, `webhooks`, `requests`,
    /// `deliveries`, `usage` or `test` (the API test page).
    pub tab: &'static str,
    pub base_url: String,
    pub owner: bool,
    /// The viewer's e-mail address, which a deploy request names who asked by.
    pub viewer: String,
    /// The environment the page shows (its badge); `None` on tabs about both.
    pub viewing: Option<Environment>,
}

impl EndpointHead {
    pub fn load(
        app: &App,
        user: &User,
        slug: &str,
        tab: &'static str,
    ) -> Result<EndpointHead, Failure> {
        let ep = app.endpoints.get(&user.account, slug)?;
        Ok(EndpointHead {
            base_url: format!("{}/api/v1/data/{}", app.config.public_url(), ep.slug),
            owner: ep.role == "owner",
            viewer: user.account.email.clone(),
            ep,
            tab,
            viewing: None,
        })
    }

    /// The header of a page that shows one environment.
    pub fn viewing(mut self, environment: Environment) -> EndpointHead {
        self.viewing = Some(environment);
        self
    }

    /// The badge of the environment shown (its CSS class and words), on every endpoint page:
    /// a page about both says so.
    pub fn viewing_label(&self) -> (&'static str, &'static str) {
        match self.viewing {
            Some(Environment::Sandbox) => ("sandbox", "Sandbox"),
            Some(Environment::Production) => ("production", "Production"),
            None => ("both", "Sandbox and production"),
        }
    }

    /// Whether the viewer asked for the pending deploy (and so may withdraw the request).
    pub fn requester(&self) -> bool {
        let request = self.ep.deploy_request.as_ref();
        request.is_some_and(|request| request.requested_by == self.viewer)
    }

    /// Whether the viewer asked for the deploy `rejection` rejected.
    pub fn requester_of(&self, rejection: &DeployRejectionView) -> bool {
        rejection.requested_by == self.viewer
    }

    /// The path of this endpoint's pages.
    pub fn path(&self) -> String {
        format!("/dashboard/endpoints/{}", self.ep.slug)
    }
}

#[derive(Template)]
#[template(path = "dashboard/endpoints.html")]
struct ListPage {
    layout: Layout,
    endpoints: Vec<EndpointView>,
    can_create: bool,
}

/// `GET /dashboard/endpoints`.
pub fn list(app: &App, req: &Request) -> Outcome {
    let user = signed_in(app, req)?;
    let page = ListPage {
        layout: user.layout(app, "Endpoints", "endpoints", req),
        endpoints: app.endpoints.list(&user.account)?,
        can_create: crate::domain::accounts::require_server_owner(&user.account).is_ok(),
    };
    render(&page)
}

/// `POST /dashboard/endpoints`: creates an endpoint from its name.
pub async fn create(app: &App, req: &mut Request) -> Outcome {
    let user = signed_in(app, req)?;
    let form = user_form(app, req, &user).await?;
    let new = NewEndpoint {
        name: form.text("name").to_string(),
        description: None,
        required_fields: Vec::new(),
        schema: None,
    };
    let created = app.endpoints.create(&user.account, new)?;
    Ok(redirect(&format!(
        "/dashboard/endpoints/{}?done=created",
        created.slug
    )))
}

#[derive(Template)]
#[template(path = "dashboard/endpoint.html")]
struct DetailPage {
    layout: Layout,
    head: EndpointHead,
    environment: &'static str,
    /// The viewer's key of this environment; `None` on the Production tab before deploying.
    key: Option<KeyPanel>,
    secret: Option<SecretView>,
    /// The signing secret as shown: masked, with Reveal and Copy (like the key).
    secret_shown: Option<MaskedSecret>,
    /// The required fields as the settings form shows them, one per line.
    required_fields_text: String,
    /// The JSON Schema as the settings form shows it, indented; empty without one.
    schema_text: String,
}

/// `GET /dashboard/endpoints/{slug}` (Sandbox tab) and `…/production` (Production tab).
pub fn detail(app: &App, req: &Request, slug: &str, environment: Environment) -> Outcome {
    let user = signed_in(app, req)?;
    let head = EndpointHead::load(app, &user, slug, environment.as_str())?.viewing(environment);
    let shown = environment == Environment::Sandbox || head.ep.deployed;
    let (key, secret) = match shown {
        true => (
            Some(KeyPanel::load(
                app,
                req,
                &user,
                slug,
                Holder::Own,
                environment,
                format!("{} API key", environment.as_str()),
            )?),
            Some(secrets::view(
                &app.endpoints,
                &app.handles,
                &app.endpoints.sealer,
                &user.account,
                slug,
                environment,
            )?),
        ),
        false => (None, None),
    };
    let secret_shown = secret.as_ref().map(|secret| {
        MaskedSecret::new(
            format!("{}-secret", environment.as_str()),
            format!("{} webhook signing secret", environment.as_str()),
            secret.secret.clone(),
            signing::SECRET_PREFIX,
        )
    });
    let page = DetailPage {
        layout: user.layout(app, head.ep.name.clone(), "endpoints", req),
        required_fields_text: head.ep.required_fields.join("\n"),
        schema_text: head
            .ep
            .schema
            .as_ref()
            .and_then(|schema| serde_json::to_string_pretty(schema).ok())
            .unwrap_or_default(),
        environment: environment.as_str(),
        key,
        secret,
        secret_shown,
        head,
    };
    render(&page)
}

/// Required fields as typed: one per line or separated by commas.
fn field_list(text: &str) -> Vec<String> {
    text.split(['\n', ','])
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .map(str::to_string)
        .collect()
}

/// The schema as typed in the settings form: none when the box is empty.
fn typed_schema(text: &str) -> Result<Option<serde_json::Value>, Error> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    serde_json::from_str(text)
        .map(Some)
        .map_err(|e| Error::InvalidSchema(format!("it is not JSON ({e})")))
}

/// `POST …/settings`: name, description, required fields and schema (owner).
pub async fn save_settings(app: &App, req: &mut Request, slug: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let form = user_form(app, req, &user).await?;
    let description = form.text("description").trim();
    let patch = EndpointPatch {
        name: Some(form.text("name").to_string()),
        description: Some((!description.is_empty()).then(|| description.to_string())),
        required_fields: Some(field_list(form.text("required_fields"))),
        schema: Some(typed_schema(form.text("schema"))?),
        ..EndpointPatch::default()
    };
    app.endpoints.update(&user.account, slug, patch)?;
    Ok(redirect(&format!("/dashboard/endpoints/{slug}?done=saved")))
}

/// `POST …/delete`: the danger zone (owner); the endpoint's name must be typed to confirm.
pub async fn delete(app: &App, req: &mut Request, slug: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let form = user_form(app, req, &user).await?;
    endpoint_deletion::delete(
        &app.endpoints,
        &user.account,
        slug,
        Some(form.text("confirm_name")),
    )?;
    Ok(redirect("/dashboard/endpoints?done=deleted"))
}

/// `POST …/active`: the active switch (owner).
pub async fn set_active(app: &App, req: &mut Request, slug: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let form = user_form(app, req, &user).await?;
    let active = form.text("active") == "true";
    let patch = EndpointPatch {
        active: Some(active),
        ..EndpointPatch::default()
    };
    app.endpoints.update(&user.account, slug, patch)?;
    let done = if active { "activated" } else { "deactivated" };
    Ok(redirect(&format!(
        "/dashboard/endpoints/{slug}?done={done}"
    )))
}

/// One step of the deploy workflow.
#[derive(Clone, Copy)]
pub enum DeployStep {
    /// Collaborator: "Request deploy".
    Request,
    /// Owner: "Approve".
    Approve,
    /// Owner: "Reject".
    Reject,
    /// Owner: "Deploy now".
    Deploy,
    /// The collaborator who asked: "Withdraw the request".
    Withdraw,
}

/// `POST …/deploy-request`, `…/deploy-request/approve`, `…/deploy-request/reject`,
/// `…/deploy-request/withdraw`, `…/deploy`.
pub async fn deploy_step(app: &App, req: &mut Request, slug: &str, step: DeployStep) -> Outcome {
    let user = signed_in(app, req)?;
    let form: Form = user_form(app, req, &user).await?;
    let note = || {
        let text = form.text("note").trim();
        Note {
            note: (!text.is_empty()).then(|| text.to_string()),
        }
    };
    let (endpoints, public_url) = (&app.endpoints, &app.config.public_url());
    let (done, tab) = match step {
        DeployStep::Request => {
            deploy::request(endpoints, public_url, &user.account, slug, note())?;
            ("requested", "")
        }
        DeployStep::Approve => {
            deploy::approve(endpoints, public_url, &user.account, slug)?;
            ("approved", "/production")
        }
        DeployStep::Reject => {
            deploy::reject(endpoints, public_url, &user.account, slug, note())?;
            ("rejected", "")
        }
        DeployStep::Deploy => {
            deploy::deploy(endpoints, public_url, &user.account, slug)?;
            ("deployed", "/production")
        }
        DeployStep::Withdraw => {
            deploy::withdraw(endpoints, &user.account, slug)?;
            ("withdrawn", "")
        }
    };
    Ok(redirect(&format!(
        "/dashboard/endpoints/{slug}{tab}?done={done}"
    )))
}

/// `POST …/webhook-secrets/{environment}/reissue` (owner).
pub async fn reissue_secret(
    app: &App,
    req: &mut Request,
    slug: &str,
    environment: Environment,
) -> Outcome {
    let user = signed_in(app, req)?;
    user_form(app, req, &user).await?;
    secrets::reissue(
        &app.endpoints,
        &app.handles,
        &app.endpoints.sealer,
        &user.account,
        slug,
        environment,
    )?;
    let tab = match environment {
        Environment::Sandbox => "",
        Environment::Production => "/production",
    };
    Ok(redirect(&format!(
        "/dashboard/endpoints/{slug}{tab}?done=reissued"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_fields_split_on_lines_and_commas() {
        assert_eq!(
            field_list(" email,\n total \n\n,name "),
            ["email", "total", "name"]
        );
        assert!(field_list("  \n ").is_empty());
    }
}
