//! Standard output that ends the process quietly once its reader is gone.
//!
//! `println!` panics ("failed printing to stdout: Broken pipe", exit status 101) when the
//! reader of a pipe has closed it, as `approx-kv-replay | head -1` does. The tools print
//! through [`outln!`](crate::outln) and [`out!`](crate::out) instead: on a closed pipe the
//! process ends at once with status 0 and no message (the rest of its output is not wanted);
//! on any other write error it prints one line on stderr and ends with status 1.

use std::fmt;
use std::io::{self, Write};

/// Writes `args` to standard output; see the module's documentation for what a write error
/// does. What [`out!`](crate::out) and [`outln!`](crate::outln) call.
pub fn write_fmt(args: fmt::Arguments<'_>) {
    let written = io::stdout().lock().write_fmt(args);
    if let Err(e) = written {
        failed(&e)
    }
}

/// Flushes standard output, ending the process as [`write_fmt`] does on an error.
pub fn flush() {
    let flushed = io::stdout().lock().flush();
    if let Err(e) = flushed {
        failed(&e)
    }
}

/// Ends the process after a write to standard output failed with `e`.
fn failed(e: &io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0)
    }
    // Standard error may be gone too: nothing more to say then.
    let _ = writeln!(io::stderr(), "error: cannot write to standard output: {e}");
    std::process::exit(1)
}

/// `print!` that ends the process quietly when standard output is a closed pipe
/// ([`stdout`](crate::stdout)).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::stdout::write_fmt(::std::format_args!($($arg)*))
    };
}

/// `println!` that ends the process quietly when standard output is a closed pipe
/// ([`stdout`](crate::stdout)).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::stdout::write_fmt(::std::format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdout::write_fmt(::std::format_args!("{}\n", ::std::format_args!($($arg)*)))
    };
}
