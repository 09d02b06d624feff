//! What one scope imports, as istiod builds a SidecarScope
//! (`pilot/pkg/model/sidecar.go`, release-1.31): each egress listener
//! selects one copy of each hostname it matches, then the destinations of
//! the VirtualServices it imports; the scope keeps one service per
//! hostname, appended listener by listener (`appendSidecarServices`):
//!
//! - the first copy of a hostname stays, and a later copy from another
//!   namespace is dropped, except that a Kubernetes Service replaces a
//!   ServiceEntry of its hostname from any namespace (and is never
//!   replaced by one);
//! - a later copy in the same namespace that istiod may merge
//!   (`canMergeServices`: same resolution, kind, labels, workload
//!   selector and exportTo) adds the ports the kept one lacks;
//! - a copy an egress listener selected that the scope does not keep still
//!   gets that listener's outbound listeners, but no clusters
//!   ([`Visible::egress`], [`crate::listeners`]).
//!
//! From 1.31 a listener whose hosts are all exact `ns/host` entries looks
//! each up by name (`servicesForExactHosts`): one copy per hostname and
//! namespace (a Kubernetes Service, else the oldest entry), checked with
//! `IsServiceVisible` ([`ServiceInfo::listed`]) and ordered by age alone.

use std::collections::{BTreeMap, BTreeSet};

use crate::hash::HashMap;
use crate::host::{host_subset_of, hosts_overlap, HostEntry, NsSel};
use crate::listeners::EgressServices;
use crate::scope::{PortSet, Visible};
use crate::snapshot::{Listener, MeshSnapshot, ServiceInfo, SvcId, SvcKind};

fn entry_matches_service(e: &HostEntry, scope_ns: &str, svc_ns: &str, hostname: &str) -> bool {
    e.ns.matches(scope_ns, svc_ns) && host_subset_of(hostname, &e.host)
}

/// The namespace an entry names, for a proxy in `scope_ns`.
fn entry_namespace<'a>(e: &'a HostEntry, scope_ns: &'a str) -> Option<&'a str> {
    match &e.ns {
        NsSel::Current => Some(scope_ns),
        NsSel::Named(n) => Some(n),
        NsSel::Any => None,
    }
}

/// One egress listener's services: the copy of each hostname it selects,
/// and the other copies in that copy's namespace.
struct Selected {
    chosen: Vec<SvcId>,
    copies: Vec<SvcId>,
}

impl MeshSnapshot {
    /// Every service, VirtualService and DestinationRule that `listeners`
    /// import for a proxy in `scope_ns`.
    pub fn visible(&self, scope_ns: &str, listeners: &[Listener]) -> Visible {
        let mut out = Visible {
            namespace: scope_ns.to_string(),
            ..Visible::default()
        };
        // The service the scope keeps for each hostname.
        let mut kept: HashMap<&str, SvcId> = HashMap::default();
        for l in listeners {
            let (includes, excludes): (Vec<&HostEntry>, Vec<&HostEntry>) =
                l.hosts.iter().partition(|e| !e.exclude);
            let sel = self.listener_services(scope_ns, l, &includes, &excludes);
            // Chosen copies first: the order the scope appends them in.
            let own: Vec<SvcId> = sel.chosen.into_iter().chain(sel.copies).collect();
            for &id in &own {
                let ports = match l.port {
                    Some(p) => PortSet::from_unsorted([p].into_iter()),
                    None => {
                        PortSet::from_unsorted(self.services[id].ports.iter().map(|p| p.number))
                    }
                };
                self.append(&mut out, &mut kept, id, ports, false);
            }
            out.egress.push(EgressServices {
                port: l.port,
                protocol: l.protocol,
                tls: l.tls,
                services: own,
            });
            let pulled =
                self.import_virtual_services(scope_ns, l.port, &includes, &excludes, &mut out);
            for (id, ports) in pulled {
                self.append(&mut out, &mut kept, id, ports, true);
            }
        }
        self.choose_destination_rules(scope_ns, &mut out);
        out
    }

