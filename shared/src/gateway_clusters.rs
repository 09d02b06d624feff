//! The clusters a gateway's router proxy gets with istiod's
//! `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG=true`, and why each stays.
//!
//! Off (the default), a router proxy gets a cluster for every Service
//! exported to its namespace ([`crate::scope::Evaluator::gateway_visible`]).
//! On, istiod keeps of those only the Services whose hostname a gateway
//! the proxy serves routes to, or that the mesh's extension providers,
//! the RequestAuthentications' jwks URIs (when Envoy fetches them) or the
//! EnvoyFilters applying to the proxy name (`GatewayServices`,
//! `extraServicesForProxy` and `initVirtualServices`,
//! `pilot/pkg/model/push_context.go`; `BuildClusters`,
//! `pilot/pkg/networking/core/cluster.go`, istio 1.31). A host is kept by
//! name: every visible Service of that hostname stays, in any namespace;
//! a provider or EnvoyFilter entry `ns/host` keeps that namespace's only.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::labels::{selector_matches, Labels};
use crate::scope::Visible;
use crate::snapshot::{GatewayInfo, MeshSnapshot, VsInfo};

/// istiod's environment variable.
pub const FILTER_FLAG: &str = "PILOT_FILTER_GATEWAY_CLUSTER_CONFIG";

pub use crate::istio::REFERENCED_SERVICES_ANNOTATION;

/// The provider types whose service istiod keeps for a gateway
/// (`extraServicesForProxy`, 1.31): not `lightstep` or `opencensus`,
/// which it only warns about, nor those that call no service.
const KEPT_PROVIDERS: [&str; 10] = [
    "envoyExtAuthzHttp",
    "envoyExtAuthzGrpc",
    "zipkin",
    "datadog",
    "skywalking",
    "opentelemetry",
    "envoyHttpAls",
    "envoyTcpAls",
    "envoyOtelAls",
    "sds",
];

/// Why a host stays in a gateway's clusters with the flag on.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct KeptBy {
    /// `route`, `provider` or `envoyfilter`.
    pub kind: &'static str,
    /// What names it: `VirtualService ns/name (gateway ns/gw)`,
    /// `HTTPRoute ns/name (gateway ns/gw)`, the provider's name, or the
    /// EnvoyFilter `ns/name`.
    pub by: String,
}

/// The hosts a router proxy keeps with the flag on: by hostname in any
/// namespace, or by `(namespace, hostname)`.
#[derive(Clone, Debug, Default)]
pub struct Wanted {
    pub hosts: BTreeMap<String, BTreeSet<KeptBy>>,
    pub namespaced: BTreeMap<(String, String), BTreeSet<KeptBy>>,
}

impl Wanted {
    fn add(&mut self, entry: &str, why: KeptBy) {
        match entry.split_once('/') {
            Some((ns, host)) => self
                .namespaced
                .entry((ns.to_string(), host.to_string()))
                .or_default()
                .insert(why),
            None => self.hosts.entry(entry.to_string()).or_default().insert(why),
        };
    }

    /// Why Service `host` in `ns` stays, empty when it goes.
    pub fn why(&self, ns: &str, host: &str) -> Vec<KeptBy> {
        let mut out: BTreeSet<KeptBy> = self.hosts.get(host).cloned().unwrap_or_default();
        if let Some(w) = self.namespaced.get(&(ns.to_string(), host.to_string())) {
            out.extend(w.iter().cloned());
        }
        out.into_iter().collect()
    }
}

