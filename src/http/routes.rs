//! The route table: every operation of the HTTP API, one line each, with its method, its path
//! template and its OpenAPI operation id. Everything else about a route is derived from its
//! line: which route a path and method name ([`Resolved::resolve`], [`ApiPath::route`]), the
//! methods a path answers (a 405's `Allow`), the template the request log, the metrics and the
//! traces record, and the paths and methods of the OpenAPI document.
//!
//! The table is `http`'s own, beside `api` and `openapi`, because both are derived from it
//! and neither may import the other: `api::dispatch` binds each route to its handler (an
//! exhaustive match, so a route without a handler does not compile) and `openapi::operations`
//! documents each route (`Operation::new(Route::…)`; the openapi tests hold every route to
//! exactly one operation).
//!
//! Routing is done here rather than with nested warp filters so that 404 vs 405 is exact and
//! every log line can name its path template.

use http::Method;

use crate::http::error::{HttpError, Result};
use crate::store::Environment;

/// The methods of the API's routes, in the order an `Allow` header lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verb {
    Get,
    Post,
    Put,
    Patch,
    Delete,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
            Verb::Put => "PUT",
            Verb::Patch => "PATCH",
            Verb::Delete => "DELETE",
        }
    }

    /// Lower case, as OpenAPI writes it.
    pub fn lowercase(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::Post => "post",
            Verb::Put => "put",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }
}

/// Declares [`Route`] and its table. A line is `Name: VERB "template" "operationId"`, and
/// `known_environment` after it when its `{environment}` must name one of the two
/// environments for the path to match (any other name is a 404, not a 400 of the handler).
macro_rules! routes {
    (@known) => { false };
    (@known known_environment) => { true };
    ($($route:ident: $verb:ident $template:literal $id:literal $($known:ident)?;)*) => {
        /// One operation of the API: a method on a path template.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Route {
            $($route,)*
        }

        impl Route {
            /// Every route.
            pub const ALL: &[Route] = &[$(Route::$route,)*];

            fn line(self) -> Line {
                match self {
                    $(Route::$route => Line {
                        verb: Verb::$verb,
                        template: $template,
                        operation_id: $id,
                        known_environment: routes!(@known $($known)?),
                    },)*
                }
            }
        }
    };
}

/// One line of the table.
struct Line {
    verb: Verb,
    template: &'static str,
    operation_id: &'static str,
    known_environment: bool,
}

