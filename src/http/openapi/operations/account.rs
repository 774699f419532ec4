//! Sessions, invitations and the caller's own account.

use serde_json::json;

use super::{CREATED_AT, account_example, endpoint_example, query};
use crate::domain::accounts::{MAX_PASSWORD_CHARS, MIN_PASSWORD_CHARS};
use crate::http::openapi::{Access, BodyKind, Operation, Who, schema_ref};
use crate::http::routes::Route;

pub(super) fn session_operations() -> Vec<Operation> {
    vec![
        Operation::new(Route::Login)
            .tag("Session")
            .summary(
                "Log in",
                "Checks e-mail and password and sets the session cookie. Failed logins are \
                 limited per account at one client address and per client address (429 with \
                 `Retry-After`, even for the right password); another address is not \
                 affected.",
            )
            .body(
                BodyKind::Json,
                schema_ref("LoginRequest"),
                json!({ "email": "ada@example.com", "password": "correct horse battery" }),
            )
            .ok(
                200,
                "Logged in; `Set-Cookie` carries the session.",
                schema_ref("Session"),
                json!({ "account": account_example(), "expires_at": "2026-11-23T03:15:27.353008Z" }),
            )
            .error(401, &["invalid_credentials"])
            .error(403, &["account_suspended"])
            .error(429, &["too_many_login_attempts"]),
        Operation::new(Route::Logout)
            .tag("Session")
            .summary(
                "Log out",
                "Ends the session of the cookie sent, if any, and clears the cookie; from \
                 another origin (`Origin`, `Sec-Fetch-Site`) 403 `cross_site_request`.",
            )
            .ok(
                200,
                "Logged out.",
                schema_ref("LoggedOut"),
                json!({ "logged_out": true }),
            )
            .error(403, &["cross_site_request"]),
        Operation::new(Route::GetSession)
            .tag("Session")
            .summary(
                "Who is logged in",
                "The account of the session cookie (or token).",
            )
            .access(Access::Account(Who::Any))
            .ok(
                200,
                "The account.",
                schema_ref("Account"),
                account_example(),
            ),
        Operation::new(Route::RequestPasswordReset)
            .tag("Session")
            .summary(
                "Ask for a password reset link",
                "When the address is an account's (and the account is not suspended), e-mails \
                 it a link to the dashboard's new-password page, which works once, for 30 \
                 minutes, and replaces the account's earlier link. The answer is the same \
                 whether the address has an account or not. Each request counts against the \
                 login limits as a failed login does (429 with `Retry-After`). Without \
                 `[smtp]` 409 `mail_not_configured`: the operator makes a link with `intake \
                 account reset-password EMAIL`.",
            )
            .body(
                BodyKind::Json,
                schema_ref("PasswordResetRequest"),
                json!({ "email": "ada@example.com" }),
            )
            .ok(
                202,
                "Asked: a link is on its way if the address has an account.",
                schema_ref("PasswordResetRequested"),
                json!({ "requested": true }),
            )
            .error(409, &["mail_not_configured"])
            .error(429, &["too_many_login_attempts"]),
        Operation::new(Route::CompletePasswordReset)
            .tag("Session")
            .summary(
                "Set a new password with a reset link",
                format!(
                    "`token` is the last part of the link's path. The new password has {}. \
                     The link is used up and every session of the account ends; personal API \
                     tokens stay valid. Log in afterwards.",
                    password_length()
                ),
            )
            .body(
                BodyKind::Json,
                schema_ref("PasswordResetCompletion"),
                json!({ "token": "ipr_…", "new_password": "a new long password" }),
            )
            .ok(200, "The password is set.", schema_ref("Account"), account_example())
            .error(410, &["password_reset_link_invalid"]),
        Operation::new(Route::GetInvitation)
            .tag("Invitations")
            .summary(
                "What an invitation offers",
                "The token is the credential.",
            )
            .access(Access::Invitation)
            .ok(
                200,
                "The invitation.",
                schema_ref("InvitationPreview"),
                json!({ "endpoint_name": "Orders", "email": "ada@example.com",
                        "permissions": ["create", "read"], "invited_by": "owner@example.com",
                        "expires_at": CREATED_AT, "account_exists": false }),
            )
            .error(404, &["invitation_not_found"])
            .error(
                410,
                &[
                    "invitation_expired",
                    "invitation_revoked",
                    "invitation_already_accepted",
                ],
            ),
        Operation::new(
            Route::AcceptInvitation,
        )
        .tag("Invitations")
        .summary(
            "Accept an invitation",
            format!(
                "Logged in (token or cookie): accepts for that account, whose e-mail must be \
                 the invited one. Not logged in: `{{\"password\"}}` ({}) creates the invited \
                 account and logs it in (`Set-Cookie`).",
                password_length()
            ),
        )
        .access(Access::Invitation)
        .body(
            BodyKind::OptionalJson,
            schema_ref("AcceptInvitationRequest"),
            json!({ "password": "correct horse battery" }),
        )
        .ok(
            200,
            "Accepted: the account and the endpoint as it now sees it.",
            schema_ref("Acceptance"),
            json!({ "account": account_example(), "endpoint": endpoint_example() }),
        )
        .error(401, &["invalid_token", "session_expired", "login_required"])
        .error(403, &["account_suspended", "invitation_for_other_account"])
        .error(404, &["invitation_not_found"])
        .error(409, &["conflict"])
        .error(
            410,
            &[
                "invitation_expired",
                "invitation_revoked",
                "invitation_already_accepted",
            ],
        ),
    ]
}

