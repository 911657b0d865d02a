//! `GET /debug/throttle` on the admin port: a JSON snapshot of levels, thresholds,
//! states, effective cores, the memory limit and the cgroup paths that were read.

use super::cgroup::CgroupReader;
use super::manager::ThrottleManager;
use crate::signal::Signal;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use std::sync::Arc;

#[derive(Clone)]
struct DebugState {
    manager: Arc<ThrottleManager>,
    reader: Option<Arc<CgroupReader>>,
    admission: Arc<super::AdmissionClock>,
}

/// The `/debug/throttle` route.
pub fn router(manager: Arc<ThrottleManager>, reader: Option<CgroupReader>, admission: Arc<super::AdmissionClock>) -> Router {
    Router::new().route("/debug/throttle", get(handler)).with_state(DebugState { manager, reader: reader.map(Arc::new), admission })
}

async fn handler(State(s): State<DebugState>) -> Json<serde_json::Value> {
    let snap = s.manager.snapshot();
    let c = s.manager.config();
    let states: serde_json::Map<String, serde_json::Value> =
        Signal::ALL.iter().map(|sig| (sig.as_str().to_string(), serde_json::json!(snap.states[sig.index()]))).collect();
    let rules: serde_json::Map<String, serde_json::Value> =
        Signal::ALL.iter().map(|sig| (sig.as_str().to_string(), serde_json::json!(s.manager.rule(*sig)))).collect();
    let paths: Vec<serde_json::Value> = s
        .reader
        .as_ref()
        .map(|r| r.paths().into_iter().map(|(c, v, p)| serde_json::json!({"controller": c, "version": v, "path": p})).collect())
        .unwrap_or_default();
    let adm = &s.admission;
    let (bbr_max_inflight, inflight) = adm.inner.bbr_estimate(adm.now());
    let (slow_start_active, damping_active) = adm.inner.phases();
    let knee_profile = adm.inner.knee.as_ref().map(|k| k.compute().1).unwrap_or_default();
    let (pid_rate, pid_error) = adm.inner.pid_state();
    let (held, held_bytes) = adm.held_now();
    Json(serde_json::json!({
        "enabled": s.manager.enabled(),
        "config_hash": format!("{:016x}", s.manager.config_hash()),
        "layout": s.reader.as_ref().map(|r| r.layout()),
        "cpu_source": s.reader.as_ref().map(|r| r.cpu_source()),
        "levels": snap.level,
        "effective_cores": snap.level.effective_cores,
        "mem_limit_bytes": snap.level.mem_limit_bytes,
        "intensity": snap.intensity,
        "states": states,
        "thresholds": {"cpu": c.thresholds.cpu, "mem": c.thresholds.mem, "disk": c.thresholds.disk},
        "rules": rules,
        "retry_delay_seconds": {"shed": snap.delays.shed.as_secs_f64(), "open": snap.delays.open.as_secs_f64()},
        "sample_interval_seconds": c.sample_interval.as_secs_f64(),
        "cgroup_paths": paths,
        "effective_lines": {"cpu_enter": snap.cpu_enter, "cpu_exit": snap.cpu_exit},
        "connections": snap.conns,
        "connection_surge": snap.conn_surge,
        "pressure": {"above_exit": snap.pressure.above_exit, "above_enter": snap.pressure.above_enter},
        "hold": {"held": held, "held_bytes": held_bytes, "room_bytes": snap.hold_room},
        "derived": adm.inner.derived(),
        "admission": {
            "inflight": inflight,
            "bbr_max_inflight": bbr_max_inflight,
            "slow_start_active": slow_start_active,
            "burst_damping_active": damping_active,
            "learned_cpu_knee": snap.knee,
            "knee_profile": knee_profile,
            "pid": {"enabled": c.pid.enabled, "setpoint": c.pid.setpoint, "limiting": pid_rate.is_some(), "allowed_rate": pid_rate, "last_error": pid_error},
        },
    }))
}
