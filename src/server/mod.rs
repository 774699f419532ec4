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
//!
//! `start` reads as those steps: open the data dir, bind, start the workers
//! (`workers::start`, which wires the one after-commit path into every writer), build the
//! `App`, start the periodic tasks (`workers::Periodic`), serve; the task that serves then
//! stops the periodic tasks and the workers in order (`Workers::stop`).

pub mod first_byte;
pub mod notify;
pub mod redirect;
pub mod tls;
mod workers;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinHandle;

use crate::core::clock::SharedClock;
use crate::core::config::{Config, HttpConfig, SearchConfig, StorageBackend};
use crate::core::crypto::{CryptoError, MASTER_KEY_FILE, Sealer};
use crate::core::private_dir::create_private_dir;
use crate::domain::backup::{self, BackupError};
use crate::domain::endpoints::Endpoints;
use crate::domain::poll::ReadAhead;
use crate::domain::sealing_key;
use crate::domain::sessions::{LoginLimiter, LoginThrottle, SharedLoginLimiter};
use crate::domain::usage::Usage;
use crate::http::app::App;
use crate::http::dashboard::setup::Dashboard;
use crate::server::first_byte::FirstByteDeadline;
use crate::server::tls::{Tls, TlsError};
use crate::server::workers::Periodic;
use crate::store::request_log::RequestLogStore;
use crate::store::{self, Store, StoreError};
use crate::workers::search_index;

/// How often expired Idempotency-Keys and sessions are swept.
const EXPIRY_SWEEP: Duration = Duration::from_secs(600);
/// How often the usage counters are saved.
const USAGE_FLUSH: Duration = Duration::from_secs(1);
/// Longest a client may take to complete the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("{0}")]
    Other(String),
}

/// Opens the configured store (the data dir's redb file, or the PostgreSQL database) and the
/// data dir's key-encryption key, creating the folder (mode 0700) if needed.
///
/// Every node of a store must seal with the same key: the key is checked against a value the
/// first node sealed into the store, and a node with another key is refused before it can
/// write anything the others could not open.
pub fn open_data_dir(config: &Config) -> Result<(Arc<dyn Store>, Sealer), ServerError> {
    let dir = &config.data_dir;
    create_private_dir(dir).map_err(|source| ServerError::Io {
        context: format!("cannot create data dir {}", dir.display()),
        source,
    })?;
    let store = match (config.storage.backend, &config.storage.postgres) {
        (StorageBackend::Postgres, Some(postgres)) => store::open_postgres(postgres)?,
        _ => store::open_embedded(
            &config.db_path(),
            config.storage.cache_mb * 1024 * 1024,
            config.storage.min_free_bytes(),
        )?,
    };
    let sealer = Sealer::load_or_create(dir)?;
    if !sealing_key::is_the_store_key(store.as_ref(), &sealer)? {
        return Err(ServerError::Other(format!(
            "{} is not the key this store's secrets are sealed with: copy {} from a node \
             already serving this store into the data dir (docs/src/scale-out.md)",
            dir.join(MASTER_KEY_FILE).display(),
            MASTER_KEY_FILE
        )));
    }
    Ok((store, sealer))
}

fn indexer_settings(config: &SearchConfig) -> search_index::IndexerSettings {
    search_index::IndexerSettings {
        nice: config.indexer_nice,
        memory_bytes: config.index_memory_mb.saturating_mul(1_000_000),
        stop: search_index::StopPolicy {
            share: config.stop_share,
            min_records: config.stop_min_records,
        },
    }
}

/// Opens the request-log store (see `request_log`): a file of its own in the data dir, or
/// tables of the PostgreSQL database on a pool of their own.
pub fn open_request_log(config: &Config) -> Result<Arc<dyn RequestLogStore>, ServerError> {
    Ok(match (config.storage.backend, &config.storage.postgres) {
        (StorageBackend::Postgres, Some(postgres)) => store::open_postgres_request_log(postgres)?,
        _ => store::open_embedded_request_log(
            &config.request_log_path(),
            request_log_cache_bytes(config.storage.cache_mb),
            config.storage.min_free_bytes(),
        )?,
    })
}

/// The request log's page cache: an eighth of `[storage] cache_mb`, from 2 to 8 MiB. The log
/// is appended to in batches and read a page at a time, so only the pages along its newest
/// keys are hot; the cache follows the memory setting instead of adding a fixed 8 MiB to it.
fn request_log_cache_bytes(cache_mb: usize) -> usize {
    (cache_mb / 8).clamp(2, 8) * 1024 * 1024
}

/// A server running in the background of the current tokio runtime.
pub struct RunningServer {
    addr: SocketAddr,
    app: Arc<App>,
    tls: Option<Arc<Tls>>,
    redirect_addr: Option<SocketAddr>,
    stop: Option<oneshot::Sender<()>>,
    done: JoinHandle<()>,
}

