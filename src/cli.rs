//! The command line: `serve`, `init` and the operator's `endpoint` commands.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};

use crate::clock::SystemClock;
use crate::config::{Config, TlsConfig};
use crate::{accounts, server};

#[derive(Parser, Debug)]
#[command(
    name = "intake",
    version,
    about = "A self-hosted data-intake API in one binary."
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
    };
    match result {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("intake: {message}");
            1
        }
    }
}

/// `RUST_LOG` sets the level (default `info`). Colours only on a terminal: stripping them from
/// every line costs measurable CPU under load when stderr is a file or a pipe.
fn init_logging() {
    use std::io::IsTerminal;
    let style = if std::io::stderr().is_terminal() {
        env_logger::WriteStyle::Auto
    } else {
        env_logger::WriteStyle::Never
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .write_style(style)
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(async {
        let running = server::start(config, Arc::new(SystemClock))
            .await
            .map_err(|e| e.to_string())?;
        wait_for_stop(&running).await;
        running.shutdown().await;
        Ok(())
    })
}

/// Resolves on SIGTERM or Ctrl-C; reloads the TLS certificate on each SIGHUP meanwhile.
async fn wait_for_stop(running: &server::RunningServer) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (term, hup) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        );
        let (mut term, mut hup) = match (term, hup) {
            (Ok(term), Ok(hup)) => (term, hup),
            (Err(err), _) | (_, Err(err)) => {
                log::warn!(
                    "cannot listen for SIGTERM or SIGHUP ({err}); only Ctrl-C stops the server"
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
                    if let Err(err) = running.reload_tls() {
                        log::error!("TLS certificate not reloaded, still serving the previous one: {err}");
                    }
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = running;
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn init(config: &Config, owner_email: &str, json: bool) -> Result<(), String> {
    let (store, _sealer) = server::open_data_dir(config).map_err(|e| e.to_string())?;
    let provisioned =
        accounts::provision_owner(&store, &SystemClock, owner_email).map_err(|e| e.to_string())?;
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
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(30)))
        .build()
        .into();
    let url = format!("{}{path}", remote.server.trim_end_matches('/'));
    let auth = format!("Bearer {}", remote.token);
    let response = match (method, body) {
        ("POST", Some(body)) => agent
            .post(&url)
            .header("Authorization", &auth)
            .send_json(body),
        _ => agent.get(&url).header("Authorization", &auth).call(),
    };
    let mut response = response.map_err(|e| format!("cannot reach {}: {e}", remote.server))?;
    let status = response.status();
    let text = response
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("cannot read the answer: {e}"))?;
    if status.is_success() {
        let pretty = serde_json::from_str::<serde_json::Value>(&text)
            .and_then(|v| serde_json::to_string_pretty(&v))
            .unwrap_or(text);
        Ok(pretty)
    } else {
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_string))
            .unwrap_or(text);
        Err(format!("the server answered {status}: {message}"))
    }
}
