//! The deterministic simulator: every scenario with every layer on, each outcome
//! asserted. Prints the table (`cargo test --test simulator -- --nocapture`); the
//! per-layer comparison is `cargo run --release --example sim`.

use weir::sim::{run, scenarios, table, Layers};

#[test]
fn scenarios_meet_their_bounds() {
    let started = std::time::Instant::now();
    let mut rows = Vec::new();
    for s in scenarios() {
        let o = run(&s, Layers::ALL, 42);
        let name = s.name;
        if let Some(g) = o.goodput_under_overload {
            // A refusal that costs 30% of a request (an HTTP/1.1 body received for
            // nothing) is paid about once per two completions even when held: 80%. With
            // cheap refusals the plant idles a point more between held returns at the
            // default return_ratio 0.1 than at 0.25 (89.6% against 90.7%, every seed
            // within 0.2 points) and gains three with costly ones (87.2% against 84.0%);
            // on the real storm 0.1 was ahead over every protocol, gRPC (cheap refusals)
            // most (`bench/results/2026-12-03/ab-return-ratio/`), so the model's bound
            // for cheap refusals is 89%.
            let bound = match name {
                "retry storm, costly refusals" => 0.80,
                "retry storm, cheap refusals" => 0.89,
                _ => 0.90,
            };
            assert!(g >= bound, "{name}: goodput under overload {g:.3} < {bound} of capacity");
        }
        assert!(
            o.goodput_under_capacity >= 0.95 || name == "memory leak",
            "{name}: goodput at or under capacity {:.3}",
            o.goodput_under_capacity
        );
        // Admitted work waits at most the plant's own queue (256 × 1 ms) plus the
        // downstream wait: 300 ms; 500 ms where downstream itself takes 400 ms.
        let bound = if name == "slow downstream" { 500.0 } else { 300.0 };
        assert!(o.p99_ms <= bound, "{name}: P99 {:.0} ms > {bound}", o.p99_ms);
        if name != "memory leak" {
            assert_eq!(o.refusals_at_low_load, 0, "{name}: refused at ≤ 70% load");
        }
        if let Some(t) = o.secs_to_normal {
            assert!(t <= 10.0, "{name}: {t:.1} s to return to Normal after the load dropped");
        }
        assert!(o.state_changes_per_min <= 6.0, "{name}: {:.1} state changes per minute (oscillation)", o.state_changes_per_min);
        assert!(o.max_mem < 1.0, "{name}: memory reached {:.2} of the limit (OOM)", o.max_mem);
        if name == "memory leak" {
            assert!(o.opened, "the leak must drive the breaker open before the OOM killer");
        }
        if name == "priorities at 3x" {
            let [critical, normal, sheddable] = o.kept_under_overload.map(|k| k.unwrap_or(0.0));
            assert!(critical >= 0.95, "critical kept {critical:.3} of its demand under 3x overload");
            assert!(normal > sheddable, "normal ({normal:.3}) is shed after sheddable ({sheddable:.3})");
        }
        if name == "noisy CPU" {
            assert_eq!(o.refused, 0, "noise alone must not shed");
        }
        if name.starts_with("retry storm") {
            // Refused clients wait on a timer instead of coming back at once: refusing
            // stays a small share of the core (the goodput bound above holds too).
            assert!(o.refusal_cpu_share <= 0.15, "{name}: {:.1}% of the CPU spent refusing", o.refusal_cpu_share * 100.0);
        }
        rows.push(("all layers".to_string(), name, o));
    }
    println!("{}", table(&rows));
    println!("simulated {} scenarios in {:.1} s", rows.len(), started.elapsed().as_secs_f64());
}

#[test]
fn runs_are_deterministic() {
    let s = &scenarios()[2];
    assert_eq!(run(s, Layers::ALL, 7), run(s, Layers::ALL, 7));
}

/// The same storms without held refusals: clients that retry at once turn refusing into
/// the load, and goodput falls far below what holding keeps (the reason holding exists).
#[test]
fn retry_storms_collapse_without_held_refusals() {
    for s in scenarios().into_iter().filter(|s| s.name.starts_with("retry storm")) {
        let held = run(&s, Layers::ALL, 42);
        let spinning = run(&s, Layers { hold: false, ..Layers::ALL }, 42);
        let (h, n) = (held.goodput_under_overload.unwrap_or(0.0), spinning.goodput_under_overload.unwrap_or(0.0));
        println!(
            "{}: goodput {:.1}% held, {:.1}% not held; refusing {:.1}% vs {:.1}% of the CPU",
            s.name,
            h * 100.0,
            n * 100.0,
            held.refusal_cpu_share * 100.0,
            spinning.refusal_cpu_share * 100.0
        );
        assert!(spinning.refusal_cpu_share > 2.0 * held.refusal_cpu_share, "{}: holding must cut the CPU spent refusing", s.name);
        assert!(h > n, "{}: holding must keep more goodput ({h:.3} vs {n:.3})", s.name);
    }
}

