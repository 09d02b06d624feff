//! `meshscope-bench-istiod`: the effect of meshscope's Sidecars measured on
//! a real istiod (run by `tests/bench/run istiod`).
//!
//! Scenarios (`--scenario`):
//! - `reference` (the default): namespace `default`, 200·k httpbin
//!   Deployments × 2 pods, 20·k sleeps each calling 10 httpbins;
//! - `realistic`: a seeded many-namespace mesh with hubs most workloads
//!   call, a Zipf long tail, StatefulSets behind headless Services, DNS
//!   ServiceEntries, an egress gateway and an extension provider
//!   (`meshscope_e2e::meshgen::realistic`);
//! - `social-network`: DeathStarBench's social network and its call graph
//!   (`meshscope_e2e::meshgen::social_network`).
//!
//! For each scale k it connects one simulated sidecar per injected pod and
//! measures, before and after `kubectl meshscope apply` from the
//! scenario's access logs:
//! - the xDS each proxy holds (protobuf bytes of the resources as istiod
//!   sends them): p50, p95 and max by role (hub, caller, leaf), the worst
//!   proxy named;
//! - which proxies a VirtualService change on a hub Service and on a leaf
//!   Service is pushed to, and the bytes pushed; after the apply that must
//!   be exactly its callers' proxies (a caller missed fails as a proxy
//!   pushed outside them does);
//! - istiod's own RSS and CPU.
//!
//! It checks safety (every observed edge keeps its cluster, a call through
//! the egress gateway its route, every proxy the extension provider's
//! cluster) and holds each proxy's clusters, listeners and bytes to what
//! `explain` predicts. Prints markdown tables, the targets with a `met`
//! column, and as its last line one JSON object, also written to
//! `--out-dir` as `istiod-<scenario>-<commit>.json`; exits 1 when a target
//! is missed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use meshscope_e2e::bench::run_plugin as meshscope;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::dist::Dist;
use meshscope_e2e::istiod::{Istiod, ProcessUsage, ENGINE_VERSION};
use meshscope_e2e::livescale::{cleanup, deploy, kubectl_json, NS};
use meshscope_e2e::meshgen::{self, Topology};
use meshscope_e2e::world::Pod;
use meshscope_e2e::xds::{ProxyConfig, Sim, SimOptions};
use meshscope_e2e::xdsbench::{lost_edges, measured_push, probe_vs, PushResult};
use meshscope_e2e::{LogForm, Scenario};
use meshscope_shared::inputs::DUMP_KINDS;
use meshscope_shared::mesh::{IstioVersion, Options};
use meshscope_shared::{Inputs, MeshSnapshot};
use serde::Serialize;

const TYPES: [&str; 4] = ["cds", "lds", "rds", "eds"];

#[derive(Clone, Debug, Default, Serialize)]
struct Sizes {
    proxies: usize,
    bytes_mean: f64,
    bytes_max: u64,
    /// type -> (mean bytes, mean resources)
    by_type: BTreeMap<String, (f64, f64)>,
}

fn sizes(snaps: &[ProxyConfig]) -> Sizes {
    let n = snaps.len().max(1) as f64;
    let mut s = Sizes {
        proxies: snaps.len(),
        ..Default::default()
    };
    for p in snaps {
        s.bytes_mean += p.total_bytes as f64 / n;
        s.bytes_max = s.bytes_max.max(p.total_bytes);
        for t in TYPES {
            let tt = p.total(t);
            let e = s.by_type.entry(t.to_string()).or_default();
            e.0 += tt.bytes as f64 / n;
            e.1 += tt.count as f64 / n;
        }
    }
    s
}

fn vs_yaml(timeout_s: u32) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: httpbin-0-timeout\n  namespace: {NS}\nspec:\n  hosts:\n  - httpbin-0.{NS}.svc.cluster.local\n  http:\n  - timeout: {timeout_s}s\n    route:\n    - destination:\n        host: httpbin-0.{NS}.svc.cluster.local\n        port:\n          number: 8000\n"
    )
}

/// The engine's view of the live cluster, built from the same kinds the
/// plugin reads, for per-proxy predictions.
fn engine_snapshot(c: &Cluster) -> Result<MeshSnapshot> {
    let mut inputs = Inputs::default();
    let v = kubectl_json(c, &["get", "-A", DUMP_KINDS])?;
    for item in v["items"].as_array().cloned().unwrap_or_default() {
        // Objects of kinds the engine does not read are skipped.
        let _ = inputs.add(item);
    }
    let options = Options {
        istio: ENGINE_VERSION.parse::<IstioVersion>()?,
        ..Options::default()
    };
    Ok(MeshSnapshot::build(&inputs, options)?)
}

#[derive(Clone, Debug, Default, Serialize)]
struct Calibration {
    proxies: usize,
    clusters_equal: usize,
    listeners_equal: usize,
    routes_equal: usize,
    /// type -> (sum predicted, sum actual) bytes
    bytes: BTreeMap<String, (u64, u64)>,
    total_predicted: u64,
    total_actual: u64,
    worst_bytes_error: f64,
    /// The proxy with the worst bytes error.
    worst_proxy: String,
    /// Proxies whose predicted bytes are off by more than ±15%.
    beyond_15: usize,
    mismatches: Vec<String>,
}

impl Calibration {
    fn total_ratio(&self) -> f64 {
        self.total_predicted as f64 / self.total_actual.max(1) as f64
    }
}

