//! Which compression pays for itself on stored payloads (issue #22, goal 3).
//!
//! Reads a JSON-lines file of records (one payload per line, as `search_gen.py` writes them)
//! and compresses every payload on its own, as the store does with a record value, with each
//! candidate: LZ4 (lz4_flex, block format, the crate tantivy already brings in) and zstd at
//! levels 1 and 3, without and with a dictionary trained on the first records. For each it
//! prints the stored bytes against the payload bytes and the CPU time per record to compress
//! and to decompress (one thread, the median of `--reps` passes over all records).
//!
//! Usage: `payload_codec FILE [--records N] [--reps R] [--dict-samples N]` (defaults: every
//! line, 3 passes, a dictionary trained on 5,000 records).
//! `benches/payload_codec.sh` generates the records and runs it; the figures are in
//! docs/src/benchmarks.md ("Payload compression").

use std::process::ExitCode;
use std::time::Instant;

/// The dictionary's size (the store's largest).
const DICT_BYTES: usize = 64 * 1024;

struct Args {
    file: String,
    records: usize,
    reps: usize,
    /// Records the dictionary is trained on, taken from the start of the file.
    dict_samples: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut file = None;
    let mut records = usize::MAX;
    let mut reps = 3;
    let mut dict_samples = 5_000;
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<usize, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .filter(|&n: &usize| n > 0)
                .ok_or_else(|| format!("{name} takes a positive integer"))
        };
        match arg.as_str() {
            "--records" => records = number("--records")?,
            "--reps" => reps = number("--reps")?,
            "--dict-samples" => dict_samples = number("--dict-samples")?,
            "--help" | "-h" => return Err(String::new()),
            // `cargo bench` passes --bench to every harness-less bench.
            "--bench" => {}
            _ if file.is_none() && !arg.starts_with('-') => file = Some(arg),
            _ => return Err(format!("unexpected argument {arg}")),
        }
    }
    Ok(Args {
        file: file.ok_or("the records file is missing")?,
        records,
        reps,
        dict_samples,
    })
}

/// One candidate: compresses a payload into `out` (cleared first), and decompresses `stored`
/// (of a payload of `len` bytes) into `out`.
trait Codec {
    fn name(&self) -> String;
    fn compress(&mut self, payload: &[u8], out: &mut Vec<u8>);
    fn decompress(&mut self, stored: &[u8], len: usize, out: &mut Vec<u8>);
}

struct Lz4;

impl Codec for Lz4 {
    fn name(&self) -> String {
        "lz4 (lz4_flex block)".into()
    }
    fn compress(&mut self, payload: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.resize(lz4_flex::block::get_maximum_output_size(payload.len()), 0);
        let n = lz4_flex::block::compress_into(payload, out).unwrap_or(0);
        out.truncate(n);
    }
    fn decompress(&mut self, stored: &[u8], len: usize, out: &mut Vec<u8>) {
        out.clear();
        out.resize(len, 0);
        let n = lz4_flex::block::decompress_into(stored, out).unwrap_or(0);
        assert_eq!(n, len, "lz4 round trip");
    }
}

struct Zstd {
    level: i32,
    dict: Option<Vec<u8>>,
    compressor: zstd::bulk::Compressor<'static>,
    decompressor: zstd::bulk::Decompressor<'static>,
}

impl Zstd {
    fn new(level: i32, dict: Option<Vec<u8>>) -> std::io::Result<Self> {
        let (compressor, decompressor) = match &dict {
            Some(d) => (
                zstd::bulk::Compressor::with_dictionary(level, d)?,
                zstd::bulk::Decompressor::with_dictionary(d)?,
            ),
            None => (
                zstd::bulk::Compressor::new(level)?,
                zstd::bulk::Decompressor::new()?,
            ),
        };
        Ok(Zstd {
            level,
            dict,
            compressor,
            decompressor,
        })
    }
}

impl Codec for Zstd {
    fn name(&self) -> String {
        match &self.dict {
            Some(d) => format!("zstd -{} + {} KiB dictionary", self.level, d.len() / 1024),
            None => format!("zstd -{}", self.level),
        }
    }
    fn compress(&mut self, payload: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.reserve(zstd::zstd_safe::compress_bound(payload.len()));
        self.compressor
            .compress_to_buffer(payload, out)
            .expect("zstd compress into a buffer of the bound's size");
    }
    fn decompress(&mut self, stored: &[u8], len: usize, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(len);
        let n = self
            .decompressor
            .decompress_to_buffer(stored, out)
            .expect("zstd round trip");
        assert_eq!(n, len, "zstd round trip");
    }
}

/// The median of `reps` timings of `pass`, in nanoseconds per record.
fn median_ns(reps: usize, records: usize, mut pass: impl FnMut()) -> f64 {
    let mut times: Vec<f64> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            pass();
            start.elapsed().as_nanos() as f64 / records as f64
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(msg) => {
            eprintln!(
                "{msg}\nusage: payload_codec FILE [--records N] [--reps R] [--dict-samples N]"
            );
            return ExitCode::from(2);
        }
    };
    let text = match std::fs::read(&args.file) {
        Ok(text) => text,
        Err(err) => {
            eprintln!("payload_codec: cannot read {}: {err}", args.file);
            return ExitCode::FAILURE;
        }
    };
    let payloads: Vec<&[u8]> = text
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .take(args.records)
        .collect();
    let payload_bytes: usize = payloads.iter().map(|p| p.len()).sum();
    let n = payloads.len();
    if n == 0 {
        eprintln!("payload_codec: no records in {}", args.file);
        return ExitCode::FAILURE;
    }
    let samples: Vec<&[u8]> = payloads.iter().take(args.dict_samples).copied().collect();
    let dict = match zstd::dict::from_samples(&samples, DICT_BYTES) {
        Ok(dict) => dict,
        Err(err) => {
            eprintln!("payload_codec: training the zstd dictionary failed: {err}");
            return ExitCode::FAILURE;
        }
    };
    let mut codecs: Vec<Box<dyn Codec>> = vec![Box::new(Lz4)];
    for (level, dict) in [
        (1, None),
        (3, None),
        (1, Some(dict.clone())),
        (3, Some(dict)),
    ] {
        match Zstd::new(level, dict) {
            Ok(zstd) => codecs.push(Box::new(zstd)),
            Err(err) => {
                eprintln!("payload_codec: zstd context: {err}");
                return ExitCode::FAILURE;
            }
        }
    }

    println!(
        "{n} records, {payload_bytes} payload bytes ({:.0} per record); one thread, median of {} passes",
        payload_bytes as f64 / n as f64,
        args.reps
    );
    println!(
        "| codec | stored / payload | payload / stored | compress ns/record | decompress ns/record |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    let mut out = Vec::new();
    for codec in &mut codecs {
        let stored: Vec<Vec<u8>> = payloads
            .iter()
            .map(|p| {
                codec.compress(p, &mut out);
                out.clone()
            })
            .collect();
        let stored_bytes: usize = stored.iter().map(Vec::len).sum();
        let compress = median_ns(args.reps, n, || {
            for p in &payloads {
                codec.compress(p, &mut out);
            }
        });
        let decompress = median_ns(args.reps, n, || {
            for (s, p) in stored.iter().zip(&payloads) {
                codec.decompress(s, p.len(), &mut out);
            }
        });
        println!(
            "| {} | {:.3} | {:.2}× | {:.0} | {:.0} |",
            codec.name(),
            stored_bytes as f64 / payload_bytes as f64,
            payload_bytes as f64 / stored_bytes as f64,
            compress,
            decompress
        );
    }
    ExitCode::SUCCESS
}
