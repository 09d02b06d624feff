//! The Sidecar objects meshscope writes: their names, the labels and
//! annotations that say which workload and which evidence they come from,
//! and how a managed Sidecar is found again.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::istio::{EgressListener, Sidecar, SidecarSpec, WorkloadSelector};
use crate::labels::{self as stable, label_value};
use crate::observe::{Observations, WorkloadTraffic};
use crate::snapshot::{
    selector_matches, Labels, MeshSnapshot, SidecarId, WorkloadId, WorkloadKind, MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
};

pub const WORKLOAD_KIND_LABEL: &str = "meshscope.io/workload-kind";
/// The workload a Sidecar was generated for, as a label value (at most 63
/// characters: longer names are cut and end in a hash, see
/// [`crate::labels::label_value`]).
pub const WORKLOAD_NAME_LABEL: &str = "meshscope.io/workload-name";
/// The full workload name, when [`WORKLOAD_NAME_LABEL`] had to be cut.
pub const WORKLOAD_NAME_FULL_ANNOTATION: &str = "meshscope.io/workload-name-full";
pub const SOURCES_ANNOTATION: &str = "meshscope.io/sources";
pub const WINDOW_ANNOTATION: &str = "meshscope.io/window";
pub const REQUESTS_ANNOTATION: &str = "meshscope.io/requests";
/// The egress meshscope wrote, as JSON: `verify` compares it with the live
/// spec to tell an edit made outside meshscope.
pub const EGRESS_ANNOTATION: &str = "meshscope.io/egress";

/// Deterministic Sidecar name for a workload: `<name>-<kind>-meshscope`,
/// a valid DNS-1123 subdomain. A name that would be too long or invalid is
/// cut and gets a hash of the workload's name, so that two workloads never
/// share a Sidecar name.
pub fn sidecar_name(kind: &WorkloadKind, name: &str) -> String {
    let kind = stable::subdomain_prefix(kind.as_str(), 63);
    let full = format!("{name}-{kind}-meshscope");
    if stable::is_dns_subdomain(&full) {
        return full;
    }
    let tail = format!("-{}-{kind}-meshscope", stable::name_hash(name));
    let head = stable::subdomain_prefix(name, stable::MAX_NAME - tail.len());
    format!("{head}{tail}").trim_start_matches('-').to_string()
}

pub const NAMESPACE_SIDECAR_NAME: &str = "meshscope-namespace-default";

pub(super) fn evidence_meta(
    obs: &Observations,
    traffic: &[&WorkloadTraffic],
) -> (BTreeMap<String, String>, u64) {
    let mut sources: BTreeSet<&str> = BTreeSet::new();
    let mut requests = 0;
    for t in traffic {
        sources.extend(t.sources.iter().map(String::as_str));
        requests += t.requests();
    }
    let mut ann = BTreeMap::new();
    if !sources.is_empty() {
        ann.insert(
            SOURCES_ANNOTATION.to_string(),
            sources.into_iter().collect::<Vec<_>>().join(","),
        );
    }
    if let Some((a, b)) = &obs.window {
        ann.insert(WINDOW_ANNOTATION.to_string(), format!("{a}/{b}"));
    }
    ann.insert(REQUESTS_ANNOTATION.to_string(), requests.to_string());
    (ann, requests)
}

/// The workload a managed Sidecar was generated for, from its labels (the
/// full name from [`WORKLOAD_NAME_FULL_ANNOTATION`] when the label was
/// cut), or `None` when it names none (a per-namespace Sidecar).
pub fn generated_for(meta: &ObjectMeta) -> Option<(WorkloadKind, String)> {
    let labels = meta.labels.as_ref()?;
    let kind = labels.get(WORKLOAD_KIND_LABEL)?;
    let label = labels.get(WORKLOAD_NAME_LABEL)?;
    let name = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(WORKLOAD_NAME_FULL_ANNOTATION))
        .filter(|full| label_value(full) == *label)
        .unwrap_or(label);
    let kind = WorkloadKind::parse(kind).unwrap_or_else(|| WorkloadKind::Other(kind.clone()));
    Some((kind, name.clone()))
}

