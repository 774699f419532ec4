//! The HTTP API: one warp filter turns every request into a [`Request`], the router names its
//! route, and a thin handler parses it, calls a service and maps the result.
//!
//! Routing is done here rather than with nested warp filters so that 404 vs 405 is exact, the
//! check order of a data call is fixed and documented (docs/src/errors.md), and every log
//! line can name its path template.

pub(crate) mod account;
mod backups;
mod data;
mod docs;
mod hooks;
mod keys;
mod mail;
pub(crate) mod manage;
mod ops;
pub mod routes;
mod webhooks;

use http::StatusCode;
use warp::reply::Response;

use crate::http::app::App;
use crate::http::error::Result;
use crate::http::reply;
use crate::http::request::Request;
use crate::store::{Environment, KeyHolder};
use routes::Route;

/// Where a data call is logged: filled in by the data handler once it knows the endpoint.
#[derive(Default)]
pub struct CallLog {
    pub partition: Option<u64>,
    pub environment: Option<Environment>,
    pub key_id: Option<String>,
    pub holder: Option<KeyHolder>,
}

pub(super) async fn dispatch(
    app: &App,
    route: Option<Route<'_>>,
    req: &mut Request,
    call_log: &mut CallLog,
) -> Result<Response> {
    let route = route.ok_or(crate::http::error::HttpError::RouteNotFound)?;
    route.check_method(&req.method)?;
    match route {
        Route::Health => Ok(reply::json(
            StatusCode::OK,
            &serde_json::json!({"status": "ok"}),
        )),
        Route::Ready => ops::ready(app),
        Route::Metrics => ops::metrics(app, req),
        Route::DataCollection { slug } => {
            let slug = slug.to_string();
            data::handle(app, req, &slug, None, call_log).await
        }
        Route::DataSearch { slug } => {
            let slug = slug.to_string();
            data::search(app, req, &slug, call_log)
        }
        Route::DataPoll { slug } => {
            let slug = slug.to_string();
            data::poll(app, req, &slug, call_log)
        }
        Route::DataStream { slug } => {
            let slug = slug.to_string();
            data::stream(app, req, &slug, call_log)
        }
        Route::DataRecord { slug, record_id } => {
            let (slug, record_id) = (slug.to_string(), record_id.to_string());
            data::handle(app, req, &slug, Some(&record_id), call_log).await
        }
        Route::OpenApi => Ok(docs::document(app)),
        Route::DataOpenApi { slug } => docs::endpoint_document(app, req, slug),
        other => manage_route(app, other, req).await,
    }
}

