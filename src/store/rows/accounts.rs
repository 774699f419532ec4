//! Accounts, their tokens, sessions and notifications.

use serde::{Deserialize, Serialize};

use super::*;

/// What an account may do on this server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The operator (`intake init`): creates endpoints, invites, deploys, manages accounts.
    Owner,
    /// An account created by accepting an invitation: works on the endpoints it joined.
    Member,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AccountRow {
    pub id: u64,
    pub email: String,
    pub password_hash: String,
    pub role: Role,
    pub created_at: Timestamp,
    /// A suspended account ("no subscription") cannot log in, and its tokens and
    /// collaboration keys are refused with 403.
    #[serde(default)]
    pub suspended: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TokenRow {
    pub account_id: u64,
    pub name: String,
    pub created_at: Timestamp,
    /// When the token stops working; `None`: never (the tokens of `intake init`, and those
    /// created before tokens could expire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SessionRow {
    pub account_id: u64,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
}

/// A password reset link, kept under the SHA-256 of its token: used once, until `expires_at`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PasswordResetRow {
    pub account_id: u64,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct NotificationRow {
    pub id: u64,
    /// `endpoint_deployed`, `deploy_requested`, `deploy_request_rejected`,
    /// `invitation_accepted`, `webhook_disabled`.
    pub kind: String,
    pub endpoint_slug: String,
    pub message: String,
    pub created_at: Timestamp,
    pub read_at: Option<Timestamp>,
    /// How what it announced was settled (a deploy request approved, rejected or withdrawn),
    /// once it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<ResolutionRow>,
}

/// How and when a notification's subject was settled.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ResolutionRow {
    /// `approved`, `rejected`, `withdrawn` or `deployed`.
    pub outcome: String,
    pub at: Timestamp,
}
