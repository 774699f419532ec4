//! The route table: every path the server answers, its template and its methods.

use http::Method;

use crate::http::error::Result;
use crate::store::Environment;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route<'a> {
    Health,
    Ready,
    Metrics,
    DataCollection {
        slug: &'a str,
    },
    DataSearch {
        slug: &'a str,
    },
    DataPoll {
        slug: &'a str,
    },
    DataStream {
        slug: &'a str,
    },
    DataRecord {
        slug: &'a str,
        record_id: &'a str,
    },
    AuthLogin,
    AuthLogout,
    AuthSession,
    Invitation {
        token: &'a str,
    },
    InvitationAccept {
        token: &'a str,
    },
    ManageAccount,
    ManagePassword,
    ManageAccounts,
    ManageAccountById {
        id: &'a str,
    },
    ManageTokens,
    ManageToken {
        id: &'a str,
    },
    ManageNotifications,
    ManageNotificationsReadAll,
    ManageNotificationRead {
        id: &'a str,
    },
    ManageEndpoints,
    ManageEndpoint {
        slug: &'a str,
    },
    ManageDeploy {
        slug: &'a str,
    },
    ManageDeployRequest {
        slug: &'a str,
    },
    ManageDeployApprove {
        slug: &'a str,
    },
    ManageDeployReject {
        slug: &'a str,
    },
    ManageRequests {
        slug: &'a str,
    },
    ManageInvitations {
        slug: &'a str,
    },
    ManageInvitation {
        slug: &'a str,
        id: &'a str,
    },
    ManageCollaborators {
        slug: &'a str,
    },
    ManageCollaborator {
        slug: &'a str,
        account_id: &'a str,
    },
    ManageAudit {
        slug: &'a str,
    },
    ManageWebhook {
        slug: &'a str,
        environment: &'a str,
    },
    ManageSubscriptions {
        slug: &'a str,
        environment: &'a str,
    },
    ManageSubscription {
        slug: &'a str,
        environment: &'a str,
        id: &'a str,
    },
    ManageSubscriptionRecover {
        slug: &'a str,
        environment: &'a str,
        id: &'a str,
    },
    ManageSubscriptionTest {
        slug: &'a str,
        environment: &'a str,
        id: &'a str,
    },
    ManageCallerRecovery {
        slug: &'a str,
        environment: &'a str,
    },
    ManageDeliveries {
        slug: &'a str,
    },
    ManageDelivery {
        slug: &'a str,
        id: &'a str,
    },
    ManageRedeliver {
        slug: &'a str,
        id: &'a str,
    },
    ManageRetryDelivery {
        slug: &'a str,
        id: &'a str,
    },
    ManageUsage {
        slug: &'a str,
    },
    ManageWebhookSecret {
        slug: &'a str,
        env: Environment,
    },
    ManageWebhookSecretReissue {
        slug: &'a str,
        env: Environment,
    },
    ManageKeyRotate {
        slug: &'a str,
        env: Environment,
    },
    ManageKeyRevokePrevious {
        slug: &'a str,
        env: Environment,
    },
    ManageCollaboratorKeyRotate {
        slug: &'a str,
        account_id: &'a str,
        env: Environment,
    },
    ManageCollaboratorKeyRevokePrevious {
        slug: &'a str,
        account_id: &'a str,
        env: Environment,
    },
    ManageMail,
    ManageMailTest,
    ManageMailMessage {
        id: &'a str,
    },
    ManageBackups,
    Dashboard {
        path: &'a str,
    },
    // The OpenAPI documents (`crate::http::openapi`).
    OpenApi,
    DataOpenApi {
        slug: &'a str,
    },
}

