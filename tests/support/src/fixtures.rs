//! Inputs and snapshots from multi-document YAML, and small value builders.

use meshscope_shared::observe::{LogIngest, Observations};
use meshscope_shared::recommend;
use meshscope_shared::snapshot::{Labels, MeshSnapshot};
use meshscope_shared::{Inputs, Options};

/// The documents of a multi-document YAML stream, empty ones dropped.
pub fn yaml_docs(yaml: &str) -> Vec<serde_json::Value> {
    serde_yaml::Deserializer::from_str(yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &serde_json::Value| !v.is_null())
        .collect()
}

/// The inputs of a multi-document YAML stream.
pub fn inputs(yaml: &str) -> Inputs {
    let mut inputs = Inputs::default();
    for v in yaml_docs(yaml) {
        inputs.add(v).unwrap();
    }
    inputs
}

/// The snapshot of a multi-document YAML stream, with `options`.
pub fn snap_with(yaml: &str, options: Options) -> MeshSnapshot {
    MeshSnapshot::build(&inputs(yaml), options).unwrap()
}

/// The snapshot of a multi-document YAML stream under Istio `istio` and
/// the mesh config `mesh` (YAML, the `mesh` key of ConfigMap istio).
pub fn snap_with_mesh(yaml: &str, istio: &str, mesh: &str) -> MeshSnapshot {
    let options = Options {
        istio: istio.parse().unwrap(),
        ..Options::default()
    };
    let mesh = meshscope_shared::MeshConfig::from_yaml(mesh).unwrap();
    MeshSnapshot::build_with_mesh(&inputs(yaml), options, mesh)
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

/// Labels from `(key, value)` pairs.
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
