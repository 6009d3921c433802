//! Test support shared by the integration tests (`mod support;`): the sequential reference
//! model and the harness that runs it side by side with an index.
#![allow(dead_code)] // each test binary uses a different part

pub mod harness;
pub mod model;
