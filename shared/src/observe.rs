//! Observed traffic: access-log lines (or metric rows) folded into edges per
//! source workload. Memory grows with distinct (workload, destination) pairs,
//! never with the number of lines.

use std::collections::{BTreeMap, BTreeSet};

use crate::hash::HashMap;
use std::net::IpAddr;

use crate::accesslog::{
    classify_cluster, parse_line, split_host_port, AccessRecord, Cluster, Line,
};
use crate::snapshot::{MeshSnapshot, SvcId, WorkloadId};

/// A dependency of one workload on `hostname:port`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Edge {
    pub requests: u64,
    /// The request left the proxy through PassthroughCluster/BlackHoleCluster:
    /// the destination is outside the current scope.
    pub outside_scope: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkloadTraffic {
    /// (service hostname, port) -> edge. Port 0 means "any port" (metrics
    /// without a port label).
    pub outbound: BTreeMap<(String, u32), Edge>,
    /// Names the workload dialled (authority hosts) that differ from the
    /// cluster host: VirtualService hosts.
    pub dialled: BTreeSet<String>,
    pub inbound: u64,
    pub sources: BTreeSet<String>,
}

impl WorkloadTraffic {
    pub fn requests(&self) -> u64 {
        self.inbound + self.outbound.values().map(|e| e.requests).sum::<u64>()
    }
}

/// Traffic to an address no Service or ServiceEntry claims.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Unregistered {
    pub workload: WorkloadId,
    pub address: String,
    pub authority: Option<String>,
    pub requests: u64,
    pub blocked: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IngestStats {
    pub lines: u64,
    pub access_lines: u64,
    pub not_access_log: u64,
    pub malformed: u64,
    pub unattributed: u64,
    /// Access lines a workload's managed Sidecar already accounts for
    /// (at or before the end of its evidence window: [`Applied`]).
    pub already_applied: u64,
}

