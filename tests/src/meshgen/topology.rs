//! A mesh's shape as data: its workloads, Services, external hosts and
//! the calls between them ([`Topology`]), printable as the YAML a user
//! applies and as the access log its calls would write.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use crate::bench::Rng;
use crate::fidelity::{ServiceEntryDoc, DEFAULT_MESH, ROOT_NS};
use crate::injector::PROXY_IMAGE;
use crate::world::{labels, Labels, Service, SvcPort};
use crate::{inbound_text_line, json_str, outbound_text_line, routed_text_line};
use meshscope_shared::inject::PROXY_CONTAINER;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Deployment,
    StatefulSet,
}

/// One Service port (target port = port).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub name: String,
    pub number: u32,
}

pub fn port(name: &str, number: u32) -> Port {
    Port {
        name: name.into(),
        number,
    }
}

/// A Deployment or StatefulSet, and its Service of the same name when it
/// has ports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    pub namespace: String,
    pub name: String,
    pub kind: Kind,
    pub replicas: usize,
    pub ports: Vec<Port>,
    /// `clusterIP: None` (a StatefulSet's governing Service).
    pub headless: bool,
    /// Its pods run a sidecar (its namespace is injected).
    pub injected: bool,
    /// Its pods run `proxy router` (a gateway, no sidecar) and carry these
    /// labels besides `app` and `version`; `None` for every workload of
    /// the generated scenarios until [`Topology::make_router`].
    pub router: Option<Labels>,
}

/// A host outside the mesh, registered by a DNS ServiceEntry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct External {
    pub namespace: String,
    pub name: String,
    pub host: String,
    pub port: u32,
    pub port_name: String,
    pub protocol: String,
    pub export: Option<Vec<String>>,
    /// The mesh sends it to the egress gateway (a VirtualService bound to
    /// `mesh` and the gateway).
    pub via_gateway: bool,
}

/// What a call goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    /// A workload's Service, on one of its ports.
    Service { workload: usize, port: u32 },
    /// An external host (index into [`Topology::externals`]).
    External(usize),
}

/// Every pod of `from` calls `to`, `requests` times each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub from: usize,
    pub to: Target,
    pub requests: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// `realistic` or `social-network`.
    pub name: String,
    pub scale: usize,
    pub seed: u64,
    /// Name, injected.
    pub namespaces: Vec<(String, bool)>,
    pub workloads: Vec<Workload>,
    pub externals: Vec<External>,
    pub edges: Vec<Edge>,
    /// The `mesh` key of ConfigMap istio-system/istio.
    pub mesh: String,
    /// Istio objects besides the ServiceEntries (the egress Gateway and its
    /// VirtualService), one YAML document each.
    pub istio: Vec<String>,
    /// The egress gateway's workload and port, when there is one.
    pub egress_gateway: Option<(usize, u32)>,
    /// The extension provider's workload and port: every sidecar's Envoy
    /// calls it (tracing), whatever the app calls.
    pub provider: Option<(usize, u32)>,
}

pub const DOMAIN: &str = "svc.cluster.local";

impl Topology {
    pub(super) fn empty(name: &str, scale: usize, seed: u64) -> Self {
        Topology {
            name: name.into(),
            scale,
            seed,
            namespaces: Vec::new(),
            workloads: Vec::new(),
            externals: Vec::new(),
            edges: Vec::new(),
            mesh: DEFAULT_MESH.into(),
            istio: Vec::new(),
            egress_gateway: None,
            provider: None,
        }
    }

    pub(super) fn add(
        &mut self,
        ns: &str,
        name: &str,
        kind: Kind,
        replicas: usize,
        ports: Vec<Port>,
    ) -> usize {
        let injected = self.namespaces.iter().any(|(n, inj)| n == ns && *inj);
        self.workloads.push(Workload {
            namespace: ns.into(),
            name: name.into(),
            kind,
            replicas,
            headless: kind == Kind::StatefulSet && !ports.is_empty(),
            ports,
            injected,
            router: None,
        });
        self.workloads.len() - 1
    }

