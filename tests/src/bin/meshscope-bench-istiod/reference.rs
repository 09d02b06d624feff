//! The reference scenario at scale k: 200·k httpbins and 20·k sleeps in
//! one namespace, measured before and after `kubectl meshscope apply`
//! from its access logs, then `verify` of every proxy.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::dist::Dist;
use meshscope_e2e::istiod::{Istiod, ProcessUsage, ENGINE_VERSION};
use meshscope_e2e::livescale::{cleanup, deploy, NS};
use meshscope_e2e::world::Pod;
use meshscope_e2e::xds::Sim;
use meshscope_e2e::xdsbench::{measured_push, PushResult};
use meshscope_e2e::{LogForm, Scenario};
use serde::Serialize;

use crate::measure::{calibrate, engine_snapshot, roles_of, sizes, Calibration, Sizes};
use crate::probe::Probe;
use crate::summary::Summary;

pub fn vs_yaml(timeout_s: u32) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: httpbin-0-timeout\n  namespace: {NS}\nspec:\n  hosts:\n  - httpbin-0.{NS}.svc.cluster.local\n  http:\n  - timeout: {timeout_s}s\n    route:\n    - destination:\n        host: httpbin-0.{NS}.svc.cluster.local\n        port:\n          number: 8000\n"
    )
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ScaleResult {
    pub scale: usize,
    pub proxies: usize,
    pub services: usize,
    pub before: Sizes,
    pub after: Sizes,
    /// Per role (sleeps call, httpbins are called), and `all`.
    pub before_roles: BTreeMap<String, Dist>,
    pub after_roles: BTreeMap<String, Dist>,
    /// The proxies of httpbin-0's callers.
    pub leaf_callers: Vec<String>,
    pub push_before: PushResult,
    pub push_after: PushResult,
    pub istiod_idle: ProcessUsage,
    pub istiod_before: ProcessUsage,
    pub istiod_after: ProcessUsage,
    /// CPU seconds istiod spent on each phase.
    pub istiod_cpu_connect_s: f64,
    pub istiod_cpu_apply_s: f64,
    pub safety_edges: usize,
    pub safety_missing: Vec<String>,
    pub calibration_before: Calibration,
    pub calibration_after: Calibration,
    pub apply_s: f64,
    /// `apply --wait`: the wait it reports (push and ACK of every affected
    /// proxy), and the whole command (reads, writes, wait, closing verify).
    pub apply_wait_s: f64,
    pub apply_command_s: f64,
    pub apply_waited_proxies: usize,
    /// `verify` of every proxy, with the access log (missing-edge check).
    pub verify_s: f64,
    pub verify_ok: usize,
    pub verify_missing_edges: usize,
    /// The same istiod requests verify makes (syncz, then sidecarz and
    /// config_dump per proxy), fetched alone: the floor verify sits on.
    pub fetch_only_s: f64,
}

/// `waited 1.23 s for istiod to push 220 Sidecars and for 420 proxies to ACK`.
pub fn parse_waited(stderr: &str) -> Option<(f64, usize)> {
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
/// One scale of the reference scenario while it runs: the scenario, its
/// pods, istiod and the simulated sidecars, and the figures so far.
/// (Fields drop in this order: the sidecars before istiod.)
struct Run<'a> {
    c: &'a Cluster,
    scale: usize,
    sim: Sim,
    r: ScaleResult,
    istiod: Istiod,
    pods: Vec<Pod>,
    s: Scenario,
}

/// The plugin and what its `apply` and `verify` read: the access log and
/// istiod's monitoring URL.
struct Plugin {
    path: PathBuf,
    log: PathBuf,
    istiod_url: String,
}

pub fn run_scale(c: &Cluster, scale: usize, work: &std::path::Path) -> Result<ScaleResult> {
    let mut x = Run::start(c, scale)?;
    x.unscoped()?;
    let plugin = x.apply(work)?;
    x.safety();
    eprintln!("[istiod-bench] {scale}x: VirtualService change, scoped");
    x.r.push_after = measured_push(c, &x.sim, &vs_yaml(6))?;
    x.verify(&plugin)?;
    x.fetch_only()?;
    let Run { sim, istiod, r, .. } = x;
    sim.close();
    drop(istiod);
    cleanup(c);
    Ok(r)
}