/// Is a managed Sidecar (with this metadata, in `ns`) left without its
/// workload, so that `--prune` deletes it? Per-namespace Sidecars name no
/// workload and are never orphaned.
pub fn orphaned(snap: &MeshSnapshot, ns: &str, meta: &ObjectMeta) -> bool {
    let Some((kind, name)) = generated_for(meta) else {
        return false;
    };
    snap.find_workload(&kind, ns, &name).is_none()
}

/// The managed Sidecar generated for a workload: the one with its default
/// name, else one whose labels name it (and that is not another workload's
/// by name), else a managed one that selects it and names no workload
/// (written by hand with meshscope's label, or before the labels existed),
/// which it adopts when it is the first workload that Sidecar selects.
pub(super) fn own_sidecar(snap: &MeshSnapshot, w: WorkloadId) -> Option<SidecarId> {
    let wl = &snap.workloads[w];
    let ns = wl.namespace.as_str();
    let default = sidecar_name(&wl.kind, &wl.name);
    let managed = || {
        snap.sidecars_in(ns)
            .iter()
            .copied()
            .filter(|s| snap.sidecars[*s].managed && snap.sidecars[*s].selector.is_some())
    };
    let anothers = |name: &str| {
        snap.workloads_in(ns).iter().any(|o| {
            let o = &snap.workloads[*o];
            (o.kind != wl.kind || o.name != wl.name) && sidecar_name(&o.kind, &o.name) == name
        })
    };
    managed()
        .find(|s| snap.sidecars[*s].name == default)
        .or_else(|| {
            managed().find(|s| {
                let sc = &snap.sidecars[*s];
                generated_for(&sc.object.metadata)
                    .is_some_and(|(k, n)| k == wl.kind && n == wl.name)
                    && !anothers(&sc.name)
            })
        })
        .or_else(|| {
            managed().find(|s| {
                let sc = &snap.sidecars[*s];
                // When it selects several workloads, the first adopts it
                // and the others get Sidecars of their own.
                let first = sc.selector.as_ref().and_then(|sel| {
                    snap.workloads_in(ns)
                        .iter()
                        .copied()
                        .find(|o| selector_matches(sel, snap.workload_labels(*o)))
                });
                generated_for(&sc.object.metadata).is_none()
                    && !anothers(&sc.name)
                    && first == Some(w)
            })
        })
}

/// The labels and annotations that say which workload a Sidecar is for.
pub(super) fn workload_meta(
    wl: &crate::snapshot::Workload,
    labels: &mut BTreeMap<String, String>,
    mut annotations: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    labels.insert(
        WORKLOAD_KIND_LABEL.to_string(),
        label_value(wl.kind.as_str()),
    );
    let value = label_value(&wl.name);
    if value != wl.name {
        annotations.insert(WORKLOAD_NAME_FULL_ANNOTATION.to_string(), wl.name.clone());
    }
    labels.insert(WORKLOAD_NAME_LABEL.to_string(), value);
    annotations
}