fn calibrate(snap: &MeshSnapshot, sim: &Sim) -> Calibration {
    let mut cal = Calibration::default();
    for p in sim.proxies() {
        let spec = p.spec();
        let Some(pid) = snap
            .pods_named(&spec.pod_name)
            .iter()
            .copied()
            .find(|i| snap.pods[*i].namespace == spec.namespace)
        else {
            cal.mismatches
                .push(format!("{}: not in the snapshot", p.key()));
            continue;
        };
        let w = snap.pods[pid].workload;
        let e = meshscope_shared::explain::explain(snap, w, Some(pid), None);
        let got = p.snapshot();
        cal.proxies += 1;
        let (c, l, r) = (
            got.total("cds").count as u64,
            got.total("lds").count as u64,
            got.total("rds").count as u64,
        );
        for (what, got, predicted, equal) in [
            ("clusters", c, e.estimate.clusters, &mut cal.clusters_equal),
            (
                "listeners",
                l,
                e.estimate.listeners,
                &mut cal.listeners_equal,
            ),
        ] {
            if got == predicted {
                *equal += 1;
            } else if cal.mismatches.len() < 10 {
                cal.mismatches.push(format!(
                    "{}: {what} predicted {predicted} actual {got}",
                    p.key()
                ));
            }
        }
        if r == e.estimate.routes {
            cal.routes_equal += 1;
        }
        for (t, predicted) in [
            ("cds", e.estimate.bytes_cds),
            ("lds", e.estimate.bytes_lds),
            ("rds", e.estimate.bytes_rds),
            ("eds", e.estimate.bytes_eds),
        ] {
            let b = cal.bytes.entry(t.to_string()).or_default();
            b.0 += predicted;
            b.1 += got.total(t).bytes;
        }
        cal.total_predicted += e.estimate.bytes;
        cal.total_actual += got.total_bytes;
        let err =
            (e.estimate.bytes as f64 - got.total_bytes as f64) / got.total_bytes.max(1) as f64;
        if err.abs() > 0.15 {
            cal.beyond_15 += 1;
        }
        if err.abs() > cal.worst_bytes_error.abs() || cal.worst_proxy.is_empty() {
            cal.worst_bytes_error = err;
            cal.worst_proxy = p.key().to_string();
        }
    }
    cal
}

#[derive(Clone, Debug, Default, Serialize)]
struct ScaleResult {
    scale: usize,
    proxies: usize,
    services: usize,
    before: Sizes,
    after: Sizes,
    /// Per role (sleeps call, httpbins are called), and `all`.
    before_roles: BTreeMap<String, Dist>,
    after_roles: BTreeMap<String, Dist>,
    /// The proxies of httpbin-0's callers.
    leaf_callers: Vec<String>,
    push_before: PushResult,
    push_after: PushResult,
    istiod_idle: ProcessUsage,
    istiod_before: ProcessUsage,
    istiod_after: ProcessUsage,
    /// CPU seconds istiod spent on each phase.
    istiod_cpu_connect_s: f64,
    istiod_cpu_apply_s: f64,
    safety_edges: usize,
    safety_missing: Vec<String>,
    calibration_before: Calibration,
    calibration_after: Calibration,
    apply_s: f64,
    /// `apply --wait`: the wait it reports (push and ACK of every affected
    /// proxy), and the whole command (reads, writes, wait, closing verify).
    apply_wait_s: f64,
    apply_command_s: f64,
    apply_waited_proxies: usize,
    /// `verify` of every proxy, with the access log (missing-edge check).
    verify_s: f64,
    verify_ok: usize,
    verify_missing_edges: usize,
    /// The same istiod requests verify makes (syncz, then sidecarz and
    /// config_dump per proxy), fetched alone: the floor verify sits on.
    fetch_only_s: f64,
}

/// `waited 1.23 s for istiod to push 220 Sidecars and for 420 proxies to ACK`.
fn parse_waited(stderr: &str) -> Option<(f64, usize)> {
    let line = stderr.lines().find(|l| l.starts_with("waited "))?;
    let secs = line.split_whitespace().nth(1)?.parse().ok()?;
    let proxies = line
        .split(" and for ")
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some((secs, proxies))
}

