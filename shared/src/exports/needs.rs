//! Which namespaces need each Service, ServiceEntry host, VirtualService
//! and DestinationRule: the observed callers, the gateways that route to
//! it, the Sidecars that import it by name, and the proxies the mesh
//! config makes call it. Every rule errs on the side of keeping a
//! namespace: a namespace kept without need costs config, one dropped
//! with need is an outage.

use std::collections::{BTreeMap, BTreeSet};

use crate::host::{host_subset_of, hosts_overlap, NsSel};
use crate::observe::Observations;
use crate::required::required_for;
use crate::snapshot::{DrId, MeshSnapshot, SvcId, VsId, VsInfo};

use super::model::{Need, Reason, ALL};

/// An object whose exportTo decides who sees it (a ServiceEntry counts per
/// host here and is folded per object afterwards).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Obj {
    Svc(SvcId),
    Vs(VsId),
    Dr(DrId),
}

/// Per object, per namespace, why that namespace needs it.
#[derive(Default)]
pub(super) struct Needs {
    pub(super) of: BTreeMap<Obj, Need>,
    /// Per namespace, the services its proxies call or reach through a
    /// route: whose DestinationRules they need.
    called: BTreeMap<String, BTreeSet<SvcId>>,
}

impl Needs {
    /// The needs of `o`, taken out.
    pub(super) fn take(&mut self, o: Obj) -> Need {
        self.of.remove(&o).unwrap_or_default()
    }

    fn add(&mut self, o: Obj, ns: &str, why: Reason) {
        self.of
            .entry(o)
            .or_default()
            .entry(ns.to_string())
            .or_default()
            .insert(why);
    }

    fn call(&mut self, s: SvcId, ns: &str, why: Reason) {
        self.add(Obj::Svc(s), ns, why);
        self.called.entry(ns.to_string()).or_default().insert(s);
    }
}

/// Every need the snapshot and the traffic show.
pub(super) fn needs(snap: &MeshSnapshot, obs: &Observations) -> Needs {
    let mut n = Needs::default();
    observed(snap, obs, &mut n);
    gateways(snap, &mut n);
    sidecar_imports(snap, &mut n);
    required(snap, &mut n);
    waypoints(snap, &mut n);
    destination_rules(snap, &mut n);
    n
}

/// The copies of `host` a proxy in `ns` uses: the one istiod gives it,
/// else (hidden from it today) every copy, so that none is narrowed away.
fn copies(snap: &MeshSnapshot, host: &str, ns: &str) -> Vec<SvcId> {
    match snap.imported_copy(host, ns) {
        Some(s) => vec![s],
        None => snap.services_named(host).to_vec(),
    }
}

/// The services a VirtualService destination reaches from namespace `ns`.
fn destination_copies(snap: &MeshSnapshot, host: &str, ns: &str) -> Vec<SvcId> {
    match snap.destination_service(host, ns) {
        Some(s) => vec![s],
        None => snap.services_named(host).to_vec(),
    }
}

/// Observed edges: the service each caller used, and the mesh
/// VirtualServices whose hosts the names it dialled fall in.
fn observed(snap: &MeshSnapshot, obs: &Observations, n: &mut Needs) {
    for (&w, t) in &obs.traffic {
        let wl = &snap.workloads[w];
        let ns = wl.namespace.as_str();
        let mut names: BTreeSet<String> = BTreeSet::new();
        for ((host, _), e) in &t.outbound {
            let why = Reason::Observed {
                caller: wl.key(),
                requests: e.requests,
            };
            for s in copies(snap, host, ns) {
                n.call(s, ns, why.clone());
            }
            names.insert(host.clone());
        }
        names.extend(t.dialled.iter().flat_map(|d| snap.dialled_hosts(d, ns)));
        for (v, vs) in snap.virtual_services.iter().enumerate() {
            let covers = |name: &str| vs.hosts.iter().any(|h| hosts_overlap(h, name));
            if vs.mesh_bound && names.iter().any(|d| covers(d)) {
                // The requests to the hosts it covers (a name only dialled
                // has no count of its own).
                let requests = t
                    .outbound
                    .iter()
                    .filter(|((host, _), _)| covers(host))
                    .map(|(_, e)| e.requests)
                    .sum();
                let why = Reason::Observed {
                    caller: wl.key(),
                    requests,
                };
                routed(snap, v, ns, why, n);
            }
        }
    }
}

