//! The HTTP API's handlers: the route table (`http::routes`) names a request's route, and
//! [`dispatch`] runs its thin handler, which parses the request, calls a service and maps the
//! result. The route is known before any handler runs, so the check order of a data call is
//! fixed and documented (docs/src/errors.md).

pub(crate) mod account;
mod backups;
mod cookie_reads;
mod data;
mod deliveries;
mod docs;
mod erasures;
mod keys;
mod mail;
pub(crate) mod manage;
mod ops;
mod subscriptions;
mod webhook_secrets;

use http::StatusCode;
use warp::reply::Response;

use crate::http::app::App;
use crate::http::error::Result;
use crate::http::reply;
use crate::http::request::Request;
use crate::http::routes::{PathParams, Route};
use crate::store::{Environment, KeyHolder, Partition};

/// Where a data call is logged, and what about: filled in by the data handler once it knows
/// the endpoint, and the record once it knows that.
#[derive(Default)]
pub struct CallLog {
    pub partition: Option<Partition>,
    pub environment: Option<Environment>,
    pub key_id: Option<String>,
    pub holder: Option<KeyHolder>,
    /// The record the call was about (`RequestLogRow::record_id`).
    pub record_id: Option<String>,
    /// For a batch, how many records it created, the first being `record_id`.
    pub record_count: Option<u32>,
}

impl CallLog {
    /// The call was about the record `id`.
    fn about(&mut self, id: impl std::fmt::Display) {
        self.record_id = Some(id.to_string());
    }

    /// The call created the records of `batch` (a run of ids): the first is logged, with
    /// their number.
    fn about_batch(&mut self, batch: &crate::domain::batch::Accepted) {
        if let Some(first) = batch.data.first() {
            self.about(&first.id);
            self.record_count = Some(u32::try_from(batch.data.len()).unwrap_or(u32::MAX));
        }
    }
}

