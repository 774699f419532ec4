//! The dashboard's pages and forms: which handler a method and path name. Pages are GETs,
//! every change is a POST of a form (CSRF-checked by the handler) answered with a redirect.

use http::Method;

use super::endpoints::{self, DeployStep};
use super::page::{Failure, Outcome};
use super::{
    account, assets, auth, collaborators, erasures, hooks, inbox, keys, logs, password_reset,
    records, testpage,
};
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
            (["password-reset"], true, _) => password_reset::forgot_page(app, req),
            (["password-reset"], _, true) => password_reset::send_link(app, req).await,
            (["password-reset", token], true, _) => {
                password_reset::new_password_page(app, req, token)
            }
            (["password-reset", token], _, true) => {
                password_reset::set_password(app, req, token).await
            }
            (["account"], true, _) => account::page(app, req),
            (["account", "password"], _, true) => account::change_password(app, req).await,
            (["account", "tokens"], _, true) => account::create_token(app, req).await,
            (["account", "tokens", id, "revoke"], _, true) => {
                account::revoke_token(app, req, id).await
            }
            (["account", "sessions", "sign-out-others"], _, true) => {
                account::sign_out_others(app, req).await
            }
            (["setup"], true, _) => auth::setup_page(app, req),
            (["setup"], _, true) => auth::setup(app, req).await,
            (["static", hash, name], true, _) => {
                assets::serve(hash, name, &req.headers).ok_or(Failure::NotFound)
            }
            (["notifications"], true, _) => inbox::notifications(app, req),
            (["notifications", "read-all"], _, true) => inbox::mark_all_read(app, req).await,
            (["notifications", id, "read"], _, true) => inbox::mark_read(app, req, id).await,
            (["notifications", id, "open"], true, _) => inbox::open(app, req, id),
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
        (["deploy-request", "withdraw"], _, true) => {
            endpoints::deploy_step(app, req, slug, DeployStep::Withdraw).await
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
        (["webhooks", env, "subscriptions", id], true, _) => {
            hooks::subscription_page(app, req, slug, environment(env)?, id)
        }
        (["webhooks", env, "subscriptions", id], _, true) => {
            hooks::subscription(app, req, slug, env, id, hooks::Action::Change).await
        }
        (["webhooks", env, "subscriptions", id, "delete"], _, true) => {
            hooks::subscription(app, req, slug, env, id, hooks::Action::Delete).await
        }
        (["webhooks", env, "subscriptions", id, "recover"], _, true) => {
            hooks::subscription(app, req, slug, env, id, hooks::Action::Recover).await
        }
        (["webhooks", env, "subscriptions", id, "test"], _, true) => {
            hooks::test_event(app, req, slug, env, id).await
        }
        (["webhooks", env, "caller-recovery"], _, true) => {
            hooks::recover_callers(app, req, slug, env).await
        }
        (["records"], true, _) => records::list(app, req, slug),
        (["records", "export"], true, _) => records::export(app, req, slug).await,
        (["records", "new"], true, _) => records::new_page(app, req, slug),
        (["records", "new"], _, true) => records::save_new(app, req, slug).await,
        (["records", id], true, _) => records::record(app, req, slug, id),
        (["records", id, "edit"], true, _) => records::edit_page(app, req, slug, id),
        (["records", id, "edit"], _, true) => records::save_edit(app, req, slug, id).await,
        (["records", id, "delete"], _, true) => records::delete(app, req, slug, id).await,
        (["erasures"], true, _) => erasures::page(app, req, slug),
        (["erasures"], _, true) => erasures::erase(app, req, slug).await,
        (["erasures", "count"], _, true) => erasures::count(app, req, slug).await,
        (["erasures", id], true, _) => erasures::erasure(app, req, slug, id),
        (["requests"], true, _) => logs::requests(app, req, slug),
        (["requests", request_id], true, _) => logs::request(app, req, slug, request_id),
        (["deliveries"], true, _) => logs::deliveries(app, req, slug),
        (["deliveries", id], true, _) => logs::delivery(app, req, slug, id),
        (["deliveries", id, "redeliver"], _, true) => {
            logs::act(app, req, slug, id, logs::DeliveryAction::Redeliver).await
        }
        (["deliveries", id, "retry"], _, true) => {
            logs::act(app, req, slug, id, logs::DeliveryAction::Retry).await
        }
        (["usage"], true, _) => logs::usage(app, req, slug),
        (["test"], true, _) => testpage::page(app, req, slug),
        (["test", "authorize"], _, true) => testpage::authorize(app, req, slug).await,
        _ => Err(Failure::NotFound),
    }
}

