//! Unit and property tests of the layers, with explicit time.

use super::*;
use proptest::prelude::*;
use std::time::Duration;

const MS: u64 = 1_000_000;
const HOT: Pressure = Pressure { above_exit: true, above_enter: true, cpu: 0.95 };
const COOL: Pressure = Pressure { above_exit: false, above_enter: false, cpu: 0.2 };

/// The layers on their own: no in-flight cap and no line (the adaptive limit has tests
/// of its own in `limit`), and one return ratio for every hold.
fn cfg() -> ThrottleConfig {
    use crate::config::auto::Auto;
    let mut c = ThrottleConfig {
        max_inflight_per_core: Auto::Set(0.0),
        max_inflight_wait: Auto::Set(Duration::ZERO),
        max_inflight_queue_per_core: 0.0,
        inflight_wait_min_body_bytes: Auto::Set(0),
        ..ThrottleConfig::default()
    };
    c.hold.deadline_return_ratio = None;
    c
}

#[test]
fn ramp_is_saturating() {
    assert_eq!(ramp(200.0, 1000.0, 0.0), 200.0);
    assert!((ramp(200.0, 1000.0, 1.0) - (200.0 + 800.0 * (1.0 - (-4.0f64).exp()))).abs() < 1e-9);
    assert!(ramp(200.0, 1000.0, 1.0) > 980.0, "~98% at the end");
    assert!(ramp(200.0, 1000.0, 0.25) - 200.0 > (ramp(200.0, 1000.0, 1.0) - ramp(200.0, 1000.0, 0.75)), "fast first, slow later");
}

#[test]
fn hard_cap_refuses_even_when_cool() {
    let c = ThrottleConfig { max_inflight_per_core: crate::config::auto::Auto::Set(2.0), ..cfg() };
    let a = Admission::new(&c, 1.5); // cap = ceil(3.0) = 3
    let t: Vec<_> = (0..3).map(|i| a.admit(i * MS, COOL).unwrap()).collect();
    assert_eq!(a.admit(5 * MS, COOL), Err(Layer::InflightCap));
    a.done(t[0], 6 * MS, 0.1);
    assert!(a.admit(7 * MS, COOL).is_ok());
}

#[test]
fn slow_start_caps_the_rate_only_when_hot() {
    let mut c = cfg();
    c.bbr.enabled = false;
    c.burst_damping.enabled = false;
    c.slow_start.initial_rate = 100.0;
    c.slow_start.duration = Duration::from_secs(10);
    let a = Admission::new(&c, 1.0);
    // Cool: 1000 requests in the first second all pass.
    for i in 0..1000 {
        assert!(a.admit(i * MS, COOL).is_ok());
    }
    // Hot in the next second: only the ramp's rate passes (target = the 1000/s demand;
    // progress goes from 0.1 to 0.2 during that second).
    let passed = (0..1000).filter(|i| a.admit(SEC + i * MS, HOT).is_ok()).count() as f64;
    let (lo, hi) = (ramp(100.0, 1000.0, 0.1), ramp(100.0, 1000.0, 0.2));
    assert!(passed >= lo && passed <= hi + 1.0, "passed {passed}, ramp between {lo} and {hi}");
    // Keep traffic flowing (with completions) until the ramp is over: then no limit.
    let mut now = 2 * SEC;
    while now < 11 * SEC {
        let t = a.admit(now, COOL).unwrap();
        a.done(t, now + MS, 0.3);
        now += 5 * MS;
    }
    let later = 11 * SEC;
    for i in 0..500 {
        assert!(a.admit(later + i * MS, HOT).is_ok(), "after warmup");
    }
}

#[test]
fn the_rate_caps_never_refuse_a_request_that_finds_a_core_idle() {
    // Slow start ramping from 10/s, hot, but each request done before the next arrives:
    // one core, never more than one in flight, so nothing is refused.
    let mut c = cfg();
    c.bbr.enabled = false;
    c.slow_start.initial_rate = 10.0;
    c.slow_start.duration = Duration::from_secs(30);
    let a = Admission::new(&c, 1.0);
    for i in 0..2000 {
        let now = i * MS;
        let t = a.admit(now, HOT).unwrap_or_else(|l| panic!("request {i} refused by {l:?} with the core idle"));
        a.done(t, now + MS / 2, 0.9);
    }
    assert!(a.phases().0, "still ramping");
    // The same rate with the core taken (nothing done): the ramp's cap applies. Progress
    // is about 2/30 there and the target the 1000/s offered, so the second admits close
    // to ramp(10, 1000, 2/30) = 240, nowhere near the 1000 offered.
    let passed = (0..1000).filter(|i| a.admit(2 * SEC + i * MS, HOT).is_ok()).count() as f64;
    let (lo, hi) = (ramp(10.0, 1000.0, 2.0 / 30.0), ramp(10.0, 1000.0, 3.0 / 30.0));
    assert!(passed >= lo - 1.0 && passed <= hi + 1.0, "passed {passed} while busy, ramp between {lo} and {hi}");
}

