//! Fleet-wide tenant quotas (`receiver.auth.quota_store`): replicas share each tenant's
//! `rate` and `items` quotas through Redis without any network call on the request path:
//! the fleet shares demand, not token bucket state, so that the decision stays local.
//!
//! Every replica keeps admitting against its local limiters, each set to a *share* of
//! the configured quota. Every `sync_interval` it makes one script call to Redis that
//! records, per shared limiter, what this replica was offered over the last interval
//! (requests or items per second, refused ones included), refreshes the replica's
//! heartbeat, and returns the fleet's total demand per limiter and the number of live
//! replicas. The replica's share is then its part of the demand:
//!
//! ```text
//! share_i = demand_i / Σ demand   (at least MIN_SHARE / live; 1 / live when nobody asks)
//! ```
//!
//! so the shares sum to one, a tenant offered more than its quota gets exactly its quota
//! across the fleet however the balancer spreads it, and share moves to where the demand
//! is. What bounds the error: shares follow demand one interval late, so the fleet admits
//! at most `quota × (1 + δ)` per interval plus the burst, where δ is how much the fleet's
//! demand for the tenant changed within one sync interval (0 under steady load; a replica
//! that joins takes its share at its first sync, and one that leaves stops counting when
//! its heartbeat is older than `REPLICA_TTL_INTERVALS` intervals, or at once when it
//! shuts down cleanly).
//!
//! Redis down, slow or restarted: no request waits on it. After [`DOWN_AFTER`] failed
//! syncs in a row each replica falls back to `quota ÷ live replicas` (the count last seen;
//! the replica's own quota when it never reached Redis) and logs the change once; after
//! [`UP_AFTER`] good syncs in a row it follows the demand again. Both the hysteresis and a
//! cap on how far a share may move per interval ([`MAX_STEP`]) keep a flapping Redis from
//! making quotas jump.

use crate::config::redis::Target;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Failed syncs in a row before the fallback share applies (one lost sync changes nothing).
pub const DOWN_AFTER: u32 = 2;
/// Good syncs in a row before demand shares apply again after a fallback.
pub const UP_AFTER: u32 = 2;
/// The most a share moves per sync, as a fraction of the quota: enough to follow a
/// replica that joins within a few syncs, small enough that one odd sync does not swing
/// the quota (`docs/overload.md#measurements-behind-the-defaults`).
pub const MAX_STEP: f64 = 0.25;
/// The smallest share a replica keeps, times `1 / live`: a replica with no demand yet
/// still admits a trickle until its next sync.
pub const MIN_SHARE: f64 = 0.05;
/// A replica whose heartbeat is older than this many sync intervals no longer counts.
pub const REPLICA_TTL_INTERVALS: u32 = 5;

/// A limiter whose quota the fleet shares.
pub trait Shared: Send + Sync {
    /// What it was offered since the last call (requests or items), and resets that.
    fn take_offered(&self) -> u64;
    /// Its current share of the configured quota.
    fn share(&self) -> f64;
    /// Sets its share of the configured quota (0 < share ≤ 1).
    fn set_share(&self, share: f64);
}

/// The arithmetic of one replica's shares, apart from I/O and time.
#[derive(Debug, Default)]
pub struct Reconciler {
    up: bool,
    synced_once: bool,
    fails: u32,
    oks: u32,
    live: Option<u32>,
}

/// What a sync decided.
#[derive(Debug, PartialEq)]
pub enum Plan {
    /// Move each limiter toward these shares (demand shares).
    Shares(Vec<f64>),
    /// Move every limiter toward this share (`1 / live`).
    Fallback(f64),
    /// Change nothing (a single failed sync).
    Keep,
}

impl Reconciler {
    /// Whether the store's answers are in use.
    pub fn up(&self) -> bool {
        self.up
    }

    /// Live replicas last seen.
    pub fn live(&self) -> Option<u32> {
        self.live
    }

    /// After a sync that answered: `live` replicas, the fleet's total demand per
    /// limiter, this replica's own. Returns the plan and whether the mode changed.
    pub fn synced(&mut self, live: u32, totals: &[f64], mine: &[f64]) -> (Plan, bool) {
        let live = live.max(1);
        self.live = Some(live);
        self.fails = 0;
        self.oks += 1;
        let mut changed = false;
        if !self.up && (!self.synced_once || self.oks >= UP_AFTER) {
            self.up = true;
            changed = self.synced_once;
        }
        self.synced_once = true;
        if !self.up {
            return (Plan::Fallback(1.0 / f64::from(live)), changed);
        }
        let floor = MIN_SHARE / f64::from(live);
        let shares = totals
            .iter()
            .zip(mine)
            .map(|(&total, &d)| if total > 0.0 { (d / total).clamp(floor, 1.0) } else { 1.0 / f64::from(live) })
            .collect();
        (Plan::Shares(shares), changed)
    }

