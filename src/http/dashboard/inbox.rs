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

/// The page a notification is about, and the words of its link.
pub fn notification_link(n: &NotificationView) -> (String, &'static str) {
    let endpoint = format!("/dashboard/endpoints/{}", n.endpoint_slug);
    match n.kind.as_str() {
        "deploy_requested" => (
            format!("{endpoint}#deploy-title"),
            "Review the deploy request",
        ),
        "endpoint_deployed" => (format!("{endpoint}/production"), "Take the production key"),
        "deploy_request_rejected" => (format!("{endpoint}#deploy-title"), "See the deploy section"),
        "invitation_accepted" => (format!("{endpoint}/collaborators"), "See the collaborators"),
        "webhook_disabled" => (format!("{endpoint}/webhooks"), "See the webhook settings"),
        _ => (endpoint, "Open the endpoint"),
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
