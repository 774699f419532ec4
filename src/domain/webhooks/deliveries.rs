//! Creating webhook deliveries: in the commit of the write that causes them.
//!
//! Every applied create, replace or delete produces one delivery per receiver: the endpoint
//! owner's webhook for that environment (when configured and enabled) and the caller's
//! (`X-Webhook-Callback` on the write). The delivery row holds the finished JSON body and the
//! target, and is listed in `DELIVERIES_DUE` at once; the dispatcher signs and sends it. Being
//! part of the write's commit, a delivery exists exactly when its write was acknowledged.
//!
//! The body follows the Standard Webhooks recommendation (`type`, `timestamp`, `data`):
//!
//! ```json
//! {"type": "record.created", "timestamp": "2026-11-22T08:00:00.000000Z",
//!  "data": {"id": "rec_…", "endpoint": "orders-…", "environment": "sandbox",
//!           "created_at": "…", "payload": {…}}}
//! ```
//!
//! `type` is `record.created`, `record.replaced` or `record.deleted`; `timestamp` is when the
//! write was received; `payload` is the record's payload after the write (absent for deletes).

use http::{HeaderMap, HeaderName, HeaderValue};
use redb::{ReadableTable, Table, WriteTransaction};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::core::clock::Timestamp;
use crate::core::crypto::Sealer;
use crate::core::ids::RecordId;
use crate::domain::error::{Error, Result};
use crate::store::{
    DELIVERIES, DELIVERIES_DUE, DeliveryRow, DeliveryState, Environment, META, OWNER_WEBHOOKS,
    OwnerWebhookRow, PARTITION_DELIVERIES, RECORD_DELIVERIES, StoreError, WebhookKind, from_json,
    read_counter, time_key, to_json, write_counter,
};

/// The callback URL header of a write.
pub const CALLBACK_HEADER: &str = "x-webhook-callback";
/// The auth value to send to the callback.
pub const AUTH_HEADER: &str = "x-webhook-auth";
/// The name of the header that carries the auth value (default `Authorization`).
pub const AUTH_NAME_HEADER: &str = "x-webhook-auth-header";
const DEFAULT_AUTH_NAME: &str = "authorization";
const MAX_URL_CHARS: usize = 2048;
const NEXT_DELIVERY_ID: &str = "next_delivery_id";

/// Headers about the connection or the message framing (RFC 9110 §7.6.1, `Expect`), and
/// every `Proxy-*` name besides: never an auth header.
const HOP_BY_HOP_HEADERS: [&str; 6] = [
    "connection",
    "keep-alive",
    "upgrade",
    "te",
    "trailer",
    "expect",
];
/// Headers intake sets itself on every delivery: a custom auth header may not replace them.
const RESERVED_HEADERS: [&str; 10] = [
    "host",
    "content-type",
    "content-length",
    "user-agent",
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "x-svc-record-id",
    "x-svc-delivery-attempt",
    "transfer-encoding",
];

