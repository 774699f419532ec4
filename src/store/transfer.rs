//! Copying a whole store into another (`intake migrate --from-redb DATA_DIR --to URL`): the
//! source hands over every row from one snapshot ([`Export`]), with its ids, times and sealed
//! secrets as they are; the destination, which must be empty, writes them as they come
//! ([`Import`]). Derived data (the search index, the change log, the request log, sessions,
//! password reset links) is not copied: the destination derives or starts it afresh.
//!
//! Both sides count what they handled per [`Kind`], so the copy is verified by comparing the
//! source's counts with what the destination holds afterwards.

use std::collections::BTreeMap;

use crate::store::records::RecordRow;
use crate::store::usage::CallsDelta;
use crate::store::webhooks::DueDelivery;
use crate::store::{
    AccountRow, ApiKeyRow, AttemptRow, AuditRow, CollaboratorRow, DeliveryRow, EndpointRow,
    ErasureRow, IdKind, IdempotencyRow, InvitationRow, MailRow, NotificationRow, Partition,
    StoreError, TokenRow, WebhookSecretRow, WebhookSettingsRow,
};

/// One row of a store.
#[derive(Debug)]
pub enum Item {
    Account(AccountRow),
    Token {
        hash: [u8; 32],
        row: TokenRow,
    },
    Notification {
        account_id: u64,
        row: NotificationRow,
    },
    Endpoint(EndpointRow),
    ApiKey {
        hash: [u8; 32],
        row: ApiKeyRow,
    },
    Collaborator(CollaboratorRow),
    Invitation {
        row: InvitationRow,
        token_hash: [u8; 32],
    },
    Audit {
        endpoint_id: u64,
        row: AuditRow,
    },
    Record {
        partition: Partition,
        row: RecordRow,
    },
    Idempotency {
        partition: Partition,
        key: String,
        row: IdempotencyRow,
    },
    WebhookSecret {
        partition: Partition,
        row: WebhookSecretRow,
    },
    WebhookSettings {
        partition: Partition,
        row: WebhookSettingsRow,
    },
    /// A delivery, with its place in the due list while it is pending.
    Delivery {
        row: DeliveryRow,
        due: Option<DueDelivery>,
    },
    Attempt {
        delivery_id: u64,
        row: AttemptRow,
    },
    FailureMail {
        endpoint_id: u64,
        day: u64,
    },
    Mail(MailRow),
    Erasure(ErasureRow),
    /// The calls of one partition in one month (`day` 0) or on one day (`month` 0).
    Calls(CallsDelta),
    /// The last id of `kind` handed out (higher than every id of that kind stored).
    LastId {
        kind: IdKind,
        last: u64,
    },
}

/// What is counted to verify a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Accounts,
    Tokens,
    Notifications,
    Endpoints,
    ApiKeys,
    Collaborators,
    Invitations,
    AuditEntries,
    Records,
    IdempotencyKeys,
    WebhookSecrets,
    WebhookSettings,
    Deliveries,
    Attempts,
    FailureMails,
    Mails,
    Erasures,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Accounts => "accounts",
            Kind::Tokens => "personal tokens",
            Kind::Notifications => "notifications",
            Kind::Endpoints => "endpoints",
            Kind::ApiKeys => "API keys",
            Kind::Collaborators => "collaborators",
            Kind::Invitations => "invitations",
            Kind::AuditEntries => "audit entries",
            Kind::Records => "records",
            Kind::IdempotencyKeys => "idempotency keys",
            Kind::WebhookSecrets => "webhook signing secrets",
            Kind::WebhookSettings => "webhook settings",
            Kind::Deliveries => "webhook deliveries",
            Kind::Attempts => "delivery attempts",
            Kind::FailureMails => "failure e-mail days",
            Kind::Mails => "e-mails",
            Kind::Erasures => "erasures",
        }
    }
}

impl Item {
    /// What the item counts as (`None`: counters, which are not rows).
    pub fn kind(&self) -> Option<Kind> {
        Some(match self {
            Item::Account(_) => Kind::Accounts,
            Item::Token { .. } => Kind::Tokens,
            Item::Notification { .. } => Kind::Notifications,
            Item::Endpoint(_) => Kind::Endpoints,
            Item::ApiKey { .. } => Kind::ApiKeys,
            Item::Collaborator(_) => Kind::Collaborators,
            Item::Invitation { .. } => Kind::Invitations,
            Item::Audit { .. } => Kind::AuditEntries,
            Item::Record { .. } => Kind::Records,
            Item::Idempotency { .. } => Kind::IdempotencyKeys,
            Item::WebhookSecret { .. } => Kind::WebhookSecrets,
            Item::WebhookSettings { .. } => Kind::WebhookSettings,
            Item::Delivery { .. } => Kind::Deliveries,
            Item::Attempt { .. } => Kind::Attempts,
            Item::FailureMail { .. } => Kind::FailureMails,
            Item::Mail(_) => Kind::Mails,
            Item::Erasure(_) => Kind::Erasures,
            Item::Calls(_) | Item::LastId { .. } => return None,
        })
    }
}

/// Rows per kind.
pub type Counts = BTreeMap<Kind, u64>;

/// A store that hands over all its rows.
pub trait Export {
    /// Hands every row to `each`, all from one snapshot, parents before what refers to them
    /// (accounts before endpoints, endpoints before records, deliveries before attempts).
    fn export(
        &self,
        each: &mut dyn FnMut(Item) -> Result<(), StoreError>,
    ) -> Result<(), StoreError>;
}

/// A store that takes rows from another.
pub trait Import {
    /// Whether it holds nothing yet: a copy goes only into an empty store.
    fn is_empty(&self) -> Result<bool, StoreError>;

    /// Writes `items` in one durable transaction.
    fn import(&self, items: &[Item]) -> Result<(), StoreError>;

    /// What it holds, per kind.
    fn counts(&self) -> Result<Counts, StoreError>;
}
