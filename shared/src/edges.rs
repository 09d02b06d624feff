//! What each observed edge of a workload meets under a scope: in scope,
//! passthrough, an egress proxy, blackholed, a DNS failure, or Envoy's
//! dynamic forward proxy.
//!
//! Scoping does not block traffic by itself. A destination the scope does
//! not import has no listener or cluster in the proxy, so its traffic
//! falls to the outbound catch-all, which the outbound traffic policy
//! decides: the Sidecar's `outboundTrafficPolicy` when it sets one, else
//! the mesh's (istiod `pilot/pkg/model/sidecar.go`, where a Sidecar's
//! policy without a mode means `REGISTRY_ONLY`, the enum's zero value).
//! Before that, DNS capture can fail the edge: the agent's name table
//! follows the scope (`pkg/dns/server/name_table.go`), so a name that only
//! the mesh defines stops resolving once it leaves the scope.

use serde::Serialize;

use crate::mesh::{annotation_dns_capture, OutboundPolicy};
use crate::observe::{Unregistered, WorkloadTraffic};
use crate::scope::{ScopeSource, Visible};
use crate::snapshot::{MeshSnapshot, Protocol, SvcKind, WorkloadId};

/// What an edge meets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Meets {
    /// The scope imports the destination: routing, retries and mTLS apply.
    InScope,
    /// `ALLOW_ANY`: PassthroughCluster.
    Passthrough,
    /// `ALLOW_ANY` with the Sidecar's `egressProxy`: sent there instead.
    EgressProxy,
    /// `REGISTRY_ONLY`: BlackHoleCluster.
    Blackholed,
    /// DNS capture on, and only the proxy's name table knew the name.
    DnsFailure,
    /// `ALLOW_ANY_DYNAMIC_DNS` (1.31+): plaintext HTTP to the dynamic
    /// forward proxy.
    DynamicForwardProxy,
}

impl Meets {
    pub fn as_str(self) -> &'static str {
        match self {
            Meets::InScope => "in-scope",
            Meets::Passthrough => "passthrough",
            Meets::EgressProxy => "egress-proxy",
            Meets::Blackholed => "blackholed",
            Meets::DnsFailure => "dns-failure",
            Meets::DynamicForwardProxy => "dynamic-forward-proxy",
        }
    }

    /// What it means for the traffic, in a phrase.
    pub fn consequence(self) -> &'static str {
        match self {
            Meets::InScope => "routed with the mesh's rules and mTLS",
            Meets::Passthrough => {
                "it leaves through PassthroughCluster without routing, retries or mTLS, and fails against a STRICT peer"
            }
            Meets::EgressProxy => {
                "it goes to the Sidecar's egressProxy, without the destination's own routing or mTLS"
            }
            Meets::Blackholed => "BlackHoleCluster answers a 502 for HTTP and resets TCP",
            Meets::DnsFailure => {
                "the name stops resolving: only the proxy's name table knows it, and that follows the scope"
            }
            Meets::DynamicForwardProxy => {
                "Envoy's dynamic forward proxy resolves the name itself, without the mesh's routing or mTLS (plaintext HTTP only)"
            }
        }
    }
}

/// The outbound traffic policy a scope runs under.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Policy {
    pub mode: OutboundPolicy,
    /// The Sidecar's `outboundTrafficPolicy.egressProxy.host`.
    pub egress_proxy: Option<String>,
    /// Its `port.number`, when set.
    pub egress_proxy_port: Option<u32>,
    /// Where it comes from: `Sidecar ns/name` or `mesh config`.
    pub from: String,
}

impl Policy {
    /// The cluster the outbound catch-all's TCP chain sends to: the black
    /// hole under REGISTRY_ONLY; otherwise the egress proxy's cluster, whose
    /// port is its `port.number` or 0 when unset (istiod names it as any
    /// route destination without a service,
    /// `pilot/pkg/networking/core/listener_builder.go`
    /// `buildOutboundCatchAllNetworkFiltersOnly`, 1.31), else passthrough
    /// (TCP passes through under ALLOW_ANY_DYNAMIC_DNS too).
    pub fn catch_all_cluster(&self) -> String {
        match (self.mode, &self.egress_proxy) {
            (OutboundPolicy::RegistryOnly, _) => "BlackHoleCluster".into(),
            (_, Some(h)) => format!("outbound|{}||{h}", self.egress_proxy_port.unwrap_or(0)),
            (_, None) => "PassthroughCluster".into(),
        }
    }

