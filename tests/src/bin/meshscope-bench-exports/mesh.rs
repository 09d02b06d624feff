//! The generated mesh: a hub namespace, app namespaces with a client
//! each, idle and dark namespaces, and the calls the clients make.

use std::collections::{BTreeMap, BTreeSet};

use meshscope_e2e::bench::{Rng, Zipf};
use meshscope_e2e::fidelity::{
    Builder, DestinationRuleDoc, Scenario, ServiceEntryDoc, VirtualServiceDoc, DEFAULT_MESH,
};
use meshscope_e2e::outbound_text_line;
use meshscope_e2e::world::{labels, Pod, SvcPort};

pub const APP_NS: usize = 13;
pub const IDLE_NS: usize = 2;
pub const DARK_NS: usize = 2;
/// Plain Services (and pods) per dark namespace, at scale 1.
pub const DARK_PER_NS: usize = 600;
pub const EXTERNAL: usize = 6;
pub const HUB_PORT: u32 = 8080;
pub const APP_PORT: u32 = 9080;

/// One observed call: the caller's proxy (`ns/pod`) and IP, the host and
/// port, and for a call through a VirtualService the subset cluster its
/// route sends to.
#[derive(Clone, Debug)]
pub struct Edge {
    pub caller: String,
    pub ip: String,
    pub host: String,
    pub port: u32,
    pub routed: Option<String>,
}

/// The generated mesh: the world, its namespaces by kind, the calls, each
/// injected pod's role, and the VirtualService the fan-out is measured on.
pub struct Mesh {
    pub sc: Scenario,
    pub hub: String,
    pub mesh_ns: Vec<String>,
    pub dark_ns: Vec<String>,
    pub edges: Vec<Edge>,
    pub roles: BTreeMap<String, &'static str>,
    /// (namespace, name) of every Istio object, for istiod's wait.
    pub configs: Vec<(String, String)>,
}

/// An injected pod (IPs of their own block: the fidelity Builder's
/// allots 253).
pub fn add_pod(sc: &mut Builder, ns: &str, name: &str, app: &str, version: &str) -> String {
    add_pod_with(sc, ns, name, app, version, true)
}

/// A pod, injected or plain.
pub fn add_pod_with(
    sc: &mut Builder,
    ns: &str,
    name: &str,
    app: &str,
    version: &str,
    proxied: bool,
) -> String {
    let n = sc.world.pods.len() as u32;
    let ip = format!(
        "10.{}.{}.{}",
        180 + n / 62_500,
        (n / 250) % 250,
        n % 250 + 1
    );
    sc.world.pods.push(Pod {
        namespace: ns.into(),
        name: name.into(),
        labels: labels(&[("app", app), ("version", version)]),
        ip: ip.clone(),
        service_account: "default".into(),
        ready: true,
        terminating: false,
        proxied,
        gateway: None,
    });
    ip
}

pub fn host(name: &str, ns: &str) -> String {
    format!("{name}.{ns}.svc.cluster.local")
}

pub fn ext_host(tag: u64, k: usize) -> String {
    format!("ext-{k}.bench{tag}.example.com")
}

/// The hub namespace: auth and config (two pods, v1 and v2, a
/// DestinationRule with both subsets, a VirtualService to one), and the
/// DNS ServiceEntries.
pub fn hub(m: &mut Mesh, b: &mut Builder, tag: u64) {
    let ns = m.hub.clone();
    for (svc, subset) in [("auth", "v1"), ("config", "v2")] {
        b.service(&ns, svc, vec![SvcPort::new("http", HUB_PORT)], false);
        for v in ["v1", "v2"] {
            add_pod(b, &ns, &format!("{svc}-{v}"), svc, v);
            m.roles.insert(format!("{ns}/{svc}-{v}"), "hub");
        }
        let h = host(svc, &ns);
        b.istio(
            DestinationRuleDoc::new(&ns, svc, &h)
                .subsets(&["v1", "v2"])
                .yaml(),
        );
        let dest = (h.clone(), Some(HUB_PORT), Some(subset.to_string()));
        b.istio(
            VirtualServiceDoc::new(&ns, svc)
                .host(h)
                .destination(dest)
                .yaml(),
        );
        m.configs.push((ns.clone(), svc.to_string()));
    }
    for k in 0..EXTERNAL {
        let name = format!("ext-{k}");
        b.istio(
            ServiceEntryDoc::new(&ns, &name)
                .host(ext_host(tag, k))
                .port(443, "tls", "TLS")
                .resolution("DNS")
                .yaml(),
        );
        m.configs.push((ns.clone(), name));
    }
}