/// The `DELIVERIES_DUE` table, open for writing.
pub type DueTable<'txn> = Table<'txn, (u64, u64), (bool, &'static str)>;

/// Lists `row` as due at `at`, with what the dispatcher needs to pass over it cheaply.
pub fn mark_due(due: &mut DueTable, row: &DeliveryRow, at: Timestamp) -> Result<(), StoreError> {
    let receiver = receiver_of(&row.url);
    due.insert(
        (time_key(at), row.id),
        (row.attempts > 0, receiver.as_str()),
    )?;
    Ok(())
}

/// The receiver a delivery counts against for concurrency: scheme, host and port.
pub fn receiver_of(url: &str) -> String {
    match url.parse::<http::Uri>() {
        Ok(uri) => format!(
            "{}://{}",
            uri.scheme_str().unwrap_or_default(),
            uri.authority().map(|a| a.as_str()).unwrap_or_default()
        )
        .to_ascii_lowercase(),
        Err(_) => url.to_string(),
    }
}

/// Attempts a delivery gets in all: the spec's production 6, sandbox 4.
pub fn max_attempts(environment: Environment) -> u32 {
    match environment {
        Environment::Production => 6,
        Environment::Sandbox => 4,
    }
}

/// What a write needs for its webhooks: the context of the event body, and the caller's
/// webhook if it asked for one.
#[derive(Debug, Clone)]
pub struct Hooks {
    pub endpoint_slug: String,
    pub environment: Environment,
    /// When the write was received: the event's `timestamp`.
    pub at: Timestamp,
    pub caller: Option<CallerWebhook>,
}

/// A webhook requested with the write's `X-Webhook-*` headers.
#[derive(Debug, Clone)]
pub struct CallerWebhook {
    pub url: String,
    pub auth_header: String,
    /// The `X-Webhook-Auth` value, sealed: it is a secret of the caller's.
    pub auth_value_sealed: Option<Vec<u8>>,
}

/// Reads the caller-webhook headers of a write: `X-Webhook-Callback` (an absolute http(s)
/// URL) asks for a webhook; `X-Webhook-Auth` and `X-Webhook-Auth-Header` only go with it.
pub fn caller_webhook(headers: &HeaderMap, sealer: &Sealer) -> Result<Option<CallerWebhook>> {
    let text = |name: &str| -> Result<Option<&str>> {
        headers
            .get(name)
            .map(|v| {
                v.to_str().map_err(|_| {
                    Error::InvalidWebhook(format!("the {name} header is not printable ASCII"))
                })
            })
            .transpose()
    };
    let url = text(CALLBACK_HEADER)?;
    let auth = text(AUTH_HEADER)?;
    let auth_name = text(AUTH_NAME_HEADER)?;
    let Some(url) = url else {
        if auth.is_some() || auth_name.is_some() {
            return Err(Error::InvalidWebhook(
                "X-Webhook-Auth and X-Webhook-Auth-Header need X-Webhook-Callback".into(),
            ));
        }
        return Ok(None);
    };
    let url = valid_url(url)?;
    let auth_header = valid_auth_header(auth_name.unwrap_or(DEFAULT_AUTH_NAME))?;
    let auth_value_sealed = auth
        .map(|value| {
            HeaderValue::from_str(value).map_err(|_| {
                Error::InvalidWebhook("X-Webhook-Auth is not a valid header value".into())
            })?;
            Ok::<_, Error>(sealer.seal(value.as_bytes()))
        })
        .transpose()?;
    Ok(Some(CallerWebhook {
        url,
        auth_header,
        auth_value_sealed,
    }))
}

/// An absolute `http` or `https` URL with a host, and no credentials in it: a URL is stored
/// and listed as it is, while an auth value is sealed and never shown again.
pub fn valid_url(text: &str) -> Result<String> {
    let text = text.trim();
    let uri: http::Uri = text
        .parse()
        .map_err(|_| Error::InvalidWebhook(format!("`{}` is not a URL", shorten(text))))?;
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        // Not echoed: the message would carry the password.
        return Err(Error::InvalidWebhook(
            "a webhook URL cannot carry credentials (`user:password@`): send them as the auth \
             value instead (the X-Webhook-Auth header of a caller webhook, `auth_value` of an \
             owner webhook), which is stored sealed"
                .into(),
        ));
    }
    let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
    let host_ok = uri.host().is_some_and(|h| !h.is_empty());
    if !scheme_ok || !host_ok || text.chars().count() > MAX_URL_CHARS {
        return Err(Error::InvalidWebhook(format!(
            "`{}` is not an absolute http(s) URL of at most {MAX_URL_CHARS} characters",
            shorten(text)
        )));
    }
    Ok(text.to_string())
}

/// A stored URL as views show it: any `user:password@` masked. New URLs cannot carry
/// credentials ([`valid_url`]); ones stored by earlier versions still can.
pub fn displayed_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// A header name the receiver's auth value can go in: a valid name intake does not set
/// itself, and no hop-by-hop or framing header (a proxy or the connection would act on it).
pub fn valid_auth_header(name: &str) -> Result<String> {
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| Error::InvalidWebhook(format!("`{}` is not a header name", shorten(name))))?;
    if RESERVED_HEADERS.contains(&name.as_str()) {
        return Err(Error::InvalidWebhook(format!(
            "the auth value cannot be sent as `{name}`: intake sets that header itself"
        )));
    }
    if HOP_BY_HOP_HEADERS.contains(&name.as_str()) || name.as_str().starts_with("proxy-") {
        return Err(Error::InvalidWebhook(format!(
            "the auth value cannot be sent as `{name}`: it is a hop-by-hop or framing header, \
             which proxies and the connection act on instead of passing it to the receiver"
        )));
    }
    Ok(name.as_str().to_string())
}