    /// After a sync that failed. Returns the plan and whether the mode changed.
    pub fn failed(&mut self) -> (Plan, bool) {
        self.oks = 0;
        self.fails += 1;
        if self.up && self.fails < DOWN_AFTER {
            return (Plan::Keep, false);
        }
        let changed = self.up;
        self.up = false;
        // Never reached Redis: each replica keeps its own quota, as without a store.
        (Plan::Fallback(1.0 / f64::from(self.live.unwrap_or(1))), changed)
    }

    /// One damped step from `old` toward `target`. The very first sync jumps.
    pub fn step(&self, old: f64, target: f64, first: bool) -> f64 {
        let next = if first { target } else { old + (target - old).clamp(-MAX_STEP, MAX_STEP) };
        next.clamp(MIN_SHARE / f64::from(self.live.unwrap_or(1)).max(1.0), 1.0)
    }
}

/// The store's settings, from `receiver.auth.quota_store`.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// Where Redis is.
    pub target: Target,
    /// How often each replica reconciles.
    pub sync_interval: Duration,
    /// Prefix of every key weir writes.
    pub key_prefix: String,
}

/// The script each replica runs once per interval. KEYS[1]: the heartbeats (sorted set,
/// score = Redis time of the replica's last sync, ms); KEYS[2..]: one hash per shared
/// limiter, replica -> "demand:ms". ARGV[1]: this replica; ARGV[2]: heartbeat TTL (ms);
/// ARGV[3..]: this replica's demand per limiter. Returns the live replicas, then the
/// fleet's demand per limiter. Redis's own clock, so replica clocks may disagree.
const SYNC_SCRIPT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl * 10)
local out = { redis.call('ZCARD', KEYS[1]) }
for i = 2, #KEYS do
  redis.call('HSET', KEYS[i], ARGV[1], ARGV[i + 1] .. ':' .. now)
  redis.call('PEXPIRE', KEYS[i], ttl * 10)
  local total = 0
  local all = redis.call('HGETALL', KEYS[i])
  for j = 1, #all, 2 do
    local v = all[j + 1]
    local at = string.find(v, ':', 1, true)
    if at and tonumber(string.sub(v, at + 1)) >= now - ttl then
      total = total + (tonumber(string.sub(v, 1, at - 1)) or 0)
    else
      redis.call('HDEL', KEYS[i], all[j])
    end
  end
  out[#out + 1] = tostring(total)
end
return out
";

/// Leaving the fleet: the heartbeat and this replica's demands go at once, so the
/// others take over its share at their next sync. KEYS as for [`SYNC_SCRIPT`]; ARGV[1]:
/// this replica.
const LEAVE_SCRIPT: &str = r"
redis.call('ZREM', KEYS[1], ARGV[1])
for i = 2, #KEYS do redis.call('HDEL', KEYS[i], ARGV[1]) end
return 1
";

/// The key under which a tenant's limiter is shared: the tenant's name only hashed
/// (FNV-1a, 64 bits), so neither names nor tokens reach Redis.
pub fn limiter_key(prefix: &str, tenant: &str, what: &str) -> String {
    let h = tenant.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("{prefix}q:{h:016x}:{what}")
}

/// A running sync loop; [`QuotaSync::stop`] leaves the fleet.
pub struct QuotaSync {
    stop: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl QuotaSync {
    /// Starts reconciling the limiters `limiters()` returns (called anew every
    /// interval, so a reload's new limiters are picked up).
    pub fn start<F>(settings: StoreSettings, limiters: F) -> QuotaSync
    where
        F: Fn() -> Vec<super::SharedLimiter> + Send + 'static,
    {
        let stop = Arc::new(tokio::sync::Notify::new());
        let task = tokio::spawn(run(settings, limiters, Arc::clone(&stop)));
        QuotaSync { stop, task }
    }

    /// Stops the loop and removes this replica from the fleet (bounded by one interval).
    pub async fn stop(self) {
        self.stop.notify_one();
        let _ = self.task.await;
    }
}

/// One connection and the scripts (sent by SHA, and whole once when Redis does not know
/// them, as after a restart that lost its script cache).
struct Session {
    conn: redis::aio::MultiplexedConnection,
}

impl Session {
    async fn open(target: &Target, timeout: Duration) -> Result<Session, String> {
        Ok(Session { conn: target.connect(timeout).await? })
    }

    async fn eval(&mut self, script: &redis::Script, keys: &[String], args: &[String]) -> Result<redis::Value, String> {
        let mut call = script.prepare_invoke();
        for k in keys {
            call.key(k);
        }
        for a in args {
            call.arg(a);
        }
        call.invoke_async(&mut self.conn).await.map_err(|e| format!("script: {e}"))
    }
}

/// A unique name for this replica in the fleet: host, process and start time.
fn replica_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "weir".into());
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{host}-{}-{nanos:08x}", std::process::id())
}

