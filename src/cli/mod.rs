//! The command line: `serve`, `init`, `check`, `health`, `backup`, `restore`, `migrate`,
//! `compact`, the operator's `endpoint` and `account` commands, `export` (`export.rs`), and `completions` and
//! `man` (`manual`).

mod export;
mod manual;

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

use crate::core::clock::{Clock, SystemClock};
use crate::core::config::{Config, TlsConfig};
use crate::core::log_output;
use crate::domain::accounts;
use crate::domain::backup;
use crate::domain::handles::{Handles, Unattended};
use crate::domain::password_reset;
use crate::server;
use crate::server::notify::{self, notify};

/// `intake --version`: the version, the git commit and how the binary was built (`build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("BUILD_INTAKE_COMMIT"),
    "; ",
    env!("BUILD_INTAKE_FEATURES"),
    ")"
);

#[derive(Parser, Debug)]
#[command(
    name = "intake",
    version = VERSION,
    about = "A self-hosted data-intake API in one binary.",
    long_about = "A self-hosted data-intake API in one binary.\n\n\
        An owner creates named endpoints; callers send JSON records to them with an API key. \
        intake stores every record durably (an embedded redb file, or PostgreSQL for several \
        nodes) and serves it back: read, list, search, poll, replace, delete, with signed \
        webhooks, collaborators, a deploy workflow and a dashboard at /dashboard.\n\n\
        Start with `intake init --owner-email EMAIL` (prints the owner's password and token \
        once), then `intake serve`."
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the daemon.
    Serve {
        #[command(flatten)]
        files: FileArgs,
        /// Address to listen on (overrides `listen` in the config file).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// Serve HTTPS with a self-signed certificate for localhost, made once and kept in
        /// the data dir (as `[tls] self_signed = true`); for local development.
        #[arg(long)]
        dev_tls: bool,
    },
    /// Provision a data dir: create the owner account and print its password and token once.
    Init {
        #[command(flatten)]
        files: FileArgs,
        /// E-mail address of the owner account.
        #[arg(long)]
        owner_email: String,
        /// Print the credentials as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Manage endpoints on a running server.
    Endpoint {
        #[command(subcommand)]
        command: EndpointCommand,
    },
    /// Help the accounts of a data dir (its server stopped, or any server on PostgreSQL).
    Account {
        #[command(subcommand)]
        command: AccountCommand,
    },
    /// Validate the configuration (file, INTAKE_* variables, flags) and print the effective
    /// one, secrets masked.
    Check {
        #[command(flatten)]
        files: FileArgs,
    },
    /// Take a consistent backup of a running server into FILE (a tar archive).
    Backup {
        /// Where to write the archive.
        #[arg(long)]
        to: PathBuf,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Copy a single-node install (its stopped server's data dir) into an empty PostgreSQL
    /// database, then verify the copy; the data dir is left untouched.
    Migrate {
        /// The data dir of the redb install to copy (its server stopped).
        #[arg(long, value_name = "DATA_DIR")]
        from_redb: PathBuf,
        /// The PostgreSQL database to copy into (libpq URL or key/value string).
        #[arg(long, value_name = "URL")]
        to: String,
        /// TLS to the database: `verify-full` (default) or `disable`.
        #[arg(long, default_value = "verify-full")]
        tls: String,
        /// PEM file of the authorities that may sign the database's certificate.
        #[arg(long)]
        ca_file: Option<PathBuf>,
    },
    /// Give the space that deleted records and purged logs left in the data dir's files back
    /// to the file system, and remove what is left of deleted data from them (the files are
    /// written anew, the payload dictionary retrained, the search index rebuilt at the next
    /// start); the server must be stopped.
    Compact {
        #[command(flatten)]
        files: FileArgs,
    },
    /// Restore a backup into a data dir; the server must be stopped. The search index is
    /// rebuilt at the next start.
    Restore {
        /// The backup archive (from `intake backup` or a SIGUSR1 backup).
        #[arg(long)]
        from: PathBuf,
        #[command(flatten)]
        files: FileArgs,
        /// Replace the data of a data dir that is not empty.
        #[arg(long)]
        force: bool,
    },
    /// Ask a running server whether it is up or ready.
    ///
    /// One GET of /healthz (or /readyz with --ready); exits 0 when the server answers 200 and
    /// 1 otherwise. For container health checks and scripts: the image has no curl. Without
    /// --server, asks the address the configuration listens on (a wildcard address as
    /// loopback), so the same environment as `serve` needs no flag.
    Health {
        /// Base URL of the running server.
        #[arg(long, env = "INTAKE_SERVER")]
        server: Option<String>,
        /// The config file whose `listen` to ask when there is no --server.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Ask /readyz (storage writable, search index open) instead of /healthz.
        #[arg(long)]
        ready: bool,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 5)]
        timeout: u64,
    },
    /// Export an endpoint's records from a running server into FILE or onto standard output.
    ///
    /// One GET of /api/v1/data/{slug}/export with a data API key that may read: the records of
    /// the key's environment in a window (default: all of them), optionally only those
    /// containing a text, as NDJSON, CSV or one JSON array. On a terminal, a line on standard
    /// error shows the records and megabytes so far; elsewhere only errors are printed. An
    /// export the server cut short exits 1 and leaves FILE as it was.
    Export(export::ExportArgs),
    /// Print the completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the manual page intake(1), or write every page into a directory.
    Man {
        /// Write intake.1 and one page per command (intake-serve.1, ...) into DIR.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
struct FileArgs {
    /// Path of the TOML config file (defaults apply without one).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Data directory (overrides `data_dir` in the config file).
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct RemoteArgs {
    /// Base URL of the running server.
    #[arg(long, env = "INTAKE_SERVER", default_value = "http://127.0.0.1:8080")]
    server: String,
    /// Account token (as printed by `intake init`).
    #[arg(long, env = "INTAKE_TOKEN", hide_env_values = true)]
    token: String,
}

#[derive(Subcommand, Debug)]
enum EndpointCommand {
    /// Create an endpoint and print it as JSON.
    Create {
        name: String,
        #[arg(long)]
        description: Option<String>,
        /// A top-level field every payload must contain (repeatable).
        #[arg(long = "required-field")]
        required_fields: Vec<String>,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// List endpoints as JSON.
    List {
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

#[derive(Subcommand, Debug)]
enum AccountCommand {
    /// Print a one-time link to choose a new password for the account of EMAIL: for a
    /// forgotten password when the server cannot send e-mail. It works once, for 30 minutes,
    /// under the configured `public_url`, and replaces the account's earlier link; using it
    /// signs out every session of the account.
    ResetPassword {
        /// The account's e-mail address.
        email: String,
        #[command(flatten)]
        files: FileArgs,
    },
}

/// Runs the command line; returns the process exit code.
pub fn run() -> i32 {
    let cli = Cli::parse();
    init_logging();
    let result = match cli.command {
        Command::Serve {
            files,
            listen,
            dev_tls,
        } => load(&files).and_then(|mut config| {
            if let Some(listen) = listen {
                config.listen = listen;
            }
            if dev_tls {
                config.tls = Some(TlsConfig {
                    self_signed: true,
                    ..TlsConfig::default()
                });
            }
            serve(config)
        }),
        Command::Init {
            files,
            owner_email,
            json,
        } => load(&files).and_then(|config| init(&config, &owner_email, json)),
        Command::Endpoint { command } => endpoint(command),
        Command::Account {
            command: AccountCommand::ResetPassword { email, files },
        } => load(&files).and_then(|config| reset_password(&config, &email)),
        Command::Check { files } => load(&files).and_then(|config| check(&config, &files)),
        Command::Backup { to, remote } => take_backup(&remote, &to),
        Command::Migrate {
            from_redb,
            to,
            tls,
            ca_file,
        } => migrate(&from_redb, to, &tls, ca_file),
        Command::Compact { files } => load(&files).and_then(|config| compact(&config)),
        Command::Restore { from, files, force } => {
            load(&files).and_then(|config| restore(&from, &config, force))
        }
        Command::Health {
            server,
            config,
            ready,
            timeout,
        } => health_server(server, config.as_deref())
            .and_then(|server| health(&server, ready, std::time::Duration::from_secs(timeout))),
        Command::Export(args) => export::export(&args),
        Command::Completions { shell } => manual::completions(shell),
        Command::Man { out_dir } => manual::man(out_dir.as_deref()),
    };
    log_output::flush();
    match result {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("intake: {message}");
            1
        }
    }
}

/// `RUST_LOG` sets the level (default `info`). Colours only on a terminal: stripping them from
/// every line costs measurable CPU under load when stderr is a file or a pipe. Lines are
/// written by `log_output`'s thread, not by the thread that logs them.
fn init_logging() {
    use std::io::IsTerminal;
    // `Always`, not `Auto`: env_logger cannot see that its pipe ends at a terminal.
    let style = if std::io::stderr().is_terminal() {
        env_logger::WriteStyle::Always
    } else {
        env_logger::WriteStyle::Never
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .write_style(style)
        .target(env_logger::Target::Pipe(log_output::pipe()))
        .init();
}

fn load(files: &FileArgs) -> Result<Config, String> {
    let mut config = Config::load(files.config.as_deref()).map_err(|e| e.to_string())?;
    if let Some(dir) = &files.data_dir {
        config.data_dir = dir.clone();
    }
    Ok(config)
}

fn serve(config: Config) -> Result<(), String> {
    // Where the kernel offers transparent huge pages (on request, `madvise`, a common default,
    // or always), an allocator's arena can become 2 MiB of resident memory however little of
    // it is used: the idle server measured 56 MB instead of 19 MB (with mimalloc, which asked
    // for them), with no throughput to show for it (docs/src/benchmarks.md). Before the
    // runtime's threads, so that all of them see it.
    if let Err(err) = rustix::thread::disable_transparent_huge_pages(true) {
        log::debug!("cannot opt out of transparent huge pages: {err}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(async {
        let signals = listen_for_signals();
        let running = server::start(config, Arc::new(SystemClock))
            .await
            .map_err(|e| e.to_string())?;
        notify(notify::READY);
        wait_for_stop(&running, signals).await;
        notify(notify::STOPPING);
        running.shutdown().await;
        Ok(())
    })
}

/// SIGTERM, SIGHUP and SIGUSR1, listened for before the server starts: a signal sent as soon
/// as the server reports ready (log line, `READY=1`) is handled, never fatal (the default
/// action of SIGHUP and SIGUSR1 ends the process).
#[cfg(unix)]
type Signals = std::io::Result<[tokio::signal::unix::Signal; 3]>;
#[cfg(not(unix))]
type Signals = ();

#[cfg(unix)]
fn listen_for_signals() -> Signals {
    use tokio::signal::unix::{SignalKind, signal};
    Ok([
        signal(SignalKind::terminate())?,
        signal(SignalKind::hangup())?,
        signal(SignalKind::user_defined1())?,
    ])
}

#[cfg(not(unix))]
fn listen_for_signals() -> Signals {}

/// Resolves on SIGTERM or Ctrl-C; meanwhile reloads the TLS certificate on each SIGHUP and
/// takes a backup into `[backup] dir` on each SIGUSR1.
async fn wait_for_stop(running: &server::RunningServer, signals: Signals) {
    #[cfg(unix)]
    {
        let [mut term, mut hup, mut usr1] = match signals {
            Ok(signals) => signals,
            Err(err) => {
                log::warn!(
                    "cannot listen for SIGTERM, SIGHUP or SIGUSR1 ({err}); only Ctrl-C stops the server"
                );
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        loop {
            tokio::select! {
                _ = term.recv() => return,
                _ = tokio::signal::ctrl_c() => return,
                _ = hup.recv() => {
                    notify(notify::RELOADING);
                    if let Err(err) = running.reload_tls() {
                        log::error!("TLS certificate not reloaded, still serving the previous one: {err}");
                    }
                    notify(notify::READY);
                }
                // One backup at a time: a SIGUSR1 during a backup is handled after it.
                _ = usr1.recv() => match running.backup_scheduled().await {
                    Ok(path) => log::info!("backup written to {}", path.display()),
                    Err(err) => log::error!("backup failed: {err}"),
                },
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (running, signals);
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `intake check`: the configuration is valid (else `load` already failed, naming the key);
/// print it as TOML with secrets masked; then the data dir's files are of layouts this binary
/// serves (else the error starting it would give).
fn check(config: &Config, files: &FileArgs) -> Result<(), String> {
    let text = toml::to_string(config).map_err(|e| format!("cannot print the config: {e}"))?;
    let source = files
        .config
        .as_ref()
        .map_or_else(|| "no config file".to_string(), |p| p.display().to_string());
    println!("# intake {VERSION}");
    println!(
        "# Effective configuration from {source}, INTAKE_* variables and flags; secrets masked."
    );
    print!("{text}");
    eprintln!("intake: the configuration is valid");
    check_layouts(config)
}

/// `intake check`'s look at the layout version of each file of a redb data dir, read without
/// writing to them (a database's schema is checked by the server when it connects).
fn check_layouts(config: &Config) -> Result<(), String> {
    use crate::store::{FileLayout, LayoutFound, StoreError};
    type Inspect = fn(&std::path::Path) -> Result<FileLayout, StoreError>;
    if config.storage.backend == crate::core::config::StorageBackend::Postgres {
        return Ok(());
    }
    let files: [(PathBuf, Inspect); 2] = [
        (config.db_path(), crate::store::inspect_embedded),
        (
            config.request_log_path(),
            crate::store::inspect_embedded_request_log,
        ),
    ];
    for (path, inspect) in &files {
        let state = match inspect(path).map_err(|e| e.to_string())? {
            FileLayout::Missing => continue,
            FileLayout::InUse => "in use by a running server, so not read".to_string(),
            FileLayout::Unclean => {
                "not closed cleanly, so not read: the server repairs it when it starts".to_string()
            }
            FileLayout::Found(LayoutFound::New) => "has no layout version yet".to_string(),
            FileLayout::Found(LayoutFound::Current(version)) => {
                format!("layout version {version}, this intake's")
            }
            FileLayout::Found(LayoutFound::Older(version)) => format!(
                "layout version {version}: the server upgrades it when it starts, after \
                 saving a copy beside it (docs/src/upgrading.md)"
            ),
        };
        eprintln!("intake: {}: {state}", path.display());
    }
    Ok(())
}

/// The server `intake health` asks: --server (or INTAKE_SERVER), else the configuration's
/// `listen`, where a wildcard address (0.0.0.0, ::) is asked on loopback.
fn health_server(
    server: Option<String>,
    config: Option<&std::path::Path>,
) -> Result<String, String> {
    if let Some(server) = server {
        return Ok(server);
    }
    let config = Config::load(config).map_err(|e| e.to_string())?;
    let ip = match config.listen.ip() {
        std::net::IpAddr::V4(ip) if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(ip) if ip.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let address = std::net::SocketAddr::new(ip, config.listen.port());
    Ok(format!("{scheme}://{address}"))
}

/// `intake health`: one GET of `/healthz` (or `/readyz`); prints the answer's body.
fn health(server: &str, ready: bool, timeout: std::time::Duration) -> Result<(), String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into();
    let path = if ready { "/readyz" } else { "/healthz" };
    let url = format!("{}{path}", server.trim_end_matches('/'));
    let mut response = agent
        .get(&url)
        .call()
        .map_err(|e| format!("cannot reach {server}: {e}"))?;
    let status = response.status();
    let body = response.body_mut().read_to_string().unwrap_or_default();
    if status == ureq::http::StatusCode::OK {
        println!("{}", body.trim_end());
        Ok(())
    } else {
        Err(format!("{url} answered {status}: {}", body.trim_end()))
    }
}

/// `intake backup --to FILE`: asks the running server for a backup and saves it to FILE.
fn take_backup(remote: &RemoteArgs, to: &std::path::Path) -> Result<(), String> {
    // A large store takes a while to copy and download: no overall deadline.
    let mut response = send(remote, "POST", "/api/v1/manage/backups", None, None)?;
    if !response.status().is_success() {
        return Err(error_answer(&mut response));
    }
    let bytes =
        backup::save(&mut response.body_mut().as_reader(), to).map_err(|e| e.to_string())?;
    println!("Backup written to {} ({bytes} bytes).", to.display());
    Ok(())
}

/// `intake restore`: puts a backup in place of the data of a stopped server's data dir.
/// `intake compact`: compacts the store and the request log of a stopped server's data dir.
fn compact(config: &Config) -> Result<(), String> {
    if config.storage.backend == crate::core::config::StorageBackend::Postgres {
        return Err(
            "this server keeps its data in PostgreSQL ([storage] backend = \"postgres\"): \
             PostgreSQL reclaims space itself (VACUUM)"
                .into(),
        );
    }
    let mb = |bytes: u64| bytes as f64 / 1_000_000.0;
    let store = config.db_path();
    if !store.exists() {
        return Err(format!(
            "{} does not exist: no data dir there",
            store.display()
        ));
    }
    let recompressed =
        crate::store::recompress_embedded(&store, SystemClock.now()).map_err(|e| e.to_string())?;
    println!(
        "{}: {} records stored anew with a payload dictionary trained on the records it holds \
         now; {} older dictionaries removed",
        store.display(),
        recompressed.records,
        recompressed.dictionaries_removed
    );
    for path in [store, config.request_log_path()] {
        if !path.exists() {
            continue;
        }
        let (before, after) = crate::store::compact_embedded(&path).map_err(|e| e.to_string())?;
        println!(
            "{}: {:.1} MB -> {:.1} MB, written anew",
            path.display(),
            mb(before),
            mb(after)
        );
    }
    let index = crate::workers::search_index::remove_index(&config.data_dir)
        .map_err(|e| format!("the search index folder: {e}"))?;
    if index {
        println!("search index removed: the next start rebuilds it from the store");
    }
    Ok(())
}

fn restore(from: &std::path::Path, config: &Config, force: bool) -> Result<(), String> {
    if config.storage.backend == crate::core::config::StorageBackend::Postgres {
        return Err(
            "this server keeps its data in PostgreSQL ([storage] backend = \"postgres\"): \
             restore the database with PostgreSQL's own tools (pg_restore, or a base backup \
             with its WAL), and the data dir's master.key from your copy \
             (docs/src/scale-out.md, \"Backups\")"
                .into(),
        );
    }
    let restored = backup::restore::<crate::store::EmbeddedFile>(from, &config.data_dir, force)
        .map_err(|e| e.to_string())?;
    let manifest = &restored.manifest;
    println!(
        "Restored the backup of {} (intake {}, change sequence {}) into {}.",
        manifest.created_at,
        manifest.intake_version,
        manifest.last_change_seq,
        config.data_dir.display()
    );
    println!("The search index is rebuilt when the server starts.");
    match &restored.later_erasures {
        Ok(erasures) if erasures.is_empty() => {}
        Ok(erasures) => {
            eprintln!(
                "warning: the replaced data made {} erasure(s) after this backup was taken; the \
                 restored data holds their records again. Make each again with the same query \
                 (docs/src/erasure.md, \"Backups\"):",
                erasures.len()
            );
            for row in erasures {
                eprintln!(
                    "  {} endpoint {} {}, made {}, {} record(s) erased, query hash {}",
                    crate::domain::erasures::erasure_id(row.id),
                    row.partition.endpoint(),
                    row.partition.environment().as_str(),
                    row.created_at.to_rfc3339(),
                    row.erased,
                    row.query_hash
                );
            }
        }
        Err(err) => eprintln!(
            "warning: the replaced store could not be read ({err}), so erasures it made after \
             this backup cannot be listed: make any again whose records the backup holds"
        ),
    }
    Ok(())
}

/// `intake migrate`: copies the data dir's store into PostgreSQL, with progress on stderr.
fn migrate(
    data_dir: &std::path::Path,
    url: String,
    tls: &str,
    ca_file: Option<PathBuf>,
) -> Result<(), String> {
    use crate::core::config::{PostgresConfig, PostgresTls, Secret};
    let tls = match tls {
        "verify-full" => PostgresTls::VerifyFull,
        "disable" => PostgresTls::Disable,
        other => return Err(format!("--tls {other:?}: use verify-full or disable")),
    };
    let config = PostgresConfig {
        url: Secret::new(url),
        tls,
        ca_file,
        ..PostgresConfig::default()
    };
    let from = crate::store::open_embedded_export(&data_dir.join(crate::core::config::STORE_FILE))
        .map_err(|e| e.to_string())?;
    let sealer = crate::core::crypto::Sealer::load_existing(data_dir).map_err(|e| e.to_string())?;
    let to = crate::store::open_postgres(&config).map_err(|e| e.to_string())?;
    let started = std::time::Instant::now();
    let copied = crate::domain::migrate::copy(from.as_ref(), to.as_ref(), &sealer, &mut |counts| {
        let rows: u64 = counts.values().sum();
        eprintln!(
            "intake: copied {rows} rows ({} records) in {:.1} s",
            counts
                .get(&crate::store::transfer::Kind::Records)
                .copied()
                .unwrap_or(0),
            started.elapsed().as_secs_f64()
        );
    })
    .map_err(|e| e.to_string())?;
    println!("Copied and verified:");
    for line in crate::domain::migrate::describe(&copied) {
        println!("  {line}");
    }
    println!(
        "Every node serving this database needs this install's key: copy {} into each node's \
         data dir, and set [storage] backend = \"postgres\" with [storage.postgres] url.",
        data_dir
            .join(crate::core::crypto::MASTER_KEY_FILE)
            .display()
    );
    Ok(())
}

fn init(config: &Config, owner_email: &str, json: bool) -> Result<(), String> {
    let (store, _sealer) = server::open_data_dir(config).map_err(|e| e.to_string())?;
    let provisioned = accounts::provision_owner(store.as_ref(), &SystemClock, owner_email)
        .map_err(|e| e.to_string())?;
    if json {
        let line = serde_json::to_string(&provisioned).map_err(|e| e.to_string())?;
        println!("{line}");
    } else {
        println!("Owner account created for {}.", provisioned.owner_email);
        println!("Password: {}", provisioned.password);
        println!("API token: {}", provisioned.token);
        println!("Both are shown only now; keep them somewhere safe.");
    }
    Ok(())
}

/// `intake account reset-password EMAIL`: prints a reset link made in the data dir's store.
fn reset_password(config: &Config, email: &str) -> Result<(), String> {
    let (store, _sealer) = server::open_data_dir(config).map_err(|e| e.to_string())?;
    let handles = Handles::new(store, Arc::new(SystemClock), Arc::new(Unattended));
    let link =
        password_reset::issue(&handles, email, &config.public_url()).map_err(|e| e.to_string())?;
    println!("{link}");
    eprintln!(
        "Open this link to choose a new password for {email}: it works once, for 30 minutes."
    );
    Ok(())
}

fn endpoint(command: EndpointCommand) -> Result<(), String> {
    let (remote, method, path, body) = match command {
        EndpointCommand::Create {
            name,
            description,
            required_fields,
            remote,
        } => {
            let body = serde_json::json!({
                "name": name,
                "description": description,
                "required_fields": required_fields,
            });
            (remote, "POST", "/api/v1/manage/endpoints", Some(body))
        }
        EndpointCommand::List { remote } => (remote, "GET", "/api/v1/manage/endpoints", None),
    };
    let text = call_management(&remote, method, path, body)?;
    println!("{text}");
    Ok(())
}

/// Calls the management API and returns the response body, or the server's error message.
fn call_management(
    remote: &RemoteArgs,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
) -> Result<String, String> {
    let mut response = send(
        remote,
        method,
        path,
        body,
        Some(std::time::Duration::from_secs(30)),
    )?;
    if !response.status().is_success() {
        return Err(error_answer(&mut response));
    }
    let text = response
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("cannot read the answer: {e}"))?;
    let pretty = serde_json::from_str::<serde_json::Value>(&text)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or(text);
    Ok(pretty)
}

/// One management request with the account token; `timeout` bounds the whole exchange.
fn send(
    remote: &RemoteArgs,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
    timeout: Option<std::time::Duration>,
) -> Result<ureq::http::Response<ureq::Body>, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(timeout)
        .build()
        .into();
    let url = format!("{}{path}", remote.server.trim_end_matches('/'));
    let auth = format!("Bearer {}", remote.token);
    let response = match (method, body) {
        ("POST", Some(body)) => agent
            .post(&url)
            .header("Authorization", &auth)
            .send_json(body),
        ("POST", None) => agent.post(&url).header("Authorization", &auth).send_empty(),
        _ => agent.get(&url).header("Authorization", &auth).call(),
    };
    response.map_err(|e| format!("cannot reach {}: {e}", remote.server))
}

/// The error message of a refused call: the server's error code and message, with the request
/// id its log names; or the body as it came when it is no error body.
fn error_answer(response: &mut ureq::http::Response<ureq::Body>) -> String {
    let status = response.status();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    let body = serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default();
    let error = &body["error"];
    match (error["code"].as_str(), error["message"].as_str()) {
        (Some(code), Some(message)) => {
            let request = error["request_id"]
                .as_str()
                .map(|id| format!(" (request {id})"))
                .unwrap_or_default();
            format!("the server answered {status}: {code}: {message}{request}")
        }
        _ => format!("the server answered {status}: {}", text.trim_end()),
    }
}
