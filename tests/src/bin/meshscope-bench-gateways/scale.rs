//! One scale: the realistic mesh with its gateways deployed once, then an
//! istiod with the flag off and one with it on, each with the gateways'
//! router proxies connected.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Result};
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::meshgen::{self, Topology};
use meshscope_e2e::world::{service_yaml, SvcPort};
use meshscope_e2e::xds::Sim;
use meshscope_e2e::xdsbench::measured_push;
use serde::Serialize;

use crate::layout::{self, Layout};
use crate::measure::{self, connect, Group, Routers};
use crate::plugin::{self, ImpactGateways, Readiness};
use crate::wouldbreak::{self, WouldBreakResult};

/// A change to one Service (a port added) and the gateways it reached.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Change {
    /// `unrouted` (no gateway routes to it) or `routed`.
    pub kind: String,
    /// `ns/name`.
    pub service: String,
    #[serde(skip)]
    pub workload: usize,
    /// What `impact` predicts.
    pub impact: ImpactGateways,
    /// Gateway workloads istiod pushed to (with how many proxies), flag
    /// off and on.
    pub off: BTreeMap<String, usize>,
    pub on: BTreeMap<String, usize>,
}

/// One istiod's measurements.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FlagRun {
    pub ingress: Group,
    pub egress: Group,
    /// (flow, proxy) pairs checked, and those whose cluster is missing.
    pub edges_checked: usize,
    pub lost: Vec<String>,
    /// Gateways whose `explain` clusters (flag on) equal istiod's, of
    /// those compared; and how the others differ.
    pub engine_equal: usize,
    pub engine_compared: usize,
    pub engine_mismatches: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ScaleResult {
    pub scale: usize,
    pub services: usize,
    pub gateways: usize,
    pub ingress_proxies: usize,
    pub egress_proxies: usize,
    pub observed_flows: usize,
    pub readiness: BTreeMap<String, Readiness>,
    pub off: FlagRun,
    pub on: FlagRun,
    pub changes: Vec<Change>,
    pub would_break: Option<WouldBreakResult>,
}

impl ScaleResult {
    /// Gateway workloads `audit` found safe (MS0026), of all.
    pub fn safe(&self) -> usize {
        self.readiness
            .values()
            .filter(|r| r.code == "MS0026")
            .count()
    }
}

/// The realistic mesh at `k` with its gateways: deployed, measured under
/// both flags, the would-break corpus on top when `would_break`, removed.
pub fn run(
    c: &Cluster,
    k: usize,
    seed: u64,
    work: &Path,
    would_break: bool,
) -> Result<ScaleResult> {
    let mut t = meshgen::realistic(k, seed);
    let l = layout::add_gateways(&mut t);
    eprintln!("[gateways-bench] {k}x: removing an earlier run's namespaces");
    meshgen::cleanup(c, &t);
    let out = measure_deployed(c, &t, &l, k, work, would_break);
    meshgen::cleanup(c, &t);
    out
}

fn measure_deployed(
    c: &Cluster,
    t: &Topology,
    l: &Layout,
    k: usize,
    work: &Path,
    would_break: bool,
) -> Result<ScaleResult> {
    eprintln!(
        "[gateways-bench] {k}x: deploying {} workloads ({} gateways)",
        t.workloads.len(),
        l.gateways.len()
    );
    let pods = meshgen::deploy(c, t)?;
    let routers: Routers = pods
        .into_iter()
        .filter(|(w, _)| l.gateway_of(*w).is_some())
        .collect();
    let mesh_log = t.access_log();
    let n = mesh_log.lines().count() as u64;
    let log = work.join(format!("access-gateways-{k}x.log"));
    std::fs::write(&log, mesh_log + &layout::access_log(t, &l.traffic, n))?;
    let mut r = ScaleResult {
        scale: k,
        services: t.services().len() + t.externals.len(),
        gateways: l.gateways.len(),
        observed_flows: l.traffic.len(),
        ..ScaleResult::default()
    };
    eprintln!("[gateways-bench] {k}x: kubectl meshscope audit -A --access-log");
    let all = plugin::audit(c, &log)?;
    for g in &l.gateways {
        let found = all.get(&g.key).cloned().unwrap_or(Readiness {
            code: "none".into(),
            message: "no readiness finding".into(),
        });
        r.readiness.insert(g.key.clone(), found);
    }
    r.changes = changes(c, t, l)?;
    for flag in [false, true] {
        let run = run_flag(c, t, l, &routers, flag, &mut r.changes)?;
        (r.ingress_proxies, r.egress_proxies) = (run.ingress.proxies, run.egress.proxies);
        *if flag { &mut r.on } else { &mut r.off } = run;
    }
    if would_break {
        r.would_break = Some(wouldbreak::run(c, t, l, &routers, work, &log)?);
    }
    Ok(r)
}

