//! istiod, the plugin and the phases: before and after `apply --exports`,
//! then istiod on a fresh start without and with the discoverySelectors
//! `audit` recommends.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use meshscope_e2e::bench::run_plugin as meshscope;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::fidelity::{DEFAULT_MESH, ROOT_NS};
use meshscope_e2e::istiod::{Istiod, ENGINE_VERSION};
use meshscope_e2e::world::Pod;
use meshscope_e2e::xds::{Sim, SimOptions};

use crate::measure::{by_role, exported_to, lost_edges, vs_push};
use crate::mesh::{host, Mesh};
use crate::results::Results;

/// ConfigMap istio-system/istio with `mesh` as its `mesh` key.
pub fn set_mesh(c: &Cluster, mesh: &str) {
    let indented: String = mesh.lines().map(|l| format!("    {l}\n")).collect();
    c.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: istio\n  namespace: {ROOT_NS}\ndata:\n  mesh: |-\n{indented}"
    ));
}

/// The hosts istiod must have before proxies connect: every Service (the
/// dark namespaces' only when istiod watches them) and ServiceEntry host.
pub fn wanted_services(m: &Mesh, with_dark: bool) -> Vec<(String, String)> {
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
pub fn start(c: &Cluster, m: &Mesh, with_dark: bool) -> Result<(Istiod, Sim)> {
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

/// `apply --exports -n NS` for each namespace of the mesh; the objects
/// it narrowed, as its summary counts them (`apply --exports: N
/// configured, …`).
pub fn apply_exports(c: &Cluster, m: &Mesh, log: &Path) -> Result<usize> {
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
pub fn exports_phase(c: &Cluster, m: &Mesh, log: &Path, r: &mut Results) -> Result<()> {
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
pub fn audit_selectors(c: &Cluster, log: &Path) -> Result<(usize, Vec<String>, String)> {
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
pub fn registry(istiod: &Istiod, dark: &[String]) -> Result<(usize, usize)> {
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
pub fn heap_mb(istiod: &Istiod) -> f64 {
    istiod
        .counter("go_memstats_heap_inuse_bytes")
        .map(|b| (b / 1e5).round() / 10.0)
        .unwrap_or(0.0)
}

/// istiod on a fresh start with every sidecar connected, without and with
/// the discoverySelectors `audit` recommends (exports applied in both).
pub fn selectors_phase(c: &Cluster, m: &Mesh, log: &Path, r: &mut Results) -> Result<()> {
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
