//! The admission decision on the request path: classify the route, read the snapshot,
//! decide. Normal (the common case) and Shedding (needs a random draw).

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use weir::config::ThrottleConfig;
use weir::signal::Signal;
use weir::throttle::classify::RouteRegistry;
use weir::throttle::manager::{decide, Snapshot, ThrottleManager};
use weir::throttle::state::State;

fn bench(c: &mut Criterion) {
    let config = ThrottleConfig::default();
    let mut routes = RouteRegistry::new();
    for s in Signal::ALL {
        routes.register(s.http_path(), s);
        routes.register(s.grpc_path(), s);
    }
    let manager = ThrottleManager::new(&config);
    let mut g = c.benchmark_group("throttle_decide");
    g.bench_function("normal/classify+decide", |b| b.iter(|| manager.decide(routes.classify(black_box("/v1/logs")))));
    let shedding = Snapshot { states: [State::Shedding; 4], intensity: 0.5, ..Snapshot::idle() };
    manager.publish(shedding.clone());
    g.bench_function("shedding/classify+decide", |b| b.iter(|| manager.decide(routes.classify(black_box("/v1/logs")))));
    let rule = manager.rule(Signal::Logs);
    g.bench_function("shedding/pure_decide", |b| b.iter(|| decide(&config, &rule, black_box(&shedding), Signal::Logs, black_box(0.4))));
    // The whole admission path of one request: classify, throttle decision, every
    // admission layer (hot, so each layer does its checks), and the completion.
    let admission = weir::admission::Admission::new(&config, 2.0);
    let hot = weir::admission::Pressure { above_exit: true, above_enter: true, cpu: 0.9 };
    manager.publish(Snapshot::idle());
    let mut now = 0u64;
    g.bench_function("full/classify+decide+layers+done", |b| {
        b.iter(|| {
            now += 50_000;
            let signal = routes.classify(black_box("/v1/logs"));
            let d = manager.decide(signal);
            if let (weir::throttle::manager::Decision::Admit(_), Ok(t)) = (d, admission.admit(now, hot)) {
                admission.done(t, now + 10_000, 0.9);
            }
        })
    });
    // The same plus layer 0, queue delay, as the request path runs it: the connection's
    // receive stamp turned into a wait (a real-time clock read) and checked.
    let stamp = weir::receiver::connection::stamp::RxStamp::arrived_at(weir::receiver::connection::stamp::realtime_nanos());
    g.bench_function("full+queue_delay/classify+decide+layers+done", |b| {
        b.iter(|| {
            now += 50_000;
            let signal = routes.classify(black_box("/v1/logs"));
            let d = manager.decide(signal);
            let ok = admission.check_queue_delay(black_box(&stamp).waited_nanos().unwrap_or(0), hot).is_ok();
            if let (weir::throttle::manager::Decision::Admit(_), true, Ok(t)) = (d, ok, admission.admit(now, hot)) {
                admission.done(t, now + 10_000, 0.9);
            }
        })
    });
    // The same plus the refused-body read credit an admitted request earns and gives
    // back when it ends (`drain::credit`, on every protocol).
    g.bench_function("full+read_credit/classify+decide+layers+done", |b| {
        b.iter(|| {
            now += 50_000;
            let signal = routes.classify(black_box("/v1/logs"));
            let d = manager.decide(signal);
            if let (weir::throttle::manager::Decision::Admit(_), Ok(t)) = (d, admission.admit(now, hot)) {
                let earning = weir::receiver::middleware::drain::credit(black_box(Some(237_804)));
                admission.done(t, now + 10_000, 0.9);
                drop(earning);
            }
        })
    });
    // The same with the PID rate controller on (its update runs once per sample
    // interval; every request takes a token).
    let mut with_pid = config.clone();
    with_pid.pid.enabled = true;
    let pid_admission = weir::admission::Admission::new(&with_pid, 2.0);
    g.bench_function("full+pid/classify+decide+layers+done", |b| {
        b.iter(|| {
            now += 50_000;
            let signal = routes.classify(black_box("/v1/logs"));
            let d = manager.decide(signal);
            if let (weir::throttle::manager::Decision::Admit(_), Ok(t)) = (d, pid_admission.admit(now, hot)) {
                pid_admission.done(t, now + 10_000, 0.9);
            }
        })
    });
    g.finish();

    // A tenant's request quota on the request path: a replica on its own, and one whose
    // share the fleet sync (`receiver.auth.quota_store`) has set. The sync itself runs
    // off the request path; what a request pays for the fleet is counting its demand.
    use weir::quota::store::Shared;
    let mut g = c.benchmark_group("quota_check");
    let local = weir::quota::Gcra::new(1e9, 1000, false);
    let mut t = 0u64;
    g.bench_function("local", |b| {
        b.iter(|| {
            t += 2;
            black_box(local.check(black_box(t)))
        })
    });
    let fleet = weir::quota::Gcra::new(1e9, 1000, true);
    fleet.set_share(0.37);
    g.bench_function("fleet_share", |b| {
        b.iter(|| {
            t += 3;
            black_box(fleet.check(black_box(t)))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