impl<'a> Route<'a> {
    pub fn resolve(path: &'a str) -> Option<Route<'a>> {
        // The dashboard's pages (`/dashboard/...`, `/invitations/{token}`) have a router of
        // their own (`dashboard::router`).
        if crate::http::is_dashboard_path(path) {
            return Some(Route::Dashboard { path });
        }
        let path = path.strip_suffix('/').unwrap_or(path);
        let segments: Vec<&str> = path.split('/').skip(1).collect();
        if segments.iter().any(|s| s.is_empty()) {
            return None;
        }
        Some(match segments.as_slice() {
            ["healthz"] => Route::Health,
            ["readyz"] => Route::Ready,
            ["metrics"] => Route::Metrics,
            ["api", "v1", "data", slug] => Route::DataCollection { slug },
            ["api", "v1", "data", slug, "search"] => Route::DataSearch { slug },
            ["api", "v1", "data", slug, "poll"] => Route::DataPoll { slug },
            ["api", "v1", "data", slug, "stream"] => Route::DataStream { slug },
            // Before the record arm: `openapi.json` is never a record id (those start `rec_`).
            ["api", "v1", "openapi.json"] => Route::OpenApi,
            ["api", "v1", "data", slug, "openapi.json"] => Route::DataOpenApi { slug },
            ["api", "v1", "data", slug, record_id] => Route::DataRecord { slug, record_id },
            ["api", "v1", "auth", "login"] => Route::AuthLogin,
            ["api", "v1", "auth", "logout"] => Route::AuthLogout,
            ["api", "v1", "auth", "session"] => Route::AuthSession,
            ["api", "v1", "invitations", token] => Route::Invitation { token },
            ["api", "v1", "invitations", token, "accept"] => Route::InvitationAccept { token },
            ["api", "v1", "manage", rest @ ..] => return Route::manage(rest),
            _ => return None,
        })
    }

    fn manage(segments: &[&'a str]) -> Option<Route<'a>> {
        Some(match *segments {
            ["account"] => Route::ManageAccount,
            ["account", "password"] => Route::ManagePassword,
            ["accounts"] => Route::ManageAccounts,
            ["accounts", id] => Route::ManageAccountById { id },
            ["tokens"] => Route::ManageTokens,
            ["tokens", id] => Route::ManageToken { id },
            ["notifications"] => Route::ManageNotifications,
            ["notifications", "read-all"] => Route::ManageNotificationsReadAll,
            ["notifications", id, "read"] => Route::ManageNotificationRead { id },
            ["endpoints"] => Route::ManageEndpoints,
            ["endpoints", slug] => Route::ManageEndpoint { slug },
            ["endpoints", slug, "deploy"] => Route::ManageDeploy { slug },
            ["endpoints", slug, "deploy-request"] => Route::ManageDeployRequest { slug },
            ["endpoints", slug, "deploy-request", "approve"] => Route::ManageDeployApprove { slug },
            ["endpoints", slug, "deploy-request", "reject"] => Route::ManageDeployReject { slug },
            ["endpoints", slug, "requests"] => Route::ManageRequests { slug },
            ["endpoints", slug, "invitations"] => Route::ManageInvitations { slug },
            ["endpoints", slug, "invitations", id] => Route::ManageInvitation { slug, id },
            ["endpoints", slug, "collaborators"] => Route::ManageCollaborators { slug },
            ["endpoints", slug, "collaborators", account_id] => {
                Route::ManageCollaborator { slug, account_id }
            }
            ["endpoints", slug, "audit"] => Route::ManageAudit { slug },
            ["endpoints", slug, "webhooks", environment] => {
                Route::ManageWebhook { slug, environment }
            }
            ["endpoints", slug, "webhooks", environment, "subscriptions"] => {
                Route::ManageSubscriptions { slug, environment }
            }
            [
                "endpoints",
                slug,
                "webhooks",
                environment,
                "subscriptions",
                id,
            ] => Route::ManageSubscription {
                slug,
                environment,
                id,
            },
            [
                "endpoints",
                slug,
                "webhooks",
                environment,
                "subscriptions",
                id,
                "recover",
            ] => Route::ManageSubscriptionRecover {
                slug,
                environment,
                id,
            },
            [
                "endpoints",
                slug,
                "webhooks",
                environment,
                "subscriptions",
                id,
                "test",
            ] => Route::ManageSubscriptionTest {
                slug,
                environment,
                id,
            },
            [
                "endpoints",
                slug,
                "webhooks",
                environment,
                "caller-recovery",
            ] => Route::ManageCallerRecovery { slug, environment },
            ["endpoints", slug, "deliveries"] => Route::ManageDeliveries { slug },
            ["endpoints", slug, "deliveries", id] => Route::ManageDelivery { slug, id },
            ["endpoints", slug, "deliveries", id, "redeliver"] => {
                Route::ManageRedeliver { slug, id }
            }
            ["endpoints", slug, "deliveries", id, "retry"] => {
                Route::ManageRetryDelivery { slug, id }
            }
            ["endpoints", slug, "usage"] => Route::ManageUsage { slug },
            // Only the two environments exist: any other name matches no route (404).
            ["endpoints", slug, "webhook-secrets", env] => Route::ManageWebhookSecret {
                slug,
                env: Environment::parse(env)?,
            },
            ["endpoints", slug, "webhook-secrets", env, "reissue"] => {
                Route::ManageWebhookSecretReissue {
                    slug,
                    env: Environment::parse(env)?,
                }
            }
            ["endpoints", slug, "keys", env, "rotate"] => Route::ManageKeyRotate {
                slug,
                env: Environment::parse(env)?,
            },
            ["endpoints", slug, "keys", env, "revoke-previous"] => Route::ManageKeyRevokePrevious {
                slug,
                env: Environment::parse(env)?,
            },
            [
                "endpoints",
                slug,
                "collaborators",
                account_id,
                "keys",
                env,
                "rotate",
            ] => Route::ManageCollaboratorKeyRotate {
                slug,
                account_id,
                env: Environment::parse(env)?,
            },
            [
                "endpoints",
                slug,
                "collaborators",
                account_id,
                "keys",
                env,
                "revoke-previous",
            ] => Route::ManageCollaboratorKeyRevokePrevious {
                slug,
                account_id,
                env: Environment::parse(env)?,
            },
            ["mail"] => Route::ManageMail,
            ["mail", "test"] => Route::ManageMailTest,
            ["mail", id] => Route::ManageMailMessage { id },
            ["backups"] => Route::ManageBackups,
            _ => return None,
        })
    }

    /// The path template, as logged.
    pub fn template(&self) -> &'static str {
        match self {
            Route::Health => "/healthz",
            Route::Ready => "/readyz",
            Route::Metrics => "/metrics",
            Route::DataCollection { .. } => "/api/v1/data/{slug}",
            Route::DataSearch { .. } => "/api/v1/data/{slug}/search",
            Route::DataPoll { .. } => "/api/v1/data/{slug}/poll",
            Route::DataStream { .. } => "/api/v1/data/{slug}/stream",
            Route::DataRecord { .. } => "/api/v1/data/{slug}/{record_id}",
            Route::AuthLogin => "/api/v1/auth/login",
            Route::AuthLogout => "/api/v1/auth/logout",
            Route::AuthSession => "/api/v1/auth/session",
            Route::Invitation { .. } => "/api/v1/invitations/{token}",
            Route::InvitationAccept { .. } => "/api/v1/invitations/{token}/accept",
            Route::ManageAccount => "/api/v1/manage/account",
            Route::ManagePassword => "/api/v1/manage/account/password",
            Route::ManageAccounts => "/api/v1/manage/accounts",
            Route::ManageAccountById { .. } => "/api/v1/manage/accounts/{id}",
            Route::ManageTokens => "/api/v1/manage/tokens",
            Route::ManageToken { .. } => "/api/v1/manage/tokens/{id}",
            Route::ManageNotifications => "/api/v1/manage/notifications",
            Route::ManageNotificationsReadAll => "/api/v1/manage/notifications/read-all",
            Route::ManageNotificationRead { .. } => "/api/v1/manage/notifications/{id}/read",
            Route::ManageEndpoints => "/api/v1/manage/endpoints",
            Route::ManageEndpoint { .. } => "/api/v1/manage/endpoints/{slug}",
            Route::ManageDeploy { .. } => "/api/v1/manage/endpoints/{slug}/deploy",
            Route::ManageDeployRequest { .. } => "/api/v1/manage/endpoints/{slug}/deploy-request",
            Route::ManageDeployApprove { .. } => {
                "/api/v1/manage/endpoints/{slug}/deploy-request/approve"
            }
            Route::ManageDeployReject { .. } => {
                "/api/v1/manage/endpoints/{slug}/deploy-request/reject"
            }
            Route::ManageRequests { .. } => "/api/v1/manage/endpoints/{slug}/requests",
            Route::ManageInvitations { .. } => "/api/v1/manage/endpoints/{slug}/invitations",
            Route::ManageInvitation { .. } => "/api/v1/manage/endpoints/{slug}/invitations/{id}",
            Route::ManageCollaborators { .. } => "/api/v1/manage/endpoints/{slug}/collaborators",
            Route::ManageCollaborator { .. } => {
                "/api/v1/manage/endpoints/{slug}/collaborators/{account_id}"
            }
            Route::ManageAudit { .. } => "/api/v1/manage/endpoints/{slug}/audit",
            Route::ManageWebhook { .. } => "/api/v1/manage/endpoints/{slug}/webhooks/{environment}",
            Route::ManageSubscriptions { .. } => {
                "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions"
            }
            Route::ManageSubscription { .. } => {
                "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions/{subscription_id}"
            }
            Route::ManageSubscriptionRecover { .. } => {
                "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions/{subscription_id}/recover"
            }
            Route::ManageSubscriptionTest { .. } => {
                "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions/{subscription_id}/test"
            }
            Route::ManageCallerRecovery { .. } => {
                "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/caller-recovery"
            }
            Route::ManageDeliveries { .. } => "/api/v1/manage/endpoints/{slug}/deliveries",
            Route::ManageDelivery { .. } => "/api/v1/manage/endpoints/{slug}/deliveries/{id}",
            Route::ManageRedeliver { .. } => {
                "/api/v1/manage/endpoints/{slug}/deliveries/{id}/redeliver"
            }
            Route::ManageRetryDelivery { .. } => {
                "/api/v1/manage/endpoints/{slug}/deliveries/{id}/retry"
            }
            Route::ManageUsage { .. } => "/api/v1/manage/endpoints/{slug}/usage",
            Route::ManageWebhookSecret { .. } => {
                "/api/v1/manage/endpoints/{slug}/webhook-secrets/{environment}"
            }
            Route::ManageWebhookSecretReissue { .. } => {
                "/api/v1/manage/endpoints/{slug}/webhook-secrets/{environment}/reissue"
            }
            Route::ManageKeyRotate { .. } => {
                "/api/v1/manage/endpoints/{slug}/keys/{environment}/rotate"
            }
            Route::ManageKeyRevokePrevious { .. } => {
                "/api/v1/manage/endpoints/{slug}/keys/{environment}/revoke-previous"
            }
            Route::ManageCollaboratorKeyRotate { .. } => {
                "/api/v1/manage/endpoints/{slug}/collaborators/{account_id}/keys/{environment}/rotate"
            }
            Route::ManageCollaboratorKeyRevokePrevious { .. } => {
                "/api/v1/manage/endpoints/{slug}/collaborators/{account_id}/keys/{environment}/revoke-previous"
            }
            Route::ManageMail => "/api/v1/manage/mail",
            Route::ManageMailTest => "/api/v1/manage/mail/test",
            Route::ManageMailMessage { .. } => "/api/v1/manage/mail/{id}",
            Route::ManageBackups => "/api/v1/manage/backups",
            Route::Dashboard { .. } => "/dashboard",
            Route::OpenApi => "/api/v1/openapi.json",
            Route::DataOpenApi { .. } => "/api/v1/data/{slug}/openapi.json",
        }
    }

    /// The methods this route answers, as an `Allow` header value.
    pub fn allowed(&self) -> &'static str {
        match self {
            Route::Health
            | Route::Ready
            | Route::Metrics
            | Route::DataSearch { .. }
            | Route::DataPoll { .. }
            | Route::DataStream { .. }
            | Route::AuthSession
            | Route::Invitation { .. }
            | Route::ManageAccount
            | Route::ManageAccounts
            | Route::ManageNotifications
            | Route::ManageRequests { .. }
            | Route::ManageCollaborators { .. }
            | Route::ManageAudit { .. }
            | Route::ManageDeliveries { .. }
            | Route::ManageDelivery { .. }
            | Route::ManageUsage { .. }
            | Route::ManageWebhookSecret { .. }
            | Route::ManageMail
            | Route::ManageMailMessage { .. }
            | Route::OpenApi
            | Route::DataOpenApi { .. } => "GET",
            Route::DataCollection { .. }
            | Route::ManageEndpoints
            | Route::ManageTokens
            | Route::ManageInvitations { .. }
            | Route::ManageSubscriptions { .. }
            | Route::ManageCallerRecovery { .. } => "GET, POST",
            Route::DataRecord { .. } => "GET, PUT, DELETE",
            Route::ManageEndpoint { .. } => "GET, PATCH, DELETE",
            Route::ManageAccountById { .. } => "GET, PATCH",
            Route::ManageCollaborator { .. } => "PATCH, DELETE",
            Route::ManageWebhook { .. } => "GET, PUT, PATCH, DELETE",
            Route::ManageSubscription { .. } => "GET, PATCH, DELETE",
            Route::ManageToken { .. } | Route::ManageInvitation { .. } => "DELETE",
            Route::AuthLogin
            | Route::AuthLogout
            | Route::InvitationAccept { .. }
            | Route::ManagePassword
            | Route::ManageNotificationRead { .. }
            | Route::ManageNotificationsReadAll
            | Route::ManageDeploy { .. }
            | Route::ManageDeployRequest { .. }
            | Route::ManageDeployApprove { .. }
            | Route::ManageDeployReject { .. }
            | Route::ManageRedeliver { .. }
            | Route::ManageRetryDelivery { .. }
            | Route::ManageWebhookSecretReissue { .. }
            | Route::ManageKeyRotate { .. }
            | Route::ManageKeyRevokePrevious { .. }
            | Route::ManageCollaboratorKeyRotate { .. }
            | Route::ManageCollaboratorKeyRevokePrevious { .. }
            | Route::ManageSubscriptionRecover { .. }
            | Route::ManageSubscriptionTest { .. }
            | Route::ManageMailTest
            | Route::ManageBackups => "POST",
            Route::Dashboard { .. } => "GET, HEAD, POST",
        }
    }

    pub fn check_method(&self, method: &Method) -> Result<()> {
        let allowed = self.allowed();
        if allowed.split(", ").any(|m| m == method.as_str()) {
            Ok(())
        } else {
            Err(crate::http::error::HttpError::MethodNotAllowed(allowed))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_paths() {
        assert_eq!(
            Route::resolve("/api/v1/data/abc"),
            Some(Route::DataCollection { slug: "abc" })
        );
        assert_eq!(
            Route::resolve("/api/v1/data/abc/rec_1/"),
            Some(Route::DataRecord {
                slug: "abc",
                record_id: "rec_1"
            })
        );
        assert_eq!(Route::resolve("/api/v1/data"), None);
        assert_eq!(Route::resolve("/api/v1/data//x"), None);
        assert_eq!(Route::resolve("/api/v1/data/a/b/c"), None);
        assert_eq!(
            Route::resolve("/api/v1/manage/endpoints/s/deploy"),
            Some(Route::ManageDeploy { slug: "s" })
        );
        assert_eq!(
            Route::resolve("/api/v1/manage/endpoints/s/webhook-secrets/production"),
            Some(Route::ManageWebhookSecret {
                slug: "s",
                env: Environment::Production
            })
        );
        assert_eq!(
            Route::resolve("/api/v1/manage/endpoints/s/webhook-secrets/sandbox/reissue"),
            Some(Route::ManageWebhookSecretReissue {
                slug: "s",
                env: Environment::Sandbox
            })
        );
        for unknown in ["staging", "Sandbox", "live"] {
            let path = format!("/api/v1/manage/endpoints/s/webhook-secrets/{unknown}");
            assert_eq!(Route::resolve(&path), None);
            assert_eq!(Route::resolve(&format!("{path}/reissue")), None);
        }
        assert_eq!(
            Route::resolve("/api/v1/manage/endpoints/s/webhook-secrets"),
            None
        );
        assert_eq!(
            Route::resolve("/api/v1/manage/mail"),
            Some(Route::ManageMail)
        );
        assert_eq!(
            Route::resolve("/api/v1/manage/mail/test"),
            Some(Route::ManageMailTest)
        );
        assert_eq!(
            Route::resolve("/api/v1/manage/mail/12"),
            Some(Route::ManageMailMessage { id: "12" })
        );
        assert_eq!(
            Route::resolve("/api/v1/manage/backups"),
            Some(Route::ManageBackups)
        );
    }

    #[test]
    fn methods() {
        let r = Route::DataRecord {
            slug: "s",
            record_id: "r",
        };
        assert!(r.check_method(&Method::PUT).is_ok());
        assert!(matches!(
            r.check_method(&Method::POST),
            Err(crate::http::error::HttpError::MethodNotAllowed(
                "GET, PUT, DELETE"
            ))
        ));
    }
}