/// The PID rate controller beside today's layers, scenario by scenario (printed as the
/// table in docs/overload.md): it must keep every guarantee the other layers keep (no
/// refusal at ≤ 70% load, not even from CPU noise; no OOM; admitted work within the
/// plant's queue). What it trades: it holds the CPU at its setpoint, refusals included,
/// so goodput under overload is about the setpoint less what refusing costs (≥ 75% here,
/// against ~98% for today's layers at 10x), and in exchange admitted work stops queueing:
/// its steady-overload P99 must beat today's layers' wherever the load stays above
/// capacity.
#[test]
fn pid_controller_side_by_side() {
    use weir::sim::pid_scenarios;
    let mut rows = Vec::new();
    let mut steadier = 0;
    let mut compared = 0;
    let mut failures = Vec::new();
    // Both without the in-flight limit: the PID controller against the shedding layers
    // it would replace (the adaptive limit bounds tail latency on its own).
    let shedding = Layers { inflight_limit: false, ..Layers::ALL };
    for s in pid_scenarios() {
        let today = run(&s, shedding, 42);
        let pid = run(&s, Layers { pid: true, ..shedding }, 42);
        let name = s.name;
        let mut check = |ok: bool, what: String| {
            if !ok {
                failures.push(format!("{name}: {what}"));
            }
        };
        check(pid.refusals_at_low_load == 0, format!("{} refusals at <= 70% load", pid.refusals_at_low_load));
        check(pid.max_mem < 1.0, format!("memory reached {:.2} of the limit", pid.max_mem));
        check(pid.p99_ms <= 300.0, format!("P99 {:.0} ms", pid.p99_ms));
        if let Some(g) = pid.goodput_under_overload {
            check(g >= 0.75, format!("goodput under overload {g:.3}"));
        }
        if let (Some(a), Some(b)) = (today.p99_steady_overload_ms, pid.p99_steady_overload_ms) {
            if name != "steady 1.2x" {
                check(b < a, format!("steady-overload P99 {b:.0} ms, not below today's {a:.0} ms"));
            }
        }
        if name.starts_with("noisy") {
            check(pid.refused == 0, format!("{} refused from noise alone", pid.refused));
        }
        if let (Some(a), Some(b)) = (today.rejection_ratio_sd, pid.rejection_ratio_sd) {
            compared += 1;
            if b < a {
                steadier += 1;
            }
        }
        rows.push(("today's layers".to_string(), name, today));
        rows.push(("+ PID".to_string(), name, pid));
    }
    println!("{}", table(&rows));
    println!("PID refusal ratio steadier in {steadier} of {compared} overload scenarios");
    assert!(failures.is_empty(), "the PID controller broke a guarantee: {failures:#?}");
}

/// The derived limits at 1, 2, 4 and 8 cores, at 2x and 10x and under a retry-at-once
/// storm, against the same goals as the benchmark: goodput at least 90% of capacity, the
/// steady-overload P99 within max(2x, +10 ms) of calm clients' (two per core, never
/// refused), and no OOM. Printed as a table (`-- --nocapture`).
#[test]
fn derived_limits_hold_at_every_size() {
    use weir::sim::core_scenarios;
    let mut rows = Vec::new();
    let mut calm = std::collections::HashMap::new();
    let mut failures = Vec::new();
    for (cores, s) in core_scenarios() {
        let o = run(&s, Layers::ALL, 42);
        let key = cores as u32;
        if s.name == "calm clients" {
            assert_eq!(o.refused, 0, "{cores} cores: calm clients refused");
            calm.insert(key, o.p99_ms);
        } else {
            let a = calm[&key];
            let g = o.goodput_under_overload.unwrap_or(0.0);
            let p99 = o.p99_steady_overload_ms.unwrap_or(o.p99_ms);
            if g < 0.9 {
                failures.push(format!("{cores} cores, {}: goodput {:.1}% of capacity", s.name, g * 100.0));
            }
            if p99 > (2.0 * a).max(a + 10.0) {
                failures.push(format!("{cores} cores, {}: steady P99 {p99:.1} ms against calm {a:.1} ms", s.name));
            }
            if o.max_mem >= 1.0 {
                failures.push(format!("{cores} cores, {}: memory reached {:.2} of the limit", s.name, o.max_mem));
            }
            if o.refusals_at_low_load > 0 {
                failures.push(format!("{cores} cores, {}: {} refusals at <= 70% load", s.name, o.refusals_at_low_load));
            }
        }
        rows.push((format!("{cores} cores"), s.name, o));
    }
    println!("{}", table(&rows));
    assert!(failures.is_empty(), "{failures:#?}");
}
