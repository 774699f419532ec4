//! A client of the change stream (`GET /api/v1/data/{slug}/stream`) for the tests: opens a
//! stream over real HTTP and reads its Server-Sent Events one at a time.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

use super::Resp;

/// One Server-Sent Event as a reader sees it.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: Option<String>,
    pub kind: String,
    pub data: Value,
}

/// A reader of one open stream, over ureq (which undoes the chunked encoding).
pub struct Reader {
    lines: BufReader<Box<dyn Read + Send>>,
    /// Comment lines seen (heartbeats and the like).
    pub comments: Vec<String>,
}

/// Opens a stream; `Err` with the response when it is refused (status 0 and the error as the
/// body when no answer came).
pub fn open(
    addr: SocketAddr,
    slug: &str,
    key: &str,
    last_event_id: Option<&str>,
    query: &str,
) -> Result<Reader, Resp> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_recv_body(Some(Duration::from_secs(20)))
        .build()
        .into();
    let mut request = agent
        .get(format!("http://{addr}/api/v1/data/{slug}/stream{query}"))
        .header("Authorization", format!("Bearer {key}"));
    if let Some(id) = last_event_id {
        request = request.header("Last-Event-ID", id);
    }
    let response = request.call().map_err(|err| Resp {
        status: 0,
        headers: Vec::new(),
        body: err.to_string().into_bytes(),
    })?;
    let status = response.status().as_u16();
    if status != 200 {
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        let body = response
            .into_body()
            .read_to_vec()
            .expect("the refusal's body");
        return Err(Resp {
            status,
            headers,
            body,
        });
    }
    assert_eq!(
        response.headers().get("content-type").unwrap(),
        "text/event-stream"
    );
    let body: Box<dyn Read + Send> = Box::new(response.into_body().into_reader());
    Ok(Reader {
        lines: BufReader::new(body),
        comments: Vec::new(),
    })
}

impl Reader {
    /// The next event (comments are kept aside); `None` when the stream ended.
    pub fn next(&mut self) -> Option<Event> {
        let (mut id, mut kind, mut data) = (None, None, None);
        loop {
            let mut line = String::new();
            if self.lines.read_line(&mut line).ok()? == 0 {
                return None;
            }
            let line = line.trim_end_matches('\n');
            if line.is_empty() {
                if let Some(kind) = kind.take() {
                    let data: String = data.take().expect("an event without data");
                    return Some(Event {
                        id: id.take(),
                        kind,
                        data: serde_json::from_str(&data).expect("event data is JSON"),
                    });
                }
                continue;
            }
            if let Some(comment) = line.strip_prefix(':') {
                self.comments.push(comment.trim().to_string());
            } else if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("event: ") {
                kind = Some(v.to_string());
            } else if let Some(v) = line.strip_prefix("data: ") {
                data = Some(v.to_string());
            } else if !line.starts_with("retry: ") {
                panic!("an unexpected line in the stream: {line:?}");
            }
        }
    }
}
