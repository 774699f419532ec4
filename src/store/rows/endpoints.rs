//! Endpoints, their keys, collaborators, invitations, deploy requests and audit log.

use serde::{Deserialize, Serialize};

use super::*;

/// What a collaboration key may call. `read` covers GET single, list, search and poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    Create,
    Read,
    Replace,
    Delete,
}

impl Permission {
    pub const ALL: [Permission; 4] = [
        Permission::Create,
        Permission::Read,
        Permission::Replace,
        Permission::Delete,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Create => "create",
            Permission::Read => "read",
            Permission::Replace => "replace",
            Permission::Delete => "delete",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InvitationStatus {
    Pending,
    Accepted,
    Revoked,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct InvitationRow {
    pub id: u64,
    pub endpoint_id: u64,
    pub email: String,
    pub permissions: Vec<Permission>,
    pub status: InvitationStatus,
    pub invited_by: u64,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    /// The link token, sealed, so the owner can see the link when no e-mail can be sent.
    #[serde(with = "base64_bytes")]
    pub token_sealed: Vec<u8>,
    /// The outbox message that carries the invitation.
    pub mail_id: u64,
    pub accepted_by: Option<u64>,
    pub decided_at: Option<Timestamp>,
}

/// A collaborator's membership of one endpoint and its collaboration keys.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CollaboratorRow {
    pub endpoint_id: u64,
    pub account_id: u64,
    pub permissions: Vec<Permission>,
    pub invitation_id: u64,
    pub added_at: Timestamp,
    #[serde(with = "base64_bytes")]
    pub sandbox_key_sealed: Vec<u8>,
    #[serde(with = "base64_bytes")]
    pub production_key_sealed: Vec<u8>,
    /// Collaboration keys replaced by a rotation and still in their grace period.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_keys: Vec<PreviousKeyRow>,
}

/// A key replaced by a rotation that keeps working until `valid_until` (at most one per
/// environment and holder). Its `ApiKeyRow` carries the same time as `expires_at`; the sealed
/// copy is what finds that row again (by the key's hash) to revoke it early.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PreviousKeyRow {
    pub environment: Environment,
    #[serde(with = "base64_bytes")]
    pub key_sealed: Vec<u8>,
    pub valid_until: Timestamp,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AuditRow {
    pub id: u64,
    pub time: Timestamp,
    pub actor_id: u64,
    pub actor_email: String,
    /// What happened, e.g. `endpoint.deployed` (docs/src/accounts.md lists them).
    pub action: String,
    /// What changed, as the action defines it.
    pub details: serde_json::Value,
}

/// A collaborator's pending request to deploy an endpoint.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeployRequestRow {
    pub requested_by: u64,
    pub requested_at: Timestamp,
    pub note: Option<String>,
}

/// The owner's answer to the last deploy request, when it was a rejection: shown with the
/// endpoint until a new request is made or the endpoint is deployed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeployRejectionRow {
    pub requested_by: u64,
    pub rejected_at: Timestamp,
    /// The owner's reason.
    pub note: Option<String>,
}

/// An endpoint's own retention window of each environment, in seconds; `None` keeps the
/// server's `[retention]` default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionRow {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub production_secs: Option<u64>,
}

impl RetentionRow {
    pub fn is_unset(&self) -> bool {
        *self == RetentionRow::default()
    }

    pub fn get(&self, environment: Environment) -> Option<std::time::Duration> {
        match environment {
            Environment::Sandbox => self.sandbox_secs,
            Environment::Production => self.production_secs,
        }
        .map(std::time::Duration::from_secs)
    }

    pub fn set(&mut self, environment: Environment, window: Option<std::time::Duration>) {
        let secs = window.map(|d| d.as_secs());
        match environment {
            Environment::Sandbox => self.sandbox_secs = secs,
            Environment::Production => self.production_secs = secs,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EndpointRow {
    pub id: u64,
    pub slug: String,
    pub name: String,
    pub description: Option<String>,
    pub required_fields: Vec<String>,
    /// The JSON Schema payloads must match (draft 2020-12), as compact JSON text; checked
    /// when saved (`domain::schema`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    /// The owner's own retention windows (`domain::retention`).
    #[serde(default, skip_serializing_if = "RetentionRow::is_unset")]
    pub retention: RetentionRow,
    pub active: bool,
    pub deployed: bool,
    pub deployed_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub owner_id: u64,
    /// The collaborator's request to deploy, while one is pending.
    #[serde(default)]
    pub deploy_request: Option<DeployRequestRow>,
    /// The rejection of the last request, until the next request or the deploy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploy_rejection: Option<DeployRejectionRow>,
    /// Data calls allowed per month and environment; `None` uses `[usage] monthly_quota`.
    #[serde(default)]
    pub monthly_quota: Option<u64>,
    /// The default keys, sealed with the data dir's key-encryption key (see `crypto`).
    #[serde(with = "base64_bytes")]
    pub sandbox_key_sealed: Vec<u8>,
    #[serde(with = "base64_bytes")]
    pub production_key_sealed: Vec<u8>,
    /// Default keys replaced by a rotation and still in their grace period.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_keys: Vec<PreviousKeyRow>,
    /// When its owner deleted it: from then on no call or list finds it, and its data is
    /// purged in the background. The row (and its slug, which is never given again) and its
    /// audit entries stay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<Timestamp>,
    /// Whether the purge after the deletion has finished.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub purged: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ApiKeyRow {
    pub key_id: String,
    pub endpoint_id: u64,
    pub environment: Environment,
    pub created_at: Timestamp,
    /// The collaborator holding this key; `None` for the endpoint's default (owner) keys,
    /// which carry every permission.
    #[serde(default)]
    pub collaborator_id: Option<u64>,
    /// When a key replaced by a rotation stops working (judged by the server's clock);
    /// `None` for a current key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Timestamp>,
}

/// Who holds an API key: the endpoint's owner (its default keys) or a collaborator. A request
/// log entry keeps it as of the call, so it still names the person after the key is replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyHolder {
    Owner,
    /// The collaborator's account id.
    Collaborator(u64),
}
