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

/// Deployment `ns/name` (selector and pod label `app: name`) and one
/// injected Pod of it, at `ip`, owned through its ReplicaSet.
pub fn deployment(ns: &str, name: &str, ip: &str) -> String {
    format!(
        "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n    spec:\n      containers: [{{name: c, image: x}}]\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}-abc12-xyz98\n  namespace: {ns}\n  labels: {{app: {name}, pod-template-hash: abc12}}\n  ownerReferences:\n  - {{apiVersion: apps/v1, kind: ReplicaSet, name: {name}-abc12, uid: u, controller: true}}\nspec:\n  containers: [{{name: c, image: x}}, {{name: istio-proxy, image: proxyv2}}]\nstatus:\n  podIP: {ip}\n"
    )
}