/// The page a form posting to `path` is on: where a refused form is shown again (with the
/// post's query, which names the environment where a page needs one). `None` for posts that
/// answer with their own page (login, setup, invitations) or not with a page at all (the
/// test page's key check).
pub fn form_page(path: &str) -> Option<String> {
    let path = path.strip_suffix('/').unwrap_or(path);
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    let page = match segments.as_slice() {
        ["dashboard", "endpoints"] => "/dashboard/endpoints".to_string(),
        ["dashboard", "mail", "test"] => "/dashboard/mail".to_string(),
        ["dashboard", "account", ..] => "/dashboard/account".to_string(),
        ["dashboard", "notifications", ..] => "/dashboard/notifications".to_string(),
        ["dashboard", "endpoints", slug, tail @ ..] => {
            let base = format!("/dashboard/endpoints/{slug}");
            match tail {
                ["test", ..] | [] => return None,
                ["collaborators" | "invitations", ..] => format!("{base}/collaborators"),
                // A subscription's forms answer on its page; the others on the tab.
                ["webhooks", env, "subscriptions", id, ..] => {
                    format!("{base}/webhooks/{env}/subscriptions/{id}")
                }
                ["webhooks", ..] => format!("{base}/webhooks"),
                ["deliveries", id, ..] => format!("{base}/deliveries/{id}"),
                ["requests", ..] => format!("{base}/requests"),
                ["records", id, "edit"] => format!("{base}/records/{id}/edit"),
                ["records", id, ..] => format!("{base}/records/{id}"),
                ["erasures", ..] => format!("{base}/erasures"),
                ["keys" | "webhook-secrets", "production", ..] => format!("{base}/production"),
                _ => base,
            }
        }
        _ => return None,
    };
    Some(page)
}

#[cfg(test)]
mod tests {
    use super::form_page;

    #[test]
    fn refused_forms_go_back_to_their_page() {
        let page = form_page;
        assert_eq!(
            page("/dashboard/endpoints").as_deref(),
            Some("/dashboard/endpoints")
        );
        assert_eq!(
            page("/dashboard/endpoints/s/settings").as_deref(),
            Some("/dashboard/endpoints/s")
        );
        assert_eq!(
            page("/dashboard/endpoints/s/webhook-secrets/production/reissue").as_deref(),
            Some("/dashboard/endpoints/s/production")
        );
        assert_eq!(
            page("/dashboard/endpoints/s/webhooks/sandbox/subscriptions/sub_1/recover").as_deref(),
            Some("/dashboard/endpoints/s/webhooks/sandbox/subscriptions/sub_1")
        );
        assert_eq!(
            page("/dashboard/endpoints/s/webhooks/sandbox/subscriptions").as_deref(),
            Some("/dashboard/endpoints/s/webhooks")
        );
        assert_eq!(
            page("/dashboard/endpoints/s/invitations/4/revoke").as_deref(),
            Some("/dashboard/endpoints/s/collaborators")
        );
        assert_eq!(
            page("/dashboard/endpoints/s/deliveries/9/redeliver").as_deref(),
            Some("/dashboard/endpoints/s/deliveries/9")
        );
        assert_eq!(
            page("/dashboard/endpoints/s/erasures/count").as_deref(),
            Some("/dashboard/endpoints/s/erasures")
        );
        assert_eq!(
            page("/dashboard/endpoints/s/records/new").as_deref(),
            Some("/dashboard/endpoints/s/records/new")
        );
        assert_eq!(
            page("/dashboard/endpoints/s/records/rec_1/edit").as_deref(),
            Some("/dashboard/endpoints/s/records/rec_1/edit")
        );
        assert_eq!(
            page("/dashboard/account/tokens/tok_1/revoke").as_deref(),
            Some("/dashboard/account")
        );
        assert_eq!(page("/dashboard/login"), None);
        assert_eq!(page("/dashboard/password-reset"), None);
        assert_eq!(page("/dashboard/endpoints/s/test/authorize"), None);
    }
}
