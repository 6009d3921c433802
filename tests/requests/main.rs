//! Request lifecycles (`begin_request`, `request_output`, `finish_request`) and engines'
//! reports of cached prompt tokens (`observe_cached`). `pins`: a running request's blocks
//! never expire and are never evicted; released ones expire one TTL after the release and
//! go least recently released first, deepest first; handles of removed workers, of another
//! index or outliving theirs change nothing; many threads pin and release one prefix.
//! `reports`: predicted against delivered, per worker and summed; a shortfall drops the
//! worker's older claims and never the request's own; bad reports are refused.
//! `ghosts`: blocks the capacity evicted that the engine still delivers raise it, and the
//! capacity of every worker on the same one that no report taught.

#[path = "../support/mod.rs"]
mod support;

mod ghosts;
mod pins;
mod reports;
