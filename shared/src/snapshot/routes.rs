//! Gateway API routes as istiod turns them into VirtualServices with
//! gateway semantics (`pilot/pkg/config/kube/gateway/route_collections.go`,
//! istio 1.31):
//!
//! - a mesh (GAMMA) route, one whose parent is a Service, becomes one
//!   mesh-bound VirtualService per parent, in the *route's* namespace, for
//!   the parent's FQDN (`name.ns.svc.<domain>`, the namespace the route's
//!   when the reference names none) or, for a ServiceEntry parent, one per
//!   host of the entry; it sets no exportTo, so the mesh default applies;
//! - a route whose parent is a Gateway becomes one VirtualService bound to
//!   that gateway for its `hostnames` (`*` when none), served by the pods
//!   istiod deploys for the Gateway in the Gateway's namespace;
//! - backends (`backendRefs`) are Services by default (`name.ns.svc.<domain>`,
//!   the route's namespace when none is named), or hosts named directly
//!   (`networking.istio.io` `Hostname`), or a ServiceEntry's hosts; one
//!   of weight 0 is dropped; a route bound to a Gateway sends requests to
//!   another namespace's Service only where a ReferenceGrant permits it
//!   (the others are refused, [`crate::gateway_api::backend_allowed`]).

use super::model::{RouteOrigin, RuleClusters, VsDest, VsInfo};
use crate::gateway_api::{backend_allowed, BackendRef, ParentRef, ReferenceGrant, Route};
use crate::host::Export;
use crate::inputs::Inputs;
use crate::istio::ServiceEntry;
use crate::mesh::MeshConfig;
use crate::meta::{created, name_of, ns_of};

const ISTIO_NETWORKING: &str = "networking.istio.io";

/// The VirtualServices istiod makes of the input's routes.
pub(super) fn virtual_services(inputs: &Inputs, mesh: &MeshConfig, domain: &str) -> Vec<VsInfo> {
    let mut out = Vec::new();
    for r in &inputs.routes {
        let ns = ns_of(&r.metadata);
        let entries = &inputs.service_entries;
        let mesh_dests = destinations(r, &ns, entries, domain, None);
        let grants = Some(inputs.reference_grants.as_slice());
        let base = |n: usize,
                    hosts: Vec<String>,
                    mesh_bound: bool,
                    gateways: Vec<String>,
                    port: Option<u32>| {
            let (dests, refused) = match mesh_bound {
                true => (mesh_dests.clone(), Vec::new()),
                false => (
                    destinations(r, &ns, entries, domain, grants),
                    refused(r, &ns, &inputs.reference_grants),
                ),
            };
            let rules = rule_clusters(r, &ns, entries, domain, grants.filter(|_| !mesh_bound));
            VsInfo {
                name: format!("{}~{n}~gateway", name_of(&r.metadata)),
                namespace: ns.clone(),
                hosts,
                mesh_bound,
                gateways,
                export: Export::for_virtual_service(
                    None,
                    &mesh.default_virtual_service_export_to,
                    &ns,
                ),
                declared: None,
                declared_ours: false,
                dests,
                // A Gateway API route's listeners are in its origin.
                stream_ports: Vec::new(),
                delegates: Vec::new(),
                created: created(&r.metadata),
                route: Some(RouteOrigin {
                    kind: r.kind,
                    name: name_of(&r.metadata),
                    port,
                    listener_ports: Vec::new(),
                    refused,
                    rules,
                }),
            }
        };
        let mut n = 0;
        for p in &r.spec.parent_refs {
            if let Some(hosts) = mesh_parent_hosts(p, &ns, &inputs.service_entries, domain) {
                for h in hosts {
                    out.push(base(n, vec![h], true, Vec::new(), p.port));
                    n += 1;
                }
            } else if is_gateway(p) {
                let gw_ns = p.namespace.clone().unwrap_or_else(|| ns.clone());
                if foreign(inputs, &gw_ns, &p.name) {
                    continue;
                }
                let Some(bound) = gateway_hosts(inputs, r, &ns, &gw_ns, p) else {
                    continue;
                };
                let gateway = vec![format!("{gw_ns}/{}", p.name)];
                let mut vs = base(n, bound.hosts, false, gateway, None);
                if let Some(o) = vs.route.as_mut() {
                    o.listener_ports = bound.ports;
                }
                out.push(vs);
                n += 1;
            }
        }
    }
    out
}

/// Where route `r` (in `ns`) binds on Gateway `gw_ns/parent.name`: the
/// hostnames and listener ports its listeners admit
/// ([`crate::gateway_listeners::admitted_hosts`]), `None` when none
/// does. A Gateway not in the input admits every hostname (`*` for
/// none), on no known port: more in scope, never less.
fn gateway_hosts(
    inputs: &Inputs,
    r: &Route,
    ns: &str,
    gw_ns: &str,
    parent: &ParentRef,
) -> Option<crate::gateway_listeners::Admitted> {
    let gw = inputs
        .kube_gateways
        .iter()
        .find(|g| ns_of(&g.metadata) == gw_ns && name_of(&g.metadata) == parent.name);
    let Some(gw) = gw else {
        let hosts = match r.spec.hostnames.is_empty() {
            true => vec!["*".to_string()],
            false => r.spec.hostnames.clone(),
        };
        return Some(crate::gateway_listeners::Admitted {
            hosts,
            ports: Vec::new(),
        });
    };
    let labels = inputs
        .namespaces
        .iter()
        .find(|n| name_of(&n.metadata) == ns)
        .map(|n| crate::meta::labels(&n.metadata.labels))
        .unwrap_or_default();
    let attaching = crate::gateway_listeners::Attaching {
        kind: r.kind,
        namespace: ns,
        namespace_labels: &labels,
        hostnames: &r.spec.hostnames,
    };
    crate::gateway_listeners::admitted_hosts(&gw.spec.listeners, gw_ns, parent, &attaching)
}

