//! How apply compares and shows Sidecars: the fields that tell "unchanged"
//! from "configured", and the readable view and unified diff that `diff`,
//! `apply --dry-run` and the export side print.

use std::io::Write;

use serde_json::Value;

/// The parts of a Sidecar that apply decides: spec, and our labels and
/// annotations. Used to tell "unchanged" from "configured".
pub(super) fn comparable(v: &Value, keys_from: &Value) -> Value {
    let pick = |field: &str| -> Value {
        let wanted = keys_from
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object);
        let have = v
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object);
        let mut out = serde_json::Map::new();
        if let Some(w) = wanted {
            for k in w.keys() {
                if let Some(val) = have.and_then(|h| h.get(k)) {
                    out.insert(k.clone(), val.clone());
                }
            }
        }
        Value::Object(out)
    };
    serde_json::json!({
        "labels": pick("labels"),
        "annotations": pick("annotations"),
        "spec": v.get("spec").cloned().unwrap_or(Value::Null),
    })
}

/// A readable view of a Sidecar for diffs: no managed fields or status.
pub fn diffable(v: Option<&Value>) -> String {
    let Some(v) = v else { return String::new() };
    let mut v = v.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "managedFields",
            "resourceVersion",
            "uid",
            "generation",
            "creationTimestamp",
        ] {
            meta.remove(k);
        }
    }
    if let Some(m) = v.as_object_mut() {
        m.remove("status");
    }
    serde_yaml::to_string(&v).unwrap_or_default()
}

pub fn unified(old: &str, new: &str, name: &str, out: &mut dyn Write) -> std::io::Result<()> {
    let diff = similar::TextDiff::from_lines(old, new);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("live/{name}"), &format!("meshscope/{name}"))
        .to_string();
    out.write_all(text.as_bytes())
}
