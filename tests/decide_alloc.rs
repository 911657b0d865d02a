//! The admission decision allocates nothing: counted with a wrapping global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::Ordering;
use weir::config::ThrottleConfig;
use weir::signal::Signal;
use weir::throttle::classify::RouteRegistry;
use weir::throttle::manager::{Snapshot, ThrottleManager};
use weir::throttle::state::State;

struct Counting;

thread_local! {
    // Per thread: the test harness's own threads allocate too, and must not count.
    static THREAD_ALLOCS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Allocations made by the calling thread so far.
struct Allocs;
impl Allocs {
    fn load(&self, _: Ordering) -> usize {
        THREAD_ALLOCS.with(|c| c.get())
    }
}
static ALLOCS: Allocs = Allocs;

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = THREAD_ALLOCS.try_with(|c| c.set(c.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn decide_does_not_allocate() {
    let mut routes = RouteRegistry::new();
    for s in Signal::ALL {
        routes.register(s.http_path(), s);
    }
    let manager = ThrottleManager::new(&ThrottleConfig::default());
    let mut decisions = 0;
    for state in [State::Normal, State::Shedding, State::Open] {
        manager.publish(Snapshot { states: [state; 4], intensity: 0.5, ..Snapshot::idle() });
        // Warm the thread-local RNG and arc-swap's per-thread slots first.
        let _ = manager.decide(routes.classify("/v1/traces"));
        let before = ALLOCS.load(Ordering::Relaxed);
        for _ in 0..10_000 {
            let d = manager.decide(routes.classify(std::hint::black_box("/v1/traces")));
            decisions += matches!(d, weir::throttle::manager::Decision::Admit(_)) as usize;
        }
        assert_eq!(ALLOCS.load(Ordering::Relaxed) - before, 0, "decide allocated in state {state:?}");
    }
    assert!(decisions >= 10_000, "Normal admitted everything");

    // The admission layers, hot (every check runs), admit and done: no allocation.
    let admission = weir::admission::Admission::new(&ThrottleConfig::default(), 2.0);
    let hot = weir::admission::Pressure { above_exit: true, above_enter: true, cpu: 0.9 };
    let mut now = 1u64;
    for _ in 0..1000 {
        now += 100_000;
        if let Ok(t) = admission.admit(now, hot) {
            admission.done(t, now + 50_000, 0.9);
        }
    }
    // With layer 0: the connection's receive stamp read as a wait, and checked.
    let stamp = weir::receiver::connection::stamp::RxStamp::arrived_at(weir::receiver::connection::stamp::realtime_nanos());
    let before = ALLOCS.load(Ordering::Relaxed);
    let mut refused_for_waiting = 0;
    for _ in 0..10_000 {
        now += 100_000;
        if admission.check_queue_delay(stamp.waited_nanos().unwrap_or(0), hot).is_err() {
            refused_for_waiting += 1;
            continue;
        }
        if let Ok(t) = admission.admit(now, hot) {
            admission.done(t, now + 50_000, 0.9);
        }
    }
    assert_eq!(ALLOCS.load(Ordering::Relaxed) - before, 0, "admission layers allocated");
    assert!(refused_for_waiting < 10_000, "a fresh stamp is mostly under the 10 ms target");
}