fn run_scale(c: &Cluster, scale: usize, work: &std::path::Path) -> Result<ScaleResult> {
    let s = Scenario {
        httpbins: 200 * scale,
        sleeps: 20 * scale,
        ..Scenario::reference()
    };
    eprintln!("[istiod-bench] {scale}x: cleaning namespace {NS}");
    cleanup(c);
    eprintln!(
        "[istiod-bench] {scale}x: deploying {} Deployments, {} Services",
        s.httpbins + s.sleeps,
        s.httpbins
    );
    let pods = deploy(c, &s)?;
    let istiod = Istiod::start(c)?;
    std::thread::sleep(Duration::from_secs(2));
    let mut r = ScaleResult {
        scale,
        proxies: pods.len(),
        services: s.httpbins,
        istiod_idle: istiod.usage()?,
        ..Default::default()
    };
    eprintln!(
        "[istiod-bench] {scale}x: connecting {} simulated sidecars",
        pods.len()
    );
    let sim = Sim::connect_many(
        &istiod.grpc_url(),
        pods.iter().map(Pod::proxy_spec).collect(),
        64,
    )?;
    sim.wait_stable(Duration::from_secs(3), Duration::from_secs(600))?;
    r.istiod_before = istiod.usage()?;
    r.istiod_cpu_connect_s = r.istiod_before.cpu_s - r.istiod_idle.cpu_s;
    r.before = sizes(&sim.snapshots());
    r.before_roles = roles_of(&sim, reference_role);
    r.leaf_callers = sim
        .proxies()
        .iter()
        .filter(|p| p.spec().labels.get("app").map(String::as_str) == Some("sleep-0"))
        .map(|p| p.key().to_string())
        .collect();
    eprintln!(
        "[istiod-bench] {scale}x: unscoped: mean {:.0} B per proxy, by type {:?}; istiod {} MB",
        r.before.bytes_mean,
        r.before.by_type,
        r.istiod_before.rss_kb / 1024
    );
    let snap = engine_snapshot(c)?;
    r.calibration_before = calibrate(&snap, &sim);
    eprintln!("[istiod-bench] {scale}x: VirtualService change, unscoped");
    r.push_before = measured_push(c, &sim, &vs_yaml(5))?;
    eprintln!(
        "[istiod-bench] {scale}x: VirtualService change pushed to {} proxies, {} B, {:.3} s",
        r.push_before.fanout, r.push_before.bytes, r.push_before.seconds
    );

    // Recommend and apply from the scenario's access logs.
    let log = work.join(format!("access-{scale}x.log"));
    std::fs::write(&log, s.logs(LogForm::Text))?;
    let plugin = meshscope_e2e::bench::plugin_beside_exe()?;
    eprintln!("[istiod-bench] {scale}x: kubectl meshscope apply");
    let cpu0 = istiod.usage()?.cpu_s;
    let t0 = Instant::now();
    let istiod_url = format!("http://{}", istiod.monitoring);
    let out = Command::new(&plugin)
        .args(["apply", "-n", NS, "--access-log"])
        .arg(&log)
        .args([
            "--wait=15m",
            "--istiod-url",
            &istiod_url,
            "--istio-version",
            ENGINE_VERSION,
        ])
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .output()
        .with_context(|| format!("run {}", plugin.display()))?;
    r.apply_command_s = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "kubectl meshscope apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let summary = String::from_utf8_lossy(&out.stderr);
    let (wait_s, waited) = parse_waited(&summary)
        .with_context(|| format!("apply --wait says how long it waited:\n{summary}"))?;
    r.apply_wait_s = wait_s;
    r.apply_waited_proxies = waited;
    eprintln!(
        "[istiod-bench] {scale}x: kubectl meshscope apply: {}",
        summary.lines().last().unwrap_or("")
    );
    let applied = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" created") || l.contains(" configured"))
        .count();
    if applied == 0 {
        bail!(
            "kubectl meshscope apply wrote no Sidecar:\n{}\n{summary}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // 220 Sidecars arrive over seconds; istiod debounces changes for up to
    // 10 s (PILOT_DEBOUNCE_MAX), so the quiet window must be longer.
    let last = sim.wait_push_after(t0, Duration::from_secs(12), Duration::from_secs(900))?;
    r.apply_s = last.duration_since(t0).as_secs_f64();
    r.istiod_after = istiod.usage()?;
    r.istiod_cpu_apply_s = r.istiod_after.cpu_s - cpu0;
    r.after = sizes(&sim.snapshots());
    r.after_roles = roles_of(&sim, reference_role);
    let snap = engine_snapshot(c)?;
    r.calibration_after = calibrate(&snap, &sim);

    // Safety: every observed edge still has its cluster.
    for call in s.calls() {
        r.safety_edges += 1;
        let want = format!("outbound|8000||{}", s.httpbin_host(call.httpbin));
        let ok = sim
            .proxies()
            .iter()
            .filter(|p| {
                p.spec().labels.get("app").map(String::as_str)
                    == Some(&format!("sleep-{}", call.sleep))
            })
            .all(|p| p.cluster_names().contains(&want));
        if !ok {
            r.safety_missing
                .push(format!("sleep-{} -> {want}", call.sleep));
        }
    }
    eprintln!("[istiod-bench] {scale}x: VirtualService change, scoped");
    r.push_after = measured_push(c, &sim, &vs_yaml(6))?;

    // verify after the push measurement: its config dumps keep istiod busy.
    eprintln!("[istiod-bench] {scale}x: kubectl meshscope verify");
    let t0 = Instant::now();
    let out = Command::new(&plugin)
        .args(["verify", "-n", NS, "-o", "json", "--access-log"])
        .arg(&log)
        .args([
            "--istiod-url",
            &istiod_url,
            "--istio-version",
            ENGINE_VERSION,
        ])
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .output()
        .with_context(|| format!("run {}", plugin.display()))?;
    r.verify_s = t0.elapsed().as_secs_f64();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("verify -o json: {}", String::from_utf8_lossy(&out.stderr)))?;
    r.verify_ok = v["summary"]["ok"].as_u64().unwrap_or(0) as usize;
    r.verify_missing_edges = v["summary"]["missing_edges"].as_u64().unwrap_or(0) as usize;
    eprintln!(
        "[istiod-bench] {scale}x: verify {:.2} s: {}",
        r.verify_s,
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("")
    );
    let t0 = Instant::now();
    istiod.debug("/debug/syncz")?;
    for p in &pods {
        let id = format!("{}.{}", p.name, p.namespace);
        istiod.debug(&format!("/debug/sidecarz?proxyID={id}"))?;
        istiod.debug(&format!(
            "/debug/config_dump?proxyID={id}&types=cds,lds,rds"
        ))?;
    }
    r.fetch_only_s = t0.elapsed().as_secs_f64();

    sim.close();
    drop(istiod);
    cleanup(c);
    Ok(r)
}