    pub fn describe(&self) -> String {
        match &self.egress_proxy {
            Some(h) => format!(
                "{} via egressProxy {h} (from {})",
                self.mode.as_str(),
                self.from
            ),
            None => format!("{} (from {})", self.mode.as_str(), self.from),
        }
    }
}

/// The mesh's own policy (what a generated Sidecar runs under: meshscope
/// writes no `outboundTrafficPolicy`).
pub fn mesh_policy(snap: &MeshSnapshot) -> Policy {
    Policy {
        mode: snap.mesh.outbound_traffic_policy,
        egress_proxy: None,
        egress_proxy_port: None,
        from: "mesh config".into(),
    }
}

/// The policy under the Sidecar a scope comes from.
pub fn policy_for(snap: &MeshSnapshot, source: ScopeSource) -> Policy {
    let Some(sc) = source.sidecar() else {
        return mesh_policy(snap);
    };
    let sc = &snap.sidecars[sc];
    let Some(raw) = sc.object.spec.extra.get("outboundTrafficPolicy") else {
        return mesh_policy(snap);
    };
    if raw.is_null() {
        return mesh_policy(snap);
    }
    let mode = match raw.get("mode").and_then(|m| m.as_str()) {
        Some("ALLOW_ANY") => OutboundPolicy::AllowAny,
        // A mode the Sidecar API does not have fails validation; istiod
        // never sees such a Sidecar. Unset is the enum's zero value.
        _ => OutboundPolicy::RegistryOnly,
    };
    let proxy = raw.get("egressProxy");
    let egress_proxy = proxy
        .and_then(|e| e.get("host"))
        .and_then(|h| h.as_str())
        .filter(|h| !h.is_empty() && mode == OutboundPolicy::AllowAny)
        .map(String::from);
    let egress_proxy_port = proxy
        .and_then(|e| e.pointer("/port/number"))
        .and_then(|n| n.as_u64())
        .and_then(|n| u32::try_from(n).ok())
        .filter(|_| egress_proxy.is_some());
    Policy {
        mode,
        egress_proxy,
        egress_proxy_port,
        from: format!("Sidecar {}", sc.key()),
    }
}

/// Whether the workload's proxies capture DNS: the pod template's
/// `proxy.istio.io/config` annotation, else the mesh's `defaultConfig`.
pub fn dns_capture(snap: &MeshSnapshot, w: WorkloadId) -> bool {
    snap.workloads[w]
        .annotations
        .get("proxy.istio.io/config")
        .and_then(|a| annotation_dns_capture(a))
        .unwrap_or(snap.mesh.dns_capture)
}

/// Only the proxy's name table resolves the host: no Kubernetes Service
/// has it, and it is a name the mesh made up (a ServiceEntry with listed
/// or selected endpoints, or a name under the cluster domain that cluster
/// DNS does not serve). A ServiceEntry for a real DNS name (`DNS` without
/// endpoints, `NONE`) still resolves upstream once it leaves the scope.
fn name_table_only(snap: &MeshSnapshot, host: &str) -> bool {
    let svcs = snap.services_named(host);
    if svcs.is_empty() || svcs.iter().any(|s| snap.services[*s].kind == SvcKind::Kube) {
        return false;
    }
    let under_domain = host.ends_with(&format!(".svc.{}", snap.options.cluster_domain));
    under_domain || svcs.iter().any(|s| snap.services[*s].mesh_defined_name)
}

/// The declared protocol of `host:port` (port 0: any port).
fn protocol(snap: &MeshSnapshot, host: &str, port: u32) -> Protocol {
    snap.services_named(host)
        .iter()
        .flat_map(|s| snap.services[*s].ports.iter())
        .find(|p| port == 0 || p.number == port)
        .map_or(Protocol::Auto, |p| p.protocol)
}

