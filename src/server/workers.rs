//! The background workers of one server: [`start`] starts them in the order they depend on
//! each other and wires the one after-commit path ([`Wakers`]) into every writer; the
//! [`Workers`] value it returns owns their threads and stops them in the order the durability
//! promise needs ([`Workers::stop`]). The periodic tasks, which need the finished `App`, are
//! [`Periodic`].

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{EXPIRY_SWEEP, ServerError, USAGE_FLUSH, indexer_settings, open_request_log};
use crate::core::clock::SharedClock;
use crate::core::config::Config;
use crate::core::crypto::Sealer;
use crate::core::metrics::Metrics;
use crate::core::telemetry::ExporterThread;
use crate::core::telemetry::Telemetry;
use crate::core::ticker::Ticker;
use crate::domain::endpoints::AccessCache;
use crate::domain::erasures::{self, ErasureWork};
use crate::domain::handles::{AfterCommit, Handles};
use crate::domain::ingest::{Ingest, purge_expired_idempotency};
use crate::domain::poll::InFlight;
use crate::domain::search::SearchIndex;
use crate::domain::sessions;
use crate::domain::stream::{StreamParts, Streams};
use crate::domain::webhooks::secrets;
use crate::domain::{endpoint_deletion, jobs, retention};
use crate::http::app::App;
use crate::store::request_log::RequestLogStore;
use crate::store::{Effects, Store};
use crate::workers::cluster::{self, Heartbeat};
use crate::workers::compression;
use crate::workers::dispatcher::{DispatchParts, DispatchThreads, Dispatcher};
use crate::workers::ingest_writer::{self, WriterThreads};
use crate::workers::mailer::{MailThread, Mailer};
use crate::workers::request_log::{LogThread, RequestLog};
use crate::workers::search_index::{self, IndexerThread, Notifier};

/// What the app is built from: the workers' handles the requests use.
pub struct Running {
    pub handles: Handles,
    pub access_cache: AccessCache,
    pub ingest: Ingest,
    pub mailer: Mailer,
    pub dispatcher: Dispatcher,
    pub streams: Streams,
    /// The search index beside the store; `None` when the store searches itself.
    pub search: Option<Arc<dyn SearchIndex>>,
    pub in_flight: Arc<InFlight>,
    pub request_log: RequestLog,
    /// The request log's store, which the purge of deleted endpoints also empties.
    pub log_store: Arc<dyn RequestLogStore>,
    pub metrics: Arc<Metrics>,
    pub telemetry: Telemetry,
}

/// The workers' threads, stopped by [`Workers::stop`].
pub struct Workers {
    writer: WriterThreads,
    heartbeat: Option<Heartbeat>,
    indexer: Option<(Arc<Notifier>, IndexerThread)>,
    log_thread: LogThread,
    dispatch_threads: DispatchThreads,
    mail_thread: MailThread,
    telemetry_thread: Option<ExporterThread>,
}

