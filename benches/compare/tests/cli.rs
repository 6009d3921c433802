//! The command line of `approx-kv-compare`: help, version and usage errors, one tiny run
//! (three requests, one round) that checks every subject's rows are printed and drawn, and a
//! small one over 1,024 workers.

use std::process::{Command, Output, Stdio};

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
        "--workers <N>",
        "[default: 16]",
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
    let cases: [(&[&str], &str); 9] = [
        (&["--rounds", "x"], "'x' for '--rounds <N>'"),
        (&["--rounds", "0"], "'0' for '--rounds <N>'"),
        (&["--threads", "-1"], "'-1' for '--threads <N>'"),
        (&["--workers", "0"], "'0' for '--workers <N>'"),
        (&["--workers", "65537"], "'65537' for '--workers <N>'"),
        (
            &["--only", "lru"],
            "'lru' for '--only <SUBJECT>'; possible values: ours, pool, actor, smg, token-tree",
        ),
        (&["--progres", "never"], "did you mean '--progress'?"),
        (&["extra"], "unexpected argument 'extra'"),
        (
            &["--rounds"],
            "a value is required for '--rounds <N>' but none was supplied (see --help)",
        ),
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

/// A trace file of `lines` in a fresh scratch directory; returns (directory, file).
fn scratch_trace(name: &str, lines: &[&str]) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!(
        "approx-kv-compare-cli-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    (dir, path)
}

/// A hash id that is not a whole number >= 0 is an error naming the line, not dropped.
#[test]
fn a_bad_hash_id_is_one_line_naming_the_line() {
    let (dir, path) = scratch_trace(
        "bad-id",
        &[
            r#"{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}"#,
            r#"{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1, -2]}"#,
        ],
    );
    let o = run(&[&["--trace", path.to_str().unwrap()], TINY.as_slice()].concat());
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("trace.jsonl:2: hash_ids[1] is -2, not an id"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Prompts all shorter than one block leave nothing to index: an input error, not a table
/// of figures over empty prompts.
#[test]
fn a_trace_without_a_full_block_is_an_error() {
    let (dir, path) = scratch_trace(
        "short",
        &[
            r#"{"timestamp": 0, "input_length": 50, "output_length": 1, "hash_ids": [1]}"#,
            r#"{"timestamp": 1, "input_length": 63, "output_length": 1, "hash_ids": [2]}"#,
        ],
    );
    let o = run(&[&["--trace", path.to_str().unwrap()], TINY.as_slice()].concat());
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no request has a full block of 64 tokens") && err.contains("has 63"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reader that closes the pipe early (`approx-kv-compare | head -1`): the bench ends
/// quietly with status 0, not with a "Broken pipe" panic (status 101). The pipe is closed
/// before the bench writes anything, so its first write fails, every time.
#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_approx-kv-compare"))
        .args(TINY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(o.stderr.is_empty(), "{}", text(&o.stderr));
}

/// The cells of a table row, without the outer bars.
fn cells(line: &str) -> Vec<&str> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(str::trim).collect()
}

/// The rows of the table in `out` (header excluded), as cells.
fn table(out: &str) -> Vec<Vec<&str>> {
    out.lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| figure"))
        .map(cells)
        .collect()
}

/// A tiny run prints every subject's round and its column beside Dynamo's, with SMG's
/// expiry cells n/a (neither of its indexes has a TTL), the same (block, worker) pairs for
/// SMG's ChainIndex as for ours (both indexes are exact here, so the same finds make the same
/// routing decisions), and draws both SMG indexes in both plots. Whether SMG's scores agree
/// with ours block for block is the unit tests' job (`src/subjects.rs`).
#[test]
fn a_tiny_run_reports_every_subject_smg_included() {
    let dir = std::env::temp_dir().join(format!("approx-kv-compare-cli-{}", std::process::id()));
    let dir_arg = dir.to_str().unwrap();
    let o = run(&[TINY.as_slice(), &["--svg", dir_arg]].concat());
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("; 16 workers;"), "{out}");
    for subject in ["ours", "pool", "actor", "smg", "token-tree"] {
        assert!(
            err.contains(&format!("round 1: {subject} Row {{")),
            "{subject}:\n{err}"
        );
    }
    let header = "| figure | ours | dynamo pool | ours / pool | target | met | dynamo actor \
                  | ours / actor | smg | ours / smg | smg token tree | ours / token tree |";
    assert!(out.contains(header), "{out}");
    let rows = table(&out);
    assert_eq!(rows.len(), 28, "{out}");
    for row in &rows {
        assert_eq!(row.len(), 12, "{row:?}");
        for (value, ratio) in [(row[8], row[9]), (row[10], row[11])] {
            if row[0].starts_with("expiry") {
                assert_eq!((value, ratio), ("n/a", "n/a"), "{row:?}");
            } else {
                let v: f64 = value.parse().unwrap_or_else(|_| panic!("{row:?}"));
                assert!(v.is_finite() && v >= 0.0, "{row:?}");
                assert!(ratio.parse::<f64>().is_ok(), "{row:?}");
            }
        }
    }
    assert!(out.contains("\nsmg token tree: SMG's TokenTree"), "{out}");
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
        assert!(drawn.contains("smg token tree"), "{svg}");
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

#[test]
fn only_token_tree_measures_the_token_tree_alone() {
    let o = run(&[TINY.as_slice(), &["--only", "token-tree"]].concat());
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("round 1: token-tree Row {"), "{out}");
    assert!(out.contains("lag_hidden_ms: NaN"), "{out}");
    assert!(!out.contains("| figure |"), "{out}");
}

/// Fifty requests over 1,024 workers: the header names the fleet and every subject's
/// figures print (SMG's ChainIndex takes 1,024 workers, so none is n/a but the expiry ones of
/// the SMG indexes).
#[test]
fn a_run_over_1024_workers_prints_the_fleet() {
    let o = run(&[
        "--workers",
        "1024",
        "--limit",
        "50",
        "--rounds",
        "1",
        "--progress",
        "never",
    ]);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("; 1024 workers;"), "{out}");
    let rows = table(&out);
    assert_eq!(rows.len(), 28, "{out}");
    for row in &rows {
        let na = row.iter().filter(|&&c| c == "n/a").count();
        let want = if row[0].starts_with("expiry") { 4 } else { 0 };
        assert_eq!(na, want, "{row:?}");
    }
    assert!(!out.contains("takes at most"), "{out}");
}

/// A fleet beyond SMG's ChainIndex (1,024 workers): its figures over the fleet print as n/a
/// with a note saying why, its hashing and shared-prefix figures stand, and every other
/// subject runs as usual.
#[test]
fn a_fleet_beyond_the_chain_index_leaves_its_cells_na() {
    let o = run(&[TINY.as_slice(), &["--workers", "2000"]].concat());
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("; 2000 workers;"), "{out}");
    assert!(
        out.contains("a ChainIndex takes at most 1024 workers: its figures over 2000 workers"),
        "{out}"
    );
    for row in table(&out) {
        let stands = row[0].starts_with("hash")
            || row[0].starts_with("find 256 blocks")
            || row[0].starts_with("record 256 blocks");
        let smg = (row[8], row[9]);
        if stands {
            assert!(smg.0.parse::<f64>().is_ok(), "{row:?}");
        } else {
            assert_eq!(smg, ("n/a", "n/a"), "{row:?}");
        }
        if !row[0].starts_with("expiry") {
            assert!(row[10].parse::<f64>().is_ok(), "{row:?}");
        }
    }
}
