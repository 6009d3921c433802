//! Reading and validating a Mooncake-style JSONL trace.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::Deserialize;

/// Prompts or outputs longer than this many tokens are rejected as implausible.
const MAX_TOKENS: u64 = 1 << 24;
/// Timestamps beyond this (1e13 ms, about 317 years) are rejected as implausible. The index
/// runs on a clock set to each request's timestamp (trace time from the trace's origin),
/// and that clock ends at 2^64 ns (about 1.8e13 ms, 584 years): with the longest TTL the
/// tool takes (`--ttls` up to 1e9 s, 1e12 ms) added, every accepted timestamp, and so the
/// trace's span, stays inside it (checked by a test below).
const MAX_TIMESTAMP_MS: f64 = 1e13;

/// One request of the trace, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRequest {
    /// Arrival time in milliseconds since the trace's origin.
    pub timestamp_ms: f64,
    /// Prompt length in tokens (at least 1).
    pub input_length: u64,
    /// Generated tokens.
    pub output_length: u64,
    /// One id per trace block of the prompt, chained.
    pub hash_ids: Vec<u64>,
}

/// A line as written in the file, before validation.
#[derive(Deserialize)]
struct Line {
    timestamp: f64,
    input_length: u64,
    output_length: u64,
    hash_ids: Vec<u64>,
}

/// A trace read from a file.
#[derive(Debug)]
pub struct Trace {
    /// The valid requests, in file order.
    pub requests: Vec<TraceRequest>,
    /// Lines skipped with `--skip-bad-lines`: (1-based line number, reason).
    pub skipped: Vec<(usize, String)>,
}

/// Reads `path`. Stops at the first malformed line unless `skip_bad_lines`; stops after
/// `limit` valid requests if given. Blank lines are ignored.
pub fn read(
    path: &Path,
    trace_block: u32,
    skip_bad_lines: bool,
    limit: Option<usize>,
) -> Result<Trace, String> {
    let shown = path.display();
    let file = File::open(path).map_err(|e| format!("cannot open trace '{shown}': {e}"))?;
    if file.metadata().is_ok_and(|m| m.is_dir()) {
        return Err(format!("cannot read trace '{shown}': it is a directory"));
    }
    let mut requests = Vec::new();
    let mut skipped = Vec::new();
    let mut last_ts = 0.0_f64;
    for (i, line) in BufReader::new(file).lines().enumerate() {
        if limit.is_some_and(|n| requests.len() >= n) {
            break;
        }
        let number = i + 1;
        let line = match line {
            // Invalid UTF-8: a bad line, the reader has moved past it.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => Err(format!("{e}")),
            Err(e) => return Err(format!("{shown}:{number}: cannot read: {e}")),
            Ok(text) => Ok(text),
        };
        let parsed = line.and_then(|text| {
            if text.trim().is_empty() {
                Ok(None)
            } else {
                parse_line(&text, trace_block, last_ts).map(Some)
            }
        });
        match parsed {
            Ok(Some(req)) => {
                last_ts = req.timestamp_ms;
                requests.push(req);
            }
            Ok(None) => {}
            Err(why) if skip_bad_lines => skipped.push((number, why)),
            Err(why) => {
                return Err(format!(
                    "{shown}:{number}: {why} (use --skip-bad-lines to skip such lines)"
                ))
            }
        }
    }
    if requests.is_empty() {
        let extra = if skipped.is_empty() {
            String::new()
        } else {
            format!(" ({} malformed lines skipped)", skipped.len())
        };
        return Err(format!("trace '{shown}' has no requests{extra}"));
    }
    Ok(Trace { requests, skipped })
}

