//! `${env:NAME}` and `${env:NAME:-default}` in YAML string values, the OpenTelemetry
//! Collector's convention, so secrets and per-pod values come from the environment
//! (`$${` is a literal `${`). A value that is one reference and nothing else takes the
//! variable's type (`max_bytes: ${env:QUEUE_BYTES}` is a number); inside a longer string
//! it is text. A variable that is not set and has no default is an error naming the key
//! and the variable.

use super::ConfigError;
use figment::value::{Dict, Value};

/// Expands every reference in the string values of `dict`; `path` is where it sits.
pub fn expand_dict(dict: &mut Dict, path: &str) -> Result<(), ConfigError> {
    for (k, v) in dict.iter_mut() {
        let key = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
        expand_value(v, &key)?;
    }
    Ok(())
}

fn expand_value(value: &mut Value, key: &str) -> Result<(), ConfigError> {
    match value {
        Value::String(tag, s) if s.contains("${") => {
            let tag = *tag;
            let (text, whole) = expand(s, key, &|name| std::env::var(name).ok())?;
            *value = if whole { text.parse::<Value>().unwrap_or_else(|_| Value::from(text.clone())) } else { Value::from(text) };
            // Keep where it came from, for error messages.
            if let Value::String(t, _) | Value::Num(t, _) | Value::Bool(t, _) = value {
                *t = tag;
            }
        }
        Value::Dict(_, d) => expand_dict(d, key)?,
        Value::Array(_, a) => {
            for (i, v) in a.iter_mut().enumerate() {
                expand_value(v, &format!("{key}[{i}]"))?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Expands `s`; also says whether `s` was exactly one reference.
fn expand(s: &str, key: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<(String, bool), ConfigError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    let mut refs = 0;
    while let Some(at) = rest.find("${") {
        if rest[..at].ends_with('$') {
            // `$${` is a literal `${`.
            out.push_str(&rest[..at - 1]);
            out.push_str("${");
            rest = &rest[at + 2..];
            continue;
        }
        out.push_str(&rest[..at]);
        let Some(end) = rest[at..].find('}') else {
            return Err(ConfigError::invalid(key, format!("unclosed `${{` in {s:?}")));
        };
        let inner = &rest[at + 2..at + end];
        if inner == "tenant" {
            // Filled in per batch by the exporters (`headers: {X-Scope-OrgID: "${tenant}"}`).
            out.push_str("${tenant}");
            rest = &rest[at + end + 1..];
            continue;
        }
        let Some(spec) = inner.strip_prefix("env:") else {
            return Err(ConfigError::invalid(
                key,
                format!("`${{{inner}}}`: only `${{env:NAME}}` and `${{env:NAME:-default}}` are understood"),
            ));
        };
        let (name, default) = match spec.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (spec, None),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(ConfigError::invalid(key, format!("`${{{inner}}}`: {name:?} is not an environment variable name")));
        }
        match (lookup(name), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(ConfigError::invalid(
                    key,
                    format!("environment variable {name} is not set (give a default with `${{env:{name}:-default}}`)"),
                ))
            }
        }
        refs += 1;
        rest = &rest[at + end + 1..];
    }
    out.push_str(rest);
    let whole = refs == 1 && s.starts_with("${") && s.ends_with('}');
    Ok((out, whole))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("s3cr3t".into()),
            "PORT" => Some("4318".into()),
            _ => None,
        }
    }

    #[test]
    fn references_defaults_literals_and_errors() {
        let x = |s: &str| expand(s, "a.b", &env);
        assert_eq!(x("${env:TOKEN}").unwrap(), ("s3cr3t".into(), true));
        assert_eq!(x("0.0.0.0:${env:PORT}").unwrap(), ("0.0.0.0:4318".into(), false));
        assert_eq!(x("${env:MISSING:-fallback}").unwrap(), ("fallback".into(), true));
        assert_eq!(x("${env:MISSING:-}").unwrap(), (String::new(), true));
        assert_eq!(x("cost $${env:TOKEN} plain").unwrap(), ("cost ${env:TOKEN} plain".into(), false));
        assert_eq!(x("no references").unwrap(), ("no references".into(), false));
        let e = x("${env:MISSING}").unwrap_err().to_string();
        assert!(e.contains("a.b") && e.contains("MISSING"), "{e}");
        assert!(x("${env:TOKEN").unwrap_err().to_string().contains("unclosed"));
        assert!(x("${file:/etc/passwd}").unwrap_err().to_string().contains("only"));
        assert_eq!(x("org-${tenant}").unwrap(), ("org-${tenant}".into(), false), "left for the exporters");
        assert!(x("${env:BAD NAME}").unwrap_err().to_string().contains("not an environment variable name"));
    }
}
