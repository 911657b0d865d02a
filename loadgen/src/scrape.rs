//! Scrapes weir's /metrics once a second: water levels, throttle states, and the gauges and
//! counters that show what the throttle did in that second (refusals held, admissions and
//! refusals by reason, queued bytes, open connections).

use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize, Default)]
pub struct Sample {
    pub t: f64,
    /// `weir_throttle_water_level{kind}`.
    pub levels: BTreeMap<String, f64>,
    /// `weir_throttle_state{record_type}`.
    pub states: BTreeMap<String, f64>,
    /// Selected gauges: `weir_throttle_refusals_held`, `weir_throttle_held_bytes`,
    /// `weir_pipeline_queue_bytes`, `weir_receiver_connections` (each summed over its labels).
    pub gauges: BTreeMap<String, f64>,
    /// `weir_throttle_requests_total` by `decision/reason`, summed over the other labels,
    /// `weir_receiver_connections_closed_total`, `weir_throttle_holds_skipped_total` as
    /// `holds_skipped/<reason>`, `weir_throttle_holds_released_total` as
    /// `holds_released/<why>`, and `weir_receiver_h2_window_changes_total` as
    /// `h2_window/<to>` (cumulative, as scraped).
    pub counters: BTreeMap<String, f64>,
}

const GAUGES: [&str; 4] =
    ["weir_throttle_refusals_held", "weir_throttle_held_bytes", "weir_pipeline_queue_bytes", "weir_receiver_connections"];

/// Parses the lines of interest from a Prometheus text page.
pub fn parse(t: f64, text: &str) -> Sample {
    let mut s = Sample { t, ..Default::default() };
    for line in text.lines() {
        let (series, value) = match line.rsplit_once(' ') {
            Some(x) => x,
            None => continue,
        };
        let Ok(v) = value.parse::<f64>() else { continue };
        let label = |prefix: &str, key: &str| -> Option<String> {
            let rest = series.strip_prefix(prefix)?;
            let start = rest.find(&format!("{key}=\""))? + key.len() + 2;
            let end = rest[start..].find('"')? + start;
            Some(rest[start..end].to_string())
        };
        if let Some(kind) = label("weir_throttle_water_level{", "kind") {
            s.levels.insert(kind, v);
        } else if let Some(rt) = label("weir_throttle_state{", "record_type") {
            s.states.insert(rt, v);
        } else if let (Some(d), Some(r)) =
            (label("weir_throttle_requests_total{", "decision"), label("weir_throttle_requests_total{", "reason"))
        {
            *s.counters.entry(format!("{d}/{r}")).or_default() += v;
        } else if let Some(r) = label("weir_throttle_holds_skipped_total{", "reason") {
            *s.counters.entry(format!("holds_skipped/{r}")).or_default() += v;
        } else if let Some(why) = label("weir_throttle_holds_released_total{", "why") {
            *s.counters.entry(format!("holds_released/{why}")).or_default() += v;
        } else if let Some(to) = label("weir_receiver_h2_window_changes_total{", "to") {
            *s.counters.entry(format!("h2_window/{to}")).or_default() += v;
        } else {
            let name = series.split_once('{').map_or(series, |(n, _)| n);
            if GAUGES.contains(&name) {
                *s.gauges.entry(name.to_string()).or_default() += v;
            } else if name == "weir_receiver_connections_closed_total" {
                *s.counters.entry(name.to_string()).or_default() += v;
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    #[test]
    fn picks_levels_and_states() {
        let text = "weir_throttle_water_level{kind=\"cpu_slow\"} 0.5\nweir_throttle_state{record_type=\"traces\"} 1\nother 3\n";
        let s = super::parse(2.0, text);
        assert_eq!(s.levels["cpu_slow"], 0.5);
        assert_eq!(s.states["traces"], 1.0);
    }

    #[test]
    fn sums_requests_by_reason_and_picks_gauges() {
        let text = "weir_throttle_requests_total{protocol=\"http\",record_type=\"traces\",decision=\"denied\",reason=\"bbr\"} 4\n\
                    weir_throttle_requests_total{protocol=\"grpc\",record_type=\"logs\",decision=\"denied\",reason=\"bbr\"} 3\n\
                    weir_throttle_refusals_held 7\nweir_pipeline_queue_bytes{pipeline=\"traces\"} 100\nweir_other 1\n\
                    weir_throttle_held_bytes 2100000\nweir_throttle_holds_skipped_total{reason=\"held_bytes\"} 5\n\
                    weir_receiver_h2_window_changes_total{to=\"closed\"} 9\n\
                    weir_throttle_holds_released_total{why=\"empty_line\"} 11\n";
        let s = super::parse(1.0, text);
        assert_eq!(s.counters["denied/bbr"], 7.0);
        assert_eq!(s.gauges["weir_throttle_held_bytes"], 2_100_000.0);
        assert_eq!(s.counters["holds_skipped/held_bytes"], 5.0);
        assert_eq!(s.counters["h2_window/closed"], 9.0);
        assert_eq!(s.counters["holds_released/empty_line"], 11.0);
        assert_eq!(s.gauges["weir_throttle_refusals_held"], 7.0);
        assert_eq!(s.gauges["weir_pipeline_queue_bytes"], 100.0);
        assert!(!s.gauges.contains_key("weir_other"));
    }
}
