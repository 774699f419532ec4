//! Starting and stopping the daemon: open the data dir, start the background workers, accept
//! connections, and shut down gracefully.
//!
//! Shutdown order matters for the durability promise: stop accepting, let in-flight requests
//! finish (each write in them is committed before its response), then stop the ingest writer
//! after it has committed whatever is still queued, then flush the request log. The webhook
//! dispatcher and the mail thread are told to stop after the HTTP drain and joined last: the
//! dispatcher's attempts in flight finish within the webhook timeout and their outcomes are
//! committed (undelivered deliveries stay due for the next start), and the mail thread may be
//! waiting on an SMTP server (what it has not sent stays queued in the outbox). Both are
//! joined before the store is dropped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::api;
use crate::app::App;
use crate::clock::SharedClock;
use crate::config::Config;
use crate::crypto::{CryptoError, Sealer};
use crate::dashboard::Dashboard;
use crate::endpoints::Endpoints;
use crate::ingest::{self, Ingest};
use crate::mail::Mailer;
use crate::poll::InFlight;
use crate::request_log::RequestLog;
use crate::retention;
use crate::search;
use crate::sessions::{self, LoginLimiter};
use crate::storage::{Store, StoreError};
use crate::usage::Usage;
use crate::webhooks::dispatch::{DispatchParts, Dispatcher};

/// How often expired Idempotency-Keys and sessions are swept.
const EXPIRY_SWEEP: Duration = Duration::from_secs(600);

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    #[error("{0}")]
    Other(String),
}

/// Opens the store of a data dir, creating the folder (mode 0700) if needed.
pub fn open_data_dir(config: &Config) -> Result<(Store, Sealer), ServerError> {
    let dir = &config.data_dir;
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|source| ServerError::Io {
        context: format!("cannot create data dir {}", dir.display()),
        source,
    })?;
    let store = Store::open(&config.db_path(), config.storage.cache_mb * 1024 * 1024)?;
    let sealer = Sealer::load_or_create(dir)?;
    Ok((store, sealer))
}

/// Opens the request-log store of a data dir (see `request_log`).
fn open_request_log(config: &Config) -> Result<Store, ServerError> {
    // The log is written in batches and read a page at a time: a small cache serves it.
    Ok(Store::open_request_log(
        &config.request_log_path(),
        8 * 1024 * 1024,
    )?)
}

/// A server running in the background of the current tokio runtime.
pub struct RunningServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    done: JoinHandle<()>,
}

impl RunningServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Graceful shutdown: returns once every acknowledged write is committed and the workers
    /// have stopped.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Err(err) = self.done.await {
            log::error!("server task failed: {err}");
        }
    }
}

