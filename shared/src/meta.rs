//! What the engine reads of every object's metadata (namespace, name,
//! creation time, labels), and of a Namespace.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::labels::Labels;

/// Creation time in nanoseconds since the epoch; `None` (objects from
/// manifests) sorts first, so ties fall back to names as in istiod.
pub type Created = Option<i128>;

/// A Namespace, as scoping reads it.
#[derive(Clone, Debug, Default)]
pub struct NamespaceInfo {
    pub labels: Labels,
}

pub(crate) fn created(meta: &ObjectMeta) -> Created {
    meta.creation_timestamp
        .as_ref()
        .map(|t| t.0.as_nanosecond())
}

/// The object's namespace (`default` when it has none, as in a manifest).
pub(crate) fn ns_of(meta: &ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_else(|| "default".into())
}

pub(crate) fn name_of(meta: &ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

/// Labels or annotations, empty when absent.
pub(crate) fn labels(m: &Option<Labels>) -> Labels {
    m.clone().unwrap_or_default()
}

/// A Sidecar, by namespace and name: how the write layer, the watcher's
/// ledger and their reports name the object they act on.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct SidecarRef {
    pub namespace: String,
    pub name: String,
}

impl SidecarRef {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        SidecarRef {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for SidecarRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The field manager meshscope writes with (`apply`, `apply --exports`).
pub const FIELD_MANAGER: &str = "kubectl-meshscope";

/// Whether field manager [`FIELD_MANAGER`] owns the object's exportTo
/// (`spec.exportTo`, or a Service's `networking.istio.io/exportTo`
/// annotation): an earlier `apply --exports` wrote it, so it is
/// meshscope's to update, not its owner's.
pub fn export_to_is_ours(meta: &ObjectMeta) -> bool {
    meta.managed_fields.iter().flatten().any(|m| {
        m.manager.as_deref() == Some(FIELD_MANAGER)
            && m.fields_v1.as_ref().is_some_and(|f| {
                let text = f.0.to_string();
                text.contains("\"f:exportTo\"")
                    || text.contains("\"f:networking.istio.io/exportTo\"")
            })
    })
}

/// The field managers other than [`FIELD_MANAGER`] that own fields
/// meshscope writes on a Sidecar it manages: anything in its spec, or a
/// `meshscope.io/` or `app.kubernetes.io/managed-by` label or annotation.
/// meshscope's server-side apply conflicts with them (a hand edit), so
/// `apply` skips the Sidecar until they are taken over. A manager that
/// only set the user's own labels or annotations, or the status, is not
/// one.
pub fn hand_editors(meta: &ObjectMeta) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for m in meta.managed_fields.iter().flatten() {
        let manager = m.manager.as_deref().unwrap_or("(unnamed)");
        if manager == FIELD_MANAGER || m.subresource.as_deref().is_some_and(|s| !s.is_empty()) {
            continue;
        }
        let Some(fields) = m.fields_v1.as_ref().map(|f| &f.0) else {
            continue;
        };
        let spec = fields
            .get("f:spec")
            .is_some_and(|s| s.as_object().is_none_or(|o| !o.is_empty()));
        let ours = |key: &str| {
            fields
                .get("f:metadata")
                .and_then(|md| md.get(key))
                .and_then(|v| v.as_object())
                .is_some_and(|o| {
                    o.keys().any(|k| {
                        k.starts_with("f:meshscope.io/") || k == "f:app.kubernetes.io/managed-by"
                    })
                })
        };
        if (spec || ours("f:labels") || ours("f:annotations")) && !out.iter().any(|o| o == manager)
        {
            out.push(manager.to_string());
        }
    }
    out
}

/// The waypoint an object names: the Gateway `name` in `namespace`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WaypointRef {
    pub namespace: String,
    pub name: String,
}

/// `istio.io/use-waypoint` on an object (or a Namespace): `None` without
/// the label; `Some(None)` for `none` (no waypoint, whatever the
/// namespace says); else the waypoint it names, in the namespace
/// `istio.io/use-waypoint-namespace` gives or `default_ns`
/// (`pilot/pkg/serviceregistry/ambient/waypoints.go` `GetUseWaypoint`,
/// 1.31).
pub fn use_waypoint(labels: &Labels, default_ns: &str) -> Option<Option<WaypointRef>> {
    let name = labels.get("istio.io/use-waypoint")?;
    if name == "none" {
        return Some(None);
    }
    let ns = labels
        .get("istio.io/use-waypoint-namespace")
        .map_or(default_ns, String::as_str);
    Some(Some(WaypointRef {
        namespace: ns.to_string(),
        name: name.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(entries: serde_json::Value) -> ObjectMeta {
        serde_json::from_value(serde_json::json!({ "managedFields": entries })).unwrap()
    }

    #[test]
    fn hand_editors_are_the_other_managers_of_what_meshscope_writes() {
        let m = meta(serde_json::json!([
            {"manager": "kubectl-meshscope", "operation": "Apply",
             "fieldsV1": {"f:spec": {"f:egress": {}}}},
            {"manager": "kubectl-label", "operation": "Update",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}},
            {"manager": "istio-status", "operation": "Update", "subresource": "status",
             "fieldsV1": {"f:status": {}}},
            {"manager": "kubectl-edit", "operation": "Update",
             "fieldsV1": {"f:spec": {"f:egress": {}}}},
            {"manager": "kubectl-annotate", "operation": "Update",
             "fieldsV1": {"f:metadata": {"f:annotations": {"f:meshscope.io/window": {}}}}},
            {"manager": "kubectl-edit", "operation": "Update",
             "fieldsV1": {"f:spec": {"f:outboundTrafficPolicy": {}}}}
        ]));
        assert_eq!(hand_editors(&m), ["kubectl-edit", "kubectl-annotate"]);
        assert!(hand_editors(&ObjectMeta::default()).is_empty());
    }
}