pub(super) fn account_operations() -> Vec<Operation> {
    let any = |route| {
        Operation::new(route)
            .tag("Account")
            .access(Access::Account(Who::Any))
    };
    let token = json!({ "id": "tok_9f2c4e1a7b3d5f60", "name": "ci", "created_at": CREATED_AT,
                        "expires_at": "2027-02-20T03:15:27.353008Z", "expired": false });
    let session = json!({ "id": "ses_4b8e1c0f2a6d9e37", "created_at": CREATED_AT,
                          "expires_at": "2026-12-22T03:15:27.353008Z", "current": true });
    let notification = json!({ "id": 4, "kind": "endpoint_deployed",
        "endpoint_slug": "orders-7k2m9x4q1w8p", "message": "Orders was deployed.",
        "created_at": CREATED_AT, "read": false, "read_at": null, "resolution": null,
        "resolved_at": null });
    vec![
        any(Route::GetAccount)
            .summary("The caller's account", "")
            .ok(200, "The account.", schema_ref("Account"), account_example()),
        any(Route::ChangePassword)
            .summary(
                "Change the password",
                format!(
                    "The new password has {}. Every other session of the account ends (the \
                     one making the change stays; with a token, all end); personal API tokens \
                     stay valid.",
                    password_length()
                ),
            )
            .body(
                BodyKind::Json,
                schema_ref("PasswordChangeRequest"),
                json!({ "current_password": "old password", "new_password": "a new long password" }),
            )
            .ok(200, "Changed.", schema_ref("Account"), account_example())
            .error(401, &["invalid_credentials"])
            .error(429, &["too_many_login_attempts"]),
        any(Route::ListSessions)
            .summary(
                "The caller's sessions",
                "The account's live dashboard sessions, newest first, never their cookies; \
                 `current` marks the session of this call.",
            )
            .ok(200, "The sessions.", schema_ref("SessionInfoList"), json!({ "data": [session] })),
        any(Route::SignOutOtherSessions)
            .summary(
                "Sign out the other sessions",
                "Ends every session of the account but the one making the call (with a token, \
                 all of them); answers how many ended.",
            )
            .ok(200, "Ended.", schema_ref("SessionsEnded"), json!({ "ended": 2 })),
        any(Route::ListTokens)
            .summary("The caller's tokens", "Never the tokens themselves.")
            .ok(200, "The tokens.", schema_ref("TokenList"), json!({ "data": [token] })),
        any(Route::CreateToken)
            .summary(
                "Create a token",
                "The response holds `token`, shown only this once. With `expires_at` the token \
                 is refused from then on (401 `invalid_token`) and listed as `expired` until \
                 revoked.",
            )
            .body(
                BodyKind::Json,
                schema_ref("TokenRequest"),
                json!({ "name": "ci", "expires_at": "2027-02-20T03:15:27.353008Z" }),
            )
            .ok(201, "Created.", schema_ref("NewToken"), {
                let mut t = token.clone();
                t["token"] = json!("itk_…");
                t
            }),
        any(Route::RevokeToken)
            .summary("Revoke a token", "It stops working at once.")
            .ok(
                200,
                "Revoked.",
                schema_ref("RevokedToken"),
                json!({ "id": "tok_9f2c4e1a7b3d5f60", "revoked": true }),
            )
            .error(404, &["token_not_found"]),
        any(Route::ListNotifications)
            .summary("The caller's notifications", "Newest first.")
            .param(query(
                "unread",
                "`true`: unread ones only.",
                json!({ "type": "string", "enum": ["true", "false"] }),
            ))
            .ok(200, "The notifications.", schema_ref("NotificationList"), json!({ "data": [notification] }))
            .error(400, &["invalid_parameter"]),
        any(Route::MarkAllNotificationsRead)
            .summary("Mark every notification read", "Answers how many were unread.")
            .ok(200, "How many were marked.", schema_ref("Marked"), json!({ "marked": 3 })),
        any(Route::MarkNotificationRead)
            .summary("Mark a notification read", "")
            .ok(200, "The notification.", schema_ref("Notification"), {
                let mut n = notification.clone();
                n["read"] = json!(true);
                n["read_at"] = json!(CREATED_AT);
                n
            })
            .error(404, &["notification_not_found"]),
    ]
}

/// A password's length as the descriptions say it: `10 to 1024 characters`.
fn password_length() -> String {
    format!("{MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters")
}
