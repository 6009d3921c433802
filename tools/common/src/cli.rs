//! Parsing a command line with clap, with errors on one line.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::Parser;

/// Exit status of a usage error (a bad, missing or unknown option).
pub const USAGE: i32 = 2;

/// The options of this process's command line. `--help` and `--version` print and exit
/// with 0; any other problem prints [`one_line`] on stderr and exits with [`USAGE`].
pub fn parse<P: Parser>() -> P {
    parse_from(std::env::args_os())
}

/// [`parse`] of `args` (the first one is the program name).
pub fn parse_from<P, I, T>(args: I) -> P
where
    P: Parser,
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    match P::try_parse_from(args) {
        Ok(p) => p,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            e.exit()
        }
        Err(e) => {
            eprintln!("{}", one_line(&e));
            std::process::exit(USAGE)
        }
    }
}

/// clap's own message on one line, with the valid values or the option meant when clap
/// knows them, and without the usage and tips that follow:
/// `error: invalid value 'x' for '--workers <N>': ... (see --help)`.
pub fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let mut line = text
        .lines()
        .next()
        .unwrap_or("error: invalid arguments")
        .trim_end()
        .to_string();
    // clap attaches an empty list to a missing value of an option without fixed values.
    if let Some(ContextValue::Strings(valid)) = e.get(ContextKind::ValidValue) {
        if !valid.is_empty() {
            line.push_str(&format!("; possible values: {}", valid.join(", ")));
        }
    }
    if let Some(meant) = e.get(ContextKind::SuggestedArg) {
        line.push_str(&format!("; did you mean '{meant}'?"));
    }
    line.push_str(" (see --help)");
    line
}

/// A value parser for numbers that must be finite and greater than 0.
pub fn positive_f64(s: &str) -> Result<f64, String> {
    let x: f64 = s
        .trim()
        .parse()
        .map_err(|e| format!("'{s}' is not a number ({e})"))?;
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(format!("must be a finite number > 0, got '{s}'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser, Debug)]
    #[command(name = "t", version)]
    struct Opts {
        /// A count.
        #[arg(long, default_value_t = 3)]
        n: u32,
        /// A rate.
        #[arg(long, value_parser = positive_f64)]
        rate: Option<f64>,
        /// A mode.
        #[arg(long, value_parser = ["fast", "slow"])]
        mode: Option<String>,
    }

    fn error(args: &[&str]) -> String {
        let e = Opts::try_parse_from(std::iter::once("t").chain(args.iter().copied()))
            .expect_err("an error");
        one_line(&e)
    }

    #[test]
    fn errors_fit_on_one_line_and_name_the_problem() {
        for (args, what) in [
            (&["--n", "x"][..], "'--n <N>'"),
            (&["--rate", "0"], "must be a finite number > 0"),
            (&["--bogus"], "'--bogus'"),
            (&["--rat", "1"], "did you mean '--rate'?"),
            (&["--n"], "--n"),
        ] {
            let line = error(args);
            assert!(!line.contains('\n'), "{line}");
            assert!(line.starts_with("error: ") && line.contains(what), "{line}");
            assert!(line.ends_with("(see --help)"), "{line}");
        }
        assert_eq!(parse_from::<Opts, _, _>(["t", "--n", "5"]).n, 5);
    }

    #[test]
    fn possible_values_are_listed_only_when_there_are_some() {
        // A missing value of an option that takes any number: no empty list.
        assert_eq!(
            error(&["--n"]),
            "error: a value is required for '--n <N>' but none was supplied (see --help)"
        );
        // A missing or invalid value of an option with fixed values: they are listed.
        for args in [&["--mode"][..], &["--mode", "x"]] {
            let line = error(args);
            assert!(
                line.contains("; possible values: fast, slow (see --help)"),
                "{line}"
            );
        }
    }
}
