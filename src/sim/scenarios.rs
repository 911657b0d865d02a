//! The scenarios the simulator runs: the classic overload cases, the PID controller's
//! comparison and the derived limits from 1 to 8 cores.

use super::{Phase, Plant, Scenario};

/// Every request of the `normal` class.
const NORMAL_ONLY: [f64; 3] = [0.0, 1.0, 0.0];

fn phase(secs: f64, load: f64) -> Phase {
    Phase { secs, load, downstream_ms: 5.0 }
}

impl Scenario {
    fn with_plant(mut self, plant: Plant) -> Scenario {
        self.plant = plant;
        self
    }
}

/// The PID controller's comparison (issue: 1.2x, 3x and 10x overload, a step from 0.5x
/// to 3x, a slow ramp to 3x), each with a calm phase after it.
pub fn pid_scenarios() -> Vec<Scenario> {
    let plant = Plant::default();
    let calm = phase(30.0, 0.3);
    let mk = |name: &'static str, phases: Vec<Phase>| Scenario {
        name,
        phases,
        plant: plant.clone(),
        mix: NORMAL_ONLY,
        retry_at_once_clients: None,
    };
    let ramp: Vec<Phase> = (0..=10).map(|i| phase(6.0, 0.5 + 0.25 * f64::from(i))).chain([calm]).collect();
    vec![
        mk("steady 1.2x", vec![phase(10.0, 0.5), phase(60.0, 1.2), calm]),
        mk("steady 3x", vec![phase(10.0, 0.5), phase(60.0, 3.0), calm]),
        mk("steady 10x", vec![phase(10.0, 0.5), phase(60.0, 10.0), calm]),
        mk("step 0.5x to 3x", vec![phase(30.0, 0.5), phase(60.0, 3.0), calm]),
        mk("slow ramp 0.5x to 3x", ramp),
        mk("noisy CPU at 0.6x", vec![phase(90.0, 0.6)]).with_plant(Plant { cpu_noise: 0.15, ..plant.clone() }),
    ]
}

/// The scenarios of issue 6.
pub fn scenarios() -> Vec<Scenario> {
    let plant = Plant::default();
    vec![
        Scenario {
            name: "cold start, full load",
            phases: vec![phase(60.0, 1.2), phase(30.0, 0.3)],
            plant: plant.clone(),
            mix: NORMAL_ONLY,
            retry_at_once_clients: None,
        },
        Scenario {
            name: "idle gap then burst",
            phases: vec![phase(30.0, 0.5), phase(60.0, 0.0), phase(30.0, 2.0), phase(30.0, 0.3)],
            plant: plant.clone(),
            mix: NORMAL_ONLY,
            retry_at_once_clients: None,
        },
        Scenario {
            name: "step to 3x",
            phases: vec![phase(30.0, 0.6), phase(60.0, 3.0), phase(30.0, 0.3)],
            plant: plant.clone(),
            mix: NORMAL_ONLY,
            retry_at_once_clients: None,
        },
        Scenario {
            name: "sustained 10x",
            phases: vec![phase(10.0, 0.5), phase(60.0, 10.0), phase(30.0, 0.3)],
            plant: plant.clone(),
            mix: NORMAL_ONLY,
            retry_at_once_clients: None,
        },
        Scenario {
            name: "slow downstream",
            phases: vec![phase(20.0, 0.6), Phase { secs: 60.0, load: 0.6, downstream_ms: 400.0 }, phase(20.0, 0.6)],
            plant: Plant { bytes_per_request: 512.0 * 1024.0, ..plant.clone() },
            mix: NORMAL_ONLY,
            retry_at_once_clients: None,
        },
        Scenario {
            name: "memory leak",
            phases: vec![phase(120.0, 0.5)],
            plant: Plant { leak_per_request: 8.0 * 1024.0, ..plant.clone() },
            mix: NORMAL_ONLY,
            retry_at_once_clients: None,
        },
        Scenario {
            name: "noisy CPU",
            phases: vec![phase(90.0, 0.6)],
            plant: Plant { cpu_noise: 0.15, ..plant.clone() },
            mix: NORMAL_ONLY,
            retry_at_once_clients: None,
        },
        Scenario {
            name: "priorities at 3x",
            phases: vec![phase(20.0, 0.6), phase(60.0, 3.0), phase(20.0, 0.3)],
            plant: plant.clone(),
            mix: [0.2, 0.4, 0.4],
            retry_at_once_clients: None,
        },
        // A naive retry loop: 500 clients that send again as soon as they are
        // answered, refused or not; each refusal costs the server 5% (a small body) or
        // 30% (an HTTP/1.1 body that must be received) of an admitted request.
        Scenario {
            name: "retry storm, cheap refusals",
            phases: vec![phase(60.0, 2.0)],
            plant: Plant { refusals_take_cpu: true, reject_cost: 0.05, ..plant.clone() },
            mix: NORMAL_ONLY,
            retry_at_once_clients: Some(500),
        },
        Scenario {
            name: "retry storm, costly refusals",
            phases: vec![phase(60.0, 2.0)],
            plant: Plant { refusals_take_cpu: true, reject_cost: 0.3, ..plant },
            mix: NORMAL_ONLY,
            retry_at_once_clients: Some(500),
        },
    ]
}

/// The derived limits beyond one core: 1, 2, 4 and 8 cores, at 2x and 10x (arrivals
/// that do not come back when refused, as clients that honour Retry-After) and under a
/// retry-at-once storm (64 clients per core); memory and the plant's own queue (weir's
/// pipeline budget) grow with the cores. `calm clients` is the comparison: two clients per core
/// that never overload it (A in the benchmark).
pub fn core_scenarios() -> Vec<(f64, Scenario)> {
    let mut out = Vec::new();
    for cores in [1.0, 2.0, 4.0, 8.0] {
        // A container that grows with its cores; refusals cost the server CPU only where
        // their clients come straight back (the storm), as in the 1-core scenarios.
        // The plant's own queue (weir's pipeline budget) grows with the container too.
        let plant = Plant { cores, queue_limit: 256 * cores as usize, mem_limit: 300.0 * 1048576.0 * cores, ..Plant::default() };
        let storm = Plant { refusals_take_cpu: true, reject_cost: 0.05, ..plant.clone() };
        let mk = |name: &'static str, phases: Vec<Phase>, clients: Option<usize>| Scenario {
            name,
            phases,
            plant: if clients.is_some_and(|c| c > 2 * cores as usize) { storm.clone() } else { plant.clone() },
            mix: NORMAL_ONLY,
            retry_at_once_clients: clients,
        };
        out.push((cores, mk("calm clients", vec![phase(30.0, 0.5)], Some(2 * cores as usize))));
        out.push((cores, mk("2x", vec![phase(10.0, 0.5), phase(40.0, 2.0)], None)));
        out.push((cores, mk("10x", vec![phase(10.0, 0.5), phase(40.0, 10.0)], None)));
        out.push((cores, mk("retry storm", vec![phase(40.0, 2.0)], Some(64 * cores as usize))));
    }
    out
}