/// The Gateways a router proxy with `labels` in `ns` serves: Istio
/// Gateways whose selector its labels hold, from any namespace (istiod's
/// default, `PILOT_SCOPE_GATEWAY_TO_NAMESPACE=false`: `mergeGateways`,
/// push_context.go, 1.31), and the Gateway API Gateway of its namespace
/// its `gateway.networking.k8s.io/gateway-name` label names.
pub fn served_gateways<'a>(
    snap: &'a MeshSnapshot,
    ns: &str,
    labels: &Labels,
) -> Vec<&'a GatewayInfo> {
    snap.gateways
        .iter()
        .filter(|g| match g.kube {
            false => selector_matches(&g.selector, labels),
            true => {
                g.foreign.is_none()
                    && g.namespace == ns
                    && labels.get(crate::gateway_api::GATEWAY_NAME_LABEL) == Some(&g.name)
            }
        })
        .collect()
}

/// What a router proxy with `labels` in `ns` keeps with the flag on.
pub fn wanted(snap: &MeshSnapshot, ns: &str, labels: &Labels) -> Wanted {
    let mut out = Wanted::default();
    let served: BTreeSet<String> = served_gateways(snap, ns, labels)
        .iter()
        .map(|g| g.key())
        .collect();
    for vs in &snap.virtual_services {
        let Some(gw) = vs.gateways.iter().find(|g| served.contains(*g)) else {
            continue;
        };
        let by = KeptBy {
            kind: "route",
            by: format!("{} (gateway {gw})", vs.label()),
        };
        for d in route_destinations(snap, vs) {
            out.add(&d, by.clone());
        }
    }
    for p in &snap.mesh.extension_providers {
        if !KEPT_PROVIDERS.contains(&p.kind.as_str()) {
            continue;
        }
        if let Some(s) = &p.service {
            let by = KeptBy {
                kind: "provider",
                by: format!("{} ({})", p.name, p.kind),
            };
            out.add(s, by);
        }
    }
    for f in snap.envoy_filters_for(ns, labels) {
        for r in &f.referenced_services {
            let by = KeptBy {
                kind: "envoyfilter",
                by: format!("EnvoyFilter {}/{}", f.namespace, f.name),
            };
            out.add(r, by);
        }
    }
    out
}

/// The hosts route `vs` sends requests to, its delegates' included
/// (istiod merges delegates into the root before indexing them).
fn route_destinations(snap: &MeshSnapshot, vs: &VsInfo) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = vs.dests.iter().map(|d| d.host.clone()).collect();
    for (dns, dname) in &vs.delegates {
        if let Some(d) = snap
            .virtual_services
            .iter()
            .find(|d| &d.namespace == dns && &d.name == dname)
        {
            out.extend(d.dests.iter().map(|d| d.host.clone()));
        }
    }
    out
}

/// `vis` with only the Services `wanted` keeps.
pub fn filter(snap: &MeshSnapshot, vis: &Visible, wanted: &Wanted) -> Visible {
    let keep = |id: &crate::snapshot::SvcId| {
        let s = &snap.services[*id];
        !wanted.why(&s.namespace, &s.hostname).is_empty()
    };
    let mut v = vis.clone();
    v.services.retain(|id, _| keep(id));
    v.pulled.retain(|id, _| keep(id));
    v.dr_for_service.retain(|id, _| keep(id));
    v
}

/// One Service kept with the flag on, and why.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct KeptService {
    /// `namespace/hostname`.
    pub service: String,
    pub kept_by: Vec<KeptBy>,
}

/// A router proxy's clusters with the flag on.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Filtered {
    /// The Gateways it serves, as `namespace/name`.
    pub gateways: Vec<String>,
    /// Its outbound clusters, sorted.
    pub outbound_clusters: Vec<String>,
    /// When istiod gives it its namespace's sidecar scope instead
    /// ([`crate::scope::Evaluator::gateway_alternative`]): those clusters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outbound_clusters_if_shared: Option<Vec<String>>,
    /// The Services kept, and why.
    pub kept: Vec<KeptService>,
    /// How many visible Services it drops.
    pub dropped_services: usize,
    /// The estimate of its config with the flag on.
    pub estimate: crate::scope::ConfigEstimate,
}

