//! A generated topology (`realistic`, `social-network`) at one scale,
//! before and after `kubectl meshscope apply -A`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use meshscope_e2e::bench::run_plugin as meshscope;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::istiod::{Istiod, ENGINE_VERSION};
use meshscope_e2e::meshgen::{self, Topology};
use meshscope_e2e::world::Pod;
use meshscope_e2e::xds::{Sim, SimOptions};
use meshscope_e2e::xdsbench::{lost_edges, measured_push, probe_vs};

use crate::measure::{calibrate, engine_snapshot, roles_of};
use crate::probe::Probe;
use crate::reference::parse_waited;
use crate::summary::Summary;

/// One scale of a generated topology, before and after `apply -A`.
pub fn run_topology(c: &Cluster, t: &Topology, work: &Path) -> Result<Summary> {
    let tag = format!("{} {}x", t.name, t.scale);
    eprintln!("[istiod-bench] {tag}: removing an earlier run's namespaces");
    meshgen::cleanup(c, t);
    eprintln!(
        "[istiod-bench] {tag}: deploying {} namespaces, {} workloads, {} ServiceEntries",
        t.namespaces.len(),
        t.workloads.len(),
        t.externals.len()
    );
    let pods = meshgen::deploy(c, t)?;
    let istiod = Istiod::start(c)?;
    istiod.wait_for(&t.registry_hosts(), &t.configs(), Duration::from_secs(300))?;
    let idle = istiod.usage()?;
    let injected: Vec<&Pod> = pods
        .iter()
        .filter(|(w, _)| t.workloads[*w].injected)
        .map(|(_, p)| p)
        .collect();
    let role: BTreeMap<String, &'static str> = pods
        .iter()
        .map(|(w, p)| (format!("{}/{}", p.namespace, p.name), t.role(*w)))
        .collect();
    let role_of = |k: &str| role.get(k).copied().unwrap_or("other");
    eprintln!(
        "[istiod-bench] {tag}: connecting {} simulated sidecars",
        injected.len()
    );
    let options = SimOptions {
        concurrency: 16,
        references: true,
        ..SimOptions::default()
    };
    let sim = Sim::connect_with(
        &istiod.grpc_url(),
        injected.iter().map(|p| p.proxy_spec()).collect(),
        options,
    )?;
    sim.wait_stable(Duration::from_secs(3), Duration::from_secs(600))?;
    let mut r = Summary {
        scale: t.scale,
        proxies: injected.len(),
        services: t.services().len() + t.externals.len(),
        edges: t.edges.len(),
        istiod_before: istiod.usage()?,
        ..Summary::default()
    };
    r.istiod_cpu_connect_s = r.istiod_before.cpu_s - idle.cpu_s;
    r.before = roles_of(&sim, role_of);
    eprintln!("[istiod-bench] {tag}: before: {:?}", r.before["all"]);
    r.calibration_before = calibrate(&engine_snapshot(c)?, &sim);

    // The probes: the most called Service, and a leaf called once.
    let callers_of = |w: usize| -> Vec<String> {
        let from = t.fan_in(w);
        pods.iter()
            .filter(|(x, _)| from.contains(x) && t.workloads[*x].injected)
            .map(|(_, p)| format!("{}/{}", p.namespace, p.name))
            .collect()
    };
    let mut probes: Vec<(usize, Probe)> = Vec::new();
    for (kind, w) in [("hub", t.hub_probe()), ("leaf", t.leaf_probe())] {
        if let Some(w) = w {
            probes.push((w, Probe::new(kind, t.host(w), callers_of(w))));
        }
    }
    let vs = |w: usize, kind: &str, timeout: u32| {
        let wl = &t.workloads[w];
        let name = format!("meshscope-bench-{kind}");
        probe_vs(
            &wl.namespace,
            &name,
            &t.host(w),
            wl.ports[0].number,
            timeout,
        )
    };
    for (w, p) in probes.iter_mut() {
        eprintln!(
            "[istiod-bench] {tag}: VirtualService change on {}, unscoped",
            p.host
        );
        p.before = measured_push(c, &sim, &vs(*w, &p.role, 5))?;
    }

    let (t0, cpu0) = apply_all(c, t, &istiod, work, &tag, &mut r)?;
    let last = sim.wait_push_after(t0, Duration::from_secs(12), Duration::from_secs(900))?;
    r.apply_converged_s = last.duration_since(t0).as_secs_f64();
    r.istiod_after = istiod.usage()?;
    r.istiod_cpu_apply_s = r.istiod_after.cpu_s - cpu0;
    r.after = roles_of(&sim, role_of);
    eprintln!("[istiod-bench] {tag}: after: {:?}", r.after["all"]);
    r.calibration_after = calibrate(&engine_snapshot(c)?, &sim);
    (r.safety_edges, r.lost) = lost_edges(t, &sim, &pods);
    for (w, p) in probes.iter_mut() {
        eprintln!(
            "[istiod-bench] {tag}: VirtualService change on {}, scoped",
            p.host
        );
        p.after = measured_push(c, &sim, &vs(*w, &p.role, 6))?;
        p.finish();
    }
    r.probes = probes.into_iter().map(|(_, p)| p).collect();
    sim.close();
    drop(istiod);
    meshgen::cleanup(c, t);
    Ok(r)
}

/// `kubectl meshscope apply -A --wait` from the topology's access log, its
/// wait and the Sidecars it wrote in `r`; when it began and istiod's CPU
/// seconds then.
fn apply_all(
    c: &Cluster,
    t: &Topology,
    istiod: &Istiod,
    work: &Path,
    tag: &str,
    r: &mut Summary,
) -> Result<(Instant, f64)> {
    let log = work.join(format!("access-{}-{}x.log", t.name, t.scale));
    std::fs::write(&log, t.access_log())?;
    let log = log.to_str().context("log path")?.to_string();
    eprintln!("[istiod-bench] {tag}: kubectl meshscope apply -A");
    let cpu0 = istiod.usage()?.cpu_s;
    let t0 = Instant::now();
    let istiod_url = format!("http://{}", istiod.monitoring);
    // The scenario's log holds every call it makes, so a workload with no
    // line in it (social-network's media-memcached) is idle, not unseen:
    // `--allow-idle` gives it a closed scope like every other workload.
    let (out, err) = meshscope(
        c,
        &[
            "apply",
            "-A",
            "--access-log",
            &log,
            "--allow-idle",
            "--wait=15m",
            "--istiod-url",
            &istiod_url,
            "--istio-version",
            ENGINE_VERSION,
        ],
    )?;
    let (wait_s, waited) = parse_waited(&err)
        .with_context(|| format!("apply --wait says how long it waited:\n{err}"))?;
    (r.apply_wait_s, r.apply_waited_proxies) = (wait_s, waited);
    r.sidecars_written = out
        .lines()
        .filter(|l| l.contains(" created") || l.contains(" configured"))
        .count();
    eprintln!(
        "[istiod-bench] {tag}: apply: {} Sidecars written; {}",
        r.sidecars_written,
        err.lines().last().unwrap_or("")
    );
    if r.sidecars_written == 0 {
        bail!("kubectl meshscope apply wrote no Sidecar:\n{out}\n{err}");
    }
    Ok((t0, cpu0))
}