#[test]
fn idle_gap_re_enters_slow_start() {
    let mut c = cfg();
    c.bbr.enabled = false;
    c.burst_damping.enabled = false;
    c.slow_start.duration = Duration::from_secs(2);
    let a = Admission::new(&c, 1.0);
    c.slow_start.duration = Duration::from_secs(30);
    let a30 = Admission::new(&c, 1.0);
    // Steady traffic for 12 s: warmup ends, pass window full.
    let mut now = 0;
    while now < 35 * SEC {
        for adm in [&a, &a30] {
            let t = adm.admit(now, COOL).unwrap();
            adm.done(t, now + MS, 0.3);
        }
        now += 10 * MS;
    }
    assert!(!a.phases().0 && !a30.phases().0);
    // A minute of silence, then a hot burst: slow start again, capped near its start.
    let burst = now + 60 * SEC;
    let passed = (0..1000).filter(|i| a30.admit(burst + i * 100_000, HOT).is_ok()).count();
    assert!(a30.phases().0, "ramping again");
    assert!(passed < 1000 && passed >= c.slow_start.initial_rate as usize, "{passed}");
}

#[test]
fn burst_damping_caps_a_sudden_burst_then_recovers() {
    let mut c = cfg();
    c.bbr.enabled = false;
    c.slow_start.duration = Duration::from_secs(1);
    let a = Admission::new(&c, 1.0);
    // 100 req/s for 12 s (slow start done, baseline = 100/s).
    let mut now = 0;
    while now < 12 * SEC {
        let t = a.admit(now, COOL).unwrap();
        a.done(t, now + MS, 0.3);
        now += 10 * MS;
    }
    // 10× burst, hot: damped near the baseline in the first second.
    let start = 13 * SEC;
    let passed = (0..1000).filter(|i| a.admit(start + i * MS, HOT).is_ok()).count();
    assert!(a.phases().1, "damping active");
    assert!(passed < 400, "damped: {passed}");
    // Recovering along the curve: a later second admits more than the first.
    let later = start + 3 * SEC;
    let passed_later = (0..1000).filter(|i| a.admit(later + i * MS, HOT).is_ok()).count();
    assert!(passed_later > passed, "{passed_later} > {passed}");
    // And never while cool.
    let cool = (0..1000).filter(|i| a.admit(later + SEC + i * MS, COOL).is_ok()).count();
    assert_eq!(cool, 1000);
}

#[test]
fn bbr_refuses_over_littles_law_only_when_overloaded() {
    let mut c = cfg();
    c.slow_start.enabled = false;
    c.burst_damping.enabled = false;
    c.bbr.headroom = 1.0; // Little's law, unscaled
    let a = Admission::new(&c, 1.0);
    // 10 passes per 100 ms bucket, 10 ms each: maxInFlight = 10 * 10 * 10 / 1000 = 1.
    let mut now = 0;
    while now < 2 * SEC {
        let t = a.admit(now, COOL).unwrap();
        a.done(t, now + 10 * MS, 0.5);
        now += 10 * MS;
    }
    assert_eq!(a.bbr_estimate(now).0, Some(1));
    let held: Vec<_> = (0..5).map(|_| a.admit(now, COOL).unwrap()).collect();
    assert_eq!(held.len(), 5, "cool: in-flight over the estimate is fine");
    assert_eq!(a.admit(now, HOT), Err(Layer::Bbr));
    // Cool-off: above exit but below enter still refuses for 1 s.
    let band = Pressure { above_exit: true, above_enter: false, cpu: 0.75 };
    assert_eq!(a.admit(now + 500 * MS, band), Err(Layer::Bbr));
    assert!(a.admit(now + 1500 * MS, band).is_ok(), "after the cool-off");
    for t in held {
        a.done(t, now + 2 * SEC, 0.5);
    }
}

