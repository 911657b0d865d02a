//! `auto` or a value: a key whose default weir works out at run time from what it
//! measures (see docs/overload.md, "What weir works out by itself"). Written `auto` in
//! YAML, or a value, which then overrides what weir would derive.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::time::Duration;

/// `auto` (derived at run time) or a value set by hand.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Auto<T> {
    /// Worked out at run time.
    #[default]
    Auto,
    /// Set by hand.
    Set(T),
}

impl<T: Copy> Auto<T> {
    /// The value set by hand, if any.
    pub fn get(self) -> Option<T> {
        match self {
            Auto::Auto => None,
            Auto::Set(v) => Some(v),
        }
    }

    /// Whether weir derives it.
    pub fn is_auto(self) -> bool {
        matches!(self, Auto::Auto)
    }
}

/// What may stand after `auto`'s alternative in YAML.
pub trait AutoValue: Sized + Copy {
    /// From a string that is not `auto` (a duration such as `20ms`, or a number in quotes).
    fn parse_text(s: &str) -> Result<Self, String>;
    /// From a number.
    fn from_f64(v: f64) -> Result<Self, String>;
    /// Writes the value.
    fn write<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error>;
}

impl AutoValue for f64 {
    fn parse_text(s: &str) -> Result<Self, String> {
        s.trim().parse().map_err(|_| format!("`{s}` is neither `auto` nor a number"))
    }
    fn from_f64(v: f64) -> Result<Self, String> {
        Ok(v)
    }
    fn write<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(*self)
    }
}

impl AutoValue for u64 {
    fn parse_text(s: &str) -> Result<Self, String> {
        s.trim().parse().map_err(|_| format!("`{s}` is neither `auto` nor a whole number"))
    }
    fn from_f64(v: f64) -> Result<Self, String> {
        if v >= 0.0 && v.fract() == 0.0 && v <= u64::MAX as f64 {
            Ok(v as u64)
        } else {
            Err(format!("{v} is neither `auto` nor a whole number >= 0"))
        }
    }
    fn write<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*self)
    }
}

impl AutoValue for Duration {
    fn parse_text(s: &str) -> Result<Self, String> {
        humantime_serde::re::humantime::parse_duration(s.trim())
            .map_err(|e| format!("`{s}` is neither `auto` nor a duration such as 20ms ({e})"))
    }
    fn from_f64(v: f64) -> Result<Self, String> {
        // A bare 0 is the one number that reads the same in any unit.
        if v == 0.0 {
            Ok(Duration::ZERO)
        } else {
            Err(format!("{v} needs a unit (e.g. {v}ms) or `auto`"))
        }
    }
    fn write<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime_serde::re::humantime::format_duration(*self).to_string())
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Repr {
    Text(String),
    Unsigned(u64),
    Signed(i64),
    Float(f64),
}

impl<'de, T: AutoValue> Deserialize<'de> for Auto<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let r = match Repr::deserialize(d)? {
            Repr::Text(s) if s.trim().eq_ignore_ascii_case("auto") => return Ok(Auto::Auto),
            Repr::Text(s) => T::parse_text(&s),
            Repr::Unsigned(v) => T::from_f64(v as f64),
            Repr::Signed(v) => T::from_f64(v as f64),
            Repr::Float(v) => T::from_f64(v),
        };
        r.map(Auto::Set).map_err(serde::de::Error::custom)
    }
}

impl<T: AutoValue> Serialize for Auto<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Auto::Auto => s.serialize_str("auto"),
            Auto::Set(v) => v.write(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Serialize, Debug, PartialEq)]
    struct K {
        n: Auto<f64>,
        b: Auto<u64>,
        d: Auto<Duration>,
    }

    #[test]
    fn auto_and_values_read_and_write_back() {
        let k: K = serde_yaml::from_str("n: auto\nb: 262144\nd: 20ms\n").unwrap();
        assert_eq!(k, K { n: Auto::Auto, b: Auto::Set(262144), d: Auto::Set(Duration::from_millis(20)) });
        let again: K = serde_yaml::from_str(&serde_yaml::to_string(&k).unwrap()).unwrap();
        assert_eq!(again, k);
        let k: K = serde_yaml::from_str("n: 1.5\nb: AUTO\nd: 0\n").unwrap();
        assert_eq!(k, K { n: Auto::Set(1.5), b: Auto::Auto, d: Auto::Set(Duration::ZERO) });
    }

    #[test]
    fn a_wrong_value_says_what_was_expected() {
        let e = serde_yaml::from_str::<K>("n: fast\nb: 1\nd: 1ms\n").unwrap_err().to_string();
        assert!(e.contains("neither `auto` nor a number"), "{e}");
        let e = serde_yaml::from_str::<K>("n: 1\nb: 1\nd: 20\n").unwrap_err().to_string();
        assert!(e.contains("needs a unit"), "{e}");
        let e = serde_yaml::from_str::<K>("n: 1\nb: -3\nd: 1ms\n").unwrap_err().to_string();
        assert!(e.contains("whole number"), "{e}");
    }
}
