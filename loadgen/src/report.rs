//! The SVG a user looks at first: throughput and status mix, P99 of successes, and weir's
//! water levels and throttle state, over time.

use crate::scrape::Sample;
use crate::stats::Second;
use anyhow::{anyhow, Result};
use plotters::prelude::*;

pub fn draw(path: &str, title: &str, seconds: &[Second], samples: &[Sample]) -> Result<()> {
    let e = |e: &dyn std::fmt::Display| anyhow!("report: {e}");
    let root = SVGBackend::new(path, (1100, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|x| e(&x))?;
    let panels = root.split_evenly((3, 1));
    let t_max = seconds.iter().map(|s| s.t).max().unwrap_or(1).max(1) as f64;

    // 1. Requests per second by outcome.
    let y_max = seconds.iter().map(|s| s.counts.total()).max().unwrap_or(1).max(1) as f64 * 1.1;
    let mut c = ChartBuilder::on(&panels[0])
        .caption("requests/s by outcome", ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(25)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..t_max, 0f64..y_max)
        .map_err(|x| e(&x))?;
    c.configure_mesh().x_desc("s").draw().map_err(|x| e(&x))?;
    type Series = (&'static str, RGBColor, fn(&Second) -> u64);
    let series: [Series; 4] = [
        ("200", GREEN, |s| s.counts.ok),
        ("429", RGBColor(230, 150, 0), |s| s.counts.status_429),
        ("503", RED, |s| s.counts.status_503),
        ("other+errors", BLACK, |s| s.counts.other + s.counts.transport_errors),
    ];
    for (name, color, f) in series {
        c.draw_series(LineSeries::new(seconds.iter().map(|s| (s.t as f64, f(s) as f64)), color.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
    }
    c.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(|x| e(&x))?;

    // 2. P99 of successful requests.
    let p_max = seconds.iter().filter_map(|s| s.p99_ms).fold(1.0, f64::max) * 1.1;
    let mut c = ChartBuilder::on(&panels[1])
        .caption("P99 latency of successful requests (ms)", ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(25)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..t_max, 0f64..p_max)
        .map_err(|x| e(&x))?;
    c.configure_mesh().x_desc("s").draw().map_err(|x| e(&x))?;
    c.draw_series(LineSeries::new(seconds.iter().filter_map(|s| s.p99_ms.map(|p| (s.t as f64, p))), BLUE.stroke_width(2)))
        .map_err(|x| e(&x))?;

    // 3. Water levels and state (traces).
    let lv_max = samples.iter().flat_map(|s| s.levels.values()).copied().filter(|v| v.is_finite()).fold(1.2, f64::max).min(3.0);
    let mut c = ChartBuilder::on(&panels[2])
        .caption("weir water levels and traces state (0 Normal, 1 Shedding, 2 Open; right scale ÷2)", ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(25)
        .y_label_area_size(50)
        .build_cartesian_2d(0f64..t_max, 0f64..lv_max)
        .map_err(|x| e(&x))?;
    c.configure_mesh().x_desc("s").draw().map_err(|x| e(&x))?;
    let lines: [(&str, RGBColor); 5] = [
        ("cpu", RGBColor(150, 150, 255)),
        ("cpu_slow", BLUE),
        ("cpu_fast", CYAN),
        ("mem", MAGENTA),
        ("cpu_enter", RGBColor(120, 120, 120)),
    ];
    for (kind, color) in lines {
        let pts: Vec<(f64, f64)> = samples.iter().filter_map(|s| s.levels.get(kind).filter(|v| v.is_finite()).map(|v| (s.t, *v))).collect();
        if pts.is_empty() {
            continue;
        }
        c.draw_series(LineSeries::new(pts, color.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(kind)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
    }
    let state: Vec<(f64, f64)> = samples.iter().filter_map(|s| s.states.get("traces").map(|v| (s.t, v / 2.0))).collect();
    if !state.is_empty() {
        c.draw_series(LineSeries::new(state, RED.stroke_width(3)))
            .map_err(|x| e(&x))?
            .label("state/2")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], RED));
    }
    c.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
