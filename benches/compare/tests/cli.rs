//! The command line of `approx-kv-compare`: help, version and usage errors. None of these
//! runs a benchmark.

use std::process::{Command, Output};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_approx-kv-compare"))
        .args(args)
        .output()
        .unwrap()
}

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
            "'lru' for '--only <SUBJECT>'; possible values: ours, pool, actor",
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