/// Parses and checks one non-blank line.
pub fn parse_line(text: &str, trace_block: u32, last_ts: f64) -> Result<TraceRequest, String> {
    let line: Line = serde_json::from_str(text).map_err(|e| format!("invalid request: {e}"))?;
    let ts = line.timestamp;
    if !ts.is_finite() || ts < 0.0 {
        return Err(format!("timestamp {ts} is not a time >= 0 (ms)"));
    }
    if ts > MAX_TIMESTAMP_MS {
        return Err(format!(
            "timestamp {ts} ms is implausibly large (at most 1e13 ms, about 317 years: the \
             index's clock ends at 2^64 ns, about 584 years)"
        ));
    }
    if ts < last_ts {
        return Err(format!(
            "timestamp {ts} ms is before the previous request's {last_ts} ms \
             (the trace must be in time order)"
        ));
    }
    let input = line.input_length;
    if input == 0 {
        return Err("input_length is 0".into());
    }
    if input > MAX_TOKENS {
        return Err(format!("input_length {input} is implausibly large"));
    }
    if line.output_length > MAX_TOKENS {
        let output = line.output_length;
        return Err(format!("output_length {output} is implausibly large"));
    }
    let blocks = line.hash_ids.len() as u64;
    let tb = u64::from(trace_block);
    let needed = input.div_ceil(tb);
    if blocks != needed {
        return Err(format!(
            "input_length {input} spans {needed} trace blocks of {tb} tokens \
             but hash_ids has {blocks}"
        ));
    }
    Ok(TraceRequest {
        timestamp_ms: ts,
        input_length: input,
        output_length: line.output_length,
        hash_ids: line.hash_ids,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn accepts_a_good_line_and_rejects_bad_ones() {
        let ok = r#"{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}"#;
        let r = parse_line(ok, 512, 0.0).unwrap();
        assert_eq!((r.input_length, r.hash_ids.len()), (600, 2));
        assert!(parse_line(ok, 512, 6.0).unwrap_err().contains("time order"));
        let short = ok.replace("[1, 2]", "[1]");
        assert!(parse_line(&short, 512, 0.0)
            .unwrap_err()
            .contains("spans 2"));
        let zero = ok.replace("600", "0");
        assert!(parse_line(&zero, 512, 0.0).unwrap_err().contains("is 0"));
        let missing = r#"{"timestamp": 5, "input_length": 600, "output_length": 3}"#;
        assert!(parse_line(missing, 512, 0.0)
            .unwrap_err()
            .contains("hash_ids"));
        let negative = ok.replace("\"timestamp\": 5", "\"timestamp\": -1");
        assert!(parse_line(&negative, 512, 0.0)
            .unwrap_err()
            .contains(">= 0"));
        assert!(parse_line("{", 512, 0.0).is_err());
        let far = ok.replace("\"timestamp\": 5", "\"timestamp\": 1e300");
        assert!(parse_line(&far, 512, 0.0)
            .unwrap_err()
            .contains("implausibly"));
        // The index's clock ends at 2^64 ns, about 1.8447e13 ms: a timestamp past it (or
        // so close that a TTL would pass it) is an error, not a run of 0% TTL hits.
        for ts in ["1.9e13", "18446744073709.552", "1.0000001e13"] {
            let late = ok.replace("\"timestamp\": 5", &format!("\"timestamp\": {ts}"));
            let e = parse_line(&late, 512, 0.0).unwrap_err();
            assert!(
                e.contains("implausibly large") && e.contains("2^64 ns"),
                "{e}"
            );
        }
        let last = ok.replace("\"timestamp\": 5", "\"timestamp\": 1e13");
        assert_eq!(parse_line(&last, 512, 0.0).unwrap().timestamp_ms, 1e13);
        let long = ok.replace(
            "\"output_length\": 3",
            "\"output_length\": 18446744073709551615",
        );
        assert!(parse_line(&long, 512, 0.0)
            .unwrap_err()
            .contains("implausibly"));
    }

    #[test]
    fn the_latest_timestamp_plus_the_longest_ttl_stays_inside_the_clock() {
        let clock_end_ms = 2f64.powi(64) / 1e6;
        let latest = Duration::from_secs_f64(MAX_TIMESTAMP_MS / 1000.0)
            + Duration::from_secs_f64(crate::args::MAX_TTL_S);
        assert!(latest.as_secs_f64() * 1000.0 < clock_end_ms);
        assert!(latest.as_nanos() < 1u128 << 64);
    }
}
