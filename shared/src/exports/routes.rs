//! MS0023: a Gateway API route that sends requests to a service hidden
//! from the proxies it applies to. Found from the objects alone, without
//! traffic: where a route applies follows from its parents.
//!
//! The rules, istio 1.31:
//!
//! - a route bound to a Gateway is served by the gateway's pods, in the
//!   Gateway's namespace; each backend must be visible there, or the
//!   gateway has no cluster for it (`pilot/pkg/networking/core/gateway.go`);
//! - a mesh route is dropped by every proxy that cannot see its parent
//!   Service (`pilot/pkg/networking/core/route/route.go`); an HTTP or gRPC
//!   route in another namespace than its parent (a consumer route) applies
//!   only to proxies of the route's own namespace, TCP and TLS routes and
//!   producer routes to every namespace that sees the parent;
//! - a backend hidden from such a namespace leaves its proxies a route to
//!   a cluster they do not have (`IsServiceVisible`,
//!   `pilot/pkg/model/push_context.go`).

use std::collections::{BTreeMap, BTreeSet};

use crate::codes::Code;
use crate::finding::{finding, Finding};
use crate::gateway_api::RouteKind;
use crate::gateway_routes::own_namespace_only;
use crate::inject::{self, PodFacts};
use crate::labels::Labels;
use crate::snapshot::{MeshSnapshot, VsInfo};

/// How many namespaces a message names before it counts the rest.
const NAMED: usize = 5;

/// MS0023 for each route of a namespace `in_scope` accepts.
pub fn hidden_route_services(snap: &MeshSnapshot, in_scope: impl Fn(&str) -> bool) -> Vec<Finding> {
    let proxied = proxied_namespaces(snap);
    // Problems per route (one route may make several VirtualServices).
    let mut by_route: BTreeMap<(String, RouteKind, String), Vec<String>> = BTreeMap::new();
    for vs in &snap.virtual_services {
        let Some(origin) = &vs.route else { continue };
        if !in_scope(&vs.namespace) {
            continue;
        }
        let problems = match vs.gateways.is_empty() {
            true => mesh_problems(snap, vs, &proxied),
            false => ingress_problems(snap, vs),
        };
        by_route
            .entry((vs.namespace.clone(), origin.kind, origin.name.clone()))
            .or_default()
            .extend(problems);
    }
    by_route
        .into_iter()
        .filter(|(_, p)| !p.is_empty())
        .map(|((ns, kind, name), problems)| {
            finding(
                Code::RouteToHiddenService,
                kind.as_str(),
                &ns,
                &name,
                format!(
                    "{} {ns}/{name}: {}; export each service to those namespaces (its networking.istio.io/exportTo annotation, a ServiceEntry's spec.exportTo, or the mesh default)",
                    kind.as_str(),
                    problems.join("; ")
                ),
            )
        })
        .collect()
}

/// Where a mesh route can apply: the namespaces with a workload that runs
/// a sidecar, and those where the injector's rules inject a new pod,
/// whose workloads a read limited by `-n` does not list.
fn proxied_namespaces(snap: &MeshSnapshot) -> BTreeSet<String> {
    let no_labels = Labels::new();
    let labelled = snap.namespaces.iter().filter(|(ns, info)| {
        let pod = PodFacts {
            namespace: ns,
            labels: &no_labels,
            annotations: &no_labels,
            has_proxy: false,
            proxy_gateway: None,
            host_network: false,
            admitted: false,
        };
        inject::evaluate(&pod, info, &snap.options).sidecar
    });
    snap.workloads
        .iter()
        .filter(|w| w.injection.sidecar)
        .map(|w| w.namespace.clone())
        .chain(labelled.map(|(ns, _)| ns.clone()))
        .collect()
}

/// Whether some copy of `host` is visible to `ns`: as a listener imports
/// it (`listed` for a route's destination, `export` for its parent).
fn visible(snap: &MeshSnapshot, host: &str, ns: &str, destination: bool) -> bool {
    snap.services_named(host).iter().any(|&s| {
        let svc = &snap.services[s];
        match destination {
            true => svc.listed.visible_to(ns),
            false => svc.export.visible_to(ns),
        }
    })
}

/// The backends of `vs` hidden from `ns` (only hosts the mesh defines).
fn hidden_backends<'a>(snap: &MeshSnapshot, vs: &'a VsInfo, ns: &str) -> Vec<&'a str> {
    let mut out: Vec<&str> = vs
        .dests
        .iter()
        .map(|d| d.host.as_str())
        .filter(|h| !snap.services_named(h).is_empty() && !visible(snap, h, ns, true))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A route bound to a Gateway: its backends as its pods' namespace sees them.
fn ingress_problems(snap: &MeshSnapshot, vs: &VsInfo) -> Vec<String> {
    let mut out = Vec::new();
    for g in &vs.gateways {
        let ns = g.split_once('/').map_or(g.as_str(), |(ns, _)| ns);
        for b in hidden_backends(snap, vs, ns) {
            out.push(format!(
                "backend {b} is hidden from namespace {ns}, where Gateway {g}'s pods run: requests through the gateway get no cluster for it"
            ));
        }
    }
    out
}

/// A mesh route: its parent as the route's namespace sees it, and its
/// backends as each namespace it applies to sees them.
fn mesh_problems(snap: &MeshSnapshot, vs: &VsInfo, proxied: &BTreeSet<String>) -> Vec<String> {
    let Some(parent) = vs.hosts.first() else {
        return Vec::new();
    };
    let copies = snap.services_named(parent);
    if copies.is_empty() {
        return Vec::new();
    }
    let consumer_only = own_namespace_only(snap, vs, parent);
    if consumer_only && !visible(snap, parent, &vs.namespace, false) {
        return vec![format!(
            "its parent {parent} is hidden from the route's namespace {}, the only one it applies to: no proxy gets the route",
            vs.namespace
        )];
    }
    let applies: Vec<&str> = match consumer_only {
        true => vec![vs.namespace.as_str()],
        false => proxied
            .iter()
            .map(String::as_str)
            .filter(|ns| vs.export.visible_to(ns) && visible(snap, parent, ns, false))
            .collect(),
    };
    let mut hidden: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for ns in applies {
        for b in hidden_backends(snap, vs, ns) {
            hidden.entry(b).or_default().push(ns);
        }
    }
    hidden
        .into_iter()
        .map(|(b, namespaces)| {
            format!(
                "backend {b} is hidden from {}, whose proxies get the route for {parent}: their requests it sends there get no cluster",
                named(&namespaces)
            )
        })
        .collect()
}

/// `namespace a`, `namespaces a, b`, or the first few and a count.
fn named(namespaces: &[&str]) -> String {
    match namespaces {
        [one] => format!("namespace {one}"),
        _ if namespaces.len() <= NAMED => format!("namespaces {}", namespaces.join(", ")),
        _ => format!(
            "namespaces {} and {} more",
            namespaces[..NAMED].join(", "),
            namespaces.len() - NAMED
        ),
    }
}