impl IngestStats {
    /// The likely cause of a traffic source without a single access-log
    /// line (`binary`: its malformed lines held control characters).
    pub fn no_access_lines_cause(&self, binary: bool) -> &'static str {
        if self.lines == 0 {
            "the file is empty"
        } else if binary {
            "binary data, not a text log"
        } else if self.malformed == 0 {
            "only istio-proxy's own output: access logging may be off (meshConfig.accessLogFile: /dev/stdout), or the proxy served nothing"
        } else {
            "not istio-proxy's log: an application's own log? With kubectl logs, name the container: -c istio-proxy"
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Observations {
    pub traffic: BTreeMap<WorkloadId, WorkloadTraffic>,
    pub unregistered: Vec<Unregistered>,
    pub stats: IngestStats,
    /// Addresses that matched no pod, with counts (first few only).
    pub unattributed_samples: BTreeMap<String, u64>,
    pub window: Option<(String, String)>,
    pub sources: BTreeSet<String>,
}

impl Observations {
    /// Requests to service FQDNs (`<name>.<ns>.svc.<domain>`), per
    /// cluster domain: what the traffic says the cluster domain is.
    pub fn cluster_domains(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for t in self.traffic.values() {
            for ((host, _), e) in &t.outbound {
                if let Some(d) = crate::detect::domain_of(host) {
                    *out.entry(d.to_string()).or_default() += e.requests;
                }
            }
        }
        out
    }

    pub fn of(&self, w: WorkloadId) -> Option<&WorkloadTraffic> {
        self.traffic.get(&w)
    }

    /// Adds one edge from another source (Prometheus, say), and returns
    /// it.
    pub fn add_edge(
        &mut self,
        w: WorkloadId,
        hostname: &str,
        port: u32,
        requests: u64,
        source: &str,
    ) -> &mut Edge {
        self.sources.insert(source.to_string());
        let t = self.traffic.entry(w).or_default();
        t.sources.insert(source.to_string());
        let e = t.outbound.entry((hostname.to_string(), port)).or_default();
        e.requests += requests;
        e
    }

    /// Records that a workload served traffic (it is alive).
    pub fn add_inbound(&mut self, w: WorkloadId, requests: u64, source: &str) {
        let t = self.traffic.entry(w).or_default();
        t.inbound += requests;
        t.sources.insert(source.to_string());
        self.sources.insert(source.to_string());
    }

    /// Records traffic that left through PassthroughCluster or
    /// BlackHoleCluster (`u`), mapped back to a registered service where
    /// the access-log path maps it: a ClusterIP or ServiceEntry address, a
    /// headless Service's pod IP, or a name (`u.address` may be a host, as
    /// Istio's metrics give it for HTTP). What maps nowhere stays
    /// unregistered.
    ///
    /// `to`: the workload that answered, when the metrics name it (Istio
    /// reports `destination_workload` for a call to a pod with a sidecar,
    /// even through PassthroughCluster, where a TCP call's
    /// `destination_service` is `unknown`): a headless Service selecting
    /// its pods is what the call went to.
    pub fn add_passthrough(
        &mut self,
        snap: &MeshSnapshot,
        u: Unregistered,
        to: Option<WorkloadId>,
        source: &str,
    ) {
        let name = split_host_port(&u.address)
            .filter(|(h, _)| h.parse::<IpAddr>().is_err() && *h != "unknown")
            .map(|_| u.address.clone());
        let authority = u.authority.clone().or(name);
        let found = resolve_passthrough(snap, u.workload, &u.address, authority.as_deref())
            .or_else(|| to.and_then(|t| headless_of_workload(snap, t)));
        match found {
            Some((svc, port)) => {
                let host = &snap.services[svc].hostname;
                self.add_edge(u.workload, host, port, u.requests, source)
                    .outside_scope += u.requests;
            }
            None => self.add_unregistered(u),
        }
    }

    /// Orders unregistered destinations as they are shown: most requests
    /// first, then by address and workload (the same for any split of the
    /// input).
    pub fn sort_unregistered(&mut self) {
        self.unregistered.sort_by(|a, b| {
            b.requests
                .cmp(&a.requests)
                .then(a.address.cmp(&b.address))
                .then(a.workload.cmp(&b.workload))
        });
    }

    /// The unregistered destinations called by one of `workloads`, in the
    /// order they are shown: a command that looks at some workloads (`-n`,
    /// `-l`, `--workload`) warns only about theirs.
    pub fn unregistered_from<'a>(
        &'a self,
        workloads: &'a BTreeSet<WorkloadId>,
    ) -> impl Iterator<Item = &'a Unregistered> + 'a {
        self.unregistered
            .iter()
            .filter(|u| workloads.contains(&u.workload))
    }

    pub fn add_unregistered(&mut self, u: Unregistered) {
        if let Some(cur) = self
            .unregistered
            .iter_mut()
            .find(|c| c.workload == u.workload && c.address == u.address)
        {
            cur.absorb(u);
        } else {
            self.unregistered.push(u);
        }
    }

    pub fn merge(&mut self, other: Observations) {
        for (w, t) in other.traffic {
            let mine = self.traffic.entry(w).or_default();
            for (k, e) in t.outbound {
                let m = mine.outbound.entry(k).or_default();
                m.requests += e.requests;
                m.outside_scope += e.outside_scope;
            }
            mine.dialled.extend(t.dialled);
            mine.inbound += t.inbound;
            mine.sources.extend(t.sources);
        }
        if self.unregistered.is_empty() {
            self.unregistered = other.unregistered;
        } else if !other.unregistered.is_empty() {
            // Index once: merging is linear, not quadratic.
            let mut at: HashMap<(WorkloadId, String), usize> = self
                .unregistered
                .iter()
                .enumerate()
                .map(|(i, u)| ((u.workload, u.address.clone()), i))
                .collect();
            for u in other.unregistered {
                match at.get(&(u.workload, u.address.clone())) {
                    Some(&i) => self.unregistered[i].absorb(u),
                    None => {
                        at.insert((u.workload, u.address.clone()), self.unregistered.len());
                        self.unregistered.push(u);
                    }
                }
            }
        }
        let s = &mut self.stats;
        s.lines += other.stats.lines;
        s.access_lines += other.stats.access_lines;
        s.not_access_log += other.stats.not_access_log;
        s.malformed += other.stats.malformed;
        s.unattributed += other.stats.unattributed;
        s.already_applied += other.stats.already_applied;
        for (k, v) in other.unattributed_samples {
            if self.unattributed_samples.len() < 20 || self.unattributed_samples.contains_key(&k) {
                *self.unattributed_samples.entry(k).or_default() += v;
            }
        }
        self.window = match (self.window.take(), other.window) {
            (Some((a, b)), Some((c, d))) => Some((a.min(c), b.max(d))),
            (x, y) => x.or(y),
        };
        self.sources.extend(other.sources);
    }
}

impl Unregistered {
    /// Adds the requests of `other`, to the same address from the same
    /// workload. The result does not depend on the order: the authority
    /// kept is the least one seen, and any blocked request makes it blocked,
    /// so however a log is cut between workers the merge comes out the same.
    fn absorb(&mut self, other: Unregistered) {
        self.requests += other.requests;
        self.blocked |= other.blocked;
        self.authority = least_authority(self.authority.take(), other.authority);
    }
}

fn least_authority<S: Ord>(a: Option<S>, b: Option<S>) -> Option<S> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What one workload sent to one passthrough destination: requests per
/// authority (`""` when the line had none), each resolved on its own in
/// [`LogIngest::finish`], so that a line's resolution never depends on
/// which other lines the same worker happened to read first.
#[derive(Default)]
struct Passthrough {
    by_authority: HashMap<Box<str>, u64>,
    blocked: bool,
}

/// Per-workload state that is not a plain counter.
#[derive(Default)]
struct Raw {
    dialled: HashMap<Box<str>, ()>,
    /// original destination -> what was seen going there
    passthrough: HashMap<Box<str>, Passthrough>,
    inbound: u64,
}

/// An upstream cluster name, classified once and kept with its host
/// interned: most lines name one of a few thousand clusters, so the hot path
/// is one hash lookup on the name instead of splitting it every time.
#[derive(Clone, Copy)]
enum Dest {
    Outbound { host: u32, port: u32 },
    Inbound,
    Passthrough,
    BlackHole,
    Other,
}

/// Per workload, the time up to which its traffic is already applied: the
/// end of the evidence window of the managed Sidecar that selects it
/// (`crate::watch::applied`). A watcher that starts, or leads after
/// another, reads its logs from their beginning; the lines its
/// predecessor already turned into Sidecars are skipped, so that a host
/// narrowed away on a `--prune-after` is not brought back by the calls
/// that were made before it was narrowed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied(pub BTreeMap<WorkloadId, k8s_openapi::jiff::Timestamp>);

impl Applied {
    /// Whether a line of `w` that started at `start` is already applied.
    fn covers(&self, w: WorkloadId, start: &str) -> bool {
        let Some(end) = self.0.get(&w) else {
            return false;
        };
        start
            .parse::<k8s_openapi::jiff::Timestamp>()
            .is_ok_and(|t| t <= *end)
    }
}

/// At most this many distinct cluster names and source addresses are
/// remembered per ingest; past that, lines take the uncached path, so a
/// hostile log cannot grow memory without bound.
const CACHE_LIMIT: usize = 1 << 16;

/// Streaming access-log ingestion against a snapshot.
pub struct LogIngest<'s> {
    snap: &'s MeshSnapshot,
    source: String,
    raw: HashMap<WorkloadId, Raw>,
    /// (workload, interned host, port) -> requests
    edges: HashMap<(WorkloadId, u32, u32), u64>,
    hosts: Vec<Box<str>>,
    host_ids: HashMap<Box<str>, u32>,
    clusters: HashMap<Box<str>, Dest>,
    /// Address text (no port) -> the one workload there, if any.
    addresses: HashMap<Box<str>, Option<WorkloadId>>,
    stats: IngestStats,
    unattributed: BTreeMap<String, u64>,
    window: Option<(String, String)>,
    /// Lines read from one pod's own proxy log belong to that pod.
    default_pod: Option<crate::snapshot::PodId>,
    applied: Option<&'s Applied>,
}