async fn run<F>(settings: StoreSettings, limiters: F, stop: Arc<tokio::sync::Notify>)
where
    F: Fn() -> Vec<super::SharedLimiter> + Send + 'static,
{
    use crate::telemetry::names;
    let me = replica_name();
    let heartbeats = format!("{}replicas", settings.key_prefix);
    let ttl_ms = (settings.sync_interval * REPLICA_TTL_INTERVALS).as_millis().max(1).to_string();
    // A sync that takes longer than an interval is late; it is abandoned then and counts
    // as failed, so a slow Redis delays no decision and no later sync.
    let timeout = settings.sync_interval.min(Duration::from_secs(1));
    let mut session: Option<Session> = None;
    let (sync_script, leave_script) = (redis::Script::new(SYNC_SCRIPT), redis::Script::new(LEAVE_SCRIPT));
    let mut rec = Reconciler::default();
    let mut last = Instant::now();
    let mut ticks = tokio::time::interval(settings.sync_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    metrics::gauge!(names::QUOTA_STORE_UP).set(0.0);
    let mut first = true;
    let mut warned_at_start = false;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = stop.notified() => break,
        }
        let shared = limiters();
        let elapsed = last.elapsed().as_secs_f64().max(1e-3);
        last = Instant::now();
        let mine: Vec<f64> = shared.iter().map(|l| l.limiter.take_offered() as f64 / elapsed).collect();
        let mut keys = Vec::with_capacity(shared.len() + 1);
        keys.push(heartbeats.clone());
        keys.extend(shared.iter().map(|l| format!("{}{}", settings.key_prefix, l.key)));
        let mut args = vec![me.clone(), ttl_ms.clone()];
        args.extend(mine.iter().map(|d| format!("{d:.3}")));
        let started = Instant::now();
        let answer = tokio::time::timeout(timeout, async {
            if session.is_none() {
                session = Some(Session::open(&settings.target, timeout).await?);
            }
            let s = session.as_mut().ok_or("no session")?;
            s.eval(&sync_script, &keys, &args).await
        })
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {timeout:?}")));
        metrics::histogram!(names::QUOTA_STORE_SYNC_SECONDS).record(started.elapsed().as_secs_f64());
        let parsed = answer.and_then(|r| parse_totals(&r, shared.len()));
        let (plan, changed) = match &parsed {
            Ok((live, totals)) => rec.synced(*live, totals, &mine),
            Err(e) => {
                session = None;
                metrics::counter!(names::QUOTA_STORE_SYNC_ERRORS).increment(1);
                let (plan, changed) = rec.failed();
                if changed {
                    let live = rec.live().unwrap_or(1);
                    tracing::warn!(error = %e, live_replicas = live, "quota store unreachable: each replica now enforces its quota / {live}");
                } else if first && !warned_at_start {
                    warned_at_start = true;
                    tracing::warn!(error = %e, "quota store unreachable at start: quotas hold per replica until it answers");
                }
                (plan, changed)
            }
        };
        if changed && parsed.is_ok() {
            tracing::info!(live_replicas = rec.live().unwrap_or(1), "quota store reachable again: shares follow the fleet's demand");
        }
        metrics::gauge!(names::QUOTA_STORE_UP).set(if rec.up() { 1.0 } else { 0.0 });
        metrics::gauge!(names::QUOTA_STORE_REPLICAS).set(f64::from(rec.live().unwrap_or(0)));
        let jump = first && parsed.is_ok();
        let targets = match plan {
            Plan::Shares(targets) => Some(targets),
            Plan::Fallback(t) => Some(vec![t; shared.len()]),
            Plan::Keep => None,
        };
        for (l, t) in shared.iter().zip(targets.into_iter().flatten()) {
            l.limiter.set_share(rec.step(l.limiter.share(), t, jump));
        }
        for l in &shared {
            metrics::gauge!(names::QUOTA_SHARE, "tenant" => l.tenant.clone(), "limit" => l.limit).set(l.limiter.share());
        }
        if parsed.is_ok() {
            first = false;
        }
    }
    // Leave: the others take over this replica's share at their next sync.
    if let Some(mut s) = session {
        let mut keys = vec![heartbeats];
        keys.extend(limiters().iter().map(|l| format!("{}{}", settings.key_prefix, l.key)));
        let _ = tokio::time::timeout(timeout, s.eval(&leave_script, &keys, std::slice::from_ref(&me))).await;
    }
}

