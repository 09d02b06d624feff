//! `meshscope-bench-sidecars`: istiod at the size users run, before and
//! after meshscope's Sidecars (run by `tests/bench/run sidecars`).
//!
//! The mesh is the realistic scenario sized to `--services` services and
//! `--sidecars` injected pods (`meshgen::realistic_sized`), deployed once
//! through Deployments and StatefulSets on the test control plane. At each
//! point it starts a fresh istiod, connects that many simulated sidecars
//! (a seeded sample of the pods, the same sample growing), and measures:
//! - istiod's RSS and peak RSS, and the CPU it spent connecting them;
//! - the wall time until every proxy holds its config;
//! - the simulator's own RSS for those ADS streams;
//! - the xDS each proxy holds (p50, p95, max by role);
//! - a VirtualService change on the hub Service and on a leaf Service:
//!   to how many proxies istiod pushed it and when the last one ACKed.
//!
//! Unscoped points come first (no Sidecar), while they fit: a point whose
//! projected istiod and simulator memory exceeds what the machine has
//! left is skipped, not tried, and said so. Then `kubectl meshscope apply -A` from the
//! scenario's access log writes the Sidecars, and the scoped points follow,
//! each checked for safety (every observed edge keeps its cluster). A line
//! `a + b·n` fitted to each mode's points gives istiod's memory and CPU at
//! `--sidecars`; the tables say which points were measured and how far
//! beyond them a value is extrapolated. The hub and leaf changes at each
//! scoped point must reach exactly their callers' connected proxies. Prints markdown tables and, last, one JSON line (also
//! written to `--out-dir` as `istiod-scale-<commit>.json`); exits 1 when a
//! target is missed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use meshscope_e2e::bench::{run_plugin as meshscope, Rng};
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::dist::Dist;
use meshscope_e2e::istiod::{process_usage, Istiod, ENGINE_VERSION};
use meshscope_e2e::meshgen::{self, Topology};
use meshscope_e2e::world::Pod;
use meshscope_e2e::xds::{ProxyConfig, Sim, SimOptions};
use meshscope_e2e::xdsbench::{lost_edges, measured_push, probe_vs, settle_after, PushResult};
use serde::{Deserialize, Serialize};

/// The AKS guidance's figure for 20,000 unscoped sidecars over 1,000
/// services (quoted, not measured here).
const AKS_QUOTE: &str = "40.4 GB and 15 CPUs for istiod at 20,000 sidecars over 1,000 services, unscoped (quoted: \"Istio service mesh add-on performance and scaling\", learn.microsoft.com/azure/aks/istio-scale, 2024-03-19: istiod asm-1-19, real Envoys, a Standard D16 v3 node, Azure CNI Overlay)";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Unscoped,
    Scoped,
}

/// A VirtualService change on one Service at one point.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Probe {
    host: String,
    /// Connected proxies of the workloads that call it.
    callers: usize,
    push: PushResult,
    /// Pushed although not a caller.
    outside: usize,
    /// Callers it did not reach (absent from runs before it was counted).
    #[serde(default)]
    missed: usize,
    /// The first of those pushed outside and of those missed, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    outside_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    missed_names: Vec<String>,
}

/// Names kept in a probe's JSON of those pushed outside or missed.
const NAMED: usize = 10;

impl Probe {
    /// `push` held to `callers` (keys of connected proxies): who it
    /// reached outside them, and which of them it missed.
    fn new(host: String, callers: &BTreeSet<String>, mut push: PushResult) -> Probe {
        let pushed: BTreeSet<&String> = push.names.iter().collect();
        let outside: Vec<&String> = pushed
            .iter()
            .copied()
            .filter(|n| !callers.contains(*n))
            .collect();
        let missed: Vec<&String> = callers.iter().filter(|n| !pushed.contains(n)).collect();
        let first = |v: &[&String]| v.iter().take(NAMED).map(|n| (*n).clone()).collect();
        let p = Probe {
            host,
            callers: callers.len(),
            outside: outside.len(),
            missed: missed.len(),
            outside_names: first(&outside),
            missed_names: first(&missed),
            push: PushResult::default(),
        };
        // The names are thousands at this size; the JSON keeps the counts.
        push.names.clear();
        Probe { push, ..p }
    }