/// What happened to one line, for callers that report malformed lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineOutcome {
    Counted,
    NotAccessLog,
    Malformed(&'static str),
    Unattributed,
}

impl<'s> LogIngest<'s> {
    pub fn new(snap: &'s MeshSnapshot, source: impl Into<String>) -> Self {
        Self {
            snap,
            source: source.into(),
            raw: HashMap::default(),
            edges: HashMap::default(),
            hosts: Vec::new(),
            host_ids: HashMap::default(),
            clusters: HashMap::default(),
            addresses: HashMap::default(),
            stats: IngestStats::default(),
            unattributed: BTreeMap::new(),
            window: None,
            default_pod: None,
            applied: None,
        }
    }

    /// Skips the lines `applied` says are already applied (counted in
    /// [`IngestStats::already_applied`]).
    pub fn applied(mut self, applied: Option<&'s Applied>) -> Self {
        self.applied = applied.filter(|a| !a.0.is_empty());
        self
    }

    /// Attributes every line without its own origin to `pod` (for logs read
    /// from that pod's istio-proxy container).
    pub fn for_pod(mut self, pod: crate::snapshot::PodId) -> Self {
        self.default_pod = Some(pod);
        self
    }

    pub fn line(&mut self, line: &str) -> LineOutcome {
        self.stats.lines += 1;
        match parse_line(line) {
            Line::NotAccessLog => {
                self.stats.not_access_log += 1;
                LineOutcome::NotAccessLog
            }
            Line::Malformed(why) => {
                self.stats.malformed += 1;
                LineOutcome::Malformed(why)
            }
            Line::Access(rec) => {
                self.stats.access_lines += 1;
                self.record(&rec)
            }
        }
    }