    /// The services one listener selects: on 1.31's exact-host path by
    /// name, else every matching service, one copy per hostname.
    fn listener_services(
        &self,
        scope_ns: &str,
        l: &Listener,
        includes: &[&HostEntry],
        excludes: &[&HostEntry],
    ) -> Selected {
        let exact = self.options.istio.at_least(31)
            && !includes.is_empty()
            && includes
                .iter()
                .all(|e| !e.host.contains('*') && e.ns != NsSel::Any);
        let candidates = if exact {
            self.exact_candidates(scope_ns, includes)
        } else {
            self.scan_candidates(scope_ns, includes)
        };
        let unified = self.options.istio.at_least(24);
        // hostname -> the one copy kept for this listener
        let mut chosen: HashMap<&str, SvcId> = HashMap::default();
        let mut others: Vec<SvcId> = Vec::new();
        for id in candidates {
            let s = &self.services[id];
            let visible = if exact { &s.listed } else { &s.export };
            if !visible.visible_to(scope_ns)
                || !includes
                    .iter()
                    .any(|e| entry_matches_service(e, scope_ns, &s.namespace, &s.hostname))
                || excludes
                    .iter()
                    .any(|e| entry_matches_service(e, scope_ns, &s.namespace, &s.hostname))
                || l.port
                    .is_some_and(|p| !s.ports.iter().any(|sp| sp.number == p))
            {
                continue;
            }
            match chosen.get(s.hostname.as_str()) {
                None => {
                    chosen.insert(&s.hostname, id);
                }
                Some(&cur) if self.prefer_in(id, cur, scope_ns, unified, exact) => {
                    chosen.insert(&s.hostname, id);
                    others.push(cur);
                }
                Some(_) => others.push(id),
            }
        }
        // Every copy in the chosen copy's namespace stays the listener's.
        let copies = others
            .into_iter()
            .filter(|id| {
                let s = &self.services[*id];
                self.services[chosen[s.hostname.as_str()]].namespace == s.namespace
            })
            .collect();
        let mut chosen: Vec<SvcId> = chosen.into_values().collect();
        chosen.sort_unstable();
        Selected { chosen, copies }
    }

    /// Candidates from the indexes: exact hosts by name, wildcards by
    /// namespace; only `*/<wildcard>` scans everything.
    fn scan_candidates(&self, scope_ns: &str, includes: &[&HostEntry]) -> Vec<SvcId> {
        if includes
            .iter()
            .any(|e| e.host.contains('*') && e.ns == NsSel::Any)
        {
            return (0..self.services.len()).collect();
        }
        let mut c: Vec<SvcId> = Vec::new();
        for e in includes {
            match entry_namespace(e, scope_ns) {
                _ if !e.host.contains('*') => {
                    c.extend(self.services_named(&e.host).iter().copied())
                }
                Some(ns) => c.extend(self.services_in(ns).iter().copied()),
                None => unreachable!("`*/<wildcard>` scans everything"),
            }
        }
        c.sort_unstable();
        c.dedup();
        c
    }

    /// 1.31's exact-host path: per entry, the one copy istiod's index holds
    /// for that hostname and namespace.
    fn exact_candidates(&self, scope_ns: &str, includes: &[&HostEntry]) -> Vec<SvcId> {
        let mut c: Vec<SvcId> = includes
            .iter()
            .filter_map(|e| self.index_slot(&e.host, entry_namespace(e, scope_ns)?))
            .collect();
        c.sort_unstable();
        c.dedup();
        c
    }

    /// The one copy of `host` in `ns` istiod's service index holds
    /// (`HostnameAndNamespace`): a Kubernetes Service, else the oldest
    /// entry, whatever their exportTo.
    fn index_slot(&self, host: &str, ns: &str) -> Option<SvcId> {
        self.services_named(host)
            .iter()
            .copied()
            .filter(|i| self.services[*i].namespace == ns)
            .min_by_key(|i| {
                let s = &self.services[*i];
                (s.kind != SvcKind::Kube, s.created, s.order)
            })
    }

    /// Should `a` replace `b` as the copy of a hostname kept for a scope?
    pub(crate) fn prefer(&self, a: SvcId, b: SvcId, scope_ns: &str, unified: bool) -> bool {
        self.prefer_in(a, b, scope_ns, unified, false)
    }

    /// [`MeshSnapshot::prefer`]; on the exact-host path by age alone
    /// after the namespace and kind.
    fn prefer_in(&self, a: SvcId, b: SvcId, scope_ns: &str, unified: bool, by_age: bool) -> bool {
        let (sa, sb) = (&self.services[a], &self.services[b]);
        let own = |s: &ServiceInfo| s.namespace == scope_ns;
        if own(sa) != own(sb) {
            return own(sa);
        }
        if unified && sa.kind != sb.kind {
            return sa.kind == SvcKind::Kube;
        }
        if by_age {
            return (sa.created, sa.order) < (sb.created, sb.order);
        }
        sa.order < sb.order
    }

    /// Whether istiod merges entry `b` into `a` of the same hostname
    /// (`canMergeServices`).
    fn mergeable(&self, a: SvcId, b: SvcId) -> bool {
        let (sa, sb) = (&self.services[a], &self.services[b]);
        sa.kind == sb.kind
            && sa.namespace == sb.namespace
            && sa.resolution == sb.resolution
            && sa.labels == sb.labels
            && sa.workload_selector == sb.workload_selector
            && sa.export_list == sb.export_list
    }