fn shorten(text: &str) -> String {
    text.chars().take(100).collect()
}

/// The kind of change a delivery reports.
#[derive(Debug, Clone, Copy)]
pub enum Event {
    Created,
    Replaced,
    Deleted,
}

impl Event {
    fn type_name(self) -> &'static str {
        match self {
            Event::Created => "record.created",
            Event::Replaced => "record.replaced",
            Event::Deleted => "record.deleted",
        }
    }
}

#[derive(Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    timestamp: String,
    data: BodyData<'a>,
}

#[derive(Serialize)]
struct BodyData<'a> {
    id: String,
    endpoint: &'a str,
    environment: Environment,
    created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a RawValue>,
}

/// The delivery tables of one write transaction (the ingest writer's batch).
pub struct DeliveryTables<'txn> {
    owner_webhooks: Table<'txn, u64, &'static [u8]>,
    deliveries: Table<'txn, u64, &'static [u8]>,
    due: DueTable<'txn>,
    by_partition: Table<'txn, (u64, u64), u128>,
    by_record: Table<'txn, (u64, u128, u64), ()>,
    last_id: u64,
    first_id: u64,
}

impl<'txn> DeliveryTables<'txn> {
    pub fn open(txn: &'txn WriteTransaction) -> Result<DeliveryTables<'txn>, StoreError> {
        let last_id = read_counter(&txn.open_table(META)?, NEXT_DELIVERY_ID)?;
        Ok(DeliveryTables {
            owner_webhooks: txn.open_table(OWNER_WEBHOOKS)?,
            deliveries: txn.open_table(DELIVERIES)?,
            due: txn.open_table(DELIVERIES_DUE)?,
            by_partition: txn.open_table(PARTITION_DELIVERIES)?,
            by_record: txn.open_table(RECORD_DELIVERIES)?,
            last_id,
            first_id: last_id,
        })
    }

    /// Whether this batch created deliveries (the dispatcher should look).
    pub fn created_any(&self) -> bool {
        self.last_id != self.first_id
    }

    /// Saves the delivery id counter; call before the commit.
    pub fn finish(self, txn: &WriteTransaction) -> Result<(), StoreError> {
        let (last, first) = (self.last_id, self.first_id);
        drop(self);
        if last != first {
            write_counter(txn, NEXT_DELIVERY_ID, last)?;
        }
        Ok(())
    }

    /// Creates the deliveries of one applied write. `payload` is the normalised payload after
    /// the write (`None` for a delete).
    pub fn create_for_write(
        &mut self,
        partition: u64,
        id: RecordId,
        event: Event,
        payload: Option<&[u8]>,
        hooks: &Hooks,
    ) -> Result<(), StoreError> {
        let owner: Option<OwnerWebhookRow> = match self.owner_webhooks.get(partition)? {
            Some(v) => Some(from_json(v.value())?),
            None => None,
        };
        let owner = owner.filter(|o| o.enabled);
        if owner.is_none() && hooks.caller.is_none() {
            return Ok(());
        }
        let body = event_body(id, event, payload, hooks)?;
        if let Some(owner) = owner {
            self.insert(
                partition,
                id,
                WebhookKind::Owner,
                owner.url,
                owner.auth_header,
                owner.auth_value_sealed,
                &body,
                hooks,
            )?;
        }
        if let Some(caller) = &hooks.caller {
            self.insert(
                partition,
                id,
                WebhookKind::Caller,
                caller.url.clone(),
                Some(caller.auth_header.clone()),
                caller.auth_value_sealed.clone(),
                &body,
                hooks,
            )?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn insert(
        &mut self,
        partition: u64,
        record_id: RecordId,
        kind: WebhookKind,
        url: String,
        auth_header: Option<String>,
        auth_value_sealed: Option<Vec<u8>>,
        body: &str,
        hooks: &Hooks,
    ) -> Result<(), StoreError> {
        self.last_id += 1;
        let row = DeliveryRow {
            id: self.last_id,
            partition,
            record_id: record_id.0,
            kind,
            url,
            auth_header,
            auth_value_sealed,
            body: body.to_string(),
            state: DeliveryState::Pending,
            attempts: 0,
            max_attempts: max_attempts(hooks.environment),
            next_attempt_at: Some(hooks.at),
            created_at: hooks.at,
            finished_at: None,
        };
        self.deliveries.insert(row.id, to_json(&row)?.as_slice())?;
        mark_due(&mut self.due, &row, hooks.at)?;
        self.by_partition.insert((partition, row.id), record_id.0)?;
        self.by_record
            .insert((partition, record_id.0, row.id), ())?;
        Ok(())
    }
}

fn event_body(
    id: RecordId,
    event: Event,
    payload: Option<&[u8]>,
    hooks: &Hooks,
) -> Result<String, StoreError> {
    let payload = match payload {
        Some(bytes) => Some(
            std::str::from_utf8(bytes)
                .ok()
                .and_then(|text| RawValue::from_string(text.to_string()).ok())
                .ok_or_else(|| StoreError::Corrupt(format!("payload of {id} is not JSON")))?,
        ),
        None => None,
    };
    let body = Body {
        kind: event.type_name(),
        timestamp: hooks.at.to_rfc3339(),
        data: BodyData {
            id: id.to_string(),
            endpoint: &hooks.endpoint_slug,
            environment: hooks.environment,
            created_at: id.created_at().to_rfc3339(),
            payload: payload.as_deref(),
        },
    };
    serde_json::to_string(&body)
        .map_err(|e| StoreError::Corrupt(format!("cannot encode a webhook body: {e}")))
}

#[cfg(test)]
mod tests {
    use super::{displayed_url, receiver_of, valid_auth_header, valid_url};

    #[test]
    fn stored_credentials_are_masked_in_views() {
        assert_eq!(
            displayed_url("https://user:s3cret@hooks.example.com/in?x=a@b"),
            "https://***@hooks.example.com/in?x=a@b"
        );
        assert_eq!(
            displayed_url("https://hooks.example.com/in?x=a@b"),
            "https://hooks.example.com/in?x=a@b"
        );
    }

    #[test]
    fn urls_with_credentials_are_refused_without_echoing_them() {
        assert!(valid_url("https://hooks.example.com/in?a=b@c").is_ok());
        for url in [
            "https://user:s3cret@hooks.example.com/in",
            "http://user@hooks.example.com/",
            "https://:s3cret@hooks.example.com/",
        ] {
            let err = valid_url(url).unwrap_err().to_string();
            assert!(
                err.contains("X-Webhook-Auth") && err.contains("auth_value"),
                "{err}"
            );
            assert!(!err.contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn hop_by_hop_and_framing_headers_cannot_carry_the_auth_value() {
        for name in [
            "Connection",
            "Keep-Alive",
            "Upgrade",
            "TE",
            "Trailer",
            "Expect",
            "Proxy-Authorization",
            "Proxy-Connection",
            "Transfer-Encoding",
            "Content-Length",
            "Host",
        ] {
            let err = valid_auth_header(name).unwrap_err().to_string();
            assert!(
                err.contains(&format!("`{}`", name.to_ascii_lowercase())),
                "{err}"
            );
        }
        assert_eq!(valid_auth_header("X-Api-Key").unwrap(), "x-api-key");
        assert_eq!(valid_auth_header("Authorization").unwrap(), "authorization");
    }

    #[test]
    fn receivers_are_scheme_host_and_port() {
        assert_eq!(
            receiver_of("https://Hooks.Example.com:8443/a?b=1"),
            "https://hooks.example.com:8443"
        );
        assert_eq!(receiver_of("http://example.com/x"), "http://example.com");
        assert_ne!(
            receiver_of("http://a.example/x"),
            receiver_of("http://b.example/x")
        );
    }
}