/// The account and management routes. Path parameters are copied out first because the
/// handlers borrow the request mutably.
async fn manage_route(app: &App, route: Route<'_>, req: &mut Request) -> Result<Response> {
    use manage::DeployStep;
    let owned = |s: &str| s.to_string();
    match route {
        Route::AuthLogin => account::login(app, req).await,
        Route::AuthLogout => account::logout(app, req),
        Route::AuthSession | Route::ManageAccount => account::me(app, req),
        Route::Invitation { token } => account::invitation(app, token),
        Route::InvitationAccept { token } => {
            let token = owned(token);
            account::accept_invitation(app, req, &token).await
        }
        Route::ManagePassword => account::change_password(app, req).await,
        Route::ManageAccounts => account::list_accounts(app, req),
        Route::ManageAccountById { id } => {
            let id = owned(id);
            account::account_by_id(app, req, &id).await
        }
        Route::ManageTokens => account::tokens(app, req).await,
        Route::ManageToken { id } => account::revoke_token(app, req, id),
        Route::ManageNotifications => account::notifications(app, req),
        Route::ManageNotificationRead { id } => account::mark_read(app, req, id),
        Route::ManageNotificationsReadAll => account::mark_all_read(app, req),
        Route::ManageEndpoints => manage::endpoints(app, req).await,
        Route::ManageEndpoint { slug } => {
            let slug = owned(slug);
            manage::endpoint(app, req, &slug).await
        }
        Route::ManageDeploy { slug } => {
            let slug = owned(slug);
            manage::deploy_step(app, req, &slug, DeployStep::Deploy).await
        }
        Route::ManageDeployRequest { slug } => {
            let slug = owned(slug);
            manage::deploy_step(app, req, &slug, DeployStep::Request).await
        }
        Route::ManageDeployApprove { slug } => {
            let slug = owned(slug);
            manage::deploy_step(app, req, &slug, DeployStep::Approve).await
        }
        Route::ManageDeployReject { slug } => {
            let slug = owned(slug);
            manage::deploy_step(app, req, &slug, DeployStep::Reject).await
        }
        Route::ManageRequests { slug } => manage::requests(app, req, slug),
        Route::ManageInvitations { slug } => {
            let slug = owned(slug);
            manage::invitations(app, req, &slug).await
        }
        Route::ManageInvitation { slug, id } => manage::revoke_invitation(app, req, slug, id),
        Route::ManageCollaborators { slug } => manage::collaborators(app, req, slug),
        Route::ManageCollaborator { slug, account_id } => {
            let (slug, account_id) = (owned(slug), owned(account_id));
            manage::collaborator(app, req, &slug, &account_id).await
        }
        Route::ManageAudit { slug } => manage::audit_log(app, req, slug),
        Route::ManageWebhook { slug, environment } => {
            let (slug, environment) = (owned(slug), owned(environment));
            hooks::owner_webhook(app, req, &slug, &environment).await
        }
        Route::ManageSubscriptions { slug, environment } => {
            let (slug, environment) = (owned(slug), owned(environment));
            hooks::subscriptions(app, req, &slug, &environment).await
        }
        Route::ManageSubscription {
            slug,
            environment,
            id,
        } => {
            let (slug, environment, id) = (owned(slug), owned(environment), owned(id));
            hooks::subscription(app, req, &slug, &environment, &id).await
        }
        Route::ManageSubscriptionRecover {
            slug,
            environment,
            id,
        } => {
            let (slug, environment, id) = (owned(slug), owned(environment), owned(id));
            hooks::recover(app, req, &slug, &environment, Some(&id)).await
        }
        Route::ManageSubscriptionTest {
            slug,
            environment,
            id,
        } => {
            let (slug, environment, id) = (owned(slug), owned(environment), owned(id));
            hooks::test_event(app, req, &slug, &environment, &id).await
        }
        Route::ManageCallerRecovery { slug, environment } => {
            let (slug, environment) = (owned(slug), owned(environment));
            hooks::recover(app, req, &slug, &environment, None).await
        }
        Route::ManageDeliveries { slug } => hooks::deliveries(app, req, slug),
        Route::ManageDelivery { slug, id } => hooks::delivery(app, req, slug, id),
        Route::ManageRedeliver { slug, id } => hooks::redeliver(app, req, slug, id),
        Route::ManageRetryDelivery { slug, id } => hooks::retry(app, req, slug, id),
        Route::ManageUsage { slug } => manage::usage(app, req, slug),
        Route::ManageWebhookSecret { slug, env } => webhooks::secret(app, req, slug, env),
        Route::ManageWebhookSecretReissue { slug, env } => webhooks::reissue(app, req, slug, env),
        Route::ManageKeyRotate { slug, env } => {
            let slug = owned(slug);
            keys::rotate(app, req, &slug, None, env).await
        }
        Route::ManageKeyRevokePrevious { slug, env } => {
            keys::revoke_previous(app, req, slug, None, env)
        }
        Route::ManageCollaboratorKeyRotate {
            slug,
            account_id,
            env,
        } => {
            let (slug, account_id) = (owned(slug), owned(account_id));
            keys::rotate(app, req, &slug, Some(&account_id), env).await
        }
        Route::ManageCollaboratorKeyRevokePrevious {
            slug,
            account_id,
            env,
        } => keys::revoke_previous(app, req, slug, Some(account_id), env),
        Route::Health
        | Route::Ready
        | Route::Metrics
        | Route::DataCollection { .. }
        | Route::DataSearch { .. }
        | Route::DataPoll { .. }
        | Route::DataStream { .. }
        | Route::DataRecord { .. }
        // The dashboard's paths never reach the API (`http::handle`).
        | Route::Dashboard { .. }
        | Route::OpenApi
        | Route::DataOpenApi { .. } => Err(crate::http::error::HttpError::RouteNotFound),
        Route::ManageMail => mail::list(app, req),
        Route::ManageMailTest => mail::test(app, req).await,
        Route::ManageMailMessage { id } => {
            let id = id.to_string();
            mail::get(app, req, &id)
        }
        Route::ManageBackups => backups::create(app, req).await,
    }
}
