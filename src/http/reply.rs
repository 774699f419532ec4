//! Response helpers and request parsing shared by the handlers.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http::{HeaderMap, StatusCode, header};
use serde::Serialize;
use warp::reply::Response;

use crate::domain::error::Error;
use crate::domain::error::Result as ServiceResult;
use crate::http::error::Result;
use crate::http::request::{BODY_BUDGET_WAIT, BodyStream, Request};

/// A JSON response.
pub fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    let body = serde_json::to_vec(value).unwrap_or_else(|e| {
        log::error!("cannot serialise a response: {e}");
        br#"{"error":{"code":"internal_error","message":"An internal error occurred."}}"#.to_vec()
    });
    json_text(status, body)
}

/// A response whose body is JSON text already (record pages, written by `records`).
pub fn json_text(status: StatusCode, body: impl Into<Bytes>) -> Response {
    let mut response = Response::new(body.into().into());
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// 303 See Other to a path of this server: after a dashboard form post, to the login page,
/// or from a browser's management API link to its dashboard page.
pub fn see_other(to: &str) -> Response {
    let mut response = Response::new(Vec::new().into());
    *response.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(value) = http::HeaderValue::from_str(to) {
        response.headers_mut().insert(header::LOCATION, value);
    }
    response
}

/// A `text/event-stream` answer whose body is `body`'s frames as they come. Neither caches
/// nor reverse proxies may hold it back (`X-Accel-Buffering: no` tells nginx).
pub fn event_stream(body: crate::domain::stream::StreamBody) -> Response {
    use warp::Reply;
    let mut response = warp::reply::stream(body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    headers.insert("x-accel-buffering", http::HeaderValue::from_static("no"));
    response
}

/// Starts the export `request` of `partition` (of the endpoint `slug`) for `watch`'s reader,
/// and answers it as a file to download; `label` names it in the log. The API's export and
/// the dashboard's share it.
pub async fn export_file(
    exports: &crate::domain::export::Exports,
    partition: crate::store::Partition,
    watch: crate::domain::export::Watch,
    request: crate::domain::export::ExportRequest,
    slug: &str,
    label: String,
) -> std::result::Result<Response, crate::domain::error::Error> {
    let (content_type, file_name) = (request.format.content_type(), request.file_name(slug));
    let body = exports.start(partition, watch, request, label).await?;
    Ok(download(body, content_type, &file_name))
}

/// A file to download (`Content-Disposition: attachment`) whose body is `body`'s chunks as
/// they come, sent with chunked encoding.
fn download(
    body: crate::domain::export::ExportBody,
    content_type: &'static str,
    file_name: &str,
) -> Response {
    use warp::Reply;
    let mut response = warp::reply::stream(body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    headers.insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-store"),
    );
    // The name is made of the slug and the window with anything but letters, digits, `-`
    // and `_` replaced (`export::ExportRequest::file_name`), so it needs no quoting rules.
    if let Ok(value) = http::HeaderValue::from_str(&format!("attachment; filename=\"{file_name}\""))
    {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    response
}

/// The token of an `Authorization: Bearer <token>` header, if well-formed.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The value of cookie `name` from the request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, v)| *k == name && !v.is_empty())
        .map(|(_, v)| v)
}

/// Refuses anything but `application/json` (optionally with `charset=utf-8`).
pub fn require_json(headers: &HeaderMap) -> Result<()> {
    media_type(headers, &["application/json"], "application/json").map(|_| ())
}

/// Which of the `accepted` media types the body's Content-Type is (optionally with
/// `charset=utf-8`); anything else is refused with 415 saying `expected`.
pub fn media_type<'a>(
    headers: &HeaderMap,
    accepted: &[&'a str],
    expected: &'static str,
) -> Result<&'a str> {
    let refused = crate::http::error::HttpError::UnsupportedMediaType(expected);
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return Err(refused);
    };
    let mut parts = value.split(';').map(str::trim);
    let essence = parts.next().and_then(|m| {
        accepted
            .iter()
            .find(|accepted| m.eq_ignore_ascii_case(accepted))
    });
    let params_ok = parts.all(|p| {
        p.split_once('=').is_some_and(|(k, v)| {
            k.trim().eq_ignore_ascii_case("charset")
                && v.trim().trim_matches('"').eq_ignore_ascii_case("utf-8")
        })
    });
    match essence {
        Some(essence) if params_ok => Ok(essence),
        _ => Err(refused),
    }
}

