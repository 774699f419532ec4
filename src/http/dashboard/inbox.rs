//! The account's notifications (deploys, deploy requests...) and the server owner's mail
//! outbox with the "send test e-mail" form.

use askama::Template;

use super::page::{Layout, Outcome, Pager, redirect, render};
use super::visitor::{signed_in, user_form};
use crate::domain::accounts;
use crate::domain::error::Missing;
use crate::domain::mail::{self, MailView};
use crate::domain::notifications::{self, NotificationView};
use crate::http::app::App;
use crate::http::reply::id_param;
use crate::http::reply::query_params;
use crate::http::request::Request;

/// Messages per page of the outbox.
const MAIL_PER_PAGE: usize = 50;

#[derive(Template)]
#[template(path = "dashboard/notifications.html")]
struct NotificationsPage {
    layout: Layout,
    notifications: Vec<NotificationView>,
    unread: usize,
}

/// A notification's link, and its words: the link goes through [`open`], which marks the
/// notification read on the way to the page it announces. A resolved deploy request asks for
/// nothing more.
pub fn notification_link(n: &NotificationView) -> (String, &'static str) {
    let words = match (n.kind.as_str(), &n.resolution) {
        ("deploy_requested", None) => "Review the deploy request",
        ("deploy_requested" | "deploy_request_rejected", _) => "See the deploy section",
        ("endpoint_deployed", _) => "Take the production key",
        ("invitation_accepted", _) => "See the collaborators",
        ("webhook_disabled", _) => "See the webhook settings",
        _ => "Open the endpoint",
    };
    (format!("/dashboard/notifications/{}/open", n.id), words)
}

/// How a resolved notification's subject was settled, in words.
pub fn resolution_words(outcome: &str) -> &'static str {
    match outcome {
        "approved" => "the request was approved and the endpoint deployed",
        "rejected" => "the request was rejected",
        "withdrawn" => "the request was withdrawn by the collaborator who asked",
        "deployed" => "the endpoint was deployed",
        "requested_again" => "the deploy was requested again",
        _ => "settled",
    }
}

/// `GET /dashboard/notifications`.
pub fn notifications(app: &App, req: &Request) -> Outcome {
    let user = signed_in(app, req)?;
    let notifications = notifications::list(app.handles.store.as_ref(), user.account.id, false)?;
    let page = NotificationsPage {
        layout: user.layout(app, "Notifications", "notifications", req),
        unread: notifications.iter().filter(|n| !n.read).count(),
        notifications,
    };
    render(&page)
}

/// `POST /dashboard/notifications/read-all`.
pub async fn mark_all_read(app: &App, req: &mut Request) -> Outcome {
    let user = signed_in(app, req)?;
    user_form(app, req, &user).await?;
    notifications::mark_all_read(&app.handles, user.account.id)?;
    Ok(redirect("/dashboard/notifications?done=all-read"))
}

/// `POST /dashboard/notifications/{id}/read`.
pub async fn mark_read(app: &App, req: &mut Request, id: &str) -> Outcome {
    let user = signed_in(app, req)?;
    user_form(app, req, &user).await?;
    let id = id_param(id, Missing::Notification)?;
    notifications::mark_read(&app.handles, user.account.id, id)?;
    Ok(redirect("/dashboard/notifications?done=read"))
}

/// `GET /dashboard/notifications/{id}/open`: following a notification's link marks it read,
/// then leads to the page it announces.
pub fn open(app: &App, req: &Request, id: &str) -> Outcome {
    let user = signed_in(app, req)?;
    let id = id_param(id, Missing::Notification)?;
    let read = notifications::mark_read(&app.handles, user.account.id, id)?;
    Ok(redirect(&notifications::page(
        &read.kind,
        &read.endpoint_slug,
    )))
}

#[derive(Template)]
#[template(path = "dashboard/mail.html")]
struct MailPage {
    layout: Layout,
    messages: Vec<MailView>,
    smtp_configured: bool,
    pager: Pager,
    default_to: String,
}

/// `GET /dashboard/mail?cursor=` (server owner).
pub fn mail(app: &App, req: &Request) -> Outcome {
    let user = signed_in(app, req)?;
    accounts::require_server_owner(&user.account)?;
    let params = query_params(&req.query);
    let cursor = params.get("cursor").map(String::as_str);
    let page = mail::list(
        app.handles.store.as_ref(),
        MAIL_PER_PAGE,
        cursor,
        app.mailer.smtp_configured(),
    )?;
    let pager = Pager::new("/dashboard/mail", &[], cursor, page.pagination.next_cursor);
    let page = MailPage {
        layout: user.layout(app, "Mail", "mail", req),
        messages: page.data,
        smtp_configured: page.smtp_configured,
        pager,
        default_to: user.account.email.clone(),
    };
    render(&page)
}

/// `POST /dashboard/mail/test`: queues the test e-mail (to the account by default).
pub async fn send_test(app: &App, req: &mut Request) -> Outcome {
    let user = signed_in(app, req)?;
    accounts::require_server_owner(&user.account)?;
    let form = user_form(app, req, &user).await?;
    let to = match form.text("to").trim() {
        "" => user.account.email.clone(),
        to => to.to_string(),
    };
    mail::queue(&app.handles, mail::test_mail(&to, &app.config.public_url()))?;
    Ok(redirect("/dashboard/mail?done=mail"))
}