    /// The services a gateway's scope in `ns` keeps, with their ports
    /// (`DefaultSidecarScopeForGateway`, `pilot/pkg/model/sidecar.go`,
    /// istio 1.31): every service exported to `ns`, those exported by
    /// name (or privately) before the public ones, each group by age, then
    /// name, then namespace (`servicesExportedToNamespace`,
    /// `SortServicesByCreationTime`, `push_context.go`), appended as a
    /// sidecar's are, except that the proxy's own namespace is not
    /// preferred: the first copy of a hostname stays, a Kubernetes Service
    /// replaces a ServiceEntry, and a later mergeable copy in the kept
    /// one's namespace adds its ports. Random fidelity seed 4 (7bcf1c8's
    /// generator): an entry exported to the gateway's namespace from
    /// another beat the one in it; seeds 10022 and 10039 (6f98a79): two
    /// entries of one host in one namespace both give the gateway ports.
    pub(crate) fn gateway_services(&self, ns: &str) -> BTreeMap<SvcId, PortSet> {
        let mut order: Vec<SvcId> = (0..self.services.len())
            .filter(|&i| self.services[i].export.visible_to(ns))
            .collect();
        order.sort_by_key(|&i| {
            let s = &self.services[i];
            let name = match s.kind {
                SvcKind::Kube => s.name.as_str(),
                SvcKind::Entry => s.hostname.as_str(),
            };
            (
                s.export.is_public(),
                s.created,
                name,
                s.namespace.as_str(),
                s.order,
            )
        });
        let mut out = Visible::default();
        let mut kept = HashMap::default();
        for id in order {
            let ports = self.services[id].ports.iter().map(|p| p.number);
            self.append(
                &mut out,
                &mut kept,
                id,
                PortSet::from_unsorted(ports),
                false,
            );
        }
        out.services
    }

