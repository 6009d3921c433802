//! Test support shared by the integration tests (`mod support;`): the sequential reference
//! model and the harness that runs it side by side with an index, an independent reference
//! of the hashing, and the proptest settings.
#![allow(dead_code)] // each test binary uses a different part

pub mod harness;
pub mod model;
pub mod proptest_config;
pub mod reference_hash;
