//! `[smtp]`: the server outgoing e-mail goes through.

use std::time::Duration;

use lettre::message::Mailbox;
use serde::{Deserialize, Deserializer, Serialize};

use super::values::{Secret, de_duration, ser_display, ser_duration};

/// `[smtp]`: where and how outgoing e-mail is delivered (see `mail`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SmtpConfig {
    pub host: String,
    /// Absent: the usual port of `security` (see [`SmtpConfig::port`]).
    #[serde(default)]
    pub port: Option<u16>,
    #[serde(default)]
    pub security: SmtpSecurity,
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password: Option<Secret>,
    /// The `From` of every message: `addr@example.com` or `Name <addr@example.com>`.
    #[serde(deserialize_with = "de_mailbox", serialize_with = "ser_display")]
    pub from: Mailbox,
    /// Limit of connecting and of each SMTP command.
    #[serde(
        default = "default_smtp_timeout",
        deserialize_with = "de_duration",
        serialize_with = "ser_duration"
    )]
    pub timeout: Duration,
}

impl SmtpConfig {
    /// The configured port, else the usual one of the security mode.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(match self.security {
            SmtpSecurity::Starttls => 587,
            SmtpSecurity::Tls => 465,
            SmtpSecurity::None => 25,
        })
    }

    pub(super) fn validate(&self) -> Result<(), String> {
        if self.host.is_empty() || self.host.chars().any(char::is_whitespace) {
            return Err("smtp.host must be a host name or IP address".into());
        }
        if self.port == Some(0) {
            return Err("smtp.port must be from 1 to 65535".into());
        }
        if self.username.is_some() != self.password.is_some() {
            return Err("smtp.username and smtp.password go together: set both or neither".into());
        }
        if self.timeout.is_zero() {
            return Err("smtp.timeout must be more than 0".into());
        }
        Ok(())
    }
}

fn default_smtp_timeout() -> Duration {
    Duration::from_secs(30)
}

/// How the connection to the SMTP server is protected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SmtpSecurity {
    /// Plain connection upgraded with STARTTLS; refused if the server cannot upgrade.
    #[default]
    Starttls,
    /// TLS from the first byte (SMTPS).
    Tls,
    /// No encryption: only for a relay on the same host or a trusted network.
    None,
}

impl SmtpSecurity {
    pub fn as_str(self) -> &'static str {
        match self {
            SmtpSecurity::Starttls => "starttls",
            SmtpSecurity::Tls => "tls",
            SmtpSecurity::None => "none",
        }
    }
}

fn de_mailbox<'de, D: Deserializer<'de>>(d: D) -> Result<Mailbox, D::Error> {
    let text = String::deserialize(d)?;
    text.parse().map_err(|_| {
        serde::de::Error::custom(format!(
            "smtp.from {text:?} is not an e-mail address \
             (write \"intake@example.com\" or \"Intake <intake@example.com>\")"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::Config;

    #[test]
    fn smtp_is_optional_and_has_defaults() {
        assert!(Config::parse("").unwrap().smtp.is_none());
        let c =
            Config::parse("[smtp]\nhost = \"mail.example.com\"\nfrom = \"intake@example.com\"\n")
                .unwrap();
        let smtp = c.smtp.unwrap();
        assert_eq!(smtp.host, "mail.example.com");
        assert_eq!(smtp.security, SmtpSecurity::Starttls);
        assert_eq!(smtp.port(), 587);
        assert_eq!(smtp.timeout, Duration::from_secs(30));
        assert!(smtp.username.is_none() && smtp.password.is_none());
        assert_eq!(smtp.from.email.to_string(), "intake@example.com");
    }

    #[test]
    fn smtp_reads_every_key_and_ports_follow_security() {
        let base = "[smtp]\nhost = \"h\"\nfrom = \"Intake <i@example.com>\"\n";
        let port = |extra: &str| {
            Config::parse(&format!("{base}{extra}"))
                .unwrap()
                .smtp
                .unwrap()
                .port()
        };
        assert_eq!(port("security = \"tls\""), 465);
        assert_eq!(port("security = \"none\""), 25);
        assert_eq!(port("security = \"none\"\nport = 2525"), 2525);
        let c = Config::parse(&format!(
            "{base}security = \"tls\"\nport = 1465\nusername = \"u\"\npassword = \"hunter2\"\n\
             timeout = \"5s\"\n"
        ))
        .unwrap();
        let smtp = c.smtp.as_ref().unwrap();
        assert_eq!(smtp.username.as_deref(), Some("u"));
        assert_eq!(smtp.password.as_ref().map(Secret::expose), Some("hunter2"));
        assert_eq!(smtp.timeout, Duration::from_secs(5));
        assert_eq!(smtp.from.name.as_deref(), Some("Intake"));
        let debug = format!("{c:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("***"), "{debug}");
    }

    #[test]
    fn smtp_errors_name_the_key() {
        let base = "[smtp]\nhost = \"h\"\n";
        let err = |extra: &str| Config::parse(&format!("{base}{extra}")).unwrap_err();
        let e = err("");
        assert!(e.contains("from"), "{e}");
        let e = err("from = \"not an address\"");
        assert!(e.contains("smtp.from"), "{e}");
        let e = err("from = \"a@example.com\"\nsecurity = \"ssl\"");
        assert!(e.contains("security"), "{e}");
        let e = err("from = \"a@example.com\"\nusername = \"u\"");
        assert!(e.contains("smtp.password"), "{e}");
        let e = err("from = \"a@example.com\"\npassword = \"p\"");
        assert!(e.contains("smtp.username"), "{e}");
        let e = err("from = \"a@example.com\"\nuser = \"u\"");
        assert!(e.contains("user"), "{e}");
        let e = err("from = \"a@example.com\"\ntimeout = \"0s\"");
        assert!(e.contains("smtp.timeout"), "{e}");
        let e = err("from = \"a@example.com\"\nport = 0");
        assert!(e.contains("smtp.port"), "{e}");
        let e = Config::parse("[smtp]\nfrom = \"a@example.com\"").unwrap_err();
        assert!(e.contains("host"), "{e}");
        let e = Config::parse("[smtp]\nhost = \"\"\nfrom = \"a@example.com\"").unwrap_err();
        assert!(e.contains("smtp.host"), "{e}");
    }
}