    /// A gateway Deployment in namespace `ns` (added, not injected, when
    /// missing): its pods run `proxy router` with `labels`.
    pub fn add_router(
        &mut self,
        ns: &str,
        name: &str,
        replicas: usize,
        ports: Vec<Port>,
        labels: Labels,
    ) -> usize {
        if !self.namespaces.iter().any(|(n, _)| n == ns) {
            self.namespaces.push((ns.into(), false));
        }
        let w = self.add(ns, name, Kind::Deployment, replicas, ports);
        self.make_router(w, labels);
        w
    }

    /// Workload `w`'s pods run `proxy router` with `labels` from now on.
    pub fn make_router(&mut self, w: usize, labels: Labels) {
        self.workloads[w].router = Some(labels);
        self.workloads[w].injected = false;
    }

    pub(super) fn call(&mut self, from: usize, to: Target, rng: &mut Rng) {
        if self.edges.iter().any(|e| e.from == from && e.to == to) {
            return;
        }
        self.edges.push(Edge {
            from,
            to,
            requests: 1 + rng.below(5),
        });
    }

    /// A call to a workload's Service on its first port.
    pub(super) fn call_svc(&mut self, from: usize, to: usize, rng: &mut Rng) {
        let port = self.workloads[to].ports[0].number;
        self.call(from, Target::Service { workload: to, port }, rng);
    }

    pub fn host(&self, w: usize) -> String {
        let wl = &self.workloads[w];
        format!("{}.{}.{DOMAIN}", wl.name, wl.namespace)
    }

    pub fn find(&self, ns: &str, name: &str) -> Option<usize> {
        self.workloads
            .iter()
            .position(|w| w.namespace == ns && w.name == name)
    }

    /// The pod IPs of workload `w`, in replica order: a block of their own
    /// (10.150.0.0 up), apart from the reference scenario's.
    pub fn pod_ips(&self, w: usize) -> Vec<String> {
        let first: usize = self.workloads[..w].iter().map(|x| x.replicas).sum();
        (first..first + self.workloads[w].replicas)
            .map(|n| {
                format!(
                    "10.{}.{}.{}",
                    150 + n / 62_500,
                    (n / 250) % 250,
                    n % 250 + 1
                )
            })
            .collect()
    }

    /// The address an app resolves an external host to (documentation
    /// range).
    fn external_ip(&self, e: usize) -> String {
        format!("203.0.113.{}", e % 250 + 1)
    }

    /// The cluster a call leaves through, as the caller's access log names
    /// it: the Service's or external host's own, or for a host routed to
    /// the egress gateway, the gateway's.
    pub fn edge_cluster(&self, e: &Edge) -> String {
        match e.to {
            Target::Service { workload, port } => {
                format!("outbound|{port}||{}", self.host(workload))
            }
            Target::External(x) => {
                let ext = &self.externals[x];
                match (ext.via_gateway, self.egress_gateway) {
                    (true, Some((g, p))) => format!("outbound|{p}||{}", self.host(g)),
                    _ => format!("outbound|{}||{}", ext.port, ext.host),
                }
            }
        }
    }

    /// Whether the edge reaches its cluster through a VirtualService route
    /// (the egress gateway).
    pub fn edge_routed(&self, e: &Edge) -> bool {
        matches!(e.to, Target::External(x) if self.externals[x].via_gateway && self.egress_gateway.is_some())
    }

    /// The workloads that call anything.
    pub fn callers(&self) -> BTreeSet<usize> {
        self.edges.iter().map(|e| e.from).collect()
    }

    /// The workloads that call workload `w`'s Service.
    pub fn fan_in(&self, w: usize) -> BTreeSet<usize> {
        self.edges
            .iter()
            .filter(|e| matches!(e.to, Target::Service { workload, .. } if workload == w))
            .map(|e| e.from)
            .collect()
    }