/// VirtualService `v` serves proxies of `ns`: it, the VirtualServices it
/// delegates to, the services its routes reach from `ns`, and the services
/// its hosts name need `ns`. A host's own Service gives Envoy's virtual
/// host its short names (`svc.ns`, `svc`: `GenerateAltVirtualHosts`,
/// `pilot/pkg/networking/core/httproute.go`, istio 1.31); hidden, the
/// callers that dial them get no route.
fn routed(snap: &MeshSnapshot, v: VsId, ns: &str, why: Reason, n: &mut Needs) {
    n.add(Obj::Vs(v), ns, why);
    let vs = &snap.virtual_services[v];
    let route = Reason::Route(vs_key(vs));
    for h in &vs.hosts {
        for &s in snap.services_named(h) {
            n.call(s, ns, route.clone());
        }
    }
    for d in &vs.dests {
        if d.source_namespaces.is_empty() || d.source_namespaces.iter().any(|s| s == ns) {
            for s in destination_copies(snap, &d.host, ns) {
                n.call(s, ns, route.clone());
            }
        }
    }
    for (dns, dname) in &vs.delegates {
        for &dv in snap.vss_in(dns) {
            let delegate = &snap.virtual_services[dv];
            if &delegate.name == dname {
                // A delegate must be exported to the root's namespace
                // (`mergeVirtualServices`, push_context.go, 1.31).
                n.add(Obj::Vs(dv), &vs.namespace, Reason::Delegate(vs_key(vs)));
                for d in &delegate.dests {
                    for s in destination_copies(snap, &d.host, ns) {
                        n.call(s, ns, Reason::Route(vs_key(delegate)));
                    }
                }
            }
        }
    }
}

fn vs_key(vs: &VsInfo) -> String {
    format!("{}/{}", vs.namespace, vs.name)
}

/// The namespaces of the gateway pods a VirtualService's `gateways` name:
/// they must see it, its destinations and their DestinationRules
/// (`VirtualServicesForGateway` looks in the gateway proxy's namespace,
/// push_context.go, 1.31). A Gateway the inputs lack, or one that selects
/// no pod read, counts its own namespace.
fn gateways(snap: &MeshSnapshot, n: &mut Needs) {
    for (v, vs) in snap.virtual_services.iter().enumerate() {
        for g in &vs.gateways {
            let found = snap.gateways.iter().find(|gw| &gw.key() == g);
            let mut at: BTreeSet<String> = found
                .map(|gw| gw.pod_namespaces.clone())
                .unwrap_or_default();
            if at.is_empty() {
                at.insert(g.split_once('/').map_or(g.as_str(), |(ns, _)| ns).into());
            }
            for ns in at {
                routed(snap, v, &ns, Reason::Gateway(g.clone()), n);
            }
        }
    }
}

/// Egress hosts that name a namespace or a host: the Sidecar's namespace
/// needs what they import, every namespace for the root default (which
/// applies to every namespace without its own). `*/*` and `./...` import
/// nothing by name.
fn sidecar_imports(snap: &MeshSnapshot, n: &mut Needs) {
    for (id, sc) in snap.sidecars.iter().enumerate() {
        let everyone = snap.root_default() == Some(id);
        let at = if everyone { ALL } else { sc.namespace.as_str() };
        let why = Reason::Sidecar(sc.key());
        for e in sc.listeners.iter().flat_map(|l| &l.hosts) {
            if e.exclude || e.ns == NsSel::Current || (e.ns == NsSel::Any && e.host == "*") {
                continue;
            }
            for s in service_candidates(snap, e) {
                let svc = &snap.services[s];
                if e.ns.matches(&sc.namespace, &svc.namespace)
                    && host_subset_of(&svc.hostname, &e.host)
                {
                    n.call(s, at, why.clone());
                }
            }
            let vss: Vec<VsId> = match &e.ns {
                NsSel::Named(ns) => snap.vss_in(ns).to_vec(),
                _ => (0..snap.virtual_services.len()).collect(),
            };
            for v in vss {
                let vs = &snap.virtual_services[v];
                if e.ns.matches(&sc.namespace, &vs.namespace)
                    && vs.hosts.iter().any(|h| host_subset_of(h, &e.host))
                {
                    n.add(Obj::Vs(v), at, why.clone());
                }
            }
        }
    }
}

