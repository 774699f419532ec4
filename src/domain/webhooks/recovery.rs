//! Bulk recovery: a fresh attempt for every given-up or skipped delivery of one subscription
//! (`POST …/subscriptions/{id}/recover`), or of an environment's caller webhooks (`POST
//! …/webhooks/{environment}/caller-recovery`), made in a window.
//!
//! Starting one only records it (a [`RecoveryRow`] in the webhook settings, whose commit wakes
//! the dispatcher's recovery walk); [`advance`] then walks the partition's deliveries in id
//! order, which is the order they were made, [`CHUNK`] at a time, each chunk in one
//! transaction that re-arms the matching deliveries (a fresh attempt budget, like a manual
//! redelivery) and notes how far it got, so a restart goes on where it stopped. A subscription
//! with a rate limit gets its recovered deliveries due `1/rate_limit` seconds apart, in
//! created order; the dispatcher keeps the same pace. The window ends at `until`, or when none
//! is given at the time of the request, and never later: deliveries made afterwards are not
//! taken.
//!
//! A recovery is `running` while it walks, `scheduled` once every delivery it takes is due
//! until the last of them (the latest due) has been attempted, and `finished` from then
//! ([`RecoveryState`]). One at a time per subscription (and per environment's caller
//! webhooks): another while one is running or scheduled answers 409. Once one has finished,
//! another over an overlapping window is refused for the recovery cooldown (`[webhooks]
//! recovery_cooldown`, by the server's clock) with 429 `recovery_cooldown`, so that repeated
//! calls cannot send the same deliveries again and again.

use std::time::Duration;

use serde::Deserialize;

use crate::core::clock::{MICROS_PER_SECOND, Timestamp, parse_date_or_rfc3339};
use crate::domain::audit;
use crate::domain::error::{Error, Result};
use crate::domain::handles::Handles;
use crate::domain::webhooks::log::{can_redeliver, rearm};
use crate::domain::webhooks::subscriptions::{
    RecoveryState, RecoveryTarget as Target, RecoveryView, Subscriptions, Which,
    recovery_view as view, subscription_id,
};
use crate::store::{
    AccountRow, DeliveryRow, Environment, Partition, RearmedDelivery, RecoveryRow, WebhookKind,
    WebhookSettingsRow,
};

/// Deliveries the walk reads in one transaction.
pub const CHUNK: usize = 500;

/// Body of the recovery requests.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryRequest {
    /// RFC 3339 (or a date, midnight UTC): deliveries made at or after it.
    pub since: String,
    /// RFC 3339 (or a date): deliveries made before it; default (and at most) the time of
    /// the request.
    pub until: Option<String>,
}

fn time_param(name: &'static str, text: &str) -> Result<Timestamp> {
    parse_date_or_rfc3339(text).ok_or_else(|| Error::InvalidParameter {
        name,
        reason: "it must be an RFC 3339 time such as 2026-11-22T08:00:00Z, or a date".into(),
    })
}

/// The recovery `request` asks for, made at `now`: its window ends at `until`, or now when
/// `until` is later or not given (no delivery made after the request is taken).
fn new_recovery(request: &RecoveryRequest, now: Timestamp) -> Result<RecoveryRow> {
    let since = time_param("since", &request.since)?;
    let until = match &request.until {
        Some(text) => time_param("until", text)?.min(now),
        None => now,
    };
    if until <= since {
        return Err(Error::InvalidParameter {
            name: "until",
            reason: "it must be after `since`, and `since` before now".into(),
        });
    }
    Ok(RecoveryRow {
        since,
        until,
        requested_at: now,
        position: 0,
        scheduled: 0,
        next_due: now,
        walked_at: None,
        last: None,
    })
}

/// The recovery slot of `target` in `settings`.
fn slot(settings: &mut WebhookSettingsRow, target: Target) -> Option<&mut Option<RecoveryRow>> {
    match target {
        Target::Subscription(id) => settings.subscription_mut(id).map(|s| &mut s.recovery),
        Target::Callers => Some(&mut settings.caller_recovery),
    }
}

/// Starts a recovery of `target` in one environment of an endpoint the caller owns.
pub fn start(
    service: &Subscriptions<'_>,
    owner: &AccountRow,
    slug: &str,
    environment: Environment,
    which: Option<Which>,
    request: RecoveryRequest,
) -> Result<RecoveryView> {
    let handles = service.handles;
    let endpoint = service.endpoints.owned_row(owner, slug)?;
    let partition = Partition::new(endpoint.id, environment);
    let now = handles.now();
    let recovery = new_recovery(&request, now)?;
    handles.write(|tx| {
        let mut settings = tx.webhook_settings(partition)?.unwrap_or_default();
        let target = begin(
            &mut settings,
            which,
            recovery.clone(),
            service.recovery_cooldown,
            |previous| RecoveryState::of(&*tx, previous),
        )?;
        tx.put_webhook_settings(partition, &settings)?;
        let details = serde_json::json!({
            "environment": environment,
            "subscription": match target {
                Target::Subscription(id) => Some(subscription_id(id)),
                Target::Callers => None,
            },
            "since": recovery.since.to_rfc3339(),
            "until": recovery.until.to_rfc3339(),
        });
        audit::record(
            tx,
            now,
            endpoint.id,
            owner,
            "webhook.recovery_started",
            details,
        )?;
        view(&*tx, environment, target, &recovery)
    })
}

