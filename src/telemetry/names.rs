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
/// Backends in a `loadbalancing` exporter's ring, by `exporter`.
pub const LB_BACKENDS: &str = "weir_loadbalancing_backends";
/// Ring changes, by `exporter` and `change` (joined, left, failed_over, rejoined).
pub const LB_MEMBERSHIP: &str = "weir_loadbalancing_membership_changes_total";
/// Items delivered, by `exporter` and `backend` (the endpoint; bounded by the resolver's set).
pub const LB_ITEMS: &str = "weir_loadbalancing_items_total";
/// Items sent to another backend than first chosen (failover or a backend gone): for
/// traces, locality broken, by `exporter`.
pub const LB_REROUTED: &str = "weir_loadbalancing_rerouted_items_total";
/// Spans routed by the fallback key (no valid trace ID), by `exporter`.
pub const LB_FALLBACK: &str = "weir_loadbalancing_fallback_items_total";
/// Failed or empty resolutions (the last set is kept), by `exporter` and `resolver`.
pub const LB_RESOLVER_ERRORS: &str = "weir_loadbalancing_resolver_errors_total";
/// Kafka messages by `exporter` and `outcome` (`sent`, `refused`: the broker refused it
/// for good).
pub const KAFKA_MESSAGES: &str = "weir_kafka_messages_total";
/// Bytes of the Kafka messages acknowledged by the brokers, by `exporter`.
pub const KAFKA_BYTES: &str = "weir_kafka_message_bytes_total";
/// Failed Kafka attempts by `exporter` and `kind` (`connect`, `timeout`, `transient`,
/// `unknown_topic`, `refused`, `too_large`).
pub const KAFKA_ERRORS: &str = "weir_kafka_errors_total";
/// Time from producing a message to the brokers' acknowledgement, by `exporter`.
pub const KAFKA_PRODUCE_DURATION: &str = "weir_kafka_produce_duration_seconds";
/// 1 while the brokers answer, 0 since an attempt failed to reach them, by `exporter`.
pub const KAFKA_UP: &str = "weir_kafka_up";
/// Open connections by `server`.
pub const CONNECTIONS: &str = "weir_receiver_connections";
/// The connection cap in force, by `server` (`maxconns`; absent without one).
pub const MAX_CONNECTIONS: &str = "weir_receiver_max_connections";
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
/// Times an HTTP/2 connection closed (`to` = closed) or reopened (`to` = open) its
/// initial stream window because it was refusing (see `receiver::connection::http2`).
pub const H2_WINDOW_CHANGES: &str = "weir_receiver_h2_window_changes_total";
/// Refused HTTP/1.x bodies left unread (the connection closed without a lingering read)
/// because refusals had read as much as admitted requests earn them.
pub const REFUSED_UNREAD: &str = "weir_receiver_refused_bodies_unread_total";
/// Connections weir closed on its own, by `server` and `reason` (header_timeout, idle,
/// keepalive_timeout, evicted).
pub const CONNECTIONS_CLOSED: &str = "weir_receiver_connections_closed_total";
/// Bytes the durable queue holds on disk (all segments).
pub const DISK_BYTES: &str = "weir_queue_disk_bytes";
/// Records on disk not yet acknowledged by every exporter.
pub const DISK_RECORDS: &str = "weir_queue_disk_records";
/// Segment files on disk.
pub const DISK_SEGMENTS: &str = "weir_queue_disk_segments";
/// Segments started over a spare file (an exported segment kept to be written over)
/// instead of a new one.
pub const DISK_REUSED: &str = "weir_queue_segment_files_reused_total";
/// Age of the oldest record some exporter has not acknowledged, seconds.
pub const DISK_OLDEST_AGE: &str = "weir_queue_oldest_record_age_seconds";
/// Records an exporter has not acknowledged yet, by `exporter`.
pub const DISK_LAG_RECORDS: &str = "weir_queue_exporter_lag_records";
/// Bytes appended to the disk queue.
pub const DISK_APPENDED_BYTES: &str = "weir_queue_appended_bytes_total";
/// fsync time of the disk queue, seconds.
pub const DISK_FSYNC: &str = "weir_queue_fsync_duration_seconds";
/// Records written per write+fsync (group commit size).
pub const DISK_GROUP: &str = "weir_queue_group_commit_records";
/// How long the writer last waited for a group to grow (`on_ack`), seconds.
pub const DISK_GROUP_WAIT: &str = "weir_queue_group_wait_seconds";
/// Items read back from records an earlier run wrote, by `exporter` (sent again after a
/// restart: an upper bound on duplicates).
pub const DISK_REPLAYED: &str = "weir_queue_replayed_items_total";
/// Records a disk-queue reader took, by `exporter` and `from` (`memory`: the newest
/// records, kept for a reader that is caught up; `disk`: read back from a segment).
pub const DISK_READ_RECORDS: &str = "weir_queue_read_records_total";
/// Records skipped for a failed checksum or a bad header, by `exporter` (`recovery` for the
/// start-up scan).
pub const DISK_CORRUPT: &str = "weir_queue_corrupt_records_total";
/// Disk queue write or fsync failures, by `kind` (no_space, io).
pub const DISK_WRITE_ERRORS: &str = "weir_queue_write_errors_total";
/// Cursor files that were missing or damaged and rebuilt, by `exporter`.
pub const DISK_CURSOR_RESETS: &str = "weir_queue_cursor_resets_total";
/// The pipeline's byte budget (`pipeline.queue.max_bytes`), for "queue near full".
pub const QUEUE_MAX_BYTES: &str = "weir_pipeline_queue_max_bytes";
/// The disk queue's bound (`pipeline.queue.disk.max_bytes`).
pub const DISK_MAX_BYTES: &str = "weir_queue_disk_max_bytes";
/// When this process started, seconds since the Unix epoch (restarts show as changes).
pub const START_TIME: &str = "weir_start_time_seconds";
/// Time one batch's export took, retries included, by `exporter` (histogram).
pub const EXPORT_DURATION: &str = "weir_exporter_export_duration_seconds";
/// 1 while the quota store's answers are in use, 0 while each replica falls back to
/// `quota / live replicas`.
pub const QUOTA_STORE_UP: &str = "weir_quota_store_up";
/// Time of one sync with the quota store, seconds (histogram).
pub const QUOTA_STORE_SYNC_SECONDS: &str = "weir_quota_store_sync_duration_seconds";
/// Syncs with the quota store that failed or timed out.
pub const QUOTA_STORE_SYNC_ERRORS: &str = "weir_quota_store_sync_errors_total";
/// Live replicas the quota store last reported.
pub const QUOTA_STORE_REPLICAS: &str = "weir_quota_store_replicas";
/// This replica's share of a tenant's quota, by `tenant` and `limit` (`requests` or a
/// signal's items).
pub const QUOTA_SHARE: &str = "weir_quota_share";
/// The PID controller's allowed admission rate, requests per second (0 while it does
/// not limit).
pub const PID_RATE: &str = "weir_admission_pid_rate";
