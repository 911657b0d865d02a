//! Per-tenant request quotas (a token bucket, as GCRA): `rate` requests per
//! second with bursts of `burst`. A request over its tenant's quota is refused before its
//! body is read, with the exact time until the next conforming request as Retry-After /
//! RetryInfo. State exists only for configured tenants (unknown tokens never get past
//! authentication), so it cannot grow per key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

pub mod client;
pub mod store;

use store::Shared;

/// One tenant's limiter: the generic cell rate algorithm on a theoretical arrival time.
/// In a fleet ([`store`]) it enforces a share of the configured rate and burst.
#[derive(Debug)]
pub struct Gcra {
    rate: f64,
    burst: u32,
    /// Nanoseconds between conforming requests (1 / rate).
    emission: AtomicU64,
    /// Tolerance: how far ahead of now the arrival time may run (burst × emission).
    tolerance: AtomicU64,
    /// Theoretical arrival time, nanoseconds since the limiter's origin.
    tat: AtomicU64,
    /// Requests offered (refused ones included) and this replica's share.
    fleet: FleetShare,
}

/// What a fleet's sync reads and sets on a limiter ([`store`]): the demand offered since
/// it last looked, and this replica's share of the quota (1.0 without a fleet). Without a
/// quota store nothing is counted: the count is a relaxed add on a counter that every
/// core serving a hot tenant contends for.
#[derive(Debug)]
struct FleetShare {
    counted: bool,
    offered: AtomicU64,
    /// f64 bits.
    share: AtomicU64,
}

impl FleetShare {
    fn new(counted: bool) -> Self {
        FleetShare { counted, offered: AtomicU64::new(0), share: AtomicU64::new(1f64.to_bits()) }
    }

    #[inline]
    fn offer(&self, n: u64) {
        if self.counted {
            self.offered.fetch_add(n, Ordering::Relaxed);
        }
    }

    fn take(&self) -> u64 {
        self.offered.swap(0, Ordering::Relaxed)
    }

    fn get(&self) -> f64 {
        f64::from_bits(self.share.load(Ordering::Relaxed))
    }

    /// Stores `share` kept within (0, 1] (a zero, negative or broken share would make a
    /// rate zero and an interval infinite) and returns what was stored.
    fn set(&self, share: f64) -> f64 {
        let share = if share.is_finite() { share.clamp(1e-6, 1.0) } else { 1.0 };
        self.share.store(share.to_bits(), Ordering::Relaxed);
        share
    }
}

impl Gcra {
    /// `rate` requests per second (> 0), bursts of `burst` (≥ 1); `fleet`: a quota store
    /// shares it, so its demand is counted.
    pub fn new(rate: f64, burst: u32, fleet: bool) -> Self {
        let g = Gcra {
            rate,
            burst,
            emission: AtomicU64::new(0),
            tolerance: AtomicU64::new(0),
            tat: AtomicU64::new(0),
            fleet: FleetShare::new(fleet),
        };
        g.set_share(1.0);
        g
    }

    /// Takes one request at `now` (ns); `Err(wait)` is the exact time until it would conform.
    pub fn check(&self, now: u64) -> Result<(), Duration> {
        self.fleet.offer(1);
        let emission = self.emission.load(Ordering::Relaxed);
        let tolerance = self.tolerance.load(Ordering::Relaxed);
        let mut tat = self.tat.load(Ordering::Relaxed);
        loop {
            let start = tat.max(now);
            let next = start + emission;
            if next > now + tolerance {
                return Err(Duration::from_nanos(next - tolerance - now));
            }
            match self.tat.compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(seen) => tat = seen,
            }
        }
    }
}

impl Shared for Gcra {
    fn take_offered(&self) -> u64 {
        self.fleet.take()
    }

    fn share(&self) -> f64 {
        self.fleet.get()
    }

    /// The rate and the burst both scale with the share; a burst never below one request.
    fn set_share(&self, share: f64) {
        let share = self.fleet.set(share);
        let emission = (1e9 / (self.rate * share)).max(1.0) as u64;
        let burst = (f64::from(self.burst) * share).round().max(1.0) as u64;
        self.emission.store(emission, Ordering::Relaxed);
        self.tolerance.store(emission.saturating_mul(burst), Ordering::Relaxed);
    }
}

