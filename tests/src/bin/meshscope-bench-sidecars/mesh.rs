//! The mesh deployed once, and the points run on it: a fresh istiod and
//! a growing sample of simulated sidecars each, unscoped (while they fit,
//! or read from an earlier run) and after `apply -A` scoped.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use meshscope_e2e::bench::{run_plugin as meshscope, Rng};
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::dist::Dist;
use meshscope_e2e::istiod::{process_usage, Istiod, ENGINE_VERSION};
use meshscope_e2e::meshgen::{self, Topology};
use meshscope_e2e::world::Pod;
use meshscope_e2e::xds::{ProxyConfig, Sim, SimOptions};
use meshscope_e2e::xdsbench::{lost_edges, measured_push, probe_vs, settle_after};

use crate::args::Args;
use crate::point::{Mode, Point, Probe, Skipped};

/// The mesh, its pods and what each point needs to know about them.
pub struct Mesh<'a> {
    pub c: &'a Cluster,
    pub t: Topology,
    /// Injected pods in the seeded order points take them in.
    pub order: Vec<(usize, Pod)>,
    pub role: Vec<&'static str>,
    pub hub: usize,
    pub leaf: usize,
}

impl Mesh<'_> {
    /// Its Services and ServiceEntry hosts, as a raw run records them.
    pub fn services(&self) -> usize {
        self.t.services().len() + self.t.externals.len()
    }

    pub fn key(p: &Pod) -> String {
        format!("{}/{}", p.namespace, p.name)
    }

    pub fn probe(
        &self,
        sim: &Sim,
        w: usize,
        sample: &[(usize, Pod)],
        timeout: u32,
    ) -> Result<Probe> {
        let wl = &self.t.workloads[w];
        let host = self.t.host(w);
        let name = format!("meshscope-bench-{}", wl.name);
        let yaml = probe_vs(&wl.namespace, &name, &host, wl.ports[0].number, timeout);
        let from = self.t.fan_in(w);
        let callers: BTreeSet<String> = sample
            .iter()
            .filter(|(x, _)| from.contains(x))
            .map(|(_, p)| Mesh::key(p))
            .collect();
        let push = measured_push(self.c, sim, &yaml)?;
        // Removing it is a change too: its pushes settle before the next
        // probe starts counting.
        let removed = Instant::now();
        let _ = self.c.kubectl(
            &[
                "delete",
                "virtualservice",
                "-n",
                &wl.namespace,
                &name,
                "--ignore-not-found",
            ],
            None,
        );
        settle_after(sim, removed, Duration::from_secs(3))?;
        Ok(Probe::new(host, &callers, push))
    }

    pub fn point(&self, mode: Mode, n: usize) -> Result<Point> {
        let sample = &self.order[..n.min(self.order.len())];
        let istiod = Istiod::start(self.c)?;
        istiod.wait_for(
            &self.t.registry_hosts(),
            &self.t.configs(),
            Duration::from_secs(900),
        )?;
        std::thread::sleep(Duration::from_secs(5));
        let idle = istiod.usage()?;
        let own0 = process_usage(std::process::id())?.rss_kb;
        let heap0 = heap_in_use_mb();
        let t0 = Instant::now();
        let options = SimOptions {
            concurrency: 64,
            proxies_per_channel: 200,
            references: mode == Mode::Scoped,
            ..SimOptions::default()
        };
        let specs = sample.iter().map(|(_, p)| p.proxy_spec()).collect();
        let sim = Sim::connect_with(&istiod.grpc_url(), specs, options)?;
        let stable = sim.wait_stable(Duration::from_secs(5), Duration::from_secs(3600))?;
        let used = istiod.usage()?;
        let own = process_usage(std::process::id())?.rss_kb;
        let heap = heap_in_use_mb() - heap0;
        let snaps: Vec<(String, ProxyConfig)> = sim
            .proxies()
            .iter()
            .map(|p| (p.key().to_string(), p.snapshot()))
            .collect();
        let role: BTreeMap<String, &'static str> = sample
            .iter()
            .map(|(w, p)| (Mesh::key(p), self.role[*w]))
            .collect();
        let xds = Dist::by_role(&snaps, |k| role.get(k).copied().unwrap_or("other"));
        drop(snaps);
        let mut p = Point {
            mode,
            proxies: sample.len(),
            not_ready: sim.proxies().iter().filter(|p| !p.ready()).count(),
            connect_s: stable.duration_since(t0).as_secs_f64(),
            istiod_cpu_connect_s: used.cpu_s - idle.cpu_s,
            istiod_rss_mb: used.rss_kb as f64 / 1024.0,
            istiod_hwm_mb: used.hwm_kb as f64 / 1024.0,
            sim_rss_mb: own.saturating_sub(own0) as f64 / 1024.0,
            sim_heap_mb: heap,
            from: None,
            xds,
            hub: Probe::default(),
            leaf: Probe::default(),
            safety_edges: 0,
            lost: Vec::new(),
        };
        eprintln!(
            "[sidecars-bench] {mode:?} {n}: connected in {:.1} s, istiod {:.0} MB, {:.1} CPU s; sim RSS +{:.0} MB, heap +{:.0} MB; p50 {} B",
            p.connect_s, p.istiod_rss_mb, p.istiod_cpu_connect_s, p.sim_rss_mb, p.sim_heap_mb, p.xds["all"].p50
        );
        let timeout = if mode == Mode::Scoped { 6 } else { 5 };
        p.hub = self.probe(&sim, self.hub, sample, timeout)?;
        p.leaf = self.probe(&sim, self.leaf, sample, timeout)?;
        if mode == Mode::Scoped {
            let (checked, lost) = lost_edges(&self.t, &sim, sample);
            p.safety_edges = checked;
            p.lost = lost.into_iter().take(20).collect();
        }
        eprintln!(
            "[sidecars-bench] {mode:?} {n}: hub change to {} proxies in {:.2} s, leaf change to {} in {:.2} s",
            p.hub.push.fanout, p.hub.push.seconds, p.leaf.push.fanout, p.leaf.push.seconds
        );
        sim.close();
        drop(istiod);
        std::thread::sleep(Duration::from_secs(3));
        Ok(p)
    }
}