/// Opens the data dir, starts the workers and binds the listener.
pub async fn start(mut config: Config, clock: SharedClock) -> Result<RunningServer, ServerError> {
    let (store, sealer) = open_data_dir(&config)?;
    let store = Arc::new(store);
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServerError::Io {
            context: format!("cannot listen on {}", config.listen),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServerError::Io {
        context: "cannot read the listening address".into(),
        source,
    })?;
    // Links in e-mails need the real port when the config asked for any free one (`:0`).
    if config.public_url.is_none() {
        config.public_url = Some(format!("http://{addr}"));
    }
    let dashboard = Dashboard::start(&store, &config, clock.now())
        .map_err(|e| ServerError::Other(e.to_string()))?;
    let spawn_err = |source| ServerError::Io {
        context: "cannot start a worker thread".into(),
        source,
    };
    let (search, indexer, indexer_thread) = search::index::start(&config.data_dir, store.clone())
        .map_err(|e| ServerError::Other(e.to_string()))?;
    let (mailer, mail_thread) =
        Mailer::start(store.clone(), config.smtp.clone(), clock.clone()).map_err(spawn_err)?;
    let (dispatcher, dispatch_threads) = Dispatcher::start(
        DispatchParts {
            store: store.clone(),
            sealer: sealer.clone(),
            clock: clock.clone(),
            mailer: mailer.clone(),
            public_url: config.public_url(),
        },
        &config.webhooks,
    )
    .map_err(spawn_err)?;
    let (ingest, writer) = Ingest::start(store.clone(), {
        let (indexer, dispatcher) = (indexer.clone(), dispatcher.clone());
        // Cheap when the commit made no delivery: the scheduler finds nothing new due.
        Box::new(move || {
            indexer.changed();
            dispatcher.wake();
        })
    })
    .map_err(spawn_err)?;
    let log_store = Arc::new(open_request_log(&config)?);
    let (request_log, log_thread) =
        RequestLog::start(log_store, clock.clone(), config.request_log.retention)
            .map_err(spawn_err)?;
    let grace = config.shutdown.grace;
    let app = Arc::new(App {
        endpoints: Endpoints::new(store.clone(), sealer),
        usage: Usage::new(store.clone()),
        logins: LoginLimiter::new(&config.accounts),
        config,
        store,
        clock,
        ingest,
        request_log,
        search,
        in_flight: InFlight::default(),
        mailer,
        dispatcher,
        dashboard,
    });
    let (stop, stopped) = oneshot::channel();
    let sweeper = tokio::spawn(sweep_expired(app.clone()));
    let usage_flusher = tokio::spawn(flush_usage(app.clone()));
    let purger = tokio::spawn(retention::run_schedule(app.clone(), {
        let indexer = indexer.clone();
        move || indexer.changed()
    }));
    let done = tokio::spawn({
        let app = app.clone();
        async move {
            serve(listener, app.clone(), stopped, grace).await;
            sweeper.abort();
            purger.abort();
            usage_flusher.abort();
            if let Err(err) = app.usage.flush(app.clock.now()) {
                log::error!("cannot save usage counters: {err}");
            }
            // Webhook attempts in flight finish (bounded by the timeout) and their outcomes are
            // committed while the ingest writer drains; the mail thread may be in the middle
            // of an SMTP exchange: ask both to stop now, join them last.
            app.dispatcher.shutdown();
            app.mailer.shutdown();
            app.ingest.shutdown().await;
            let _ = tokio::task::spawn_blocking(move || writer.join()).await;
            indexer.shutdown();
            let _ = tokio::task::spawn_blocking(move || indexer_thread.join()).await;
            app.request_log.shutdown();
            let _ = tokio::task::spawn_blocking(move || log_thread.join()).await;
            let _ = tokio::task::spawn_blocking(move || dispatch_threads.join()).await;
            let _ = tokio::task::spawn_blocking(move || mail_thread.join()).await;
            log::info!("shutdown complete");
        }
    });
    log::info!("listening on http://{addr}");
    Ok(RunningServer {
        addr,
        stop: Some(stop),
        done,
    })
}

/// Accepts connections until `stopped` fires, then drains them for at most `grace`.
async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    mut stopped: oneshot::Receiver<()>,
    grace: Duration,
) {
    let service = warp::service(api::filter(app));
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        // Out of file descriptors and similar: back off instead of spinning.
                        log::warn!("accept failed: {err}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                // The client address reaches handlers as a request extension (login limits).
                let inner = TowerToHyperService::new(service.clone());
                let with_peer = hyper::service::service_fn(
                    move |mut req: http::Request<hyper::body::Incoming>| {
                        req.extensions_mut().insert(api::ClientAddr(peer.ip()));
                        hyper::service::Service::call(&inner, req)
                    },
                );
                let connection = builder
                    .serve_connection_with_upgrades(TokioIo::new(stream), with_peer)
                    .into_owned();
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(err) = connection.await {
                        log::debug!("connection ended with an error: {err}");
                    }
                });
            }
            _ = &mut stopped => break,
        }
    }
    drop(listener);
    log::info!("shutting down: waiting for in-flight requests");
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(grace) => {
            log::warn!("some connections were still open after {grace:?}; closing them");
        }
    }
}

/// Forgets expired Idempotency-Keys and dashboard sessions.
async fn sweep_expired(app: Arc<App>) {
    let mut interval = tokio::time::interval(EXPIRY_SWEEP);
    loop {
        interval.tick().await;
        let app = app.clone();
        let swept = tokio::task::spawn_blocking(move || {
            let now = app.clock.now();
            let keys = ingest::purge_expired_idempotency(&app.store, now, 10_000)?;
            let sessions = sessions::purge_expired(&app.store, now)?;
            Ok::<_, crate::error::Error>((keys, sessions))
        })
        .await;
        match swept {
            Ok(Ok((keys, sessions))) => {
                log::debug!("forgot {keys} expired idempotency keys and {sessions} sessions")
            }
            Ok(Err(err)) => log::error!("expiry sweep failed: {err}"),
            Err(err) => log::error!("expiry sweep task failed: {err}"),
        }
    }
}

/// Saves the usage counters every second (see `usage`).
async fn flush_usage(app: Arc<App>) {
    let mut interval = tokio::time::interval(Duration::from_secs(1));
    loop {
        interval.tick().await;
        let app = app.clone();
        let flushed = tokio::task::spawn_blocking(move || app.usage.flush(app.clock.now())).await;
        match flushed {
            Ok(Ok(())) => {}
            Ok(Err(err)) => log::error!("cannot save usage counters: {err}"),
            Err(err) => log::error!("usage flush task failed: {err}"),
        }
    }
}
