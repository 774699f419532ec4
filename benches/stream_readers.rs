//! Change-stream readers for the stream benchmark (`benches/stream.sh`).
//!
//! Opens `--readers` concurrent Server-Sent Events connections (default 100) to one change
//! stream, `GET /api/v1/data/{slug}/stream`, with `Authorization: Bearer KEY`, and reads them
//! as fast as they come: plain HTTP/1.1 over tokio's `TcpStream` (chunked transfer encoding,
//! a `Content-Length` body or a body that ends with the connection), then the SSE fields
//! (`id`, `event`, `data`; comment lines skipped). For every `record.*` event it notes:
//!
//! - the latency: arrival (wall-clock µs, read once per socket read, so as close to the bytes'
//!   arrival as the reader can tell) minus the event's `timestamp` (when intake received the
//!   write, stamped by the same machine's clock);
//! - one more event for its reader, and the event's `id` into the reader's fingerprint (a
//!   wrapping sum of the ids' hashes: two readers that saw the same events, each once, have
//!   the same count and fingerprint, whatever the order).
//!
//! A connection that ends (a `stream.error` event, the server closing it) is reopened after
//! 1 s (the stream's `retry:`) with `Last-Event-ID`, as a browser's `EventSource` would; each
//! end and its reason are counted.
//!
//! A new API key (the `key` command below, after a key rotation) moves every reader: each
//! closes its stream and reopens it at once with the new key and `Last-Event-ID`, so it
//! misses nothing; these moves are counted apart from the ends (`moves`).
//!
//! Usage: `stream_readers --url http://HOST:PORT/api/v1/data/SLUG/stream --key KEY
//! [--readers N] [--duration SECS]`. Once every stream has answered 200 it prints
//! `{"connected":N}` on stdout. With `--duration` it then reads for that long, prints the
//! summary (below) and exits. Without it, it takes commands on stdin, one a line, and answers
//! each with one JSON line on stdout:
//!
//! - `stats`: `{"events","min","max","last_us","disconnects","moves","moved"}`: events so far,
//!   the fewest and most one reader has, the latest arrival (µs since the epoch), the ends
//!   and the moves to a new key so far, and how many readers have their stream open with the
//!   latest key;
//! - `key KEY`: every reader moves to KEY (see above); answers `{"key_set":true}` at once;
//! - `report [EXPECTED]`: the summary of everything since the last report (or the start), then
//!   starts afresh: `readers`, `events`, `window_s` (first to last arrival, all readers),
//!   `events_per_s` (events / window), `per_reader_min`, `per_reader_max`, `expected`,
//!   `missing` and `extra` (summed over readers, against EXPECTED events each, when given),
//!   `readers_short`, `fingerprints_agree`, `latency_ms` (`p50`, `p90`, `p99`, `max`: within
//!   0.8 %, from a log-linear histogram; `p*` are the upper bound of their bucket),
//!   `negative_latencies`, `without_timestamp`, `disconnects`, `errors` (count per reason),
//!   `first_us`, `last_us`;
//! - `quit` (or the end of stdin): exits.
//!
//! Errors go to stderr; a stream that cannot be opened at the start exits with 1, bad
//! arguments with 2.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use memchr::memmem;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};

const USAGE: &str = concat!(
    "usage: stream_readers --url URL --key KEY [--readers N] [--duration SECS]\n",
    "\n",
    "Reads N change streams (Server-Sent Events) at once and measures each record event's\n",
    "latency from its timestamp; prints {\"connected\":N} once all are open, then a JSON\n",
    "summary after SECS, or on the stdin commands `stats`, `report [EXPECTED]`,\n",
    "`key KEY` (reopen every stream with a new key and Last-Event-ID), `quit`.\n",
    "\n",
    "  --url URL        http://HOST:PORT/api/v1/data/SLUG/stream\n",
    "  --key KEY        the API key (sent as Authorization: Bearer KEY)\n",
    "  --readers N      concurrent streams (default 100)\n",
    "  --duration SECS  read for SECS, print the summary and exit (default: stdin commands)\n",
);

