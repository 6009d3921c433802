//! The contract of `ApproxKvIndexer`, one rule per test, on a manual clock.

use std::time::Duration;

use approx_kv_index::*;

const TTL: Duration = Duration::from_secs(10);

#[test]
fn invalid_configuration_is_an_error() {
    let b = || ApproxKvIndexer::builder();
    assert_eq!(
        b().block_size(0).build().unwrap_err(),
        ConfigError::ZeroBlockSize
    );
    assert_eq!(
        b().tick(Duration::ZERO).build().unwrap_err(),
        ConfigError::ZeroTick
    );
    assert_eq!(
        b().ttl(Duration::ZERO).build().unwrap_err(),
        ConfigError::ZeroTtl
    );
    assert!(ApproxKvIndexer::new(0, TTL).is_err());
    assert!(b().ttl(Duration::MAX).tick(Duration::MAX).build().is_ok());
    assert!(!ConfigError::ZeroTick.to_string().is_empty());
}
