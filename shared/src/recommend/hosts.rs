//! The egress hosts a workload needs: the services it was seen to call,
//! the VirtualServices for the names it called and their destinations, and
//! the services the mesh config makes its Envoy call.

use std::collections::BTreeSet;

use crate::host::{hosts_overlap, HostEntry};
use crate::observe::WorkloadTraffic;
use crate::required::{self, Required};
use crate::snapshot::{Labels, Listener, MeshSnapshot, SvcId};

/// The egress entries that cover what a workload was seen to call.
pub(super) struct Needed {
    pub(super) hosts: BTreeSet<String>,
    pub(super) not_visible: BTreeSet<String>,
    /// Destinations of the imported VirtualServices that were not observed.
    pub(super) routed: Vec<Required>,
    pub(super) unknown: BTreeSet<String>,
}

/// Why an observed `outbound|port||host` matches no registered service.
fn unknown_why(snap: &MeshSnapshot, host: &str, port: u32) -> String {
    let domain = &snap.options.cluster_domain;
    let why = match crate::detect::domain_of(host) {
        Some(d) if d != domain => format!(
            "no Service or ServiceEntry defines it: its cluster domain is {d}, not {domain} (--cluster-domain)"
        ),
        _ => "no Service or ServiceEntry in the input defines it".to_string(),
    };
    if port == 0 {
        format!("{host}: {why}")
    } else {
        format!("{host}:{port}: {why}")
    }
}

/// `current`: the import set of the workload's Sidecar, when one applies
/// (an observed host is written from the namespace whose copy it imports).
pub(super) fn needed_hosts(
    snap: &MeshSnapshot,
    ns: &str,
    t: &WorkloadTraffic,
    current: Option<&crate::scope::Visible>,
) -> Needed {
    let mut out = Needed {
        hosts: BTreeSet::new(),
        not_visible: BTreeSet::new(),
        routed: Vec::new(),
        unknown: BTreeSet::new(),
    };
    let mut names: BTreeSet<String> = BTreeSet::new();
    for (host, port) in t.outbound.keys() {
        names.insert(host.clone());
        match crate::duplicates::used_service(snap, host, ns, current) {
            Some(svc) => {
                out.hosts.insert(entry_for(snap, svc));
            }
            None if !snap.services_named(host).is_empty() => {
                out.not_visible.insert(host.clone());
            }
            None => {
                out.unknown.insert(unknown_why(snap, host, *port));
            }
        }
    }
    for d in &t.dialled {
        names.extend(snap.dialled_hosts(d, ns));
    }
    // VirtualServices for called names: import them from their own
    // namespace, together with their destinations and those of the
    // VirtualServices they delegate to (an egress gateway, say).
    let observed: BTreeSet<&str> = t.outbound.keys().map(|(h, _)| h.as_str()).collect();
    for vs_ns in snap.vss_by_ns.keys() {
        for &id in snap.vss_in(vs_ns) {
            let vs = &snap.virtual_services[id];
            if !vs.mesh_bound || !vs.export.visible_to(ns) {
                continue;
            }
            for name in &names {
                if vs.hosts.iter().any(|h| hosts_overlap(h, name)) {
                    out.hosts.insert(format!("{}/{}", vs.namespace, name));
                    parents(snap, ns, id, &mut out);
                    for (via, dests) in route_targets(snap, id) {
                        for d in dests {
                            let why = format!("required by routing: {via} routes {name} to it");
                            route_to(snap, ns, &d.host, d.port, why, &observed, &mut out);
                        }
                    }
                }
            }
        }
    }
    out.routed
        .sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
    out
}

/// A Gateway API route gets no virtual host unless its parent service is
/// visible (`pilot/pkg/networking/core/route/route.go`, istio 1.31): a
/// consumer route lives in the caller's namespace, so importing it from
/// there leaves the parent out; import the parent from its own.
fn parents(snap: &MeshSnapshot, ns: &str, id: usize, out: &mut Needed) {
    let vs = &snap.virtual_services[id];
    if !vs.gateway_semantics() {
        return;
    }
    for h in &vs.hosts {
        if let Some(svc) = snap.destination_service(h, ns) {
            out.hosts.insert(entry_for(snap, svc));
        }
    }
}

/// The destinations a VirtualService routes to: its own, then those of
/// each VirtualService it delegates to that is exported to its namespace
/// (as istiod merges them), each with how it is named.
fn route_targets(snap: &MeshSnapshot, id: usize) -> Vec<(String, &[crate::snapshot::VsDest])> {
    let vs = &snap.virtual_services[id];
    let mut out = vec![(vs.label(), vs.dests.as_slice())];
    for (dns, dname) in &vs.delegates {
        if let Some(d) = snap.delegate_of(id, dns, dname) {
            let d = &snap.virtual_services[d];
            out.push((
                format!(
                    "VirtualService {dns}/{dname} (delegate of {}/{})",
                    vs.namespace, vs.name
                ),
                d.dests.as_slice(),
            ));
        }
    }
    out
}

/// Imports a route destination seen from namespace `ns`, and records why
/// when its traffic was not observed.
fn route_to(
    snap: &MeshSnapshot,
    ns: &str,
    host: &str,
    port: Option<u32>,
    why: String,
    observed: &BTreeSet<&str>,
    out: &mut Needed,
) {
    let (entry, service, problem) = match snap.destination_service(host, ns) {
        Some(svc) => {
            let e = entry_for(snap, svc);
            out.hosts.insert(e.clone());
            (e, snap.services[svc].hostname.clone(), None)
        }
        None if !snap.services_named(host).is_empty() => (
            format!("*/{host}"),
            host.to_string(),
            Some(format!("{host} is not exported to namespace {ns}")),
        ),
        None => (
            format!("*/{host}"),
            host.to_string(),
            Some(format!(
                "no Service or ServiceEntry in the input defines {host}"
            )),
        ),
    };
    if observed.contains(service.as_str()) {
        return;
    }
    required::merge(
        &mut out.routed,
        Required {
            host: entry,
            service,
            port,
            why: vec![why],
            problem,
        },
    );
}

/// The mesh-config requirements of workloads with these label sets in
/// `ns` (`None`: namespace-wide policies only) merged into `into`; the
/// hosts to write (those without a problem) are added to `hosts`.
pub(super) fn add_required(
    snap: &MeshSnapshot,
    ns: &str,
    label_sets: &[Option<&Labels>],
    into: &mut Vec<Required>,
    hosts: &mut BTreeSet<String>,
) {
    for labels in label_sets {
        for r in required::required_for(snap, ns, *labels) {
            required::merge(into, r);
        }
    }
    into.sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
    hosts.extend(
        into.iter()
            .filter(|r| r.problem.is_none())
            .map(|r| r.host.clone()),
    );
}

pub(super) fn entry_for(snap: &MeshSnapshot, svc: SvcId) -> String {
    let s = &snap.services[svc];
    format!("{}/{}", s.namespace, s.hostname)
}

pub(super) fn parse_listeners(snap: &MeshSnapshot, hosts: &[String]) -> Vec<Listener> {
    vec![Listener {
        port: None,
        protocol: None,
        tls: false,
        hosts: hosts
            .iter()
            .filter_map(|h| HostEntry::parse(h, snap.options.istio).ok())
            .collect(),
    }]
}
