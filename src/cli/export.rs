//! `intake export`: an endpoint's records (`GET /api/v1/data/{slug}/export`) into a file or
//! onto standard output, with a progress line when a person watches.
//!
//! The server sends the export chunked and, when it has to stop midway (the key revoked, the
//! store failing), ends the connection without the last chunk. Such a cut answer is an error
//! here, never a shorter file: `--out FILE` is written beside FILE and renamed into place only
//! once the answer has ended properly.

use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;

use super::error_answer;

/// How long connecting to the server may take; the export itself has no deadline, since a
/// large one takes as long as it takes.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the progress line is redrawn at most.
const REDRAW_EVERY: Duration = Duration::from_millis(200);

#[derive(Args, Debug)]
pub(super) struct ExportArgs {
    /// Base URL of the running server.
    #[arg(long, env = "INTAKE_SERVER", default_value = "http://127.0.0.1:8080")]
    server: String,
    /// A data API key of the endpoint that may read; it chooses the environment (sandbox or
    /// production). Prefer the INTAKE_API_KEY variable: a flag shows in the shell's history
    /// and in `ps`.
    #[arg(long, env = "INTAKE_API_KEY", hide_env_values = true)]
    key: String,
    /// The endpoint's slug.
    #[arg(long)]
    slug: String,
    /// ndjson (a record per line), csv, or json (one array).
    #[arg(long, default_value = "ndjson", value_parser = ["ndjson", "csv", "json"])]
    format: String,
    /// The window's start, included: YYYY-MM-DD (midnight UTC) or an RFC 3339 time.
    #[arg(long)]
    start: Option<String>,
    /// The window's end, included: YYYY-MM-DD (midnight UTC) or an RFC 3339 time.
    #[arg(long)]
    end: Option<String>,
    /// Only the records whose payload contains this text (3 characters or more, any case).
    #[arg(long)]
    q: Option<String>,
    /// asc (oldest first) or desc (newest first).
    #[arg(long, default_value = "asc", value_parser = ["asc", "desc"])]
    order: String,
    /// The CSV columns after id, created_at and updated_at: comma-separated field names or
    /// dotted paths (address.city); without it, the keys of the newest records.
    #[arg(long)]
    fields: Option<String>,
    /// Write the export into FILE, replaced only once the whole export has arrived, instead
    /// of standard output.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// `intake export`: one GET of the export, its body copied to `--out` or standard output.
pub(super) fn export(args: &ExportArgs) -> Result<(), String> {
    if let Some(path) = &args.out {
        if path.file_name().is_none() || path.is_dir() {
            return Err(format!("--out {}: not a file name", path.display()));
        }
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .build()
        .into();
    let slug: String = form_urlencoded::byte_serialize(args.slug.as_bytes()).collect();
    let url = format!(
        "{}/api/v1/data/{slug}/export",
        args.server.trim_end_matches('/')
    );
    let mut request = agent
        .get(&url)
        .header("Authorization", format!("Bearer {}", args.key))
        .query("format", &args.format)
        .query("order", &args.order);
    for (name, value) in [
        ("start", &args.start),
        ("end", &args.end),
        ("q", &args.q),
        ("fields", &args.fields),
    ] {
        if let Some(value) = value {
            request = request.query(name, value);
        }
    }
    let started = Instant::now();
    let mut response = request
        .call()
        .map_err(|e| format!("cannot reach {}: {e}", args.server))?;
    if !response.status().is_success() {
        return Err(error_answer(&mut response));
    }
    // On a terminal only, and not on the one the records themselves scroll on.
    let live =
        std::io::stderr().is_terminal() && (args.out.is_some() || !std::io::stdout().is_terminal());
    let mut progress = Progress::new(RecordCounter::new(&args.format), started, live);
    let mut body = response.body_mut().as_reader();
    let result = match &args.out {
        Some(path) => save(&mut body, path, &mut progress),
        None => {
            let mut stdout = std::io::stdout().lock();
            copy(&mut body, &mut stdout, &mut progress).map_err(|failure| match failure {
                Failure::Cut(err) => format!(
                    "{}; standard output received only part of it",
                    cut(&progress, &err)
                ),
                Failure::Write(err) => format!("cannot write to standard output: {err}"),
            })
        }
    };
    progress.clear();
    if result.is_ok() && live {
        let to = args.out.as_ref().map_or_else(
            || "standard output".to_string(),
            |p| p.display().to_string(),
        );
        eprintln!(
            "intake: exported {} to {to} {}",
            progress.amount(),
            progress.pace()
        );
    }
    result
}

/// Why copying the answer stopped before its end.
enum Failure {
    /// The answer ended before its last chunk, or the connection failed.
    Cut(std::io::Error),
    Write(std::io::Error),
}

/// The message of a cut answer.
fn cut(progress: &Progress, err: &std::io::Error) -> String {
    format!(
        "the export was cut short after {}: the server stopped it (its key revoked or no \
         longer allowed to read, a failure: see the server's log) or the connection broke \
         ({err})",
        progress.amount()
    )
}

/// Copies the body to `out` until the answer has ended properly.
fn copy(body: &mut dyn Read, out: &mut dyn Write, progress: &mut Progress) -> Result<(), Failure> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => return out.flush().map_err(Failure::Write),
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(Failure::Cut(err)),
        };
        out.write_all(&buf[..n]).map_err(Failure::Write)?;
        progress.add(&buf[..n]);
    }
}

