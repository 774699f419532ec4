//! The one place where errors become HTTP statuses and stable error codes: the service error,
//! and the refusals only the HTTP layer makes ([`HttpError`]).
//!
//! Body of every error: `{"error": {"code", "message", "request_id"}}`.

use http::StatusCode;
use serde::Serialize;
use warp::reply::Response;

use crate::domain::error::{Error, GoneReason, Missing};
use crate::domain::schema::Violation;
use crate::store::Permission;

/// Why a request was refused or failed: a service's error, or a refusal of the HTTP layer
/// before any service was asked.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error(transparent)]
    Service(Error),
    #[error("No route matches this path.")]
    RouteNotFound,
    #[error("This method is not allowed on this path; allowed: {0}.")]
    MethodNotAllowed(String),
    #[error("The request body did not arrive in time.")]
    RequestTimeout,
    #[error("The request body exceeds the limit of {0} bytes.")]
    PayloadTooLarge(usize),
    /// The media types the route takes, in words.
    #[error("The Content-Type must be {0}.")]
    UnsupportedMediaType(&'static str),
    #[error(
        "The server is holding as many request bodies as its memory budget allows; retry shortly."
    )]
    Busy,
}

/// Anything that becomes a service error (a store failure, a bad cursor...) is one here too.
impl<E: Into<Error>> From<E> for HttpError {
    fn from(err: E) -> HttpError {
        HttpError::Service(err.into())
    }
}

/// The result of a handler.
pub type Result<T, E = HttpError> = std::result::Result<T, E>;

/// Status and stable code of a refusal or failure. Codes are part of the API: never rename one.
pub fn status_and_code(err: &HttpError) -> (StatusCode, &'static str) {
    match err {
        HttpError::Service(err) => service_status_and_code(err),
        HttpError::RouteNotFound => (StatusCode::NOT_FOUND, "route_not_found"),
        HttpError::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        HttpError::RequestTimeout => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
        HttpError::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
        HttpError::UnsupportedMediaType(_) => {
            (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
        }
        HttpError::Busy => (StatusCode::SERVICE_UNAVAILABLE, "server_busy"),
    }
}

/// The stable code of a service error: what a change stream that ends with an error event
/// names (`domain::stream`).
pub fn service_code(err: &Error) -> &'static str {
    service_status_and_code(err).1
}

