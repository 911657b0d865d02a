//! Exponential backoff with full jitter, honouring a server-given delay.

use crate::config::RetryConfig;
use rand::Rng;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

use super::ExportError;

/// The outcome of one attempt.
#[derive(Debug)]
pub enum Attempt {
    /// Delivered.
    Done,
    /// Worth retrying; `after` is the server's requested delay, if it gave one.
    Retry {
        /// Server-requested delay (Retry-After / RetryInfo).
        after: Option<Duration>,
        /// What happened.
        message: String,
    },
    /// Retrying cannot help.
    Permanent(String),
}

/// Runs `attempt` until it succeeds, fails permanently, or `max_elapsed` passes.
pub async fn with_retry<F, Fut>(config: &RetryConfig, mut attempt: F) -> Result<(), ExportError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Attempt>,
{
    let start = Instant::now();
    let mut backoff = config.initial_interval;
    loop {
        match attempt().await {
            Attempt::Done => return Ok(()),
            Attempt::Permanent(m) => return Err(ExportError::Permanent(m)),
            Attempt::Retry { after, message } => {
                // Full jitter in [backoff/2, backoff]; a server's own delay wins when longer.
                let jittered = {
                    let half = backoff / 2;
                    half + rand::rng().random_range(Duration::ZERO..=half)
                };
                let wait = after.map_or(jittered, |a| a.max(jittered));
                let elapsed = start.elapsed();
                if elapsed + wait > config.max_elapsed {
                    return Err(ExportError::RetriesExhausted { elapsed, last: message });
                }
                tracing::debug!(?wait, %message, "export attempt failed; retrying");
                tokio::time::sleep(wait).await;
                backoff = (backoff * 2).min(config.max_interval);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn cfg() -> RetryConfig {
        RetryConfig {
            initial_interval: Duration::from_millis(100),
            max_interval: Duration::from_secs(1),
            max_elapsed: Duration::from_secs(5),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_until_success() {
        let n = AtomicUsize::new(0);
        let r = with_retry(&cfg(), || async {
            if n.fetch_add(1, Ordering::SeqCst) < 3 {
                Attempt::Retry { after: None, message: "busy".into() }
            } else {
                Attempt::Done
            }
        })
        .await;
        assert!(r.is_ok());
        assert_eq!(n.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_max_elapsed_and_honours_server_delay() {
        let n = AtomicUsize::new(0);
        let start = Instant::now();
        let r = with_retry(&cfg(), || async {
            n.fetch_add(1, Ordering::SeqCst);
            Attempt::Retry { after: Some(Duration::from_secs(2)), message: "429".into() }
        })
        .await;
        assert!(matches!(r, Err(ExportError::RetriesExhausted { .. })));
        // 2 s per wait and a 5 s budget: attempts at 0, 2 s, 4 s.
        assert_eq!(n.load(Ordering::SeqCst), 3);
        assert!(start.elapsed() >= Duration::from_secs(4));
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_errors_stop_at_once() {
        let r = with_retry(&cfg(), || async { Attempt::Permanent("400".into()) }).await;
        assert!(matches!(r, Err(ExportError::Permanent(_))));
    }
}