/// App namespaces (a client, `per_ns` services of one pod each) and idle
/// ones (services nobody calls); returns the app services' hosts.
pub fn apps(m: &mut Mesh, b: &mut Builder, per_ns: usize) -> Vec<String> {
    let mut hosts = Vec::new();
    for (i, ns) in m.mesh_ns.clone().iter().enumerate().skip(1) {
        let idle = i > APP_NS;
        for j in 0..per_ns {
            let svc = format!("svc-{j}");
            b.service(ns, &svc, vec![SvcPort::new("http", APP_PORT)], false);
            add_pod(b, ns, &format!("{svc}-0"), &svc, "v1");
            m.roles
                .insert(format!("{ns}/{svc}-0"), if idle { "idle" } else { "leaf" });
            if !idle {
                hosts.push(host(&svc, ns));
            }
        }
        if !idle {
            let ip = add_pod(b, ns, "client-0", "client", "v1");
            m.roles.insert(format!("{ns}/client-0"), "caller");
            m.edges.push(Edge {
                caller: format!("{ns}/client-0"),
                ip,
                host: String::new(),
                port: 0,
                routed: None,
            });
        }
    }
    hosts
}

/// Namespaces with no injection and no traffic: `n` plain Services, each
/// with a pod that has no proxy.
pub fn dark(m: &mut Mesh, b: &mut Builder, n: usize) {
    for ns in m.dark_ns.clone() {
        b.world.namespace(&ns, labels(&[]));
        for j in 0..n {
            let svc = format!("plain-{j}");
            b.service(&ns, &svc, vec![SvcPort::new("http", 80)], false);
            add_pod_with(b, &ns, &format!("{svc}-0"), &svc, "v1", false);
        }
    }
}

/// Each client calls auth (85%), config (70%), external hosts (ext-0 at
/// 50%, ext-1 from the first app namespace, ext-2 from the next two), and
/// one or two app services drawn Zipf over all of them.
pub fn calls(m: &mut Mesh, rng: &mut Rng, app_hosts: &[String], tag: u64) {
    let zipf = Zipf::new(app_hosts.len(), 1.1);
    let clients: Vec<Edge> = std::mem::take(&mut m.edges);
    let hub = m.hub.clone();
    let mut edges = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        let mut to = |host: String, port: u32, routed: Option<String>| {
            edges.push(Edge {
                host,
                port,
                routed,
                ..c.clone()
            });
        };
        for (svc, p, subset) in [("auth", 0.85, "v1"), ("config", 0.7, "v2")] {
            if rng.unit() < p {
                let h = host(svc, &hub);
                let routed = format!("outbound|{HUB_PORT}|{subset}|{h}");
                to(h, HUB_PORT, Some(routed));
            }
        }
        if rng.unit() < 0.5 || i == 0 {
            to(ext_host(tag, 0), 443, None);
        }
        match i {
            0 => to(ext_host(tag, 1), 443, None),
            1 | 2 => to(ext_host(tag, 2), 443, None),
            _ => {}
        }
        let mut picked = BTreeSet::new();
        for _ in 0..1 + rng.below(2) {
            picked.insert(zipf.sample(rng));
        }
        for k in picked {
            to(app_hosts[k].clone(), APP_PORT, None);
        }
    }
    m.edges = edges;
}

pub fn build_mesh(scale: usize, seed: u64, tag: u64) -> Mesh {
    let ns = |kind: &str, i: usize| format!("ex{tag}-{kind}-{i:02}");
    let mut mesh_ns = vec![format!("ex{tag}-hub")];
    mesh_ns.extend((1..=APP_NS).map(|i| ns("app", i)));
    mesh_ns.extend((1..=IDLE_NS).map(|i| ns("idle", i)));
    let mut m = Mesh {
        sc: Builder::new(0).finish(String::new(), String::new()),
        hub: mesh_ns[0].clone(),
        dark_ns: (1..=DARK_NS).map(|i| ns("dark", i)).collect(),
        mesh_ns,
        edges: Vec::new(),
        roles: BTreeMap::new(),
        configs: Vec::new(),
    };
    let mut b = Builder::new(0);
    for n in &m.mesh_ns {
        b.namespace(n);
    }
    hub(&mut m, &mut b, tag);
    let app_hosts = apps(&mut m, &mut b, 3 * scale);
    dark(&mut m, &mut b, DARK_PER_NS * scale);
    calls(&mut m, &mut Rng::new(seed), &app_hosts, tag);
    m.sc = b.finish(format!("exports-{scale}x"), DEFAULT_MESH.into());
    m
}

/// One line per observed call, from the caller's pod IP.
pub fn access_log(m: &Mesh) -> String {
    let mut log = String::new();
    for (n, e) in m.edges.iter().enumerate() {
        log.push_str(&outbound_text_line(
            n as u64,
            &e.ip,
            &e.host,
            e.port,
            "10.255.0.9:80",
        ));
    }
    log
}
