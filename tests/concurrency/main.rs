//! Threads at once. `threads`: records and finds from many threads with their results
//! checked, one decision from sixteen threads, removals racing records, a sweep racing a
//! record under a cap, cuts and joins of one run. `sweeper`: the background sweeper's life
//! (reclaiming unasked, no thread leaked, every call safe after `shutdown`). `apply`: other
//! replicas' decisions applied from several threads at once. `every_call`: every call
//! racing under each kind of cap, leaving no gap and nothing past the TTL.

#[path = "../support/mod.rs"]
mod support;

mod apply;
mod every_call;
mod sweeper;
mod threads;
