//! The mail worker: a thread that sends the outbox's due messages over SMTP (`smtp`), applies
//! the retry schedule of `domain::mail` and purges old messages (`worker`), and its handle.

pub mod smtp;
pub mod worker;

use std::sync::Arc;

use crate::core::clock::SharedClock;
use crate::core::config::SmtpConfig;
use crate::store::Store;

/// Handle of the mail worker; cheap to clone.
#[derive(Clone)]
pub struct Mailer {
    smtp_configured: bool,
    signal: Arc<worker::Signal>,
}

/// Joins the mail thread after [`Mailer::shutdown`].
pub struct MailThread(std::thread::JoinHandle<()>);

impl MailThread {
    pub fn join(self) {
        if self.0.join().is_err() {
            log::error!("the mail thread panicked");
        }
    }
}

impl Mailer {
    /// Starts the worker thread. With `smtp` absent it sends nothing and only notes, once per
    /// message, that it is waiting for `[smtp]`.
    pub fn start(
        store: Arc<dyn Store>,
        smtp: Option<SmtpConfig>,
        clock: SharedClock,
    ) -> std::io::Result<(Mailer, MailThread)> {
        let signal = Arc::new(worker::Signal::default());
        let smtp_configured = smtp.is_some();
        let sender = smtp.as_ref().map(smtp::Sender::new);
        match &sender {
            Some(sender) => log::info!("mail: sending through {}", sender.describe()),
            None => log::info!("mail: no [smtp] configured; e-mails stay queued in the outbox"),
        }
        let handle = std::thread::Builder::new().name("mail".into()).spawn({
            let signal = signal.clone();
            move || worker::run(store.as_ref(), clock.as_ref(), sender.as_ref(), &signal)
        })?;
        Ok((
            Mailer {
                smtp_configured,
                signal,
            },
            MailThread(handle),
        ))
    }

    /// Tells the worker that messages were queued; the after-commit path calls it.
    pub fn wake(&self) {
        self.signal.wake();
    }

    /// Asks the worker to stop after the message it is sending, if any; join its
    /// [`MailThread`] to wait. Unsent messages stay queued for the next start.
    pub fn shutdown(&self) {
        self.signal.stop();
    }

    pub fn smtp_configured(&self) -> bool {
        self.smtp_configured
    }
}
