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

/// `istio.io/use-waypoint` on an object (or a Namespace): `None` without
/// the label; `Some(None)` for `none` (no waypoint, whatever the
/// namespace says); else the waypoint's namespace, from
/// `istio.io/use-waypoint-namespace` or `default_ns`
/// (`pilot/pkg/serviceregistry/ambient/waypoints.go` `GetUseWaypoint`,
/// 1.31).
pub fn use_waypoint(labels: &Labels, default_ns: &str) -> Option<Option<String>> {
    let name = labels.get("istio.io/use-waypoint")?;
    if name == "none" {
        return Some(None);
    }
    let ns = labels
        .get("istio.io/use-waypoint-namespace")
        .map_or(default_ns, String::as_str);
    Some(Some(ns.to_string()))
}
