//! `meshConfig.discoverySelectors` advice: the namespaces istiod watches
//! for nothing. istiod drops every Service, EndpointSlice, pod and
//! namespaced Istio object of a namespace no selector selects
//! (`pkg/kube/namespace/filter.go`, and the crdclient's object filter,
//! 1.31), with no exception for its own or the root namespace.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::codes::Code;
use crate::observe::Observations;
use crate::snapshot::MeshSnapshot;
use crate::visibility::{NamespaceSelector, Requirement};

/// The label the API server sets on every namespace to its name.
pub const NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Namespaces istiod need not watch, and the selectors that drop them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DiscoveryAdvice {
    pub drop: Vec<String>,
    /// The `discoverySelectors` to set: each current selector (or one
    /// empty selector, when there are none) with a `NotIn` on the names.
    #[serde(skip)]
    pub selectors: Vec<NamespaceSelector>,
}

/// The advice, from observed traffic: a namespace is dropped only when it
/// holds no injected workload, no gateway (a Gateway object or a pod one
/// selects), none of it is needed by another namespace (calls, routes,
/// by-name imports, mesh-config providers), none of its workloads sent or
/// served traffic, and it is neither the root namespace nor istiod's.
pub fn advice(snap: &MeshSnapshot, obs: &Observations) -> DiscoveryAdvice {
    let keep = kept(snap, obs);
    let watched = |ns: &str| {
        let labels = snap
            .namespace(ns)
            .map(|n| n.labels.clone())
            .unwrap_or_default();
        snap.mesh.discovery_selectors.is_empty()
            || snap
                .mesh
                .discovery_selectors
                .iter()
                .any(|s| s.matches(&labels))
    };
    let drop: Vec<String> = snap
        .namespaces
        .keys()
        .filter(|ns| !keep.contains(*ns) && watched(ns))
        .cloned()
        .collect();
    if drop.is_empty() {
        return DiscoveryAdvice::default();
    }
    let not_in = Requirement {
        key: NAME_LABEL.into(),
        operator: "NotIn".into(),
        values: drop.clone(),
    };
    let mut selectors = snap.mesh.discovery_selectors.clone();
    if selectors.is_empty() {
        selectors.push(NamespaceSelector::default());
    }
    for s in &mut selectors {
        s.match_expressions.push(not_in.clone());
    }
    DiscoveryAdvice { drop, selectors }
}

/// The namespaces that must stay watched.
fn kept(snap: &MeshSnapshot, obs: &Observations) -> BTreeSet<String> {
    let mut keep = BTreeSet::from([snap.mesh.root_namespace.clone()]);
    let istiod: Vec<&str> = snap
        .pods
        .iter()
        .filter(|p| p.labels.get("app").is_some_and(|a| a == "istiod"))
        .map(|p| p.namespace.as_str())
        .collect();
    keep.extend(istiod.iter().map(|s| s.to_string()));
    if istiod.is_empty() {
        keep.insert("istio-system".into());
    }
    for w in &snap.workloads {
        if w.injection.runs_proxy() || w.proxy_pods > 0 {
            keep.insert(w.namespace.clone());
        }
    }
    for g in &snap.gateways {
        keep.insert(g.namespace.clone());
        keep.extend(g.pod_namespaces.iter().cloned());
    }
    for (&w, t) in &obs.traffic {
        if t.requests() > 0 {
            keep.insert(snap.workloads[w].namespace.clone());
        }
    }
    keep.extend(crate::exports::needed_from_elsewhere(snap, obs));
    keep
}

impl DiscoveryAdvice {
    /// The `discoverySelectors` setting on one line (YAML flow style).
    pub fn flow(&self) -> String {
        let items: Vec<String> = self.selectors.iter().map(selector_flow).collect();
        format!("discoverySelectors: [{}]", items.join(", "))
    }

    /// The `discoverySelectors` block of the mesh config, as YAML.
    pub fn yaml(&self) -> String {
        let mut out = String::from("discoverySelectors:\n");
        for s in &self.selectors {
            let mut first = true;
            let mut item = |line: String| {
                out.push_str(if first { "- " } else { "  " });
                out.push_str(&line);
                out.push('\n');
                first = false;
            };
            if !s.match_labels.is_empty() {
                item("matchLabels:".into());
                for (k, v) in &s.match_labels {
                    item(format!("  {k}: {v:?}"));
                }
            }
            item("matchExpressions:".into());
            for r in &s.match_expressions {
                let values: Vec<String> = r.values.iter().map(|v| format!("{v:?}")).collect();
                item(format!(
                    "- {{key: {:?}, operator: {}, values: [{}]}}",
                    r.key,
                    r.operator,
                    values.join(", ")
                ));
            }
        }
        out
    }
}

/// MS0020 for each namespace of the advice that `in_scope` keeps; each
/// message carries the whole `discoverySelectors` (one setting drops them
/// all).
pub fn findings(
    snap: &MeshSnapshot,
    obs: &Observations,
    in_scope: impl Fn(&str) -> bool,
) -> Vec<crate::finding::Finding> {
    let a = advice(snap, obs);
    let selectors = a.flow();
    a.drop
        .iter()
        .filter(|ns| in_scope(ns))
        .map(|ns| {
            crate::finding::finding(
                Code::NamespaceNotNeeded,
                "Namespace",
                "",
                ns,
                format!(
                    "namespace {ns} has no injected workload, no gateway, and no mesh traffic in either direction, yet istiod watches its Services, EndpointSlices, pods and Istio config; meshConfig {selectors} drops it (and {}) from istiod's view",
                    plural_ns(a.drop.len() - 1)
                ),
            )
        })
        .collect()
}

fn plural_ns(n: usize) -> String {
    match n {
        0 => "no other namespace".into(),
        1 => "1 other namespace".into(),
        n => format!("{n} other namespaces"),
    }
}

fn selector_flow(s: &NamespaceSelector) -> String {
    let mut parts = Vec::new();
    if !s.match_labels.is_empty() {
        let labels: Vec<String> = s
            .match_labels
            .iter()
            .map(|(k, v)| format!("{k:?}: {v:?}"))
            .collect();
        parts.push(format!("matchLabels: {{{}}}", labels.join(", ")));
    }
    let exprs: Vec<String> = s
        .match_expressions
        .iter()
        .map(|r| {
            let values: Vec<String> = r.values.iter().map(|v| format!("{v:?}")).collect();
            format!(
                "{{key: {:?}, operator: {}, values: [{}]}}",
                r.key,
                r.operator,
                values.join(", ")
            )
        })
        .collect();
    parts.push(format!("matchExpressions: [{}]", exprs.join(", ")));
    format!("{{{}}}", parts.join(", "))
}