impl RunningServer {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the plain-HTTP redirect listener listens, when configured.
    pub fn redirect_addr(&self) -> Option<SocketAddr> {
        self.redirect_addr
    }

    /// Reads the TLS certificate files again (SIGHUP); open connections are not touched. A
    /// failure keeps the certificate served so far.
    pub fn reload_tls(&self) -> Result<(), TlsError> {
        match &self.tls {
            Some(tls) => {
                tls.reload()?;
                log::info!(
                    "TLS certificate reloaded (SHA-256 fingerprint {})",
                    tls.fingerprint()
                );
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// A backup into `[backup] dir` (SIGUSR1), keeping the newest `keep`; returns its path.
    pub async fn backup_scheduled(&self) -> Result<PathBuf, BackupError> {
        let app = self.app.clone();
        let Some(dir) = app.config.backup.dir.clone() else {
            return Err(BackupError::Refused(
                "no backup folder is configured ([backup] dir)".into(),
            ));
        };
        tokio::task::spawn_blocking(move || {
            let config = &app.config;
            backup::write_scheduled(
                app.handles.store.as_ref(),
                &config.data_dir,
                &dir,
                config.backup.keep,
                app.handles.now(),
            )
        })
        .await
        .map_err(|e| BackupError::Io {
            context: "the backup task failed".into(),
            source: std::io::Error::other(e),
        })?
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
    // Certificate problems stop the start before anything listens.
    let tls = match &config.tls {
        Some(tls_config) => Some(Arc::new(Tls::load(tls_config, &config.data_dir)?)),
        None => None,
    };
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
    // Links in e-mails need the real port when the config asked for any free one (`:0`):
    // `public_url()` defaults to `listen`. `public_url` itself stays as configured (set, it is
    // also the origin the dashboard's forms must come from).
    config.listen = addr;
    let dashboard = Dashboard::start(store.as_ref(), &config, clock.now())
        .map_err(|e| ServerError::Other(e.to_string()))?;
    let redirect = match config.tls.as_ref().and_then(|t| t.redirect_listen) {
        Some(at) => Some(
            redirect::bind(
                at,
                config.public_url(),
                connection_builder(&config.http).http1_only(),
            )
            .await?,
        ),
        None => None,
    };
    let (running, workers) = workers::start(&config, store, sealer.clone(), clock.clone())?;
    let log_store = running.log_store.clone();
    let app = Arc::new(build_app(config, running, sealer, dashboard));
    let periodic = Periodic::start(&app, log_store);
    let (stop, stopped) = oneshot::channel();
    let tls_for_serve = tls.clone();
    let redirect_addr = redirect.as_ref().map(|(addr, _)| *addr);
    let done = tokio::spawn({
        let app = app.clone();
        async move {
            let grace = app.config.shutdown.grace;
            serve(listener, app.clone(), tls_for_serve, stopped, grace).await;
            app.poll_read_ahead.stop().await;
            if let Some((_, redirector)) = redirect {
                redirector.abort();
            }
            periodic.stop(&app).await;
            workers.stop(&app).await;
            log::info!("shutdown complete");
        }
    });
    match &tls {
        Some(tls) => log::info!(
            "listening on https://{addr} (certificate SHA-256 fingerprint {})",
            tls.fingerprint()
        ),
        None => log::info!("listening on http://{addr}"),
    }
    if let Some(at) = redirect_addr {
        log::info!("redirecting plain HTTP on {at} to https");
    }
    Ok(RunningServer {
        addr,
        app,
        tls,
        redirect_addr,
        stop: Some(stop),
        done,
    })
}

/// Accepts connections until `stopped` fires, then drains them for at most `grace`. With
/// `tls`, each connection is a TLS handshake first (bounded by [`HANDSHAKE_TIMEOUT`]).
async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    tls: Option<Arc<Tls>>,
    mut stopped: oneshot::Receiver<()>,
    grace: Duration,
) {
    let builder = connection_builder(&app.config.http);
    let (http1, http2) = (builder.clone().http1_only(), builder.http2_only());
    let header_timeout = app.config.http.header_timeout;
    let connections = Arc::new(Semaphore::new(app.config.http.max_connections));
    let streams = app.streams.clone();
    let service = warp::service(crate::http::filter(app));
    let graceful = GracefulShutdown::new();
    loop {
        // At the connection cap, stop accepting until one closes: waiting clients queue in
        // the listen backlog instead of each taking a socket and a task.
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            _ = &mut stopped => break,
        };
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
                // The peer's address reaches `api` as a request extension, which resolves the
                // client's address from it (`forwarded`).
                let inner = TowerToHyperService::new(service.clone());
                let with_peer = hyper::service::service_fn(
                    move |mut req: http::Request<hyper::body::Incoming>| {
                        req.extensions_mut().insert(crate::http::request::PeerAddr(peer.ip()));
                        hyper::service::Service::call(&inner, req)
                    },
                );
                let (http1, http2, watcher) = (http1.clone(), http2.clone(), graceful.watcher());
                let acceptor = tls.as_ref().map(|tls| tls.acceptor().clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    let served = match acceptor {
                        None => {
                            let stream = FirstByteDeadline::new(stream, header_timeout);
                            let connection = http1
                                .serve_connection_with_upgrades(TokioIo::new(stream), with_peer);
                            watcher.watch(connection.into_owned()).await
                        }
                        Some(acceptor) => {
                            let handshake =
                                tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream));
                            let stream = match handshake.await {
                                Ok(Ok(stream)) => stream,
                                Ok(Err(err)) => {
                                    log::debug!("TLS handshake with {peer} failed: {err}");
                                    return;
                                }
                                Err(_) => {
                                    log::debug!("TLS handshake with {peer} timed out");
                                    return;
                                }
                            };
                            let builder = if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                                http2
                            } else {
                                http1
                            };
                            let stream = FirstByteDeadline::new(stream, header_timeout);
                            let connection = builder
                                .serve_connection_with_upgrades(TokioIo::new(stream), with_peer);
                            watcher.watch(connection.into_owned()).await
                        }
                    };
                    if let Err(err) = served {
                        log::debug!("connection ended with an error: {err}");
                    }
                });
            }
            _ = &mut stopped => break,
        }
    }
    drop(listener);
    // Change streams never end by themselves: end them so their connections can close (each
    // reader reconnects, with Last-Event-ID, to a node that is up).
    streams.shutdown();
    log::info!("shutting down: waiting for in-flight requests");
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(grace) => {
            log::warn!("some connections were still open after {grace:?}; closing them");
        }
    }
}

