//! Flags in the seed's Go style (`-c 50`, `-d 30s`) and the usual `--c=50` alike.

use anyhow::{anyhow, bail, Context, Result};
use std::time::Duration;

/// Everything loadgen can be told.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Args {
    pub url: String,
    pub token: Option<String>,
    pub concurrency: usize,
    pub phase_duration: Duration,
    pub warmup_spans: usize,
    pub burst_spans: usize,
    pub bigpayload_spans: usize,
    pub encoding: String,
    pub gzip: bool,
    pub protocol: String,
    pub phases: Vec<String>,
    pub rate: f64,
    pub json: Option<String>,
    pub metrics_url: Option<String>,
    pub report: Option<String>,
    pub timeout: Duration,
    pub max_requests: u64,
    pub respect_retry_after: bool,
    pub http2: bool,
    pub keep_connections: bool,
}

pub const USAGE: &str = "usage: loadgen [flags]   (single or double dash; `-flag value` or `-flag=value`)

  -url URL               target (default http://127.0.0.1:4318/v1/traces; for -protocol grpc: http://127.0.0.1:4317)
  -token T               sent as X-BK-TOKEN
  -c N                   concurrency (default 50; warmup uses max(1, c/5))
  -d DURATION            length of each phase (default 30s)
  -warmup-spans N        spans per warmup request (default 128, 128 B of attributes each)
  -burst-spans N         spans per burst request (default 512, 1024 B each)
  -bigpayload-spans N    spans per bigpayload request (default 128, 4096 B each)
  -encoding json|proto   body encoding (default json; -protocol grpc always sends proto)
  -gzip                  gzip request bodies
  -protocol http|grpc    transport (default http)
  -phases LIST           comma list of warmup,burst,bigpayload (default all three)
  -rate N                open loop: N requests/s on a fixed schedule, latency from the scheduled time
                         (default 0 = closed loop: each of c workers sends as soon as the previous answer came)
  -json FILE             write all results as JSON
  -metrics-url URL       scrape weir's /metrics every second and keep water levels and states
  -report FILE           draw an SVG of throughput, status mix, P99, water levels and states
  -timeout DURATION      per request (default 10s)
  -max-requests N        stop a phase after N requests (default 0 = no bound but time)
  -http2                 HTTP/2 without TLS (h2c prior knowledge) instead of HTTP/1.1: a refused
                         request ends its stream, not the connection
  -respect-retry-after   closed loop: after a 429/503 with Retry-After (or RESOURCE_EXHAUSTED /
                         UNAVAILABLE with RetryInfo) the worker waits that long, plus up to
                         half again (jitter), as OTLP SDK exporters do (default off: a
                         refused worker sends its next request at once)
  -keep-connections      one client (one connection pool) for the whole run, and a phase's
                         requests still unanswered at its end are let finish (not counted)
                         before the next phase starts, as long-lived exporters behave; default
                         off: each phase opens new connections and cancels what is in flight,
                         as if every client restarted at the phase edge";

fn duration(s: &str) -> Result<Duration> {
    let s = s.trim();
    let (num, unit) = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).map_or((s, "s"), |i| (&s[..i], &s[i..]));
    let v: f64 = num.parse().with_context(|| format!("bad duration `{s}`"))?;
    let secs = match unit {
        "ms" => v / 1000.0,
        "s" | "" => v,
        "m" => v * 60.0,
        "h" => v * 3600.0,
        _ => bail!("bad duration unit in `{s}` (ms, s, m, h)"),
    };
    Ok(Duration::from_secs_f64(secs))
}

