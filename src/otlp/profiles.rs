//! Conversions into OTLP profiles (v1development): from pprof (`perftools.profiles`) and
//! from Pyroscope's "folded" text (`frame;frame;frame count` per line).
//!
//! OTLP keeps one sample type per profile, so a pprof with several sample types (e.g.
//! `samples/count` and `cpu/nanoseconds`) becomes one OTLP profile per type, sharing a
//! dictionary. Index 0 of every dictionary table is the zero value, as OTLP requires.

use crate::pprof;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::profiles::v1development as otlp;
use opentelemetry_proto::tonic::resource::v1::Resource;
use std::collections::HashMap;

/// Why a profile could not be converted.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ProfileError {
    /// Bad input, with what is wrong.
    #[error("{0}")]
    Invalid(String),
}

/// Builds a dictionary with interning.
#[derive(Default)]
struct Dict {
    d: otlp::ProfilesDictionary,
    strings: HashMap<String, i32>,
    stacks: HashMap<Vec<i32>, i32>,
}

impl Dict {
    fn new() -> Dict {
        let mut d = Dict::default();
        d.string("");
        d.d.mapping_table.push(Default::default());
        d.d.location_table.push(Default::default());
        d.d.function_table.push(Default::default());
        d.d.link_table.push(Default::default());
        d.d.attribute_table.push(Default::default());
        d.d.stack_table.push(Default::default());
        d
    }
    fn string(&mut self, s: &str) -> i32 {
        if let Some(i) = self.strings.get(s) {
            return *i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }
    fn stack(&mut self, locations: Vec<i32>) -> i32 {
        if let Some(i) = self.stacks.get(&locations) {
            return *i;
        }
        let i = self.d.stack_table.len() as i32;
        self.d.stack_table.push(otlp::Stack { location_indices: locations.clone() });
        self.stacks.insert(locations, i);
        i
    }
    fn attribute(&mut self, key: &str, value: AnyValue, unit: &str) -> i32 {
        let key_strindex = self.string(key);
        let unit_strindex = self.string(unit);
        let i = self.d.attribute_table.len() as i32;
        self.d.attribute_table.push(otlp::KeyValueAndUnit { key_strindex, value: Some(value), unit_strindex });
        i
    }
}

fn str_value(s: &str) -> AnyValue {
    AnyValue { value: Some(any_value::Value::StringValue(s.to_string())) }
}

/// Resource with `service.name` and any extra labels.
pub fn resource(service: &str, labels: &[(String, String)]) -> Resource {
    let mut attributes = vec![KeyValue { key: "service.name".into(), value: Some(str_value(service)), ..Default::default() }];
    for (k, v) in labels {
        if k != "service.name" {
            attributes.push(KeyValue { key: k.clone(), value: Some(str_value(v)), ..Default::default() });
        }
    }
    Resource { attributes, ..Default::default() }
}

fn wrap(resource: Resource, profiles: Vec<otlp::Profile>, dict: Dict) -> ExportProfilesServiceRequest {
    ExportProfilesServiceRequest {
        resource_profiles: vec![otlp::ResourceProfiles {
            resource: Some(resource),
            scope_profiles: vec![otlp::ScopeProfiles {
                scope: Some(InstrumentationScope { name: "weir/pyroscope".into(), ..Default::default() }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(dict.d),
    }
}

/// Converts a decoded pprof profile.
pub fn from_pprof(p: &pprof::Profile, resource: Resource) -> Result<ExportProfilesServiceRequest, ProfileError> {
    if p.string_table.first().is_some_and(|s| !s.is_empty()) {
        return Err(ProfileError::Invalid("pprof string_table[0] must be empty".into()));
    }
    let mut dict = Dict::new();
    let mappings = add_mappings(p, &mut dict)?;
    let functions = add_functions(p, &mut dict)?;
    let locations = add_locations(p, &mut dict, &mappings, &functions)?;
    let samples = pprof_samples(p, &mut dict, &locations)?;
    let period_type = p.period_type.as_ref().map(|t| value_type(p, &mut dict, t)).transpose()?;
    let mut profiles = Vec::new();
    for (t, vt) in p.sample_type.iter().enumerate() {
        let sample_type = value_type(p, &mut dict, vt)?;
        profiles.push(otlp::Profile {
            sample_type: Some(sample_type),
            samples: samples
                .iter()
                .filter(|s| s.values[t] != 0)
                .map(|s| otlp::Sample {
                    stack_index: s.stack_index,
                    attribute_indices: s.attribute_indices.clone(),
                    link_index: 0,
                    values: vec![s.values[t]],
                    timestamps_unix_nano: vec![],
                })
                .collect(),
            time_unix_nano: u64::try_from(p.time_nanos).unwrap_or(0),
            duration_nano: u64::try_from(p.duration_nanos).unwrap_or(0),
            period_type,
            period: p.period,
            original_payload_format: "pprof".into(),
            ..Default::default()
        });
    }
    Ok(wrap(resource, profiles, dict))
}

/// A pprof string by its index.
fn pprof_str(p: &pprof::Profile, i: i64) -> Result<&str, ProfileError> {
    usize::try_from(i)
        .ok()
        .and_then(|i| p.string_table.get(i))
        .map(String::as_str)
        .ok_or_else(|| ProfileError::Invalid(format!("string index {i} out of range")))
}

fn value_type(p: &pprof::Profile, dict: &mut Dict, t: &pprof::ValueType) -> Result<otlp::ValueType, ProfileError> {
    Ok(otlp::ValueType { type_strindex: dict.string(pprof_str(p, t.r#type)?), unit_strindex: dict.string(pprof_str(p, t.unit)?) })
}

/// Adds pprof's mappings to the dictionary; returns pprof mapping id to table index.
fn add_mappings(p: &pprof::Profile, dict: &mut Dict) -> Result<HashMap<u64, i32>, ProfileError> {
    let mut mappings = HashMap::new();
    for m in &p.mapping {
        let filename_strindex = dict.string(pprof_str(p, m.filename)?);
        mappings.insert(m.id, dict.d.mapping_table.len() as i32);
        dict.d.mapping_table.push(otlp::Mapping {
            memory_start: m.memory_start,
            memory_limit: m.memory_limit,
            file_offset: m.file_offset,
            filename_strindex,
            attribute_indices: vec![],
        });
    }
    Ok(mappings)
}

/// Adds pprof's functions to the dictionary; returns pprof function id to table index.
fn add_functions(p: &pprof::Profile, dict: &mut Dict) -> Result<HashMap<u64, i32>, ProfileError> {
    let mut functions = HashMap::new();
    for f in &p.function {
        let (name, system_name, filename) =
            (dict.string(pprof_str(p, f.name)?), dict.string(pprof_str(p, f.system_name)?), dict.string(pprof_str(p, f.filename)?));
        functions.insert(f.id, dict.d.function_table.len() as i32);
        dict.d.function_table.push(otlp::Function {
            name_strindex: name,
            system_name_strindex: system_name,
            filename_strindex: filename,
            start_line: f.start_line,
        });
    }
    Ok(functions)
}

/// Adds pprof's locations to the dictionary; returns pprof location id to table index.
fn add_locations(
    p: &pprof::Profile,
    dict: &mut Dict,
    mappings: &HashMap<u64, i32>,
    functions: &HashMap<u64, i32>,
) -> Result<HashMap<u64, i32>, ProfileError> {
    let mut locations = HashMap::new();
    for l in &p.location {
        let mapping_index = if l.mapping_id == 0 {
            0
        } else {
            *mappings
                .get(&l.mapping_id)
                .ok_or_else(|| ProfileError::Invalid(format!("location {} names unknown mapping {}", l.id, l.mapping_id)))?
        };
        let lines = l
            .line
            .iter()
            .map(|ln| {
                let function_index = *functions
                    .get(&ln.function_id)
                    .ok_or_else(|| ProfileError::Invalid(format!("location {} names unknown function {}", l.id, ln.function_id)))?;
                Ok(otlp::Line { function_index, line: ln.line, column: ln.column })
            })
            .collect::<Result<Vec<_>, ProfileError>>()?;
        locations.insert(l.id, dict.d.location_table.len() as i32);
        dict.d.location_table.push(otlp::Location { mapping_index, address: l.address, lines, attribute_indices: vec![] });
    }
    Ok(locations)
}

/// A pprof sample with its stack and labels in the dictionary and one value per sample type.
struct PprofSample {
    stack_index: i32,
    attribute_indices: Vec<i32>,
    values: Vec<i64>,
}

/// One stack (and label set) per pprof sample, shared by every sample type.
fn pprof_samples(p: &pprof::Profile, dict: &mut Dict, locations: &HashMap<u64, i32>) -> Result<Vec<PprofSample>, ProfileError> {
    let mut samples = Vec::with_capacity(p.sample.len());
    for (i, smp) in p.sample.iter().enumerate() {
        if smp.value.len() != p.sample_type.len() {
            return Err(ProfileError::Invalid(format!(
                "sample[{i}] has {} values for {} sample types",
                smp.value.len(),
                p.sample_type.len()
            )));
        }
        let stack = smp
            .location_id
            .iter()
            .map(|id| locations.get(id).copied().ok_or_else(|| ProfileError::Invalid(format!("sample[{i}] names unknown location {id}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let stack_index = dict.stack(stack);
        let mut attribute_indices = Vec::new();
        for lb in &smp.label {
            let key = pprof_str(p, lb.key)?.to_string();
            let (value, unit) = if lb.str != 0 {
                (str_value(pprof_str(p, lb.str)?), "")
            } else {
                (AnyValue { value: Some(any_value::Value::IntValue(lb.num)) }, pprof_str(p, lb.num_unit)?)
            };
            let unit = unit.to_string();
            attribute_indices.push(dict.attribute(&key, value, &unit));
        }
        samples.push(PprofSample { stack_index, attribute_indices, values: smp.value.clone() });
    }
    Ok(samples)
}

/// Converts Pyroscope's folded format: `root;child;leaf count` per line.
pub fn from_folded(
    text: &str,
    profile_type: &str,
    units: &str,
    sample_rate: u64,
    from_s: u64,
    until_s: u64,
    resource: Resource,
) -> Result<ExportProfilesServiceRequest, ProfileError> {
    let mut dict = Dict::new();
    let mut functions: HashMap<String, i32> = HashMap::new();
    let mut samples = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (stack, count) =
            line.rsplit_once(' ').ok_or_else(|| ProfileError::Invalid(format!("line {}: expected `frame;frame count`", n + 1)))?;
        let count: i64 = count.trim().parse().map_err(|_| ProfileError::Invalid(format!("line {}: `{count}` is not a count", n + 1)))?;
        let mut locs = Vec::new();
        // Folded lists the root first; OTLP (like pprof) lists the leaf first.
        for frame in stack.split(';').rev() {
            let loc = match functions.get(frame) {
                Some(l) => *l,
                None => {
                    let name_strindex = dict.string(frame);
                    let f = dict.d.function_table.len() as i32;
                    dict.d.function_table.push(otlp::Function { name_strindex, ..Default::default() });
                    let l = dict.d.location_table.len() as i32;
                    dict.d
                        .location_table
                        .push(otlp::Location { lines: vec![otlp::Line { function_index: f, ..Default::default() }], ..Default::default() });
                    functions.insert(frame.to_string(), l);
                    l
                }
            };
            locs.push(loc);
        }
        let stack_index = dict.stack(locs);
        samples.push(otlp::Sample { stack_index, values: vec![count], ..Default::default() });
    }
    let sample_type = otlp::ValueType { type_strindex: dict.string(profile_type), unit_strindex: dict.string(units) };
    let period_type = otlp::ValueType { type_strindex: dict.string(profile_type), unit_strindex: dict.string("nanoseconds") };
    let profile = otlp::Profile {
        sample_type: Some(sample_type),
        samples,
        time_unix_nano: from_s.saturating_mul(1_000_000_000),
        duration_nano: until_s.saturating_sub(from_s).saturating_mul(1_000_000_000),
        period_type: Some(period_type),
        period: 1_000_000_000u64.checked_div(sample_rate).unwrap_or(0) as i64,
        original_payload_format: "folded".into(),
        ..Default::default()
    };
    Ok(wrap(resource, vec![profile], dict))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folded_stacks_become_dictionary_entries() {
        let r =
            from_folded("main;work;hash 7\nmain;work 3\n\nmain;idle 1\n", "cpu", "samples", 100, 1000, 1010, resource("app", &[])).unwrap();
        let d = r.dictionary.as_ref().unwrap();
        let p = &r.resource_profiles[0].scope_profiles[0].profiles[0];
        assert_eq!(p.samples.len(), 3);
        assert_eq!(p.samples[0].values, vec![7]);
        let leaf = d.stack_table[p.samples[0].stack_index as usize].location_indices[0];
        let func = d.location_table[leaf as usize].lines[0].function_index;
        assert_eq!(d.string_table[d.function_table[func as usize].name_strindex as usize], "hash");
        assert_eq!(d.function_table.len(), 1 + 4, "main, work, hash, idle plus the zero entry");
        assert_eq!(p.period, 10_000_000);
        assert_eq!(p.duration_nano, 10_000_000_000);
        assert!(from_folded("main;work seven\n", "cpu", "samples", 100, 0, 0, resource("a", &[])).is_err());
    }
}