/// Records `recovery` in `settings` for the subscription `which` names (the caller webhooks'
/// when `None`), unless its previous one (whose state `state_of` reads) is running or
/// scheduled, or finished less than `cooldown` before `recovery` was asked for with a window
/// overlapping this one's.
fn begin(
    settings: &mut WebhookSettingsRow,
    which: Option<Which>,
    recovery: RecoveryRow,
    cooldown: Duration,
    state_of: impl FnOnce(&RecoveryRow) -> Result<RecoveryState>,
) -> Result<Target> {
    let target = match which {
        Some(which) => {
            let row = which.find(settings).ok_or_else(|| which.missing())?;
            Target::Subscription(row.id)
        }
        None => Target::Callers,
    };
    let slot =
        slot(settings, target).ok_or_else(|| Error::Internal("the subscription is gone".into()))?;
    if let Some(previous) = slot.as_ref() {
        match state_of(previous)? {
            RecoveryState::Running | RecoveryState::Scheduled => {
                return Err(Error::Conflict(format!(
                    "a recovery of these deliveries is under way ({} scheduled, not all \
                     attempted yet); one at a time",
                    previous.scheduled
                )));
            }
            RecoveryState::Finished(at) => {
                let cooled_at = at.plus(cooldown);
                let overlaps = previous.since < recovery.until && recovery.since < previous.until;
                if overlaps && recovery.requested_at < cooled_at {
                    let wait = cooled_at.as_micros() - recovery.requested_at.as_micros();
                    let micros_per_second = MICROS_PER_SECOND.unsigned_abs();
                    return Err(Error::RecoveryCooldown {
                        retry_after_secs: wait.unsigned_abs().div_ceil(micros_per_second),
                    });
                }
            }
        }
    }
    *slot = Some(recovery);
    Ok(target)
}

/// The latest recovery of the environment's caller webhooks.
pub fn caller_recovery(
    service: &Subscriptions<'_>,
    owner: &AccountRow,
    slug: &str,
    environment: Environment,
) -> Result<Option<RecoveryView>> {
    let endpoint = service.endpoints.owned_row(owner, slug)?;
    let snapshot = service.handles.store.read()?;
    let settings = snapshot
        .webhook_settings(Partition::new(endpoint.id, environment))?
        .unwrap_or_default();
    settings
        .caller_recovery
        .as_ref()
        .map(|row| view(snapshot.as_ref(), environment, Target::Callers, row))
        .transpose()
}

/// Whether `row` is one `recovery` of `target` takes.
fn takes(row: &DeliveryRow, target: Target, recovery: &RecoveryRow) -> bool {
    let ours = match target {
        Target::Subscription(id) => row.owner_subscription() == Some(id),
        Target::Callers => row.kind == WebhookKind::Caller,
    };
    ours && can_redeliver(row)
        && row.created_at >= recovery.since
        && row.created_at < recovery.until
}

/// Walks one chunk of every running recovery; returns whether any is still running.
pub fn advance(handles: &Handles) -> Result<bool> {
    let running = handles.store.read()?.recovering_settings()?;
    let mut more = false;
    for (partition, _) in running {
        more |= advance_partition(handles, partition)?;
    }
    Ok(more)
}

