//! One scale: the scenario deployed on the stand-in node, istiod and the
//! simulated sidecars, scoped by a one-off apply; and the edges each
//! source's run adds and stops.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use meshscope_e2e::bench::Rng;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::istiod::{Istiod, ENGINE_VERSION};
use meshscope_e2e::kubelet::{Logs, StandInKubelet};
use meshscope_e2e::livescale::{cleanup, deploy_with, kubectl_json, NS};
use meshscope_e2e::world::Pod;
use meshscope_e2e::xds::{Proxy, Sim, SimOptions};
use meshscope_e2e::{LogForm, Scenario};

use crate::load::{NewEdge, Retired};

/// What one scale shares between its sources.
pub struct ScaleCtx<'a> {
    pub c: &'a Cluster,
    pub s: Scenario,
    pub istiod: Istiod,
    pub sim: Sim,
    pub kubelet: Arc<StandInKubelet>,
    pub cluster_ips: BTreeMap<usize, String>,
    pub sleep_pods: BTreeMap<usize, String>,
    /// Edges in scope: the scenario's, then each source's new ones.
    pub known: Vec<(usize, usize)>,
    /// httpbins already used by a new edge at this scale.
    pub used: BTreeSet<(usize, usize)>,
    pub proxies: usize,
    pub setup_s: f64,
    pub initial_apply_s: f64,
    pub node: String,
}