/// Bytes asked of the socket per read.
const READ_BYTES: usize = 64 * 1024;
/// Most bytes of a response head.
const MAX_HEAD: usize = 64 * 1024;
/// What a reader waits before it reopens an ended stream (the stream's `retry: 1000`).
const RECONNECT: Duration = Duration::from_secs(1);
/// Most time for every stream to answer at the start.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------- latency histogram

/// Sub-buckets per power of two: values are kept within 1/128 (0.8 %).
const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;
const BUCKETS: usize = ((64 - SUB_BITS + 1) as usize) * SUB as usize;

/// A log-linear histogram of µs values: exact below 128, then 128 buckets per power of two.
struct Histogram {
    counts: Vec<u64>,
    max: u64,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            counts: vec![0; BUCKETS],
            max: 0,
        }
    }

    fn bucket(v: u64) -> usize {
        if v < SUB {
            return v as usize;
        }
        let shift = 63 - v.leading_zeros() - SUB_BITS;
        ((shift as u64 + 1) * SUB + ((v >> shift) - SUB)) as usize
    }

    /// The largest value that falls in `bucket`.
    fn upper(bucket: usize) -> u64 {
        let bucket = bucket as u64;
        if bucket < SUB {
            return bucket;
        }
        let shift = bucket / SUB - 1;
        let mantissa = SUB + bucket % SUB;
        ((mantissa + 1) << shift).wrapping_sub(1)
    }

    fn record(&mut self, v: u64) {
        self.counts[Self::bucket(v)] += 1;
        self.max = self.max.max(v);
    }

    fn add(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.max = self.max.max(other.max);
    }

    /// The nearest-rank `p`th percentile (the upper bound of its bucket, at most the max).
    fn percentile(&self, p: f64) -> Option<u64> {
        let total: u64 = self.counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((p / 100.0 * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(Self::upper(bucket).min(self.max));
            }
        }
        Some(self.max)
    }
}

// ---------------------------------------------------------------- what a reader saw

/// What one reader saw since the last report.
struct Stats {
    events: u64,
    /// Wrapping sum of the hashes of the events' ids.
    fingerprint: u64,
    first_us: i64,
    last_us: i64,
    latency: Histogram,
    negative: u64,
    without_timestamp: u64,
    disconnects: u64,
    errors: BTreeMap<String, u64>,
    moves: u64,
    /// Which key (by its number, counting from 0) the open stream uses; `None` while closed.
    open_with: Option<u64>,
}

impl Stats {
    fn new() -> Stats {
        Stats {
            events: 0,
            fingerprint: 0,
            first_us: i64::MAX,
            last_us: 0,
            latency: Histogram::new(),
            negative: 0,
            without_timestamp: 0,
            disconnects: 0,
            errors: BTreeMap::new(),
            moves: 0,
            open_with: None,
        }
    }

    fn event(&mut self, arrival_us: i64, timestamp_us: Option<i64>, id_hash: u64) {
        self.events += 1;
        self.fingerprint = self.fingerprint.wrapping_add(id_hash);
        self.first_us = self.first_us.min(arrival_us);
        self.last_us = self.last_us.max(arrival_us);
        match timestamp_us {
            Some(at) if arrival_us >= at => self.latency.record((arrival_us - at) as u64),
            Some(_) => {
                self.negative += 1;
                self.latency.record(0);
            }
            None => self.without_timestamp += 1,
        }
    }

    fn ended(&mut self, reason: String) {
        self.disconnects += 1;
        *self.errors.entry(reason).or_insert(0) += 1;
    }
}

type Shared = Arc<Mutex<Stats>>;

fn stats_line(readers: &[Shared], key_number: u64) -> Value {
    let all: Vec<MutexGuard<'_, Stats>> = readers.iter().map(|r| lock(r)).collect();
    json!({
        "moves": all.iter().map(|s| s.moves).sum::<u64>(),
        "moved": all.iter().filter(|s| s.open_with == Some(key_number)).count(),
        "events": all.iter().map(|s| s.events).sum::<u64>(),
        "min": all.iter().map(|s| s.events).min().unwrap_or(0),
        "max": all.iter().map(|s| s.events).max().unwrap_or(0),
        "last_us": all.iter().map(|s| s.last_us).max().unwrap_or(0),
        "disconnects": all.iter().map(|s| s.disconnects).sum::<u64>(),
    })
}