/// A token bucket for items (spans, data points, …): `rate` per second, at most one
/// second's worth banked. Unlike [`Gcra`] it grants part of a request.
#[derive(Debug)]
pub struct ItemBucket {
    /// The configured rate.
    base: f64,
    /// (tokens, last refill ns, rate in force: `base` × share).
    state: std::sync::Mutex<(f64, u64, f64)>,
    fleet: FleetShare,
}

impl ItemBucket {
    /// `rate` items per second, starting full; `fleet` as for [`Gcra::new`].
    pub fn new(rate: f64, fleet: bool) -> Self {
        ItemBucket { base: rate, state: std::sync::Mutex::new((rate, 0, rate)), fleet: FleetShare::new(fleet) }
    }

    /// Takes up to `n` items at `now` (ns); returns how many were granted.
    pub fn take(&self, now: u64, n: usize) -> usize {
        self.fleet.offer(n as u64);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (tokens, last, rate) = *st;
        let refilled = (tokens + now.saturating_sub(last) as f64 / 1e9 * rate).min(rate);
        let granted = (refilled.floor() as usize).min(n);
        *st = (refilled - granted as f64, now.max(last), rate);
        granted
    }
}

impl Shared for ItemBucket {
    fn take_offered(&self) -> u64 {
        self.fleet.take()
    }

    fn share(&self) -> f64 {
        self.fleet.get()
    }

    fn set_share(&self, share: f64) {
        let share = self.fleet.set(share);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.2 = self.base * share;
        st.0 = st.0.min(st.2);
    }
}

/// One limiter the fleet shares, as [`Quotas::shared`] lists it.
pub struct SharedLimiter {
    /// Its key in the store (without the prefix): the tenant's name hashed.
    pub key: String,
    /// The tenant (for this replica's metrics only; never sent to the store).
    pub tenant: String,
    /// `requests`, or the signal whose items it counts.
    pub limit: &'static str,
    /// The limiter.
    pub limiter: std::sync::Arc<dyn Shared>,
}

/// The limiters of every configured tenant with a rate.
#[derive(Debug, Default)]
pub struct Quotas {
    by_tenant: HashMap<String, (RateKey, std::sync::Arc<Gcra>)>,
    items: HashMap<(String, crate::signal::Signal), (u64, std::sync::Arc<ItemBucket>)>,
    origin: Option<std::time::Instant>,
}

/// What shapes a limiter: a reload keeps the limiter when this did not change.
type RateKey = (u64, u32);

impl Quotas {
    /// From `receiver.auth.tenants`.
    pub fn from_config(auth: &crate::config::AuthConfig) -> Self {
        Self::reloaded(&Quotas::default(), auth)
    }

    /// New quotas from `auth`, reusing `old`'s limiters (and their state) for tenants
    /// whose rate and burst did not change.
    pub fn reloaded(old: &Quotas, auth: &crate::config::AuthConfig) -> Self {
        let fleet = auth.quota_store.is_some();
        let by_tenant = auth
            .tenants
            .iter()
            .filter_map(|(t, c)| {
                let r = c.rate.as_ref()?;
                let key = (r.requests_per_second.to_bits(), r.burst);
                let gcra = match old.by_tenant.get(t) {
                    Some((k, g)) if *k == key => std::sync::Arc::clone(g),
                    // A changed quota keeps the fleet share its limiter had.
                    Some((_, g)) => {
                        let new = Gcra::new(r.requests_per_second, r.burst, fleet);
                        new.set_share(g.share());
                        std::sync::Arc::new(new)
                    }
                    None => std::sync::Arc::new(Gcra::new(r.requests_per_second, r.burst, fleet)),
                };
                Some((t.clone(), (key, gcra)))
            })
            .collect();
        let mut items = HashMap::new();
        for (t, c) in &auth.tenants {
            for (signal, rate) in c.items.iter() {
                let key = (t.clone(), signal);
                let bucket = match old.items.get(&key) {
                    Some((r, b)) if *r == rate.to_bits() => std::sync::Arc::clone(b),
                    Some((_, b)) => {
                        let new = ItemBucket::new(rate, fleet);
                        new.set_share(b.share());
                        std::sync::Arc::new(new)
                    }
                    None => std::sync::Arc::new(ItemBucket::new(rate, fleet)),
                };
                items.insert(key, (rate.to_bits(), bucket));
            }
        }
        Quotas { origin: old.origin.or_else(|| Some(std::time::Instant::now())), by_tenant, items }
    }