/// The HTTP/1.1 and HTTP/2 connection settings every listener uses: a client gets
/// `header_timeout` to send its request head, and an idle keep-alive connection is closed
/// after the same time, so slow or silent clients cannot hold connections open. A client
/// that half-closes after its request is answered, not hung up on.
///
/// Each connection is served as one protocol decided up front (`http1_only`, or
/// `http2_only` when TLS negotiated `h2` by ALPN): sniffing for the HTTP/2 preface would
/// wait for a silent client's first byte with no timeout at all. Plain-text HTTP/2 (h2c)
/// is therefore not offered.
pub(crate) fn connection_builder(http: &HttpConfig) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(http.header_timeout)
        // A client that shuts down its sending side still gets its answer. It also keeps
        // hyper from reading while a request is being answered (to spot such an end): that
        // read needs room in the connection's buffer, which the request in progress still
        // shares, so it cost a fresh 8 KiB buffer per request (docs/src/benchmarks.md).
        .half_close(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(http.header_timeout)
        .keep_alive_timeout(http.header_timeout);
    builder
}

/// The state every request handler shares, from the running workers.
fn build_app(
    config: Config,
    running: workers::Running,
    sealer: Sealer,
    dashboard: Dashboard,
) -> App {
    let store = running.handles.store.clone();
    // Nodes sharing a store share the failed-login counts, or each would multiply the limits.
    let logins: Box<dyn LoginThrottle> = match store.cluster() {
        Some(_) => Box::new(SharedLoginLimiter::new(store.clone(), &config.accounts)),
        None => Box::new(LoginLimiter::new(&config.accounts)),
    };
    let exports = crate::domain::export::Exports::new(store.clone(), running.handles.clock.clone());
    App {
        egress: crate::core::egress::TargetPolicy::new(&config.webhooks),
        endpoints: Endpoints::new(
            running.handles.clone(),
            sealer,
            running.access_cache,
            crate::domain::retention::Retention::new(config.retention.clone()),
        ),
        handles: running.handles,
        usage: Usage::new(store.clone()),
        logins,
        body_budget: crate::http::request::BodyBudget::new(config.http.body_memory_mb),
        config,
        ingest: running.ingest,
        request_log: running.request_log,
        search: running.search,
        in_flight: running.in_flight,
        poll_read_ahead: ReadAhead::default(),
        streams: running.streams,
        exports,
        telemetry: running.telemetry,
        mailer: running.mailer,
        dispatcher: running.dispatcher,
        dashboard,
        metrics: running.metrics,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_request_log_cache_is_an_eighth_of_cache_mb_within_2_to_8_mib() {
        let mib = |n: usize| n * 1024 * 1024;
        assert_eq!(super::request_log_cache_bytes(1), mib(2));
        assert_eq!(super::request_log_cache_bytes(16), mib(2));
        assert_eq!(super::request_log_cache_bytes(40), mib(5));
        assert_eq!(super::request_log_cache_bytes(64), mib(8));
        assert_eq!(super::request_log_cache_bytes(4096), mib(8));
    }
}