proptest! {
    /// While every water level is below its exit line, no adaptive layer refuses,
    /// whatever the traffic pattern (the hard cap is off by default).
    #[test]
    fn nothing_is_refused_below_the_exit_lines(
        gaps in proptest::collection::vec(0u64..3_000, 1..400),
        hold in proptest::collection::vec(0u64..5_000, 1..400),
        slow_start_ms in 100u64..60_000,
    ) {
        let mut c = cfg();
        c.slow_start.duration = Duration::from_millis(slow_start_ms);
        let a = Admission::new(&c, 2.0);
        let mut now = 0u64;
        let mut pending: Vec<(u64, Ticket)> = Vec::new();
        for (i, gap) in gaps.iter().enumerate() {
            now += gap * MS / 10;
            pending.retain(|(at, t)| if *at <= now { a.done(*t, *at, 0.3); false } else { true });
            // However long the request waited in front of weir (up to 500 ms here).
            prop_assert!(a.check_queue_delay(hold[i % hold.len()] * MS / 10, COOL).is_ok(), "queue delay refused while cool");
            let t = a.admit(now, COOL);
            prop_assert!(t.is_ok(), "refused at {now} with everything below exit");
            pending.push((now + hold[i % hold.len()] * MS / 10, t.unwrap()));
        }
    }
}

#[test]
fn queue_delay_refuses_a_long_wait_only_while_busy() {
    // Target 10 ms, CPU exit 0.75 by default.
    let a = Admission::new(&cfg(), 1.0);
    // Hot but with no admitted request in flight: a core busy only refusing (an open-loop
    // flood, where every request has waited) must still admit something.
    assert_eq!(a.check_queue_delay(11 * MS, HOT), Ok(()), "no admitted work: refusing it leaves no goodput");
    let busy = a.admit(0, HOT).expect("a core with nothing in flight admits");
    assert_eq!(a.check_queue_delay(11 * MS, HOT), Err(Layer::QueueDelay));
    assert_eq!(a.check_queue_delay(9 * MS, HOT), Ok(()), "a wait under the target passes");
    assert_eq!(a.check_queue_delay(500 * MS, COOL), Ok(()), "idle: a long wait is a stalled scheduler, not a queue");
    a.done(busy, MS, 0.9);
    // Busy right now (this sample's CPU above exit) before the slow level has caught up:
    // a queue only while the core has a request in flight; alone, a stall after a spike.
    let rising = Pressure { above_exit: false, above_enter: false, cpu: 0.9 };
    assert_eq!(a.check_queue_delay(11 * MS, rising), Ok(()), "no request ahead of it: a stall, not a queue");
    let t = a.admit(0, COOL).expect("an idle core admits");
    assert_eq!(a.check_queue_delay(11 * MS, rising), Err(Layer::QueueDelay));
    a.done(t, MS, 0.9);
    let mut off = cfg();
    off.queue_delay.enabled = false;
    assert_eq!(Admission::new(&off, 1.0).check_queue_delay(500 * MS, HOT), Ok(()));
    // A CPU slot that is switched off does not count as busy.
    let mut no_cpu = cfg();
    no_cpu.thresholds.cpu.enabled = false;
    assert_eq!(Admission::new(&no_cpu, 1.0).check_queue_delay(500 * MS, rising), Ok(()));
}

/// Completes `n` requests, 1 ms each, spread evenly over the second that ends at `end`.
fn complete_over_a_second(a: &Admission, n: u64, end: u64) {
    complete_sized_over_a_second(a, n, end, 0);
}

/// [`complete_over_a_second`] with each request declaring `bytes` of body.
fn complete_sized_over_a_second(a: &Admission, n: u64, end: u64, bytes: u64) {
    for i in 0..n {
        let at = end - SEC + i * SEC / n;
        let mut t = a.admit(at, COOL).unwrap();
        t.bytes = bytes;
        a.done(t, at + MS, 0.5);
    }
}

/// The config of the hold tests: no slow start, no `max_held` bound.
fn holding_cfg(return_ratio: f64, max: Duration) -> ThrottleConfig {
    let mut c = cfg();
    c.slow_start.enabled = false;
    c.hold.return_ratio = return_ratio;
    c.hold.max = max;
    c.hold.max_held = 10_000;
    c
}

/// Admission with [`holding_cfg`].
fn holding(return_ratio: f64, max: Duration) -> Admission {
    Admission::new(&holding_cfg(return_ratio, max), 1.0)
}

