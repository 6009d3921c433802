//! Saving and rebuilding the state. `restore`: snapshots and restores keep TTLs, bad files
//! are clear errors, a restored claim outliving its parent ends the leading run there, a
//! restored index answers like the original as claims expire. `format`: the snapshot's
//! documented byte layout, TTLs left clamped by a restore, data-parallel ranks kept, dumps
//! naming blocks by this index's hashes. `dumps`: `dump_events` lists every live pair,
//! parents first, and replaying it rebuilds the state with its TTLs.

#[path = "../support/mod.rs"]
mod support;

mod dumps;
mod format;
mod restore;
