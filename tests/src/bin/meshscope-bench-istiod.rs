//! `meshscope-bench-istiod`: the effect of meshscope's Sidecars measured on
//! a real istiod (run by `tests/bench/run istiod`).
//!
//! For each scale of the reference scenario (namespace `default`, 200·k
//! httpbin Deployments × 2 pods, 20·k sleeps each calling 10 httpbins), it
//! connects one simulated sidecar per pod and measures, before and after
//! `kubectl meshscope apply` from the scenario's access logs:
//! - the xDS each proxy holds, by type (protobuf bytes of the resources as
//!   istiod sends them);
//! - which proxies a VirtualService change on httpbin-0 is pushed to, the
//!   bytes pushed, and the time from the apply until the last pushed proxy
//!   has ACKed;
//! - istiod's own RSS and CPU.
//!
//! It also checks safety (every observed edge's cluster is still sent) and
//! compares each proxy's clusters, listeners, routes and bytes with what
//! `explain` predicts. Prints a markdown table, the calibration table, and
//! as its last line one JSON object.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::istiod::{Istiod, ProcessUsage, ENGINE_VERSION};
use meshscope_e2e::livescale::{cleanup, deploy, kubectl_json, NS};
use meshscope_e2e::world::Pod;
use meshscope_e2e::xds::{ProxyConfig, Sim};
use meshscope_e2e::{LogForm, Scenario};
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

#[derive(Clone, Debug, Default, Serialize)]
struct PushResult {
    fanout: usize,
    names: Vec<String>,
    bytes: u64,
    seconds: f64,
}