#[test]
fn a_refusal_is_held_so_the_held_clients_return_at_return_ratio_times_the_completion_rate() {
    let a = holding(2.0, Duration::from_secs(1));
    // Nothing completed yet: no rate to keep busy, the longest hold allowed.
    assert_eq!(a.hold_for(0, 1, None, None), Duration::from_secs(1));
    // 1000 completions a second (100 per 100 ms bucket): 100 held clients return at
    // 2000/s when each is held 50 ms.
    complete_over_a_second(&a, 1000, 2 * SEC);
    let h = a.hold_for(2 * SEC, 100, None, None);
    assert!((h.as_secs_f64() - 0.05).abs() < 1e-3, "{h:?}");
    // Twice the held clients, twice the hold; one held client, a short one.
    assert!((a.hold_for(2 * SEC, 200, None, None).as_secs_f64() - 0.1).abs() < 1e-3);
    assert!(a.hold_for(2 * SEC, 1, None, None) < Duration::from_millis(1));
    // Never past hold.max.
    assert_eq!(a.hold_for(2 * SEC, 4000, None, None), Duration::from_secs(1));
    // The rate is the last second's: two seconds later the completions are forgotten.
    assert_eq!(a.hold_for(4 * SEC, 100, None, None), Duration::from_secs(1));
}

#[test]
fn a_refused_large_body_is_held_for_the_rate_of_requests_its_size() {
    let a = holding(1.0, Duration::from_secs(5));
    // A second of 1000 completions of 30 KB bodies: 30 MB/s.
    let end = 2 * SEC;
    complete_sized_over_a_second(&a, 1000, end, 30_000);
    // A 30 KB refusal: the request rate, 1000/s, so 100 held take 100 ms.
    let small = a.hold_for(end, 100, Some(30_000), None);
    assert!((small.as_secs_f64() - 0.1).abs() < 1e-3, "{small:?}");
    // A 600 KB refusal right after: 30 MB/s is 50 of those a second, so 2 s, not the
    // 100 ms that the small bodies' request rate gives.
    let large = a.hold_for(end, 100, Some(600_000), None);
    assert!((large.as_secs_f64() - 2.0).abs() < 1e-2, "{large:?}");
    assert_eq!(a.hold_for(end, 100, None, None), small, "no length: the request rate");
    assert_eq!(a.hold_for(end, 100, Some(0), None), small, "length 0: the request rate");
    // Smaller bodies than those completed are not held shorter than the request rate says.
    assert_eq!(a.hold_for(end, 100, Some(1_000), None), small);
}

#[test]
fn a_stated_deadline_bounds_the_hold_instead_of_max_so_the_jittered_hold_ends_inside_it() {
    let mut c = holding_cfg(0.05, Duration::from_secs(5));
    let a = Admission::new(&c, 1.0);
    let ten = Some(Duration::from_secs(10));
    // Nothing completed: the longest hold, 0.8 x 10 s less the jitter's quarter.
    assert_eq!(a.hold_for(0, 1, None, ten), Duration::from_secs_f64(6.4));
    assert_eq!(a.hold_for(0, 1, None, None), Duration::from_secs(5), "no deadline: max");
    // The Collector's 5 s: at most 4 s with jitter, under the 5 s `max`.
    let five = a.hold_for(0, 1, None, Some(Duration::from_secs(5)));
    assert_eq!(five, Duration::from_secs_f64(3.2));
    assert!(five.mul_f64(1.0 + crate::admission::HOLD_JITTER) <= Duration::from_secs(4));
    // A deadline of hours is held at most a minute, jitter included.
    assert_eq!(a.hold_for(0, 1, None, Some(Duration::from_secs(7200))), Duration::from_secs(48));
    // Under the bound, the completion rate sizes the hold as without a deadline:
    // 1000/s at 0.05 returns 50/s, so 100 held are held 2 s.
    complete_over_a_second(&a, 1000, 2 * SEC);
    let h = a.hold_for(2 * SEC, 100, None, ten);
    assert!((h.as_secs_f64() - 2.0).abs() < 1e-2, "{h:?}");
    // deadline_share 0: deadlines ignored.
    c.hold.deadline_share = 0.0;
    a.reconfigure(&c);
    assert_eq!(a.hold_for(2 * SEC, 1000, None, ten), Duration::from_secs(5));
}

#[test]
fn a_refusal_is_answered_at_once_when_holding_is_off_or_too_many_are_held() {
    let mut c = cfg();
    c.hold.max_held = 10;
    let a = Admission::new(&c, 1.0);
    assert_eq!(a.hold_for(0, 10, None, None), c.hold.max);
    assert_eq!(a.hold_for(0, 11, None, None), Duration::ZERO, "past max_held");
    c.hold.enabled = false;
    a.reconfigure(&c);
    assert_eq!(a.hold_for(0, 1, None, None), Duration::ZERO, "off");
}