/// Deploys the scenario on the stand-in node, starts istiod, connects the
/// sidecars and scopes them with a one-off apply from the access logs.
pub fn setup_scale<'a>(
    c: &'a Cluster,
    k: f64,
    work: &Path,
    stop: &Arc<AtomicBool>,
) -> Result<ScaleCtx<'a>> {
    let t0 = Instant::now();
    let s = Scenario {
        httpbins: ((200.0 * k).round() as usize).max(1),
        sleeps: ((20.0 * k).round() as usize).max(1),
        ..Scenario::reference()
    };
    eprintln!("[watch-bench] {k}x: cleaning namespace {NS}");
    cleanup(c);
    let kubelet = Arc::new(StandInKubelet::start(Logs::new())?);
    let node = c.stand_in_node("watchbench", kubelet.port)?;
    c.node_ready(&node)?;
    {
        let (node, stop) = (node.clone(), stop.clone());
        let c: &'static Cluster = Cluster::shared();
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_secs(10));
                if let Err(e) = c.node_ready(&node) {
                    eprintln!("[watch-bench] node heartbeat: {e:#}");
                }
            }
        });
    }
    eprintln!(
        "[watch-bench] {k}x: deploying {} Deployments on node {node}",
        s.httpbins + s.sleeps
    );
    // Pods on the stand-in node (their logs come from it), with the
    // istio-proxy container their logs are asked for.
    let pods = deploy_with(c, &s, |m| {
        m.replace(
            "    spec:\n      containers:\n",
            &format!("    spec:\n      nodeName: {node}\n      tolerations:\n      - operator: Exists\n      containers:\n      - name: istio-proxy\n        image: docker.io/istio/proxyv2:1.31.0\n"),
        )
    })?;
    let istiod = Istiod::start(c)?;
    eprintln!(
        "[watch-bench] {k}x: connecting {} simulated sidecars",
        pods.len()
    );
    let sim = Sim::connect_with(
        &istiod.grpc_url(),
        pods.iter().map(Pod::proxy_spec).collect(),
        SimOptions {
            concurrency: 64,
            references: true,
            ..SimOptions::default()
        },
    )?;
    sim.wait_stable(Duration::from_secs(3), Duration::from_secs(600))?;
    let setup_s = t0.elapsed().as_secs_f64();

    eprintln!("[watch-bench] {k}x: kubectl meshscope apply from the access logs (the scopes the watcher starts from)");
    let log = work.join(format!("access-{k}x.log"));
    std::fs::write(&log, s.logs(LogForm::Text))?;
    let t1 = Instant::now();
    let out = Command::new(meshscope_e2e::bench::plugin_beside_exe()?)
        .args(["apply", "-n", NS, "--access-log"])
        .arg(&log)
        .args([
            "--wait=15m",
            "--istiod-url",
            &format!("http://{}", istiod.monitoring),
            "--istio-version",
            ENGINE_VERSION,
        ])
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .output()?;
    if !out.status.success() {
        bail!(
            "kubectl meshscope apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    sim.wait_push_after(t1, Duration::from_secs(12), Duration::from_secs(900))?;
    let initial_apply_s = t1.elapsed().as_secs_f64();

    let svcs = kubectl_json(c, &["get", "services", "-n", NS])?;
    let mut cluster_ips = BTreeMap::new();
    for it in svcs["items"].as_array().into_iter().flatten() {
        let name = it["metadata"]["name"].as_str().unwrap_or("");
        if let Some(j) = name
            .strip_prefix("httpbin-")
            .and_then(|j| j.parse::<usize>().ok())
        {
            cluster_ips.insert(
                j,
                it["spec"]["clusterIP"].as_str().unwrap_or("").to_string(),
            );
        }
    }
    let sleep_pods = pods
        .iter()
        .filter_map(|p| {
            let app = p.labels.get("app")?;
            let i = app.strip_prefix("sleep-")?.parse::<usize>().ok()?;
            Some((i, p.name.clone()))
        })
        .collect();
    let known: Vec<(usize, usize)> = s.calls().map(|c| (c.sleep, c.httpbin)).collect();
    Ok(ScaleCtx {
        c,
        proxies: pods.len(),
        used: known.iter().copied().collect(),
        known,
        s,
        istiod,
        sim,
        kubelet,
        cluster_ips,
        sleep_pods,
        setup_s,
        initial_apply_s,
        node,
    })
}

/// Picks `n` new edges (distinct httpbins, each outside its caller's
/// scope and not used before at this scale), due at random times within
/// `spread` from `at`.
pub fn pick_new(
    x: &mut ScaleCtx<'_>,
    rng: &mut Rng,
    n: usize,
    at: Instant,
    spread: Duration,
) -> Vec<NewEdge> {
    let mut out = Vec::new();
    let mut targets = BTreeSet::new();
    let mut tries = 0;
    while out.len() < n && tries < 100_000 {
        tries += 1;
        let (i, j) = (rng.below(x.s.sleeps), rng.below(x.s.httpbins));
        if x.used.contains(&(i, j)) || targets.contains(&j) {
            continue;
        }
        x.used.insert((i, j));
        targets.insert(j);
        let due = at + Duration::from_millis(rng.below(spread.as_millis().max(1) as usize) as u64);
        out.push(NewEdge {
            sleep: i,
            httpbin: j,
            due,
            first: None,
            next: due,
            acked: None,
            passthrough: 0,
            through_cluster: 0,
        });
    }
    out
}

/// Picks `n` known edges to stop calling at random times within `spread`
/// from `at`: callers differ while they can, and each keeps two known
/// edges at least (a workload with no traffic keeps its scope as it is).
pub fn pick_retired(
    x: &ScaleCtx<'_>,
    rng: &mut Rng,
    n: usize,
    at: Instant,
    spread: Duration,
) -> Vec<Retired> {
    let mut out: Vec<Retired> = Vec::new();
    let mut tries = 0;
    while out.len() < n && tries < 100_000 {
        tries += 1;
        let (i, j) = x.known[rng.below(x.known.len())];
        let mine = out.iter().filter(|r| r.sleep == i).count();
        let left = x.known.iter().filter(|e| e.0 == i).count() - mine;
        if out.iter().any(|r| (r.sleep, r.httpbin) == (i, j))
            || left <= 2
            || (mine > 0 && tries < 10_000)
        {
            continue;
        }
        let due = at + Duration::from_millis(rng.below(spread.as_millis().max(1) as usize) as u64);
        out.push(Retired {
            sleep: i,
            httpbin: j,
            due,
            stopped: None,
            dropped: None,
        });
    }
    out
}

/// The ACK time of the last CDS push `p` received at or before `seen`
/// (the push that brought the cluster `seen` found).
pub fn ack_of_push(p: &Proxy, since: Instant, seen: Instant) -> Option<Instant> {
    p.pushes_since(since)
        .iter()
        .rfind(|x| x.ty == "cds" && x.at <= seen)
        .map(|x| x.acked_at.unwrap_or(x.at))
}
