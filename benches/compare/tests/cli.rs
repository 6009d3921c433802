//! The command line of `approx-kv-compare`: help, version and usage errors, and one tiny run
//! (three requests, one round) that checks every subject's rows are printed and drawn.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_approx-kv-compare"))
        .args(args)
        .output()
        .unwrap()
}

/// The smallest run: three requests, one round, one thread, no progress bar.
const TINY: [&str; 8] = [
    "--limit",
    "3",
    "--rounds",
    "1",
    "--threads",
    "1",
    "--progress",
    "never",
];

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn help_lists_the_options_with_their_defaults() {
    let o = run(&["--help"]);
    assert!(o.status.success());
    let out = text(&o.stdout);
    for opt in [
        "Usage: approx-kv-compare [OPTIONS]",
        "--trace <PATH>",
        "--rounds <N>",
        "[default: 5]",
        "--threads <N>",
        "[default: 2]",
        "--only <SUBJECT>",
        "--svg <DIR>",
        "--progress <WHEN>",
        "--version",
    ] {
        assert!(out.contains(opt), "{opt} missing in\n{out}");
    }
}

#[test]
fn version_prints_the_version() {
    let o = run(&["--version"]);
    assert!(o.status.success());
    assert_eq!(
        text(&o.stdout).trim(),
        format!("approx-kv-compare {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn usage_errors_are_one_line_naming_the_problem() {
    let cases: [(&[&str], &str); 6] = [
        (&["--rounds", "x"], "'x' for '--rounds <N>'"),
        (&["--rounds", "0"], "'0' for '--rounds <N>'"),
        (&["--threads", "-1"], "'-1' for '--threads <N>'"),
        (
            &["--only", "lru"],
            "'lru' for '--only <SUBJECT>'; possible values: ours, pool, actor, smg",
        ),
        (&["--progres", "never"], "did you mean '--progress'?"),
        (&["extra"], "unexpected argument 'extra'"),
    ];
    for (args, why) in cases {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = text(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(why) && err.contains("--help"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn a_missing_trace_is_one_line_naming_it() {
    let o = run(&["--trace", "/nonexistent/trace.jsonl"]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: cannot read trace '/nonexistent/trace.jsonl'"),
        "{err}"
    );
}

/// The cells of a table row, without the outer bars.
fn cells(line: &str) -> Vec<&str> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(str::trim).collect()
}

/// A tiny run prints every subject's round and its column beside Dynamo's, with SMG's
/// expiry cells n/a (it has no TTL), the same (block, worker) pairs as ours (both indexes are
/// exact here, so the same finds make the same routing decisions), and draws SMG in both
/// plots. Whether SMG's scores agree with ours block for block is the unit tests' job
/// (`src/subjects.rs`).
#[test]
fn a_tiny_run_reports_every_subject_smg_included() {
    let dir = std::env::temp_dir().join(format!("approx-kv-compare-cli-{}", std::process::id()));
    let dir_arg = dir.to_str().unwrap();
    let o = run(&[TINY.as_slice(), &["--svg", dir_arg]].concat());
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{out}\n{err}");
    for subject in ["ours", "pool", "actor", "smg"] {
        assert!(
            err.contains(&format!("round 1: {subject} Row {{")),
            "{subject}:\n{err}"
        );
    }
    let header = "| figure | ours | dynamo pool | ours / pool | target | met | dynamo actor \
                  | ours / actor | smg | ours / smg |";
    assert!(out.contains(header), "{out}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| figure"))
        .map(cells)
        .collect();
    assert_eq!(rows.len(), 25, "{out}");
    for row in &rows {
        assert_eq!(row.len(), 10, "{row:?}");
        let (smg, vs_smg) = (row[8], row[9]);
        if row[0].starts_with("expiry") {
            assert_eq!((smg, vs_smg), ("n/a", "n/a"), "{row:?}");
        } else {
            let v: f64 = smg.parse().unwrap_or_else(|_| panic!("{row:?}"));
            assert!(v.is_finite() && v >= 0.0, "{row:?}");
            assert!(vs_smg.parse::<f64>().is_ok(), "{row:?}");
        }
    }
    let pairs = rows
        .iter()
        .find(|r| r[0] == "(block, worker) pairs stored")
        .expect("pairs row");
    assert_eq!(
        pairs[1], pairs[8],
        "ours and smg stored different pairs: {pairs:?}"
    );
    for svg in ["bench-threads.svg", "bench-find-workers.svg"] {
        let drawn = std::fs::read_to_string(dir.join(svg)).unwrap();
        assert!(drawn.contains("smg chain index"), "{svg}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn only_smg_measures_smg_alone() {
    let o = run(&[TINY.as_slice(), &["--only", "smg"]].concat());
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("round 1: smg Row {"), "{out}");
    assert!(out.contains("lag_hidden_ms: NaN"), "{out}");
    assert!(!out.contains("| figure |"), "{out}");
}