    fn attribute(&mut self, rec: &AccessRecord<'_>, inbound: bool) -> Option<WorkloadId> {
        let snap = self.snap;
        if let (None, Some(p)) = (&rec.origin.pod, self.default_pod) {
            return Some(snap.pods[p].workload);
        }
        if let Some(pod) = rec.origin.pod.as_deref() {
            let ids = snap.pods_named(pod);
            let ns = rec.origin.namespace.as_deref();
            let mut hits = ids
                .iter()
                .filter(|p| ns.is_none_or(|n| snap.pods[**p].namespace == n));
            let first = hits.next();
            return match (first, hits.next()) {
                (Some(p), None) => Some(snap.pods[*p].workload),
                _ => {
                    self.note_unattributed(&format!("pod/{pod}"));
                    None
                }
            };
        }
        let addr = if inbound {
            rec.downstream_local.as_deref()
        } else {
            rec.downstream_remote.as_deref()
        };
        let host = addr.and_then(split_host_port).map(|(h, _)| h);
        let Some(host) = host else {
            self.note_unattributed(addr.unwrap_or("-"));
            return None;
        };
        let found = match self.addresses.get(host) {
            Some(found) => *found,
            None => {
                let found = self.workload_at(host);
                if self.addresses.len() < CACHE_LIMIT {
                    self.addresses.insert(host.into(), found);
                }
                found
            }
        };
        if found.is_none() {
            match host.parse::<IpAddr>() {
                Ok(ip) => self.note_unattributed(&ip.to_string()),
                Err(_) => self.note_unattributed(addr.unwrap_or("-")),
            }
        }
        found
    }