routes! {
    // Data (an endpoint's records and its change stream).
    CreateRecord: Post "/api/v1/data/{slug}" "createRecord";
    ListRecords: Get "/api/v1/data/{slug}" "listRecords";
    GetRecord: Get "/api/v1/data/{slug}/{record_id}" "getRecord";
    ReplaceRecord: Put "/api/v1/data/{slug}/{record_id}" "replaceRecord";
    DeleteRecord: Delete "/api/v1/data/{slug}/{record_id}" "deleteRecord";
    CreateRecordBatch: Post "/api/v1/data/{slug}/batch" "createRecordBatch";
    SearchRecords: Get "/api/v1/data/{slug}/search" "searchRecords";
    PollRecords: Get "/api/v1/data/{slug}/poll" "pollRecords";
    ExportRecords: Get "/api/v1/data/{slug}/export" "exportRecords";
    StreamRecords: Get "/api/v1/data/{slug}/stream" "streamRecords";
    // Documentation and operations.
    GetOpenApi: Get "/api/v1/openapi.json" "getOpenApi";
    GetEndpointOpenApi: Get "/api/v1/data/{slug}/openapi.json" "getEndpointOpenApi";
    Health: Get "/healthz" "health";
    Ready: Get "/readyz" "ready";
    Metrics: Get "/metrics" "metrics";
    // Sessions and invitations.
    Login: Post "/api/v1/auth/login" "login";
    Logout: Post "/api/v1/auth/logout" "logout";
    GetSession: Get "/api/v1/auth/session" "getSession";
    RequestPasswordReset: Post "/api/v1/auth/password-reset" "requestPasswordReset";
    CompletePasswordReset: Post "/api/v1/auth/password-reset/complete" "completePasswordReset";
    GetInvitation: Get "/api/v1/invitations/{token}" "getInvitation";
    AcceptInvitation: Post "/api/v1/invitations/{token}/accept" "acceptInvitation";
    // The caller's own account.
    GetAccount: Get "/api/v1/manage/account" "getAccount";
    ChangePassword: Post "/api/v1/manage/account/password" "changePassword";
    ListSessions: Get "/api/v1/manage/account/sessions" "listSessions";
    SignOutOtherSessions: Post "/api/v1/manage/account/sessions/sign-out-others" "signOutOtherSessions";
    ListTokens: Get "/api/v1/manage/tokens" "listTokens";
    CreateToken: Post "/api/v1/manage/tokens" "createToken";
    RevokeToken: Delete "/api/v1/manage/tokens/{id}" "revokeToken";
    ListNotifications: Get "/api/v1/manage/notifications" "listNotifications";
    MarkAllNotificationsRead: Post "/api/v1/manage/notifications/read-all" "markAllNotificationsRead";
    MarkNotificationRead: Post "/api/v1/manage/notifications/{id}/read" "markNotificationRead";
    // Endpoints.
    ListEndpoints: Get "/api/v1/manage/endpoints" "listEndpoints";
    CreateEndpoint: Post "/api/v1/manage/endpoints" "createEndpoint";
    GetEndpoint: Get "/api/v1/manage/endpoints/{slug}" "getEndpoint";
    UpdateEndpoint: Patch "/api/v1/manage/endpoints/{slug}" "updateEndpoint";
    DeleteEndpoint: Delete "/api/v1/manage/endpoints/{slug}" "deleteEndpoint";
    DeployEndpoint: Post "/api/v1/manage/endpoints/{slug}/deploy" "deployEndpoint";
    RequestDeploy: Post "/api/v1/manage/endpoints/{slug}/deploy-request" "requestDeploy";
    ApproveDeploy: Post "/api/v1/manage/endpoints/{slug}/deploy-request/approve" "approveDeploy";
    RejectDeploy: Post "/api/v1/manage/endpoints/{slug}/deploy-request/reject" "rejectDeploy";
    WithdrawDeploy: Delete "/api/v1/manage/endpoints/{slug}/deploy-request" "withdrawDeployRequest";
    ListRequests: Get "/api/v1/manage/endpoints/{slug}/requests" "listRequests";
    ListAudit: Get "/api/v1/manage/endpoints/{slug}/audit" "listAudit";
    GetUsage: Get "/api/v1/manage/endpoints/{slug}/usage" "getUsage";
    CheckSchema: Post "/api/v1/manage/endpoints/{slug}/schema/check" "checkSchema";
    ListErasures: Get "/api/v1/manage/endpoints/{slug}/erasures" "listErasures";
    CreateErasure: Post "/api/v1/manage/endpoints/{slug}/erasures" "createErasure";
    GetErasure: Get "/api/v1/manage/endpoints/{slug}/erasures/{id}" "getErasure";
    // Collaborators and invitations.
    ListInvitations: Get "/api/v1/manage/endpoints/{slug}/invitations" "listInvitations";
    CreateInvitation: Post "/api/v1/manage/endpoints/{slug}/invitations" "createInvitation";
    RevokeInvitation: Delete "/api/v1/manage/endpoints/{slug}/invitations/{id}" "revokeInvitation";
    ListCollaborators: Get "/api/v1/manage/endpoints/{slug}/collaborators" "listCollaborators";
    UpdateCollaborator: Patch "/api/v1/manage/endpoints/{slug}/collaborators/{account_id}" "updateCollaborator";
    RemoveCollaborator: Delete "/api/v1/manage/endpoints/{slug}/collaborators/{account_id}" "removeCollaborator";
    // API keys.
    RotateKey: Post "/api/v1/manage/endpoints/{slug}/keys/{environment}/rotate" "rotateKey" known_environment;
    RevokePreviousKey: Post "/api/v1/manage/endpoints/{slug}/keys/{environment}/revoke-previous" "revokePreviousKey" known_environment;
    RotateCollaboratorKey: Post "/api/v1/manage/endpoints/{slug}/collaborators/{account_id}/keys/{environment}/rotate" "rotateCollaboratorKey" known_environment;
    RevokePreviousCollaboratorKey: Post "/api/v1/manage/endpoints/{slug}/collaborators/{account_id}/keys/{environment}/revoke-previous" "revokePreviousCollaboratorKey" known_environment;
    // Webhooks.
    GetOwnerWebhook: Get "/api/v1/manage/endpoints/{slug}/webhooks/{environment}" "getOwnerWebhook";
    SetOwnerWebhook: Put "/api/v1/manage/endpoints/{slug}/webhooks/{environment}" "setOwnerWebhook";
    ChangeOwnerWebhook: Patch "/api/v1/manage/endpoints/{slug}/webhooks/{environment}" "changeOwnerWebhook";
    DeleteOwnerWebhook: Delete "/api/v1/manage/endpoints/{slug}/webhooks/{environment}" "deleteOwnerWebhook";
    ListSubscriptions: Get "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions" "listSubscriptions";
    CreateSubscription: Post "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions" "createSubscription";
    GetSubscription: Get "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions/{subscription_id}" "getSubscription";
    ChangeSubscription: Patch "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions/{subscription_id}" "changeSubscription";
    DeleteSubscription: Delete "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions/{subscription_id}" "deleteSubscription";
    RecoverSubscription: Post "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions/{subscription_id}/recover" "recoverSubscription";
    TestSubscription: Post "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/subscriptions/{subscription_id}/test" "testSubscription";
    GetCallerRecovery: Get "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/caller-recovery" "getCallerRecovery";
    RecoverCallerWebhooks: Post "/api/v1/manage/endpoints/{slug}/webhooks/{environment}/caller-recovery" "recoverCallerWebhooks";
    ListDeliveries: Get "/api/v1/manage/endpoints/{slug}/deliveries" "listDeliveries";
    GetDelivery: Get "/api/v1/manage/endpoints/{slug}/deliveries/{id}" "getDelivery";
    Redeliver: Post "/api/v1/manage/endpoints/{slug}/deliveries/{id}/redeliver" "redeliver";
    RetryDelivery: Post "/api/v1/manage/endpoints/{slug}/deliveries/{id}/retry" "retryDelivery";
    GetWebhookSecret: Get "/api/v1/manage/endpoints/{slug}/webhook-secrets/{environment}" "getWebhookSecret" known_environment;
    ReissueWebhookSecret: Post "/api/v1/manage/endpoints/{slug}/webhook-secrets/{environment}/reissue" "reissueWebhookSecret" known_environment;
    // Administration (the server's owner).
    ListAccounts: Get "/api/v1/manage/accounts" "listAccounts";
    GetAccountById: Get "/api/v1/manage/accounts/{id}" "getAccountById";
    UpdateAccount: Patch "/api/v1/manage/accounts/{id}" "updateAccount";
    ListMail: Get "/api/v1/manage/mail" "listMail";
    GetMail: Get "/api/v1/manage/mail/{id}" "getMail";
    SendTestMail: Post "/api/v1/manage/mail/test" "sendTestMail";
    CreateBackup: Post "/api/v1/manage/backups" "createBackup";
}

