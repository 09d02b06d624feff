//! Meshes shaped like real ones, for `meshscope-bench-istiod`: a seeded
//! generator of a many-namespace mesh with a power-law fan-in
//! ([`realistic`]), and a published application's service graph
//! ([`social_network`]). Each is a [`Topology`]: workloads (Deployments and
//! StatefulSets, several replicas), their Services, ServiceEntries, the
//! calls between them, and the mesh config; printable as YAML
//! ([`Topology::yaml`]), with the calls as Istio access-log lines
//! ([`Topology::access_log`]), and deployable on the test control plane
//! ([`deploy`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::bench::{Rng, Zipf};
use crate::cluster::Cluster;
use crate::fidelity::{ServiceEntryDoc, DEFAULT_MESH, ROOT_NS};
use crate::world::{labels, server_side_apply_parallel, Labels, Pod, Service, SvcPort, World};
use crate::{inbound_text_line, outbound_text_line, routed_text_line};

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

fn port(name: &str, number: u32) -> Port {
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
    fn empty(name: &str, scale: usize, seed: u64) -> Self {
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

    fn add(
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
        });
        self.workloads.len() - 1
    }

    fn call(&mut self, from: usize, to: Target, rng: &mut Rng) {
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
    fn call_svc(&mut self, from: usize, to: usize, rng: &mut Rng) {
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

    /// The Services, as the test harness's [`World`] writes their
    /// EndpointSlices.
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
                "  selector:\n    matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n        app: {name}\n        version: v1\n    spec:\n      containers:\n      - name: app\n        image: registry.invalid/{name}:1",
                name = w.name
            );
            if !w.ports.is_empty() {
                out.push_str("        ports:\n");
                for p in &w.ports {
                    let _ = writeln!(out, "        - containerPort: {}", p.number);
                }
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

// === the realistic mesh ===

/// Namespaces of app teams per unit of scale.
const TEAMS: usize = 8;

/// A mesh shaped like a company's: a platform namespace of hubs that most
/// workloads call (auth, config, and a Redis cache as a StatefulSet behind
/// a headless Service); a data namespace (Postgres and Kafka
/// StatefulSets, headless); `8·scale` team namespaces, each with a web
/// front end, an api, a worker and four services of a long tail that the
/// callers draw by a Zipf law across namespaces (most are called by one or
/// two); DNS ServiceEntries (without exportTo, exported to `*`, to `.`,
/// and to a list), four per scale nobody calls; one external host routed
/// through an egress gateway by a VirtualService; a Zipkin extension
/// provider every sidecar traces to; several replicas per Deployment.
/// Everything but the names is drawn from `seed`.
pub fn realistic(scale: usize, seed: u64) -> Topology {
    let scale = scale.max(1);
    let mut rng = Rng::new(seed);
    let mut t = Topology::empty("realistic", scale, seed);
    let (platform, data, obs, egress) = ("rl-platform", "rl-data", "rl-observability", "rl-egress");
    let teams: Vec<String> = (1..=TEAMS * scale)
        .map(|i| format!("rl-team-{i:02}"))
        .collect();
    for ns in [platform, data] {
        t.namespaces.push((ns.into(), true));
    }
    // Tracing backends and gateways run without a sidecar.
    t.namespaces.push((obs.into(), false));
    t.namespaces.push((egress.into(), false));
    for ns in &teams {
        t.namespaces.push((ns.clone(), true));
    }

    let auth = t.add(
        platform,
        "auth",
        Kind::Deployment,
        3,
        vec![port("http", 8080)],
    );
    let config = t.add(
        platform,
        "config",
        Kind::Deployment,
        2,
        vec![port("http", 8080)],
    );
    let cache = t.add(
        platform,
        "cache",
        Kind::StatefulSet,
        3,
        vec![port("tcp-redis", 6379)],
    );
    let postgres = t.add(
        data,
        "postgres",
        Kind::StatefulSet,
        2,
        vec![port("tcp-postgres", 5432)],
    );
    let kafka = t.add(
        data,
        "kafka",
        Kind::StatefulSet,
        3,
        vec![port("tcp-kafka", 9092)],
    );
    let zipkin = t.add(
        obs,
        "zipkin",
        Kind::Deployment,
        1,
        vec![port("http-zipkin", 9411)],
    );
    let gw = t.add(
        egress,
        "istio-egressgateway",
        Kind::Deployment,
        2,
        vec![port("http2", 80), port("https", 443)],
    );
    t.provider = Some((zipkin, 9411));
    t.egress_gateway = Some((gw, 80));
    t.mesh = format!(
        "{DEFAULT_MESH}extensionProviders:\n- name: zipkin\n  zipkin:\n    service: {}\n    port: 9411\ndefaultProviders:\n  tracing:\n  - zipkin\n",
        t.host(zipkin)
    );

    // Per team: web (calls its api), api, worker; four tail services.
    let mut web = Vec::new();
    let mut api = Vec::new();
    let mut worker = Vec::new();
    let mut tail = Vec::new();
    for ns in &teams {
        web.push(t.add(ns, "web", Kind::Deployment, 2, vec![port("http", 8080)]));
        let r = 2 + rng.below(2);
        api.push(t.add(ns, "api", Kind::Deployment, r, vec![port("http", 8080)]));
        let r = 1 + rng.below(2);
        worker.push(t.add(ns, "worker", Kind::Deployment, r, Vec::new()));
        for j in 0..4 {
            let p = if rng.unit() < 0.3 {
                port("grpc", 9090)
            } else {
                port("http", 8080)
            };
            let r = 1 + rng.below(2);
            tail.push(t.add(ns, &format!("svc-{j}"), Kind::Deployment, r, vec![p]));
        }
    }
    // The tail's popularity order: a seeded shuffle, so the most called
    // are spread over the namespaces.
    let mut order = tail.clone();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let zipf = Zipf::new(order.len(), 1.1);

    // External hosts (DNS ServiceEntries).
    let ext = |t: &mut Topology,
               ns: &str,
               name: &str,
               host: &str,
               p: (u32, &str, &str),
               export: Option<Vec<&str>>,
               via: bool| {
        t.externals.push(External {
            namespace: ns.into(),
            name: name.into(),
            host: host.into(),
            port: p.0,
            port_name: p.1.into(),
            protocol: p.2.into(),
            export: export.map(|v| v.into_iter().map(String::from).collect()),
            via_gateway: via,
        });
        t.externals.len() - 1
    };
    let tls = (443, "tls", "TLS");
    let stripe = ext(
        &mut t,
        platform,
        "stripe",
        "api.stripe.com",
        tls,
        None,
        false,
    );
    let slack = ext(
        &mut t,
        platform,
        "slack",
        "hooks.slack.com",
        tls,
        Some(vec!["*"]),
        false,
    );
    let t1 = teams[0].clone();
    let smtp = ext(
        &mut t,
        &t1,
        "sendgrid",
        "smtp.sendgrid.net",
        (587, "tcp-smtp", "TCP"),
        Some(vec!["."]),
        false,
    );
    let t2 = teams[1].clone();
    let t3 = teams[2].clone();
    let s3 = ext(
        &mut t,
        &t2,
        "s3",
        "s3.eu-west-1.amazonaws.com",
        tls,
        Some(vec![".", t3.as_str()]),
        false,
    );
    let payments = ext(
        &mut t,
        platform,
        "payments",
        "api.payments.example.com",
        (80, "http", "HTTP"),
        None,
        true,
    );
    for i in 0..4 * scale {
        let host = format!("partner-{i}.legacy.example.com");
        ext(
            &mut t,
            platform,
            &format!("partner-{i}"),
            &host,
            tls,
            None,
            false,
        );
    }
    t.istio.push(format!(
        "apiVersion: networking.istio.io/v1\nkind: Gateway\nmetadata:\n  name: egressgateway\n  namespace: {egress}\nspec:\n  selector:\n    app: istio-egressgateway\n  servers:\n  - port:\n      number: 80\n      name: http\n      protocol: HTTP\n    hosts:\n    - api.payments.example.com\n"
    ));
    t.istio.push(format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: payments-via-egress\n  namespace: {platform}\nspec:\n  hosts:\n  - api.payments.example.com\n  gateways:\n  - mesh\n  - {egress}/egressgateway\n  http:\n  - match:\n    - gateways:\n      - mesh\n      port: 80\n    route:\n    - destination:\n        host: {gwh}\n        port:\n          number: 80\n  - match:\n    - gateways:\n      - {egress}/egressgateway\n      port: 80\n    route:\n    - destination:\n        host: api.payments.example.com\n        port:\n          number: 80\n",
        gwh = t.host(gw)
    ));

    // The calls. Hubs: most callers; the tail: Zipf draws.
    let p = |rng: &mut Rng, p: f64| rng.unit() < p;
    for i in 0..teams.len() {
        let (w, a, k) = (web[i], api[i], worker[i]);
        t.call_svc(w, a, &mut rng);
        for (hub, pw, pa, pk) in [
            (auth, 1.0, 0.95, 0.8),
            (config, 0.9, 0.85, 0.6),
            (cache, 0.6, 0.7, 0.3),
        ] {
            for (from, q) in [(w, pw), (a, pa), (k, pk)] {
                if p(&mut rng, q) {
                    t.call_svc(from, hub, &mut rng);
                }
            }
        }
        for (from, pp, pk) in [(a, 0.4, 0.3), (k, 0.6, 0.8)] {
            if p(&mut rng, pp) {
                t.call_svc(from, postgres, &mut rng);
            }
            if p(&mut rng, pk) {
                t.call_svc(from, kafka, &mut rng);
            }
        }
        for _ in 0..1 + rng.below(3) {
            let to = order[zipf.sample(&mut rng)];
            t.call_svc(a, to, &mut rng);
        }
        for _ in 0..rng.below(2) {
            let to = order[zipf.sample(&mut rng)];
            t.call_svc(k, to, &mut rng);
        }
        if p(&mut rng, 0.3) {
            t.call(a, Target::External(stripe), &mut rng);
        }
        if p(&mut rng, 0.2) {
            t.call(a, Target::External(slack), &mut rng);
        }
        if p(&mut rng, 0.25) || i == 0 {
            t.call(a, Target::External(payments), &mut rng);
        }
        match i {
            0 => t.call(k, Target::External(smtp), &mut rng),
            1 | 2 => t.call(a, Target::External(s3), &mut rng),
            _ => {}
        }
    }
    // A tail service nobody drew is called by its own namespace's api.
    for (i, &s) in tail.iter().enumerate() {
        if t.fan_in(s).is_empty() {
            t.call_svc(api[i / 4], s, &mut rng);
        }
    }
    t
}

// === DeathStarBench social network ===

/// The social network of DeathStarBench (github.com/delimitrou/DeathStarBench,
/// commit 6ecb09706140f8730b5385c08f1386c654c3c526, 2024-06-27): its
/// services and ports from `socialNetwork/docker-compose.yml`,
/// `socialNetwork/config/service-config.json` and the Helm chart
/// (`socialNetwork/helm-chart/socialnetwork`, which names each Service
/// port by its number), and its call graph from the clients each service
/// builds in `socialNetwork/src/<Service>/<Service>.cpp`, from the Lua
/// handlers of `socialNetwork/nginx-web-server/lua-scripts/api/` (what
/// nginx-thrift calls) and `socialNetwork/media-frontend/lua-scripts/`.
/// Written out here by hand as data; nothing of the upstream repository is
/// included. jaeger-agent is left out: the services send it spans over
/// UDP, which the sidecars do not intercept.
///
/// (service, port, storage) — storage runs `scale` replicas, the rest `2·scale`.
pub const SOCIAL_NETWORK_SERVICES: &[(&str, u32, bool)] = &[
    ("nginx-thrift", 8080, false),
    ("media-frontend", 8081, false),
    ("compose-post-service", 9090, false),
    ("home-timeline-service", 9090, false),
    ("media-service", 9090, false),
    ("post-storage-service", 9090, false),
    ("social-graph-service", 9090, false),
    ("text-service", 9090, false),
    ("unique-id-service", 9090, false),
    ("url-shorten-service", 9090, false),
    ("user-mention-service", 9090, false),
    ("user-service", 9090, false),
    ("user-timeline-service", 9090, false),
    ("home-timeline-redis", 6379, true),
    ("social-graph-redis", 6379, true),
    ("user-timeline-redis", 6379, true),
    ("media-memcached", 11211, true),
    ("post-storage-memcached", 11211, true),
    ("url-shorten-memcached", 11211, true),
    ("user-memcached", 11211, true),
    ("media-mongodb", 27017, true),
    ("post-storage-mongodb", 27017, true),
    ("social-graph-mongodb", 27017, true),
    ("url-shorten-mongodb", 27017, true),
    ("user-mongodb", 27017, true),
    ("user-timeline-mongodb", 27017, true),
];

/// Caller -> callees, at the commit above.
pub const SOCIAL_NETWORK_CALLS: &[(&str, &[&str])] = &[
    (
        "nginx-thrift",
        &[
            "compose-post-service",
            "home-timeline-service",
            "user-timeline-service",
            "social-graph-service",
            "user-service",
        ],
    ),
    ("media-frontend", &["media-mongodb"]),
    (
        "compose-post-service",
        &[
            "home-timeline-service",
            "media-service",
            "post-storage-service",
            "text-service",
            "unique-id-service",
            "user-service",
            "user-timeline-service",
        ],
    ),
    (
        "home-timeline-service",
        &[
            "home-timeline-redis",
            "post-storage-service",
            "social-graph-service",
        ],
    ),
    (
        "post-storage-service",
        &["post-storage-memcached", "post-storage-mongodb"],
    ),
    (
        "social-graph-service",
        &["social-graph-mongodb", "social-graph-redis", "user-service"],
    ),
    (
        "text-service",
        &["url-shorten-service", "user-mention-service"],
    ),
    (
        "url-shorten-service",
        &["url-shorten-memcached", "url-shorten-mongodb"],
    ),
    ("user-mention-service", &["user-memcached", "user-mongodb"]),
    (
        "user-service",
        &["social-graph-service", "user-memcached", "user-mongodb"],
    ),
    (
        "user-timeline-service",
        &[
            "post-storage-service",
            "user-timeline-mongodb",
            "user-timeline-redis",
        ],
    ),
];

/// DeathStarBench's social network in namespace `social-network`: one
/// Deployment and Service per service (ports named by number, as the Helm
/// chart names them, so istiod sniffs their protocol), its call graph as
/// the traffic, request counts drawn from `seed`.
pub fn social_network(scale: usize, seed: u64) -> Topology {
    let scale = scale.max(1);
    let mut rng = Rng::new(seed);
    let mut t = Topology::empty("social-network", scale, seed);
    let ns = "social-network";
    t.namespaces.push((ns.into(), true));
    for (name, number, storage) in SOCIAL_NETWORK_SERVICES {
        let replicas = if *storage { scale } else { 2 * scale };
        t.add(
            ns,
            name,
            Kind::Deployment,
            replicas,
            vec![port(&number.to_string(), *number)],
        );
    }
    for (from, tos) in SOCIAL_NETWORK_CALLS {
        let f = t.find(ns, from).expect("callers are services");
        for to in *tos {
            let w = t.find(ns, to).expect("callees are services");
            t.call_svc(f, w, &mut rng);
        }
    }
    t
}

/// The realistic scenario with about `services` services (Kubernetes
/// Services and ServiceEntry hosts: the smallest scale that has that many)
/// and exactly `sidecars` injected pods: every injected workload's replicas
/// are scaled by one factor, rounded so that the sum comes out exact (the
/// largest remainders round up), and at least 1. Its calls, hosts and
/// ServiceEntries are those of that scale.
pub fn realistic_sized(services: usize, sidecars: usize, seed: u64) -> Topology {
    let mut scale = 1;
    let mut t = realistic(scale, seed);
    while t.services().len() + t.externals.len() < services {
        scale += 1;
        t = realistic(scale, seed);
    }
    let injected: Vec<usize> = (0..t.workloads.len())
        .filter(|w| t.workloads[*w].injected)
        .collect();
    let now: usize = injected.iter().map(|w| t.workloads[*w].replicas).sum();
    let want = sidecars.max(injected.len());
    let factor = want as f64 / now as f64;
    let mut parts: Vec<(usize, usize, f64)> = injected
        .iter()
        .map(|&w| {
            let x = t.workloads[w].replicas as f64 * factor;
            (w, (x.floor() as usize).max(1), x - x.floor())
        })
        .collect();
    parts.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
    let mut have: usize = parts.iter().map(|p| p.1).sum();
    // The largest remainders take the pods still missing (fewer than
    // there are workloads); when rounding up to 1 overshot, the smallest
    // give some back.
    for p in parts.iter_mut() {
        if have >= want {
            break;
        }
        p.1 += 1;
        have += 1;
    }
    for p in parts.iter_mut().rev() {
        if have <= want {
            break;
        }
        if p.1 > 1 {
            p.1 -= 1;
            have -= 1;
        }
    }
    for (w, r, _) in parts {
        t.workloads[w].replicas = r;
    }
    t
}

/// The scenario `name` at `scale`.
pub fn by_name(name: &str, scale: usize, seed: u64) -> Option<Topology> {
    match name {
        "realistic" => Some(realistic(scale, seed)),
        "social-network" => Some(social_network(scale, seed)),
        _ => None,
    }
}

// === on the test control plane ===

/// The mesh config ConfigMap with `mesh` as its `mesh` key.
pub fn set_mesh(c: &Cluster, mesh: &str) {
    let indented: String = mesh.lines().map(|l| format!("    {l}\n")).collect();
    c.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: istio\n  namespace: {ROOT_NS}\ndata:\n  mesh: |-\n{indented}"
    ));
}