    /// The one workload whose pods have this address.
    /// A line without an authority (TCP) dialled the Service whose
    /// address it went to (`downstream_local`, the original destination).
    /// When a route sent it to another Service's cluster (a TCPRoute
    /// splitting `a` to `b`), the dialled one is kept: its listener, where
    /// the route lives, must stay in scope.
    fn dialled_address(&mut self, w: WorkloadId, host: u32, local: Option<&str>) {
        let Some(ip) = local
            .and_then(split_host_port)
            .and_then(|(h, _)| h.parse::<IpAddr>().ok())
        else {
            return;
        };
        let snap = self.snap;
        let cluster_host: &str = &self.hosts[host as usize];
        for &s in snap.services_at(&ip) {
            let name = snap.services[s].hostname.as_str();
            if name == cluster_host {
                continue;
            }
            let raw = self.raw.entry(w).or_default();
            if !raw.dialled.contains_key(name) {
                raw.dialled.insert(name.into(), ());
            }
        }
    }

    fn workload_at(&self, host: &str) -> Option<WorkloadId> {
        let snap = self.snap;
        let ip: IpAddr = host.parse().ok()?;
        let pods = snap.pods_at(&ip);
        let w = snap.pods[*pods.first()?].workload;
        pods.iter()
            .all(|p| snap.pods[*p].workload == w)
            .then_some(w)
    }

    fn note_unattributed(&mut self, key: &str) {
        self.stats.unattributed += 1;
        if let Some(n) = self.unattributed.get_mut(key) {
            *n += 1;
        } else if self.unattributed.len() < 20 {
            self.unattributed.insert(key.to_string(), 1);
        }
    }

    fn dest(&mut self, cluster: &str) -> Dest {
        if let Some(d) = self.clusters.get(cluster) {
            return *d;
        }
        let d = match classify_cluster(cluster) {
            Cluster::Outbound { port, host } => {
                let id = match self.host_ids.get(host) {
                    Some(id) => *id,
                    None => {
                        let id = self.hosts.len() as u32;
                        self.hosts.push(host.into());
                        self.host_ids.insert(host.into(), id);
                        id
                    }
                };
                Dest::Outbound { host: id, port }
            }
            Cluster::Inbound | Cluster::InboundPassthrough => Dest::Inbound,
            Cluster::Passthrough => Dest::Passthrough,
            Cluster::BlackHole => Dest::BlackHole,
            Cluster::Other => Dest::Other,
        };
        if self.clusters.len() < CACHE_LIMIT {
            self.clusters.insert(cluster.into(), d);
        }
        d
    }

    fn record(&mut self, rec: &AccessRecord<'_>) -> LineOutcome {
        let dest = self.dest(&rec.upstream_cluster);
        let Some(w) = self.attribute(rec, matches!(dest, Dest::Inbound)) else {
            return LineOutcome::Unattributed;
        };
        if let (Some(a), Some(t)) = (self.applied, rec.start_time.as_deref()) {
            if a.covers(w, t) {
                self.stats.already_applied += 1;
                return LineOutcome::Counted;
            }
        }
        if let Some(t) = rec.start_time.as_deref() {
            match &mut self.window {
                None => self.window = Some((t.to_string(), t.to_string())),
                Some((lo, hi)) => {
                    // Reuse the buffers: timestamps usually only grow.
                    if t < lo.as_str() {
                        lo.clear();
                        lo.push_str(t);
                    }
                    if t > hi.as_str() {
                        hi.clear();
                        hi.push_str(t);
                    }
                }
            }
        }
        match dest {
            Dest::Outbound { host, port } => {
                *self.edges.entry((w, host, port)).or_default() += 1;
                if let Some(auth) = rec.authority.as_deref() {
                    let name = split_host_port(auth).map_or(auth, |(h, _)| h);
                    let host = &self.hosts[host as usize];
                    // `svc`, `svc.ns` and the FQDN all name the cluster host;
                    // only other names (VirtualService hosts) are kept.
                    let same = host
                        .strip_prefix(name)
                        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'));
                    if !same {
                        let raw = self.raw.entry(w).or_default();
                        if !raw.dialled.contains_key(name) && name.parse::<IpAddr>().is_err() {
                            raw.dialled.insert(name.into(), ());
                        }
                    }
                } else {
                    self.dialled_address(w, host, rec.downstream_local.as_deref());
                }
            }
            Dest::Passthrough | Dest::BlackHole => {
                let blocked = matches!(dest, Dest::BlackHole);
                let dst = rec
                    .upstream_host
                    .as_deref()
                    .or(rec.downstream_local.as_deref())
                    .unwrap_or("-");
                let raw = self.raw.entry(w).or_default();
                if !raw.passthrough.contains_key(dst) {
                    raw.passthrough.insert(dst.into(), Passthrough::default());
                }
                let p = raw
                    .passthrough
                    .get_mut(dst)
                    .expect("inserted above when missing");
                p.blocked |= blocked;
                let auth = rec.authority.as_deref().unwrap_or("");
                match p.by_authority.get_mut(auth) {
                    Some(n) => *n += 1,
                    None => {
                        p.by_authority.insert(auth.into(), 1);
                    }
                }
            }
            Dest::Inbound | Dest::Other => self.raw.entry(w).or_default().inbound += 1,
        }
        LineOutcome::Counted
    }

