//! W3C Trace Context: the `traceparent` header, and the ids of spans.
//!
//! A request that arrives with a valid `traceparent` continues its caller's trace; the server
//! records its own span as a child, and passes the context on: into the ingest writer's spans
//! and into the webhook deliveries the write makes, whose attempts carry a `traceparent` of
//! their own to the receiver (see `core::telemetry` for where spans go).

use crate::core::crypto::hex;
use crate::core::ids::random_bytes;

/// Where a span sits: its trace, its own id, and whether the caller asked for it to be
/// recorded (the `sampled` flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceContext {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub sampled: bool,
}

impl TraceContext {
    /// The start of a new trace.
    pub fn root() -> TraceContext {
        TraceContext {
            trace_id: nonzero(random_bytes),
            span_id: nonzero(random_bytes),
            sampled: true,
        }
    }

    /// A new span in the same trace (its parent is this one).
    pub fn child(&self) -> TraceContext {
        TraceContext {
            span_id: nonzero(random_bytes),
            ..*self
        }
    }

    /// A `traceparent` header value; `None` when it is not one (then a new trace starts).
    /// As the specification asks, a later version is read as far as version 00 goes.
    pub fn parse(header: &str) -> Option<TraceContext> {
        let mut parts = header.trim().split('-');
        let (version, trace, span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        // A later version is read as version 00 (its extra fields ignored); ff is invalid.
        let [version]: [u8; 1] = lower_hex(version)?;
        if version == 0xff || (version == 0 && parts.next().is_some()) {
            return None;
        }
        let trace_id: [u8; 16] = lower_hex(trace)?;
        let span_id: [u8; 8] = lower_hex(span)?;
        let [flags]: [u8; 1] = lower_hex(flags)?;
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceContext {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// As a `traceparent` header value.
    pub fn header(&self) -> String {
        format!(
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&self.span_id),
            u8::from(self.sampled)
        )
    }
}

/// `N` bytes from exactly `2 * N` lowercase hex digits.
fn lower_hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digits = text.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let value = |d: u8| match d {
        b'0'..=b'9' => Some(d - b'0'),
        b'a'..=b'f' => Some(d - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(digits.chunks(2)) {
        *byte = value(pair[0])? << 4 | value(pair[1])?;
    }
    Some(out)
}

/// Random ids are never all zeros (the specification's invalid value).
fn nonzero<const N: usize>(random: fn() -> [u8; N]) -> [u8; N] {
    loop {
        let id = random();
        if id != [0; N] {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_writes_traceparent() {
        let header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let ctx = TraceContext::parse(header).unwrap();
        assert!(ctx.sampled);
        assert_eq!(ctx.header(), header);
        let child = ctx.child();
        assert_eq!(child.trace_id, ctx.trace_id);
        assert_ne!(child.span_id, ctx.span_id);
        for bad in [
            "",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad}");
        }
        let later =
            TraceContext::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x");
        assert_eq!(later, Some(ctx));
        let unsampled =
            TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
        assert!(!unsampled.unwrap().sampled);
    }
}