    /// Takes up to `n` items of `signal` for `tenant`; returns how many are allowed
    /// (all of them when the tenant has no item quota for the signal).
    pub fn take_items(&self, tenant: &str, signal: crate::signal::Signal, n: usize) -> usize {
        let now = self.origin.map_or(0, |o| o.elapsed().as_nanos() as u64);
        match self.items.get(&(tenant.to_string(), signal)) {
            Some((_, b)) => b.take(now, n),
            None => n,
        }
    }

    /// Every limiter, for the fleet sync.
    pub fn shared(&self) -> Vec<SharedLimiter> {
        let requests = self.by_tenant.iter().map(|(t, (_, g))| SharedLimiter {
            key: store::limiter_key("", t, "requests"),
            tenant: t.clone(),
            limit: "requests",
            limiter: std::sync::Arc::clone(g) as std::sync::Arc<dyn Shared>,
        });
        let items = self.items.iter().map(|((t, signal), (_, b))| SharedLimiter {
            key: store::limiter_key("", t, signal.as_str()),
            tenant: t.clone(),
            limit: signal.as_str(),
            limiter: std::sync::Arc::clone(b) as std::sync::Arc<dyn Shared>,
        });
        requests.chain(items).collect()
    }

    /// Takes one request of `tenant` now.
    pub fn check(&self, tenant: &str) -> Result<(), Duration> {
        let now = self.origin.map_or(0, |o| o.elapsed().as_nanos() as u64);
        self.by_tenant.get(tenant).map_or(Ok(()), |(_, g)| g.check(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const S: u64 = 1_000_000_000;

    #[test]
    fn bursts_then_rate_with_exact_wait() {
        let g = Gcra::new(2.0, 3, false);
        assert!(g.check(0).is_ok());
        assert!(g.check(0).is_ok());
        assert!(g.check(0).is_ok());
        // The fourth at t=0 must wait half a second (one emission interval).
        assert_eq!(g.check(0), Err(Duration::from_millis(500)));
        assert_eq!(g.check(S / 4), Err(Duration::from_millis(250)));
        assert!(g.check(S / 2).is_ok());
        // Idle for long: the burst is back, not more.
        let later = 100 * S;
        for _ in 0..3 {
            assert!(g.check(later).is_ok());
        }
        assert!(g.check(later).is_err());
    }

    #[test]
    fn item_bucket_grants_part_of_a_request() {
        let b = ItemBucket::new(100.0, false);
        assert_eq!(b.take(0, 60), 60);
        assert_eq!(b.take(0, 60), 40, "the rest of the second's worth");
        assert_eq!(b.take(0, 10), 0);
        assert_eq!(b.take(S / 2, 80), 50, "half a second refills 50");
        assert_eq!(b.take(10 * S, 500), 100, "never more than one second banked");
    }

    #[test]
    fn a_share_scales_rate_and_burst() {
        let g = Gcra::new(100.0, 10, true);
        g.set_share(0.2);
        // 20/s with bursts of 2.
        assert!(g.check(0).is_ok() && g.check(0).is_ok());
        assert_eq!(g.check(0), Err(Duration::from_millis(50)));
        let passed = (1..=1000u64).filter(|i| g.check(i * S / 100).is_ok()).count();
        assert!((199..=201).contains(&passed), "{passed} in 10 s at a 0.2 share of 100/s");
        assert_eq!(g.take_offered(), 1003);
        assert_eq!(g.take_offered(), 0);
        let b = ItemBucket::new(100.0, true);
        b.set_share(0.5);
        assert_eq!(b.take(0, 80), 50, "the bank shrinks with the share");
        assert_eq!(b.take(S, 80), 50);
        assert_eq!(b.take_offered(), 160);
        // A zero or broken share never makes the interval infinite.
        for share in [0.0, f64::NAN, -1.0] {
            g.set_share(share);
            let _ = g.check(20 * S);
        }
    }

    #[test]
    fn without_a_quota_store_no_demand_is_counted() {
        let (g, b) = (Gcra::new(100.0, 10, false), ItemBucket::new(100.0, false));
        for i in 0..10 {
            let _ = (g.check(i * S), b.take(i * S, 5));
        }
        assert_eq!((g.take_offered(), b.take_offered()), (0, 0));
    }

    #[test]
    fn sustained_rate_matches_the_quota() {
        let g = Gcra::new(10.0, 1, false);
        let passed = (0..1000u64).filter(|i| g.check(i * S / 100).is_ok()).count();
        // 10 s at 100 offered/s, quota 10/s: about 100 pass.
        assert!((99..=101).contains(&passed), "{passed}");
    }
}
