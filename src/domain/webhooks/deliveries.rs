//! The webhook deliveries of a write: who gets one and what it says, decided in the commit of
//! the write that causes them.
//!
//! Every applied create, replace or delete produces one delivery per receiver: each of the
//! endpoint owner's subscriptions for that environment whose event filter takes it (written
//! as skipped while the subscription is disabled: visible in the log, and recoverable), and
//! the caller's (`X-Webhook-Callback` on the write). The store applies the write and asks its [`Hooks`]
//! (a `store::records::DeliveryPlanner`) for these deliveries, then writes them, due at once,
//! in the same commit; the dispatcher signs and sends them. Being part of the write's commit,
//! a delivery exists exactly when its write was acknowledged.
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
use serde::Serialize;
use serde_json::value::RawValue;

use crate::core::clock::Timestamp;
use crate::core::crypto::Sealer;
use crate::core::ids::RecordId;
use crate::core::trace::TraceContext;
use crate::domain::error::{Error, Result};
use crate::domain::webhooks::policy::max_attempts;
use crate::store::records::{Change, ChangeKind, DeliveryPlanner, NewDelivery};
use crate::store::{
    Environment, EventType, KeyHolder, StoreError, SubscriptionRow, WebhookKind, WebhookSettingsRow,
};

/// The callback URL header of a write.
pub const CALLBACK_HEADER: &str = "x-webhook-callback";
/// The auth value to send to the callback.
pub const AUTH_HEADER: &str = "x-webhook-auth";
/// The name of the header that carries the auth value (default `Authorization`).
pub const AUTH_NAME_HEADER: &str = "x-webhook-auth-header";
const DEFAULT_AUTH_NAME: &str = "authorization";
const MAX_URL_CHARS: usize = 2048;

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

/// What a write needs for its webhooks: the context of the event body, and the caller's
/// webhook if it asked for one. As the write's [`DeliveryPlanner`], it decides the write's
/// deliveries when the store applies it.
#[derive(Debug, Clone)]
pub struct Hooks {
    pub endpoint_slug: String,
    pub environment: Environment,
    /// When the write was received: the event's `timestamp`.
    pub at: Timestamp,
    pub caller: Option<CallerWebhook>,
    /// The trace of the write's request, which its deliveries continue (`core::trace`).
    pub trace: Option<TraceContext>,
}

/// A webhook requested with the write's `X-Webhook-*` headers.
#[derive(Debug, Clone)]
pub struct CallerWebhook {
    pub url: String,
    pub auth_header: String,
    /// The `X-Webhook-Auth` value, sealed: it is a secret of the caller's.
    pub auth_value_sealed: Option<Vec<u8>>,
    /// Whose key sent the write: the delivery log shows the URL in full only to them and the
    /// owner.
    pub sender: KeyHolder,
}

/// Reads the caller-webhook headers of a write made with `sender`'s key: `X-Webhook-Callback`
/// (an absolute http(s) URL) asks for a webhook; `X-Webhook-Auth` and `X-Webhook-Auth-Header`
/// only go with it.
pub fn caller_webhook(
    headers: &HeaderMap,
    sealer: &Sealer,
    sender: KeyHolder,
) -> Result<Option<CallerWebhook>> {
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
    let url = valid_url(url)?.text;
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
        sender,
    }))
}

/// A webhook URL as it is stored and sent to: trimmed, and as it parsed.
#[derive(Debug)]
pub struct WebhookUrl {
    pub text: String,
    pub uri: http::Uri,
}

/// An absolute `http` or `https` URL with a host, and no credentials in it: a URL is stored
/// and listed as it is, while an auth value is sealed and never shown again. Whitespace
/// around it is dropped first, so every later check sees the URL that is stored.
pub fn valid_url(text: &str) -> Result<WebhookUrl> {
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
    Ok(WebhookUrl {
        text: text.to_string(),
        uri,
    })
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

impl DeliveryPlanner for Hooks {
    /// One delivery per receiver, all with the same body: for each of the owner's
    /// subscriptions of the partition that wants the event (written as skipped while the
    /// subscription is disabled), and the caller's when the write asked for one.
    fn deliveries(
        &self,
        change: &Change<'_>,
        settings: Option<&WebhookSettingsRow>,
    ) -> Result<Vec<NewDelivery>, StoreError> {
        let event = event_type(change.kind);
        let subscriptions: Vec<&SubscriptionRow> = settings
            .map(|s| s.subscriptions.iter().filter(|s| s.wants(event)).collect())
            .unwrap_or_default();
        if subscriptions.is_empty() && self.caller.is_none() {
            return Ok(Vec::new());
        }
        let body = event_body(change, self)?;
        let delivery = |kind, url: &str, auth_header, auth_value_sealed| NewDelivery {
            kind,
            event,
            subscription: None,
            skipped: false,
            receiver: receiver_of(url),
            url: url.to_string(),
            auth_header,
            auth_value_sealed,
            body: body.clone(),
            sender: None,
            trace: self.trace.map(|t| t.header()),
            max_attempts: max_attempts(self.environment),
            created_at: self.at,
        };
        let mut deliveries = Vec::with_capacity(subscriptions.len() + 1);
        for subscription in subscriptions {
            deliveries.push(NewDelivery {
                subscription: Some(subscription.id),
                skipped: !subscription.enabled,
                ..delivery(
                    WebhookKind::Owner,
                    &subscription.url,
                    subscription.auth_header.clone(),
                    subscription.auth_value_sealed.clone(),
                )
            });
        }
        if let Some(caller) = &self.caller {
            deliveries.push(NewDelivery {
                sender: Some(caller.sender),
                ..delivery(
                    WebhookKind::Caller,
                    &caller.url,
                    Some(caller.auth_header.clone()),
                    caller.auth_value_sealed.clone(),
                )
            });
        }
        Ok(deliveries)
    }
}

/// The event `type` of a change.
pub fn event_type(kind: ChangeKind) -> EventType {
    match kind {
        ChangeKind::Created => EventType::RecordCreated,
        ChangeKind::Replaced => EventType::RecordReplaced,
        ChangeKind::Deleted => EventType::RecordDeleted,
    }
}

fn event_body(change: &Change<'_>, hooks: &Hooks) -> Result<String, StoreError> {
    event_json(&EventContent {
        kind: change.kind,
        at: hooks.at,
        id: change.id,
        endpoint_slug: &hooks.endpoint_slug,
        environment: hooks.environment,
        payload: change.payload,
    })
}

/// What an event says: a webhook's body and a change-stream event's data (`domain::stream`)
/// are the same JSON.
pub struct EventContent<'a> {
    pub kind: ChangeKind,
    /// When the write was received.
    pub at: Timestamp,
    pub id: RecordId,
    pub endpoint_slug: &'a str,
    pub environment: Environment,
    /// The record's payload (`None` for a delete).
    pub payload: Option<&'a [u8]>,
}

/// The JSON of an event (see the module's documentation).
pub fn event_json(event: &EventContent<'_>) -> Result<String, StoreError> {
    let id = event.id;
    let payload = match event.payload {
        Some(bytes) => Some(
            std::str::from_utf8(bytes)
                .ok()
                .and_then(|text| RawValue::from_string(text.to_string()).ok())
                .ok_or_else(|| StoreError::Corrupt(format!("payload of {id} is not JSON")))?,
        ),
        None => None,
    };
    let body = Body {
        kind: event_type(event.kind).as_str(),
        timestamp: event.at.to_rfc3339(),
        data: BodyData {
            id: id.to_string(),
            endpoint: event.endpoint_slug,
            environment: event.environment,
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
}