    /// Resolves passthrough destinations to services and returns the edges.
    pub fn finish(self) -> Observations {
        let snap = self.snap;
        let mut obs = Observations {
            stats: self.stats,
            unattributed_samples: self.unattributed,
            window: self.window,
            ..Default::default()
        };
        obs.sources.insert(self.source.clone());
        for ((w, host, port), requests) in self.edges {
            let t = obs.traffic.entry(w).or_default();
            let e = t
                .outbound
                .entry((self.hosts[host as usize].to_string(), port))
                .or_default();
            e.requests += requests;
        }
        for (w, raw) in self.raw {
            let t = obs.traffic.entry(w).or_default();
            t.inbound += raw.inbound;
            t.dialled.extend(raw.dialled.into_keys().map(String::from));
            for (dst, p) in raw.passthrough {
                // Requests no authority resolves stay one unregistered
                // address, with the least authority among them.
                let mut unresolved: Option<Unregistered> = None;
                for (auth, count) in p.by_authority {
                    let auth = (!auth.is_empty()).then_some(auth);
                    match resolve_passthrough(snap, w, &dst, auth.as_deref()) {
                        Some((svc, port)) => {
                            let s = &snap.services[svc];
                            let e = t.outbound.entry((s.hostname.clone(), port)).or_default();
                            e.requests += count;
                            e.outside_scope += count;
                        }
                        None => {
                            let u = Unregistered {
                                workload: w,
                                address: dst.to_string(),
                                authority: auth.map(String::from),
                                requests: count,
                                blocked: p.blocked,
                            };
                            match &mut unresolved {
                                Some(cur) => cur.absorb(u),
                                None => unresolved = Some(u),
                            }
                        }
                    }
                }
                obs.unregistered.extend(unresolved);
            }
        }
        for t in obs.traffic.values_mut() {
            t.sources.insert(self.source.clone());
        }
        obs.sort_unregistered();
        obs
    }
}