    /// Appends `id` (with `ports`; `pulled`: as a VirtualService
    /// destination) to the scope's services, as istiod does.
    fn append<'s>(
        &'s self,
        out: &mut Visible,
        kept: &mut HashMap<&'s str, SvcId>,
        id: SvcId,
        ports: PortSet,
        pulled: bool,
    ) {
        let s = &self.services[id];
        let Some(&cur) = kept.get(s.hostname.as_str()) else {
            kept.insert(&s.hostname, id);
            return add(out, id, &ports, pulled);
        };
        if cur == id {
            return add(out, id, &ports, pulled);
        }
        match (self.services[cur].kind, s.kind) {
            // A copy the scope does not keep: listeners only (its
            // listener's [`EgressServices`]).
            (SvcKind::Kube, SvcKind::Entry) => {}
            (SvcKind::Entry, SvcKind::Kube) => {
                for &other in self.services_named(&s.hostname) {
                    unkeep(out, other);
                }
                kept.insert(&s.hostname, id);
                add(out, id, &ports, pulled);
            }
            _ if self.mergeable(cur, id) => {
                let mut have = PortSet::default();
                for o in self.services_named(&s.hostname) {
                    have.extend(
                        out.services
                            .get(o)
                            .into_iter()
                            .flat_map(|p| p.iter().copied()),
                    );
                }
                let new: Vec<u32> = ports
                    .iter()
                    .copied()
                    .filter(|p| !have.contains(p))
                    .collect();
                add(out, id, &PortSet::from_unsorted(new.into_iter()), pulled);
            }
            _ => {}
        }
    }

    /// The VirtualServices one listener imports (into `out`), and the
    /// destinations they pull in, with the ports each keeps: a
    /// port-specific listener keeps a destination only if it has the
    /// listener's port (and only that port); otherwise the ports the routes
    /// name (all of them when a route names none), and nothing when the
    /// service has none of them.
    fn import_virtual_services(
        &self,
        scope_ns: &str,
        listener_port: Option<u32>,
        includes: &[&HostEntry],
        excludes: &[&HostEntry],
        out: &mut Visible,
    ) -> Vec<(SvcId, PortSet)> {
        let mut pulled = Vec::new();
        for id in self.listener_virtual_services(scope_ns, includes, excludes) {
            out.virtual_services.insert(id);
            let mut by_host: BTreeMap<&str, (bool, BTreeSet<u32>)> = BTreeMap::new();
            for d in self.route_destinations(id) {
                if !d.source_namespaces.is_empty()
                    && !d.source_namespaces.iter().any(|n| n == scope_ns)
                {
                    continue;
                }
                let e = by_host.entry(d.host.as_str()).or_default();
                match d.port {
                    Some(p) => {
                        e.1.insert(p);
                    }
                    None => e.0 = true,
                }
            }
            for (host, (all, ports)) in by_host {
                let Some(svc) = self.destination_service(host, scope_ns) else {
                    continue;
                };
                let sp = self.services[svc].ports.iter().map(|p| p.number);
                let keep: Vec<u32> = match listener_port {
                    Some(lp) if self.services[svc].ports.iter().any(|p| p.number == lp) => {
                        vec![lp]
                    }
                    Some(_) => continue,
                    None if all || ports.is_empty() => sp.collect(),
                    None => sp.filter(|n| ports.contains(n)).collect(),
                };
                if !keep.is_empty() {
                    pulled.push((svc, PortSet::from_unsorted(keep.into_iter())));
                }
            }
        }
        pulled
    }

    /// The mesh-bound VirtualServices visible in `scope_ns` that a
    /// listener imports: one of its hosts matches an entry (both ways, as
    /// istiod's `VSMatches`; one way for a Gateway API route's) and is not itself within an exclusion
    /// (`SelectVirtualServices`: each host one way, so a wildcard host is
    /// not excluded by one of its names).
    fn listener_virtual_services(
        &self,
        scope_ns: &str,
        includes: &[&HostEntry],
        excludes: &[&HostEntry],
    ) -> Vec<usize> {
        let mut namespaces: BTreeSet<&str> = BTreeSet::new();
        for e in includes {
            match entry_namespace(e, scope_ns) {
                None => {
                    namespaces.extend(self.vss_by_ns.keys().map(String::as_str));
                    break;
                }
                Some(ns) => {
                    namespaces.insert(ns);
                }
            }
        }
        let mut matched = Vec::new();
        for ns in namespaces {
            for &id in self.vss_in(ns) {
                let vs = &self.virtual_services[id];
                if !vs.mesh_bound || !vs.export.visible_to(scope_ns) {
                    continue;
                }
                // Gateway semantics match as services do: the import must
                // cover the route's host (`VSMatches`, sidecar.go, 1.31).
                let matches = |h: &str, e: &str| match vs.gateway_semantics() {
                    true => host_subset_of(h, e),
                    false => hosts_overlap(h, e),
                };
                let imports = vs.hosts.iter().any(|h| {
                    includes
                        .iter()
                        .any(|e| e.ns.matches(scope_ns, &vs.namespace) && matches(h, &e.host))
                        && !excludes.iter().any(|e| {
                            e.ns.matches(scope_ns, &vs.namespace) && host_subset_of(h, &e.host)
                        })
                });
                if imports {
                    matched.push(id);
                }
            }
        }
        matched
    }

    /// The service a VirtualService destination host resolves to for a
    /// proxy in `scope_ns`: the copy in that namespace whatever its
    /// exportTo; else, of the copies `IsServiceVisible` shows it, a
    /// Kubernetes Service, else the oldest (from 1.30,
    /// `pickBestVisibleNamespace`); before 1.30 the alphabetically first
    /// namespace, Kubernetes or not (`pickFirstVisibleNamespace`).
    /// Each namespace offers the one copy its index slot holds
    /// ([`MeshSnapshot::index_slot`]): a newer public entry does not stand
    /// in for an older one hidden from the proxy.
    pub fn destination_service(&self, host: &str, scope_ns: &str) -> Option<SvcId> {
        if let Some(own) = self.index_slot(host, scope_ns) {
            return Some(own);
        }
        let namespaces: BTreeSet<&str> = self
            .services_named(host)
            .iter()
            .map(|i| self.services[*i].namespace.as_str())
            .collect();
        let visible = namespaces
            .into_iter()
            .filter_map(|ns| self.index_slot(host, ns))
            .filter(|i| self.services[*i].listed.visible_to(scope_ns));
        if self.options.istio.at_least(30) {
            visible.min_by_key(|i| {
                let s = &self.services[*i];
                (s.kind != SvcKind::Kube, s.created, s.namespace.as_str())
            })
        } else {
            visible.min_by_key(|i| {
                let s = &self.services[*i];
                (s.namespace.as_str(), s.created)
            })
        }
    }
}

/// `ports` of `id` as scope services (a destination's as clusters only).
fn add(out: &mut Visible, id: SvcId, ports: &PortSet, pulled: bool) {
    let have = out.services.entry(id).or_default();
    if pulled {
        let extra: Vec<u32> = ports
            .iter()
            .copied()
            .filter(|p| !have.contains(p))
            .collect();
        have.extend(extra.iter().copied());
        if !extra.is_empty() {
            out.pulled.entry(id).or_default().extend(extra);
        }
        return;
    }
    have.extend(ports.iter().copied());
    // A port a listener imports is no longer a destination's alone.
    if let Some(p) = out.pulled.get_mut(&id) {
        p.retain(|x| !ports.contains(x));
        if p.is_empty() {
            out.pulled.remove(&id);
        }
    }
}

/// A service the scope no longer keeps (a Kubernetes Service replaced
/// it): no clusters; its listener's [`EgressServices`] keep its listeners.
fn unkeep(out: &mut Visible, id: SvcId) {
    out.services.remove(&id);
    out.pulled.remove(&id);
}