/// The summary of every reader since the last one (see the module docs); starts afresh.
fn report(readers: &[Shared], expected: Option<u64>) -> Value {
    let mut all: Vec<MutexGuard<'_, Stats>> = readers.iter().map(|r| lock(r)).collect();
    let mut latency = Histogram::new();
    let mut errors = BTreeMap::<String, u64>::new();
    for s in &all {
        latency.add(&s.latency);
        for (reason, n) in &s.errors {
            *errors.entry(reason.clone()).or_insert(0) += n;
        }
    }
    let counts: Vec<u64> = all.iter().map(|s| s.events).collect();
    let events: u64 = counts.iter().sum();
    let first = all.iter().map(|s| s.first_us).min().unwrap_or(i64::MAX);
    let last = all.iter().map(|s| s.last_us).max().unwrap_or(0);
    let window_s = if events > 0 && last > first {
        (last - first) as f64 / 1e6
    } else {
        0.0
    };
    let ms = |us: Option<u64>| us.map(|us| (us as f64 / 10.0).round() / 100.0);
    let (missing, extra, short) = match expected {
        Some(e) => (
            json!(counts.iter().map(|&c| e.saturating_sub(c)).sum::<u64>()),
            json!(counts.iter().map(|&c| c.saturating_sub(e)).sum::<u64>()),
            json!(counts.iter().filter(|&&c| c < e).count()),
        ),
        None => (Value::Null, Value::Null, Value::Null),
    };
    let agree = all
        .windows(2)
        .all(|w| (w[0].events, w[0].fingerprint) == (w[1].events, w[1].fingerprint));
    let summary = json!({
        "readers": all.len(),
        "events": events,
        "window_s": (window_s * 1000.0).round() / 1000.0,
        "events_per_s": if window_s > 0.0 { (events as f64 / window_s).round() } else { 0.0 },
        "per_reader_min": counts.iter().min().copied().unwrap_or(0),
        "per_reader_max": counts.iter().max().copied().unwrap_or(0),
        "expected": expected,
        "missing": missing,
        "extra": extra,
        "readers_short": short,
        "fingerprints_agree": agree,
        "latency_ms": {
            "p50": ms(latency.percentile(50.0)),
            "p90": ms(latency.percentile(90.0)),
            "p99": ms(latency.percentile(99.0)),
            "max": ms((events > 0).then_some(latency.max)),
        },
        "negative_latencies": all.iter().map(|s| s.negative).sum::<u64>(),
        "without_timestamp": all.iter().map(|s| s.without_timestamp).sum::<u64>(),
        "disconnects": all.iter().map(|s| s.disconnects).sum::<u64>(),
        "moves": all.iter().map(|s| s.moves).sum::<u64>(),
        "errors": errors,
        "first_us": if events > 0 { first } else { 0 },
        "last_us": last,
    });
    for s in &mut all {
        let open_with = s.open_with;
        **s = Stats::new();
        s.open_with = open_with;
    }
    summary
}

// ---------------------------------------------------------------- HTTP

/// Where the streams are read from.
struct Target {
    /// `host:port` to connect to.
    addr: String,
    host: String,
    path: String,
}

impl Target {
    fn parse(url: &str) -> Result<Target, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("--url must start with http:// (got {url:?})"))?;
        let (host, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if host.is_empty() {
            return Err(format!("--url has no host: {url:?}"));
        }
        let has_port = host.rsplit_once(':').is_some_and(|(_, p)| {
            !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) && !host.ends_with(']')
        });
        let addr = match has_port {
            true => host.to_string(),
            false => format!("{host}:80"),
        };
        Ok(Target {
            addr,
            host: host.to_string(),
            path: path.to_string(),
        })
    }
}