/// Reads the body, refusing it as soon as it is known to exceed `limit`: from the declared
/// Content-Length before reading anything, otherwise while streaming. A body still arriving
/// at the request's deadline is refused (408): a client trickling bytes holds no handler.
///
/// The body first takes its share of the [`BodyBudget`](crate::http::request::BodyBudget),
/// kept on the request until it is answered.
pub async fn read_body(req: &mut Request, limit: usize) -> Result<Bytes> {
    let deadline = req.body_deadline;
    let size = declared_length(&req.headers).map_or(limit, |n| n.min(limit as u64) as usize);
    let wait = deadline.min(tokio::time::Instant::now() + BODY_BUDGET_WAIT);
    let share = req.body_budget.take(size, wait).await;
    req.body_share = Some(share.ok_or(crate::http::error::HttpError::Busy)?);
    tokio::time::timeout_at(deadline, read_limited(&req.headers, &mut req.body, limit))
        .await
        .map_err(|_| crate::http::error::HttpError::RequestTimeout)?
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// [`read_body`] without the deadline: the size rule alone (413 from the declared length, or
/// as soon as the streamed body passes `limit`).
pub async fn read_limited(
    headers: &HeaderMap,
    body: &mut BodyStream,
    limit: usize,
) -> Result<Bytes> {
    let declared = declared_length(headers);
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(crate::http::error::HttpError::PayloadTooLarge(limit));
    }
    let mut buf = BytesMut::with_capacity(declared.map_or(8192, |n| n as usize));
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| {
            Error::InvalidRequest(format!("The request body could not be read: {e}."))
        })?;
        if buf.len() + chunk.len() > limit {
            return Err(crate::http::error::HttpError::PayloadTooLarge(limit));
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

/// Query parameters; the first occurrence of a name wins.
pub fn query_params(query: &str) -> HashMap<String, String> {
    let mut params = HashMap::new();
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        params
            .entry(k.into_owned())
            .or_insert_with(|| v.into_owned());
    }
    params
}

/// Parses a JSON request body into `T`: text that is not JSON is `invalid_json`, JSON of the
/// wrong shape (unknown or missing field, wrong type) is `invalid_request`.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> ServiceResult<T> {
    serde_json::from_slice(body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => Error::InvalidRequest(format!(
            "Invalid request body: {}.",
            without_values(&e.to_string())
        )),
        _ => Error::InvalidJson(e.to_string()),
    })
}

/// serde's message for JSON of the wrong shape without the value it quotes (`invalid type:
/// string "ada@example.com", expected u64`): the message goes to the request log, and the
/// value may be what an erasure is asked to remove. What was expected, and where, stays.
fn without_values(message: &str) -> String {
    const QUOTING: [&str; 4] = [
        "invalid type",
        "invalid value",
        "unknown variant",
        "unknown field",
    ];
    match (
        QUOTING.iter().find(|lead| message.starts_with(*lead)),
        message.rfind(", expected "),
    ) {
        (Some(lead), Some(at)) => format!("{lead}{}", &message[at..]),
        (Some(lead), None) => match message.rfind(" at line ") {
            Some(at) => format!("{lead}{}", &message[at..]),
            None => (*lead).to_string(),
        },
        _ => message.to_string(),
    }
}

/// Consumes what is left of a request body if it is already buffered (at most `limit`
/// bytes), without waiting for the network. Returns whether the body is now finished: if it
/// is not, the connection cannot carry another request and must be closed.
pub fn drain_buffered(body: &mut BodyStream, limit: usize) -> bool {
    use futures_util::FutureExt;
    let mut drained = 0;
    loop {
        match body.next().now_or_never() {
            Some(None) => return true,
            Some(Some(Ok(chunk))) => {
                drained += chunk.len();
                if drained > limit {
                    return false;
                }
            }
            Some(Some(Err(_))) | None => return false,
        }
    }
}

/// A numeric id in a path; anything else names nothing (404).
pub fn id_param(text: &str, what: crate::domain::error::Missing) -> ServiceResult<u64> {
    text.parse().map_err(|_| Error::NotFound(what))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Body {
        count: u64,
        kind: Kind,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Kind {
        Sandbox,
    }

    #[test]
    fn a_body_of_the_wrong_shape_is_named_without_its_values() {
        for (body, says) in [
            (
                r#"{"count":"ada@example.com","kind":"sandbox"}"#,
                "invalid type, expected u64 at line 1 column 26",
            ),
            (
                r#"{"count":-7,"kind":"sandbox"}"#,
                "invalid value, expected u64 at line 1 column 11",
            ),
            (
                r#"{"count":1,"kind":"ada@example.com"}"#,
                "unknown variant, expected `sandbox` at line 1 column 35",
            ),
            (
                r#"{"count":1,"kind":"sandbox","ada@example.com":1}"#,
                "unknown field, expected `count` or `kind` at line 1 column 45",
            ),
            (
                r#"{"kind":"sandbox"}"#,
                "missing field `count` at line 1 column 18",
            ),
        ] {
            let Err(Error::InvalidRequest(message)) = parse_json::<Body>(body.as_bytes()) else {
                panic!("{body} was taken");
            };
            assert_eq!(message, format!("Invalid request body: {says}."));
        }
    }
}