impl Route {
    pub fn verb(self) -> Verb {
        self.line().verb
    }

    /// The path template, as the request log records it and the OpenAPI document lists it.
    pub fn template(self) -> &'static str {
        self.line().template
    }

    pub fn operation_id(self) -> &'static str {
        self.line().operation_id
    }
}

/// The values of a path's template parameters, by their names in the templates (empty when
/// the template has no such parameter).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathParams<'a> {
    pub slug: &'a str,
    pub record_id: &'a str,
    pub token: &'a str,
    pub id: &'a str,
    pub account_id: &'a str,
    pub environment: &'a str,
    pub subscription_id: &'a str,
}

impl<'a> PathParams<'a> {
    /// The slot of the parameter `name`.
    fn slot(&mut self, name: &str) -> Option<&mut &'a str> {
        Some(match name {
            "slug" => &mut self.slug,
            "record_id" => &mut self.record_id,
            "token" => &mut self.token,
            "id" => &mut self.id,
            "account_id" => &mut self.account_id,
            "environment" => &mut self.environment,
            "subscription_id" => &mut self.subscription_id,
            _ => return None,
        })
    }

    /// The `{environment}` of a route marked `known_environment`, which matched only if it
    /// names one.
    pub fn known_environment(&self) -> Result<Environment> {
        Environment::parse(self.environment).ok_or(HttpError::RouteNotFound)
    }
}