fn service_status_and_code(err: &Error) -> (StatusCode, &'static str) {
    use Error::*;
    match err {
        InvalidJson(_) | InvalidRecordJson(_) => (StatusCode::BAD_REQUEST, "invalid_json"),
        MissingRequiredField(_) => (StatusCode::BAD_REQUEST, "missing_required_field"),
        SchemaViolation(_) => (StatusCode::BAD_REQUEST, "schema_violation"),
        InvalidSchema(_) => (StatusCode::BAD_REQUEST, "invalid_schema"),
        PayloadNotObject => (StatusCode::BAD_REQUEST, "missing_required_field"),
        InvalidRecordId(_) => (StatusCode::BAD_REQUEST, "invalid_record_id"),
        InvalidParameter { .. } => (StatusCode::BAD_REQUEST, "invalid_parameter"),
        InvalidRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
        InvalidIdempotencyKey => (StatusCode::BAD_REQUEST, "invalid_idempotency_key"),
        InvalidWebhook(_) => (StatusCode::BAD_REQUEST, "invalid_webhook"),
        WebhookTargetRefused(_) => (StatusCode::BAD_REQUEST, "webhook_target_refused"),
        BatchInvalid(_) => (StatusCode::BAD_REQUEST, "batch_invalid"),
        BatchEmpty => (StatusCode::BAD_REQUEST, "batch_empty"),
        BatchTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "batch_too_large"),
        RecordTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
        MissingApiKey => (StatusCode::UNAUTHORIZED, "missing_api_key"),
        InvalidApiKey => (StatusCode::UNAUTHORIZED, "invalid_api_key"),
        MissingToken => (StatusCode::UNAUTHORIZED, "missing_token"),
        InvalidToken => (StatusCode::UNAUTHORIZED, "invalid_token"),
        SessionExpired => (StatusCode::UNAUTHORIZED, "session_expired"),
        InvalidCredentials => (StatusCode::UNAUTHORIZED, "invalid_credentials"),
        LoginRequired => (StatusCode::UNAUTHORIZED, "login_required"),
        InvalidMetricsToken => (StatusCode::UNAUTHORIZED, "invalid_metrics_token"),
        EndpointInactive => (StatusCode::FORBIDDEN, "endpoint_inactive"),
        EndpointNotDeployed => (StatusCode::FORBIDDEN, "endpoint_not_deployed"),
        AccountSuspended => (StatusCode::FORBIDDEN, "account_suspended"),
        CrossSiteRequest => (StatusCode::FORBIDDEN, "cross_site_request"),
        MissingPermission(p) => (
            StatusCode::FORBIDDEN,
            match p {
                Permission::Create => "missing_permission_create",
                Permission::Read => "missing_permission_read",
                Permission::Replace => "missing_permission_replace",
                Permission::Delete => "missing_permission_delete",
            },
        ),
        OwnerOnly => (StatusCode::FORBIDDEN, "owner_only"),
        ServerOwnerOnly => (StatusCode::FORBIDDEN, "server_owner_only"),
        RequesterOnly => (StatusCode::FORBIDDEN, "requester_only"),
        TokenRequired => (StatusCode::FORBIDDEN, "token_required"),
        InvitationForOtherAccount => (StatusCode::FORBIDDEN, "invitation_for_other_account"),
        EndpointNotFound => (StatusCode::NOT_FOUND, "endpoint_not_found"),
        RecordNotFound => (StatusCode::NOT_FOUND, "record_not_found"),
        NotFound(what) => (
            StatusCode::NOT_FOUND,
            match what {
                Missing::Invitation => "invitation_not_found",
                Missing::Collaborator => "collaborator_not_found",
                Missing::Token => "token_not_found",
                Missing::Account => "account_not_found",
                Missing::Notification => "notification_not_found",
                Missing::DeployRequest => "deploy_request_not_found",
                Missing::Webhook => "webhook_not_found",
                Missing::Subscription => "subscription_not_found",
                Missing::Recovery => "recovery_not_found",
                Missing::Delivery => "delivery_not_found",
                Missing::Erasure => "erasure_not_found",
                Missing::RequestLogEntry => "request_not_found",
                Missing::PreviousKey => "previous_key_not_found",
            },
        ),
        InvitationGone(why) => (
            StatusCode::GONE,
            match why {
                GoneReason::Expired => "invitation_expired",
                GoneReason::Revoked => "invitation_revoked",
                GoneReason::Accepted => "invitation_already_accepted",
            },
        ),
        StreamCursorExpired => (StatusCode::GONE, "stream_cursor_expired"),
        PasswordResetLinkInvalid => (StatusCode::GONE, "password_reset_link_invalid"),
        UsageLimitExceeded { .. } => (StatusCode::TOO_MANY_REQUESTS, "usage_limit_exceeded"),
        TooManyStreams(_) => (StatusCode::TOO_MANY_REQUESTS, "too_many_streams"),
        StreamsAtCapacity => (StatusCode::SERVICE_UNAVAILABLE, "streams_at_capacity"),
        ExportsAtCapacity => (StatusCode::SERVICE_UNAVAILABLE, "exports_at_capacity"),
        TooManyLoginAttempts { .. } => (StatusCode::TOO_MANY_REQUESTS, "too_many_login_attempts"),
        RecoveryCooldown { .. } => (StatusCode::TOO_MANY_REQUESTS, "recovery_cooldown"),
        MailNotFound => (StatusCode::NOT_FOUND, "mail_not_found"),
        IdempotencyConflict => (StatusCode::CONFLICT, "idempotency_key_conflict"),
        Conflict(_) => (StatusCode::CONFLICT, "conflict"),
        EndpointNameTaken(_) => (StatusCode::CONFLICT, "endpoint_name_taken"),
        MailNotConfigured => (StatusCode::CONFLICT, "mail_not_configured"),
        Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable"),
        StorageFull => (StatusCode::SERVICE_UNAVAILABLE, "storage_full"),
        ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
        Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
    }
}