/// Starts the workers on `store`.
pub fn start(
    config: &Config,
    store: Arc<dyn Store>,
    sealer: Sealer,
    clock: SharedClock,
) -> Result<(Running, Workers), ServerError> {
    let spawn_err = |source| ServerError::Io {
        context: "cannot start a worker thread".into(),
        source,
    };
    // A store that searches itself (PostgreSQL) keeps no change log and needs no index.
    let (search, indexer) = match store.change_log() {
        Some(_) => {
            let (search, indexer, thread) = search_index::start(
                &config.data_dir,
                store.clone(),
                indexer_settings(&config.search),
            )
            .map_err(|e| ServerError::Other(e.to_string()))?;
            (Some(search), Some((Arc::new(indexer), thread)))
        }
        None => (None, None),
    };
    let metrics = Arc::new(Metrics::default());
    let (telemetry, telemetry_thread) =
        Telemetry::start(&config.telemetry, metrics.clone()).map_err(spawn_err)?;
    let access_cache = AccessCache::default();
    // On a shared store the node joins the cluster before it takes its first write, and
    // before its workers claim what is due (a node that has not joined claims nothing).
    let in_flight = Arc::new(InFlight::default());
    let streams = Streams::new(StreamParts {
        store: store.clone(),
        clock: clock.clone(),
        settings: config.stream.clone(),
        max_total: config.stream.total_cap(config.http.max_connections),
        metrics: metrics.clone(),
        access_changes: access_cache.changes(),
        error_code: crate::http::error::service_code,
    });
    let heartbeat = cluster::start(cluster::Parts {
        store: store.clone(),
        in_flight: in_flight.clone(),
        clock: clock.clone(),
        access_cache: access_cache.clone(),
        streams: streams.clone(),
    })?;
    let (mailer, mail_thread) =
        Mailer::start(store.clone(), config.smtp.clone(), clock.clone()).map_err(spawn_err)?;
    let dispatcher = Dispatcher::default();
    let wakers = Arc::new(Wakers {
        mailer: mailer.clone(),
        dispatcher: dispatcher.clone(),
        access_cache: access_cache.clone(),
        indexer: indexer.as_ref().map(|(notifier, _)| notifier.clone()),
        streams: streams.clone(),
    });
    let handles = Handles::new(store, clock.clone(), wakers);
    // Endpoints from before signing secrets existed get theirs before anything is sent (the
    // dispatcher, the test page's probe), so that signing a request only reads.
    match secrets::create_missing(&handles, &sealer) {
        Ok(0) => {}
        Ok(made) => log::info!("webhooks: made {made} missing signing secret(s)"),
        Err(err) => {
            return Err(ServerError::Other(format!(
                "cannot make the missing webhook signing secrets: {err}"
            )));
        }
    }
    let dispatch_threads = dispatcher
        .start(
            DispatchParts {
                handles: handles.clone(),
                sealer,
                public_url: config.public_url(),
                metrics: metrics.clone(),
                telemetry: telemetry.clone(),
            },
            &config.webhooks,
        )
        .map_err(spawn_err)?;
    let (ingest, writer) = ingest_writer::start(
        handles.clone(),
        metrics.clone(),
        telemetry.clone(),
        config.storage.ingest_writers(),
    )
    .map_err(spawn_err)?;
    let log_store = open_request_log(config)?;
    let (request_log, log_thread) =
        RequestLog::start(log_store.clone(), clock, config.request_log.retention)
            .map_err(spawn_err)?;
    let running = Running {
        handles,
        access_cache,
        ingest,
        mailer,
        dispatcher,
        streams,
        search,
        in_flight,
        request_log,
        log_store,
        metrics,
        telemetry,
    };
    let workers = Workers {
        writer,
        heartbeat,
        indexer,
        log_thread,
        dispatch_threads,
        mail_thread,
        telemetry_thread,
    };
    Ok((running, workers))
}

