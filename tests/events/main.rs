//! KV events (`Stored`, `Removed`, `Cleared`) alongside routing decisions. `exact`: exact
//! blocks have no TTL, a stored chain continues a decision, `Removed` ends both claims,
//! `Cleared` forgets a worker, events of unknown workers are harmless, an exact block below
//! an expired decision ends the leading run. `gallop`: finds gallop over an engine's exact
//! events while every worker's entries stay prefixes, and stop at a gap once they may not.
//! `stored`: what a `Stored` event's parent, names
//! and TTL left mean (engine hashes found, resolved and removed; parents held live; repeated
//! names rejected), and `Cleared` of one data-parallel rank.

#[path = "../support/mod.rs"]
mod support;

mod exact;
mod gallop;
mod stored;

use std::time::Duration;

const TTL: Duration = Duration::from_secs(10);
const NS: Duration = Duration::from_nanos(1);