/// Does the live Sidecar already carry the labels and annotations apply
/// would write? If not, apply changes it, so it is not "unchanged".
pub(super) fn keeps(
    live: &Sidecar,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    hosts: &[String],
) -> bool {
    let has = |have: &Option<BTreeMap<String, String>>, want: &BTreeMap<String, String>| {
        want.iter()
            .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    let mut annotations = annotations.clone();
    annotations.insert(
        EGRESS_ANNOTATION.to_string(),
        serde_json::to_string(&[EgressListener {
            hosts: hosts.to_vec(),
            ..Default::default()
        }])
        .unwrap_or_default(),
    );
    annotations.retain(|k, _| !EVIDENCE.contains(&k.as_str()));
    has(&live.metadata.labels, labels) && has(&live.metadata.annotations, &annotations)
}

/// The evidence annotations: the traffic a Sidecar's hosts rest on. They
/// change with every read while the scope does not, so they never make a
/// Sidecar "changed": a write would push to every proxy it selects, and a
/// drift check would report drift that is not there.
const EVIDENCE: [&str; 3] = [SOURCES_ANNOTATION, WINDOW_ANNOTATION, REQUESTS_ANNOTATION];

/// Makes this read's evidence (`ann`) cumulative over `live`'s: a read
/// that starts after the live window ends (a pass of `apply --watch`, a
/// later apply from newer logs) adds its requests to the live count, and
/// the window and sources grow to cover both; one that overlaps it (the
/// same logs read again) replaces it.
pub(super) fn cumulative(live: &Sidecar, ann: &mut BTreeMap<String, String>) {
    let Some(old) = live.metadata.annotations.as_ref() else {
        return;
    };
    let window = |a: &BTreeMap<String, String>| {
        let (from, to) = a.get(WINDOW_ANNOTATION)?.split_once('/')?;
        let parse = |t: &str| t.parse::<k8s_openapi::jiff::Timestamp>().ok();
        Some((from.to_string(), parse(from)?, to.to_string(), parse(to)?))
    };
    let (Some((old_from, _, _, old_to)), Some((_, new_from, new_to, _))) =
        (window(old), window(ann))
    else {
        return;
    };
    if new_from <= old_to {
        return;
    }
    ann.insert(
        WINDOW_ANNOTATION.to_string(),
        format!("{old_from}/{new_to}"),
    );
    let count = |a: &BTreeMap<String, String>| {
        a.get(REQUESTS_ANNOTATION)
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    ann.insert(
        REQUESTS_ANNOTATION.to_string(),
        (count(old) + count(ann)).to_string(),
    );
    let sources: BTreeSet<&str> = [old, &*ann]
        .iter()
        .filter_map(|a| a.get(SOURCES_ANNOTATION))
        .flat_map(|s| s.split(','))
        .filter(|s| !s.is_empty())
        .collect();
    if !sources.is_empty() {
        let joined = sources.into_iter().collect::<Vec<_>>().join(",");
        ann.insert(SOURCES_ANNOTATION.to_string(), joined);
    }
}

/// A Sidecar of that name that meshscope does not manage: writing ours
/// would overwrite it, so the recommendation is skipped instead.
pub(super) fn name_taken(snap: &MeshSnapshot, ns: &str, name: &str) -> Option<String> {
    snap.sidecars_in(ns)
        .iter()
        .map(|id| &snap.sidecars[*id])
        .find(|sc| sc.name == name && !sc.managed)
        .map(|sc| {
            format!(
                "a Sidecar named {} exists and is not labelled {MANAGED_BY_LABEL}={MANAGED_BY_VALUE}; it belongs to its owner",
                sc.key()
            )
        })
}

/// `sc` with `hosts` as its one egress listener's hosts, and the egress
/// annotation to match.
pub fn with_hosts(sc: &Sidecar, hosts: Vec<String>) -> Sidecar {
    let mut out = sc.clone();
    out.spec.egress = vec![EgressListener {
        hosts,
        ..Default::default()
    }];
    if let Some(a) = out.metadata.annotations.as_mut() {
        a.insert(
            EGRESS_ANNOTATION.to_string(),
            serde_json::to_string(&out.spec.egress).unwrap_or_default(),
        );
    }
    out
}

pub(super) fn build_sidecar(
    name: String,
    ns: &str,
    selector: Option<Labels>,
    hosts: Vec<String>,
    labels: BTreeMap<String, String>,
    mut annotations: BTreeMap<String, String>,
) -> Sidecar {
    let egress = vec![EgressListener {
        hosts,
        ..Default::default()
    }];
    annotations.insert(
        EGRESS_ANNOTATION.to_string(),
        serde_json::to_string(&egress).unwrap_or_default(),
    );
    Sidecar {
        api_version: "networking.istio.io/v1".into(),
        kind: "Sidecar".into(),
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(ns.to_string()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: SidecarSpec {
            workload_selector: selector.map(|labels| WorkloadSelector { labels }),
            egress,
            extra: BTreeMap::new(),
        },
    }
}