impl Args {
    pub fn parse(raw: impl IntoIterator<Item = String>) -> Result<Args> {
        let mut a = Args {
            url: String::new(),
            token: None,
            concurrency: 50,
            phase_duration: Duration::from_secs(30),
            warmup_spans: 128,
            burst_spans: 512,
            bigpayload_spans: 128,
            encoding: "json".into(),
            gzip: false,
            protocol: "http".into(),
            phases: vec!["warmup".into(), "burst".into(), "bigpayload".into()],
            rate: 0.0,
            json: None,
            metrics_url: None,
            report: None,
            timeout: Duration::from_secs(10),
            max_requests: 0,
            respect_retry_after: false,
            http2: false,
            keep_connections: false,
        };
        let mut it = raw.into_iter().peekable();
        while let Some(arg) = it.next() {
            let flag = arg.trim_start_matches('-');
            if flag.len() == arg.len() {
                bail!("unexpected argument `{arg}`\n\n{USAGE}");
            }
            let (name, inline) = match flag.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (flag.to_string(), None),
            };
            if name == "h" || name == "help" {
                bail!("{USAGE}");
            }
            if name == "gzip" {
                a.gzip = inline.as_deref().is_none_or(|v| v != "false");
                continue;
            }
            if name == "http2" {
                a.http2 = inline.as_deref().is_none_or(|v| v != "false");
                continue;
            }
            if name == "keep-connections" {
                a.keep_connections = inline.as_deref().is_none_or(|v| v != "false");
                continue;
            }
            if name == "respect-retry-after" {
                a.respect_retry_after = inline.as_deref().is_none_or(|v| v != "false");
                continue;
            }
            let value = match inline {
                Some(v) => v,
                None => it.next().ok_or_else(|| anyhow!("-{name} needs a value"))?,
            };
            let num = |v: &str| v.parse::<usize>().with_context(|| format!("-{name}: `{v}` is not a number"));
            match name.as_str() {
                "url" => a.url = value,
                "token" => a.token = Some(value),
                "c" => a.concurrency = num(&value)?.max(1),
                "d" => a.phase_duration = duration(&value)?,
                "warmup-spans" => a.warmup_spans = num(&value)?,
                "burst-spans" => a.burst_spans = num(&value)?,
                "bigpayload-spans" => a.bigpayload_spans = num(&value)?,
                "encoding" if value == "json" || value == "proto" => a.encoding = value,
                "protocol" if value == "http" || value == "grpc" => a.protocol = value,
                "phases" => {
                    a.phases = value.split(',').map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect();
                    if let Some(bad) = a.phases.iter().find(|p| !matches!(p.as_str(), "warmup" | "burst" | "bigpayload")) {
                        bail!("-phases: unknown phase `{bad}` (warmup, burst, bigpayload)");
                    }
                }
                "rate" => a.rate = value.parse().with_context(|| format!("-rate: `{value}`"))?,
                "json" => a.json = Some(value),
                "metrics-url" => a.metrics_url = Some(value),
                "report" => a.report = Some(value),
                "timeout" => a.timeout = duration(&value)?,
                "max-requests" => a.max_requests = value.parse().with_context(|| format!("-max-requests: `{value}`"))?,
                "encoding" | "protocol" => bail!("-{name}: `{value}` is not allowed"),
                other => bail!("unknown flag -{other}\n\n{USAGE}"),
            }
        }
        if a.url.is_empty() {
            a.url = if a.protocol == "grpc" { "http://127.0.0.1:4317".into() } else { "http://127.0.0.1:4318/v1/traces".into() };
        }
        if a.protocol == "grpc" && a.encoding == "json" {
            // gRPC carries protobuf; the seed's JSON default applies to HTTP.
            a.encoding = "proto".into();
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Args> {
        Args::parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn seed_command_lines_work_unchanged() {
        let a =
            parse("-url http://127.0.0.1:4318/v1/traces -token abc -c 26 -d 60s -warmup-spans 64 -burst-spans 256 -bigpayload-spans 32")
                .unwrap();
        assert_eq!((a.concurrency, a.phase_duration, a.token.as_deref()), (26, Duration::from_secs(60), Some("abc")));
        assert_eq!((a.warmup_spans, a.burst_spans, a.bigpayload_spans), (64, 256, 32));
        assert_eq!(a.encoding, "json");
        let b = parse("--c=32 --d=3s --gzip --encoding proto --phases burst --rate 500").unwrap();
        assert_eq!(
            (b.concurrency, b.phase_duration, b.gzip, b.encoding.as_str(), b.phases.len(), b.rate),
            (32, Duration::from_secs(3), true, "proto", 1, 500.0)
        );
        assert!(parse("-c x").is_err());
        assert!(parse("-phases warmup,nap").is_err());
        assert!(parse("-bogus 1").is_err());
        assert_eq!(parse("-protocol grpc").unwrap().url, "http://127.0.0.1:4317");
        assert!(!parse("").unwrap().keep_connections);
        assert!(parse("-keep-connections").unwrap().keep_connections);
        assert!(!parse("-keep-connections=false").unwrap().keep_connections);
    }
}
