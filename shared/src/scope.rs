//! Which Sidecar a proxy gets, and what that scope imports
//! (`docs/istio-semantics.md` §1–§3), plus an estimate of the xDS config it
//! produces (§5).

use std::collections::{BTreeMap, BTreeSet};

use crate::hash::HashMap;
use std::net::IpAddr;
use std::rc::Rc;

use crate::inject::Injection;
use crate::listeners::{Carries, EgressServices};
use crate::mesh::OutboundPolicy;
use crate::snapshot::{
    selector_matches, Consolidated, DrId, EntryId, Inbound, Labels, Listener, MeshSnapshot,
    Protocol, Resolution, SidecarId, SvcId, VsId,
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

    /// The scope istiod gives a proxy with this injection verdict: a
    /// sidecar's as [`Self::select_sidecar`] decides; a gateway's or a
    /// waypoint's is its namespace's default whatever Sidecar exists
    /// (`doGetSidecarScope`, `pilot/pkg/model/push_context.go`, istio
    /// 1.31: "Gateways always use default sidecar scope").
    pub fn select_for(&self, ns: &str, labels: &Labels, injection: &Injection) -> Selection {
        if injection.gateway.is_some() {
            return Selection {
                source: ScopeSource::Implicit,
                matching_selectors: Vec::new(),
                namespace_defaults: Vec::new(),
            };
        }
        self.select_sidecar(ns, labels)
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
    pub(crate) fn from_unsorted(ports: impl Iterator<Item = u32>) -> Self {
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
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub(crate) fn retain(&mut self, keep: impl FnMut(&u32) -> bool) {
        self.0.retain(keep);
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
    /// The namespace of the proxies this import set is for.
    pub namespace: String,
    /// Imported services with the ports kept for each.
    pub services: BTreeMap<SvcId, PortSet>,
    /// The (service, ports) of `services` that only VirtualService
    /// destinations pulled in: istiod builds clusters for them but no
    /// outbound listeners or routes (they are not egress-listener
    /// services).
    pub pulled: BTreeMap<SvcId, PortSet>,
    /// Each egress listener's own services, in order: what istiod builds
    /// its outbound listeners from ([`crate::listeners`]).
    pub egress: Vec<EgressServices>,
    pub virtual_services: BTreeSet<VsId>,
    /// Every DestinationRule in the entries istiod returns for the
    /// imported services (a change to any is pushed to the scope).
    pub destination_rules: BTreeSet<DrId>,
    /// The consolidated entries istiod returns for each imported service;
    /// a proxy uses one of them ([`MeshSnapshot::subsets_for`]).
    pub dr_for_service: BTreeMap<SvcId, Vec<EntryId>>,
}

impl Visible {
    pub fn imports_service(&self, svc: SvcId) -> bool {
        self.services.contains_key(&svc)
    }
}

impl MeshSnapshot {
    /// Files the DestinationRules istiod returns for each imported
    /// service (`DrIndex::lookup`, `snapshot/destination_rules.rs`); which one a proxy uses depends on
    /// its labels ([`MeshSnapshot::subsets_for`]).
    pub(crate) fn choose_destination_rules(&self, scope_ns: &str, out: &mut Visible) {
        let ids: Vec<SvcId> = out.services.keys().copied().collect();
        for svc in ids {
            let s = &self.services[svc];
            let found = self.dr_index.lookup(scope_ns, &s.hostname, &s.namespace);
            if found.is_empty() {
                continue;
            }
            for e in &found {
                out.destination_rules
                    .extend(self.dr_index.entries[*e].rules.iter().copied());
            }
            out.dr_for_service.insert(svc, found);
        }
    }

    /// The consolidated DestinationRule a proxy in `client_ns` with
    /// `labels` (`None`: no selector rule matches) uses for `svc`.
    pub fn destination_rule_for(
        &self,
        client_ns: &str,
        svc: SvcId,
        labels: Option<&Labels>,
    ) -> Option<&Consolidated> {
        let s = &self.services[svc];
        let found = self.dr_index.lookup(client_ns, &s.hostname, &s.namespace);
        let e = self.dr_index.for_proxy(&found, client_ns, labels)?;
        Some(&self.dr_index.entries[e])
    }

    /// The subsets a proxy with `labels` gets clusters for, of an
    /// imported service of `vis`: a DNS ServiceEntry's only where an
    /// endpoint has the subset's labels ([`crate::snapshot::ServiceInfo::dns_endpoint_labels`]).
    pub fn subsets_for(&self, vis: &Visible, svc: SvcId, labels: Option<&Labels>) -> Vec<&str> {
        let Some(c) = vis
            .dr_for_service
            .get(&svc)
            .and_then(|found| self.dr_index.for_proxy(found, &vis.namespace, labels))
            .map(|e| &self.dr_index.entries[e])
        else {
            return Vec::new();
        };
        let s = &self.services[svc];
        if s.dfp_ports.is_some() || s.resolution == Resolution::Alias {
            return Vec::new();
        }
        let endpoints = self.services[svc].dns_endpoint_labels.as_ref();
        c.subsets
            .iter()
            .zip(&c.subset_labels)
            .filter(|(_, sl)| {
                endpoints.is_none_or(|eps| eps.iter().any(|e| selector_matches(sl, e)))
            })
            .map(|(name, _)| name.as_str())
            .collect()
    }

    /// Whether istiod builds `svc`'s cluster on `port`: not for a DNS
    /// ServiceEntry left without endpoints, and for a dynamic DNS one only
    /// on the ports its forward proxy takes.
    pub(crate) fn has_cluster(&self, svc: SvcId, port: u32) -> bool {
        let s = &self.services[svc];
        s.resolution != Resolution::Alias
            && s.dns_endpoint_labels
                .as_ref()
                .is_none_or(|eps| !eps.is_empty())
            && s.dfp_ports.as_ref().is_none_or(|p| p.contains(&port))
    }
}

// === estimates ===

/// Protobuf bytes per xDS resource, as istiod sends them (the encoded size
/// of each resource in a DiscoveryResponse), per type. Measured on istiod
/// 1.31 with simulated sidecars (`tests/bench/run istiod`, BENCHMARKS.md
/// "Calibration"); every constant says what it was fitted on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// CDS: BlackHoleCluster + PassthroughCluster + InboundPassthroughCluster.
    pub cds_fixed: u64,
    /// CDS: one `inbound|<port>||` cluster.
    pub cds_inbound: u64,
    /// CDS: one `outbound|<port>|<subset>|<host>` cluster, its name 52
    /// characters long.
    pub cds_outbound: u64,
    /// CDS: each character of a cluster's name beyond (or short of) 52.
    pub cds_name_char: u64,
    /// CDS: what a cluster of a sniffed port adds (HTTP protocol options).
    pub cds_sniffed: u64,
    /// EDS: one ClusterLoadAssignment, without its endpoints.
    pub eds_assignment: u64,
    /// EDS: one endpoint in an assignment.
    pub eds_endpoint: u64,
    /// LDS: virtualOutbound + virtualInbound with no inbound ports.
    pub lds_fixed: u64,
    /// LDS: the filter chains an HTTP inbound port adds to virtualInbound.
    pub lds_inbound_http: u64,
    /// LDS: the filter chains a TCP inbound port adds to virtualInbound.
    pub lds_inbound_tcp: u64,
    /// LDS: the filter chains a sniffed inbound port adds to virtualInbound.
    pub lds_inbound_sniffed: u64,
    /// LDS: one `0.0.0.0_<port>` HTTP listener.
    pub lds_http: u64,
    /// LDS: one `<address>_<port>` TCP listener.
    pub lds_tcp: u64,
    /// LDS: one listener whose protocol istiod sniffs (an HTTP and a TCP
    /// filter chain, and the HTTP inspector).
    pub lds_sniffed: u64,
    /// RDS: one route configuration (named by its port), with its
    /// catch-all virtual host.
    pub rds_route: u64,
    /// RDS: one service's virtual host.
    pub rds_virtual_host: u64,
    /// RDS: one sniffed service port's own route configuration
    /// (`<host>:<port>`), with its virtual host.
    pub rds_sniffed_route: u64,
}

/// Where each constant comes from (istiod 1.31, `tests/bench/run istiod`
/// on the reference scenario unless said otherwise; BENCHMARKS.md has the
/// run):
/// - `cds_fixed`: BlackHoleCluster 44 + InboundPassthroughCluster 264 +
///   PassthroughCluster 453 B, the same on every proxy.
/// - `cds_inbound`: `inbound|80||` 214 B, `inbound|5432||` 216 B (fixed
///   fidelity scenario).
/// - `cds_outbound`: unscoped reference proxies, (CDS bytes − fixed −
///   inbound) / 201 outbound clusters = 1,085 B (names of ~50 characters;
///   1,025–1,290 B seen for others, gRPC ports and subsets the larger).
/// - `cds_name_char`, `cds_sniffed`: the `social-network` scenario's 27
///   outbound clusters (names of 50–71 characters) grow 6.4 B a character
///   (the name is repeated in the cluster), and a sniffed port's cluster is
///   1,241 B at 52 characters against 1,062–1,085 B for TCP and HTTP.
/// - `eds_assignment`, `eds_endpoint`: 1-endpoint assignments 135–142 B,
///   2-endpoint 225 B (fidelity scenario) give ~88 B an endpoint; the
///   reference's 262 B for 2 endpoints gives the rest.
/// - `lds_fixed`: virtualOutbound 423 B + virtualInbound 7,322 B without
///   inbound ports; `lds_inbound_http` and `lds_inbound_tcp`: virtualInbound
///   grows to 12,075 B with one HTTP port and 9,020 B with one TCP port;
///   `lds_inbound_sniffed`: 13,835 B with one port named by number
///   (`social-network`'s post-storage-memcached).
/// - `lds_http`: `0.0.0.0_<port>` 2,310–2,317 B; `lds_tcp`: `<vip>_<port>`
///   263 B.
/// - `lds_sniffed`: `<vip>_<port>` of a port named by number, 2,450–2,486 B;
///   `rds_sniffed_route`: its `<host>:<port>` route, 490–534 B (the
///   `social-network` scenario, its unscoped proxies).
/// - `rds_virtual_host`: the reference's route `8000` holds 200 services'
///   virtual hosts in 109,834 B, 548 B each (a service in the proxy's own
///   namespace lists its short names too; other namespaces' are smaller);
///   `rds_route`: the catch-all virtual host and the configuration itself.
pub const COST_MODEL: CostModel = CostModel {
    cds_fixed: 761,
    cds_inbound: 215,
    cds_outbound: 1_085,
    cds_name_char: 6,
    cds_sniffed: 160,
    eds_assignment: 86,
    eds_endpoint: 88,
    lds_fixed: 7_745,
    lds_inbound_http: 4_753,
    lds_inbound_tcp: 1_698,
    lds_inbound_sniffed: 6_090,
    lds_http: 2_310,
    lds_tcp: 263,
    lds_sniffed: 2_470,
    rds_route: 150,
    rds_virtual_host: 548,
    rds_sniffed_route: 512,
};

impl CostModel {
    /// The bytes of a cluster whose name is `len` characters long (the
    /// figures are for a 52-character name).
    pub fn named_cluster(&self, len: usize) -> u64 {
        (self.cds_outbound + len as u64 * self.cds_name_char)
            .saturating_sub(52 * self.cds_name_char)
    }

    /// The bytes of the outbound cluster `outbound|<port>|<subset>|<host>`
    /// of a `protocol` port.
    pub fn outbound_cluster(&self, host: &str, port: u32, subset: &str, protocol: Protocol) -> u64 {
        let len = "outbound|||".len() + port.to_string().len() + subset.len() + host.len();
        self.named_cluster(len)
            + if protocol == Protocol::Auto {
                self.cds_sniffed
            } else {
                0
            }
    }
}

/// Fixed clusters: BlackHoleCluster, PassthroughCluster,
/// InboundPassthroughCluster.
pub const FIXED_CLUSTERS: u64 = 3;
/// virtualOutbound and virtualInbound.
pub const FIXED_LISTENERS: u64 = 2;

/// What istiod sends one proxy, predicted: resource counts by kind, and
/// protobuf bytes by xDS type.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ConfigEstimate {
    pub services: u64,
    /// CDS resources (outbound, inbound and the fixed three).
    pub clusters: u64,
    /// EDS resources (one per EDS cluster).
    pub assignments: u64,
    pub endpoints: u64,
    /// LDS resources.
    pub listeners: u64,
    /// RDS resources (route configurations).
    pub routes: u64,
    pub virtual_hosts: u64,
    /// Inbound ports (one inbound cluster and filter chains each).
    pub inbound_ports: u64,
    pub bytes_cds: u64,
    pub bytes_eds: u64,
    pub bytes_lds: u64,
    pub bytes_rds: u64,
    /// The sum of the four.
    pub bytes: u64,
}

impl MeshSnapshot {
    /// The config istiod sends a proxy with import set `vis` and inbound
    /// ports `inbound`, with the DestinationRules of a proxy that no
    /// selector rule selects.
    pub fn estimate(&self, vis: &Visible, inbound: Inbound) -> ConfigEstimate {
        self.estimate_labelled(vis, inbound, None, None)
    }

    /// [`estimate`](Self::estimate) for a proxy with `labels`, which pick
    /// among DestinationRules with a `workloadSelector`.
    fn estimate_labelled(
        &self,
        vis: &Visible,
        inbound: Inbound,
        labels: Option<&Labels>,
        own_ip: Option<IpAddr>,
    ) -> ConfigEstimate {
        let c = COST_MODEL;
        let mut est = ConfigEstimate {
            services: vis.services.len() as u64,
            clusters: FIXED_CLUSTERS,
            listeners: FIXED_LISTENERS,
            bytes_cds: c.cds_fixed,
            bytes_lds: c.lds_fixed,
            ..Default::default()
        };
        if self.ambient {
            // With ambient on, istiod gives every sidecar and gateway a
            // `connect_originate` cluster and listener to send HBONE
            // (`PILOT_ENABLE_SENDING_HBONE`, on with ambient:
            // `pilot/pkg/networking/core/cluster.go` and `listener.go`,
            // 1.31); their bytes are taken as a TCP cluster's and
            // listener's (not calibrated).
            est.clusters += 1;
            est.listeners += 1;
            est.bytes_cds += c.cds_outbound;
            est.bytes_lds += c.lds_tcp;
        }
        for (&id, ports) in &vis.services {
            let s = &self.services[id];
            let subset_names = self.subsets_for(vis, id, labels);
            let subsets = subset_names.len() as u64;
            for p in &s.ports {
                if !ports.contains(&p.number) || p.protocol == Protocol::Udp {
                    continue;
                }
                let own = self.has_cluster(id, p.number);
                est.clusters += u64::from(own) + subsets;
                let bytes =
                    |subset: &str| c.outbound_cluster(&s.hostname, p.number, subset, p.protocol);
                est.bytes_cds += if own { bytes("") } else { 0 };
                est.bytes_cds += subset_names.iter().map(|n| bytes(n)).sum::<u64>();
                if s.resolution == Resolution::Eds {
                    let cl = 1 + subsets;
                    est.assignments += cl;
                    est.endpoints += s.endpoints as u64 * cl;
                    est.bytes_eds +=
                        cl * c.eds_assignment + s.endpoints as u64 * cl * c.eds_endpoint;
                }
            }
        }
        let l = self.outbound_listeners(&vis.egress, own_ip);
        let (http, tcp, sniffed) = (
            l.count(Carries::Http),
            l.count(Carries::Tcp),
            l.count(Carries::Sniffed),
        );
        est.virtual_hosts = l.virtual_hosts();
        est.listeners += http + tcp + sniffed;
        est.bytes_lds += http * c.lds_http + tcp * c.lds_tcp + sniffed * c.lds_sniffed;
        let (port_routes, sniffed_routes) = (l.port_routes(), l.sniffed_routes());
        est.routes = port_routes + sniffed_routes;
        est.bytes_rds = port_routes * c.rds_route
            + est.virtual_hosts * c.rds_virtual_host
            + sniffed_routes * c.rds_sniffed_route;
        est.plus_inbound(inbound)
    }
}

impl MeshSnapshot {
    /// The outbound clusters istiod builds for an imported set, by name
    /// (`outbound|<port>|<subset>|<host>`): one per kept port of each
    /// service (UDP ports get none), and one more per subset of the
    /// DestinationRule a proxy with `labels` uses for it. Sorted.
    pub fn outbound_clusters(&self, vis: &Visible, labels: Option<&Labels>) -> Vec<String> {
        let mut out = Vec::new();
        for (&id, ports) in &vis.services {
            let s = &self.services[id];
            let subsets = self.subsets_for(vis, id, labels);
            for p in &s.ports {
                if !ports.contains(&p.number) || p.protocol == Protocol::Udp {
                    continue;
                }
                if self.has_cluster(id, p.number) {
                    out.push(format!("outbound|{}||{}", p.number, s.hostname));
                }
                for sub in &subsets {
                    out.push(format!("outbound|{}|{sub}|{}", p.number, s.hostname));
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

impl MeshSnapshot {
    /// [`estimate`](Self::estimate) for one proxy with `labels` whose pod
    /// has the first IP `own_ip`: istiod builds it no outbound listener
    /// for its own IP on a headless Service that selects it.
    pub fn estimate_for_proxy(
        &self,
        vis: &Visible,
        labels: &Labels,
        own_ip: Option<IpAddr>,
        inbound: Inbound,
    ) -> ConfigEstimate {
        self.estimate_labelled(vis, inbound, Some(labels), own_ip)
    }
}

impl ConfigEstimate {
    /// The same scope under outbound policy `mode`: ALLOW_ANY_DYNAMIC_DNS
    /// (Istio 1.31+) adds the dynamic forward proxy's cluster
    /// (`AllowAnyDynamicDNSCluster`), counted at an outbound cluster's size.
    pub fn under_policy(mut self, mode: OutboundPolicy) -> Self {
        if mode == OutboundPolicy::AllowAnyDynamicDns {
            self.clusters += 1;
            self.bytes_cds += COST_MODEL.cds_outbound;
            self.bytes = self.bytes_cds + self.bytes_eds + self.bytes_lds + self.bytes_rds;
        }
        self
    }

    /// The same scope on a proxy with `inbound` ports: an inbound cluster
    /// and filter chains on virtualInbound each. Estimates are linear in
    /// them, so a scope's estimate is computed once and adjusted per proxy.
    pub fn plus_inbound(mut self, inbound: Inbound) -> Self {
        let c = COST_MODEL;
        self.inbound_ports += inbound.ports() as u64;
        self.clusters += inbound.ports() as u64;
        self.bytes_cds += inbound.ports() as u64 * c.cds_inbound;
        self.bytes_lds += inbound.http as u64 * c.lds_inbound_http
            + inbound.tcp as u64 * c.lds_inbound_tcp
            + inbound.sniffed as u64 * c.lds_inbound_sniffed;
        self.bytes = self.bytes_cds + self.bytes_eds + self.bytes_lds + self.bytes_rds;
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
        inbound: Inbound,
    ) -> ConfigEstimate {
        let key = (source.sidecar(), proxy_ns.to_string());
        if let Some(e) = self.estimates.get(&key) {
            return e.plus_inbound(inbound);
        }
        let e = match self.cache.get(&key) {
            Some(v) => self.snap.estimate(v, Inbound::default()),
            None => {
                let v = self.snap.visible(proxy_ns, &self.snap.listeners_of(source));
                self.snap.estimate(&v, Inbound::default())
            }
        };
        self.estimates.insert(key, e);
        e.plus_inbound(inbound)
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

    /// The outbound clusters a gateway's or waypoint's pod in `ns` gets when
    /// istiod gives it the sidecar default scope of its namespace, or `None`
    /// when it cannot or they equal the gateway scope's. istiod 1.31's
    /// `doGetSidecarScope` (`pilot/pkg/model/push_context.go`) hands a router
    /// or waypoint the namespace's cached sidecar default
    /// (`defaultSidecarsByNamespace`, which pulls in VirtualService and route
    /// destinations) when a sidecar of that namespace without a Sidecar, and
    /// with no root default, had its scope computed first in the push, and
    /// `DefaultSidecarScopeForGateway` otherwise: which one a gateway gets
    /// depends on the order proxies are pushed in (found by random fidelity
    /// seeds 10005 and 10028 at 4b13cd9, one each way).
    pub fn gateway_alternative(&mut self, ns: &str, labels: &Labels) -> Option<Vec<String>> {
        let snap = self.snap;
        if snap.root_default().is_some() {
            return None;
        }
        let implicit = snap.sidecar_workloads().any(|w| {
            let wl = &snap.workloads[w];
            wl.namespace == ns
                && snap.select_sidecar(ns, snap.workload_labels(w)).source == ScopeSource::Implicit
        });
        if !implicit {
            return None;
        }
        let own = snap.outbound_clusters(&self.gateway_visible(ns), Some(labels));
        let shared =
            snap.outbound_clusters(&self.visible_for(ScopeSource::Implicit, ns), Some(labels));
        (shared != own).then_some(shared)
    }

    /// The view istiod gives a gateway's or waypoint's proxy in
    /// `proxy_ns`: the services exported to its namespace, and none that
    /// only VirtualService (or mesh route) destinations pull in
    /// (`DefaultSidecarScopeForGateway`, `pilot/pkg/model/sidecar.go`,
    /// istio 1.31, adds `servicesExportedToNamespace` alone), unlike a
    /// sidecar's default scope. Found by random fidelity seed 10005 at
    /// 3eddb53: a route's backend exported `~,NS` (hidden from the
    /// index, visible as a destination) is no cluster of NS's gateway.
    pub fn gateway_visible(&mut self, proxy_ns: &str) -> Rc<Visible> {
        let mut v = (*self.unscoped(proxy_ns)).clone();
        v.pulled.clear();
        v.services = self.snap.gateway_services(proxy_ns);
        v.dr_for_service.clear();
        v.destination_rules.clear();
        self.snap.choose_destination_rules(proxy_ns, &mut v);
        Rc::new(v)
    }
}
