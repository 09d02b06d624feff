//! Helpers every test file of the scope crate uses: a snapshot from YAML,
//! observations from access-log lines, labels, a Sidecar's hosts.
#![allow(dead_code)] // each test crate uses its own subset

use meshscope_shared::observe::{LogIngest, Observations};
use meshscope_shared::recommend;
use meshscope_shared::snapshot::{Labels, MeshSnapshot};
use meshscope_shared::{Inputs, Options};

/// The snapshot of a multi-document YAML stream, with `options`.
pub fn snap_with(yaml: &str, options: Options) -> MeshSnapshot {
    let mut inputs = Inputs::default();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
        if !v.is_null() {
            inputs.add(v).unwrap();
        }
    }
    MeshSnapshot::build(&inputs, options).unwrap()
}

/// The snapshot of a multi-document YAML stream, with the default options.
pub fn snap(yaml: &str) -> MeshSnapshot {
    snap_with(yaml, Options::default())
}

/// What the access-log lines of `logs` show, against `s`.
pub fn observe(s: &MeshSnapshot, logs: &str) -> Observations {
    let mut ing = LogIngest::new(s, "access-log");
    for l in logs.lines() {
        ing.line(l);
    }
    ing.finish()
}

pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The egress hosts of a recommendation's Sidecar.
pub fn hosts(r: &recommend::Recommendation) -> Vec<String> {
    r.sidecar().expect("a Sidecar").spec.egress[0].hosts.clone()
}