/// What traffic the scope does not route meets under the policy. `http`:
/// it may be plaintext HTTP (the catch-all's HTTP chain under
/// ALLOW_ANY_DYNAMIC_DNS takes only that).
fn fallthrough(policy: &Policy, http: bool) -> Meets {
    match policy.mode {
        OutboundPolicy::RegistryOnly => Meets::Blackholed,
        OutboundPolicy::AllowAny if policy.egress_proxy.is_some() => Meets::EgressProxy,
        OutboundPolicy::AllowAny => Meets::Passthrough,
        OutboundPolicy::AllowAnyDynamicDns if http => Meets::DynamicForwardProxy,
        OutboundPolicy::AllowAnyDynamicDns => Meets::Passthrough,
    }
}

/// What a call to a registered `host:port` meets under a scope.
pub fn meets(
    snap: &MeshSnapshot,
    host: &str,
    port: u32,
    vis: &Visible,
    policy: &Policy,
    dns: bool,
) -> Meets {
    let imported = snap
        .services_named(host)
        .iter()
        .any(|s| vis.imports_service(*s));
    if imported {
        return Meets::InScope;
    }
    if dns && name_table_only(snap, host) {
        return Meets::DnsFailure;
    }
    let http = matches!(protocol(snap, host, port), Protocol::Http | Protocol::Auto);
    fallthrough(policy, http)
}

/// What traffic to an address no Service or ServiceEntry claims meets: the
/// policy, whatever the scope (an HTTP authority marks it as HTTP).
pub fn meets_unregistered(u: &Unregistered, policy: &Policy) -> Meets {
    fallthrough(policy, u.authority.is_some())
}

/// One observed edge and what it meets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EdgeOutcome {
    /// `host:port` (port 0: metrics without a port).
    pub destination: String,
    pub host: String,
    pub port: u32,
    pub requests: u64,
    pub meets: Meets,
}

/// Every observed outbound edge of one workload's traffic, in order.
pub fn edge_outcomes(
    snap: &MeshSnapshot,
    t: &WorkloadTraffic,
    vis: &Visible,
    policy: &Policy,
    dns: bool,
) -> Vec<EdgeOutcome> {
    t.outbound
        .iter()
        .map(|((host, port), e)| EdgeOutcome {
            destination: format!("{host}:{port}"),
            host: host.clone(),
            port: *port,
            requests: e.requests,
            meets: meets(snap, host, *port, vis, policy, dns),
        })
        .collect()
}

/// The outcomes other than in-scope among `meets`, each once, in order:
/// the ones whose consequences a reader needs spelt out.
pub fn outside_outcomes(meets: impl IntoIterator<Item = Meets>) -> Vec<Meets> {
    let set: std::collections::BTreeSet<Meets> =
        meets.into_iter().filter(|m| *m != Meets::InScope).collect();
    set.into_iter().collect()
}

/// The edges that are not in scope, grouped by what they meet:
/// `"blackholed: a:80, b:80; passthrough: c:443"`.
pub fn summarize_outside(edges: &[EdgeOutcome]) -> String {
    let mut by: std::collections::BTreeMap<Meets, Vec<&str>> = Default::default();
    for e in edges.iter().filter(|e| e.meets != Meets::InScope) {
        by.entry(e.meets).or_default().push(&e.destination);
    }
    by.iter()
        .map(|(m, d)| format!("{}: {}", m.as_str(), d.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The observed edges of several workloads under one scope (a
/// namespace-wide Sidecar), merged by destination and what it meets.
pub fn workloads_edge_outcomes(
    snap: &MeshSnapshot,
    obs: &crate::observe::Observations,
    ws: &[WorkloadId],
    vis: &Visible,
    policy: &Policy,
) -> Vec<EdgeOutcome> {
    let mut by: std::collections::BTreeMap<(String, Meets), EdgeOutcome> = Default::default();
    for &w in ws {
        let Some(t) = obs.of(w) else { continue };
        for e in edge_outcomes(snap, t, vis, policy, dns_capture(snap, w)) {
            by.entry((e.destination.clone(), e.meets))
                .and_modify(|o| o.requests += e.requests)
                .or_insert(e);
        }
    }
    by.into_values().collect()
}
