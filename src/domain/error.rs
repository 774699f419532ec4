//! The service-layer error: every way a request can be refused or fail.
//!
//! Services return [`Error`]; the HTTP layer maps it to a status and a stable `code` in exactly
//! one place (`http::error`), beside the refusals only HTTP knows (no route, wrong method, body
//! too large or too slow, wrong media type: `http::error::HttpError`). Messages are for humans and never contain a secret.

use serde::Serialize;

use crate::store::{Permission, StoreError};

/// One way a payload breaks its endpoint's JSON Schema (`domain::schema`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// Where in the payload, as a JSON Pointer (`""` for the whole payload).
    pub instance_path: String,
    /// The schema keyword it breaks (`type`, `required`, `maximum`, …).
    pub keyword: String,
    /// What is wrong, in words.
    pub message: String,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    // 400
    #[error("The request body is not valid JSON: {0}.")]
    InvalidJson(String),
    /// One record of a batch is not JSON (the batch's body may be NDJSON, which is no JSON).
    #[error("The record is not valid JSON: {0}.")]
    InvalidRecordJson(String),
    #[error("The payload is missing the required field `{0}`.")]
    MissingRequiredField(String),
    #[error("The payload must be a JSON object because this endpoint declares required fields.")]
    PayloadNotObject,
    /// The payload breaks the endpoint's JSON Schema: the first violations, in document order.
    #[error("{}", schema_violation_message(.0))]
    SchemaViolation(Vec<Violation>),
    /// A schema the owner sent cannot be used: what is wrong with it.
    #[error("The schema cannot be used: {0}.")]
    InvalidSchema(String),
    #[error("`{0}` is not a valid record id; ids look like rec_ followed by 26 characters.")]
    InvalidRecordId(String),
    #[error("Invalid `{name}` parameter: {reason}.")]
    InvalidParameter { name: &'static str, reason: String },
    #[error("{0}")]
    InvalidRequest(String),
    #[error("The Idempotency-Key header must be 1 to 255 printable ASCII characters.")]
    InvalidIdempotencyKey,
    #[error("Invalid webhook request: {0}.")]
    InvalidWebhook(String),
    /// The server's egress rule refuses every address of a webhook URL.
    #[error("{0}")]
    WebhookTargetRefused(String),
    /// A batch with bad records: each one's reason, in order; nothing was stored.
    #[error("{}", batch_invalid_message(.0))]
    BatchInvalid(Vec<RecordRefusal>),
    #[error("The batch holds no records; send one JSON document per line, or a JSON array.")]
    BatchEmpty,

    // 413
    #[error("A batch holds at most {max} records; this one holds {records}.")]
    BatchTooLarge { records: usize, max: usize },
    /// One record of a batch is larger than a single create's body may be.
    #[error("The record is larger than the limit of {0} bytes.")]
    RecordTooLarge(usize),

    // 401
    #[error("Send the API key as `Authorization: Bearer <API_KEY>`.")]
    MissingApiKey,
    #[error("The API key is not valid.")]
    InvalidApiKey,
    #[error("Log in, or send an account token as `Authorization: Bearer <TOKEN>`.")]
    MissingToken,
    #[error("The account token is not valid.")]
    InvalidToken,
    #[error("The session has expired or was logged out; log in again.")]
    SessionExpired,
    #[error("The e-mail address or password is wrong.")]
    InvalidCredentials,
    #[error("An account with this e-mail address exists; log in, then accept the invitation.")]
    LoginRequired,
    #[error("Send the metrics token of the server's config as `Authorization: Bearer <TOKEN>`.")]
    InvalidMetricsToken,

    // 403
    #[error("This endpoint is inactive; its owner can reactivate it.")]
    EndpointInactive,
    #[error("Production keys work only after the endpoint has been deployed.")]
    EndpointNotDeployed,
    #[error("This account is suspended (no subscription); its owner can reinstate it.")]
    AccountSuspended,
    #[error("This key lacks the `{}` permission; the endpoint owner manages permissions.", .0.as_str())]
    MissingPermission(Permission),
    #[error("Only the endpoint's owner can do this.")]
    OwnerOnly,
    #[error("Only the server's owner account can do this.")]
    ServerOwnerOnly,
    #[error(
        "Only the collaborator who asked for the deploy can withdraw the request; the owner rejects it instead."
    )]
    RequesterOnly,
    #[error(
        "Answers holding API keys or signing secrets are sent only to an account token \
         (`Authorization: Bearer itk_...`), never to the session cookie alone; the dashboard \
         shows them on its pages."
    )]
    TokenRequired,
    #[error("A change made with the session cookie must come from this server's own pages.")]
    CrossSiteRequest,
    #[error("This invitation was sent to another e-mail address than this account's.")]
    InvitationForOtherAccount,

    // 404
    #[error("No endpoint with that slug exists for this key.")]
    EndpointNotFound,
    #[error("No record with that id exists.")]
    RecordNotFound,
    #[error("No such {} exists.", .0.as_str())]
    NotFound(Missing),

    // 410
    #[error("This invitation {0}; ask the endpoint owner for a new one.")]
    InvitationGone(GoneReason),
    #[error(
        "This Last-Event-ID is older than the events kept for this endpoint (or from another \
         store); read what you missed with poll, then open a new stream."
    )]
    StreamCursorExpired,
    #[error(
        "This password reset link has expired or was already used; ask for a new one with \
         \"Forgot password?\" on the login page."
    )]
    PasswordResetLinkInvalid,
    #[error("No e-mail with that id exists.")]
    MailNotFound,

    // 409
    #[error(
        "This Idempotency-Key was already used with a different request body in the last 24 hours."
    )]
    IdempotencyConflict,
    #[error("{0}")]
    Conflict(String),
    #[error("You already have an endpoint named \"{0}\"; choose another name.")]
    EndpointNameTaken(String),
    #[error(
        "E-mail is not set up on this server, so no reset link can be sent. The server's \
         operator can make one with `intake account reset-password EMAIL`."
    )]
    MailNotConfigured,

    // 429
    #[error(
        "The monthly usage limit of this endpoint is reached; it resets at the start of the next month (UTC)."
    )]
    UsageLimitExceeded { retry_after_secs: u64 },
    #[error("Too many failed login attempts; try again later.")]
    TooManyLoginAttempts { retry_after_secs: u64 },
    #[error(
        "This API key already holds {0} open streams, the most it may; close one before \
         opening another."
    )]
    TooManyStreams(usize),
    #[error(
        "A recovery of these deliveries over an overlapping window ended less than the \
         recovery cooldown ago; try again in {retry_after_secs} s."
    )]
    RecoveryCooldown { retry_after_secs: u64 },

    #[error("This server holds as many open streams as it may; retry later, or read with poll.")]
    StreamsAtCapacity,
    #[error("This server runs as many exports as it may at once; retry in a few seconds.")]
    ExportsAtCapacity,

    // 5xx
    #[error("Storage is temporarily unavailable; retry with backoff.")]
    Unavailable(String),
    #[error("The server's disk is full: nothing was stored. Retry with backoff.")]
    StorageFull,
    #[error("The server is shutting down; retry with backoff.")]
    ShuttingDown,
    #[error("An internal error occurred.")]
    Internal(String),
}

