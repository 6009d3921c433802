//! One `indicatif` progress bar on stderr, the same for both tools.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};

/// When to draw the bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum When {
    /// When stderr is a terminal (hidden in a pipe or a file).
    #[default]
    Auto,
    /// Always, even into a pipe or a file.
    Always,
    /// Never.
    Never,
}

/// A bar of `len` steps on stderr, hidden as `when` says; it shows the prefix (set by the
/// caller: which run of how many), the position, the rate and the ETA.
pub fn bar(when: When, len: u64) -> ProgressBar {
    let target = match when {
        When::Auto => ProgressDrawTarget::stderr(),
        // A plain `Term` target hides itself off a terminal; the `TermLike` one does not.
        When::Always => {
            ProgressDrawTarget::term_like_with_hz(Box::new(console::Term::stderr()), 10)
        }
        When::Never => ProgressDrawTarget::hidden(),
    };
    // The bar takes the width that is left (80 columns off a terminal), so a line never
    // wraps; the rate is a whole number of steps a second.
    let style = ProgressStyle::with_template(
        "{prefix} [{wide_bar}] {human_pos}/{human_len} {rate}/s ETA {eta} ({elapsed})",
    )
    .expect("a valid template")
    .with_key("rate", |s: &ProgressState, w: &mut dyn std::fmt::Write| {
        let _ = write!(w, "{:.0}", s.per_sec());
    })
    .progress_chars("#>.");
    ProgressBar::with_draw_target(Some(len), target).with_style(style)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_unless_asked_off_a_terminal() {
        assert!(bar(When::Never, 10).is_hidden());
        assert!(!bar(When::Always, 10).is_hidden());
        // The test harness captures stderr: not a terminal.
        if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            assert!(bar(When::Auto, 10).is_hidden());
        }
    }
}
