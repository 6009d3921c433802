//! Proptest settings shared by the property tests.

use proptest::prelude::ProptestConfig;

/// `PROPTEST_CASES` if set, else `default`.
pub fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}