/// Creates the topology (its mesh config, namespaces, workloads, Services
/// and Istio objects; the controllers make the pods), gives each pod its
/// IP and status, writes the EndpointSlices, and returns every pod with
/// its workload's index.
pub fn deploy(c: &Cluster, t: &Topology) -> Result<Vec<(usize, Pod)>> {
    let yaml = t.yaml();
    let (ns_docs, rest): (Vec<&str>, Vec<&str>) = yaml
        .split("---\n")
        .filter(|d| !d.trim().is_empty())
        .partition(|d| d.contains("\nkind: Namespace\n") || d.contains("\nkind: ConfigMap\n"));
    c.apply(&ns_docs.join("---\n"));
    c.apply(&rest.join("---\n"));
    let want: usize = t.workloads.iter().map(|w| w.replicas).sum();
    let ours: BTreeSet<&str> = t.namespaces.iter().map(|(n, _)| n.as_str()).collect();
    // Namespace, name and labels only: at 20k pods the whole objects as
    // JSON would take kubectl gigabytes on every poll.
    let columns = "jsonpath={range .items[?(@.metadata.labels.app)]}{.metadata.namespace}{\"\\t\"}{.metadata.name}{\"\\t\"}{.metadata.deletionTimestamp}{\"\\t\"}{.status.podIP}{\"\\t\"}{.metadata.labels}{\"\\n\"}{end}";
    let deadline = Instant::now() + Duration::from_secs(600 + want as u64 / 10);
    let items = loop {
        let o = c.kubectl(&["get", "pods", "-A", "-o", columns], None);
        if !o.status.success() {
            bail!("kubectl get pods: {}", String::from_utf8_lossy(&o.stderr));
        }
        let items: Vec<(String, String, bool, Labels)> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| {
                let mut f = l.splitn(5, '\t');
                let (ns, name, deleted, ip) = (f.next()?, f.next()?, f.next()?, f.next()?);
                let labels = serde_json::from_str(f.next()?).ok()?;
                (ours.contains(ns) && deleted.is_empty())
                    .then(|| (ns.to_string(), name.to_string(), !ip.is_empty(), labels))
            })
            .collect();
        if items.len() >= want {
            break items;
        }
        if Instant::now() > deadline {
            bail!("only {} of {want} pods were created", items.len());
        }
        std::thread::sleep(Duration::from_secs(if want > 2_000 { 5 } else { 1 }));
    };
    // (namespace, app) -> (pod name, labels)
    let mut by_app: BTreeMap<(String, String), Vec<(String, Labels)>> = BTreeMap::new();
    // Pods that all have their IPs were given them by an earlier deploy
    // of this topology (the same names in the same order get the same
    // IPs): their status is not written again.
    let have_status = items.iter().all(|i| i.2);
    for (ns, name, _, l) in items {
        let app = l.get("app").cloned().unwrap_or_default();
        by_app.entry((ns, app)).or_default().push((name, l));
    }
    let mut world = World::default();
    let mut out = Vec::new();
    for (w, wl) in t.workloads.iter().enumerate() {
        let mut pods = by_app
            .remove(&(wl.namespace.clone(), wl.name.clone()))
            .unwrap_or_default();
        pods.sort();
        let ips = t.pod_ips(w);
        if pods.len() != ips.len() {
            bail!(
                "{}/{}: {} pods, expected {}",
                wl.namespace,
                wl.name,
                pods.len(),
                ips.len()
            );
        }
        for ((name, l), ip) in pods.into_iter().zip(ips) {
            let pod = Pod {
                namespace: wl.namespace.clone(),
                name,
                labels: l,
                ip,
                service_account: "default".into(),
                ready: true,
                terminating: false,
                proxied: true,
                gateway: None,
            };
            world.pods.push(pod.clone());
            out.push((w, pod));
        }
    }
    world.services = t.services();
    // In parallel: one kubectl writes a few hundred objects a second.
    let ssa =
        |args: &[&str], yaml: &str| server_side_apply_parallel(c, "meshscope-bench", args, yaml, 8);
    if !have_status {
        ssa(&["--subresource=status"], &world.status_yaml())?;
    }
    ssa(&[], &world.endpoint_slices_yaml())?;
    Ok(out)
}

