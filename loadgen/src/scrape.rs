//! Scrapes weir's /metrics once a second: water levels, throttle states, process memory.

use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize, Default)]
pub struct Sample {
    pub t: f64,
    /// `weir_throttle_water_level{kind}`.
    pub levels: BTreeMap<String, f64>,
    /// `weir_throttle_state{record_type}`.
    pub states: BTreeMap<String, f64>,
}

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
}
