//! Which Sidecar a proxy gets, and what that scope imports (semantics doc
//! §1–§3), plus an estimate of the xDS config it produces (§5).

use std::collections::{BTreeMap, BTreeSet};

use crate::HashMap;
use std::rc::Rc;

use crate::host::{host_subset_of, hosts_overlap, HostEntry, NsSel};
use crate::snapshot::{
    selector_matches, DrId, Labels, Listener, MeshSnapshot, Protocol, Resolution, SidecarId, SvcId,
    SvcKind, VsId,
};

/// Where a proxy's scope comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScopeSource {
    /// A Sidecar with a workloadSelector that selects the proxy.
    Workload(SidecarId),
    /// The namespace's selector-less Sidecar.
    Namespace(SidecarId),
    /// The root-namespace default, evaluated in the proxy's namespace.
    Root(SidecarId),
    /// No Sidecar at all: `*/*`.
    Implicit,
}

impl ScopeSource {
    pub fn sidecar(self) -> Option<SidecarId> {
        match self {
            ScopeSource::Workload(s) | ScopeSource::Namespace(s) | ScopeSource::Root(s) => Some(s),
            ScopeSource::Implicit => None,
        }
    }

    pub fn describe(self, snap: &MeshSnapshot) -> String {
        match self {
            ScopeSource::Workload(s) => format!(
                "Sidecar {} (its workloadSelector selects the pod)",
                snap.sidecars[s].key()
            ),
            ScopeSource::Namespace(s) => format!(
                "Sidecar {} (the namespace-wide default: no selector Sidecar selects the pod)",
                snap.sidecars[s].key()
            ),
            ScopeSource::Root(s) => format!(
                "Sidecar {} (the mesh default in root namespace {}, evaluated in the pod's namespace)",
                snap.sidecars[s].key(),
                snap.mesh.root_namespace
            ),
            ScopeSource::Implicit => {
                "none: no Sidecar applies, so the proxy imports every visible service (*/*)".into()
            }
        }
    }
}

/// The outcome of Sidecar selection for one proxy, with the runners-up.
#[derive(Clone, Debug)]
pub struct Selection {
    pub source: ScopeSource,
    /// Every selector Sidecar in the namespace that selects the labels,
    /// in istiod's order (the first is the one used).
    pub matching_selectors: Vec<SidecarId>,
    /// Every selector-less Sidecar in the namespace, oldest first.
    pub namespace_defaults: Vec<SidecarId>,
}

impl MeshSnapshot {
    /// Sidecar selection exactly as istiod does it for a sidecar proxy.
    pub fn select_sidecar(&self, ns: &str, labels: &Labels) -> Selection {
        let mut matching = Vec::new();
        let mut defaults = Vec::new();
        for &id in self.sidecars_in(ns) {
            match &self.sidecars[id].selector {
                Some(sel) if selector_matches(sel, labels) => matching.push(id),
                Some(_) => {}
                None => defaults.push(id),
            }
        }
        let source = if let Some(&s) = matching.first() {
            ScopeSource::Workload(s)
        } else if let Some(&s) = defaults.first() {
            ScopeSource::Namespace(s)
        } else if let Some(s) = self.root_default() {
            ScopeSource::Root(s)
        } else {
            ScopeSource::Implicit
        };
        Selection {
            source,
            matching_selectors: matching,
            namespace_defaults: defaults,
        }
    }

    /// The egress listeners a scope source yields: `*/*` when the Sidecar
    /// has no egress (it does not inherit).
    pub fn listeners_of(&self, source: ScopeSource) -> Vec<Listener> {
        match source.sidecar() {
            Some(s) if self.sidecars[s].has_egress() => self.sidecars[s].listeners.clone(),
            _ => vec![Listener::everything()],
        }
    }
}

/// The ports of one imported service: a small sorted set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortSet(Vec<u32>);