/// Bytes the allocator has handed out and not taken back (glibc's
/// `mallinfo2`: small blocks in use plus mmapped ones). Unlike RSS, it does
/// not keep what an earlier point freed, so its growth over a connect is
/// the simulator's own.
pub fn heap_in_use_mb() -> f64 {
    // SAFETY: mallinfo2 takes no arguments and only reads the allocator's
    // counters.
    let m = unsafe { libc::mallinfo2() };
    (m.uordblks + m.hblkhd) as f64 / (1024.0 * 1024.0)
}

/// MemAvailable, in MB.
pub fn mem_available_mb() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

pub fn mesh<'c>(c: &'c Cluster, a: &Args) -> Result<Mesh<'c>> {
    let t = meshgen::realistic_sized(a.services, a.sidecars, a.seed);
    eprintln!(
        "[sidecars-bench] realistic {}x: {} services and ServiceEntry hosts, {} workloads, {} namespaces, {} calls",
        t.scale,
        t.services().len() + t.externals.len(),
        t.workloads.len(),
        t.namespaces.len(),
        t.edges.len()
    );
    if a.reuse_mesh {
        // Deploying again changes nothing; the Sidecars of an earlier run
        // must go, or the unscoped points would be scoped.
        let o = c.kubectl(
            &[
                "delete",
                "sidecars.networking.istio.io",
                "-A",
                "-l",
                "app.kubernetes.io/managed-by=kubectl-meshscope",
            ],
            None,
        );
        if !o.status.success() {
            bail!("{}", String::from_utf8_lossy(&o.stderr));
        }
    } else {
        meshgen::cleanup(c, &t);
    }
    let t0 = Instant::now();
    let pods = meshgen::deploy(c, &t)?;
    eprintln!(
        "[sidecars-bench] deployed {} pods in {:.0} s",
        pods.len(),
        t0.elapsed().as_secs_f64()
    );
    let mut order: Vec<(usize, Pod)> = pods
        .into_iter()
        .filter(|(w, _)| t.workloads[*w].injected)
        .collect();
    let mut rng = Rng::new(a.seed);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let role = (0..t.workloads.len()).map(|w| t.role(w)).collect();
    let hub = t.hub_probe().context("the scenario has no hub")?;
    let leaf = t.leaf_probe().context("the scenario has no leaf")?;
    Ok(Mesh {
        c,
        t,
        order,
        role,
        hub,
        leaf,
    })
}