/// One scale's figures, for the per-scale progress line and the final JSON.
fn scale_json(r: &ScaleResult) -> serde_json::Value {
    serde_json::json!({
        "scale": r.scale,
        "proxies": r.proxies,
        "services": r.services,
        "bytes_mean_before": r.before.bytes_mean.round(),
        "bytes_mean_after": r.after.bytes_mean.round(),
        "fanout_before": r.push_before.fanout,
        "fanout_after": r.push_after.fanout,
        "push_s_before": r.push_before.seconds,
        "push_s_after": r.push_after.seconds,
        "istiod_rss_mb_before": r.istiod_before.rss_kb / 1024,
        "istiod_rss_mb_after": r.istiod_after.rss_kb / 1024,
        "istiod_cpu_connect_s": r.istiod_cpu_connect_s,
        "istiod_cpu_apply_s": r.istiod_cpu_apply_s,
        "apply_converged_s": r.apply_s,
        "apply_wait_s": r.apply_wait_s,
        "apply_command_s": (r.apply_command_s * 1000.0).round() / 1000.0,
        "apply_waited_proxies": r.apply_waited_proxies,
        "verify_s": (r.verify_s * 1000.0).round() / 1000.0,
        "verify_ok": r.verify_ok,
        "verify_missing_edges": r.verify_missing_edges,
        "fetch_only_s": (r.fetch_only_s * 1000.0).round() / 1000.0,
    })
}

// === roles, probes, the common summary ===

/// Each proxy's config, distributed by `role_of` its key.
fn roles_of(sim: &Sim, role_of: impl Fn(&str) -> &'static str) -> BTreeMap<String, Dist> {
    let snaps: Vec<(String, ProxyConfig)> = sim
        .proxies()
        .iter()
        .map(|p| (p.key().to_string(), p.snapshot()))
        .collect();
    Dist::by_role(&snaps, role_of)
}

/// In the reference scenario the sleeps call and the httpbins are called
/// by one sleep each: no hub.
fn reference_role(key: &str) -> &'static str {
    if key
        .split('/')
        .nth(1)
        .is_some_and(|p| p.starts_with("sleep-"))
    {
        "caller"
    } else {
        "leaf"
    }
}

/// A VirtualService change on one Service: to whom it was pushed, before
/// and after, against the proxies of the workloads that call it.
#[derive(Clone, Debug, Default, Serialize)]
struct Probe {
    /// `hub` or `leaf`.
    role: String,
    host: String,
    callers: Vec<String>,
    before: PushResult,
    after: PushResult,
    /// Pushed after the apply although not a caller.
    after_outside: Vec<String>,
    /// Callers the change did not reach after the apply.
    after_missed: Vec<String>,
}

impl Probe {
    fn new(role: &str, host: String, callers: Vec<String>) -> Self {
        Probe {
            role: role.into(),
            host,
            callers,
            ..Probe::default()
        }
    }

    /// Compares the proxies pushed after the apply with the callers' (both
    /// are keys of connected proxies: every injected pod is simulated).
    fn finish(&mut self) {
        let callers: BTreeSet<&String> = self.callers.iter().collect();
        let pushed: BTreeSet<&String> = self.after.names.iter().collect();
        self.after_outside = pushed.difference(&callers).map(|n| (*n).clone()).collect();
        self.after_missed = callers.difference(&pushed).map(|n| (*n).clone()).collect();
    }

    /// The target: after the apply the change reaches exactly its callers'
    /// proxies (every one, and no other), fewer than before.
    fn row(&self, k: &str) -> [String; 5] {
        let ok = self.after_missed.is_empty()
            && self.after_outside.is_empty()
            && self.after.fanout < self.before.fanout;
        [
            k.to_string(),
            format!(
                "{} change ({}) pushed to, before / after",
                self.role, self.host
            ),
            format!(
                "{} / {}; callers missed: {}; pushed outside: {}",
                self.before.fanout,
                self.after.fanout,
                some(&self.after_missed),
                some(&self.after_outside)
            ),
            format!(
                "after = its callers' {} proxies (each reached, no other), fewer than before",
                self.callers.len()
            ),
            if ok { "yes" } else { "no" }.to_string(),
        ]
    }
}

/// `none`, the names, or how many and the first five.
fn some(names: &[String]) -> String {
    match names.len() {
        0 => "none".to_string(),
        n if n <= 5 => names.join(", "),
        n => format!("{n}: {}, ...", names[..5].join(", ")),
    }
}

/// One scale of one scenario, in the form every table and target reads.
#[derive(Clone, Debug, Default, Serialize)]
struct Summary {
    scale: usize,
    proxies: usize,
    services: usize,
    edges: usize,
    before: BTreeMap<String, Dist>,
    after: BTreeMap<String, Dist>,
    probes: Vec<Probe>,
    /// Observed edges checked (per caller workload), and those lost.
    safety_edges: usize,
    lost: Vec<String>,
    calibration_before: Calibration,
    calibration_after: Calibration,
    istiod_before: ProcessUsage,
    istiod_after: ProcessUsage,
    istiod_cpu_connect_s: f64,
    istiod_cpu_apply_s: f64,
    /// From the start of `apply` until nothing moved for 12 s.
    apply_converged_s: f64,
    apply_wait_s: f64,
    apply_waited_proxies: usize,
    sidecars_written: usize,
    /// The reference scenario's own figures (verify, the old JSON keys).
    extra: serde_json::Value,
}

