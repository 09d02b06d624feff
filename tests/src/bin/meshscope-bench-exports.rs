//! `meshscope-bench-exports`: the effect of `kubectl meshscope apply
//! --exports`, and of the discoverySelectors `audit` recommends, measured on
//! a real istiod with simulated sidecars (run by `tests/bench/run exports`).
//!
//! The mesh (seeded, `--scale` k): no Sidecar anywhere; a hub namespace
//! serving auth and config (each with a DestinationRule of two subsets and a
//! VirtualService sending all traffic to one) and six DNS ServiceEntries
//! (three called); 13 app namespaces, each with a client calling the hubs
//! (most of them), an external host or two, and a Zipf-drawn long tail of
//! other app namespaces' services (3·k each, one pod apiece, calling
//! nothing); two injected namespaces that nobody calls and that call
//! nothing; and two namespaces with no injection and no traffic holding
//! 600·k plain Services and pods (no proxy) each.
//!
//! It measures, before and after `apply --exports` from the access log of
//! those calls: each proxy's xDS (p50, p95, max by role), which proxies a
//! change to auth's VirtualService is pushed to and the bytes pushed, and
//! that every observed edge keeps its cluster and, through a
//! VirtualService, its route. Then istiod's RSS and CPU on a fresh start
//! without and with the discoverySelectors `audit` prints (MS0020). Prints
//! markdown tables and, last, one JSON line; exits 1 when a target is
//! missed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use meshscope_e2e::bench::run_plugin as meshscope;
use meshscope_e2e::bench::{Rng, Zipf};
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::fidelity::{
    destination_rule_doc, service_entry_doc, virtual_service_doc, Builder, Scenario, DEFAULT_MESH,
    ROOT_NS,
};
use meshscope_e2e::istiod::{Istiod, ProcessUsage, ENGINE_VERSION};
use meshscope_e2e::outbound_text_line;
use meshscope_e2e::world::{labels, Pod, SvcPort};
use meshscope_e2e::xds::{Sim, SimOptions};
use serde::Serialize;

const TYPES: [&str; 4] = ["cds", "lds", "rds", "eds"];
const APP_NS: usize = 13;
const IDLE_NS: usize = 2;
const DARK_NS: usize = 2;
/// Plain Services (and pods) per dark namespace, at scale 1.
const DARK_PER_NS: usize = 600;
const EXTERNAL: usize = 6;
const HUB_PORT: u32 = 8080;
const APP_PORT: u32 = 9080;

/// One observed call: the caller's proxy (`ns/pod`) and IP, the host and
/// port, and for a call through a VirtualService the subset cluster its
/// route sends to.
#[derive(Clone, Debug)]
struct Edge {
    caller: String,
    ip: String,
    host: String,
    port: u32,
    routed: Option<String>,
}

/// The generated mesh: the world, its namespaces by kind, the calls, each
/// injected pod's role, and the VirtualService the fan-out is measured on.
struct Mesh {
    sc: Scenario,
    hub: String,
    mesh_ns: Vec<String>,
    dark_ns: Vec<String>,
    edges: Vec<Edge>,
    roles: BTreeMap<String, &'static str>,
    /// (namespace, name) of every Istio object, for istiod's wait.
    configs: Vec<(String, String)>,
}

/// An injected pod (IPs of their own block: the fidelity Builder's
/// allots 253).
fn add_pod(sc: &mut Builder, ns: &str, name: &str, app: &str, version: &str) -> String {
    add_pod_with(sc, ns, name, app, version, true)
}

