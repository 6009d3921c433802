//! Bounded memory: per-worker and global caps. `eviction`: the least recently recorded
//! decisions go first, deepest blocks first, per worker and index-wide, under a flood from
//! many threads and with a clock at the end of time. `counted`: what counts toward the caps
//! (the entries of any number of workers, exact entries, not the blocks a `Removed` event
//! ended) and the eviction order a restore keeps. `restored`: restores and replayed dumps
//! evict in the original order; the global cap counts exact entries and never evicts them.
//! `races`: many threads recording many workers leave no block above a gap, nor one past
//! its turn.

#[path = "../support/mod.rs"]
mod support;

mod capacities;
mod counted;
mod eviction;
mod races;
mod restored;
