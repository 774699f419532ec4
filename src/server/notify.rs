//! systemd readiness notification (`Type=notify`): a datagram to `$NOTIFY_SOCKET`.
//!
//! A few lines instead of a crate: the protocol is one `KEY=VALUE` datagram on a unix socket,
//! whose path starts with `@` for the abstract namespace. Outside systemd the variable is
//! unset and every call does nothing.

/// The server listens and serves: systemd considers the unit started.
pub const READY: &str = "READY=1";
/// Graceful shutdown has begun.
pub const STOPPING: &str = "STOPPING=1";
/// A reload (SIGHUP: the TLS certificate) is under way; `READY` ends it.
pub const RELOADING: &str = "RELOADING=1";

/// Sends `state` to the service manager, if there is one. A failure is logged and otherwise
/// ignored: systemd's own timeout reports a unit that never became ready.
pub fn notify(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(err) = send(&socket, state) {
        log::warn!("cannot notify systemd ({state}) at {socket:?}: {err}");
    }
}

#[cfg(unix)]
fn send(socket: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let bytes = socket.as_encoded_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => abstract_addr(name)?,
        None => SocketAddr::from_pathname(socket)?,
    };
    let sender = UnixDatagram::unbound()?;
    sender.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(target_os = "linux")]
fn abstract_addr(name: &[u8]) -> std::io::Result<std::os::unix::net::SocketAddr> {
    <std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(name)
}

#[cfg(all(unix, not(target_os = "linux")))]
fn abstract_addr(_name: &[u8]) -> std::io::Result<std::os::unix::net::SocketAddr> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "abstract unix sockets exist only on Linux",
    ))
}

#[cfg(not(unix))]
fn send(_socket: &std::ffi::OsStr, _state: &str) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "systemd notification needs a unix socket",
    ))
}