/// Longest error message a request-log entry keeps, in characters.
const LOGGED_MESSAGE_MAX: usize = 200;

/// The code and message of an error as a request-log entry keeps them: the message the caller
/// got (never a server-side cause; messages never hold a secret or payload), cut to
/// [`LOGGED_MESSAGE_MAX`] characters.
pub fn logged(err: &HttpError) -> (&'static str, String) {
    let (_, code) = status_and_code(err);
    let message = err.to_string();
    let message = match message.char_indices().nth(LOGGED_MESSAGE_MAX) {
        Some((cut, _)) => format!("{}…", &message[..cut]),
        None => message,
    };
    (code, message)
}

#[derive(Serialize)]
struct Body<'a> {
    error: Detail<'a>,
}

#[derive(Serialize)]
struct Detail<'a> {
    code: &'static str,
    message: String,
    request_id: &'a str,
    /// A refused batch's bad records.
    #[serde(skip_serializing_if = "Option::is_none")]
    records: Option<Vec<RecordDetail<'a>>>,
    /// A payload's schema violations (`schema_violation`).
    #[serde(skip_serializing_if = "Option::is_none")]
    errors: Option<&'a [Violation]>,
}

/// One bad record of a refused batch: where it is, and the code and message a single create
/// of it would have had.
#[derive(Serialize)]
struct RecordDetail<'a> {
    index: usize,
    code: &'static str,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    errors: Option<&'a [Violation]>,
}

/// The violations of a `schema_violation`, which its error body lists.
fn violations(err: &Error) -> Option<&[Violation]> {
    match err {
        Error::SchemaViolation(violations) => Some(violations),
        _ => None,
    }
}

/// The response for an error. Server-side failures are logged here with their cause, which
/// the client never sees.
pub fn response(err: &HttpError, request_id: &str) -> Response {
    let (status, code) = status_and_code(err);
    let message = match err {
        HttpError::Service(Error::Unavailable(cause) | Error::Internal(cause)) => {
            log::error!("{request_id}: {code}: {cause}");
            err.to_string()
        }
        other => other.to_string(),
    };
    let mut response = crate::http::reply::json(
        status,
        &Body {
            error: Detail {
                code,
                message,
                request_id,
                records: match err {
                    HttpError::Service(Error::BatchInvalid(refusals)) => Some(
                        refusals
                            .iter()
                            .map(|refusal| RecordDetail {
                                index: refusal.index,
                                code: service_code(&refusal.error),
                                message: refusal.error.to_string(),
                                errors: violations(&refusal.error),
                            })
                            .collect(),
                    ),
                    _ => None,
                },
                errors: match err {
                    HttpError::Service(err) => violations(err),
                    _ => None,
                },
            },
        },
    );
    if let HttpError::MethodNotAllowed(allow) = err
        && let Ok(value) = http::HeaderValue::from_str(allow)
    {
        response.headers_mut().insert(http::header::ALLOW, value);
    }
    if let Some(seconds) = retry_after(err) {
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, seconds.into());
    }
    response
}

/// The `Retry-After` (in seconds) of a refusal that passes: every answer to it carries one,
/// the dashboard's error pages too.
pub fn retry_after(err: &HttpError) -> Option<u64> {
    let err = match err {
        HttpError::Busy => return Some(1),
        HttpError::Service(err) => err,
        _ => return None,
    };
    match err {
        Error::UsageLimitExceeded { retry_after_secs }
        | Error::TooManyLoginAttempts { retry_after_secs }
        | Error::RecoveryCooldown { retry_after_secs } => Some(*retry_after_secs),
        Error::Unavailable(_) | Error::ShuttingDown | Error::StreamsAtCapacity => Some(1),
        Error::ExportsAtCapacity => Some(5),
        // Space does not come back within a second: ask for a longer pause.
        Error::StorageFull => Some(30),
        _ => None,
    }
}