/// Whether Gateway `ns/name` is in the input and of a class another
/// controller than istiod implements: istiod binds no route to it.
fn foreign(inputs: &Inputs, ns: &str, name: &str) -> bool {
    inputs
        .kube_gateways
        .iter()
        .find(|g| ns_of(&g.metadata) == ns && name_of(&g.metadata) == name)
        .is_some_and(|g| {
            crate::gateway_api::foreign_controller(g, &inputs.gateway_classes).is_some()
        })
}

/// A Gateway API `Gateway` parent (the default kind).
fn is_gateway(p: &ParentRef) -> bool {
    matches!(p.kind.as_deref(), None | Some("Gateway"))
        && matches!(
            p.group.as_deref(),
            None | Some(crate::gateway_api::GATEWAY_API_GROUP)
        )
}

/// The hosts a mesh parent stands for: a Service's FQDN, or a
/// ServiceEntry's hosts (none when the entry is not in the input). `None`
/// for a parent that is not a mesh one.
fn mesh_parent_hosts(
    p: &ParentRef,
    ns: &str,
    entries: &[ServiceEntry],
    domain: &str,
) -> Option<Vec<String>> {
    let pns = p.namespace.as_deref().unwrap_or(ns);
    if p.is_service() {
        return Some(vec![format!("{}.{pns}.svc.{domain}", p.name)]);
    }
    if p.kind.as_deref() == Some("ServiceEntry") && p.group.as_deref() == Some(ISTIO_NETWORKING) {
        return Some(entry_hosts(entries, pns, &p.name));
    }
    None
}

fn entry_hosts(entries: &[ServiceEntry], ns: &str, name: &str) -> Vec<String> {
    entries
        .iter()
        .find(|e| ns_of(&e.metadata) == ns && name_of(&e.metadata) == name)
        .map(|e| e.spec.hosts.clone())
        .unwrap_or_default()
}

/// Where a route's rules send requests; with `grants` (a route bound to a
/// Gateway), only to the backends they permit.
fn destinations(
    r: &Route,
    ns: &str,
    entries: &[ServiceEntry],
    domain: &str,
    grants: Option<&[ReferenceGrant]>,
) -> Vec<VsDest> {
    let mut out = Vec::new();
    // A backend of weight 0 is left out of the route (HTTP, gRPC and TCP
    // alike: `buildHTTPDestination`, `buildTCPDestination`, conversion.go,
    // istio 1.31); a rule with no other answers 500 or routes nowhere.
    let weighted = r
        .spec
        .rules
        .iter()
        .flat_map(|rule| &rule.backend_refs)
        .filter(|b| b.weight != Some(0))
        .filter(|b| grants.is_none_or(|g| backend_allowed(g, r.kind, ns, b)));
    for b in weighted {
        for host in backend_hosts(b, ns, entries, domain) {
            out.push(VsDest {
                host,
                port: b.port,
                source_namespaces: Vec::new(),
            });
        }
    }
    out
}

/// Each rule of `r`: whether it matches every request, and the clusters
/// of its backends (of weight above 0, and with `grants`, permitted).
fn rule_clusters(
    r: &Route,
    ns: &str,
    entries: &[ServiceEntry],
    domain: &str,
    grants: Option<&[ReferenceGrant]>,
) -> Vec<RuleClusters> {
    r.spec
        .rules
        .iter()
        .map(|rule| {
            let mut clusters: Vec<String> = rule
                .backend_refs
                .iter()
                .filter(|b| b.weight != Some(0))
                .filter(|b| grants.is_none_or(|g| backend_allowed(g, r.kind, ns, b)))
                .filter_map(|b| b.port.map(|p| (b, p)))
                .flat_map(|(b, p)| {
                    backend_hosts(b, ns, entries, domain)
                        .into_iter()
                        .map(move |h| format!("outbound|{p}||{h}"))
                })
                .collect();
            clusters.sort();
            clusters.dedup();
            RuleClusters {
                catch_all: rule.catch_all(),
                clusters,
            }
        })
        .collect()
}

/// The backends of a route bound to a Gateway that no ReferenceGrant
/// permits, as `namespace/name`, sorted (one of weight 0 is dropped
/// before the check).
fn refused(r: &Route, ns: &str, grants: &[ReferenceGrant]) -> Vec<String> {
    let mut out: Vec<String> = r
        .spec
        .rules
        .iter()
        .flat_map(|rule| &rule.backend_refs)
        .filter(|b| b.weight != Some(0) && !backend_allowed(grants, r.kind, ns, b))
        .map(|b| format!("{}/{}", b.namespace.as_deref().unwrap_or(ns), b.name))
        .collect();
    out.sort();
    out.dedup();
    out
}

fn backend_hosts(b: &BackendRef, ns: &str, entries: &[ServiceEntry], domain: &str) -> Vec<String> {
    let bns = b.namespace.as_deref().unwrap_or(ns);
    if b.is_service() {
        return vec![format!("{}.{bns}.svc.{domain}", b.name)];
    }
    match (b.group.as_deref(), b.kind.as_deref()) {
        (Some(ISTIO_NETWORKING), Some("Hostname")) => vec![b.name.clone()],
        (Some(ISTIO_NETWORKING), Some("ServiceEntry")) => entry_hosts(entries, bns, &b.name),
        _ => Vec::new(),
    }
}