impl PortSet {
    fn from_unsorted(ports: impl Iterator<Item = u32>) -> Self {
        let mut v: Vec<u32> = ports.collect();
        v.sort_unstable();
        v.dedup();
        PortSet(v)
    }
    pub fn insert(&mut self, p: u32) {
        if let Err(i) = self.0.binary_search(&p) {
            self.0.insert(i, p);
        }
    }
    pub fn contains(&self, p: &u32) -> bool {
        self.0.binary_search(p).is_ok()
    }
    pub fn iter(&self) -> impl Iterator<Item = &u32> {
        self.0.iter()
    }
}

impl Extend<u32> for PortSet {
    fn extend<I: IntoIterator<Item = u32>>(&mut self, iter: I) {
        for p in iter {
            self.insert(p);
        }
    }
}

/// What one scope imports, in one namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Visible {
    /// Imported services with the ports kept for each.
    pub services: BTreeMap<SvcId, PortSet>,
    pub virtual_services: BTreeSet<VsId>,
    /// The DestinationRule chosen for each imported service.
    pub destination_rules: BTreeSet<DrId>,
    pub dr_for_service: BTreeMap<SvcId, DrId>,
}

impl Visible {
    pub fn imports_service(&self, svc: SvcId) -> bool {
        self.services.contains_key(&svc)
    }
}

fn entry_matches_service(e: &HostEntry, scope_ns: &str, svc_ns: &str, hostname: &str) -> bool {
    e.ns.matches(scope_ns, svc_ns) && host_subset_of(hostname, &e.host)
}

impl MeshSnapshot {
    /// Every service, VirtualService and DestinationRule that `listeners`
    /// import for a proxy in `scope_ns`.
    pub fn visible(&self, scope_ns: &str, listeners: &[Listener]) -> Visible {
        let unified = self.options.istio.at_least(24);
        let mut out = Visible::default();
        for l in listeners {
            let (includes, excludes): (Vec<&HostEntry>, Vec<&HostEntry>) =
                l.hosts.iter().partition(|e| !e.exclude);
            // Candidate services: exact entries go through the host index;
            // wildcard entries scan.
            // Candidates from the indexes: exact hosts by name, wildcards
            // by namespace; only `*/<wildcard>` scans everything.
            let scan_all = includes
                .iter()
                .any(|e| e.host.contains('*') && e.ns == NsSel::Any);
            let candidates: Vec<SvcId> = if scan_all {
                (0..self.services.len()).collect()
            } else {
                let mut c: Vec<SvcId> = Vec::new();
                for e in &includes {
                    if !e.host.contains('*') {
                        c.extend(self.services_named(&e.host).iter().copied());
                    } else {
                        let ns = match &e.ns {
                            NsSel::Current => scope_ns,
                            NsSel::Named(n) => n.as_str(),
                            NsSel::Any => unreachable!("handled by scan_all"),
                        };
                        c.extend(self.services_in(ns).iter().copied());
                    }
                }
                c.sort_unstable();
                c.dedup();
                c
            };
            // hostname -> the one copy kept for this listener
            let mut chosen: HashMap<&str, SvcId> = HashMap::default();
            chosen.reserve(candidates.len());
            for id in candidates {
                let s = &self.services[id];
                if !s.export.visible_to(scope_ns) {
                    continue;
                }
                if !includes
                    .iter()
                    .any(|e| entry_matches_service(e, scope_ns, &s.namespace, &s.hostname))
                {
                    continue;
                }
                if excludes
                    .iter()
                    .any(|e| entry_matches_service(e, scope_ns, &s.namespace, &s.hostname))
                {
                    continue;
                }
                if let Some(p) = l.port {
                    if !s.ports.iter().any(|sp| sp.number == p) {
                        continue;
                    }
                }
                match chosen.get(s.hostname.as_str()) {
                    None => {
                        chosen.insert(&s.hostname, id);
                    }
                    Some(&cur) => {
                        if self.prefer(id, cur, scope_ns, unified) {
                            chosen.insert(&s.hostname, id);
                        }
                    }
                }
            }
            let mut ids: Vec<SvcId> = chosen.into_values().collect();
            ids.sort_unstable();
            let ports_of = |id: SvcId| match l.port {
                Some(p) => PortSet(vec![p]),
                None => PortSet::from_unsorted(self.services[id].ports.iter().map(|p| p.number)),
            };
            if out.services.is_empty() {
                // Sorted keys: the map is built in bulk.
                out.services = ids.into_iter().map(|id| (id, ports_of(id))).collect();
            } else {
                for id in ids {
                    let ports = out.services.entry(id).or_default();
                    match l.port {
                        Some(p) => ports.insert(p),
                        None => ports.extend(self.services[id].ports.iter().map(|p| p.number)),
                    }
                }
            }
            self.import_virtual_services(scope_ns, &includes, &excludes, &mut out);
        }
        self.choose_destination_rules(scope_ns, &mut out);
        out
    }

