//! The shared state of a running server: the store and the services' handles.

use std::sync::Arc;

use crate::core::config::Config;
use crate::core::metrics::Metrics;
use crate::domain::collaborators::Collaborators;
use crate::domain::endpoints::Endpoints;
use crate::domain::error::Result;
use crate::domain::handles::Handles;
use crate::domain::ingest::Ingest;
use crate::domain::poll::{InFlight, ReadAhead};
use crate::domain::search::SearchIndex;
use crate::domain::sessions::LoginThrottle;
use crate::domain::usage::Usage;
use crate::domain::webhooks::subscriptions::{Subscriptions, Which};
use crate::store::{AccountRow, Environment};
use crate::workers::dispatcher::Dispatcher;
use crate::workers::dispatcher::probe::{self, TestResult};
use crate::workers::mailer::Mailer;
use crate::workers::request_log::RequestLog;

pub struct App {
    pub config: Config,
    /// The store, the clock and the after-commit path, as services take them.
    pub handles: Handles,
    pub endpoints: Endpoints,
    pub ingest: Ingest,
    pub request_log: RequestLog,
    /// The search index beside the store; `None` when the store searches itself (PostgreSQL).
    pub search: Option<Arc<dyn SearchIndex>>,
    /// Creates stamped but not yet stored: poll's visibility bound.
    pub in_flight: Arc<InFlight>,
    /// Warms the cache with a draining poll consumer's next page.
    pub poll_read_ahead: ReadAhead,
    /// Where spans go (nowhere unless `[telemetry] otlp_endpoint` is set).
    pub telemetry: crate::core::telemetry::Telemetry,
    /// The change streams of this node.
    pub streams: crate::domain::stream::Streams,
    /// The exports this node runs.
    pub exports: crate::domain::export::Exports,
    pub usage: Usage,
    pub logins: Box<dyn LoginThrottle>,
    /// The outbox worker (woken by the after-commit path of a commit that queued e-mail).
    pub mailer: Mailer,
    /// The webhook dispatcher (woken by the after-commit path of a commit that made
    /// deliveries due).
    pub dispatcher: Dispatcher,
    /// The dashboard's state (the first-run setup link).
    pub dashboard: crate::http::dashboard::setup::Dashboard,
    /// Counters and histograms for `GET /metrics`.
    pub metrics: Arc<Metrics>,
    /// Where webhooks may go (`[webhooks] allow_private_targets`, `allowed_cidrs`).
    pub egress: crate::core::egress::TargetPolicy,
    /// The memory request bodies share (`[http] body_memory_mb`).
    pub body_budget: crate::http::request::BodyBudget,
}

impl App {
    /// The owner's webhook subscription service.
    pub fn subscriptions(&self) -> Subscriptions<'_> {
        Subscriptions {
            endpoints: &self.endpoints,
            handles: &self.handles,
            sealer: &self.endpoints.sealer,
            policy: &self.egress,
            recovery_cooldown: self.config.webhooks.recovery_cooldown,
        }
    }

    /// Sends a test event to one of `owner`'s subscriptions and waits for the answer.
    pub async fn send_test_event(
        &self,
        owner: &AccountRow,
        slug: &str,
        environment: Environment,
        which: Which,
    ) -> Result<TestResult> {
        let stored = self
            .subscriptions()
            .stored(owner, slug, environment, which)?;
        probe::send_off_runtime(
            self.handles.clone(),
            self.endpoints.sealer.clone(),
            self.config.webhooks.clone(),
            slug.to_string(),
            environment,
            stored,
        )
        .await
    }

    /// The collaborator service over this server's endpoints, with its invitation settings.
    pub fn collaborators(&self) -> Collaborators<'_> {
        Collaborators::new(
            &self.endpoints,
            self.config.public_url(),
            self.config.accounts.invitation_ttl,
        )
    }
}