/// How the response body is delimited.
enum Framing {
    Chunked(Chunk),
    Length(usize),
    /// Until the server closes the connection.
    Close,
}

/// Where the chunked decoder is.
#[derive(Clone, Copy)]
enum Chunk {
    Size,
    Data(usize),
    DataEnd,
    Trailer,
    Done,
}

impl Framing {
    /// Moves the body bytes at the front of `raw` to `body`; true once the body has ended.
    fn decode(&mut self, raw: &mut Vec<u8>, body: &mut Vec<u8>) -> Result<bool, String> {
        match self {
            Framing::Close => {
                body.extend_from_slice(raw);
                raw.clear();
                Ok(false)
            }
            Framing::Length(left) => {
                let n = (*left).min(raw.len());
                body.extend_from_slice(&raw[..n]);
                raw.drain(..n);
                *left -= n;
                Ok(*left == 0)
            }
            Framing::Chunked(state) => {
                let mut at = 0;
                let ended = loop {
                    match *state {
                        Chunk::Size | Chunk::Trailer => {
                            let Some(nl) = memchr::memchr(b'\n', &raw[at..]) else {
                                if raw.len() - at > 4096 {
                                    return Err("chunk size line too long".into());
                                }
                                break false;
                            };
                            let line = trim_cr(&raw[at..at + nl]);
                            at += nl + 1;
                            if let Chunk::Trailer = *state {
                                if line.is_empty() {
                                    *state = Chunk::Done;
                                }
                                continue;
                            }
                            let size = chunk_size(line)?;
                            *state = match size {
                                0 => Chunk::Trailer,
                                n => Chunk::Data(n),
                            };
                        }
                        Chunk::Data(left) => {
                            let n = left.min(raw.len() - at);
                            if n == 0 {
                                break false;
                            }
                            body.extend_from_slice(&raw[at..at + n]);
                            at += n;
                            *state = match left - n {
                                0 => Chunk::DataEnd,
                                left => Chunk::Data(left),
                            };
                        }
                        Chunk::DataEnd => {
                            if raw.len() - at < 2 {
                                break false;
                            }
                            if &raw[at..at + 2] != b"\r\n" {
                                return Err("chunk data not followed by CRLF".into());
                            }
                            at += 2;
                            *state = Chunk::Size;
                        }
                        Chunk::Done => break true,
                    }
                };
                raw.drain(..at);
                Ok(ended)
            }
        }
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The size of a chunk-size line (hex digits, then optional `;extensions`).
fn chunk_size(line: &[u8]) -> Result<usize, String> {
    let digits = line.split(|&b| b == b';').next().unwrap_or_default();
    let digits = String::from_utf8_lossy(digits);
    usize::from_str_radix(digits.trim(), 16).map_err(|_| format!("bad chunk size line {digits:?}"))
}

/// Opens one stream: sends the request and reads the response head. Returns the connection,
/// the body's framing and the bytes read after the head.
async fn open(
    target: &Target,
    key: &str,
    last_id: Option<&str>,
) -> Result<(TcpStream, Framing, Vec<u8>), String> {
    let mut sock = TcpStream::connect(&target.addr)
        .await
        .map_err(|err| format!("connect {}: {err}", target.addr))?;
    let _ = sock.set_nodelay(true);
    let mut request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nAccept: text/event-stream\r\n",
        target.path, target.host, key
    );
    if let Some(id) = last_id {
        request.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    request.push_str("\r\n");
    sock.write_all(request.as_bytes())
        .await
        .map_err(|err| format!("send request: {err}"))?;
    let mut buf = Vec::with_capacity(READ_BYTES);
    let end = loop {
        if let Some(end) = memmem::find(&buf, b"\r\n\r\n") {
            break end;
        }
        if buf.len() > MAX_HEAD {
            return Err("response head too large".into());
        }
        buf.reserve(READ_BYTES);
        match sock.read_buf(&mut buf).await {
            Ok(0) => return Err("connection closed before the response head".into()),
            Ok(_) => {}
            Err(err) => return Err(format!("read response head: {err}")),
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let rest = buf[end + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let code = status.split_whitespace().nth(1).unwrap_or_default();
    if code != "200" {
        let body = String::from_utf8_lossy(&rest[..rest.len().min(300)]).into_owned();
        return Err(format!("HTTP {code}: {}", body.trim()));
    }
    let mut framing = Framing::Close;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        if name == "transfer-encoding" && value.to_ascii_lowercase().contains("chunked") {
            framing = Framing::Chunked(Chunk::Size);
        } else if name == "content-length" && !matches!(framing, Framing::Chunked(_)) {
            let n = value
                .parse()
                .map_err(|_| format!("bad Content-Length {value:?}"))?;
            framing = Framing::Length(n);
        }
    }
    Ok((sock, framing, rest))
}

// ---------------------------------------------------------------- Server-Sent Events

/// The SSE parser of one connection: the fields of the event being read.
struct Sse {
    event: Vec<u8>,
    has_data: bool,
    timestamp_us: Option<i64>,
    error_code: Option<String>,
    id_hash: u64,
    /// The last `id:` received: sent as `Last-Event-ID` when the stream is reopened.
    last_id: String,
    timestamp: memmem::Finder<'static>,
    code: memmem::Finder<'static>,
}

impl Sse {
    fn new() -> Sse {
        Sse {
            event: Vec::new(),
            has_data: false,
            timestamp_us: None,
            error_code: None,
            id_hash: 0,
            last_id: String::new(),
            timestamp: memmem::Finder::new(b"\"timestamp\":\""),
            code: memmem::Finder::new(b"\"code\":\""),
        }
    }

    /// Reads the complete lines at the front of `body` (leaving a partial last line there),
    /// noting each dispatched event in `stats`. Returns the `code` of a `stream.error` event,
    /// which ends the stream.
    fn feed(&mut self, body: &mut Vec<u8>, arrival_us: i64, stats: &mut Stats) -> Option<String> {
        let mut at = 0;
        let mut ended = None;
        while let Some(nl) = memchr::memchr(b'\n', &body[at..]) {
            let line = trim_cr(&body[at..at + nl]);
            at += nl + 1;
            if line.is_empty() {
                if let Some(code) = self.dispatch(arrival_us, stats) {
                    ended = Some(code);
                }
                continue;
            }
            if line[0] == b':' {
                continue; // a comment
            }
            let (field, value) = match memchr::memchr(b':', line) {
                Some(i) => {
                    let value = &line[i + 1..];
                    (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
                }
                None => (line, &b""[..]),
            };
            match field {
                b"event" => {
                    self.event.clear();
                    self.event.extend_from_slice(value);
                }
                b"data" => {
                    self.has_data = true;
                    let head = &value[..value.len().min(256)];
                    if let Some(i) = self.timestamp.find(head) {
                        self.timestamp_us = quoted(&value[i + 13..]).and_then(parse_rfc3339_us);
                    }
                    if let Some(i) = self.code.find(value) {
                        self.error_code =
                            quoted(&value[i + 8..]).map(|c| String::from_utf8_lossy(c).into());
                    }
                }
                b"id" if !value.contains(&0) => {
                    let mut hasher = std::hash::DefaultHasher::new();
                    value.hash(&mut hasher);
                    self.id_hash = hasher.finish();
                    self.last_id = String::from_utf8_lossy(value).into_owned();
                }
                _ => {}
            }
        }
        body.drain(..at);
        ended
    }

    /// The end of an event (a blank line): notes a `record.*` event in `stats`; returns the
    /// code of a `stream.error` event.
    fn dispatch(&mut self, arrival_us: i64, stats: &mut Stats) -> Option<String> {
        let mut ended = None;
        if self.has_data {
            if self.event.starts_with(b"record.") {
                stats.event(arrival_us, self.timestamp_us, self.id_hash);
            } else if self.event == b"stream.error" {
                ended = Some(
                    self.error_code
                        .take()
                        .unwrap_or_else(|| "stream.error".into()),
                );
            }
        }
        self.discard();
        ended
    }

    /// Forgets the fields of the event being read.
    fn discard(&mut self) {
        self.event.clear();
        self.has_data = false;
        self.timestamp_us = None;
        self.error_code = None;
        self.id_hash = 0;
    }
}

/// The text up to the next `"`.
fn quoted(text: &[u8]) -> Option<&[u8]> {
    memchr::memchr(b'"', text).map(|end| &text[..end])
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` as µs since the Unix epoch.
fn parse_rfc3339_us(s: &[u8]) -> Option<i64> {
    fn num(digits: &[u8]) -> Option<i64> {
        digits.iter().try_fold(0i64, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0'))
        })
    }
    if s.len() < 20
        || s[4] != b'-'
        || s[7] != b'-'
        || !matches!(s[10], b'T' | b't' | b' ')
        || s[13] != b':'
        || s[16] != b':'
    {
        return None;
    }
    let (year, month, day) = (num(&s[0..4])?, num(&s[5..7])?, num(&s[8..10])?);
    let (hour, minute, second) = (num(&s[11..13])?, num(&s[14..16])?, num(&s[17..19])?);
    let mut rest = &s[19..];
    let mut micros = 0;
    if let Some(fraction) = rest.strip_prefix(b".") {
        let digits = fraction.iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        for i in 0..6 {
            micros = micros * 10
                + fraction
                    .get(i)
                    .filter(|_| i < digits)
                    .map_or(0, |&c| i64::from(c - b'0'));
        }
        rest = &fraction[digits..];
    }
    let offset_s = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let minutes = num(&[*h1, *h2])? * 60 + num(&[*m1, *m2])?;
            if *sign == b'+' {
                minutes * 60
            } else {
                -minutes * 60
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    Some(secs * 1_000_000 + micros)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let doy = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

// ---------------------------------------------------------------- readers

/// The API key the readers use, numbered from 0 (the `key` command sends a new one).
type Keys = watch::Receiver<(u64, String)>;

/// Reads one stream for ever: opens it (with `Last-Event-ID` after the first time), reads it
/// until it ends, notes why, waits [`RECONNECT`] and opens it again; a new key in `keys`
/// reopens it at once. `opened` hears how the first opening went.
async fn reader(
    target: Arc<Target>,
    stats: Shared,
    mut keys: Keys,
    opened: oneshot::Sender<Result<(), String>>,
) {
    let mut opened = Some(opened);
    let mut sse = Sse::new();
    loop {
        let last_id = (!sse.last_id.is_empty()).then(|| sse.last_id.clone());
        let (number, key) = keys.borrow_and_update().clone();
        let ended = match open(&target, &key, last_id.as_deref()).await {
            Ok((sock, framing, rest)) => {
                if let Some(tx) = opened.take() {
                    let _ = tx.send(Ok(()));
                }
                lock(&stats).open_with = Some(number);
                let ended = read_stream(sock, framing, rest, &mut sse, &stats, &mut keys).await;
                lock(&stats).open_with = None;
                ended
            }
            Err(err) => match opened.take() {
                Some(tx) => {
                    let _ = tx.send(Err(err));
                    return;
                }
                None => Some(err),
            },
        };
        match ended {
            Some(reason) => {
                lock(&stats).ended(reason);
                tokio::time::sleep(RECONNECT).await;
            }
            None => lock(&stats).moves += 1,
        }
    }
}

/// Reads an open stream until it ends, and returns why; or until `keys` holds a new key, and
/// returns `None` (the events read in full are counted, a partial one is read again).
async fn read_stream(
    mut sock: TcpStream,
    mut framing: Framing,
    mut raw: Vec<u8>,
    sse: &mut Sse,
    stats: &Shared,
    keys: &mut Keys,
) -> Option<String> {
    let mut body = Vec::with_capacity(READ_BYTES);
    // A partial event left from the connection before is not completed by this one.
    sse.discard();
    let mut arrival_us = now_us();
    loop {
        let ended = match framing.decode(&mut raw, &mut body) {
            Ok(ended) => ended,
            Err(err) => return Some(format!("bad HTTP framing: {err}")),
        };
        let error = sse.feed(&mut body, arrival_us, &mut lock(stats));
        if error.is_some() {
            return error;
        }
        if ended {
            return Some("the server ended the body".into());
        }
        raw.reserve(READ_BYTES);
        // read_buf is cancel safe: a new key never loses bytes already read.
        tokio::select! {
            read = sock.read_buf(&mut raw) => match read {
                Ok(0) => return Some("the server closed the connection".into()),
                Ok(_) => arrival_us = now_us(),
                Err(err) => return Some(format!("read: {err}")),
            },
            Ok(()) = keys.changed() => return None,
        }
    }
}

// ---------------------------------------------------------------- main

struct Args {
    url: String,
    key: String,
    readers: usize,
    duration: Option<Duration>,
}

fn parse_args() -> Result<Args, String> {
    let (mut url, mut key, mut readers, mut duration) = (None, None, 100, None);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name.to_string(), Some(value.into())),
            _ => (arg, None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match name.as_str() {
            "--url" => url = Some(value()?),
            "--key" => key = Some(value()?),
            "--readers" => {
                let v = value()?;
                readers =
                    v.parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                        format!("--readers must be a positive number (got {v:?})")
                    })?;
            }
            "--duration" => {
                let v = value()?;
                let secs: f64 = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s >= 0.0)
                    .ok_or_else(|| format!("--duration must be seconds (got {v:?})"))?;
                duration = Some(Duration::from_secs_f64(secs));
            }
            // `cargo bench` passes `--bench` to harness = false targets.
            "--bench" => {}
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument: {other}")),
        }
    }
    Ok(Args {
        url: url.ok_or("--url is required")?,
        key: key.ok_or("--key is required")?,
        readers,
        duration,
    })
}

fn say(line: &Value) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

async fn run(args: Args) -> Result<(), String> {
    let target = Arc::new(Target::parse(&args.url)?);
    let (key_tx, keys) = watch::channel((0, args.key));
    let readers: Vec<Shared> = (0..args.readers)
        .map(|_| Arc::new(Mutex::new(Stats::new())))
        .collect();
    let mut opening = Vec::with_capacity(args.readers);
    for stats in &readers {
        let (tx, rx) = oneshot::channel();
        tokio::spawn(reader(target.clone(), stats.clone(), keys.clone(), tx));
        opening.push(rx);
    }
    for (n, rx) in opening.into_iter().enumerate() {
        match tokio::time::timeout(OPEN_TIMEOUT, rx).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(err))) => return Err(format!("stream {n} of {}: {err}", args.readers)),
            Ok(Err(_)) => return Err(format!("stream {n}: its reader ended")),
            Err(_) => return Err(format!("stream {n}: not open after {OPEN_TIMEOUT:?}")),
        }
    }
    say(&json!({ "connected": args.readers }));
    if let Some(duration) = args.duration {
        tokio::time::sleep(duration).await;
        say(&report(&readers, None));
        return Ok(());
    }
    // stdin is read on a thread of its own (tokio's stdin needs a feature this crate does not
    // enable).
    let (tx, mut commands) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = commands.recv().await {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("stats"), None) => say(&stats_line(&readers, key_tx.borrow().0)),
            (Some("key"), Some(key)) => {
                key_tx.send_modify(|(number, old)| {
                    *number += 1;
                    *old = key.to_string();
                });
                say(&json!({ "key_set": true }));
            }
            (Some("report"), None) => say(&report(&readers, None)),
            (Some("report"), Some(n)) => match n.parse() {
                Ok(expected) => say(&report(&readers, Some(expected))),
                Err(_) => say(&json!({ "error": format!("bad EXPECTED {n:?}") })),
            },
            (Some("quit"), None) => break,
            (None, _) => {}
            _ => say(&json!({ "error": format!("unknown command {line:?}") })),
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(msg) => {
            eprintln!("stream_readers: {msg}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("stream_readers: cannot build the tokio runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(args));
    // The readers are still running; they end with the runtime.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("stream_readers: {msg}");
            ExitCode::FAILURE
        }
    }
}
