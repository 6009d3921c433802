//! Test support shared by the integration tests (`mod support;`, or
//! `#[path = "../support/mod.rs"] mod support;` from a test binary's own folder): the
//! indexes and inputs the tests build, the sequential reference model and the harness that
//! runs it side by side with an index, an independent reference of the hashing, the
//! proptest settings, and racing traffic for the caps.
#![allow(dead_code)] // each test binary uses a different part

pub mod events;
pub mod harness;
pub mod index;
pub mod model;
pub mod proptest_config;
pub mod reference_hash;
pub mod traffic;