/// Runs the handler of `route`, with the values of its `path`'s parameters. Each route of the
/// table (`http::routes`) is bound to its handler here, once; several routes of one path may
/// share a handler that tells them apart by method.
pub(super) async fn dispatch(
    app: &App,
    route: Route,
    path: PathParams<'_>,
    req: &mut Request,
    call_log: &mut CallLog,
) -> Result<Response> {
    use manage::DeployStep;
    if let Some(page) = cookie_reads::browser_page(route, &path, req) {
        return Ok(page);
    }
    match route {
        Route::Health => Ok(reply::json(
            StatusCode::OK,
            &serde_json::json!({"status": "ok"}),
        )),
        Route::Ready => ops::ready(app),
        Route::Metrics => ops::metrics(app, req),
        Route::CreateRecord | Route::ListRecords => {
            data::handle(app, req, path.slug, None, call_log).await
        }
        Route::GetRecord | Route::ReplaceRecord | Route::DeleteRecord => {
            data::handle(app, req, path.slug, Some(path.record_id), call_log).await
        }
        Route::CreateRecordBatch => data::batch(app, req, path.slug, call_log).await,
        Route::SearchRecords => data::search(app, req, path.slug, call_log),
        Route::PollRecords => data::poll(app, req, path.slug, call_log),
        Route::ExportRecords => data::export(app, req, path.slug, call_log).await,
        Route::StreamRecords => data::stream(app, req, path.slug, call_log),
        Route::GetOpenApi => Ok(docs::document(app)),
        Route::GetEndpointOpenApi => docs::endpoint_document(app, req, path.slug),
        Route::Login => account::login(app, req).await,
        Route::Logout => account::logout(app, req),
        Route::GetSession | Route::GetAccount => account::me(app, req),
        Route::GetInvitation => account::invitation(app, path.token),
        Route::AcceptInvitation => account::accept_invitation(app, req, path.token).await,
        Route::ChangePassword => account::change_password(app, req).await,
        Route::ListSessions => account::sessions(app, req),
        Route::SignOutOtherSessions => account::sign_out_others(app, req),
        Route::RequestPasswordReset => account::request_password_reset(app, req).await,
        Route::CompletePasswordReset => account::complete_password_reset(app, req).await,
        Route::ListTokens | Route::CreateToken => account::tokens(app, req).await,
        Route::RevokeToken => account::revoke_token(app, req, path.id),
        Route::ListNotifications => account::notifications(app, req),
        Route::MarkNotificationRead => account::mark_read(app, req, path.id),
        Route::MarkAllNotificationsRead => account::mark_all_read(app, req),
        Route::ListEndpoints | Route::CreateEndpoint => manage::endpoints(app, req).await,
        Route::GetEndpoint | Route::UpdateEndpoint | Route::DeleteEndpoint => {
            manage::endpoint(app, req, path.slug).await
        }
        Route::DeployEndpoint => manage::deploy_step(app, req, path.slug, DeployStep::Deploy).await,
        Route::RequestDeploy => manage::deploy_step(app, req, path.slug, DeployStep::Request).await,
        Route::ApproveDeploy => manage::deploy_step(app, req, path.slug, DeployStep::Approve).await,
        Route::RejectDeploy => manage::deploy_step(app, req, path.slug, DeployStep::Reject).await,
        Route::WithdrawDeploy => {
            manage::deploy_step(app, req, path.slug, DeployStep::Withdraw).await
        }
        Route::ListRequests => manage::requests(app, req, path.slug),
        Route::ListAudit => manage::audit_log(app, req, path.slug),
        Route::GetUsage => manage::usage(app, req, path.slug),
        Route::CheckSchema => manage::check_schema(app, req, path.slug).await,
        Route::ListErasures => erasures::list(app, req, path.slug),
        Route::CreateErasure => erasures::create(app, req, path.slug).await,
        Route::GetErasure => erasures::get(app, req, path.slug, path.id),
        Route::ListInvitations | Route::CreateInvitation => {
            manage::invitations(app, req, path.slug).await
        }
        Route::RevokeInvitation => manage::revoke_invitation(app, req, path.slug, path.id),
        Route::ListCollaborators => manage::collaborators(app, req, path.slug),
        Route::UpdateCollaborator | Route::RemoveCollaborator => {
            manage::collaborator(app, req, path.slug, path.account_id).await
        }
        Route::RotateKey => {
            keys::rotate(app, req, path.slug, None, path.known_environment()?).await
        }
        Route::RevokePreviousKey => {
            keys::revoke_previous(app, req, path.slug, None, path.known_environment()?)
        }
        Route::RotateCollaboratorKey => {
            let environment = path.known_environment()?;
            keys::rotate(app, req, path.slug, Some(path.account_id), environment).await
        }
        Route::RevokePreviousCollaboratorKey => {
            let environment = path.known_environment()?;
            keys::revoke_previous(app, req, path.slug, Some(path.account_id), environment)
        }
        Route::GetOwnerWebhook
        | Route::SetOwnerWebhook
        | Route::ChangeOwnerWebhook
        | Route::DeleteOwnerWebhook => {
            subscriptions::owner_webhook(app, req, path.slug, path.environment).await
        }
        Route::ListSubscriptions | Route::CreateSubscription => {
            subscriptions::subscriptions(app, req, path.slug, path.environment).await
        }
        Route::GetSubscription | Route::ChangeSubscription | Route::DeleteSubscription => {
            subscriptions::subscription(app, req, path.slug, path.environment, path.subscription_id)
                .await
        }
        Route::RecoverSubscription => {
            let id = Some(path.subscription_id);
            subscriptions::recover(app, req, path.slug, path.environment, id).await
        }
        Route::TestSubscription => {
            subscriptions::test_event(app, req, path.slug, path.environment, path.subscription_id)
                .await
        }
        Route::GetCallerRecovery | Route::RecoverCallerWebhooks => {
            subscriptions::recover(app, req, path.slug, path.environment, None).await
        }
        Route::ListDeliveries => deliveries::deliveries(app, req, path.slug),
        Route::GetDelivery => deliveries::delivery(app, req, path.slug, path.id),
        Route::Redeliver => deliveries::redeliver(app, req, path.slug, path.id),
        Route::RetryDelivery => deliveries::retry(app, req, path.slug, path.id),
        Route::GetWebhookSecret => {
            webhook_secrets::secret(app, req, path.slug, path.known_environment()?)
        }
        Route::ReissueWebhookSecret => {
            webhook_secrets::reissue(app, req, path.slug, path.known_environment()?)
        }
        Route::ListAccounts => account::list_accounts(app, req),
        Route::GetAccountById | Route::UpdateAccount => {
            account::account_by_id(app, req, path.id).await
        }
        Route::ListMail => mail::list(app, req),
        Route::GetMail => mail::get(app, req, path.id),
        Route::SendTestMail => mail::test(app, req).await,
        Route::CreateBackup => backups::create(app, req).await,
    }
}
