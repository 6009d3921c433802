//! Integration tests of the `approx-kv-replay` binary on tiny traces written here.
//! Nothing is timing-based: hit rates come from a simulated clock.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_approx-kv-replay");

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("approx-kv-replay-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_trace(dir: &std::path::Path, lines: &[&str]) -> PathBuf {
    let path = dir.join("trace.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    path
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// Runs `args` with the [`SMALL`] options, which must succeed; its standard output.
fn run_small(args: &[&str]) -> String {
    let args: Vec<&str> = args.iter().chain(SMALL.iter()).copied().collect();
    let o = run(&args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    stdout(&o)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The table line of `policy`.
fn row<'a>(out: &'a str, policy: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{policy} ")))
        .unwrap_or_else(|| panic!("no row for {policy} in:\n{out}"))
}

/// A conversation growing by one trace block per turn, one turn a second.
const CHAT: [&str; 3] = [
    r#"{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]}"#,
    r#"{"timestamp": 1000, "input_length": 1536, "output_length": 10, "hash_ids": [1, 2, 3]}"#,
    r#"{"timestamp": 2000, "input_length": 2048, "output_length": 10, "hash_ids": [1, 2, 3, 4]}"#,
];

/// Options that make the tiny trace easy to reason about: one index block per trace
/// block, two workers.
const SMALL: [&str; 6] = [
    "--block-size",
    "512",
    "--workers",
    "2",
    "--no-plot",
    "--no-progress",
];

#[test]
fn hit_rates_on_a_tiny_conversation_are_exact() {
    let dir = scratch("exact");
    let trace = write_trace(&dir, &CHAT);
    let out = run_small(&[trace.to_str().unwrap(), "--ttls", "0.5,60"]);
    // 9 prompt blocks. Round-robin: turn 3 lands on turn 1's worker, which holds 2.
    assert!(row(&out, "round-robin").contains("22.2%"), "{out}");
    // Oracle and a long TTL follow the conversation: 0 + 2 + 3 blocks.
    assert!(row(&out, "oracle").contains("55.6%"), "{out}");
    let long = row(&out, "approx ttl=60s");
    assert!(long.contains("55.6%") && long.contains("1.00x"), "{out}");
    // Caches far larger than the trace: the capacity-only index forgets nothing either.
    assert!(row(&out, "approx-capacity").contains("55.6%"), "{out}");
    // A 0.5 s TTL forgets each turn before the next: turn 2 goes to the other worker,
    // turn 3 back to the first, which still holds turn 1's 2 blocks.
    let short = row(&out, "approx ttl=0.5s");
    assert!(short.contains("22.2%") && short.contains("0.40x"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn runs_on_the_bundled_trace_without_arguments() {
    let o = run(&["--limit", "100", "--no-plot"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("conversation_head2000.jsonl: 100 requests"),
        "{out}"
    );
    for policy in [
        "round-robin",
        "random",
        "approx ttl=60s",
        "approx ttl=30m",
        "oracle",
    ] {
        row(&out, policy);
    }
}

#[test]
fn writes_the_plot() {
    let dir = scratch("plot");
    let trace = write_trace(&dir, &CHAT);
    let plot = dir.join("sub/hits.svg");
    let o = run(&[
        trace.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
        "--no-progress",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("oracle") && svg.contains("approx ttl=2m"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn threads_and_pacing_run_to_the_end() {
    let dir = scratch("threads");
    let trace = write_trace(&dir, &CHAT);
    let path = trace.to_str().unwrap();
    for extra in [["--threads", "3"], ["--speedup", "1000"]] {
        let mut args = vec![path, "--ttls", "60"];
        args.extend(SMALL);
        args.extend(extra);
        let o = run(&args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
        row(&stdout(&o), "approx ttl=60s");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_malformed_line_is_named_and_can_be_skipped() {
    let dir = scratch("malformed");
    let bad = r#"{"timestamp": 1500, "input_length": 100, "hash_ids": [7]}"#;
    let trace = write_trace(&dir, &[CHAT[0], CHAT[1], bad, CHAT[2]]);
    let path = trace.to_str().unwrap();
    let o = run(&[path, "--no-plot"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("trace.jsonl:3:") && err.contains("output_length"),
        "{err}"
    );
    assert!(err.contains("--skip-bad-lines"), "{err}");
    assert!(o.stdout.is_empty());

    let o = run(&[path, "--no-plot", "--skip-bad-lines"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("skipped 1 malformed lines"));
    assert!(stderr(&o).contains("line 3:"));
    assert!(stdout(&o).contains(": 3 requests"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn inconsistent_or_unordered_requests_are_rejected() {
    let dir = scratch("inconsistent");
    let cases = [
        (
            r#"{"timestamp": 5000, "input_length": 2000, "output_length": 1, "hash_ids": [1]}"#,
            "spans 4 trace blocks",
        ),
        (
            r#"{"timestamp": 500, "input_length": 100, "output_length": 1, "hash_ids": [1]}"#,
            "before the previous request",
        ),
        (
            r#"{"timestamp": 5000, "input_length": 0, "output_length": 1, "hash_ids": []}"#,
            "input_length is 0",
        ),
        ("not json", "invalid request"),
    ];
    for (line, why) in cases {
        let trace = write_trace(&dir, &[CHAT[0], CHAT[1], line]);
        let o = run(&[trace.to_str().unwrap(), "--no-plot"]);
        assert_eq!(o.status.code(), Some(1), "{line}");
        let err = stderr(&o);
        assert!(err.contains(":3:") && err.contains(why), "{line}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_line_that_is_not_utf8_is_a_bad_line() {
    let dir = scratch("utf8");
    let path = dir.join("trace.jsonl");
    let mut bytes = format!("{}\n", CHAT[0]).into_bytes();
    bytes.extend(b"{\"timestamp\": \xff\xfe}\n");
    bytes.extend(format!("{}\n", CHAT[1]).into_bytes());
    std::fs::write(&path, bytes).unwrap();
    let path = path.to_str().unwrap();
    let o = run(&[path, "--no-plot"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("trace.jsonl:2:"), "{}", stderr(&o));
    let o = run(&[path, "--no-plot", "--skip-bad-lines"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(": 2 requests"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_and_empty_traces_are_errors() {
    let dir = scratch("empty");
    let o = run(&[dir.join("nope.jsonl").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot open trace"), "{}", stderr(&o));

    let o = run(&[dir.to_str().unwrap(), "--skip-bad-lines"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is a directory"), "{}", stderr(&o));

    let trace = write_trace(&dir, &["", "   "]);
    let o = run(&[trace.to_str().unwrap(), "--no-plot"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("has no requests"), "{}", stderr(&o));

    let trace = write_trace(&dir, &["{}"]);
    let o = run(&[trace.to_str().unwrap(), "--no-plot", "--skip-bad-lines"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no requests (1 malformed lines skipped)"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn nonsensical_options_are_rejected_on_one_line() {
    let cases: [(&[&str], &str); 14] = [
        (&["--workers", "0"], "'--workers <N>': must be at least 1"),
        (&["--workers", "5000"], "at most 4096"),
        (&["--cache-blocks", "-3"], "'-3' for '--cache-blocks <N>'"),
        (
            &["--block-size=0"],
            "'--block-size <N>': must be at least 1",
        ),
        (&["--threads", "two"], "'two' is not a whole number"),
        (&["--speedup", "0"], "must be a finite number > 0"),
        (
            &["--speedup", "2", "--max-rate"],
            "cannot be used with '--max-rate'",
        ),
        (&["--speedup", "1e-300"], "between 0.001 and 1e9"),
        (&["--ttls", "60,abc"], "'abc' for '--ttls <LIST>'"),
        (&["--threads"], "a value is required for '--threads <N>'"),
        (&["--frobnicate"], "unexpected argument '--frobnicate'"),
        (&["--worker", "3"], "did you mean '--workers'?"),
        (&["a.jsonl", "b.jsonl"], "unexpected argument 'b.jsonl'"),
        (
            &["--policies", "oracle,lru"],
            "'lru' for '--policies <LIST>'; possible values: round-robin, random, approx",
        ),
    ];
    for (args, why) in cases {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(why) && err.contains("--help"),
            "{args:?}: {err}"
        );
        assert!(o.stdout.is_empty(), "{args:?}");
    }
    // An option without fixed values lists none: no empty "possible values:" tail.
    let err = stderr(&run(&["--threads"]));
    assert_eq!(
        err.trim_end(),
        "error: a value is required for '--threads <N>' but none was supplied (see --help)"
    );
}

/// Options that another option's value decides whether they are used: without it they would
/// be silently ignored, so they are usage errors (status 2, one line naming both options).
#[test]
fn options_that_would_be_ignored_are_usage_errors() {
    let cases: [(&[&str], &str); 9] = [
        (
            &["--announce-restarts"],
            "--announce-restarts needs the restarts perturbation",
        ),
        (
            &[
                "--cluster",
                "realistic",
                "--perturbations",
                "sizes,pins",
                "--announce-restarts",
            ],
            "--announce-restarts needs the restarts perturbation",
        ),
        (
            &["--perturbations", "pins"],
            "--perturbations needs --cluster realistic",
        ),
        (
            &["--capacity-start", "unknown"],
            "--capacity-start needs a row that reads it",
        ),
        (
            &[
                "--cluster",
                "realistic",
                "--policies",
                "approx-capacity,bound,oracle",
                "--capacity-start",
                "low4",
            ],
            "--capacity-start needs a row that reads it",
        ),
        (&["--sync-delay", "10"], "--sync-delay needs --sync memory"),
        (
            &["--replicas", "4", "--sync-delay", "10"],
            "--sync-delay needs --sync memory",
        ),
        (&["--sync", "memory"], "--sync needs --replicas 2 or more"),
        (
            &["--replicas", "1", "--sync", "memory", "--sync-delay", "5"],
            "--sync needs --replicas 2 or more",
        ),
    ];
    for (args, why) in cases {
        let o = run(&[args, &["--no-plot"][..]].concat());
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(why) && err.contains("--help"),
            "{args:?}: {err}"
        );
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}

/// The index's clock ends at 2^64 ns (about 1.8e13 ms): a later timestamp is a bad line
/// (it used to run, every TTL row at 0% hits); one at the bound replays as any other.
#[test]
fn timestamps_beyond_the_index_clock_are_rejected() {
    let dir = scratch("late");
    let late = r#"{"timestamp": 1.9e13, "input_length": 2048, "output_length": 10, "hash_ids": [1, 2, 3, 4]}"#;
    let trace = write_trace(&dir, &[CHAT[0], CHAT[1], late]);
    let o = run(&[trace.to_str().unwrap(), "--no-plot"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("trace.jsonl:3:") && err.contains("implausibly large"),
        "{err}"
    );
    assert!(o.stdout.is_empty());

    // The conversation moved to the last accepted millisecond: the same hits as at 0.
    let shifted: Vec<String> = CHAT
        .iter()
        .zip(["9999999998000", "9999999999000", "10000000000000"])
        .map(|(line, ts)| {
            let at = line.find(',').unwrap();
            format!(r#"{{"timestamp": {ts}{}"#, &line[at..])
        })
        .collect();
    let lines: Vec<&str> = shifted.iter().map(String::as_str).collect();
    let trace = write_trace(&dir, &lines);
    let out = run_small(&[trace.to_str().unwrap(), "--ttls", "60"]);
    assert!(row(&out, "approx ttl=60s").contains("55.6%"), "{out}");
    assert!(row(&out, "oracle").contains("55.6%"), "{out}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Prompts all shorter than one index block leave nothing to route by: an input error, not
/// a table of 0-of-0 hit rates.
#[test]
fn a_trace_without_a_full_block_is_an_error() {
    let dir = scratch("short");
    let trace = write_trace(
        &dir,
        &[
            r#"{"timestamp": 0, "input_length": 50, "output_length": 10, "hash_ids": [1]}"#,
            r#"{"timestamp": 1000, "input_length": 63, "output_length": 10, "hash_ids": [1]}"#,
        ],
    );
    let o = run(&[trace.to_str().unwrap(), "--no-plot"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no request has a full block of 64 tokens") && err.contains("has 63"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
    // With blocks small enough, the same trace runs.
    let o = run(&[trace.to_str().unwrap(), "--no-plot", "--block-size", "16"]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A reader that closes the pipe early (`approx-kv-replay | head -1`): the tool ends
/// quietly with status 0, not with a "Broken pipe" panic (status 101). The pipe is closed
/// before the tool writes anything, so its first write fails, every time.
#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    let dir = scratch("pipe");
    let trace = write_trace(&dir, &CHAT);
    let mut child = Command::new(BIN)
        .args([trace.to_str().unwrap(), "--no-plot", "--no-progress"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_trace_is_one_line_naming_it() {
    let o = run(&["/nonexistent/trace.jsonl", "--no-plot"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: cannot open trace '/nonexistent/trace.jsonl'"),
        "{err}"
    );
}

#[test]
fn help_lists_the_options_with_their_defaults() {
    for flag in ["--help", "-h"] {
        let o = run(&[flag]);
        assert!(o.status.success(), "{flag}");
        assert!(o.stderr.is_empty(), "{flag}");
        let out = stdout(&o);
        for opt in [
            "Usage: approx-kv-replay [OPTIONS] [TRACE.jsonl]",
            "--speedup <X>",
            "--max-rate",
            "--threads <N>",
            "--plot <PATH>",
            "--skip-bad-lines",
            "--policies <LIST>",
            "--version",
            "[default: 16384]",
            "[default: 60,120,300,600,1800]",
        ] {
            assert!(out.contains(opt), "{flag}: {opt} missing in\n{out}");
        }
    }
}

#[test]
fn version_prints_the_version() {
    let o = run(&["--version"]);
    assert!(o.status.success());
    assert_eq!(
        stdout(&o).trim(),
        format!("approx-kv-replay {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn policies_choose_the_runs() {
    let dir = scratch("policies");
    let trace = write_trace(&dir, &CHAT);
    let out = run_small(&[
        trace.to_str().unwrap(),
        "--policies",
        "approx,oracle",
        "--ttls",
        "60",
    ]);
    assert!(row(&out, "approx ttl=60s").contains("1.00x"), "{out}");
    row(&out, "oracle");
    for absent in ["round-robin ", "random ", "approx-capacity "] {
        assert!(!out.lines().any(|l| l.starts_with(absent)), "{out}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_progress_bar_goes_to_stderr_only_when_asked() {
    let dir = scratch("progress");
    let trace = write_trace(&dir, &CHAT);
    let path = trace.to_str().unwrap();
    let o = run(&[path, "--no-plot", "--progress"]);
    assert!(o.status.success());
    let err = stderr(&o);
    assert!(err.contains("[1/9] round-robin"), "{err}");
    assert!(err.contains("/s ETA"), "{err}");
    assert!(!stdout(&o).contains('\r') && !stdout(&o).contains('\x1b'));
    // Not a terminal here: no bar by default, nor with --no-progress.
    for extra in [None, Some("--no-progress")] {
        let mut args = vec![path, "--no-plot"];
        args.extend(extra);
        let o = run(&args);
        assert!(o.stderr.is_empty(), "{extra:?}: {}", stderr(&o));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn replicas_run_unsynced_and_synced_and_plot_against_their_number() {
    let dir = scratch("replicas");
    let trace = write_trace(&dir, &CHAT);
    let plot = dir.join("hits.svg");
    let args = [
        trace.to_str().unwrap(),
        "--policies",
        "approx-capacity,oracle",
        "--replicas",
        "4",
        "--sync",
        "memory",
        "--block-size",
        "512",
        "--workers",
        "2",
        "--no-progress",
        "--plot",
        plot.to_str().unwrap(),
    ];
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    // Every replica applies every decision at once: as one router.
    for synced in [
        "2 replicas synced (memory, 0 ms)",
        "4 replicas synced (memory, 0 ms)",
    ] {
        let line = row(&out, &format!("approx-capacity, {synced}"));
        assert!(line.contains("55.6%"), "{out}");
    }
    row(&out, "approx-capacity, 4 replicas");
    // The table against the number of replicas, relative to one.
    assert!(out.contains("replicas          unsynced"), "{out}");
    assert!(row(&out, "approx-capacity").contains("55.6%"), "{out}");
    let chart = std::fs::read_to_string(dir.join("hits-replicas.svg")).unwrap();
    assert!(chart.contains("router replicas") && chart.contains("synced"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(not(feature = "redis"))]
#[test]
fn redis_sync_without_the_feature_says_how_to_get_it() {
    let o = run(&[
        "--replicas",
        "2",
        "--sync",
        "redis://127.0.0.1:1",
        "--no-plot",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--features redis"), "{}", stderr(&o));
}

/// docs/replay.md: "A server that cannot be reached or verified stops the run at once with
/// one line naming it": before the unsynced runs, which paced at trace time would take a
/// minute here (they went first, found by an audit).
#[cfg(feature = "redis")]
#[test]
fn an_unreachable_sync_server_stops_the_run_before_any_row() {
    let dir = scratch("unreachable");
    let trace = write_trace(
        &dir,
        &[
            r#"{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}"#,
            r#"{"timestamp": 60000, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}"#,
        ],
    );
    let started = std::time::Instant::now();
    let o = run(&[
        trace.to_str().unwrap(),
        "--replicas",
        "2",
        "--sync",
        "redis://:secret@127.0.0.1:1",
        "--speedup",
        "1",
        "--no-plot",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot reach the --sync server"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("secret"), "the password is hidden");
    assert!(!stdout(&o).contains("hit rate"), "{}", stdout(&o));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(50),
        "paced runs went first"
    );
}

/// The private `redis-server` of the library's Redis tests, with its throwaway certificates.
#[cfg(feature = "redis-tls")]
#[path = "../../../tests/support/redis_server/mod.rs"]
mod redis_server;

/// `--sync rediss://...` with `--sync-tls-ca`: two replicas share their decisions through a
/// server that listens only for TLS, verified against a private CA, with a password; without
/// the CA the server cannot be verified, and the run stops at once with one line saying so.
#[cfg(feature = "redis-tls")]
#[test]
fn replicas_sync_through_a_tls_server_with_a_private_ca() {
    let Some(certs) = redis_server::certs::Certs::make() else {
        return;
    };
    let server = redis_server::RedisServer::start_tls(certs.dir(), &["--requirepass", "pw"])
        .expect("redis-server starts");
    let dir = scratch("tls");
    let trace = write_trace(&dir, &CHAT);
    let url = server.url();
    let ca = certs.path("ca.crt");
    let args = [
        trace.to_str().unwrap(),
        "--policies",
        "approx-capacity",
        "--replicas",
        "2",
        "--sync",
        &url,
        "--sync-tls-ca",
        ca.to_str().unwrap(),
    ];
    let out = run_small(&args);
    row(&out, "approx-capacity, 2 replicas synced (redis)");
    assert!(out.contains("decisions published"), "{out}");
    assert!(out.contains(" 0 rejected"), "{out}");

    // The system's roots do not hold the test CA: no connection, one line, status 1,
    // before any run.
    let without_ca: Vec<&str> = args
        .iter()
        .copied()
        .filter(|a| *a != "--sync-tls-ca" && *a != ca.to_str().unwrap())
        .chain(SMALL)
        .collect();
    let o = run(&without_ca);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(
        err.contains("cannot reach the --sync server") && err.lines().count() == 1,
        "{err}"
    );
    // The message names the server, not its password.
    assert!(
        !err.contains("pw@") && err.contains("rediss://***@127.0.0.1:"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_ca_without_a_tls_url_is_a_usage_error() {
    let o = run(&[
        "--sync",
        "redis://127.0.0.1:1",
        "--sync-tls-ca",
        "ca.crt",
        "--no-plot",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("needs --sync rediss://"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn the_realistic_cluster_runs_its_rows_and_each_perturbation_alone() {
    let dir = scratch("realistic");
    let trace = write_trace(&dir, &CHAT);
    let out = run_small(&[trace.to_str().unwrap(), "--cluster", "realistic"]);
    assert!(out.contains("realistic  sizes"), "{out}");
    for policy in [
        "round-robin",
        "approx-capacity",
        "approx-lease",
        "approx-feedback",
        "approx-learning",
        "bound",
        "oracle",
    ] {
        row(&out, policy);
    }
    assert!(
        !out.contains("events-only"),
        "no events without --events: {out}"
    );
    assert!(out.contains("/delivered"), "{out}");
    // Pins alone, nothing foreign: the conversation's turns all land where its blocks are.
    let out = run_small(&[
        trace.to_str().unwrap(),
        "--cluster",
        "realistic",
        "--perturbations",
        "pins",
        "--capacity-start",
        "unknown",
    ]);
    assert!(row(&out, "oracle").contains("55.6%"), "{out}");
    let learning = row(&out, "approx-learning start=unknown");
    assert!(
        learning.contains("55.6%") && learning.contains("1.00"),
        "{out}"
    );
    // Restarts announced: said in the header, and every row still runs.
    let out = run_small(&[
        trace.to_str().unwrap(),
        "--cluster",
        "realistic",
        "--perturbations",
        "restarts",
        "--announce-restarts",
    ]);
    assert!(
        out.contains("restarts announced to the index rows"),
        "{out}"
    );
    row(&out, "approx-learning");
    row(&out, "approx-capacity");
    let o = run(&[trace.to_str().unwrap(), "--perturbations", "gravity"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn kv_events_reach_the_router_late_and_decisions_fill_the_gap() {
    let dir = scratch("events");
    let trace = write_trace(&dir, &CHAT);
    let with_lag = |lag: &str| {
        run_small(&[
            trace.to_str().unwrap(),
            "--cluster",
            "realistic",
            "--perturbations",
            "pins",
            "--events",
            lag,
        ])
    };
    // Turns 1 s apart. Events 5 s late: the events-only router never learns where the
    // conversation went (it spreads the turns: 2 of 9 blocks hit); the hybrid knows from
    // its own decisions (2 + 3 of 9, as the oracle).
    let late = with_lag("5");
    assert!(late.contains("reach the router 5 s late"), "{late}");
    assert!(row(&late, "events-only").contains("22.2%"), "{late}");
    assert!(row(&late, "approx-hybrid").contains("55.6%"), "{late}");
    assert!(row(&late, "bound").contains("55.6%"), "{late}");
    assert!(row(&late, "oracle").contains("55.6%"), "{late}");
    // Half a second late: the events arrive before the next turn.
    let early = with_lag("0.5");
    assert!(row(&early, "events-only").contains("55.6%"), "{early}");
    // The rows that need events, without them: a usage error.
    let o = run(&[trace.to_str().unwrap(), "--policies", "approx-hybrid"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}