    /// `hub` (called by at least a quarter of the callers, and by three or
    /// more), `caller` (calls something), or `leaf` (calls nothing).
    pub fn role(&self, w: usize) -> &'static str {
        let callers = self.callers().len();
        if self.fan_in(w).len() >= callers.div_ceil(4).max(3) {
            "hub"
        } else if self.edges.iter().any(|e| e.from == w) {
            "caller"
        } else {
            "leaf"
        }
    }

    /// The Service whose change is pushed furthest: the most called (the
    /// first by namespace and name among equals).
    pub fn hub_probe(&self) -> Option<usize> {
        (0..self.workloads.len())
            .filter(|w| !self.workloads[*w].ports.is_empty())
            .max_by_key(|w| {
                let wl = &self.workloads[*w];
                (
                    self.fan_in(*w).len(),
                    std::cmp::Reverse((wl.namespace.clone(), wl.name.clone())),
                )
            })
    }

    /// A leaf Service called by exactly one workload (the first by
    /// namespace and name).
    pub fn leaf_probe(&self) -> Option<usize> {
        (0..self.workloads.len())
            .filter(|w| !self.workloads[*w].ports.is_empty())
            .filter(|w| self.role(*w) == "leaf" && self.fan_in(*w).len() == 1)
            .min_by_key(|w| {
                let wl = &self.workloads[*w];
                (wl.namespace.clone(), wl.name.clone())
            })
    }

    /// Every call as access-log lines in Istio's TEXT format: from each pod
    /// of the caller, answered by the callee's pods in turn, the caller's
    /// outbound line and, when the callee runs a sidecar, its inbound one.
    pub fn access_log(&self) -> String {
        let mut out = String::new();
        let mut n = 0u64;
        for e in &self.edges {
            let from = self.pod_ips(e.from);
            // Enough requests that every pod of the callee answers some
            // (load balancing spreads them over the replicas).
            let requests = match e.to {
                Target::Service { workload, .. } => {
                    e.requests.max(self.workloads[workload].replicas)
                }
                Target::External(_) => e.requests,
            };
            for (r, src) in from.iter().enumerate() {
                for k in 0..requests {
                    let line = match e.to {
                        Target::Service { workload, port } => {
                            let to = self.pod_ips(workload);
                            let dst = &to[(r + k) % to.len()];
                            let host = self.host(workload);
                            let up = format!("{dst}:{port}");
                            let mut l = outbound_text_line(n, src, &host, port, &up);
                            if self.workloads[workload].injected {
                                l.push_str(&inbound_text_line(n, src, &host, port, dst));
                            }
                            l
                        }
                        Target::External(x) => {
                            let ext = &self.externals[x];
                            let dialled = format!("{}:{}", self.external_ip(x), ext.port);
                            match (ext.via_gateway, self.egress_gateway) {
                                (true, Some((g, p))) => {
                                    let gw = self.pod_ips(g);
                                    let up = format!("{}:{p}", gw[(r + k) % gw.len()]);
                                    routed_text_line(
                                        n,
                                        src,
                                        &ext.host,
                                        &self.edge_cluster(e),
                                        &up,
                                        &dialled,
                                    )
                                }
                                _ => outbound_text_line(n, src, &ext.host, ext.port, &dialled),
                            }
                        }
                    };
                    out.push_str(&line);
                    n += 1;
                }
            }
        }
        out
    }

    /// The Services, as the test harness's [`World`](crate::world::World)
    /// writes their EndpointSlices.
    pub fn services(&self) -> Vec<Service> {
        self.workloads
            .iter()
            .filter(|w| !w.ports.is_empty())
            .map(|w| Service {
                namespace: w.namespace.clone(),
                name: w.name.clone(),
                selector: labels(&[("app", &w.name)]),
                ports: w
                    .ports
                    .iter()
                    .map(|p| SvcPort::new(&p.name, p.number))
                    .collect(),
                headless: w.headless,
                annotations: Labels::new(),
                labels: Labels::new(),
                external_name: None,
            })
            .collect()
    }

    /// Everything a user applies, as one multi-document YAML stream: the
    /// mesh ConfigMap, Namespaces, Deployments and StatefulSets, Services,
    /// ServiceEntries and the other Istio objects.
    pub fn yaml(&self) -> String {
        let mut out = String::new();
        let mesh: String = self.mesh.lines().map(|l| format!("    {l}\n")).collect();
        let _ = write!(
            out,
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: istio\n  namespace: {ROOT_NS}\ndata:\n  mesh: |-\n{mesh}"
        );
        for (ns, injected) in &self.namespaces {
            let _ = writeln!(
                out,
                "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}"
            );
            if *injected {
                out.push_str("  labels:\n    istio-injection: enabled\n");
            }
        }
        for w in &self.workloads {
            let kind = match w.kind {
                Kind::Deployment => "Deployment",
                Kind::StatefulSet => "StatefulSet",
            };
            let _ = writeln!(
                out,
                "---\napiVersion: apps/v1\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  replicas: {r}",
                name = w.name,
                ns = w.namespace,
                r = w.replicas
            );
            if w.kind == Kind::StatefulSet {
                let _ = writeln!(
                    out,
                    "  serviceName: {}\n  podManagementPolicy: Parallel",
                    w.name
                );
            }
            let _ = writeln!(
                out,
                "  selector:\n    matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n        app: {name}\n        version: v1",
                name = w.name
            );
            for (k, v) in w.router.iter().flatten() {
                let _ = writeln!(out, "        {}: {}", json_str(k), json_str(v));
            }
            let _ = writeln!(
                out,
                "    spec:\n      containers:\n      - name: app\n        image: registry.invalid/{name}:1",
                name = w.name
            );
            if !w.ports.is_empty() {
                out.push_str("        ports:\n");
                for p in &w.ports {
                    let _ = writeln!(out, "        - containerPort: {}", p.number);
                }
            }
            if w.router.is_some() {
                let _ = writeln!(
                    out,
                    "      - name: {PROXY_CONTAINER}\n        image: {PROXY_IMAGE}\n        args: [proxy, router]"
                );
            }
        }
        for s in self.services() {
            crate::world::service_yaml(&mut out, &s);
        }
        for e in &self.externals {
            out.push_str("---\n");
            out.push_str(
                &ServiceEntryDoc::new(&e.namespace, &e.name)
                    .host(&e.host)
                    .port(e.port, &e.port_name, &e.protocol)
                    .export(e.export.clone())
                    .yaml(),
            );
        }
        for d in &self.istio {
            out.push_str("---\n");
            out.push_str(d);
            if !d.ends_with('\n') {
                out.push('\n');
            }
        }
        out
    }

    /// The Istio objects istiod must hold before proxies connect:
    /// (namespace, name).
    pub fn configs(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .externals
            .iter()
            .map(|e| (e.namespace.clone(), e.name.clone()))
            .collect();
        for d in &self.istio {
            let name = d.lines().find_map(|l| l.strip_prefix("  name: "));
            let ns = d.lines().find_map(|l| l.strip_prefix("  namespace: "));
            if let (Some(n), Some(ns)) = (name, ns) {
                v.push((ns.trim().to_string(), n.trim().to_string()));
            }
        }
        v
    }

    /// The hosts istiod's registry must hold: every Service and external
    /// host, with its namespace.
    pub fn registry_hosts(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = (0..self.workloads.len())
            .filter(|w| !self.workloads[*w].ports.is_empty())
            .map(|w| (self.workloads[w].namespace.clone(), self.host(w)))
            .collect();
        v.extend(
            self.externals
                .iter()
                .map(|e| (e.namespace.clone(), e.host.clone())),
        );
        v
    }
}