/// The script's answer: live replicas, then one total per limiter.
fn parse_totals(reply: &redis::Value, n: usize) -> Result<(u32, Vec<f64>), String> {
    use redis::Value;
    let Value::Array(items) = reply else { return Err(format!("unexpected reply {reply:?}")) };
    if items.len() != n + 1 {
        return Err(format!("{} values for {n} limiters", items.len()));
    }
    let live = match &items[0] {
        Value::Int(n) => u32::try_from(*n).map_err(|e| e.to_string())?,
        other => return Err(format!("unexpected replica count {other:?}")),
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok().map(str::to_string),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    };
    let totals = items[1..]
        .iter()
        .map(|r| {
            text(r).and_then(|t| t.parse::<f64>().ok()).filter(|v| v.is_finite() && *v >= 0.0).ok_or_else(|| format!("bad total {r:?}"))
        })
        .collect::<Result<_, _>>()?;
    Ok((live, totals))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_follow_demand_and_sum_to_one() {
        let mut r = Reconciler::default();
        // Three replicas offered 240, 45 and 15 requests/s: 80 / 15 / 5.
        let (plan, changed) = r.synced(3, &[300.0], &[240.0]);
        assert!(!changed, "the first sync is no change of mode");
        assert_eq!(plan, Plan::Shares(vec![0.8]));
        let shares: Vec<f64> = [240.0, 45.0, 15.0]
            .iter()
            .map(|&d| match r.synced(3, &[300.0], &[d]).0 {
                Plan::Shares(s) => s[0],
                p => panic!("{p:?}"),
            })
            .collect();
        assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-9, "{shares:?}");
        // Nobody asks: equal shares. Nobody here: the floor.
        assert_eq!(r.synced(4, &[0.0], &[0.0]).0, Plan::Shares(vec![0.25]));
        assert_eq!(r.synced(4, &[100.0], &[0.0]).0, Plan::Shares(vec![MIN_SHARE / 4.0]));
    }

    #[test]
    fn one_lost_sync_changes_nothing_two_fall_back_and_recovery_needs_two() {
        let mut r = Reconciler::default();
        r.synced(4, &[100.0], &[80.0]);
        assert_eq!(r.failed(), (Plan::Keep, false));
        assert_eq!(r.failed(), (Plan::Fallback(0.25), true), "quota / the 4 replicas last seen");
        assert!(!r.up());
        // A flapping Redis: one good sync between failures keeps the fallback.
        assert_eq!(r.synced(4, &[100.0], &[80.0]), (Plan::Fallback(0.25), false));
        assert_eq!(r.failed(), (Plan::Fallback(0.25), false));
        assert_eq!(r.synced(4, &[100.0], &[80.0]), (Plan::Fallback(0.25), false));
        assert_eq!(r.synced(4, &[100.0], &[80.0]), (Plan::Shares(vec![0.8]), true));
        assert!(r.up());
    }

    #[test]
    fn never_reached_keeps_the_own_quota() {
        let mut r = Reconciler::default();
        assert_eq!(r.failed(), (Plan::Fallback(1.0), false));
        assert_eq!(r.step(1.0, 1.0, false), 1.0);
    }

    #[test]
    fn steps_are_damped_except_the_first() {
        let mut r = Reconciler::default();
        r.synced(3, &[1.0], &[1.0]);
        assert_eq!(r.step(1.0, 0.2, true), 0.2);
        assert_eq!(r.step(1.0, 0.2, false), 0.75);
        assert_eq!(r.step(0.2, 0.3, false), 0.3);
        assert!((r.step(0.0, 0.0, false) - MIN_SHARE / 3.0).abs() < 1e-12, "never below the floor");
    }

    #[test]
    fn keys_hash_the_tenant() {
        let k = limiter_key("weir:", "acme corp", "req");
        assert!(k.starts_with("weir:q:") && k.ends_with(":req") && !k.contains("acme"), "{k}");
        assert_ne!(k, limiter_key("weir:", "acme corq", "req"));
    }

    #[test]
    fn totals_parse() {
        use redis::Value;
        let r = Value::Array(vec![Value::Int(3), Value::BulkString(b"300.5".to_vec())]);
        assert_eq!(parse_totals(&r, 1).unwrap(), (3, vec![300.5]));
        assert!(parse_totals(&r, 2).is_err());
        assert!(parse_totals(&Value::Nil, 1).is_err());
    }
}