    /// Should `a` replace `b` as the copy of a hostname kept for a scope?
    fn prefer(&self, a: SvcId, b: SvcId, scope_ns: &str, unified: bool) -> bool {
        let (sa, sb) = (&self.services[a], &self.services[b]);
        let own = |s: &crate::snapshot::ServiceInfo| s.namespace == scope_ns;
        if own(sa) != own(sb) {
            return own(sa);
        }
        if unified && sa.kind != sb.kind {
            return sa.kind == SvcKind::Kube;
        }
        sa.order < sb.order
    }

    fn import_virtual_services(
        &self,
        scope_ns: &str,
        includes: &[&HostEntry],
        excludes: &[&HostEntry],
        out: &mut Visible,
    ) {
        let matches_vs = |e: &HostEntry, vs_ns: &str, hosts: &[String]| {
            e.ns.matches(scope_ns, vs_ns) && hosts.iter().any(|h| hosts_overlap(h, &e.host))
        };
        let mut namespaces: BTreeSet<&str> = BTreeSet::new();
        for e in includes {
            match &e.ns {
                NsSel::Any => {
                    namespaces.extend(self.vss_by_ns.keys().map(String::as_str));
                    break;
                }
                NsSel::Current => {
                    namespaces.insert(scope_ns);
                }
                NsSel::Named(n) => {
                    namespaces.insert(n);
                }
            }
        }
        let mut newly = Vec::new();
        for ns in namespaces {
            for &id in self.vss_in(ns) {
                let vs = &self.virtual_services[id];
                if !vs.mesh_bound || !vs.export.visible_to(scope_ns) {
                    continue;
                }
                if !includes
                    .iter()
                    .any(|e| matches_vs(e, &vs.namespace, &vs.hosts))
                {
                    continue;
                }
                if excludes
                    .iter()
                    .any(|e| matches_vs(e, &vs.namespace, &vs.hosts))
                {
                    continue;
                }
                if out.virtual_services.insert(id) {
                    newly.push(id);
                }
            }
        }
        // Destinations of imported VirtualServices are imported too.
        for id in newly {
            for d in &self.virtual_services[id].dests {
                if !d.source_namespaces.is_empty()
                    && !d.source_namespaces.iter().any(|n| n == scope_ns)
                {
                    continue;
                }
                if let Some(svc) = self.destination_service(&d.host, scope_ns) {
                    let ports = out.services.entry(svc).or_default();
                    match d.port {
                        Some(p) => {
                            ports.insert(p);
                        }
                        None => ports.extend(self.services[svc].ports.iter().map(|p| p.number)),
                    }
                }
            }
        }
    }

    /// The service a VirtualService destination host resolves to for a
    /// proxy in `scope_ns`: the copy in that namespace, else a visible
    /// Kubernetes Service, else the oldest visible one (alphabetical by
    /// namespace before 1.30).
    pub fn destination_service(&self, host: &str, scope_ns: &str) -> Option<SvcId> {
        let ids = self.services_named(host);
        let visible = ids
            .iter()
            .copied()
            .filter(|i| self.services[*i].export.visible_to(scope_ns));
        let mut best: Option<SvcId> = None;
        for id in visible {
            let s = &self.services[id];
            let better = match best {
                None => true,
                Some(b) => {
                    let t = &self.services[b];
                    if (s.namespace == scope_ns) != (t.namespace == scope_ns) {
                        s.namespace == scope_ns
                    } else if s.kind != t.kind {
                        s.kind == SvcKind::Kube
                    } else if self.options.istio.at_least(30) {
                        (s.created, &s.namespace) < (t.created, &t.namespace)
                    } else {
                        s.namespace < t.namespace
                    }
                }
            };
            if better {
                best = Some(id);
            }
        }
        best
    }