/// Maps a passthrough destination to a registered service: by ClusterIP or
/// ServiceEntry address (and port), then by a pod IP of a headless Service
/// (a StatefulSet's pods, called one by one), then by the HTTP authority
/// (`<pod>.<service>.<ns>.svc.<domain>` names the headless Service).
fn resolve_passthrough(
    snap: &MeshSnapshot,
    w: WorkloadId,
    dst: &str,
    authority: Option<&str>,
) -> Option<(SvcId, u32)> {
    let ns = &snap.workloads[w].namespace;
    if let Some((ip, port)) = split_host_port(dst) {
        if let Ok(ip) = ip.parse::<IpAddr>() {
            for &svc in snap.services_at(&ip) {
                let s = &snap.services[svc];
                match port {
                    Some(p) if s.ports.iter().any(|sp| sp.number == p) => return Some((svc, p)),
                    None => return Some((svc, s.ports.first().map_or(0, |p| p.number))),
                    _ => {}
                }
            }
            if let Some(found) = headless_at(snap, &ip, port) {
                return Some(found);
            }
        }
    }
    let auth = authority?;
    let (host, port) = split_host_port(auth)?;
    let candidates = [
        host.to_string(),
        format!("{host}.{ns}.svc.{}", snap.options.cluster_domain),
        format!("{host}.svc.{}", snap.options.cluster_domain),
    ];
    for c in &candidates {
        if let Some(svc) = snap.destination_service(c, ns) {
            let s = &snap.services[svc];
            let port = port
                .filter(|p| s.ports.iter().any(|sp| sp.number == *p))
                .or_else(|| s.ports.first().map(|p| p.number))
                .unwrap_or(0);
            return Some((svc, port));
        }
    }
    // `<pod>.<service>[.<ns>[.svc.<domain>]]`: a pod of a headless Service.
    let (_, rest) = host.split_once('.')?;
    let candidates = [
        rest.to_string(),
        format!("{rest}.{ns}.svc.{}", snap.options.cluster_domain),
        format!("{rest}.svc.{}", snap.options.cluster_domain),
        format!("{rest}.{}", snap.options.cluster_domain),
    ];
    for c in &candidates {
        let Some(svc) = snap.destination_service(c, ns) else {
            continue;
        };
        let s = &snap.services[svc];
        if !is_headless(s) {
            continue;
        }
        let port = port
            .filter(|p| {
                s.ports
                    .iter()
                    .any(|sp| sp.number == *p || sp.target_port == *p)
            })
            .map(|p| service_port(s, p))
            .or_else(|| s.ports.first().map(|p| p.number))
            .unwrap_or(0);
        return Some((svc, port));
    }
    None
}

/// The headless Service (in its namespace) that selects a workload's pods,
/// with its first port (a metric names no port).
fn headless_of_workload(snap: &MeshSnapshot, w: WorkloadId) -> Option<(SvcId, u32)> {
    let wl = &snap.workloads[w];
    let labels = snap.workload_labels(w);
    snap.services_in(&wl.namespace).iter().find_map(|&svc| {
        let s = &snap.services[svc];
        let sel = s.selector.as_ref()?;
        (is_headless(s) && sel.iter().all(|(k, v)| labels.get(k) == Some(v)))
            .then(|| (svc, s.ports.first().map_or(0, |p| p.number)))
    })
}

fn is_headless(s: &crate::snapshot::ServiceInfo) -> bool {
    s.kind == crate::snapshot::SvcKind::Kube
        && s.resolution == crate::snapshot::Resolution::Passthrough
}

/// The service port a call to a pod's `port` goes through: the port of
/// that number, else the one targeting it.
fn service_port(s: &crate::snapshot::ServiceInfo, port: u32) -> u32 {
    s.ports
        .iter()
        .find(|p| p.number == port)
        .or_else(|| s.ports.iter().find(|p| p.target_port == port))
        .map_or(port, |p| p.number)
}

/// The headless Service whose selected pods include the one at `ip` and
/// that has the called port (as a port or a target port).
fn headless_at(snap: &MeshSnapshot, ip: &IpAddr, port: Option<u32>) -> Option<(SvcId, u32)> {
    for &pod in snap.pods_at(ip) {
        let p = &snap.pods[pod];
        for &svc in snap.services_in(&p.namespace) {
            let s = &snap.services[svc];
            if !is_headless(s) {
                continue;
            }
            let Some(sel) = &s.selector else { continue };
            if !sel.iter().all(|(k, v)| p.labels.get(k) == Some(v)) {
                continue;
            }
            if let Some(p) = headless_port(s, port) {
                return Some((svc, p));
            }
        }
    }
    // A pod that was not read (another namespace under `-n`): the
    // EndpointSlices of headless Services list it.
    snap.headless_services_at(ip)
        .iter()
        .find_map(|&svc| headless_port(&snap.services[svc], port).map(|p| (svc, p)))
}