/// The methods of the dashboard's paths.
const DASHBOARD_ALLOWS: &str = "GET, HEAD, POST";

/// What a request's path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved<'a> {
    /// A dashboard page (`/dashboard…`, `/invitations/{token}`): the dashboard has a router of
    /// its own (`dashboard::router`).
    Dashboard { path: &'a str },
    /// A path template of the table.
    Api(ApiPath<'a>),
}

/// A path of the API: its template and the values of the template's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiPath<'a> {
    pub template: &'static str,
    pub params: PathParams<'a>,
}

impl<'a> Resolved<'a> {
    /// What `path` names; `None` for a path no route has (404). A trailing `/` is ignored; an
    /// empty segment matches nothing. Where templates of the same length both match, a
    /// literal segment wins over a parameter, from the first one on where they differ
    /// (`…/{slug}/search` over `…/{slug}/{record_id}`, `mail/test` over `mail/{id}`).
    pub fn resolve(path: &'a str) -> Option<Resolved<'a>> {
        if crate::http::is_dashboard_path(path) {
            return Some(Resolved::Dashboard { path });
        }
        let path = path.strip_suffix('/').unwrap_or(path);
        let segments: Vec<&str> = path.split('/').skip(1).collect();
        if segments.iter().any(|s| s.is_empty()) {
            return None;
        }
        Route::ALL
            .iter()
            .filter_map(|route| {
                let line = route.line();
                let params = matches(line.template, &segments)?;
                let known = !line.known_environment || params.known_environment().is_ok();
                known.then_some((line.template, params))
            })
            .max_by_key(|(template, _)| literal_segments(template))
            .map(|(template, params)| Resolved::Api(ApiPath { template, params }))
    }

    /// The path template, as logged (`/dashboard` for every dashboard page).
    pub fn template(&self) -> &'static str {
        match self {
            Resolved::Dashboard { .. } => "/dashboard",
            Resolved::Api(path) => path.template,
        }
    }
}

/// Refuses a method no dashboard page answers: 405 with those it does (the dashboard's router
/// decides about the rest).
pub fn check_dashboard_method(method: &Method) -> Result<()> {
    if DASHBOARD_ALLOWS.split(", ").any(|m| m == method.as_str()) {
        Ok(())
    } else {
        Err(HttpError::MethodNotAllowed(DASHBOARD_ALLOWS.to_string()))
    }
}

impl ApiPath<'_> {
    /// The routes of this template.
    fn routes(&self) -> impl Iterator<Item = Route> + '_ {
        Route::ALL
            .iter()
            .copied()
            .filter(|route| route.template() == self.template)
    }

    /// The methods this path answers, as an `Allow` header value.
    pub fn allowed(&self) -> String {
        let mut verbs: Vec<Verb> = self.routes().map(Route::verb).collect();
        verbs.sort();
        verbs
            .iter()
            .map(|verb| verb.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The route of `method` on this path; 405 with the methods the path answers when none.
    pub fn route(&self, method: &Method) -> Result<Route> {
        self.routes()
            .find(|route| route.verb().as_str() == method.as_str())
            .ok_or_else(|| HttpError::MethodNotAllowed(self.allowed()))
    }
}

/// The parameters of `template` if `segments` match it.
fn matches<'a>(template: &str, segments: &[&'a str]) -> Option<PathParams<'a>> {
    let mut params = PathParams::default();
    let mut parts = template.split('/').skip(1);
    for segment in segments {
        let part = parts.next()?;
        match part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            Some(name) => *params.slot(name)? = segment,
            None if part == *segment => {}
            None => return None,
        }
    }
    parts.next().is_none().then_some(params)
}