/// Writes the body into `FILE.partial` beside `path` and renames it to `path` once the answer
/// has ended properly: `path` is then the whole export; otherwise it is left as it was and the
/// partial file removed.
fn save(body: &mut dyn Read, path: &Path, progress: &mut Progress) -> Result<(), String> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    let partial = path.with_file_name(name);
    // A partial file an interrupted export left behind.
    let _ = std::fs::remove_file(&partial);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&partial)
        .map_err(|e| format!("cannot create {}: {e}", partial.display()))?;
    let saved = copy(body, &mut file, progress)
        .and_then(|()| file.sync_all().map_err(Failure::Write))
        .and_then(|()| std::fs::rename(&partial, path).map_err(Failure::Write));
    saved.map_err(|failure| {
        let _ = std::fs::remove_file(&partial);
        match failure {
            Failure::Cut(err) => format!("{}; {} not written", cut(progress, &err), path.display()),
            Failure::Write(err) => format!("cannot write {}: {err}", path.display()),
        }
    })
}

/// What has arrived so far, shown on stderr as one line redrawn in place when `live`.
struct Progress {
    records: RecordCounter,
    bytes: u64,
    started: Instant,
    live: bool,
    drawn_at: Option<Instant>,
}

impl Progress {
    fn new(records: RecordCounter, started: Instant, live: bool) -> Progress {
        Progress {
            records,
            bytes: 0,
            started,
            live,
            drawn_at: None,
        }
    }

    fn add(&mut self, data: &[u8]) {
        self.records.feed(data);
        self.bytes += data.len() as u64;
        if self.live && self.drawn_at.is_none_or(|at| at.elapsed() >= REDRAW_EVERY) {
            self.drawn_at = Some(Instant::now());
            eprint!("\r\x1b[2Kintake: {} {}", self.amount(), self.pace());
        }
    }

    /// Removes the progress line, if one is drawn.
    fn clear(&mut self) {
        if self.drawn_at.take().is_some() {
            eprint!("\r\x1b[2K");
        }
    }

    /// `1234 records (5.6 MB)`.
    fn amount(&self) -> String {
        let records = self.records.count();
        let noun = if records == 1 { "record" } else { "records" };
        let size = if self.bytes < 1_000_000 {
            format!("{} bytes", self.bytes)
        } else {
            format!("{:.1} MB", self.bytes as f64 / 1_000_000.0)
        };
        format!("{records} {noun} ({size})")
    }