    fn choose_destination_rules(&self, scope_ns: &str, out: &mut Visible) {
        let ids: Vec<SvcId> = out.services.keys().copied().collect();
        for svc in ids {
            if let Some(dr) = self.destination_rule_for(scope_ns, svc) {
                out.destination_rules.insert(dr);
                out.dr_for_service.insert(svc, dr);
            }
        }
    }

    /// DestinationRule lookup for client namespace `client_ns` and a service:
    /// the client's namespace, then the service's namespace (exported), then
    /// the root namespace (exported). Any other namespace is never used.
    pub fn destination_rule_for(&self, client_ns: &str, svc: SvcId) -> Option<DrId> {
        let s = &self.services[svc];
        let root = self.mesh.root_namespace.as_str();
        let pick = |ns: &str, need_export: bool| -> Option<DrId> {
            let mut best: Option<(usize, DrId)> = None;
            for &id in self.drs_in(ns) {
                let d = &self.destination_rules[id];
                if d.has_selector {
                    continue;
                }
                if need_export && !d.export.visible_to(client_ns) {
                    continue;
                }
                if !host_subset_of(&s.hostname, &d.host) {
                    continue;
                }
                // Most specific: exact beats wildcard, longer beats shorter.
                let rank = if d.host == s.hostname {
                    usize::MAX
                } else {
                    d.host.len()
                };
                if best.is_none_or(|(r, _)| rank > r) {
                    best = Some((rank, id));
                }
            }
            best.map(|(_, id)| id)
        };
        pick(client_ns, false)
            .or_else(|| {
                if client_ns == root {
                    None
                } else {
                    pick(&s.namespace, true)
                }
            })
            .or_else(|| {
                if client_ns == root || s.namespace == root {
                    None
                } else {
                    pick(root, true)
                }
            })
    }
}

// === estimates ===

/// Bytes per xDS resource, kept in one place so that calibration against a
/// real istiod changes one table. The defaults reproduce the reference
/// measurement (420 pods, 220 single-port HTTP services: ~1.2 MB per proxy
/// unscoped, ~105 KB with a 10-host Sidecar).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    pub bytes_per_cluster: u64,
    pub bytes_per_endpoint: u64,
    pub bytes_per_listener: u64,
    pub bytes_per_route_config: u64,
    pub bytes_per_virtual_host: u64,
    /// Inbound listeners, static-ish clusters and everything a proxy gets
    /// whatever its scope.
    pub bytes_base: u64,
}

pub const COST_MODEL: CostModel = CostModel {
    bytes_per_cluster: 3_500,
    bytes_per_endpoint: 300,
    bytes_per_listener: 1_500,
    bytes_per_route_config: 500,
    bytes_per_virtual_host: 1_200,
    bytes_base: 50_000,
};

/// Fixed outbound clusters: BlackHoleCluster, PassthroughCluster,
/// InboundPassthroughCluster.
pub const FIXED_CLUSTERS: u64 = 3;
/// virtualOutbound and virtualInbound.
pub const FIXED_LISTENERS: u64 = 2;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConfigEstimate {
    pub services: u64,
    pub clusters: u64,
    pub endpoints: u64,
    pub listeners: u64,
    pub routes: u64,
    pub virtual_hosts: u64,
    pub bytes: u64,
}

