//! Throttle metrics, named `weir_throttle_*` (listed in docs/metrics.md).

use super::manager::Snapshot;
use crate::config::ThrottleConfig;
use crate::signal::Signal;
use std::time::Duration;

/// Water levels and threshold lines, by `kind`.
pub const WATER_LEVEL: &str = "weir_throttle_water_level";
/// State per `record_type`: 0 Normal, 1 Shedding, 2 Open.
pub const STATE: &str = "weir_throttle_state";
/// Decisions by `protocol`, `record_type`, `decision` (allowed/denied), `reason`.
pub const REQUESTS: &str = "weir_throttle_requests_total";
/// How long each request waited in front of weir (kernel buffers, run queue) before the
/// throttle saw it, by `protocol` (see `receiver::connection::stamp`).
pub const QUEUE_DELAY: &str = "weir_throttle_queue_delay_seconds";
/// Refusals being held right now (`receiver.throttle.hold`).
pub const HELD: &str = "weir_throttle_refusals_held";
/// Bytes of unread HTTP/1.1 bodies (too large to read away first) the refusals held right
/// now leave in weir's sockets, as reckoned for `hold.max_held_bytes`.
pub const HELD_BYTES: &str = "weir_throttle_held_bytes";
/// Refusals answered at once that would have been held, by `reason`: `max_held`,
/// `held_bytes` (a body too large to read away first, and no room for it unread,
/// `hold.max_held_bytes`), `memory` (above its enter line).
pub const HOLDS_SKIPPED: &str = "weir_throttle_holds_skipped_total";
/// Held refusals answered before their hold ran out, by `why`: `idle_core` (a core was
/// free) or `empty_line` (every core busy and nobody waiting for the next slot).
pub const HOLDS_RELEASED: &str = "weir_throttle_holds_released_total";
/// How long each held refusal was held.
pub const HOLD_SECONDS: &str = "weir_throttle_hold_seconds";
/// What weir works out by itself, by `value` (see `admission::Derived`):
/// `inflight_cap`, `adaptive_limit`, `calm_service_seconds`, `inflight_wait_seconds`,
/// `wait_min_body_bytes`, `queue_delay_target_seconds`.
pub const DERIVED: &str = "weir_throttle_derived";
/// Actual time between samples.
pub const SAMPLER_INTERVAL: &str = "weir_throttle_sampler_interval_seconds";
/// Time one sample takes (cgroup reads and computation).
pub const SAMPLER_DURATION: &str = "weir_throttle_sampler_duration_seconds";

/// Publishes the configured threshold lines once.
pub fn set_thresholds(c: &ThrottleConfig) {
    for (kind, v) in [
        ("cpu_enter", c.thresholds.cpu.enter),
        ("cpu_exit", c.thresholds.cpu.exit),
        ("cpu_hard", c.thresholds.cpu.hard),
        ("mem_enter", c.thresholds.mem.enter),
        ("mem_exit", c.thresholds.mem.exit),
        ("mem_hard", c.thresholds.mem.hard),
        ("disk_enter", c.thresholds.disk.enter),
        ("disk_exit", c.thresholds.disk.exit),
        ("disk_hard", c.thresholds.disk.hard),
    ] {
        ::metrics::gauge!(WATER_LEVEL, "kind" => kind).set(v);
    }
}

/// Publishes one snapshot's levels and states.
pub fn publish(s: &Snapshot) {
    let l = &s.level;
    ::metrics::gauge!(WATER_LEVEL, "kind" => "cpu").set(l.cpu);
    ::metrics::gauge!(WATER_LEVEL, "kind" => "cpu_slow").set(l.cpu_slow);
    ::metrics::gauge!(WATER_LEVEL, "kind" => "cpu_fast").set(l.cpu_fast);
    ::metrics::gauge!(WATER_LEVEL, "kind" => "mem").set(if l.mem_valid { l.mem } else { f64::NAN });
    if l.disk_valid {
        ::metrics::gauge!(WATER_LEVEL, "kind" => "disk").set(l.disk);
    }
    ::metrics::gauge!(WATER_LEVEL, "kind" => "cpu_enter_effective").set(s.cpu_enter);
    ::metrics::gauge!(WATER_LEVEL, "kind" => "cpu_knee_learned").set(s.knee.unwrap_or(f64::NAN));
    for signal in Signal::ALL {
        ::metrics::gauge!(STATE, "record_type" => signal.as_str()).set(s.states[signal.index()] as u8 as f64);
    }
}

/// Records a sampler interval.
pub fn sampler_interval(d: Duration) {
    ::metrics::histogram!(SAMPLER_INTERVAL).record(d.as_secs_f64());
}

/// Records a sample's duration.
pub fn sampler_duration(d: Duration) {
    ::metrics::histogram!(SAMPLER_DURATION).record(d.as_secs_f64());
}

/// Publishes connection counts and RTTs per receiver.
pub fn connections(http: &super::conns::ConnSample, grpc: &super::conns::ConnSample) {
    for (server, s) in [("http", http), ("grpc", grpc)] {
        ::metrics::gauge!("weir_receiver_open_connections", "server" => server).set(s.open as f64);
        ::metrics::counter!("weir_receiver_connections_accepted_total", "server" => server).absolute(s.accepted_total);
        ::metrics::gauge!("weir_receiver_tcp_rtt_seconds", "server" => server, "stat" => "avg")
            .set(s.rtt_avg_ms.map_or(f64::NAN, |r| r / 1000.0));
        ::metrics::gauge!("weir_receiver_tcp_rtt_seconds", "server" => server, "stat" => "max")
            .set(s.rtt_max_ms.map_or(f64::NAN, |r| r / 1000.0));
    }
}

/// Publishes what the admission layers work out by themselves.
pub fn derived(d: &crate::admission::Derived) {
    for (value, v) in [
        ("inflight_cap", d.inflight_cap as f64),
        ("adaptive_limit", d.adaptive_limit as f64),
        ("calm_service_seconds", d.calm_service_seconds.unwrap_or(f64::NAN)),
        ("inflight_wait_seconds", d.inflight_wait_seconds),
        ("wait_min_body_bytes", d.wait_min_body_bytes as f64),
        ("queue_delay_target_seconds", d.queue_delay_target_seconds),
    ] {
        ::metrics::gauge!(DERIVED, "value" => value).set(v);
    }
}
