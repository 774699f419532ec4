//! The one place where service errors become HTTP statuses and stable error codes.
//!
//! Body of every error: `{"error": {"code", "message", "request_id"}}`.

use http::StatusCode;
use serde::Serialize;
use warp::reply::Response;

use crate::error::Error;

/// Status and stable code of an error. Codes are part of the API: never rename one.
pub fn status_and_code(err: &Error) -> (StatusCode, &'static str) {
    use Error::*;
    match err {
        InvalidJson(_) => (StatusCode::BAD_REQUEST, "invalid_json"),
        MissingRequiredField(_) => (StatusCode::BAD_REQUEST, "missing_required_field"),
        PayloadNotObject => (StatusCode::BAD_REQUEST, "missing_required_field"),
        InvalidRecordId(_) => (StatusCode::BAD_REQUEST, "invalid_record_id"),
        InvalidParameter { .. } => (StatusCode::BAD_REQUEST, "invalid_parameter"),
        InvalidRequest(_) => (StatusCode::BAD_REQUEST, "invalid_request"),
        InvalidIdempotencyKey => (StatusCode::BAD_REQUEST, "invalid_idempotency_key"),
        MissingApiKey => (StatusCode::UNAUTHORIZED, "missing_api_key"),
        InvalidApiKey => (StatusCode::UNAUTHORIZED, "invalid_api_key"),
        MissingToken => (StatusCode::UNAUTHORIZED, "missing_token"),
        InvalidToken => (StatusCode::UNAUTHORIZED, "invalid_token"),
        EndpointInactive => (StatusCode::FORBIDDEN, "endpoint_inactive"),
        EndpointNotDeployed => (StatusCode::FORBIDDEN, "endpoint_not_deployed"),
        EndpointNotFound => (StatusCode::NOT_FOUND, "endpoint_not_found"),
        RecordNotFound => (StatusCode::NOT_FOUND, "record_not_found"),
        RouteNotFound => (StatusCode::NOT_FOUND, "route_not_found"),
        MailNotFound => (StatusCode::NOT_FOUND, "mail_not_found"),
        MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
        IdempotencyConflict => (StatusCode::CONFLICT, "idempotency_key_conflict"),
        Conflict(_) => (StatusCode::CONFLICT, "conflict"),
        PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
        UnsupportedMediaType => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
        Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable"),
        ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down"),
        Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal_error"),
    }
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
}

/// The response for an error. Server-side failures are logged here with their cause, which
/// the client never sees.
pub fn response(err: &Error, request_id: &str) -> Response {
    let (status, code) = status_and_code(err);
    let message = match err {
        Error::Unavailable(cause) | Error::Internal(cause) => {
            log::error!("{request_id}: {code}: {cause}");
            err.to_string()
        }
        other => other.to_string(),
    };
    let mut response = super::reply::json(
        status,
        &Body {
            error: Detail {
                code,
                message,
                request_id,
            },
        },
    );
    if let Error::MethodNotAllowed(allow) = err {
        response
            .headers_mut()
            .insert(http::header::ALLOW, http::HeaderValue::from_static(allow));
    }
    if matches!(err, Error::Unavailable(_) | Error::ShuttingDown) {
        response.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("1"),
        );
    }
    response
}
