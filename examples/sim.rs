//! Prints the simulator table: every scenario with all layers, and with each layer off.
//! `cargo run --release --example sim`

use weir::sim::{run, scenarios, table, Layers};

fn main() {
    let variants: [(&str, Layers); 7] = [
        ("all layers", Layers::ALL),
        ("no slow start", Layers { slow_start: false, ..Layers::ALL }),
        ("no damping", Layers { damping: false, ..Layers::ALL }),
        ("no BBR", Layers { bbr: false, ..Layers::ALL }),
        ("no knee", Layers { knee: false, ..Layers::ALL }),
        ("no hold", Layers { hold: false, ..Layers::ALL }),
        (
            "throttle only",
            Layers { slow_start: false, damping: false, bbr: false, knee: false, hold: false, pid: false, inflight_limit: false },
        ),
    ];
    let mut rows = Vec::new();
    for s in scenarios() {
        for (label, layers) in variants {
            rows.push((label.to_string(), s.name, run(&s, layers, 42)));
        }
    }
    print!("{}", table(&rows));
}