impl Workers {
    /// Stops the workers once no request is left: every write queued is committed, the node
    /// leaves the cluster, the request log is flushed, the threads are joined, and the spans
    /// of all that are sent last.
    pub async fn stop(self, app: &App) {
        // Webhook attempts in flight finish (bounded by the timeout) and their outcomes are
        // committed while the ingest writer drains; the mail thread may be in the middle of
        // an SMTP exchange: ask both to stop now, join them last.
        app.dispatcher.shutdown();
        app.mailer.shutdown();
        app.ingest.shutdown().await;
        let Workers {
            writer,
            heartbeat,
            indexer,
            log_thread,
            dispatch_threads,
            mail_thread,
            telemetry_thread,
        } = self;
        let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        if let Some(heartbeat) = heartbeat {
            let _ = tokio::task::spawn_blocking(move || heartbeat.stop()).await;
        }
        if let Some((indexer, thread)) = indexer {
            indexer.shutdown();
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        app.request_log.shutdown();
        let _ = tokio::task::spawn_blocking(move || log_thread.join()).await;
        let _ = tokio::task::spawn_blocking(move || dispatch_threads.join()).await;
        let _ = tokio::task::spawn_blocking(move || mail_thread.join()).await;
        // Last: the spans of everything above are sent before the server is done.
        app.telemetry.shutdown();
        if let Some(thread) = telemetry_thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

/// The after-commit path of this node, for every writer: wakes its workers and change
/// streams and clears its access cache.
struct Wakers {
    mailer: Mailer,
    dispatcher: Dispatcher,
    access_cache: AccessCache,
    /// The search index's indexer; `None` when the store searches itself (PostgreSQL).
    indexer: Option<Arc<Notifier>>,
    streams: Streams,
}

impl AfterCommit for Wakers {
    fn committed(&self, effects: Effects) {
        if !effects.records_changed.is_empty() {
            // The commit appended to the change log the indexer follows.
            if let Some(indexer) = &self.indexer {
                indexer.changed();
            }
            self.streams.committed(&effects.records_changed);
        }
        if !effects.records_erased.is_empty() {
            self.streams.erased(&effects.records_erased);
        }
        if effects.access_changed {
            self.access_cache.invalidate();
        }
        if effects.mail_queued {
            self.mailer.wake();
        }
        if effects.deliveries_due {
            self.dispatcher.wake();
        }
        if effects.recoveries {
            self.dispatcher.wake_recoveries();
        }
    }
}

/// The periodic tasks. They stop between two runs, never in the middle of one: their blocking
/// work holds the store, which must be released when the server's shutdown returns. On a
/// shared store (several nodes) the expiry sweep, retention and the purges run on one node per
/// period (`domain::jobs`), while each node flushes its own usage deltas, which add up.
pub struct Periodic {
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Periodic {
    pub fn start(app: &Arc<App>, log_store: Arc<dyn RequestLogStore>) -> Periodic {
        let (stop, stopped) = watch::channel(false);
        let ticker = |period| Ticker::new(period, stopped.clone());
        let tasks = vec![
            tokio::spawn(sweep_expired(app.clone(), ticker(jobs::LOOK_AGAIN))),
            tokio::spawn(flush_usage(app.clone(), ticker(USAGE_FLUSH))),
            tokio::spawn(compression::run(
                app.handles.clone(),
                ticker(compression::CHECK_EVERY),
            )),
            tokio::spawn(endpoint_deletion::run_schedule(
                app.handles.clone(),
                log_store,
                {
                    let log = app.request_log.clone();
                    Arc::new(move || log.flush())
                },
                ticker(endpoint_deletion::SCHEDULE_TICK),
            )),
            tokio::spawn(erasures::run_schedule(
                ErasureWork {
                    handles: app.handles.clone(),
                    sealer: app.endpoints.sealer.clone(),
                    index: app.search.clone(),
                    nodes_follow_within: match app.handles.store.cluster() {
                        Some(_) => crate::workers::cluster::BEAT * 2,
                        None => std::time::Duration::ZERO,
                    },
                },
                ticker(erasures::SCHEDULE_TICK),
            )),
            tokio::spawn(retention::run_schedule(
                app.handles.clone(),
                app.endpoints.retention.clone(),
                ticker(retention::SCHEDULE_TICK),
            )),
        ];
        Periodic { stop, tasks }
    }

    /// Stops every task after its current run, then saves the usage counters a last time.
    pub async fn stop(self, app: &App) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        if let Err(err) = app.usage.flush(app.handles.now()) {
            log::error!("cannot save usage counters: {err}");
        }
    }
}

/// Forgets expired Idempotency-Keys and dashboard sessions every [`EXPIRY_SWEEP`] (looking
/// at every tick whether it is due, so that it can take over another node's run).
async fn sweep_expired(app: Arc<App>, mut ticker: Ticker) {
    let mut due = app.handles.now();
    while ticker.tick().await {
        let now = app.handles.now();
        if now < due {
            continue;
        }
        let app = app.clone();
        let turn = tokio::task::spawn_blocking(move || {
            let store = app.handles.store.as_ref();
            jobs::run(store, "expiry_sweep", now, EXPIRY_SWEEP, || {
                let keys = purge_expired_idempotency(store, now, 10_000)?;
                let sessions = sessions::purge_expired(store, now)?;
                Ok::<_, crate::domain::error::Error>((keys, sessions))
            })
        })
        .await;
        let swept = match turn {
            Ok(turn) => {
                due = turn.next;
                turn.ran
            }
            Err(err) => {
                due = now.plus(EXPIRY_SWEEP);
                log::error!("expiry sweep task failed: {err}");
                None
            }
        };
        match swept {
            None => {}
            Some(Ok((keys, sessions))) => {
                log::debug!("forgot {keys} expired idempotency keys and {sessions} sessions")
            }
            Some(Err(err)) => log::error!("expiry sweep failed: {err}"),
        }
    }
}

/// Saves the usage counters every second (see `usage`).
async fn flush_usage(app: Arc<App>, mut ticker: Ticker) {
    while ticker.tick().await {
        let app = app.clone();
        let flushed = tokio::task::spawn_blocking(move || app.usage.flush(app.handles.now())).await;
        match flushed {
            Ok(Ok(())) => {}
            Ok(Err(err)) => log::error!("cannot save usage counters: {err}"),
            Err(err) => log::error!("usage flush task failed: {err}"),
        }
    }
}