#[test]
fn the_line_for_a_slot_is_bounded_per_core() {
    let mut c = cfg();
    c.max_inflight_wait = crate::config::auto::Auto::Set(Duration::from_millis(20));
    c.max_inflight_queue_per_core = 1.0;
    let a = Admission::new(&c, 2.0);
    assert!(a.join_line(None) && a.join_line(None), "two cores: two may wait");
    assert!(!a.join_line(None), "a third may not");
    a.leave_line();
    assert!(a.join_line(None), "a place freed");
    c.max_inflight_queue_per_core = 0.0;
    a.reconfigure(&c);
    assert!((0..100).all(|_| a.join_line(None)), "0: no bound");
}

#[test]
fn only_bodies_of_the_configured_size_may_wait_in_the_line() {
    let mut c = cfg();
    c.max_inflight_queue_per_core = 4.0;
    let a = Admission::new(&c, 1.0);
    assert!(!a.join_line(Some(1 << 20)), "no max_inflight_wait: no line for anyone");
    c.max_inflight_wait = crate::config::auto::Auto::Set(Duration::from_millis(20));
    c.inflight_wait_min_body_bytes = crate::config::auto::Auto::Set(256 * 1024);
    a.reconfigure(&c);
    let before = a.joined_total();
    assert!(!a.join_line(Some(256 * 1024 - 1)), "a body one byte short is refused at once");
    assert_eq!(a.joined_total(), before, "and did not join");
    assert!(a.join_line(Some(256 * 1024)), "a body of the minimum waits");
    assert!(a.join_line(None), "a body without a declared length (gRPC) waits");
    c.inflight_wait_min_body_bytes = crate::config::auto::Auto::Set(0);
    a.reconfigure(&c);
    assert!(a.join_line(Some(0)), "0: every body may wait");
    assert_eq!(a.joined_total(), before + 3);
}

#[test]
fn the_line_is_empty_only_where_there_is_a_line_and_nobody_waits_in_it() {
    assert!(!Admission::new(&cfg(), 1.0).line_empty(), "no cap, no wait: no line");
    let no_wait = ThrottleConfig { max_inflight_per_core: crate::config::auto::Auto::Set(1.0), ..cfg() };
    assert!(!Admission::new(&no_wait, 1.0).line_empty(), "a cap but no wait: refused at once, no line");
    let no_cap = ThrottleConfig { max_inflight_wait: crate::config::auto::Auto::Set(Duration::from_millis(20)), ..cfg() };
    assert!(!Admission::new(&no_cap, 1.0).line_empty(), "a wait but no cap: nothing to wait for");
    let line = ThrottleConfig {
        max_inflight_per_core: crate::config::auto::Auto::Set(1.0),
        max_inflight_wait: crate::config::auto::Auto::Set(Duration::from_millis(20)),
        max_inflight_queue_per_core: 1.0,
        ..cfg()
    };
    let a = Admission::new(&line, 1.0);
    assert!(a.line_empty());
    let before = a.joined_total();
    assert!(a.join_line(None));
    assert!(!a.line_empty(), "one waits");
    assert_eq!(a.joined_total(), before + 1);
    assert!(!a.join_line(None), "a line of one per core is full");
    assert_eq!(a.joined_total(), before + 1, "a request turned away did not join");
    a.leave_line();
    assert!(a.line_empty());
}

#[test]
fn a_request_that_states_its_deadline_returns_at_deadline_return_ratio_and_others_at_return_ratio() {
    let mut c = holding_cfg(0.1, Duration::from_secs(5));
    let a = Admission::new(&c, 1.0);
    complete_over_a_second(&a, 1000, 2 * SEC);
    let ten = Some(Duration::from_secs(10));
    // Unset: both at return_ratio. 1000/s at 0.1 returns 100/s, so 300 held take 3 s.
    let same = a.hold_for(2 * SEC, 300, None, ten);
    assert!((same.as_secs_f64() - 3.0).abs() < 1e-2, "{same:?}");
    c.hold.deadline_return_ratio = Some(0.05);
    a.reconfigure(&c);
    // At 0.05, 50/s: 300 held take 6 s, past `max` (5 s) but inside the 10 s deadline's
    // bound (6.4 s before jitter).
    let stated = a.hold_for(2 * SEC, 300, None, ten);
    assert!((stated.as_secs_f64() - 6.0).abs() < 1e-2, "{stated:?}");
    // Without a deadline nothing changes.
    let unstated = a.hold_for(2 * SEC, 300, None, None);
    assert!((unstated.as_secs_f64() - 3.0).abs() < 1e-2, "{unstated:?}");
    // Deadlines ignored (share 0): return_ratio and `max` again.
    c.hold.deadline_share = 0.0;
    a.reconfigure(&c);
    assert_eq!(a.hold_for(2 * SEC, 300, None, ten), unstated);
}