    /// `in 1.2 s, 4.7 MB/s`.
    fn pace(&self) -> String {
        let seconds = self.started.elapsed().as_secs_f64();
        let rate = self.bytes as f64 / 1_000_000.0 / seconds.max(0.001);
        format!("in {seconds:.1} s, {rate:.1} MB/s")
    }
}

/// Counts the records of an export's text as it arrives, whatever the chunks' boundaries.
#[derive(Debug)]
enum RecordCounter {
    /// NDJSON: a line per record (JSON escapes the line breaks inside strings).
    Lines { lines: u64 },
    /// CSV: a row ends at a line feed outside quotes (a cell may hold line breaks, and `""`
    /// inside quotes turns the state twice); the first row is the header.
    CsvRows { rows: u64, quoted: bool },
    /// One JSON array: a record is an object opened right inside it, outside strings.
    JsonArray {
        records: u64,
        depth: u32,
        in_string: bool,
        escaped: bool,
    },
}

impl RecordCounter {
    fn new(format: &str) -> RecordCounter {
        match format {
            "csv" => RecordCounter::CsvRows {
                rows: 0,
                quoted: false,
            },
            "json" => RecordCounter::JsonArray {
                records: 0,
                depth: 0,
                in_string: false,
                escaped: false,
            },
            _ => RecordCounter::Lines { lines: 0 },
        }
    }

    fn feed(&mut self, data: &[u8]) {
        match self {
            RecordCounter::Lines { lines } => {
                *lines += memchr::memchr_iter(b'\n', data).count() as u64;
            }
            RecordCounter::CsvRows { rows, quoted } => {
                for at in memchr::memchr2_iter(b'"', b'\n', data) {
                    match data[at] {
                        b'"' => *quoted = !*quoted,
                        _ if !*quoted => *rows += 1,
                        _ => {}
                    }
                }
            }
            RecordCounter::JsonArray {
                records,
                depth,
                in_string,
                escaped,
            } => {
                for &byte in data {
                    if *in_string {
                        match byte {
                            _ if *escaped => *escaped = false,
                            b'\\' => *escaped = true,
                            b'"' => *in_string = false,
                            _ => {}
                        }
                        continue;
                    }
                    match byte {
                        b'"' => *in_string = true,
                        b'{' | b'[' => {
                            if byte == b'{' && *depth == 1 {
                                *records += 1;
                            }
                            *depth += 1;
                        }
                        b'}' | b']' => *depth = depth.saturating_sub(1),
                        _ => {}
                    }
                }
            }
        }
    }

    fn count(&self) -> u64 {
        match self {
            RecordCounter::Lines { lines } => *lines,
            RecordCounter::CsvRows { rows, .. } => rows.saturating_sub(1),
            RecordCounter::JsonArray { records, .. } => *records,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count after feeding `text` in pieces of every size from 1 byte to all of it.
    fn counts(format: &str, text: &str) -> Vec<u64> {
        (1..=text.len())
            .map(|size| {
                let mut counter = RecordCounter::new(format);
                for piece in text.as_bytes().chunks(size) {
                    counter.feed(piece);
                }
                counter.count()
            })
            .collect()
    }

    #[test]
    fn records_are_counted_whatever_the_chunk_boundaries() {
        let ndjson =
            "{\"id\":\"a\",\"payload\":{\"t\":\"x\\ny\"}}\n{\"id\":\"b\",\"payload\":{}}\n";
        assert!(counts("ndjson", ndjson).iter().all(|&n| n == 2));
        let csv = "id,note\r\na,\"line one\r\nline \"\"two\"\", three\"\r\nb,\"\"\r\nc,plain\r\n";
        assert!(counts("csv", csv).iter().all(|&n| n == 3), "{csv}");
        assert!(counts("csv", "id,created_at\r\n").iter().all(|&n| n == 0));
        let json = r#"[{"id":"a","payload":{"x":{"id":"not a record"},"s":"{[\"}"}},{"id":"b","payload":[{}]}]"#;
        assert!(counts("json", json).iter().all(|&n| n == 2), "{json}");
        assert!(counts("json", "[]").iter().all(|&n| n == 0));
    }
}