impl MeshSnapshot {
    pub fn estimate(&self, vis: &Visible, inbound_ports: u32) -> ConfigEstimate {
        let c = COST_MODEL;
        let mut est = ConfigEstimate {
            services: vis.services.len() as u64,
            clusters: FIXED_CLUSTERS,
            listeners: FIXED_LISTENERS,
            ..Default::default()
        };
        let mut http_ports: BTreeSet<u32> = BTreeSet::new();
        for (&id, ports) in &vis.services {
            let s = &self.services[id];
            let subsets = vis
                .dr_for_service
                .get(&id)
                .map_or(0, |d| self.destination_rules[*d].subsets as u64);
            for p in &s.ports {
                if !ports.contains(&p.number) || p.protocol == Protocol::Udp {
                    continue;
                }
                est.clusters += 1 + subsets;
                if s.resolution == Resolution::Eds {
                    est.endpoints += s.endpoints as u64 * (1 + subsets);
                }
                match p.protocol {
                    Protocol::Http => {
                        http_ports.insert(p.number);
                        est.virtual_hosts += 1;
                    }
                    Protocol::Tcp
                        if s.resolution == Resolution::Passthrough && s.kind == SvcKind::Kube =>
                    {
                        // Headless TCP: one listener per pod IP.
                        est.listeners += (s.endpoints as u64).max(1);
                    }
                    _ => est.listeners += 1,
                }
            }
        }
        est.listeners += http_ports.len() as u64;
        est.routes = http_ports.len() as u64;
        est.bytes = c.bytes_base
            + est.clusters * c.bytes_per_cluster
            + est.endpoints * c.bytes_per_endpoint
            + est.listeners * c.bytes_per_listener
            + est.routes * c.bytes_per_route_config
            + est.virtual_hosts * c.bytes_per_virtual_host;
        est.plus_inbound(inbound_ports)
    }
}

impl ConfigEstimate {
    /// The same scope on a proxy that serves `ports` inbound ports: one
    /// inbound cluster each. Estimates are linear in them, so a scope's
    /// estimate is computed once and adjusted per proxy.
    pub fn plus_inbound(mut self, ports: u32) -> Self {
        self.clusters += ports as u64;
        self.bytes += ports as u64 * COST_MODEL.bytes_per_cluster;
        self
    }
}

// === a cache of scopes ===

/// Scopes depend only on (Sidecar used, proxy namespace), so a mesh of 30k
/// pods has at most (Sidecars + namespaces) distinct scopes. `Evaluator`
/// computes each once.
pub struct Evaluator<'a> {
    pub snap: &'a MeshSnapshot,
    cache: HashMap<(Option<SidecarId>, String), Rc<Visible>>,
    /// Estimates without inbound ports (see [`ConfigEstimate::plus_inbound`]).
    estimates: HashMap<(Option<SidecarId>, String), ConfigEstimate>,
}

impl<'a> Evaluator<'a> {
    pub fn new(snap: &'a MeshSnapshot) -> Self {
        Self {
            snap,
            cache: HashMap::default(),
            estimates: HashMap::default(),
        }
    }

    /// The config estimate of a scope, computed once per (scope, namespace,
    /// inbound ports) without keeping the (possibly mesh-sized) import set.
    pub fn estimate_for(
        &mut self,
        source: ScopeSource,
        proxy_ns: &str,
        inbound_ports: u32,
    ) -> ConfigEstimate {
        let key = (source.sidecar(), proxy_ns.to_string());
        if let Some(e) = self.estimates.get(&key) {
            return e.plus_inbound(inbound_ports);
        }
        let e = match self.cache.get(&key) {
            Some(v) => self.snap.estimate(v, 0),
            None => {
                let v = self.snap.visible(proxy_ns, &self.snap.listeners_of(source));
                self.snap.estimate(&v, 0)
            }
        };
        self.estimates.insert(key, e);
        e.plus_inbound(inbound_ports)
    }

    pub fn visible_for(&mut self, source: ScopeSource, proxy_ns: &str) -> Rc<Visible> {
        let key = (source.sidecar(), proxy_ns.to_string());
        if let Some(v) = self.cache.get(&key) {
            return v.clone();
        }
        let v = Rc::new(self.snap.visible(proxy_ns, &self.snap.listeners_of(source)));
        self.cache.insert(key, v.clone());
        v
    }

    /// The unscoped view of a namespace (`*/*`).
    pub fn unscoped(&mut self, proxy_ns: &str) -> Rc<Visible> {
        self.visible_for(ScopeSource::Implicit, proxy_ns)
    }
}