/// The shipped defaults: the adaptive limit, its line and its derived values.
fn adaptive() -> ThrottleConfig {
    ThrottleConfig::default()
}

fn busy() -> Pressure {
    Pressure { above_exit: true, above_enter: true, cpu: 1.0 }
}

#[test]
fn the_adaptive_limit_refuses_only_while_busy() {
    let a = Admission::new(&adaptive(), 1.0);
    assert!(a.adaptive());
    // The first window is a probe at the floor: one request on one core.
    assert_eq!(a.derived().inflight_cap, 1);
    let calm = Pressure { cpu: 0.3, ..Pressure::default() };
    let t1 = a.admit(0, calm).expect("calm: admitted");
    assert_eq!(a.admit(0, calm), Err(Layer::InflightCap), "over the limit: not admitted straight away, even calm");
    // Calm, it waits in the line and is let in when the wait ends; busy, it is refused.
    assert!(a.join_line_calm(0, calm), "calm: room to wait");
    let t2 = a.admit_waited(0, calm).expect("calm: let in after the wait");
    a.leave_line();
    assert!(!a.join_line_calm(0, busy()), "busy: no calm line");
    assert_eq!(a.admit_waited(0, busy()), Err(Layer::InflightCap), "busy: refused after the wait");
    // The limit stays in force for BUSY_HOLD after weir was last busy, calm or not.
    assert_eq!(a.admit_waited(SEC, calm), Err(Layer::InflightCap), "a second later: still in force");
    assert!(!a.join_line_calm(SEC, calm));
    // (That refusal, over the limit while in force, extended the hold from there.)
    assert!(a.join_line_calm(SEC + BUSY_HOLD + 1, calm), "after the hold: calm again");
    a.leave_line();
    for t in [t1, t2] {
        a.done(t, MS, 0.5);
    }
}

#[test]
fn a_calm_weir_lets_any_crowd_wait_and_refuses_none() {
    let a = Admission::new(&adaptive(), 1.0);
    let calm = Pressure { cpu: 0.2, ..Pressure::default() };
    let tickets: Vec<_> = (0..1).map(|_| a.admit(0, calm).expect("within the limit")).collect();
    // A thousand over the limit: every one may wait, and every one is let in after it.
    assert!((0..1000).all(|_| a.join_line_calm(0, calm)));
    let waited: Vec<_> = (0..1000).map(|_| a.admit_waited(20 * MS, calm).expect("calm: let in after the wait")).collect();
    for _ in 0..1000 {
        a.leave_line();
    }
    for t in tickets.into_iter().chain(waited) {
        a.done(t, 30 * MS, 0.2);
    }
}

#[test]
fn derived_values_follow_the_calm_service_time_and_a_value_set_by_hand_wins() {
    let mut c = adaptive();
    let a = Admission::new(&c, 2.0);
    assert_eq!(a.inflight_wait(), Duration::from_millis(20), "nothing measured yet");
    assert_eq!(a.queue_delay_target(), Duration::from_millis(10));
    assert_eq!(a.wait_min_body_bytes(), limit::wait_min_body_bytes());
    c.max_inflight_wait = crate::config::auto::Auto::Set(Duration::from_millis(50));
    c.queue_delay.target = crate::config::auto::Auto::Set(Duration::from_millis(3));
    c.inflight_wait_min_body_bytes = crate::config::auto::Auto::Set(1);
    c.max_inflight_per_core = crate::config::auto::Auto::Set(3.0);
    a.reconfigure(&c);
    let d = a.derived();
    assert_eq!((d.adaptive, d.inflight_cap), (false, 6), "a fixed cap: 3 per core on 2 cores");
    assert_eq!(
        (a.inflight_wait(), a.queue_delay_target(), a.wait_min_body_bytes()),
        (Duration::from_millis(50), Duration::from_millis(3), 1)
    );
}