/// The router proxy with `labels` in `ns` (first IP `own_ip`), whose
/// scope with the flag off is `vis`, with the flag on; `shared`: its
/// namespace's sidecar scope, when istiod may give it that instead.
pub fn filtered(
    snap: &MeshSnapshot,
    vis: &Visible,
    shared: Option<&Visible>,
    labels: &Labels,
    own_ip: Option<std::net::IpAddr>,
    inbound: crate::snapshot::Inbound,
) -> Filtered {
    let wanted = wanted(snap, &vis.namespace, labels);
    let on = filter(snap, vis, &wanted);
    let mut kept: Vec<KeptService> = on
        .services
        .keys()
        .map(|&id| {
            let s = &snap.services[id];
            KeptService {
                service: format!("{}/{}", s.namespace, s.hostname),
                kept_by: wanted.why(&s.namespace, &s.hostname),
            }
        })
        .collect();
    kept.sort_by(|a, b| a.service.cmp(&b.service));
    Filtered {
        gateways: served_gateways(snap, &vis.namespace, labels)
            .iter()
            .map(|g| g.key())
            .collect(),
        outbound_clusters: snap.outbound_clusters(&on, Some(labels)),
        outbound_clusters_if_shared: shared
            .map(|s| snap.outbound_clusters(&filter(snap, s, &wanted), Some(labels))),
        kept,
        dropped_services: vis.services.len() - on.services.len(),
        estimate: snap.estimate_for_proxy(&on, labels, own_ip, inbound),
    }
}

/// The pods serving Gateway `g`, by namespace and name: a Gateway API
/// Gateway's pods in its namespace carry its name in
/// `gateway.networking.k8s.io/gateway-name`; an Istio Gateway's are the
/// router pods its selector matches, in any namespace.
pub fn pods_serving(snap: &MeshSnapshot, g: &GatewayInfo) -> Vec<crate::snapshot::PodId> {
    let mut out: Vec<crate::snapshot::PodId> = (0..snap.pods.len())
        .filter(|&p| {
            let pod = &snap.pods[p];
            pod.injection.gateway == Some(crate::inject::Gateway::Router)
                && served_gateways(snap, &pod.namespace, &pod.labels)
                    .iter()
                    .any(|s| s.key() == g.key() && s.kube == g.kube)
        })
        .collect();
    out.sort_by(|a, b| {
        let (a, b) = (&snap.pods[*a], &snap.pods[*b]);
        (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name))
    });
    out
}

/// The SNI-DNAT clusters (`outbound_.PORT_.SUBSET_.HOST`) of a router
/// proxy with `labels` whose scope is `vis`, when it serves an Istio
/// Gateway with an `AUTO_PASSTHROUGH` server (an east-west gateway): one
/// per port but UDP, and per subset, of every Service it sees that is
/// not `MESH_EXTERNAL` (`buildOutboundSniDnatClusters`,
/// `pilot/pkg/networking/core/cluster.go`, istio 1.31). The flag does not
/// filter these: there, exportTo is the only lever. Empty for other
/// gateways.
pub fn sni_dnat_clusters(snap: &MeshSnapshot, vis: &Visible, labels: &Labels) -> Vec<String> {
    let east_west = served_gateways(snap, &vis.namespace, labels)
        .iter()
        .any(|g| g.auto_passthrough);
    if !east_west {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (&id, ports) in &vis.services {
        let s = &snap.services[id];
        if s.mesh_external {
            continue;
        }
        let subsets = snap.subsets_for(vis, id, Some(labels));
        for p in s.ports.iter().filter(|p| ports.contains(&p.number)) {
            if p.protocol == crate::snapshot::Protocol::Udp || !snap.has_cluster(id, p.number) {
                continue;
            }
            out.push(format!("outbound_.{}_._.{}", p.number, s.hostname));
            for sub in &subsets {
                out.push(format!("outbound_.{}_.{sub}_.{}", p.number, s.hostname));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}