/// Applies `yaml`, waits for the pushes to settle, and reports which
/// proxies received anything after the apply started.
fn measured_push(c: &Cluster, sim: &Sim, yaml: &str) -> Result<PushResult> {
    let t0 = Instant::now();
    c.apply(yaml);
    sim.wait_push_after(t0, Duration::from_secs(3), Duration::from_secs(300))?;
    let mut r = PushResult::default();
    let mut last = t0;
    for p in sim.proxies() {
        let pushes = p.pushes_since(t0);
        if pushes.is_empty() {
            continue;
        }
        r.fanout += 1;
        r.names.push(p.key().to_string());
        for x in &pushes {
            r.bytes += x.bytes;
            if let Some(a) = x.acked_at {
                last = last.max(a);
            }
        }
    }
    r.names.sort();
    r.seconds = last.duration_since(t0).as_secs_f64();
    Ok(r)
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
    let kinds = "namespaces,pods,deployments,replicasets,services,serviceentries.networking.istio.io,sidecars.networking.istio.io,virtualservices.networking.istio.io,destinationrules.networking.istio.io,configmaps";
    let v = kubectl_json(c, &["get", "-A", kinds])?;
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
    mismatches: Vec<String>,
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
        if err.abs() > cal.worst_bytes_error.abs() {
            cal.worst_bytes_error = err;
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
    // target/<profile>/meshscope-bench-istiod -> target/<profile>/kubectl-meshscope
    let plugin = std::env::current_exe()?
        .parent()
        .context("the benchmark's directory")?
        .join("kubectl-meshscope");
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

fn kb(b: f64) -> String {
    format!("{:.1} KB", b / 1000.0)
}

fn main() -> Result<()> {
    let mut scales: Vec<usize> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--scale" => scales.push(args.next().context("--scale N")?.parse()?),
            "-h" | "--help" => {
                println!("usage: meshscope-bench-istiod [--scale N]...   (default: --scale 1)\nNeeds the test control plane (tests/cluster/up) and istiod (tests/istiod/build).");
                return Ok(());
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if scales.is_empty() {
        scales.push(1);
    }
    let c = Cluster::shared();
    let work = tempfile::tempdir()?;
    let mut results = Vec::new();
    for &k in &scales {
        let r = run_scale(c, k, work.path())?;
        eprintln!("[istiod-bench] {k}x done: {}", scale_json(&r));
        results.push(r);
    }
    println!("| scale | proxies | phase | mean xDS per proxy | max | CDS | LDS | RDS | EDS | VS change pushed to | bytes pushed | push done | istiod RSS | istiod CPU |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &results {
        for (phase, sz, push, usage, cpu) in [
            (
                "before",
                &r.before,
                &r.push_before,
                &r.istiod_before,
                r.istiod_cpu_connect_s,
            ),
            (
                "after",
                &r.after,
                &r.push_after,
                &r.istiod_after,
                r.istiod_cpu_apply_s,
            ),
        ] {
            let t = |k: &str| {
                let (b, n) = sz.by_type.get(k).copied().unwrap_or_default();
                format!("{} ({n:.0})", kb(b))
            };
            println!(
                "| {}x | {} | {phase} | {} | {} | {} | {} | {} | {} | {} of {} | {} | {:.3} s | {} MB | {cpu:.1} s |",
                r.scale,
                r.proxies,
                kb(sz.bytes_mean),
                kb(sz.bytes_max as f64),
                t("cds"),
                t("lds"),
                t("rds"),
                t("eds"),
                push.fanout,
                r.proxies,
                kb(push.bytes as f64),
                push.seconds,
                usage.rss_kb / 1024,
            );
        }
    }
    println!();
    println!("| scale | phase | proxies | clusters equal | listeners equal | routes equal | CDS pred/actual | LDS pred/actual | RDS pred/actual | EDS pred/actual | total pred/actual | worst proxy |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for r in &results {
        for (phase, cal) in [
            ("before", &r.calibration_before),
            ("after", &r.calibration_after),
        ] {
            let t = |k: &str| {
                let (p, a) = cal.bytes.get(k).copied().unwrap_or_default();
                format!("{:.2}", p as f64 / a.max(1) as f64)
            };
            println!(
                "| {}x | {phase} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} | {:+.1}% |",
                r.scale,
                cal.proxies,
                cal.clusters_equal,
                cal.listeners_equal,
                cal.routes_equal,
                t("cds"),
                t("lds"),
                t("rds"),
                t("eds"),
                cal.total_predicted as f64 / cal.total_actual.max(1) as f64,
                cal.worst_bytes_error * 100.0
            );
            for m in &cal.mismatches {
                eprintln!("[istiod-bench] {}x {phase}: {m}", r.scale);
            }
        }
    }
    for r in &results {
        for m in &r.safety_missing {
            eprintln!("[istiod-bench] {}x SAFETY: missing {m}", r.scale);
        }
    }
    println!();
    println!("| scale | proxies | apply --wait: push and ACK | apply command | proxies waited for | verify, every proxy | same istiod requests alone | verify OK | missing edges |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &results {
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
    let first = &results[0];
    let json = serde_json::json!({
        "proxies": first.proxies,
        "bytes_mean_before": first.before.bytes_mean.round(),
        "bytes_mean_after": first.after.bytes_mean.round(),
        "bytes_ratio": (first.before.bytes_mean / first.after.bytes_mean.max(1.0) * 10.0).round() / 10.0,
        "fanout_before": first.push_before.fanout,
        "fanout_after": first.push_after.fanout,
        "fanout_after_names": first.push_after.names,
        "push_s_before": (first.push_before.seconds * 1000.0).round() / 1000.0,
        "push_s_after": (first.push_after.seconds * 1000.0).round() / 1000.0,
        "push_bytes_before": first.push_before.bytes,
        "push_bytes_after": first.push_after.bytes,
        "safety_edges": first.safety_edges,
        "safety_missing": first.safety_missing.len(),
        "istiod_rss_mb_before": first.istiod_before.rss_kb / 1024,
        "istiod_rss_mb_after": first.istiod_after.rss_kb / 1024,
        "apply_converged_s": (first.apply_s * 1000.0).round() / 1000.0,
        "apply_wait_s": first.apply_wait_s,
        "verify_s": (first.verify_s * 1000.0).round() / 1000.0,
        "fetch_only_s": (first.fetch_only_s * 1000.0).round() / 1000.0,
        "scales": results.iter().map(scale_json).collect::<Vec<_>>(),
    });
    println!("{json}");
    Ok(())
}