/// Which segments of `template` are literal, in order: the larger wins between two matches.
fn literal_segments(template: &str) -> Vec<bool> {
    template
        .split('/')
        .map(|part| !part.starts_with('{'))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(path: &str) -> Option<(&'static str, PathParams<'_>)> {
        match Resolved::resolve(path)? {
            Resolved::Api(path) => Some((path.template, path.params)),
            Resolved::Dashboard { .. } => None,
        }
    }

    #[test]
    fn resolves_paths() {
        assert_eq!(
            api("/api/v1/data/abc"),
            Some((
                "/api/v1/data/{slug}",
                PathParams {
                    slug: "abc",
                    ..PathParams::default()
                }
            ))
        );
        assert_eq!(
            api("/api/v1/data/abc/rec_1/"),
            Some((
                "/api/v1/data/{slug}/{record_id}",
                PathParams {
                    slug: "abc",
                    record_id: "rec_1",
                    ..PathParams::default()
                }
            ))
        );
        assert_eq!(Resolved::resolve("/api/v1/data"), None);
        assert_eq!(Resolved::resolve("/api/v1/data//x"), None);
        assert_eq!(Resolved::resolve("/api/v1/data/a/b/c"), None);
        assert_eq!(
            api("/api/v1/manage/endpoints/s/deploy").map(|(t, p)| (t, p.slug)),
            Some(("/api/v1/manage/endpoints/{slug}/deploy", "s"))
        );
        let (template, params) =
            api("/api/v1/manage/endpoints/s/webhook-secrets/production").unwrap();
        assert_eq!(
            template,
            "/api/v1/manage/endpoints/{slug}/webhook-secrets/{environment}"
        );
        assert_eq!(
            params.known_environment().ok(),
            Some(Environment::Production)
        );
        let (template, params) =
            api("/api/v1/manage/endpoints/s/webhook-secrets/sandbox/reissue").unwrap();
        assert_eq!(
            template,
            "/api/v1/manage/endpoints/{slug}/webhook-secrets/{environment}/reissue"
        );
        assert_eq!(params.known_environment().ok(), Some(Environment::Sandbox));
        for unknown in ["staging", "Sandbox", "live"] {
            let path = format!("/api/v1/manage/endpoints/s/webhook-secrets/{unknown}");
            assert_eq!(Resolved::resolve(&path), None);
            assert_eq!(Resolved::resolve(&format!("{path}/reissue")), None);
        }
        assert_eq!(
            Resolved::resolve("/api/v1/manage/endpoints/s/webhook-secrets"),
            None
        );
        let template = |path| api(path).map(|(t, _)| t);
        assert_eq!(template("/api/v1/manage/mail"), Some("/api/v1/manage/mail"));
        assert_eq!(
            template("/api/v1/manage/mail/test"),
            Some("/api/v1/manage/mail/test")
        );
        assert_eq!(
            api("/api/v1/manage/mail/12").map(|(t, p)| (t, p.id)),
            Some(("/api/v1/manage/mail/{id}", "12"))
        );
        assert_eq!(
            template("/api/v1/manage/backups"),
            Some("/api/v1/manage/backups")
        );
        // Literal segments win over parameters.
        assert_eq!(
            template("/api/v1/data/s/search"),
            Some("/api/v1/data/{slug}/search")
        );
        assert_eq!(
            template("/api/v1/data/s/openapi.json"),
            Some("/api/v1/data/{slug}/openapi.json")
        );
        assert_eq!(
            template("/api/v1/data/openapi.json"),
            Some("/api/v1/data/{slug}")
        );
        assert_eq!(
            Resolved::resolve("/dashboard/endpoints/x"),
            Some(Resolved::Dashboard {
                path: "/dashboard/endpoints/x"
            })
        );
    }

    #[test]
    fn methods() {
        let Some(Resolved::Api(path)) = Resolved::resolve("/api/v1/data/s/r") else {
            panic!("a record path");
        };
        assert_eq!(path.route(&Method::PUT).ok(), Some(Route::ReplaceRecord));
        assert!(matches!(
            path.route(&Method::POST),
            Err(HttpError::MethodNotAllowed(allow)) if allow == "GET, PUT, DELETE"
        ));
    }

    /// Every template parameter has a slot, every template's routes agree on whether its
    /// environment must be known, and no two routes share a method and template or an
    /// operation id.
    #[test]
    fn the_table_is_consistent() {
        for route in Route::ALL {
            let line = route.line();
            for part in line.template.split('/') {
                if let Some(name) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                    assert!(PathParams::default().slot(name).is_some(), "{name}");
                }
            }
            for other in Route::ALL.iter().filter(|other| *other != route) {
                let theirs = other.line();
                assert!(theirs.operation_id != line.operation_id, "{route:?}");
                if theirs.template == line.template {
                    assert!(theirs.verb != line.verb, "{route:?} and {other:?}");
                    assert_eq!(theirs.known_environment, line.known_environment);
                }
            }
        }
    }
}