    /// The target at a scoped point: the change reaches exactly its
    /// callers' proxies, every one and no other.
    fn row(&self, which: &str, n: usize) -> [String; 4] {
        let names = |count: usize, v: &[String]| match count {
            0 => "none".to_string(),
            c if c == v.len() => v.join(", "),
            c => format!("{c}: {}, ...", v.join(", ")),
        };
        [
            format!("scoped {n}: {which} change ({}) pushed to", self.host),
            format!(
                "{} proxies; callers missed: {}; pushed outside: {}",
                self.push.fanout,
                names(self.missed, &self.missed_names),
                names(self.outside, &self.outside_names)
            ),
            format!(
                "= its callers' {} proxies (each reached, no other)",
                self.callers
            ),
            if self.missed == 0 && self.outside == 0 {
                "yes"
            } else {
                "no"
            }
            .to_string(),
        ]
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Point {
    mode: Mode,
    proxies: usize,
    /// Proxies that never held a full config.
    not_ready: usize,
    connect_s: f64,
    istiod_cpu_connect_s: f64,
    istiod_rss_mb: f64,
    istiod_hwm_mb: f64,
    /// The growth of this process's RSS over the connect (the simulator
    /// runs in it); after a larger earlier point it may reuse pages that
    /// point freed, so see `sim_heap_mb` too.
    sim_rss_mb: f64,
    /// The growth of the heap in use over the connect: the simulator's
    /// streams and state (absent from runs before it was measured).
    #[serde(default)]
    sim_heap_mb: f64,
    /// The raw run this point was read back from (`--unscoped-from`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    from: Option<String>,
    xds: BTreeMap<String, Dist>,
    hub: Probe,
    leaf: Probe,
    safety_edges: usize,
    lost: Vec<String>,
}

/// A point left out, and why.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Skipped {
    mode: Mode,
    proxies: usize,
    why: String,
}

/// `a + b·n` by least squares, and how well it fits.
#[derive(Clone, Copy, Debug, Default, Serialize)]
struct Fit {
    a: f64,
    b: f64,
    r2: f64,
    points: usize,
}

impl Fit {
    fn of(xy: &[(f64, f64)]) -> Fit {
        let n = xy.len() as f64;
        if xy.len() < 2 {
            return Fit::default();
        }
        let (mx, my) = (
            xy.iter().map(|p| p.0).sum::<f64>() / n,
            xy.iter().map(|p| p.1).sum::<f64>() / n,
        );
        let sxx: f64 = xy.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let b = sxy / sxx.max(f64::MIN_POSITIVE);
        let a = my - b * mx;
        let ss_res: f64 = xy.iter().map(|p| (p.1 - a - b * p.0).powi(2)).sum();
        let ss_tot: f64 = xy.iter().map(|p| (p.1 - my).powi(2)).sum();
        Fit {
            a,
            b,
            r2: if ss_tot > 0.0 {
                1.0 - ss_res / ss_tot
            } else {
                1.0
            },
            points: xy.len(),
        }
    }

    fn at(&self, n: f64) -> f64 {
        self.a + self.b * n
    }
}

/// The mesh, its pods and what each point needs to know about them.
struct Mesh<'a> {
    c: &'a Cluster,
    t: Topology,
    /// Injected pods in the seeded order points take them in.
    order: Vec<(usize, Pod)>,
    role: Vec<&'static str>,
    hub: usize,
    leaf: usize,
}