/// Runs the unscoped points while they fit, in ascending order.
pub fn unscoped(m: &Mesh, points: &[usize], done: &mut Vec<Point>, skipped: &mut Vec<Skipped>) {
    for &n in points {
        if let Some(last) = done.last() {
            let per = (last.istiod_rss_mb + last.sim_rss_mb) / last.proxies as f64;
            let need = per * n as f64 * 1.2;
            let have = mem_available_mb() - 2_048.0;
            if need > have {
                let why = format!(
                    "skipped: projected to need {:.1} GB for istiod and the simulator (the last point's MB per proxy, +20%), {:.1} GB free (not tried)",
                    need / 1024.0,
                    have.max(0.0) / 1024.0
                );
                eprintln!("[sidecars-bench] unscoped {n}: {why}");
                skipped.push(Skipped {
                    mode: Mode::Unscoped,
                    proxies: n,
                    why,
                });
                continue;
            }
        }
        match m.point(Mode::Unscoped, n) {
            Ok(p) => done.push(p),
            Err(e) => {
                eprintln!("[sidecars-bench] unscoped {n}: {e:#}");
                skipped.push(Skipped {
                    mode: Mode::Unscoped,
                    proxies: n,
                    why: format!("failed: {e:#}"),
                });
            }
        }
    }
}

/// The unscoped points (and those skipped) of an earlier raw run of the
/// same mesh, marked with where they come from.
pub fn unscoped_from(
    f: &std::path::Path,
    m: &Mesh,
    a: &Args,
) -> Result<(Vec<Point>, Vec<Skipped>)> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(f)?)
        .with_context(|| format!("{} is not a raw run", f.display()))?;
    let same = v["sidecars"] == a.sidecars && v["seed"] == a.seed && v["services"] == m.services();
    if !same {
        bail!(
            "{} is a run of another mesh (--services, --sidecars, --seed)",
            f.display()
        );
    }
    let from = format!(
        "{} (commit {})",
        f.file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned()),
        v["commit"].as_str().unwrap_or("?")
    );
    let mut points: Vec<Point> = serde_json::from_value(v["points"].clone())?;
    points.retain(|p| p.mode == Mode::Unscoped);
    for p in &mut points {
        p.from = Some(from.clone());
    }
    let mut skipped: Vec<Skipped> = serde_json::from_value(v["skipped"].clone())?;
    skipped.retain(|s| s.mode == Mode::Unscoped);
    for s in &mut skipped {
        s.why = format!("{} ({from})", projected(&s.why));
    }
    Ok((points, skipped))
}

/// A skip as earlier raw runs worded it ("does not fit: ... would need"),
/// said as what it was: a projection, not a point tried.
pub fn projected(why: &str) -> String {
    match why.strip_prefix("does not fit: ") {
        Some(rest) => format!("skipped, projected not to fit (not tried): {rest}"),
        None => why.to_string(),
    }
}

pub fn apply_sidecars(m: &Mesh) -> Result<usize> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("access.log");
    std::fs::write(&log, m.t.access_log())?;
    let log = log.to_str().context("log path")?.to_string();
    let t0 = Instant::now();
    let (out, err) = meshscope(
        m.c,
        &[
            "apply",
            "-A",
            "--access-log",
            &log,
            // The log holds every call the mesh makes: a workload with no
            // line in it is idle, and gets a closed scope too.
            "--allow-idle",
            "--istio-version",
            ENGINE_VERSION,
            "--request-timeout",
            "5m",
        ],
    )?;
    let written = out
        .lines()
        .filter(|l| l.contains(" created") || l.contains(" configured"))
        .count();
    eprintln!(
        "[sidecars-bench] apply -A: {written} Sidecars in {:.0} s; {}",
        t0.elapsed().as_secs_f64(),
        err.lines().last().unwrap_or("")
    );
    if written == 0 {
        bail!("kubectl meshscope apply wrote no Sidecar:\n{out}\n{err}");
    }
    Ok(written)
}