/// A pod, injected or plain.
fn add_pod_with(
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

fn host(name: &str, ns: &str) -> String {
    format!("{name}.{ns}.svc.cluster.local")
}

fn ext_host(tag: u64, k: usize) -> String {
    format!("ext-{k}.bench{tag}.example.com")
}

/// The hub namespace: auth and config (two pods, v1 and v2, a
/// DestinationRule with both subsets, a VirtualService to one), and the
/// DNS ServiceEntries.
fn hub(m: &mut Mesh, b: &mut Builder, tag: u64) {
    let ns = m.hub.clone();
    for (svc, subset) in [("auth", "v1"), ("config", "v2")] {
        b.service(&ns, svc, vec![SvcPort::new("http", HUB_PORT)], false);
        for v in ["v1", "v2"] {
            add_pod(b, &ns, &format!("{svc}-{v}"), svc, v);
            m.roles.insert(format!("{ns}/{svc}-{v}"), "hub");
        }
        let h = host(svc, &ns);
        b.istio(destination_rule_doc(&ns, svc, &h, &["v1", "v2"], &None));
        let dest = (h.clone(), Some(HUB_PORT), Some(subset.to_string()));
        b.istio(virtual_service_doc(
            &ns,
            svc,
            &[h],
            &[dest],
            None,
            &[],
            &None,
        ));
        m.configs.push((ns.clone(), svc.to_string()));
    }
    for k in 0..EXTERNAL {
        let hosts = [ext_host(tag, k)];
        let name = format!("ext-{k}");
        let ports = [(443, "tls", "TLS")];
        b.istio(service_entry_doc(
            &ns,
            &name,
            &hosts,
            &ports,
            "DNS",
            &[],
            &[],
            &None,
        ));
        m.configs.push((ns.clone(), name));
    }
}

/// App namespaces (a client, `per_ns` services of one pod each) and idle
/// ones (services nobody calls); returns the app services' hosts.
fn apps(m: &mut Mesh, b: &mut Builder, per_ns: usize) -> Vec<String> {
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
fn dark(m: &mut Mesh, b: &mut Builder, n: usize) {
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
fn calls(m: &mut Mesh, rng: &mut Rng, app_hosts: &[String], tag: u64) {
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

fn build_mesh(scale: usize, seed: u64, tag: u64) -> Mesh {
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
fn access_log(m: &Mesh) -> String {
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

// === measuring ===

/// A distribution of per-proxy bytes.
#[derive(Clone, Debug, Default, Serialize)]
struct Dist {
    proxies: usize,
    p50: u64,
    p95: u64,
    max: u64,
    worst: String,
    /// type -> p50 bytes
    p50_by_type: BTreeMap<String, u64>,
}

fn pct(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn dist(sims: &[(String, meshscope_e2e::xds::ProxyConfig)]) -> Dist {
    let mut totals: Vec<u64> = sims.iter().map(|(_, p)| p.total_bytes).collect();
    totals.sort_unstable();
    let worst = sims.iter().max_by_key(|(_, p)| p.total_bytes);
    let mut d = Dist {
        proxies: sims.len(),
        p50: pct(&totals, 0.5),
        p95: pct(&totals, 0.95),
        max: totals.last().copied().unwrap_or(0),
        worst: worst.map(|(k, _)| k.clone()).unwrap_or_default(),
        ..Dist::default()
    };
    for t in TYPES {
        let mut v: Vec<u64> = sims.iter().map(|(_, p)| p.total(t).bytes).collect();
        v.sort_unstable();
        d.p50_by_type.insert(t.into(), pct(&v, 0.5));
    }
    d
}

/// Per role, and `all`.
fn by_role(sim: &Sim, roles: &BTreeMap<String, &'static str>) -> BTreeMap<String, Dist> {
    let snaps: Vec<(String, &'static str, _)> = sim
        .proxies()
        .iter()
        .map(|p| {
            let role = roles.get(p.key()).copied().unwrap_or("other");
            (p.key().to_string(), role, p.snapshot())
        })
        .collect();
    let mut out = BTreeMap::new();
    for role in ["all", "caller", "hub", "leaf", "idle"] {
        let of: Vec<_> = snaps
            .iter()
            .filter(|(_, r, _)| role == "all" || *r == role)
            .map(|(k, _, p)| (k.clone(), p.clone()))
            .collect();
        out.insert(role.to_string(), dist(&of));
    }
    out
}

/// The edges whose caller lacks the callee's cluster or, through a
/// VirtualService, a route naming its subset cluster.
fn lost_edges(sim: &Sim, edges: &[Edge]) -> Vec<String> {
    let mut lost = Vec::new();
    for e in edges {
        let Some(p) = sim.get(&e.caller) else {
            lost.push(format!("{}: no proxy", e.caller));
            continue;
        };
        let want = format!("outbound|{}||{}", e.port, e.host);
        if !p.cluster_names().contains(&want) {
            lost.push(format!("{} lost {want}", e.caller));
        }
        if let Some(sub) = &e.routed {
            if !p.referenced_clusters().values().any(|cs| cs.contains(sub)) {
                lost.push(format!("{} lost its route to {sub}", e.caller));
            }
        }
    }
    lost
}

#[derive(Clone, Debug, Default, Serialize)]
struct PushResult {
    fanout: usize,
    bytes: u64,
}

/// Patches auth's VirtualService (a new timeout), waits for the pushes to
/// settle, and counts the proxies that received anything since.
fn vs_push(c: &Cluster, sim: &Sim, hub: &str, timeout_s: u32) -> Result<PushResult> {
    let h = host("auth", hub);
    let patch = serde_json::json!({"spec": {"http": [{"timeout": format!("{timeout_s}s"),
        "route": [{"destination": {"host": h, "port": {"number": HUB_PORT}, "subset": "v1"}}]}]}});
    let p = patch.to_string();
    let args = [
        "patch",
        "virtualservice",
        "auth",
        "-n",
        hub,
        "--type=merge",
        "-p",
        &p,
    ];
    let t0 = Instant::now();
    c.kubectl_ok(&args, None);
    sim.wait_push_after(t0, Duration::from_secs(3), Duration::from_secs(300))?;
    let mut r = PushResult::default();
    for p in sim.proxies() {
        let pushes = p.pushes_since(t0);
        if !pushes.is_empty() {
            r.fanout += 1;
            r.bytes += pushes.iter().map(|x| x.bytes).sum::<u64>();
        }
    }
    Ok(r)
}

/// The proxies of the namespaces auth's VirtualService is exported to
/// (every proxy without exportTo), and that list.
fn exported_to(c: &Cluster, sim: &Sim, hub: &str) -> (usize, Vec<String>) {
    let out = c.kubectl_ok(
        &["get", "virtualservice", "auth", "-n", hub, "-o", "json"],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let list: Vec<String> = v["spec"]["exportTo"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str())
        .map(|x| if x == "." { hub.to_string() } else { x.into() })
        .collect();
    let n = sim
        .proxies()
        .iter()
        .filter(|p| {
            list.is_empty() || list.contains(&p.spec().namespace) || list.iter().any(|x| x == "*")
        })
        .count();
    (n, list)
}

// === istiod, the plugin, the phases ===

/// ConfigMap istio-system/istio with `mesh` as its `mesh` key.
fn set_mesh(c: &Cluster, mesh: &str) {
    let indented: String = mesh.lines().map(|l| format!("    {l}\n")).collect();
    c.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: istio\n  namespace: {ROOT_NS}\ndata:\n  mesh: |-\n{indented}"
    ));
}

/// The hosts istiod must have before proxies connect: every Service (the
/// dark namespaces' only when istiod watches them) and ServiceEntry host.
fn wanted_services(m: &Mesh, with_dark: bool) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> =
        m.sc.world
            .services
            .iter()
            .filter(|s| with_dark || !m.dark_ns.contains(&s.namespace))
            .map(|s| (s.namespace.clone(), host(&s.name, &s.namespace)))
            .collect();
    for e in &m.edges {
        if e.port == 443 {
            v.push((m.hub.clone(), e.host.clone()));
        }
    }
    v.sort();
    v.dedup();
    v
}

/// A fresh istiod that has the whole mesh, and a simulated sidecar per
/// injected pod (route references decoded) once their config settles.
fn start(c: &Cluster, m: &Mesh, with_dark: bool) -> Result<(Istiod, Sim)> {
    let istiod = Istiod::start(c)?;
    istiod.wait_for(
        &wanted_services(m, with_dark),
        &m.configs,
        Duration::from_secs(180),
    )?;
    let specs =
        m.sc.world
            .pods
            .iter()
            .filter(|p| m.roles.contains_key(&format!("{}/{}", p.namespace, p.name)))
            .map(Pod::proxy_spec)
            .collect();
    let options = SimOptions {
        concurrency: 8,
        references: true,
        ..SimOptions::default()
    };
    let sim = Sim::connect_with(&istiod.grpc_url(), specs, options)?;
    sim.wait_stable(Duration::from_secs(2), Duration::from_secs(600))?;
    Ok((istiod, sim))
}

#[derive(Debug, Default, Serialize)]
struct Results {
    scale: usize,
    seed: u64,
    proxies: usize,
    mesh_services: usize,
    dark_services: usize,
    dark_ns: Vec<String>,
    edges: usize,
    routed_edges: usize,
    before: BTreeMap<String, Dist>,
    after: BTreeMap<String, Dist>,
    push_before: PushResult,
    push_after: PushResult,
    /// auth's VirtualService after apply --exports, and the proxies there.
    vs_exported_to: Vec<String>,
    vs_exported_proxies: usize,
    lost_before: Vec<String>,
    lost_after: Vec<String>,
    lost_with_selectors: Vec<String>,
    exports_narrowed: usize,
    exports_apply_s: f64,
    ms0020: usize,
    dropped: Vec<String>,
    istiod_without: ProcessUsage,
    istiod_with: ProcessUsage,
    heap_mb_without: f64,
    heap_mb_with: f64,
    /// Services in istiod's registry: (all, of the dark namespaces).
    registry_without: (usize, usize),
    registry_with: (usize, usize),
    p50_with_selectors: u64,
}

/// `apply --exports -n NS` for each namespace of the mesh; the objects
/// it narrowed, as its summary counts them (`apply --exports: N
/// configured, …`).
fn apply_exports(c: &Cluster, m: &Mesh, log: &Path) -> Result<usize> {
    let log = log.to_str().context("log path")?;
    let mut written = 0;
    for ns in m.mesh_ns.iter().chain(&m.dark_ns) {
        let args = ["apply", "--exports", "-n", ns, "--access-log", log];
        let (_, err) = meshscope(c, &args)?;
        let summary = err
            .lines()
            .find_map(|l| l.strip_prefix("apply --exports: "))
            .with_context(|| format!("apply --exports -n {ns} printed no summary:\n{err}"))?;
        written += summary
            .split(", ")
            .filter_map(|part| part.strip_suffix(" configured"))
            .filter_map(|n| n.parse::<usize>().ok())
            .sum::<usize>();
    }
    Ok(written)
}

/// Before and after `apply --exports`: xDS by role, safety, fan-out.
fn exports_phase(c: &Cluster, m: &Mesh, log: &Path, r: &mut Results) -> Result<()> {
    eprintln!(
        "[exports-bench] istiod and {} sidecars, no exportTo",
        m.roles.len()
    );
    let (istiod, sim) = start(c, m, true)?;
    r.before = by_role(&sim, &m.roles);
    r.lost_before = lost_edges(&sim, &m.edges);
    r.push_before = vs_push(c, &sim, &m.hub, 5)?;
    eprintln!("[exports-bench] before: {:?}", r.before["all"]);
    let t0 = Instant::now();
    r.exports_narrowed = apply_exports(c, m, log)?;
    sim.wait_push_after(t0, Duration::from_secs(5), Duration::from_secs(600))?;
    r.exports_apply_s = t0.elapsed().as_secs_f64();
    r.after = by_role(&sim, &m.roles);
    r.lost_after = lost_edges(&sim, &m.edges);
    (r.vs_exported_proxies, r.vs_exported_to) = exported_to(c, &sim, &m.hub);
    r.push_after = vs_push(c, &sim, &m.hub, 6)?;
    eprintln!("[exports-bench] after: {:?}", r.after["all"]);
    sim.close();
    drop(istiod);
    Ok(())
}

/// `audit -A` with the access log: the MS0020 findings, the namespaces
/// its discoverySelectors drop, and the YAML block it prints.
fn audit_selectors(c: &Cluster, log: &Path) -> Result<(usize, Vec<String>, String)> {
    let log = log.to_str().context("log path")?;
    let args = ["audit", "-A", "-o", "json", "--fail-on", "none"];
    let mut all = args.to_vec();
    all.extend(["--access-log", log, "--istio-version", ENGINE_VERSION]);
    let (out, err) = meshscope(c, &all)?;
    let v: serde_json::Value = serde_json::from_str(&out).context("audit -o json")?;
    let ms0020 = v["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["code"] == "MS0020")
        .count();
    let dropped: Vec<String> = err
        .lines()
        .find_map(|l| l.split_once("stops istiod watching "))
        .and_then(|(_, rest)| rest.split(" (MS0020)").next())
        .map(|s| s.split(", ").map(String::from).collect())
        .unwrap_or_default();
    let mut lines = err.lines().skip_while(|l| *l != "discoverySelectors:");
    let Some(first) = lines.next() else {
        bail!("audit printed no discoverySelectors block:\n{err}");
    };
    let mut yaml = format!("{first}\n");
    for l in lines.take_while(|l| l.starts_with("- ") || l.starts_with("  ")) {
        yaml.push_str(l);
        yaml.push('\n');
    }
    Ok((ms0020, dropped, yaml))
}

/// The Services istiod's registry holds (`/debug/registryz`): all, and
/// those of the dark namespaces.
fn registry(istiod: &Istiod, dark: &[String]) -> Result<(usize, usize)> {
    let v: serde_json::Value = serde_json::from_str(&istiod.debug("/debug/registryz")?)
        .context("/debug/registryz is JSON")?;
    let hosts: Vec<&str> = v
        .as_array()
        .context("/debug/registryz is a list")?
        .iter()
        .filter_map(|s| s["hostname"].as_str())
        .collect();
    let in_dark = hosts
        .iter()
        .filter(|h| {
            dark.iter()
                .any(|ns| h.ends_with(&format!(".{ns}.svc.cluster.local")))
        })
        .count();
    Ok((hosts.len(), in_dark))
}

/// istiod's heap in use, MB (go_memstats_heap_inuse_bytes).
fn heap_mb(istiod: &Istiod) -> f64 {
    istiod
        .counter("go_memstats_heap_inuse_bytes")
        .map(|b| (b / 1e5).round() / 10.0)
        .unwrap_or(0.0)
}

/// istiod on a fresh start with every sidecar connected, without and with
/// the discoverySelectors `audit` recommends (exports applied in both).
fn selectors_phase(c: &Cluster, m: &Mesh, log: &Path, r: &mut Results) -> Result<()> {
    eprintln!("[exports-bench] istiod without discoverySelectors");
    let (istiod, sim) = start(c, m, true)?;
    std::thread::sleep(Duration::from_secs(3));
    (r.istiod_without, r.heap_mb_without) = (istiod.usage()?, heap_mb(&istiod));
    r.registry_without = registry(&istiod, &m.dark_ns)?;
    sim.close();
    drop(istiod);
    let (n, dropped, yaml) = audit_selectors(c, log)?;
    (r.ms0020, r.dropped) = (n, dropped);
    eprintln!("[exports-bench] istiod with\n{yaml}");
    set_mesh(c, &format!("{DEFAULT_MESH}{yaml}"));
    let (istiod, sim) = start(c, m, false)?;
    std::thread::sleep(Duration::from_secs(3));
    (r.istiod_with, r.heap_mb_with) = (istiod.usage()?, heap_mb(&istiod));
    r.registry_with = registry(&istiod, &m.dark_ns)?;
    r.lost_with_selectors = lost_edges(&sim, &m.edges);
    r.p50_with_selectors = by_role(&sim, &m.roles)["all"].p50;
    sim.close();
    drop(istiod);
    Ok(())
}

// === report ===

fn kb(b: u64) -> String {
    format!("{:.1} KB", b as f64 / 1000.0)
}

fn mb(kb: u64) -> String {
    format!("{} MB", kb / 1024)
}

fn print_sizes(r: &Results) {
    println!("| role | proxies | phase | p50 xDS per proxy | p95 | max (worst proxy) | CDS p50 | LDS p50 | RDS p50 | EDS p50 |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for role in ["all", "caller", "hub", "leaf", "idle"] {
        for (phase, d) in [("before", &r.before[role]), ("after", &r.after[role])] {
            let t = |k: &str| kb(d.p50_by_type.get(k).copied().unwrap_or(0));
            println!(
                "| {role} | {} | {phase} | {} | {} | {} ({}) | {} | {} | {} | {} |",
                d.proxies,
                kb(d.p50),
                kb(d.p95),
                kb(d.max),
                d.worst,
                t("cds"),
                t("lds"),
                t("rds"),
                t("eds")
            );
        }
    }
}

/// (measure, before, after, target, met) rows; also the exit status.
fn targets(r: &Results) -> Vec<[String; 5]> {
    let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
    let (b, a) = (&r.push_before, &r.push_after);
    // Exactly the proxies of the namespaces the VirtualService is exported
    // to (no Sidecar here: each of them imports it), and fewer than before.
    let fan_ok = a.fanout == r.vs_exported_proxies && a.fanout < b.fanout;
    let (p50b, p50a) = (r.before["all"].p50, r.after["all"].p50);
    let (rss0, rss1) = (r.istiod_without.rss_kb, r.istiod_with.rss_kb);
    let dark_dropped = r.dark_ns.iter().all(|ns| r.dropped.contains(ns));
    vec![
        [
            format!("observed edges lost ({} edges, {} through a VirtualService; after: exports, then also discoverySelectors)", r.edges, r.routed_edges),
            r.lost_before.len().to_string(),
            format!("{}, {}", r.lost_after.len(), r.lost_with_selectors.len()),
            "0".into(),
            yes(r.lost_after.is_empty() && r.lost_with_selectors.is_empty() && r.lost_before.is_empty()),
        ],
        [
            format!("auth VirtualService change pushed to (of {} proxies)", r.proxies),
            format!("{} ({})", b.fanout, kb(b.bytes)),
            format!("{} ({})", a.fanout, kb(a.bytes)),
            format!("= {} (the proxies in {}), < before", r.vs_exported_proxies, r.vs_exported_to.join(",")),
            yes(fan_ok),
        ],
        [
            "p50 xDS per proxy".into(),
            kb(p50b),
            kb(p50a),
            "after < before".into(),
            yes(p50a < p50b),
        ],
        [
            format!(
                "Services in istiod's registry (of them in the {} namespaces with no proxy and no traffic)",
                r.dark_ns.len()
            ),
            format!("{} ({})", r.registry_without.0, r.registry_without.1),
            format!("{} ({})", r.registry_with.0, r.registry_with.1),
            format!("the {} namespaces dropped: none of their {} Services", r.dark_ns.len(), r.dark_services),
            yes(dark_dropped && r.registry_without.1 == r.dark_services && r.registry_with.1 == 0),
        ],
        [
            format!("istiod RSS, fresh start, sidecars connected (without / with discoverySelectors dropping {} namespaces)", r.dropped.len()),
            mb(rss0),
            mb(rss1),
            "with < without".into(),
            yes(rss1 < rss0),
        ],
        [
            "apply --exports, one namespace at a time: objects narrowed; until pushes settled".into(),
            "-".into(),
            format!("{}; {:.1} s", r.exports_narrowed, r.exports_apply_s),
            "-".into(),
            "n.a.".into(),
        ],
    ]
}

fn print_targets(rows: &[[String; 5]]) {
    println!("| measure | before | after | target | met |");
    println!("|---|---|---|---|---|");
    for [m, b, a, t, ok] in rows {
        println!("| {m} | {b} | {a} | {t} | {ok} |");
    }
}

fn print_istiod(r: &Results) {
    println!("| istiod (exports applied) | namespaces watched | RSS | peak RSS | Go heap in use | CPU since start |");
    println!("|---|---|---|---|---|---|");
    let n = r.mesh_services;
    for (what, u, heap, watched) in [
        (
            "without discoverySelectors",
            &r.istiod_without,
            r.heap_mb_without,
            format!("all ({n} mesh Services + {} plain)", r.dark_services),
        ),
        (
            "with audit's discoverySelectors",
            &r.istiod_with,
            r.heap_mb_with,
            format!("all but {}", r.dropped.join(", ")),
        ),
    ] {
        println!(
            "| {what} | {watched} | {} | {} | {heap:.1} MB | {:.1} s |",
            mb(u.rss_kb),
            mb(u.hwm_kb),
            u.cpu_s
        );
    }
}

fn json(r: &Results, met: bool) -> serde_json::Value {
    let d = |m: &BTreeMap<String, Dist>, k: &str| {
        let x = &m[k];
        serde_json::json!({"proxies": x.proxies, "p50": x.p50, "p95": x.p95, "max": x.max, "worst": x.worst})
    };
    let roles = ["all", "caller", "hub", "leaf", "idle"];
    serde_json::json!({
        "scale": r.scale, "seed": r.seed, "proxies": r.proxies,
        "mesh_services": r.mesh_services, "dark_services": r.dark_services,
        "edges": r.edges, "routed_edges": r.routed_edges,
        "before": roles.iter().map(|k| (k.to_string(), d(&r.before, k))).collect::<serde_json::Map<_, _>>(),
        "after": roles.iter().map(|k| (k.to_string(), d(&r.after, k))).collect::<serde_json::Map<_, _>>(),
        "fanout_before": r.push_before.fanout, "fanout_after": r.push_after.fanout,
        "push_bytes_before": r.push_before.bytes, "push_bytes_after": r.push_after.bytes,
        "vs_exported_to": r.vs_exported_to, "vs_exported_proxies": r.vs_exported_proxies,
        "lost_before": r.lost_before.len(), "lost_after": r.lost_after.len(),
        "lost_with_selectors": r.lost_with_selectors.len(),
        "exports_narrowed": r.exports_narrowed, "exports_apply_s": (r.exports_apply_s * 10.0).round() / 10.0,
        "ms0020": r.ms0020, "dropped": r.dropped,
        "istiod_rss_mb_without": r.istiod_without.rss_kb / 1024, "istiod_rss_mb_with": r.istiod_with.rss_kb / 1024,
        "istiod_hwm_mb_without": r.istiod_without.hwm_kb / 1024, "istiod_hwm_mb_with": r.istiod_with.hwm_kb / 1024,
        "istiod_cpu_s_without": r.istiod_without.cpu_s, "istiod_cpu_s_with": r.istiod_with.cpu_s,
        "heap_mb_without": r.heap_mb_without, "heap_mb_with": r.heap_mb_with,
        "registry_services_without": r.registry_without.0, "registry_services_with": r.registry_with.0,
        "registry_dark_services_without": r.registry_without.1, "registry_dark_services_with": r.registry_with.1,
        "p50_with_selectors": r.p50_with_selectors,
        "met": met,
    })
}

// === main ===

fn args() -> Result<(usize, u64)> {
    let (mut scale, mut seed) = (1, 20);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--scale" => scale = args.next().context("--scale N")?.parse()?,
            "--seed" => seed = args.next().context("--seed N")?.parse()?,
            "-h" | "--help" => {
                println!("usage: meshscope-bench-exports [--scale N] [--seed N]   (default: --scale 1 --seed 20)\nNeeds the test control plane (tests/cluster/up) and istiod (tests/istiod/build).");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    Ok((scale, seed))
}

fn run(c: &Cluster, m: &Mesh, r: &mut Results) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("access.log");
    std::fs::write(&log, access_log(m))?;
    set_mesh(c, DEFAULT_MESH);
    eprintln!(
        "[exports-bench] applying {} namespaces, {} Services, {} pods",
        m.sc.world.namespaces.len(),
        m.sc.world.services.len(),
        m.sc.world.pods.len()
    );
    m.sc.world.apply(c)?;
    exports_phase(c, m, &log, r)?;
    selectors_phase(c, m, &log, r)
}

fn main() -> std::process::ExitCode {
    meshscope_e2e::tool_exit(try_main())
}

fn try_main() -> Result<()> {
    let (scale, seed) = args()?;
    let tag = u64::from(std::process::id()) % 1000;
    let m = build_mesh(scale, seed, tag);
    let mut r = Results {
        scale,
        seed,
        proxies: m.roles.len(),
        dark_services: DARK_PER_NS * scale * DARK_NS,
        dark_ns: m.dark_ns.clone(),
        edges: m.edges.len(),
        routed_edges: m.edges.iter().filter(|e| e.routed.is_some()).count(),
        ..Results::default()
    };
    r.mesh_services = m.sc.world.services.len() - r.dark_services;
    let c = Cluster::shared();
    let outcome = run(c, &m, &mut r);
    eprintln!("[exports-bench] cleaning up");
    set_mesh(c, DEFAULT_MESH);
    if let Err(e) = m.sc.world.delete(c) {
        eprintln!("[exports-bench] cleanup: {e:#}");
    }
    outcome?;
    for l in r
        .lost_before
        .iter()
        .chain(&r.lost_after)
        .chain(&r.lost_with_selectors)
    {
        eprintln!("[exports-bench] SAFETY: {l}");
    }
    let rows = targets(&r);
    let met = rows.iter().all(|row| row[4] != "no");
    print_sizes(&r);
    println!();
    print_targets(&rows);
    println!();
    print_istiod(&r);
    println!("{}", json(&r, met));
    if !met {
        std::process::exit(1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run that meets every target (the figures of the committed run).
    fn good() -> Results {
        let dist = |p50| Dist {
            p50,
            ..Dist::default()
        };
        Results {
            edges: 51,
            routed_edges: 22,
            before: [("all".to_string(), dist(2_339_500))].into(),
            after: [("all".to_string(), dist(35_900))].into(),
            push_before: PushResult {
                fanout: 62,
                bytes: 131_700_000,
            },
            push_after: PushResult {
                fanout: 48,
                bytes: 1_700_000,
            },
            vs_exported_proxies: 48,
            dark_ns: vec!["dark-0".into(), "dark-1".into()],
            dropped: vec!["dark-0".into(), "dark-1".into()],
            dark_services: 1200,
            registry_without: (1300, 1200),
            registry_with: (100, 0),
            istiod_without: ProcessUsage {
                rss_kb: 400_000,
                ..ProcessUsage::default()
            },
            istiod_with: ProcessUsage {
                rss_kb: 300_000,
                ..ProcessUsage::default()
            },
            ..Results::default()
        }
    }

    /// A change that spoils one target of a good run.
    type Spoil = fn(&mut Results);

    /// The rows `r` misses, by their measure's first words.
    fn missed(r: &Results) -> Vec<String> {
        targets(r)
            .iter()
            .filter(|row| row[4] == "no")
            .map(|row| row[0].split(" (").next().unwrap_or("").to_string())
            .collect()
    }

    #[test]
    fn a_good_run_meets_every_target_and_each_miss_is_named() {
        assert!(missed(&good()).is_empty(), "{:?}", missed(&good()));
        let cases: [(&str, Spoil); 7] = [
            ("observed edges lost", |r| {
                r.lost_after.push("a -> b".into())
            }),
            ("observed edges lost", |r| {
                r.lost_with_selectors.push("a -> b".into())
            }),
            // Fan-out is an equality: fewer than the exported namespaces'
            // proxies (a push that reached none of them) misses too.
            ("auth VirtualService change pushed to", |r| {
                r.push_after.fanout = 0
            }),
            ("auth VirtualService change pushed to", |r| {
                r.push_after.fanout = 50
            }),
            ("p50 xDS per proxy", |r| {
                r.after.get_mut("all").unwrap().p50 = 3_000_000
            }),
            ("Services in istiod's registry", |r| {
                r.registry_with = (1300, 1)
            }),
            ("istiod RSS, fresh start, sidecars connected", |r| {
                r.istiod_with.rss_kb = 500_000
            }),
        ];
        for (name, spoil) in cases {
            let mut r = good();
            spoil(&mut r);
            assert_eq!(missed(&r), [name]);
        }
    }
}
