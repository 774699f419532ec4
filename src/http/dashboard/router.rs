//! The dashboard's pages and forms: which handler a method and path name. Pages are GETs,
//! every change is a POST of a form (CSRF-checked by the handler) answered with a redirect.

use http::Method;

use super::endpoints::{self, DeployStep};
use super::page::{Failure, Outcome};
use super::{assets, auth, collaborators, hooks, inbox, keys, logs, testpage};
use crate::http::app::App;
use crate::http::request::Request;
use crate::store::Environment;

/// Routes one dashboard request (`path` without its query).
pub async fn route(app: &App, req: &mut Request, path: &str) -> Outcome {
    let path = path.strip_suffix('/').unwrap_or(path);
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    if segments.iter().any(|s| s.is_empty()) {
        return Err(Failure::NotFound);
    }
    let get = req.method == Method::GET || req.method == Method::HEAD;
    let post = req.method == Method::POST;
    match segments.as_slice() {
        ["invitations", token] if get => auth::invitation_page(app, req, token),
        ["invitations", token, "accept"] if post => auth::accept_invitation(app, req, token).await,
        ["dashboard", rest @ ..] => match (rest, get, post) {
            ([], true, _) => auth::home(app, req),
            (["login"], true, _) => auth::login_page(app, req),
            (["login"], _, true) => auth::login(app, req).await,
            (["logout"], _, true) => auth::logout(app, req).await,
            (["setup"], true, _) => auth::setup_page(app, req),
            (["setup"], _, true) => auth::setup(app, req).await,
            (["static", hash, name], true, _) => {
                assets::serve(hash, name, &req.headers).ok_or(Failure::NotFound)
            }
            (["notifications"], true, _) => inbox::notifications(app, req),
            (["notifications", id, "read"], _, true) => inbox::mark_read(app, req, id).await,
            (["mail"], true, _) => inbox::mail(app, req),
            (["mail", "test"], _, true) => inbox::send_test(app, req).await,
            (["endpoints"], true, _) => endpoints::list(app, req),
            (["endpoints"], _, true) => endpoints::create(app, req).await,
            (["endpoints", slug, tail @ ..], _, _) => {
                endpoint(app, req, slug, tail, get, post).await
            }
            _ => Err(Failure::NotFound),
        },
        _ => Err(Failure::NotFound),
    }
}

/// The pages and forms under `/dashboard/endpoints/{slug}`.
async fn endpoint(
    app: &App,
    req: &mut Request,
    slug: &str,
    tail: &[&str],
    get: bool,
    post: bool,
) -> Outcome {
    let environment = |text: &str| Environment::parse(text).ok_or(Failure::NotFound);
    match (tail, get, post) {
        ([], true, _) => endpoints::detail(app, req, slug, Environment::Sandbox),
        (["production"], true, _) => endpoints::detail(app, req, slug, Environment::Production),
        (["settings"], _, true) => endpoints::save_settings(app, req, slug).await,
        (["delete"], _, true) => endpoints::delete(app, req, slug).await,
        (["active"], _, true) => endpoints::set_active(app, req, slug).await,
        (["deploy"], _, true) => endpoints::deploy_step(app, req, slug, DeployStep::Deploy).await,
        (["deploy-request"], _, true) => {
            endpoints::deploy_step(app, req, slug, DeployStep::Request).await
        }
        (["deploy-request", "approve"], _, true) => {
            endpoints::deploy_step(app, req, slug, DeployStep::Approve).await
        }
        (["deploy-request", "reject"], _, true) => {
            endpoints::deploy_step(app, req, slug, DeployStep::Reject).await
        }
        (["webhook-secrets", env, "reissue"], _, true) => {
            endpoints::reissue_secret(app, req, slug, environment(env)?).await
        }
        (["keys", env, "rotate"], _, true) => {
            keys::rotate(app, req, slug, None, environment(env)?).await
        }
        (["keys", env, "revoke-previous"], _, true) => {
            keys::revoke_previous(app, req, slug, None, environment(env)?).await
        }
        (["collaborators", id, "keys", env, "rotate"], _, true) => {
            keys::rotate(app, req, slug, Some(id), environment(env)?).await
        }
        (["collaborators", id, "keys", env, "revoke-previous"], _, true) => {
            keys::revoke_previous(app, req, slug, Some(id), environment(env)?).await
        }
        (["collaborators"], true, _) => collaborators::page(app, req, slug),
        (["invitations"], _, true) => collaborators::invite(app, req, slug).await,
        (["invitations", id, "revoke"], _, true) => collaborators::revoke(app, req, slug, id).await,
        (["collaborators", id, "permissions"], _, true) => {
            collaborators::set_permissions(app, req, slug, id).await
        }
        (["collaborators", id, "remove"], _, true) => {
            collaborators::remove(app, req, slug, id).await
        }
        (["webhooks"], true, _) => hooks::page(app, req, slug),
        (["webhooks", env, "subscriptions"], _, true) => hooks::create(app, req, slug, env).await,
        (["webhooks", env, "subscriptions", id], _, true) => {
            hooks::subscription(app, req, slug, env, id, hooks::Action::Change).await
        }
        (["webhooks", env, "subscriptions", id, "delete"], _, true) => {
            hooks::subscription(app, req, slug, env, id, hooks::Action::Delete).await
        }
        (["webhooks", env, "subscriptions", id, "recover"], _, true) => {
            hooks::subscription(app, req, slug, env, id, hooks::Action::Recover).await
        }
        (["webhooks", env, "caller-recovery"], _, true) => {
            hooks::recover_callers(app, req, slug, env).await
        }
        (["requests"], true, _) => logs::requests(app, req, slug),
        (["deliveries"], true, _) => logs::deliveries(app, req, slug),
        (["deliveries", id], true, _) => logs::delivery(app, req, slug, id),
        (["deliveries", id, "redeliver"], _, true) => logs::redeliver(app, req, slug, id).await,
        (["usage"], true, _) => logs::usage(app, req, slug),
        (["test"], true, _) => testpage::page(app, req, slug),
        (["test", "authorize"], _, true) => testpage::authorize(app, req, slug).await,
        _ => Err(Failure::NotFound),
    }
}
