//! `retry:` of the exporters that send over a network.

use super::ConfigError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Retry with exponential backoff and jitter.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// First backoff.
    #[serde(with = "humantime_serde")]
    pub initial_interval: Duration,
    /// Backoff cap.
    #[serde(with = "humantime_serde")]
    pub max_interval: Duration,
    /// Give up (and count the items as dropped) after this long.
    #[serde(with = "humantime_serde")]
    pub max_elapsed: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            initial_interval: Duration::from_millis(500),
            max_interval: Duration::from_secs(30),
            max_elapsed: Duration::from_secs(300),
        }
    }
}

impl RetryConfig {
    /// Checks the intervals; `key` names the exporter in the error.
    pub(super) fn validate(&self, key: &str) -> Result<(), ConfigError> {
        if self.initial_interval.is_zero() || self.max_interval < self.initial_interval {
            return Err(ConfigError::invalid(format!("{key}.retry"), "need 0 < initial_interval <= max_interval"));
        }
        Ok(())
    }
}