/// The kinds of management objects a 404 can be about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    Invitation,
    Collaborator,
    Token,
    Account,
    Notification,
    DeployRequest,
    Webhook,
    Subscription,
    Recovery,
    Delivery,
    Erasure,
    RequestLogEntry,
    PreviousKey,
}

impl Missing {
    pub fn as_str(self) -> &'static str {
        match self {
            Missing::Invitation => "invitation",
            Missing::Collaborator => "collaborator",
            Missing::Token => "token",
            Missing::Account => "account",
            Missing::Notification => "notification",
            Missing::DeployRequest => "deploy request",
            Missing::Webhook => "webhook",
            Missing::Subscription => "subscription",
            Missing::Recovery => "recovery",
            Missing::Delivery => "delivery",
            Missing::Erasure => "erasure",
            Missing::RequestLogEntry => "request-log entry",
            Missing::PreviousKey => "previous key in its grace period",
        }
    }
}

/// Why an invitation link no longer works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoneReason {
    Expired,
    Revoked,
    Accepted,
}

impl std::fmt::Display for GoneReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GoneReason::Expired => "has expired",
            GoneReason::Revoked => "was revoked",
            GoneReason::Accepted => "was already accepted",
        })
    }
}

impl From<StoreError> for Error {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Corrupt(what) => Error::Internal(what),
            StoreError::Full { .. } => Error::StorageFull,
            other => Error::Unavailable(other.to_string()),
        }
    }
}

impl From<crate::core::cursor::InvalidParameter> for Error {
    fn from(err: crate::core::cursor::InvalidParameter) -> Self {
        Error::InvalidParameter {
            name: err.name,
            reason: err.reason,
        }
    }
}

/// Password hashing (or its task) failing is the server's own failure, never the caller's.
impl From<crate::core::crypto::CryptoError> for Error {
    fn from(err: crate::core::crypto::CryptoError) -> Self {
        Error::Internal(err.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why one record of a batch was refused: its place in the batch (from 0, blank lines not
/// counted) and the error a single create of it would have had.
#[derive(Debug)]
pub struct RecordRefusal {
    pub index: usize,
    pub error: Box<Error>,
}

fn batch_invalid_message(refusals: &[RecordRefusal]) -> String {
    match refusals {
        [one] => format!(
            "The record at index {} was refused: {} Nothing was stored.",
            one.index, one.error
        ),
        many => format!(
            "{} records of the batch were refused (see `records`); nothing was stored.",
            many.len()
        ),
    }
}

fn schema_violation_message(violations: &[Violation]) -> String {
    let Some(first) = violations.first() else {
        return "The payload does not match the endpoint's schema.".into();
    };
    let at = match first.instance_path.as_str() {
        "" => "the payload".to_string(),
        path => format!("`{path}`"),
    };
    let more = match violations.len() {
        1 => String::new(),
        n => format!(" (and {} more, see `errors`)", n - 1),
    };
    format!(
        "The payload does not match the endpoint's schema: at {at}, {}{more}.",
        first.message
    )
}
