//! Placeholder: the trace replay tool (issue 4) is being written.
fn main() {}