impl<'a> Run<'a> {
    /// Deploys the scenario, starts istiod and connects a simulated
    /// sidecar per pod.
    fn start(c: &'a Cluster, scale: usize) -> Result<Run<'a>> {
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
        let r = ScaleResult {
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
        Ok(Run {
            c,
            scale,
            sim,
            r,
            istiod,
            pods,
            s,
        })
    }

    /// Before any Sidecar: sizes, roles, the leaf's callers, the
    /// calibration, and a VirtualService change's push.
    fn unscoped(&mut self) -> Result<()> {
        let (c, scale, sim, r) = (self.c, self.scale, &self.sim, &mut self.r);
        r.istiod_before = self.istiod.usage()?;
        r.istiod_cpu_connect_s = r.istiod_before.cpu_s - r.istiod_idle.cpu_s;
        r.before = sizes(&sim.snapshots());
        r.before_roles = roles_of(sim, reference_role);
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
        r.calibration_before = calibrate(&snap, sim);
        eprintln!("[istiod-bench] {scale}x: VirtualService change, unscoped");
        r.push_before = measured_push(c, sim, &vs_yaml(5))?;
        eprintln!(
            "[istiod-bench] {scale}x: VirtualService change pushed to {} proxies, {} B, {:.3} s",
            r.push_before.fanout, r.push_before.bytes, r.push_before.seconds
        );
        Ok(())
    }

    /// Recommend and apply from the scenario's access logs (`--wait`),
    /// then the sizes, roles and calibration once the pushes settled.
    fn apply(&mut self, work: &Path) -> Result<Plugin> {
        let (c, scale, sim, r) = (self.c, self.scale, &self.sim, &mut self.r);
        let log = work.join(format!("access-{scale}x.log"));
        std::fs::write(&log, self.s.logs(LogForm::Text))?;
        let plugin = meshscope_e2e::bench::plugin_beside_exe()?;
        eprintln!("[istiod-bench] {scale}x: kubectl meshscope apply");
        let cpu0 = self.istiod.usage()?.cpu_s;
        let t0 = Instant::now();
        let istiod_url = format!("http://{}", self.istiod.monitoring);
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
        r.istiod_after = self.istiod.usage()?;
        r.istiod_cpu_apply_s = r.istiod_after.cpu_s - cpu0;
        r.after = sizes(&sim.snapshots());
        r.after_roles = roles_of(sim, reference_role);
        let snap = engine_snapshot(c)?;
        r.calibration_after = calibrate(&snap, sim);
        Ok(Plugin {
            path: plugin,
            log,
            istiod_url,
        })
    }

    /// Safety: every observed edge still has its cluster.
    fn safety(&mut self) {
        let (s, sim, r) = (&self.s, &self.sim, &mut self.r);
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
    }

    /// `verify` of every proxy with the access log, after the push
    /// measurement: its config dumps keep istiod busy.
    fn verify(&mut self, plugin: &Plugin) -> Result<()> {
        let (c, scale, r) = (self.c, self.scale, &mut self.r);
        eprintln!("[istiod-bench] {scale}x: kubectl meshscope verify");
        let t0 = Instant::now();
        let out = Command::new(&plugin.path)
            .args(["verify", "-n", NS, "-o", "json", "--access-log"])
            .arg(&plugin.log)
            .args([
                "--istiod-url",
                &plugin.istiod_url,
                "--istio-version",
                ENGINE_VERSION,
            ])
            .arg("--kubeconfig")
            .arg(&c.kubeconfig)
            .output()
            .with_context(|| format!("run {}", plugin.path.display()))?;
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
        Ok(())
    }

    /// The same istiod requests verify makes (syncz, then sidecarz and
    /// config_dump per proxy), fetched alone.
    fn fetch_only(&mut self) -> Result<()> {
        let t0 = Instant::now();
        self.istiod.debug("/debug/syncz")?;
        for p in &self.pods {
            let id = format!("{}.{}", p.name, p.namespace);
            self.istiod
                .debug(&format!("/debug/sidecarz?proxyID={id}"))?;
            self.istiod.debug(&format!(
                "/debug/config_dump?proxyID={id}&types=cds,lds,rds"
            ))?;
        }
        self.r.fetch_only_s = t0.elapsed().as_secs_f64();
        Ok(())
    }
}

/// One scale's figures, for the per-scale progress line and the final JSON.
pub fn scale_json(r: &ScaleResult) -> serde_json::Value {
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

/// In the reference scenario the sleeps call and the httpbins are called
/// by one sleep each: no hub.
pub fn reference_role(key: &str) -> &'static str {
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

pub fn reference_summary(r: &ScaleResult) -> Summary {
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

/// The reference scenario's apply and verify timings.
pub fn print_reference(results: &[ScaleResult]) {
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