fn reference_summary(r: &ScaleResult) -> Summary {
    let mut probe = Probe::new(
        "leaf",
        format!("httpbin-0.{NS}.svc.cluster.local"),
        r.leaf_callers.clone(),
    );
    probe.before = r.push_before.clone();
    probe.after = r.push_after.clone();
    probe.finish();
    Summary {
        scale: r.scale,
        proxies: r.proxies,
        services: r.services,
        edges: r.safety_edges,
        before: r.before_roles.clone(),
        after: r.after_roles.clone(),
        probes: vec![probe],
        safety_edges: r.safety_edges,
        lost: r.safety_missing.clone(),
        calibration_before: r.calibration_before.clone(),
        calibration_after: r.calibration_after.clone(),
        istiod_before: r.istiod_before,
        istiod_after: r.istiod_after,
        istiod_cpu_connect_s: r.istiod_cpu_connect_s,
        istiod_cpu_apply_s: r.istiod_cpu_apply_s,
        apply_converged_s: r.apply_s,
        apply_wait_s: r.apply_wait_s,
        apply_waited_proxies: r.apply_waited_proxies,
        sidecars_written: 0,
        extra: scale_json(r),
    }
}

/// One scale of a generated topology, before and after `apply -A`.
fn run_topology(c: &Cluster, t: &Topology, work: &Path) -> Result<Summary> {
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

// === report ===

fn kb(b: f64) -> String {
    format!("{:.1} KB", b / 1000.0)
}

/// (scale, measure, value, target, met) rows.
fn targets(s: &Summary) -> Vec<[String; 5]> {
    let yes = |b: bool| if b { "yes" } else { "no" }.to_string();
    let k = format!("{}x", s.scale);
    let mut rows = Vec::new();
    let (b, a) = (&s.before["all"], &s.after["all"]);
    let ratio = b.mean / a.mean.max(1.0);
    rows.push([
        k.clone(),
        "mean xDS per proxy, before / after".into(),
        format!("{} / {} = {ratio:.1}x", kb(b.mean), kb(a.mean)),
        ">= 2x".into(),
        yes(ratio >= 2.0),
    ]);
    for (role, d) in &s.before {
        if role == "all" {
            continue;
        }
        let after = s.after.get(role).map(|x| x.p95).unwrap_or(0);
        rows.push([
            k.clone(),
            format!("p95 xDS per {role} proxy ({}), before / after", d.proxies),
            format!("{} / {}", kb(d.p95 as f64), kb(after as f64)),
            "after < before".into(),
            yes(after < d.p95),
        ]);
    }
    for p in &s.probes {
        rows.push(p.row(&k));
    }
    rows.push([
        k.clone(),
        format!(
            "observed edges that lost their cluster or route (of {})",
            s.safety_edges
        ),
        s.lost.len().to_string(),
        "0".into(),
        yes(s.lost.is_empty()),
    ]);
    for (phase, c) in [
        ("before", &s.calibration_before),
        ("after", &s.calibration_after),
    ] {
        rows.push([
            k.clone(),
            format!("{phase}: proxies with clusters and listeners as predicted"),
            format!(
                "{} and {} of {} ({} of {} compared)",
                c.clusters_equal, c.listeners_equal, s.proxies, c.proxies, s.proxies
            ),
            "all".into(),
            yes(c.proxies == s.proxies
                && c.clusters_equal == s.proxies
                && c.listeners_equal == s.proxies),
        ]);
        rows.push([
            k.clone(),
            format!(
                "{phase}: predicted bytes per proxy, worst ({})",
                c.worst_proxy
            ),
            format!(
                "{:+.1}%, {} beyond ±15%",
                c.worst_bytes_error * 100.0,
                c.beyond_15
            ),
            "within ±15% on every proxy".into(),
            yes(c.beyond_15 == 0 && c.proxies > 0),
        ]);
        rows.push([
            k.clone(),
            format!("{phase}: predicted / actual bytes, all proxies"),
            format!("{:.3}", c.total_ratio()),
            "0.95..1.05".into(),
            yes((c.total_ratio() - 1.0).abs() <= 0.05),
        ]);
    }
    rows
}

fn print_tables(scenario: &str, sums: &[Summary], rows: &[[String; 5]]) {
    println!("Scenario: {scenario}");
    println!();
    println!("| scale | role | proxies | phase | p50 xDS per proxy | p95 | max (worst proxy) | mean | CDS p50 | LDS p50 | RDS p50 | EDS p50 |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for s in sums {
        let mut roles: Vec<&String> = s.before.keys().collect();
        roles.sort_by_key(|r| (*r != "all", *r));
        for role in roles {
            for (phase, m) in [("before", &s.before), ("after", &s.after)] {
                let Some(d) = m.get(role) else { continue };
                let t = |k: &str| kb(d.p50_by_type.get(k).copied().unwrap_or(0) as f64);
                println!(
                    "| {}x | {role} | {} | {phase} | {} | {} | {} ({}) | {} | {} | {} | {} | {} |",
                    s.scale,
                    d.proxies,
                    kb(d.p50 as f64),
                    kb(d.p95 as f64),
                    kb(d.max as f64),
                    d.worst,
                    kb(d.mean),
                    t("cds"),
                    t("lds"),
                    t("rds"),
                    t("eds")
                );
            }
        }
    }
    println!();
    println!("| scale | VirtualService change on | its callers' proxies | before: pushed to | bytes | after: pushed to | bytes | after, callers missed | after, pushed outside its callers |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for s in sums {
        for p in &s.probes {
            println!(
                "| {}x | {} ({}) | {} | {} of {} | {} | {} | {} | {} | {} |",
                s.scale,
                p.host,
                p.role,
                p.callers.len(),
                p.before.fanout,
                s.proxies,
                kb(p.before.bytes as f64),
                p.after.fanout,
                kb(p.after.bytes as f64),
                some(&p.after_missed),
                some(&p.after_outside)
            );
        }
    }
    println!();
    println!("| scale | phase | proxies | clusters equal | listeners equal | routes equal | CDS pred/actual | LDS pred/actual | RDS pred/actual | EDS pred/actual | total pred/actual | beyond ±15% | worst proxy |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for s in sums {
        for (phase, cal) in [
            ("before", &s.calibration_before),
            ("after", &s.calibration_after),
        ] {
            let t = |k: &str| {
                let (p, a) = cal.bytes.get(k).copied().unwrap_or_default();
                format!("{:.2}", p as f64 / a.max(1) as f64)
            };
            println!(
                "| {}x | {phase} | {} | {} | {} | {} | {} | {} | {} | {} | {:.3} | {} | {:+.1}% ({}) |",
                s.scale,
                cal.proxies,
                cal.clusters_equal,
                cal.listeners_equal,
                cal.routes_equal,
                t("cds"),
                t("lds"),
                t("rds"),
                t("eds"),
                cal.total_ratio(),
                cal.beyond_15,
                cal.worst_bytes_error * 100.0,
                cal.worst_proxy
            );
            for m in &cal.mismatches {
                eprintln!("[istiod-bench] {}x {phase}: {m}", s.scale);
            }
        }
    }
    for s in sums {
        for m in &s.lost {
            eprintln!("[istiod-bench] {}x SAFETY: {m}", s.scale);
        }
    }
    println!();
    println!("| scale | proxies | edges | istiod RSS before / after | istiod CPU: connect / apply | apply --wait: push and ACK | proxies waited for | converged (12 s quiet) |");
    println!("|---|---|---|---|---|---|---|---|");
    for s in sums {
        println!(
            "| {}x | {} | {} | {} / {} MB | {:.1} / {:.1} s | {:.2} s | {} | {:.1} s |",
            s.scale,
            s.proxies,
            s.edges,
            s.istiod_before.rss_kb / 1024,
            s.istiod_after.rss_kb / 1024,
            s.istiod_cpu_connect_s,
            s.istiod_cpu_apply_s,
            s.apply_wait_s,
            s.apply_waited_proxies,
            s.apply_converged_s
        );
    }
    println!();
    println!("| scale | measure | value | target | met |");
    println!("|---|---|---|---|---|");
    for [k, m, v, t, ok] in rows {
        println!("| {k} | {m} | {v} | {t} | {ok} |");
    }
}

/// The reference scenario's apply and verify timings.
fn print_reference(results: &[ScaleResult]) {
    println!();
    println!("| scale | proxies | apply --wait: push and ACK | apply command | proxies waited for | verify, every proxy | same istiod requests alone | verify OK | missing edges |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in results {
        println!(
            "| {}x | {} | {:.2} s | {:.2} s | {} | {:.2} s | {:.2} s | {} of {} | {} |",
            r.scale,
            r.proxies,
            r.apply_wait_s,
            r.apply_command_s,
            r.apply_waited_proxies,
            r.verify_s,
            r.fetch_only_s,
            r.verify_ok,
            r.proxies,
            r.verify_missing_edges
        );
    }
}

fn summary_json(s: &Summary) -> serde_json::Value {
    let d = |m: &BTreeMap<String, Dist>| -> serde_json::Value {
        m.iter()
            .map(|(k, x)| {
                (
                    k.clone(),
                    serde_json::json!({"proxies": x.proxies, "p50": x.p50, "p95": x.p95,
                        "max": x.max, "worst": x.worst, "mean": x.mean.round()}),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let cal = |c: &Calibration| {
        serde_json::json!({"proxies": c.proxies, "clusters_equal": c.clusters_equal,
            "listeners_equal": c.listeners_equal, "routes_equal": c.routes_equal,
            "total_ratio": (c.total_ratio() * 1000.0).round() / 1000.0,
            "worst_error": (c.worst_bytes_error * 1000.0).round() / 1000.0,
            "worst_proxy": c.worst_proxy, "beyond_15": c.beyond_15})
    };
    serde_json::json!({
        "scale": s.scale, "proxies": s.proxies, "services": s.services, "edges": s.edges,
        "before": d(&s.before), "after": d(&s.after),
        "probes": s.probes.iter().map(|p| serde_json::json!({
            "role": p.role, "host": p.host, "callers": p.callers.len(),
            "fanout_before": p.before.fanout, "fanout_after": p.after.fanout,
            "push_bytes_before": p.before.bytes, "push_bytes_after": p.after.bytes,
            "after_names": p.after.names, "after_outside": p.after_outside,
            "after_missed": p.after_missed,
        })).collect::<Vec<_>>(),
        "safety_edges": s.safety_edges, "lost": s.lost,
        "calibration_before": cal(&s.calibration_before),
        "calibration_after": cal(&s.calibration_after),
        "istiod_rss_mb_before": s.istiod_before.rss_kb / 1024,
        "istiod_rss_mb_after": s.istiod_after.rss_kb / 1024,
        "istiod_cpu_connect_s": s.istiod_cpu_connect_s,
        "istiod_cpu_apply_s": s.istiod_cpu_apply_s,
        "apply_converged_s": (s.apply_converged_s * 1000.0).round() / 1000.0,
        "apply_wait_s": s.apply_wait_s,
        "apply_waited_proxies": s.apply_waited_proxies,
        "sidecars_written": s.sidecars_written,
        "reference": s.extra,
    })
}

struct Args {
    scenario: String,
    scales: Vec<usize>,
    seed: u64,
    out_dir: Option<PathBuf>,
    print_yaml: bool,
    print_log: bool,
}

fn args() -> Result<Args> {
    let mut a = Args {
        scenario: "reference".into(),
        scales: Vec::new(),
        seed: 22,
        out_dir: None,
        print_yaml: false,
        print_log: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--scale" => a.scales.push(it.next().context("--scale N")?.parse()?),
            "--scenario" => a.scenario = it.next().context("--scenario NAME")?,
            "--seed" => a.seed = it.next().context("--seed N")?.parse()?,
            "--out-dir" => a.out_dir = Some(it.next().context("--out-dir DIR")?.into()),
            "--print-yaml" => a.print_yaml = true,
            "--print-log" => a.print_log = true,
            "-h" | "--help" => {
                println!("usage: meshscope-bench-istiod [--scenario reference|realistic|social-network] [--scale N]... [--seed N] [--out-dir DIR]\n       meshscope-bench-istiod --scenario realistic|social-network [--scale N] [--seed N] --print-yaml|--print-log\n(default: --scenario reference --scale 1 --seed 22). --out-dir writes the JSON line, pretty, to DIR/istiod-<scenario>-<commit>.json.\n--print-yaml prints the scenario's manifests, --print-log its access log, and exit.\nNeeds the test control plane (tests/cluster/up) and istiod (tests/istiod/build).");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if a.scales.is_empty() {
        a.scales.push(1);
    }
    if a.scenario != "reference" && meshgen::by_name(&a.scenario, 1, a.seed).is_none() {
        bail!(
            "unknown scenario {:?} (reference, realistic, social-network)",
            a.scenario
        );
    }
    Ok(a)
}

fn main() -> std::process::ExitCode {
    meshscope_e2e::tool_exit(try_main())
}

fn try_main() -> Result<()> {
    let a = args()?;
    if a.print_yaml || a.print_log {
        let t = meshgen::by_name(&a.scenario, a.scales[0], a.seed)
            .context("--print-yaml and --print-log take realistic or social-network")?;
        let text = if a.print_yaml {
            t.yaml()
        } else {
            t.access_log()
        };
        // A closed pipe (`| head`) ends the output, not in a panic.
        let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
        return Ok(());
    }
    let c = Cluster::shared();
    let work = tempfile::tempdir()?;
    let mut sums = Vec::new();
    let mut reference = Vec::new();
    for &k in &a.scales {
        let s = if a.scenario == "reference" {
            let r = run_scale(c, k, work.path())?;
            let s = reference_summary(&r);
            reference.push(r);
            s
        } else {
            let t = meshgen::by_name(&a.scenario, k, a.seed).context("scenario")?;
            let outcome = run_topology(c, &t, work.path());
            if outcome.is_err() {
                meshgen::cleanup(c, &t);
            }
            outcome?
        };
        eprintln!(
            "[istiod-bench] {} {k}x done: {}",
            a.scenario,
            summary_json(&s)
        );
        sums.push(s);
    }
    let rows: Vec<[String; 5]> = sums.iter().flat_map(targets).collect();
    let met = rows.iter().all(|r| r[4] != "no");
    print_tables(&a.scenario, &sums, &rows);
    if !reference.is_empty() {
        print_reference(&reference);
    }
    let commit = meshscope_e2e::bench::commit();
    let json = serde_json::json!({
        "scenario": a.scenario,
        "seed": if a.scenario == "reference" { serde_json::Value::Null } else { a.seed.into() },
        "commit": commit,
        "met": met,
        "missed": rows.iter().filter(|r| r[4] == "no").map(|r| format!("{} {}", r[0], r[1])).collect::<Vec<_>>(),
        "scales": sums.iter().map(summary_json).collect::<Vec<_>>(),
    });
    if let Some(dir) = &a.out_dir {
        std::fs::create_dir_all(dir)?;
        let f = dir.join(format!("istiod-{}-{commit}.json", a.scenario));
        std::fs::write(&f, serde_json::to_string_pretty(&json)? + "\n")?;
        eprintln!("[istiod-bench] wrote {}", f.display());
    }
    println!("{json}");
    if !met {
        std::process::exit(1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pushed(names: &[&str]) -> PushResult {
        PushResult {
            fanout: names.len(),
            names: names.iter().map(|n| n.to_string()).collect(),
            ..PushResult::default()
        }
    }

    /// A leaf probe with callers `a` and `b` among four proxies, pushed to
    /// all four before the apply and to `after` after it.
    fn probe(after: &[&str]) -> Probe {
        let mut p = Probe::new("leaf", "leaf.ns".into(), vec!["ns/a".into(), "ns/b".into()]);
        p.before = pushed(&["ns/a", "ns/b", "ns/c", "ns/d"]);
        p.after = pushed(after);
        p.finish();
        p
    }

    #[test]
    fn a_change_reaching_none_of_its_callers_misses_the_target() {
        let p = probe(&[]);
        assert_eq!(p.after_missed, ["ns/a", "ns/b"]);
        let row = p.row("1x");
        assert_eq!(row[4], "no");
        assert!(row[2].contains("callers missed: ns/a, ns/b"), "{}", row[2]);
    }

    #[test]
    fn a_change_missing_one_caller_misses_the_target_and_names_it() {
        let p = probe(&["ns/a"]);
        assert_eq!(p.after_missed, ["ns/b"]);
        assert!(p.after_outside.is_empty());
        let row = p.row("1x");
        assert_eq!(row[4], "no");
        assert!(row[2].contains("callers missed: ns/b;"), "{}", row[2]);
    }

    #[test]
    fn a_change_pushed_outside_its_callers_misses_the_target() {
        let p = probe(&["ns/a", "ns/b", "ns/c"]);
        assert!(p.after_missed.is_empty());
        assert_eq!(p.after_outside, ["ns/c"]);
        let row = p.row("1x");
        assert_eq!(row[4], "no");
        assert!(row[2].contains("pushed outside: ns/c"), "{}", row[2]);
    }

    #[test]
    fn a_change_reaching_exactly_its_callers_meets_the_target() {
        let p = probe(&["ns/a", "ns/b"]);
        let row = p.row("1x");
        assert_eq!(row[4], "yes", "{row:?}");
        assert_eq!(row[2], "4 / 2; callers missed: none; pushed outside: none");
    }

    #[test]
    fn a_change_pushed_to_as_many_as_before_misses_the_target() {
        let mut p = probe(&["ns/a", "ns/b"]);
        p.before = pushed(&["ns/a", "ns/b"]);
        assert_eq!(p.row("1x")[4], "no");
    }

    fn dist(proxies: usize, mean: f64, p95: u64) -> Dist {
        Dist {
            proxies,
            mean,
            p95,
            ..Dist::default()
        }
    }

    /// Four proxies, 100 KB each before and 10 KB after, the exact probe,
    /// no edge lost, every proxy predicted.
    fn summary() -> Summary {
        let cal = Calibration {
            proxies: 4,
            clusters_equal: 4,
            listeners_equal: 4,
            routes_equal: 4,
            total_predicted: 1_000,
            total_actual: 1_000,
            ..Calibration::default()
        };
        let roles = |bytes: f64| {
            BTreeMap::from([
                ("all".to_string(), dist(4, bytes, bytes as u64)),
                ("caller".to_string(), dist(2, bytes, bytes as u64)),
            ])
        };
        Summary {
            scale: 1,
            proxies: 4,
            before: roles(100_000.0),
            after: roles(10_000.0),
            probes: vec![probe(&["ns/a", "ns/b"])],
            safety_edges: 2,
            calibration_before: cal.clone(),
            calibration_after: cal,
            ..Summary::default()
        }
    }

    fn met(s: &Summary, measure: &str) -> String {
        let rows = targets(s);
        let row = rows
            .iter()
            .find(|r| r[1].starts_with(measure))
            .unwrap_or_else(|| panic!("no target {measure:?} in {rows:?}"));
        row[4].clone()
    }

    #[test]
    fn every_target_is_met_by_a_good_run_and_each_fails_on_its_own_miss() {
        let good = summary();
        assert!(
            targets(&good).iter().all(|r| r[4] == "yes"),
            "{:?}",
            targets(&good)
        );
        let missed = |f: &dyn Fn(&mut Summary), measure: &str| {
            let mut s = summary();
            f(&mut s);
            assert_eq!(met(&s, measure), "no", "{measure}");
        };
        missed(
            &|s| s.after.get_mut("all").unwrap().mean = 60_000.0,
            "mean xDS per proxy",
        );
        missed(
            &|s| s.after.get_mut("caller").unwrap().p95 = 100_000,
            "p95 xDS per caller proxy",
        );
        missed(&|s| s.probes = vec![probe(&["ns/a"])], "leaf change");
        missed(&|s| s.lost = vec!["ns/a -> ns/b".into()], "observed edges");
        missed(
            &|s| s.calibration_after.listeners_equal = 3,
            "after: proxies with clusters and listeners",
        );
        missed(
            &|s| s.calibration_before.proxies = 3,
            "before: proxies with clusters and listeners",
        );
        missed(
            &|s| s.calibration_after.beyond_15 = 1,
            "after: predicted bytes per proxy",
        );
        missed(
            &|s| s.calibration_before.total_predicted = 1_051,
            "before: predicted / actual bytes",
        );
    }

    #[test]
    fn many_names_are_counted_and_the_first_five_named() {
        let names: Vec<String> = (0..7).map(|i| format!("ns/p{i}")).collect();
        assert_eq!(some(&names), "7: ns/p0, ns/p1, ns/p2, ns/p3, ns/p4, ...");
    }
}
