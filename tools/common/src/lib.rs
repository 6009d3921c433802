//! What the replay tool (`approx-kv-replay`) and the comparison bench
//! (`approx-kv-compare`) share: [`cli`] (clap errors on one line), [`progress`]
//! (an `indicatif` bar on stderr), [`chart`] (their SVG charts, drawn with `plotters`) and
//! [`stdout`] ([`outln!`] and [`out!`]: printing that ends quietly on a closed pipe).
//!
//! Nothing here is part of the `approx-kv-index` library: a router that depends on the
//! library compiles none of it.

pub mod chart;
pub mod cli;
pub mod progress;
pub mod stdout;