/// The two changes: a port added to a Service no gateway routes to (the
/// mesh's leaf probe) and to the public gateway's first routed Service;
/// what `impact` predicts for each.
fn changes(c: &Cluster, t: &Topology, l: &Layout) -> Result<Vec<Change>> {
    let Some(leaf) = t.leaf_probe().filter(|w| !l.routes_to(t, *w)) else {
        bail!("the mesh has no leaf Service outside the gateways' routes");
    };
    let routed = l.routed_probe;
    let mut out = Vec::new();
    for (kind, w) in [("unrouted", leaf), ("routed", routed)] {
        let wl = &t.workloads[w];
        out.push(Change {
            kind: kind.into(),
            service: format!("{}/{}", wl.namespace, wl.name),
            workload: w,
            impact: plugin::impact(c, &wl.namespace, &wl.name)?,
            ..Change::default()
        });
    }
    Ok(out)
}

/// Service `w` with one more port, `extra`.
fn with_port(t: &Topology, w: usize, extra: u32) -> String {
    let wl = &t.workloads[w];
    let mut svc = t
        .services()
        .into_iter()
        .find(|s| s.namespace == wl.namespace && s.name == wl.name)
        .expect("the workload's Service");
    svc.ports
        .push(SvcPort::new(&format!("http-extra-{extra}"), extra));
    let mut out = String::new();
    service_yaml(&mut out, &svc);
    out
}

fn run_flag(
    c: &Cluster,
    t: &Topology,
    l: &Layout,
    routers: &Routers,
    on: bool,
    changes: &mut [Change],
) -> Result<FlagRun> {
    let tag = format!("{}x flag {}", t.scale, if on { "on" } else { "off" });
    eprintln!(
        "[gateways-bench] {tag}: istiod, {} router proxies",
        routers.len()
    );
    let (istiod, sim) = connect(c, t, routers, on)?;
    let mut r = FlagRun {
        ingress: measure::group(&sim, routers, l, true),
        egress: measure::group(&sim, routers, l, false),
        ..FlagRun::default()
    };
    eprintln!("[gateways-bench] {tag}: ingress {:?}", r.ingress);
    if on {
        (r.edges_checked, r.lost) = measure::lost(&sim, routers, &l.traffic);
        compare_engine(c, &sim, routers, l, &mut r)?;
    }
    for (i, ch) in changes.iter_mut().enumerate() {
        let extra = 18_000 + 10 * u32::from(on) + i as u32;
        eprintln!("[gateways-bench] {tag}: a port added to {}", ch.service);
        let push = measured_push(c, &sim, &with_port(t, ch.workload, extra))?;
        *if on { &mut ch.on } else { &mut ch.off } = measure::reached(&push, routers, l);
    }
    sim.close();
    drop(istiod);
    Ok(r)
}

/// Each gateway's first proxy: `explain`'s clusters with the flag on
/// against istiod's.
fn compare_engine(
    c: &Cluster,
    sim: &Sim,
    routers: &Routers,
    l: &Layout,
    r: &mut FlagRun,
) -> Result<()> {
    for g in &l.gateways {
        let Some((_, pod)) = routers.iter().find(|(w, _)| *w == g.workload) else {
            continue;
        };
        let engine = plugin::filtered_clusters(c, &pod.namespace, &pod.name)?;
        let got = measure::outbound_clusters(sim, routers, g.workload);
        let Some(istiod) = got.first() else { continue };
        r.engine_compared += 1;
        if &engine == istiod {
            r.engine_equal += 1;
            continue;
        }
        let only = |a: &std::collections::BTreeSet<String>,
                    b: &std::collections::BTreeSet<String>| {
            a.difference(b).cloned().collect::<Vec<_>>().join(", ")
        };
        r.engine_mismatches.push(format!(
            "{}: engine only [{}], istiod only [{}]",
            g.key,
            only(&engine, istiod),
            only(istiod, &engine)
        ));
    }
    Ok(())
}