/// One chunk of each running recovery of `partition`, in one transaction.
fn advance_partition(handles: &Handles, partition: Partition) -> Result<bool> {
    let now = handles.now();
    handles.write(|tx| {
        let Some(mut settings) = tx.webhook_settings(partition)? else {
            return Ok(false);
        };
        let mut targets: Vec<(Target, Option<u32>)> = settings
            .subscriptions
            .iter()
            .map(|s| (Target::Subscription(s.id), s.rate_limit))
            .collect();
        targets.push((Target::Callers, None));
        for (target, rate_limit) in targets {
            let Some(Some(recovery)) = slot(&mut settings, target) else {
                continue;
            };
            if !recovery.walking() {
                continue;
            }
            let page = tx.deliveries_after(partition, recovery.position, CHUNK)?;
            let interval = rate_limit.map_or(0, |rate| MICROS_PER_SECOND / i64::from(rate.max(1)));
            for mut row in page.iter().cloned() {
                recovery.position = row.id;
                if takes(&row, target, recovery) {
                    let due = recovery.next_due.max(now);
                    rearm(tx, &mut row, due)?;
                    recovery.next_due = Timestamp(due.as_micros() + interval);
                    recovery.scheduled += 1;
                    recovery.last = Some(RearmedDelivery {
                        id: row.id,
                        attempts: row.attempts,
                    });
                }
            }
            if page.len() < CHUNK {
                recovery.walked_at = Some(now);
            }
        }
        let more = settings.recovering();
        tx.put_webhook_settings(partition, &settings)?;
        Ok(more)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::SubscriptionRow;

    const NOW: Timestamp = Timestamp(1_795_000_000_000_000);
    const COOLDOWN: Duration = Duration::from_secs(600);

    fn request(since: &str, until: Option<&str>) -> RecoveryRequest {
        RecoveryRequest {
            since: since.into(),
            until: until.map(Into::into),
        }
    }

    /// The state a recovery row shows without a store: running while it walks, else
    /// `finished` (`scheduled` is what `walked` says while the last delivery waits).
    fn walked(scheduled: bool) -> impl FnOnce(&RecoveryRow) -> Result<RecoveryState> {
        move |row| {
            Ok(match row.walked_at {
                None => RecoveryState::Running,
                Some(_) if scheduled => RecoveryState::Scheduled,
                Some(at) => RecoveryState::Finished(at),
            })
        }
    }

    fn settings() -> WebhookSettingsRow {
        let mut settings = WebhookSettingsRow::default();
        settings.add(SubscriptionRow::new("https://hooks.example/in".into(), NOW));
        settings
    }

    fn end_walk(settings: &mut WebhookSettingsRow, at: Timestamp) {
        if let Some(r) = settings
            .subscription_mut(1)
            .and_then(|s| s.recovery.as_mut())
        {
            r.walked_at = Some(at);
        }
    }

    #[test]
    fn one_recovery_at_a_time_per_subscription_and_for_the_callers() {
        let mut settings = settings();
        let recovery = new_recovery(&request("2026-11-01", None), NOW).unwrap();
        assert_eq!(recovery.until, NOW);
        let first = Some(Which::Id(1));
        let begin = |settings: &mut WebhookSettingsRow, which, scheduled| {
            begin(
                settings,
                which,
                recovery.clone(),
                COOLDOWN,
                walked(scheduled),
            )
        };
        assert_eq!(
            begin(&mut settings, first, false).unwrap(),
            Target::Subscription(1)
        );
        assert!(matches!(
            begin(&mut settings, first, false),
            Err(Error::Conflict(_))
        ));
        // The callers' own recovery is another one; an unknown subscription is 404.
        assert_eq!(begin(&mut settings, None, false).unwrap(), Target::Callers);
        assert!(matches!(
            begin(&mut settings, Some(Which::Id(2)), false),
            Err(Error::NotFound(_))
        ));
        // Walked, but its last delivery not attempted yet: still one at a time.
        end_walk(&mut settings, NOW);
        assert!(matches!(
            begin(&mut settings, first, true),
            Err(Error::Conflict(_))
        ));
    }

    #[test]
    fn an_overlapping_window_waits_for_the_cooldown_after_the_last_one_finished() {
        let mut settings = settings();
        let first = Some(Which::Id(1));
        let window = new_recovery(&request("2026-11-01", None), NOW).unwrap();
        begin(&mut settings, first, window, COOLDOWN, walked(false)).unwrap();
        end_walk(&mut settings, NOW);
        let again_at = |secs: u64, since: &str, until: Option<&str>| {
            let later = NOW.plus(Duration::from_secs(secs));
            let recovery = new_recovery(&request(since, until), later).unwrap();
            begin(
                &mut settings.clone(),
                first,
                recovery,
                COOLDOWN,
                walked(false),
            )
        };
        // The same window, or one that overlaps it, within ten minutes: refused, saying when.
        for (secs, since, until, wait) in [
            (0, "2026-11-01", None, 600),
            (1, "2026-10-01", Some("2026-11-02"), 599),
            (599, "2026-11-05", None, 1),
        ] {
            match again_at(secs, since, until) {
                Err(Error::RecoveryCooldown { retry_after_secs }) => {
                    assert_eq!(retry_after_secs, wait, "{since} after {secs} s")
                }
                other => panic!("{since} after {secs} s: {other:?}"),
            }
        }
        // A window before the last one's, or the same after the cooldown: taken.
        assert!(again_at(1, "2026-10-01", Some("2026-11-01")).is_ok());
        assert!(again_at(600, "2026-11-01", None).is_ok());
        // No cooldown configured: at once.
        let recovery = new_recovery(&request("2026-11-01", None), NOW).unwrap();
        let none = Duration::ZERO;
        assert!(begin(&mut settings, first, recovery, none, walked(false)).is_ok());
    }

    #[test]
    fn the_window_is_checked_and_ends_at_the_request_at_the_latest() {
        assert!(new_recovery(&request("yesterday", None), NOW).is_err());
        assert!(new_recovery(&request("2026-11-02", Some("2026-11-01")), NOW).is_err());
        assert!(new_recovery(&request("2030-01-01", None), NOW).is_err());
        assert!(new_recovery(&request("2030-01-01", Some("2030-02-01")), NOW).is_err());
        let r = new_recovery(&request("2026-11-01", Some("2026-11-02T00:00:00Z")), NOW).unwrap();
        assert_eq!(r.until.as_micros() - r.since.as_micros(), 86_400_000_000);
        // An `until` in the future is the time of the request.
        let r = new_recovery(&request("2026-11-01", Some("2030-01-01")), NOW).unwrap();
        assert_eq!(r.until, NOW);
    }
}