/// The port of headless Service `s` that a call to `port` on one of its
/// pods goes through (as a port or a target port), or its first port when
/// the call names none; `None` when the Service lacks the port.
fn headless_port(s: &crate::snapshot::ServiceInfo, port: Option<u32>) -> Option<u32> {
    match port {
        Some(n)
            if s.ports
                .iter()
                .any(|sp| sp.number == n || sp.target_port == n) =>
        {
            Some(service_port(s, n))
        }
        None => Some(s.ports.first().map_or(0, |sp| sp.number)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;
    use crate::{Inputs, Options};

    fn bookinfo() -> MeshSnapshot {
        let mut inputs = Inputs::default();
        let text = include_str!("../../examples/bookinfo/manifests.yaml");
        for doc in serde_yaml::Deserializer::from_str(text) {
            let v = serde_json::Value::deserialize(doc).unwrap();
            if v.get("kind").is_some() {
                inputs.add(v).unwrap();
            }
        }
        MeshSnapshot::build(&inputs, Options::default()).unwrap()
    }

    fn ingest(snap: &MeshSnapshot, lines: &[String]) -> Observations {
        let mut ingest = LogIngest::new(snap, "test");
        for l in lines {
            ingest.line(l);
        }
        ingest.finish()
    }

    fn summary(o: &Observations) -> String {
        format!("{:?}\n{:?}\n{:?}", o.stats, o.traffic, o.unregistered)
    }

    /// Found by the `ingest` fuzz target (fuzz/regressions/ingest): a
    /// passthrough destination took the authority of the first line that
    /// reached it, so a request was resolved to a service or left
    /// unregistered depending on which worker's chunk held that line.
    #[test]
    fn passthrough_lines_resolve_alike_however_the_log_is_cut() {
        let snap = bookinfo();
        // productpage (10.8.0.11) to an address no service has, with an
        // authority that names a service, none, and two that name none.
        let line = |auth: &str, cluster: &str| {
            format!(
                "[2026-11-28T09:00:03.000Z] \"GET / HTTP/1.1\" 200 - via_upstream - \"-\" 0 1 1 1 \"-\" \"-\" \"-\" \"{auth}\" \"203.0.113.9:443\" {cluster} 10.8.0.11:40100 203.0.113.9:443 10.8.0.11:40099 - -"
            )
        };
        let lines = [
            line("-", "PassthroughCluster"),
            line("reviews:9080", "PassthroughCluster"),
            line("zzz.example.com", "PassthroughCluster"),
            line("api.example.com", "BlackHoleCluster"),
        ];
        let whole = ingest(&snap, &lines);
        let reviews = ("reviews.bookinfo.svc.cluster.local".to_string(), 9080);
        let (w, t) = whole.traffic.iter().next().unwrap();
        assert_eq!(snap.workloads[*w].name, "productpage-v1");
        assert_eq!(
            (
                t.outbound[&reviews].requests,
                t.outbound[&reviews].outside_scope
            ),
            (1, 1)
        );
        let u = &whole.unregistered;
        assert_eq!(u.len(), 1, "{u:?}");
        assert_eq!(
            (
                u[0].address.as_str(),
                u[0].requests,
                u[0].authority.as_deref(),
                u[0].blocked
            ),
            ("203.0.113.9:443", 3, Some("api.example.com"), true)
        );
        let mut reversed = lines.clone();
        reversed.reverse();
        for lines in [&lines, &reversed] {
            assert_eq!(summary(&ingest(&snap, lines)), summary(&whole));
            for cut in 0..=lines.len() {
                let mut merged = ingest(&snap, &lines[..cut]);
                merged.merge(ingest(&snap, &lines[cut..]));
                assert_eq!(summary(&merged), summary(&whole), "cut after {cut}");
            }
        }
    }
}