/// Deletes the topology's namespaces (and waits until they are gone) and
/// puts the default mesh config back.
pub fn cleanup(c: &Cluster, t: &Topology) {
    let mut args = vec![
        "delete",
        "namespace",
        "--ignore-not-found",
        "--wait=true",
        "--timeout=300s",
    ];
    args.extend(t.namespaces.iter().map(|(n, _)| n.as_str()));
    let o = c.kubectl(&args, None);
    if !o.status.success() {
        eprintln!(
            "[bench] deleting the namespaces: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    set_mesh(c, DEFAULT_MESH);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn realistic_is_a_function_of_its_seed() {
        assert_eq!(realistic(1, 7), realistic(1, 7));
        assert_eq!(realistic(1, 7).access_log(), realistic(1, 7).access_log());
        assert_ne!(realistic(1, 7).edges, realistic(1, 8).edges);
        assert_eq!(social_network(1, 3), social_network(1, 3));
        assert_ne!(
            social_network(1, 3).access_log(),
            social_network(1, 4).access_log()
        );
    }

    #[test]
    fn realistic_hubs_are_called_by_most_callers_and_the_tail_by_one_or_two() {
        for seed in 1..=20 {
            let t = realistic(1, seed);
            let callers = t.callers().len();
            assert!(callers >= 2 * TEAMS, "seed {seed}: {callers} callers");
            // auth by more than two thirds of the callers, config by most.
            for (hub, share) in [("auth", 2.0 / 3.0), ("config", 0.5)] {
                let w = t.find("rl-platform", hub).unwrap();
                let n = t.fan_in(w).len();
                assert!(
                    n as f64 > share * callers as f64,
                    "seed {seed}: {hub} called by {n} of {callers}"
                );
                assert_eq!(t.role(w), "hub");
            }
            let probe = t.hub_probe().unwrap();
            let most = (0..t.workloads.len()).map(|w| t.fan_in(w).len()).max();
            assert_eq!(Some(t.fan_in(probe).len()), most, "seed {seed}");
            assert_eq!(t.workloads[probe].namespace, "rl-platform", "seed {seed}");
            // The tail: every service called, most by one or two.
            let tail: Vec<usize> = (0..t.workloads.len())
                .filter(|w| t.workloads[*w].name.starts_with("svc-"))
                .collect();
            assert_eq!(tail.len(), 4 * TEAMS);
            let mut fan: Vec<usize> = tail.iter().map(|w| t.fan_in(*w).len()).collect();
            fan.sort_unstable();
            assert!(fan[0] >= 1, "seed {seed}: an uncalled tail service");
            assert!(
                fan[fan.len() / 2] <= 2,
                "seed {seed}: median fan-in {fan:?}"
            );
            assert!(
                *fan.last().unwrap() < t.fan_in(t.find("rl-platform", "auth").unwrap()).len(),
                "seed {seed}: a tail service as called as auth"
            );
            let leaf = t.leaf_probe().expect("a leaf called once");
            assert_eq!(t.fan_in(leaf).len(), 1);
            assert_eq!(t.role(leaf), "leaf");
        }
    }

    #[test]
    fn realistic_has_every_shape_the_issue_asks_for() {
        let t = realistic(1, 1);
        assert!(t.namespaces.len() >= 10);
        // Cross-namespace calls.
        assert!(t
            .edges
            .iter()
            .any(|e| matches!(e.to, Target::Service { workload, .. }
            if t.workloads[workload].namespace != t.workloads[e.from].namespace
                && t.workloads[workload].namespace.starts_with("rl-team"))));
        // StatefulSets behind headless Services, called.
        let sts: Vec<usize> = (0..t.workloads.len())
            .filter(|w| t.workloads[*w].kind == Kind::StatefulSet)
            .collect();
        assert_eq!(sts.len(), 3);
        assert!(sts
            .iter()
            .all(|w| t.workloads[*w].headless && !t.fan_in(*w).is_empty()));
        // DNS ServiceEntries with and without exportTo, an egress route.
        assert!(t.externals.iter().any(|e| e.export.is_none()));
        assert!(t.externals.iter().any(|e| e.export.is_some()));
        assert!(t.edges.iter().any(|e| t.edge_routed(e)));
        assert!(t.mesh.contains("extensionProviders"));
        assert!(t
            .workloads
            .iter()
            .filter(|w| w.injected)
            .any(|w| w.replicas >= 3));
        // Every caller's log lines name its cluster.
        let log = t.access_log();
        for e in &t.edges {
            assert!(log.contains(&t.edge_cluster(e)), "{:?}", e);
        }
        assert!(log.contains("outbound|80||istio-egressgateway.rl-egress.svc.cluster.local"));
        // Every called pod with a sidecar logs its inbound side: no
        // called workload looks idle.
        let inbound: String = log.lines().filter(|l| l.contains(" inbound|")).collect();
        for w in 0..t.workloads.len() {
            if t.workloads[w].injected && !t.fan_in(w).is_empty() {
                for ip in t.pod_ips(w) {
                    let port = t.workloads[w].ports[0].number;
                    assert!(inbound.contains(&format!(" {ip}:{port} ")), "{ip}");
                }
            }
        }
        assert!(!inbound.contains("rl-egress") && !inbound.contains(":9411 "));
    }

    #[test]
    fn social_network_is_deathstarbenchs_graph() {
        let t = social_network(1, 1);
        assert_eq!(t.workloads.len(), 26);
        let edges: usize = SOCIAL_NETWORK_CALLS.iter().map(|(_, v)| v.len()).sum();
        assert_eq!(t.edges.len(), edges);
        assert_eq!(t.callers().len(), 11);
        let user = t.find("social-network", "user-service").unwrap();
        let callers: BTreeSet<&str> = t
            .fan_in(user)
            .iter()
            .map(|w| t.workloads[*w].name.as_str())
            .collect();
        let want: BTreeSet<&str> = [
            "compose-post-service",
            "nginx-thrift",
            "social-graph-service",
        ]
        .into_iter()
        .collect();
        assert_eq!(callers, want);
        assert_eq!(t.role(user), "hub");
        let unique = t.find("social-network", "unique-id-service").unwrap();
        assert_eq!(t.role(unique), "leaf");
        assert!(t.hub_probe().is_some() && t.leaf_probe().is_some());
        assert_eq!(social_network(2, 1).workloads[0].replicas, 4);
    }

    #[test]
    fn yaml_prints_and_parses() {
        for t in [realistic(1, 5), social_network(1, 5)] {
            let y = t.yaml();
            let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
            for doc in serde_yaml::Deserializer::from_str(&y) {
                let v: serde_json::Value =
                    serde::Deserialize::deserialize(doc).expect("valid YAML");
                if v.is_null() {
                    continue;
                }
                let kind = v["kind"].as_str().expect("a kind").to_string();
                assert!(v["metadata"]["name"].is_string(), "{v}");
                *kinds.entry(kind).or_default() += 1;
            }
            let with_svc = t.workloads.iter().filter(|w| !w.ports.is_empty()).count();
            assert_eq!(kinds["Service"], with_svc, "{}", t.name);
            assert_eq!(kinds["Namespace"], t.namespaces.len());
            let sts = t
                .workloads
                .iter()
                .filter(|w| w.kind == Kind::StatefulSet)
                .count();
            assert_eq!(kinds.get("StatefulSet").copied().unwrap_or(0), sts);
            assert_eq!(
                kinds.get("ServiceEntry").copied().unwrap_or(0),
                t.externals.len()
            );
            assert_eq!(kinds["ConfigMap"], 1);
            // The mesh config inside parses too.
            let cm = serde_yaml::Deserializer::from_str(&y).next().unwrap();
            let v: serde_json::Value = serde::Deserialize::deserialize(cm).unwrap();
            let mesh: serde_json::Value =
                serde_yaml::from_str(v["data"]["mesh"].as_str().unwrap()).unwrap();
            assert_eq!(mesh["rootNamespace"], "istio-system");
        }
        // Ports named by number are quoted strings.
        assert!(social_network(1, 1).yaml().contains("name: \"9090\""));
    }

    #[test]
    fn endpoint_slices_of_ports_named_by_number_parse() {
        let t = social_network(1, 1);
        let mut world = World {
            services: t.services(),
            ..World::default()
        };
        for w in 0..t.workloads.len() {
            for (r, ip) in t.pod_ips(w).into_iter().enumerate() {
                let wl = &t.workloads[w];
                world.pods.push(Pod {
                    namespace: wl.namespace.clone(),
                    name: format!("{}-{r}", wl.name),
                    labels: labels(&[("app", &wl.name)]),
                    ip,
                    service_account: "default".into(),
                    ready: true,
                    terminating: false,
                    proxied: true,
                    gateway: None,
                });
            }
        }
        // Services, pods and the EndpointSlices.
        let y = world.spec_yaml();
        let mut slices = 0;
        for doc in serde_yaml::Deserializer::from_str(&y) {
            let v: serde_json::Value = serde::Deserialize::deserialize(doc).unwrap();
            if v["kind"] == "EndpointSlice" || v["kind"] == "Service" {
                let ports = if v["kind"] == "Service" {
                    &v["spec"]["ports"]
                } else {
                    slices += 1;
                    &v["ports"]
                };
                assert!(ports[0]["name"].is_string(), "{v}");
            }
        }
        assert_eq!(slices, 26);
    }

    #[test]
    fn realistic_sized_has_the_services_and_exactly_the_sidecars() {
        let t = realistic_sized(300, 5_000, 22);
        let services = t.services().len() + t.externals.len();
        assert!(services >= 300, "{services} services");
        assert!(realistic(t.scale - 1, 22).services().len() < 300);
        let injected: usize = t
            .workloads
            .iter()
            .filter(|w| w.injected)
            .map(|w| w.replicas)
            .sum();
        assert_eq!(injected, 5_000);
        assert!(t.workloads.iter().all(|w| w.replicas >= 1));
        // Not injected (gateways, tracing) keep their replicas.
        let base = realistic(t.scale, 22);
        for (a, b) in t.workloads.iter().zip(&base.workloads) {
            if !a.injected {
                assert_eq!(a.replicas, b.replicas, "{}", a.name);
            }
        }
    }

    #[test]
    fn pod_ips_are_unique() {
        let t = realistic(2, 3);
        let mut all = BTreeSet::new();
        for w in 0..t.workloads.len() {
            for ip in t.pod_ips(w) {
                assert!(all.insert(ip.clone()), "{ip} twice");
            }
        }
    }
}
