//! Metric names. Counters and logs use the same words: received, accepted, rejected,
//! exported, dropped.

/// Requests by `protocol`, `signal`, `outcome` (accepted, rejected, failed) and `tenant`.
pub const REQUESTS: &str = "weir_receiver_requests_total";
/// Wire bytes received, by `protocol` and `signal`.
pub const REQUEST_BYTES: &str = "weir_receiver_request_bytes_total";
/// Request handling time, by `protocol` and `signal`.
pub const REQUEST_DURATION: &str = "weir_receiver_request_duration_seconds";
/// Items decoded from requests, by `protocol` and `signal`.
pub const ITEMS_RECEIVED: &str = "weir_items_received_total";
/// Items accepted into the pipeline, by `signal`.
pub const ITEMS_ACCEPTED: &str = "weir_items_accepted_total";
/// Items refused after decoding, by `signal` and `reason`.
pub const ITEMS_REJECTED: &str = "weir_items_rejected_total";
/// Items an exporter delivered, by `signal` and `exporter`.
pub const ITEMS_EXPORTED: &str = "weir_items_exported_total";
/// Accepted items that an exporter gave up on, by `signal`, `exporter` and `reason`.
pub const ITEMS_DROPPED: &str = "weir_items_dropped_total";
/// Bytes held by the pipeline (queue, batches, exports in progress).
pub const QUEUE_BYTES: &str = "weir_pipeline_queue_bytes";
/// Exporter requests by `exporter` and `outcome` (sent, failed).
pub const EXPORTER_REQUESTS: &str = "weir_exporter_requests_total";
/// Open connections by `server`.
pub const CONNECTIONS: &str = "weir_receiver_connections";
/// Requests refused, by `protocol`, `signal` and `reason`.
pub const REQUESTS_REJECTED: &str = "weir_receiver_requests_rejected_total";
/// Compressed bytes fed to the decompressor, by `encoding`.
pub const DECOMPRESSED_BYTES: &str = "weir_receiver_decompressed_input_bytes_total";
/// Requests refused by a tenant's quota, by `tenant`.
pub const QUOTA_REJECTED: &str = "weir_quota_rejected_total";
/// Config reloads by `result` (success, failure).
pub const CONFIG_RELOADS: &str = "weir_config_reloads_total";
/// HTTP/2 connections weir sent GOAWAY for a misbehaving peer, by `reason` (reset_budget).
pub const H2_GOAWAYS: &str = "weir_receiver_h2_goaways_total";
/// Connections weir closed on its own, by `server` and `reason` (header_timeout, idle,
/// keepalive_timeout, evicted).
pub const CONNECTIONS_CLOSED: &str = "weir_receiver_connections_closed_total";