impl Mesh<'_> {
    /// Its Services and ServiceEntry hosts, as a raw run records them.
    fn services(&self) -> usize {
        self.t.services().len() + self.t.externals.len()
    }

    fn key(p: &Pod) -> String {
        format!("{}/{}", p.namespace, p.name)
    }

    fn probe(&self, sim: &Sim, w: usize, sample: &[(usize, Pod)], timeout: u32) -> Result<Probe> {
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

    fn point(&self, mode: Mode, n: usize) -> Result<Point> {
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
fn heap_in_use_mb() -> f64 {
    // SAFETY: mallinfo2 takes no arguments and only reads the allocator's
    // counters.
    let m = unsafe { libc::mallinfo2() };
    (m.uordblks + m.hblkhd) as f64 / (1024.0 * 1024.0)
}

/// MemAvailable, in MB.
fn mem_available_mb() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

struct Args {
    services: usize,
    sidecars: usize,
    unscoped: Vec<usize>,
    scoped: Vec<usize>,
    seed: u64,
    out_dir: Option<PathBuf>,
    reuse_mesh: bool,
    unscoped_from: Option<PathBuf>,
}

/// The points run when none are given: unscoped while they fit, scoped
/// up to the full size.
const UNSCOPED: [usize; 8] = [500, 1_000, 1_500, 2_000, 2_500, 3_000, 3_500, 4_000];
const SCOPED: [usize; 4] = [2_500, 5_000, 10_000, 20_000];
const SERVICES: usize = 1_000;
const SIDECARS: usize = 20_000;
const SEED: u64 = 22;

fn args() -> Result<Args> {
    let mut a = Args {
        services: SERVICES,
        sidecars: SIDECARS,
        unscoped: UNSCOPED.to_vec(),
        scoped: SCOPED.to_vec(),
        seed: SEED,
        out_dir: None,
        reuse_mesh: false,
        unscoped_from: None,
    };
    let list = |v: Option<String>| -> Result<Vec<usize>> {
        let v = v.context("a list of proxy counts")?;
        if v.trim() == "none" {
            return Ok(Vec::new());
        }
        v.split([',', ' '])
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().map_err(Into::into))
            .collect()
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--services" => a.services = it.next().context("--services N")?.parse()?,
            "--sidecars" => a.sidecars = it.next().context("--sidecars N")?.parse()?,
            "--unscoped" => a.unscoped = list(it.next())?,
            "--scoped" => a.scoped = list(it.next())?,
            "--seed" => a.seed = it.next().context("--seed N")?.parse()?,
            "--out-dir" => a.out_dir = Some(it.next().context("--out-dir DIR")?.into()),
            "--reuse-mesh" => a.reuse_mesh = true,
            "--unscoped-from" => {
                a.unscoped_from = Some(it.next().context("--unscoped-from FILE")?.into());
                a.unscoped = Vec::new();
            }
            "-h" | "--help" => {
                let join = |v: &[usize]| {
                    v.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                };
                println!("usage: meshscope-bench-sidecars [--services N] [--sidecars N] [--unscoped N,N,..] [--scoped N,N,..] [--seed N] [--out-dir DIR] [--reuse-mesh] [--unscoped-from RUN.json]\n(defaults: {SERVICES} services, {SIDECARS} sidecars, unscoped {} (while they fit), scoped {}, seed {SEED}; `none` runs no point of that mode).\n--reuse-mesh: the control plane holds this mesh from an earlier run with the same --services, --sidecars and --seed; keep it (its managed Sidecars are deleted) instead of deleting and deploying it again.\n--unscoped-from RUN.json: take the unscoped points from that raw run of the same mesh (same --services, --sidecars and --seed) instead of measuring them again; the tables say so.\nNeeds the test control plane (tests/cluster/up) and istiod (tests/istiod/build).", join(&UNSCOPED), join(&SCOPED));
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    for v in [&mut a.unscoped, &mut a.scoped] {
        v.retain(|n| *n > 0);
        v.sort_unstable();
        v.dedup();
        for n in v.iter_mut() {
            *n = (*n).min(a.sidecars);
        }
    }
    Ok(a)
}

fn mesh<'c>(c: &'c Cluster, a: &Args) -> Result<Mesh<'c>> {
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
fn unscoped(m: &Mesh, points: &[usize], done: &mut Vec<Point>, skipped: &mut Vec<Skipped>) {
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
fn unscoped_from(f: &std::path::Path, m: &Mesh, a: &Args) -> Result<(Vec<Point>, Vec<Skipped>)> {
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
fn projected(why: &str) -> String {
    match why.strip_prefix("does not fit: ") {
        Some(rest) => format!("skipped, projected not to fit (not tried): {rest}"),
        None => why.to_string(),
    }
}

fn apply_sidecars(m: &Mesh) -> Result<usize> {
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

#[derive(Debug, Serialize)]
struct Report {
    commit: String,
    seed: u64,
    services: usize,
    sidecars: usize,
    workloads: usize,
    sidecars_written: usize,
    deploy_s: f64,
    points: Vec<Point>,
    skipped: Vec<Skipped>,
    /// mode -> (istiod RSS MB, istiod connect CPU s) fits over proxies.
    fits: BTreeMap<String, (Fit, Fit)>,
    aks_quote: &'static str,
    targets: Vec<[String; 4]>,
    met: bool,
}

fn fits(points: &[Point]) -> BTreeMap<String, (Fit, Fit)> {
    let mut out = BTreeMap::new();
    for (mode, name) in [(Mode::Unscoped, "unscoped"), (Mode::Scoped, "scoped")] {
        let of = |f: fn(&Point) -> f64| -> Fit {
            let xy: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.mode == mode)
                .map(|p| (p.proxies as f64, f(p)))
                .collect();
            Fit::of(&xy)
        };
        out.insert(
            name.to_string(),
            (of(|p| p.istiod_rss_mb), of(|p| p.istiod_cpu_connect_s)),
        );
    }
    out
}

/// (measure, value, target, met) rows.
fn targets(r: &Report) -> Vec<[String; 4]> {
    let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
    let mut rows = Vec::new();
    let scoped: Vec<&Point> = r.points.iter().filter(|p| p.mode == Mode::Scoped).collect();
    let largest = scoped.iter().max_by_key(|p| p.proxies);
    rows.push([
        format!("scoped run at {} sidecars", r.sidecars),
        largest.map_or("not run".into(), |p| {
            format!("{} proxies, {} without config", p.proxies, p.not_ready)
        }),
        "every proxy holds its config".into(),
        yes(largest.is_some_and(|p| p.proxies == r.sidecars && p.not_ready == 0)),
    ]);
    // The streams of the largest scoped point; unscoped proxies hold 3 MB
    // of config each here, and their points are reported, not held to it.
    let sim = largest.map(|p| p.sim_rss_mb.max(p.sim_heap_mb));
    rows.push([
        format!(
            "simulator memory for {} scoped ADS streams (RSS or heap growth, the larger)",
            largest.map_or(0, |p| p.proxies)
        ),
        sim.map_or("not run".into(), |m| format!("{:.2} GB", m / 1024.0)),
        "<= 4 GB".into(),
        yes(sim.is_some_and(|m| m <= 4_096.0)),
    ]);
    let lost: usize = scoped.iter().map(|p| p.lost.len()).sum();
    rows.push([
        "safety: observed edges that lost their cluster".into(),
        lost.to_string(),
        "0".into(),
        yes(lost == 0),
    ]);
    for p in &scoped {
        rows.push(p.hub.row("hub", p.proxies));
        rows.push(p.leaf.row("leaf", p.proxies));
    }
    // Bytes: the largest point both modes ran.
    let common = r
        .points
        .iter()
        .filter(|p| p.mode == Mode::Unscoped)
        .filter_map(|u| {
            scoped
                .iter()
                .find(|s| s.proxies == u.proxies)
                .map(|s| (u, s))
        })
        .max_by_key(|(u, _)| u.proxies);
    let ratio = common.map(|(u, s)| s.xds["all"].p50 as f64 / u.xds["all"].p50.max(1) as f64);
    rows.push([
        format!(
            "xDS p50 per proxy, scoped / unscoped{}",
            common.map_or(String::new(), |(u, _)| format!(" at {}", u.proxies))
        ),
        ratio.map_or("no common point".into(), |x| format!("{x:.3}")),
        "<= 0.25".into(),
        yes(ratio.is_some_and(|x| x <= 0.25)),
    ]);
    let (u, s) = (&r.fits["unscoped"].0, &r.fits["scoped"].0);
    let n = r.sidecars as f64;
    let fitted = u.points >= 4 && s.points >= 2;
    let unscoped = measured(&r.points, Mode::Unscoped);
    let not_run: Vec<usize> = r
        .skipped
        .iter()
        .filter(|s| s.mode == Mode::Unscoped)
        .map(|s| s.proxies)
        .collect();
    rows.push([
        format!(
            "istiod RSS at {} sidecars, scoped / unscoped (lines fitted to each mode's measured points)",
            r.sidecars
        ),
        if fitted {
            format!(
                "{:.0} MB / {:.0} MB; scoped {}; unscoped measured at {} (R² {:.3}){}, so {}",
                s.at(n),
                u.at(n),
                reach(&measured(&r.points, Mode::Scoped), r.sidecars),
                listed(&unscoped),
                u.r2,
                if not_run.is_empty() {
                    String::new()
                } else {
                    format!(", not at {} (skipped)", listed(&not_run))
                },
                reach(&unscoped, r.sidecars)
            )
        } else {
            format!("{} unscoped points (4 needed)", u.points)
        },
        "<= 0.5".into(),
        yes(fitted && s.at(n) <= 0.5 * u.at(n)),
    ]);
    rows
}

/// The proxy counts a mode's points were measured at, ascending.
fn measured(points: &[Point], mode: Mode) -> Vec<usize> {
    let mut v: Vec<usize> = points
        .iter()
        .filter(|p| p.mode == mode)
        .map(|p| p.proxies)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn listed(v: &[usize]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a line fitted to points measured at `xs` says at `n`: a measured
/// point, between measured points, or an extrapolation and how far.
fn reach(xs: &[usize], n: usize) -> String {
    let (Some(&lo), Some(&hi)) = (xs.iter().min(), xs.iter().max()) else {
        return format!("at {n}: no measured point");
    };
    if xs.contains(&n) {
        format!("at {n}: the fit at a measured point")
    } else if (lo..=hi).contains(&n) {
        format!("at {n}: interpolated between measured points")
    } else if n > hi {
        format!(
            "at {n}: extrapolated, {:.1}× beyond the largest measured point ({hi})",
            n as f64 / hi as f64
        )
    } else {
        format!("at {n}: extrapolated below the smallest measured point ({lo})")
    }
}

fn print(r: &Report) {
    println!(
        "Mesh: realistic, seed {}: {} services and ServiceEntry hosts, {} workloads, {} injected pods ({} Sidecars written by apply -A); commit {}",
        r.seed, r.services, r.workloads, r.sidecars, r.sidecars_written, r.commit
    );
    println!();
    println!("| mode | proxies | connect (wall) | istiod CPU to connect | istiod RSS | istiod peak RSS | simulator RSS / heap growth | xDS p50 / p95 / max per proxy | hub change: proxies, last ACK | leaf change: proxies, last ACK |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for p in &r.points {
        let d = &p.xds["all"];
        let mode = match &p.from {
            Some(f) => format!("{:?} (from {f})", p.mode),
            None => format!("{:?}", p.mode),
        };
        println!(
            "| {} | {} | {:.1} s | {:.1} s | {:.0} MB | {:.0} MB | {:.0} / {:.0} MB | {:.1} / {:.1} / {:.1} KB | {} (of {} callers, {} missed), {:.2} s | {} (of {} callers, {} missed), {:.2} s |",
            mode, p.proxies, p.connect_s, p.istiod_cpu_connect_s, p.istiod_rss_mb, p.istiod_hwm_mb, p.sim_rss_mb, p.sim_heap_mb,
            d.p50 as f64 / 1e3, d.p95 as f64 / 1e3, d.max as f64 / 1e3,
            p.hub.push.fanout, p.hub.callers, p.hub.missed, p.hub.push.seconds,
            p.leaf.push.fanout, p.leaf.callers, p.leaf.missed, p.leaf.push.seconds,
        );
    }
    for s in &r.skipped {
        println!("| {:?} | {} | {} | | | | | | | |", s.mode, s.proxies, s.why);
    }
    println!();
    println!("| fit over proxies n | measured at n = | istiod RSS (MB) = a + b·n | R² | at {} | istiod CPU to connect (s) = a + b·n | R² | at {} | the value at {} is |", r.sidecars, r.sidecars, r.sidecars);
    println!("|---|---|---|---|---|---|---|---|---|");
    let n = r.sidecars as f64;
    for (mode, (m, c)) in &r.fits {
        let xs = measured(
            &r.points,
            if mode == "unscoped" {
                Mode::Unscoped
            } else {
                Mode::Scoped
            },
        );
        println!(
            "| {mode} ({} points) | {} | {:.0} + {:.3}·n | {:.3} | {:.1} GB | {:.1} + {:.4}·n | {:.3} | {:.0} CPU s | {} |",
            m.points, listed(&xs), m.a, m.b, m.r2, m.at(n) / 1024.0, c.a, c.b, c.r2, c.at(n), reach(&xs, r.sidecars)
        );
    }
    println!("| AKS guidance (quoted) | | | | 40.4 GB | | | 15 CPUs | quoted, not measured here |");
    println!();
    println!("| measure | value | target | met |");
    println!("|---|---|---|---|");
    for t in &r.targets {
        println!("| {} | {} | {} | {} |", t[0], t[1], t[2], t[3]);
    }
}

fn main() -> std::process::ExitCode {
    meshscope_e2e::tool_exit(try_main())
}

fn try_main() -> Result<()> {
    let a = args()?;
    let c = Cluster::shared();
    let t0 = Instant::now();
    let m = mesh(c, &a)?;
    let deploy_s = t0.elapsed().as_secs_f64();
    let mut points = Vec::new();
    let mut skipped = Vec::new();
    if let Some(f) = &a.unscoped_from {
        let (p, s) = unscoped_from(f, &m, &a)?;
        points.extend(p);
        skipped.extend(s);
    }
    unscoped(&m, &a.unscoped, &mut points, &mut skipped);
    let written = apply_sidecars(&m)?;
    for &n in &a.scoped {
        points.push(m.point(Mode::Scoped, n)?);
    }
    let mut r = Report {
        commit: meshscope_e2e::bench::commit(),
        seed: a.seed,
        services: m.services(),
        sidecars: m.order.len(),
        workloads: m.t.workloads.len(),
        sidecars_written: written,
        deploy_s,
        fits: fits(&points),
        points,
        skipped,
        aks_quote: AKS_QUOTE,
        targets: Vec::new(),
        met: false,
    };
    r.targets = targets(&r);
    r.met = r.targets.iter().all(|t| t[3] == "yes");
    print(&r);
    let json = serde_json::to_value(&r)?;
    if let Some(dir) = &a.out_dir {
        std::fs::create_dir_all(dir)?;
        let f = dir.join(format!("istiod-scale-{}.json", r.commit));
        std::fs::write(&f, serde_json::to_string_pretty(&json)? + "\n")?;
        eprintln!("[sidecars-bench] wrote {}", f.display());
    }
    println!("{json}");
    if !r.met {
        std::process::exit(1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    /// A change on a Service called from `ns/a` and `ns/b`, pushed to `to`.
    fn probe(to: &[&str]) -> Probe {
        let push = PushResult {
            fanout: to.len(),
            names: to.iter().map(|n| n.to_string()).collect(),
            ..PushResult::default()
        };
        Probe::new("leaf.ns".into(), &set(&["ns/a", "ns/b"]), push)
    }

    /// A point of `mode` at `n` proxies, with istiod at `rss` MB, a p50 of
    /// 1 KB unscoped and 20 B scoped, and its probes reaching exactly their
    /// callers.
    fn point(mode: Mode, n: usize, rss: f64) -> Point {
        let all = Dist {
            proxies: n,
            p50: if mode == Mode::Scoped { 20 } else { 1_000 },
            ..Dist::default()
        };
        Point {
            mode,
            proxies: n,
            not_ready: 0,
            connect_s: 1.0,
            istiod_cpu_connect_s: 1.0,
            istiod_rss_mb: rss,
            istiod_hwm_mb: rss,
            sim_rss_mb: 100.0,
            sim_heap_mb: 100.0,
            from: None,
            xds: BTreeMap::from([("all".to_string(), all)]),
            hub: probe(&["ns/a", "ns/b"]),
            leaf: probe(&["ns/a", "ns/b"]),
            safety_edges: 1,
            lost: Vec::new(),
        }
    }

    /// Unscoped points at 500..2000 growing by `per` MB a proxy, scoped
    /// points at 2000 and 4000 (istiod at 500 and 600 MB), 4000 sidecars.
    fn report(per: f64, scoped: Vec<Point>) -> Report {
        let mut points: Vec<Point> = [500, 1_000, 1_500, 2_000]
            .into_iter()
            .map(|n| point(Mode::Unscoped, n, 1_000.0 + per * n as f64))
            .collect();
        points.extend(scoped);
        let mut r = Report {
            commit: "test".into(),
            seed: 1,
            services: 10,
            sidecars: 4_000,
            workloads: 10,
            sidecars_written: 10,
            deploy_s: 0.0,
            fits: fits(&points),
            points,
            skipped: vec![Skipped {
                mode: Mode::Unscoped,
                proxies: 3_000,
                why: "skipped: projected ...".into(),
            }],
            aks_quote: AKS_QUOTE,
            targets: Vec::new(),
            met: false,
        };
        r.targets = targets(&r);
        r
    }

    fn scoped() -> Vec<Point> {
        vec![
            point(Mode::Scoped, 2_000, 500.0),
            point(Mode::Scoped, 4_000, 600.0),
        ]
    }

    fn row<'a>(r: &'a Report, measure: &str) -> &'a [String; 4] {
        r.targets
            .iter()
            .find(|t| t[0].starts_with(measure))
            .unwrap_or_else(|| panic!("no target {measure:?} in {:?}", r.targets))
    }

    #[test]
    fn a_change_reaching_none_of_its_callers_misses_the_target() {
        let p = probe(&[]);
        assert_eq!((p.missed, p.outside), (2, 0));
        let row = p.row("leaf", 4_000);
        assert_eq!(row[3], "no");
        assert!(row[1].contains("callers missed: ns/a, ns/b;"), "{}", row[1]);
    }

    #[test]
    fn a_change_missing_one_caller_misses_the_target_and_names_it() {
        let p = probe(&["ns/a"]);
        assert_eq!(p.missed_names, ["ns/b"]);
        let row = p.row("leaf", 4_000);
        assert_eq!(row[3], "no");
        assert!(row[1].contains("callers missed: ns/b;"), "{}", row[1]);
    }

    #[test]
    fn a_change_pushed_outside_its_callers_misses_the_target() {
        let p = probe(&["ns/a", "ns/b", "ns/c"]);
        assert_eq!((p.missed, p.outside), (0, 1));
        let row = p.row("hub", 4_000);
        assert_eq!(row[3], "no");
        assert!(row[1].contains("pushed outside: ns/c"), "{}", row[1]);
    }

    #[test]
    fn a_change_reaching_exactly_its_callers_meets_the_target() {
        let p = probe(&["ns/b", "ns/a"]);
        let row = p.row("hub", 4_000);
        assert_eq!(row[3], "yes", "{row:?}");
        assert!(p.push.names.is_empty(), "the JSON keeps counts");
    }

    #[test]
    fn many_misses_are_counted_and_the_first_named() {
        let callers: BTreeSet<String> = (0..25).map(|i| format!("ns/p{i:02}")).collect();
        let p = Probe::new("hub.ns".into(), &callers, PushResult::default());
        assert_eq!((p.missed, p.missed_names.len()), (25, NAMED));
        assert!(p.row("hub", 25)[1].contains("callers missed: 25: ns/p00, "));
    }

    #[test]
    fn a_scoped_point_whose_leaf_change_misses_a_caller_fails_the_run() {
        let mut s = scoped();
        s[1].leaf = probe(&["ns/a"]);
        let r = report(1.0, s);
        assert_eq!(row(&r, "scoped 4000: leaf change")[3], "no");
        assert_eq!(row(&r, "scoped 2000: leaf change")[3], "yes");
        assert_eq!(row(&r, "scoped 4000: hub change")[3], "yes");
    }

    #[test]
    fn the_unscoped_comparison_says_what_was_measured_and_what_extrapolated() {
        let r = report(1.0, scoped());
        let t = row(&r, "istiod RSS at 4000 sidecars");
        // Unscoped: 1000 + 4000 = 5000 MB, scoped 600 MB.
        assert_eq!(t[3], "yes", "{t:?}");
        assert!(t[1].starts_with("600 MB / 5000 MB;"), "{}", t[1]);
        assert!(t[1].contains("scoped at 4000: the fit at a measured point"));
        assert!(t[1].contains("unscoped measured at 500, 1000, 1500, 2000 (R² 1.000)"));
        assert!(t[1].contains("not at 3000 (skipped)"));
        assert!(
            t[1].contains("at 4000: extrapolated, 2.0× beyond the largest measured point (2000)"),
            "{}",
            t[1]
        );
    }

    #[test]
    fn the_unscoped_comparison_fails_when_scoping_saves_too_little() {
        // Unscoped: 1000 + 0.02·4000 = 1080 MB; scoped 600 MB > 540 MB.
        let r = report(0.02, scoped());
        assert_eq!(row(&r, "istiod RSS at 4000 sidecars")[3], "no");
    }

    #[test]
    fn the_unscoped_comparison_fails_with_too_few_unscoped_points() {
        let mut r = report(1.0, scoped());
        r.points
            .retain(|p| p.mode == Mode::Scoped || p.proxies > 1_000);
        r.fits = fits(&r.points);
        let t = targets(&r);
        let t = t.iter().find(|t| t[0].starts_with("istiod RSS")).unwrap();
        assert_eq!(t[1], "2 unscoped points (4 needed)");
        assert_eq!(t[3], "no");
    }

    #[test]
    fn every_target_is_met_by_a_good_run_and_each_fails_on_its_own_miss() {
        let good = report(1.0, scoped());
        assert!(
            good.targets.iter().all(|t| t[3] == "yes"),
            "{:?}",
            good.targets
        );
        let retarget = |f: &dyn Fn(&mut Report)| {
            let mut r = report(1.0, scoped());
            f(&mut r);
            r.fits = fits(&r.points);
            r.targets = targets(&r);
            r
        };
        // The largest scoped point short of --sidecars, or a proxy without config.
        let r = retarget(&|r| r.sidecars = 5_000);
        assert_eq!(row(&r, "scoped run at 5000")[3], "no");
        let r = retarget(&|r| r.points[5].not_ready = 1);
        assert_eq!(row(&r, "scoped run at 4000")[3], "no");
        // The simulator over 4 GB at the largest scoped point.
        let r = retarget(&|r| r.points[5].sim_heap_mb = 4_097.0);
        assert_eq!(row(&r, "simulator memory")[3], "no");
        // One lost edge.
        let r = retarget(&|r| r.points[4].lost = vec!["ns/a -> ns/b".into()]);
        assert_eq!(row(&r, "safety")[3], "no");
        // Scoped xDS more than a quarter of unscoped at the common point.
        let r = retarget(&|r| r.points[4].xds.get_mut("all").unwrap().p50 = 251);
        assert_eq!(
            row(&r, "xDS p50 per proxy, scoped / unscoped at 2000")[3],
            "no"
        );
        // No scoped point beside an unscoped one.
        let r = retarget(&|r| r.points[4].proxies = 2_500);
        let t = row(&r, "xDS p50 per proxy");
        assert_eq!((t[1].as_str(), t[3].as_str()), ("no common point", "no"));
        // No scoped point at all.
        let r = retarget(&|r| r.points.retain(|p| p.mode == Mode::Unscoped));
        assert_eq!(row(&r, "scoped run at")[3], "no");
        assert_eq!(row(&r, "istiod RSS at")[3], "no");
    }

    #[test]
    fn reach_names_measured_interpolated_and_extrapolated_values() {
        let xs = [500, 1_000, 3_500];
        assert_eq!(reach(&xs, 1_000), "at 1000: the fit at a measured point");
        assert_eq!(
            reach(&xs, 2_000),
            "at 2000: interpolated between measured points"
        );
        assert_eq!(
            reach(&xs, 20_000),
            "at 20000: extrapolated, 5.7× beyond the largest measured point (3500)"
        );
        assert_eq!(reach(&[], 20_000), "at 20000: no measured point");
    }

    #[test]
    fn an_earlier_runs_does_not_fit_is_read_as_a_projection() {
        assert_eq!(
            projected("does not fit: istiod and the simulator would need about 14.9 GB, 13.4 GB is available"),
            "skipped, projected not to fit (not tried): istiod and the simulator would need about 14.9 GB, 13.4 GB is available"
        );
        assert_eq!(projected("failed: boom"), "failed: boom");
    }
}
