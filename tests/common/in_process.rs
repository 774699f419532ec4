//! The server in-process: `intake::server::start` on a tokio runtime of its own, with a
//! [`ManualClock`] that tests move instead of sleeping, still talked to over real HTTP on
//! loopback. For what needs time to pass (expiry, rate-limit windows, retry schedules,
//! retention) or direct access to the store between runs.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use intake::core::clock::{ManualClock, SharedClock, Timestamp};
use intake::core::config::Config;
use intake::core::crypto::Sealer;
use intake::domain::handles::{Handles, Unattended};
use intake::server::RunningServer;
use intake::store::Store;
use intake::store::request_log::RequestLogStore;
use tokio::runtime::Runtime;

use super::{OWNER_EMAIL, ServerClient, config_with_storage, release_storage};

/// A server on a temp data dir with a provisioned owner and a manual clock; it can be
/// stopped and started again on the same data dir and clock. Derefs to its
/// [`ServerClient`] (owner token, agent, request helpers) for the current run.
pub struct InProcessServer {
    pub clock: Arc<ManualClock>,
    pub password: String,
    client: ServerClient,
    /// The running server and the runtime it runs on; `None` while stopped.
    running: Option<(Runtime, RunningServer)>,
    config: Config,
    _dir: tempfile::TempDir,
}

impl InProcessServer {
    /// Serves the config `toml` (its data dir and listen address are the harness's) with the
    /// clock at `now`.
    pub fn start(toml: &str, now: Timestamp) -> InProcessServer {
        InProcessServer::start_with(toml, now, |_, _| {})
    }

    /// [`InProcessServer::start`] after `prepare` has had the freshly provisioned store to
    /// itself (to write what the server should find at its start).
    pub fn start_with(
        toml: &str,
        now: Timestamp,
        prepare: impl FnOnce(&dyn Store, &Sealer),
    ) -> InProcessServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = config_with_storage(toml, &dir.path().join("data"));
        config.listen = "127.0.0.1:0".parse().expect("loopback address");
        let clock = Arc::new(ManualClock::new(now));
        // redb opens a file once: provision the owner, close the store, then serve.
        let owner = {
            let (store, sealer) = intake::server::open_data_dir(&config).expect("open data dir");
            let owner = intake::domain::accounts::provision_owner(
                store.as_ref(),
                clock.as_ref(),
                OWNER_EMAIL,
            )
            .expect("provision owner");
            prepare(store.as_ref(), &sealer);
            owner
        };
        let (runtime, server) = serve(&config, &clock);
        InProcessServer {
            clock,
            password: owner.password,
            client: ServerClient::new(server.addr(), owner.token),
            running: Some((runtime, server)),
            config,
            _dir: dir,
        }
    }

    /// Graceful shutdown (as on SIGTERM); does nothing if the server is stopped.
    pub fn stop(&mut self) {
        if let Some((runtime, server)) = self.running.take() {
            runtime.block_on(server.shutdown());
            // Dropping the runtime waits for its tasks, which releases the store.
            drop(runtime);
        }
    }

    /// Starts the stopped server again on the same data dir and clock (new ephemeral port).
    pub fn resume(&mut self) {
        assert!(
            self.running.is_none(),
            "resume() while the server still runs"
        );
        let (runtime, server) = serve(&self.config, &self.clock);
        self.client = ServerClient::new(server.addr(), self.client.owner_token.clone());
        self.running = Some((runtime, server));
    }

    /// [`InProcessServer::stop`], then [`InProcessServer::resume`].
    pub fn restart(&mut self) {
        self.stop();
        self.resume();
    }

    /// Stops the server and runs `f` on handles of its store (on the server's clock, with no
    /// worker to wake) and its sealer (redb opens a file once); [`InProcessServer::resume`]
    /// serves again.
    pub fn stopped<T>(&mut self, f: impl FnOnce(&Handles, &Sealer) -> T) -> T {
        self.stop();
        let (store, sealer) = intake::server::open_data_dir(&self.config).expect("open data dir");
        let handles = Handles::new(store, self.clock.clone(), Arc::new(Unattended));
        f(&handles, &sealer)
    }

    /// Stops the server and runs `f` on its request-log store (kept apart from the main
    /// store); [`InProcessServer::resume`] serves again.
    pub fn stopped_request_log<T>(&mut self, f: impl FnOnce(&dyn RequestLogStore) -> T) -> T {
        self.stop();
        let log = intake::server::open_request_log(&self.config).expect("open request log");
        f(log.as_ref())
    }

    /// The data dir it serves.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.config.data_dir
    }

    /// Sets the clock to `t` (a date or RFC 3339).
    pub fn set(&self, t: &str) {
        self.clock.set(at(t));
    }

    pub fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }
}

impl Deref for InProcessServer {
    type Target = ServerClient;

    fn deref(&self) -> &ServerClient {
        &self.client
    }
}

impl Drop for InProcessServer {
    fn drop(&mut self) {
        self.stop();
        release_storage(&self.config.data_dir);
    }
}

/// `intake::server::start` on a new runtime.
fn serve(config: &Config, clock: &Arc<ManualClock>) -> (Runtime, RunningServer) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let shared: SharedClock = clock.clone();
    let server = runtime
        .block_on(intake::server::start(config.clone(), shared))
        .expect("start server");
    (runtime, server)
}

/// A time given as a date or RFC 3339.
#[track_caller]
pub fn at(text: &str) -> Timestamp {
    intake::core::clock::parse_date_or_rfc3339(text).unwrap_or_else(|| panic!("bad time {text:?}"))
}
