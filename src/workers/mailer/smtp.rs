//! Talking to the SMTP server: the transport built from `[smtp]`, the message built from an
//! outbox row, and the verdict on an attempt.
//!
//! lettre's synchronous transport runs on the mail thread, one connection per message: the
//! volume is a handful of messages (invitations, deployments), so a connection pool would only
//! hold sockets open. TLS is rustls with the webpki root certificates.

use std::time::{Duration, UNIX_EPOCH};

use lettre::message::Mailbox;
use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{Message, SmtpTransport, Transport};

use crate::core::clock::Timestamp;
use crate::core::config::{SmtpConfig, SmtpSecurity};
use crate::store::MailRow;

/// What one attempt to send a message came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Sent,
    /// Worth another try later: no connection, a timeout, a 4xx answer.
    Transient(String),
    /// The server refused it (5xx), or the message cannot be built: retrying cannot help.
    Permanent(String),
}

/// Sends messages through the configured server.
pub struct Sender {
    /// A configuration that cannot make a transport (the TLS setup failed) is reported on
    /// every attempt rather than stopping the server.
    transport: Result<SmtpTransport, String>,
    from: Mailbox,
    describe: String,
}

impl Sender {
    pub fn new(config: &SmtpConfig) -> Sender {
        let transport = transport(config).map_err(|e| format!("cannot set up SMTP: {e}"));
        if let Err(err) = &transport {
            log::error!("mail: {err}");
        }
        Sender {
            transport,
            from: config.from.clone(),
            describe: format!(
                "{}:{} ({}) as {}",
                config.host,
                config.port(),
                config.security.as_str(),
                config.from
            ),
        }
    }

    /// Host, port, security and sender, for the log (never the credentials).
    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// One attempt: connect, send, disconnect. `now` stamps the `Date` header.
    pub fn send(&self, row: &MailRow, now: Timestamp) -> Outcome {
        let transport = match &self.transport {
            Ok(transport) => transport,
            Err(err) => return Outcome::Transient(err.clone()),
        };
        let message = match message(&self.from, row, now) {
            Ok(message) => message,
            Err(err) => return Outcome::Permanent(err),
        };
        match transport.send(&message) {
            Ok(_) => Outcome::Sent,
            Err(err) => verdict(&err),
        }
    }
}

fn transport(config: &SmtpConfig) -> Result<SmtpTransport, lettre::transport::smtp::Error> {
    let tls = match config.security {
        SmtpSecurity::Starttls => Tls::Required(TlsParameters::new(config.host.clone())?),
        SmtpSecurity::Tls => Tls::Wrapper(TlsParameters::new(config.host.clone())?),
        SmtpSecurity::None => Tls::None,
    };
    let mut builder = SmtpTransport::builder_dangerous(config.host.as_str())
        .port(config.port())
        .tls(tls)
        .timeout(Some(config.timeout));
    if let (Some(username), Some(password)) = (&config.username, &config.password) {
        builder = builder.credentials(Credentials::new(
            username.clone(),
            password.expose().to_string(),
        ));
    }
    Ok(builder.build())
}

/// Plain-text UTF-8 message with `From`, `To`, `Subject`, `Date` and a generated
/// `Message-ID`; lettre picks a transfer encoding that keeps it 7-bit clean. The body goes
/// without its final line break: the CRLF that ends DATA ends the last line, and lettre
/// always sends one.
fn message(from: &Mailbox, row: &MailRow, now: Timestamp) -> Result<Message, String> {
    let to: Mailbox = row
        .to
        .parse()
        .map_err(|_| format!("`{}` is not a valid e-mail address", row.to))?;
    let micros = u64::try_from(now.as_micros()).unwrap_or(0);
    Message::builder()
        .from(from.clone())
        .to(to)
        .subject(row.subject.as_str())
        .date(UNIX_EPOCH + Duration::from_micros(micros))
        .message_id(None)
        .header(ContentType::TEXT_PLAIN)
        .body(row.body.trim_end_matches(['\r', '\n']).to_string())
        .map_err(|e| format!("cannot build the message: {e}"))
}

/// 5xx is final; everything else (4xx, no connection, timeouts, TLS) may pass. The text is
/// the server's answer (`550 5.1.1 mailbox unavailable`) or the connection error.
fn verdict(err: &lettre::transport::smtp::Error) -> Outcome {
    let Some(code) = err.status() else {
        return Outcome::Transient(err.to_string());
    };
    let answer = match std::error::Error::source(err) {
        Some(message) => format!("{code} {message}"),
        None => code.to_string(),
    };
    if err.is_permanent() {
        Outcome::Permanent(answer)
    } else {
        Outcome::Transient(answer)
    }
}