/// A service that names a waypoint (its own `istio.io/use-waypoint`, else
/// its namespace's) stays visible to the waypoint's namespace. istiod
/// builds the waypoint's `inbound-vip` clusters whatever exportTo says
/// ([`crate::waypoint`]), but the DestinationRule subsets and route
/// destinations it adds come from that namespace's view: kept, as more in
/// scope is never less safe.
fn waypoints(snap: &MeshSnapshot, n: &mut Needs) {
    for (s, svc) in snap.services.iter().enumerate() {
        let inherited = || {
            let labels = &snap.namespace(&svc.namespace)?.labels;
            crate::meta::use_waypoint(labels, &svc.namespace)
        };
        if let Some(Some(at)) = svc.use_waypoint.clone().or_else(inherited) {
            n.call(s, &at.namespace, Reason::Waypoint);
        }
    }
}

/// The services an egress entry can import, found through the indexes:
/// an exact host by name, a wildcard in one namespace by namespace.
fn service_candidates(snap: &MeshSnapshot, e: &crate::host::HostEntry) -> Vec<SvcId> {
    match &e.ns {
        _ if !e.host.contains('*') => snap.services_named(&e.host).to_vec(),
        NsSel::Named(ns) => snap.services_in(ns).to_vec(),
        _ => (0..snap.services.len()).collect(),
    }
}

/// Extension-provider services the mesh config makes Envoy call: every
/// namespace with a workload (or gateway pod) that calls one needs it.
fn required(snap: &MeshSnapshot, n: &mut Needs) {
    let mut callers: Vec<(String, Option<&crate::snapshot::Labels>)> = snap
        .sidecar_workloads()
        .map(|w| {
            (
                snap.workloads[w].namespace.clone(),
                Some(snap.workload_labels(w)),
            )
        })
        .collect();
    for g in snap.gateways.iter().filter(|g| g.foreign.is_none()) {
        callers.extend(g.pod_namespaces.iter().map(|ns| (ns.clone(), None)));
    }
    for (ns, labels) in callers {
        for r in required_for(snap, &ns, labels) {
            if r.problem.is_some() {
                continue;
            }
            let from = r.host.split_once('/').map(|(n, _)| n.to_string());
            for &s in snap.services_named(&r.service) {
                let here = &snap.services[s].namespace;
                if from.as_deref().is_none_or(|f| f == "*" || f == here) {
                    let why = Reason::Required(r.why.join("; "));
                    n.call(s, &ns, why);
                }
            }
        }
    }
}

/// A namespace that calls a service needs the DestinationRules that can
/// apply to the call: those of the service's namespace and of the root
/// namespace whose host covers it (istiod's steps 2 and 3; step 1 is the
/// caller's own namespace, always visible to itself). Every covering rule
/// counts, not only the most specific, so a narrowing never changes which
/// one wins.
fn destination_rules(snap: &MeshSnapshot, n: &mut Needs) {
    let root = snap.mesh.root_namespace.clone();
    let called = std::mem::take(&mut n.called);
    for (ns, services) in &called {
        for &s in services {
            let svc = &snap.services[s];
            for dns in [svc.namespace.as_str(), root.as_str()] {
                for &d in snap.drs_in(dns) {
                    let dr = &snap.destination_rules[d];
                    if dr.selector.is_none() && host_subset_of(&svc.hostname, &dr.host) {
                        n.add(
                            Obj::Dr(d),
                            ns,
                            Reason::DestinationRuleFor(svc.hostname.clone()),
                        );
                    }
                }
            }
        }
    }
    n.called = called;
}
