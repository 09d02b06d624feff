//! `meshscope-bench-watch`: `kubectl meshscope apply --watch` keeping
//! scopes up with new dependencies, on a real istiod (run by
//! `tests/bench/run watch`).
//!
//! For each scale k (420·k proxies: the reference scenario in `default`,
//! scoped first by a one-off `apply` from its access logs), and for each
//! traffic source (pod logs through the stand-in kubelet; a real
//! Prometheus scraping an exporter this benchmark serves, every 5 s):
//! 1. traffic flows on every known edge (one request per edge every 5 s);
//! 2. `apply --watch` starts (release build, `--interval`), and after its
//!    second pass new dependencies appear at random times: sleep-i starts
//!    calling an httpbin outside its scope, one request a second, through
//!    PassthroughCluster until its simulated sidecar has the cluster;
//! 3. per new edge: the time from its first request (the bench's clock,
//!    when it writes the first log line or bumps the counter) to the ACK
//!    of the CDS push that gave the caller's sidecar the cluster, and the
//!    requests that left through PassthroughCluster before that;
//!    Meanwhile as many known edges stop being called, at random times
//!    over the same spread: the watcher runs with `--prune-after` (30 s by
//!    default, three intervals), so it narrows those scopes while it
//!    widens others, and the benchmark waits until the callers' sidecars
//!    have dropped those clusters;
//! 4. then a steady mesh for `--steady` seconds (the same traffic, known
//!    edges only): Sidecar writes (resourceVersions), pushes the sidecars
//!    received, and the watcher's events; extrapolated to an hour;
//! 5. the watcher's CPU (utime + stime) and peak RSS (VmHWM);
//! 6. dangling references from the watcher's start to its stop, a phase
//!    that both widens and narrows: episodes in which a simulated
//!    sidecar's listener or route named a cluster its CDS did not hold
//!    (`tests/src/xds/refs.rs`), by cause. `named-before-cluster` and
//!    `persistent` are what a write order can cause; `cds-before-lds-rds`
//!    is istiod's push order within one push cycle (istio/istio#39837),
//!    reported, not a target;
//! 7. the write order on the sidecars' pushes
//!    (`meshscope_e2e::watcher::check_order`): a narrowing reported right
//!    after widenings (the same pass, or a later one) must not have
//!    reached a proxy before those widenings' pushes were ACKed.
//!
//! Exits 1 when a target is missed: latency p95 > interval + 5 s (or an
//! edge never widened), no narrowing (a count of 0 dangling references
//! would then say nothing), any write-caused dangling reference, any
//! write-order violation, any Sidecar write or push at the steady mesh,
//! or any of these not measured. `cargo test --bin meshscope-bench-watch`
//! holds a report missing each target to [`misses`].
//! Prints markdown tables, then one JSON object as the last line.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use meshscope_e2e::bench::Rng;
use meshscope_e2e::cluster::{Cluster, Prometheus};
use meshscope_e2e::istiod::{process_usage, Istiod, ProcessUsage, ENGINE_VERSION};
use meshscope_e2e::kubelet::{Logs, StandInKubelet};
use meshscope_e2e::livescale::{cleanup, deploy_with, kubectl_json, NS};
use meshscope_e2e::traffic::{Counters, Sink, Traffic};
use meshscope_e2e::watcher::{check_order, selected_changes, Pass, WriteEvent, WriteKind};
use meshscope_e2e::world::Pod;
use meshscope_e2e::xds::refs::Cause;
use meshscope_e2e::xds::{Proxy, Sim, SimOptions};
use meshscope_e2e::{LogForm, Scenario};
use meshscope_test_support::net::{admin_get, free_port};
use serde_json::{json, Value};

/// Known edges get one request every this many seconds.
const KNOWN_PERIOD_S: u64 = 5;
/// The Prometheus scrape interval the issue names.
const SCRAPE: &str = "5s";

#[derive(Clone, Debug)]
struct Opts {
    scales: Vec<f64>,
    interval_s: u64,
    prune_after_s: u64,
    new_edges: usize,
    spread_s: u64,
    steady_s: u64,
    sources: Vec<String>,
    seed: u64,
}

/// One new dependency, as the generator and the monitor share it.
#[derive(Clone, Debug)]
struct NewEdge {
    sleep: usize,
    httpbin: usize,
    /// When its first request is due.
    due: Instant,
    /// When its first request was written.
    first: Option<Instant>,
    next: Instant,
    /// The ACK of the push that gave the caller the cluster.
    acked: Option<Instant>,
    passthrough: u64,
    through_cluster: u64,
}

/// A known edge that stops being called (so the watcher narrows it away).
#[derive(Clone, Debug)]
struct Retired {
    sleep: usize,
    httpbin: usize,
    /// When its calls stop.
    due: Instant,
    stopped: Option<Instant>,
    /// When its caller's sidecar was first seen without the cluster.
    dropped: Option<Instant>,
}

/// What the generator thread sends: known edges, the new ones, and the
/// known ones to stop.
struct Load {
    known: Vec<(usize, usize)>,
    new: Vec<NewEdge>,
    retired: Vec<Retired>,
}

fn cluster_name(s: &Scenario, j: usize) -> String {
    format!("outbound|8000||{}", s.httpbin_host(j))
}

/// Runs until `stop`: known edges every KNOWN_PERIOD_S (spread over the
/// period), new edges every second from when they are due.
fn generate(
    traffic: Arc<Traffic>,
    load: Arc<Mutex<Load>>,
    proxies: BTreeMap<usize, Proxy>,
    stop: Arc<AtomicBool>,
) {
    let start = Instant::now();
    let tick = Duration::from_millis(100);
    let ticks_per_period = KNOWN_PERIOD_S * 10;
    let mut k: u64 = 0;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        let mut l = load.lock().unwrap_or_else(|e| e.into_inner());
        let mut stop_now = Vec::new();
        for r in l.retired.iter_mut() {
            if r.stopped.is_none() && now >= r.due {
                r.stopped = Some(now);
                stop_now.push((r.sleep, r.httpbin));
            }
        }
        if !stop_now.is_empty() {
            l.known.retain(|e| !stop_now.contains(e));
        }
        let slot = k % ticks_per_period;
        for (n, (i, j)) in l.known.iter().enumerate() {
            if n as u64 % ticks_per_period == slot {
                traffic.request(*i, *j, false);
            }
        }
        for e in l.new.iter_mut() {
            if now < e.due || now < e.next {
                continue;
            }
            let has = proxies.get(&e.sleep).is_some_and(|p| {
                p.cluster_names()
                    .contains(&cluster_name(&traffic.scenario, e.httpbin))
            });
            let t = Instant::now();
            traffic.request(e.sleep, e.httpbin, !has);
            if e.first.is_none() {
                e.first = Some(t);
            }
            if has {
                e.through_cluster += 1;
            } else {
                e.passthrough += 1;
            }
            e.next = t + Duration::from_secs(1);
        }
        drop(l);
        k += 1;
        let next = start + tick * k as u32;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}

/// The `apply --watch` process, its JSON events (with when they came).
struct Watcher {
    child: Child,
    events: Arc<Mutex<Vec<(Instant, Value)>>>,
    metrics_port: u16,
    stderr_path: std::path::PathBuf,
}

impl Watcher {
    fn start(
        c: &Cluster,
        istiod: &Istiod,
        source: &[String],
        interval_s: u64,
        prune_after_s: u64,
        work: &Path,
    ) -> Result<Watcher> {
        let plugin = meshscope_e2e::bench::plugin_beside_exe()?;
        let metrics_port = free_port();
        let stderr_path = work.join(format!("watch-{metrics_port}.stderr"));
        let mut child = Command::new(&plugin)
            .args(["apply", "--watch", "-n", NS])
            .args(source)
            .args([
                "--interval",
                &format!("{interval_s}s"),
                "--prune-after",
                &format!("{prune_after_s}s"),
                "--istiod-url",
                &format!("http://{}", istiod.monitoring),
                "--istio-version",
                ENGINE_VERSION,
                "--metrics-addr",
                &format!("127.0.0.1:{metrics_port}"),
                "-o",
                "json",
            ])
            .arg("--kubeconfig")
            .arg(&c.kubeconfig)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path)?)
            .spawn()
            .with_context(|| format!("run {}", plugin.display()))?;
        let events: Arc<Mutex<Vec<(Instant, Value)>>> = Arc::default();
        let out = child.stdout.take().context("the watcher's stdout")?;
        let sink = events.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    sink.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((Instant::now(), v));
                }
            }
        });
        Ok(Watcher {
            child,
            events,
            metrics_port,
            stderr_path,
        })
    }

    fn metric(&self, name: &str) -> Option<f64> {
        let (status, body) = admin_get(self.metrics_port, "/metrics", Duration::from_secs(10));
        if status != 200 {
            return None;
        }
        body.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.trim().parse().ok())
    }

    fn usage(&self) -> ProcessUsage {
        process_usage(self.child.id()).unwrap_or_default()
    }

    fn events_of(&self, kinds: &[&str]) -> Vec<(Instant, Value)> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, e)| kinds.contains(&e["event"].as_str().unwrap_or("")))
            .cloned()
            .collect()
    }

    fn stderr_tail(&self) -> String {
        let t = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let l: Vec<&str> = t.lines().collect();
        l[l.len().saturating_sub(15)..].join("\n")
    }

    /// Waits until the watcher has ended `n` passes.
    fn wait_passes(&mut self, n: f64, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = self.child.try_wait()? {
                bail!("the watcher exited ({st}):\n{}", self.stderr_tail());
            }
            if self.metric("meshscope_watch_passes_total").unwrap_or(0.0) >= n {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the watcher did not end {n} passes in {limit:?}:\n{}",
                    self.stderr_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// SIGTERM, then waits for the exit (killed after 60 s).
    fn stop(mut self) -> Result<bool> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some(st) = self.child.try_wait()? {
                return Ok(st.success());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Ok(false)
    }
}

/// p50, p95 and worst of `v` (nearest rank); None when empty.
fn dist(v: &[f64]) -> Value {
    if v.is_empty() {
        return json!({"n": 0});
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = |q: f64| s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    json!({"n": s.len(), "p50": r3(rank(0.5)), "p95": r3(rank(0.95)), "worst": r3(s[s.len() - 1])})
}

/// The managed Sidecars' resourceVersions, by name.
fn sidecar_versions(c: &Cluster) -> Result<BTreeMap<String, String>> {
    let v = kubectl_json(
        c,
        &[
            "get",
            "sidecars.networking.istio.io",
            "-n",
            NS,
            "-l",
            "app.kubernetes.io/managed-by=kubectl-meshscope",
        ],
    )?;
    Ok(v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            (
                i["metadata"]["name"].as_str().unwrap_or("").to_string(),
                i["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect())
}

/// Item 3 of issue #18, by cause: the dangling-reference episodes over
/// all proxies (`tests/src/xds/refs.rs`) that opened between `from` (the
/// watcher's start: the initial `apply` narrows every proxy from the whole
/// mesh, where istiod 1.31's CDS-first push order opens such windows
/// itself, BENCHMARKS.md, "Dangling references") and `to` (its stop).
fn dangling_by_cause(sim: &Sim, from: Instant, to: Instant) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for c in [
        Cause::CdsBeforeListenerOrRoute,
        Cause::NamedBeforeCluster,
        Cause::Persistent,
    ] {
        out.insert(c.as_str(), 0);
    }
    for p in sim.proxies() {
        for e in p.dangling_episodes() {
            if e.opened_at >= from && e.opened_at <= to {
                *out.entry(e.cause().as_str()).or_default() += 1;
            }
        }
    }
    out
}

/// The watcher's writes grouped for [`check_order`]: the narrowings
/// reported right after widenings go with them (they are of the same pass,
/// or of a later one: either way, written after those widenings were
/// confirmed); a `not-confirmed` or `pass-error` event ends a group (the
/// next pass may narrow without those widenings).
fn reported_passes(events: &[(Instant, Value)]) -> Vec<Pass> {
    let mut out: Vec<Pass> = Vec::new();
    let mut last_widened: Option<bool> = None;
    for (at, e) in events {
        if matches!(e["event"].as_str(), Some("not-confirmed" | "pass-error")) {
            last_widened = None;
            continue;
        }
        let Some(w) = WriteEvent::from_event(*at, e) else {
            continue;
        };
        let widens = w.kind != WriteKind::Narrow;
        if last_widened.is_none_or(|prev| widens && !prev) {
            out.push(Pass {
                began: *at,
                writes: Vec::new(),
            });
        }
        last_widened = Some(widens);
        if let Some(p) = out.last_mut() {
            p.writes.push(w);
        }
    }
    out
}

/// Item 7: the write order on the sidecars' pushes.
fn write_order(x: &ScaleCtx<'_>, events: &[(Instant, Value)], t0: Instant) -> Result<Value> {
    let list = kubectl_json(x.c, &["get", "sidecars.networking.istio.io", "-n", NS])?;
    let selectors: BTreeMap<String, serde_json::Map<String, Value>> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            (
                i["metadata"]["name"].as_str().unwrap_or("").to_string(),
                i["spec"]["workloadSelector"]["labels"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            )
        })
        .collect();
    let passes = reported_passes(events);
    let r = check_order(
        &passes,
        |ns, name| {
            selectors
                .get(name)
                .map(|sel| selected_changes(x.sim.proxies(), ns, sel))
                .unwrap_or_default()
        },
        t0,
    );
    Ok(json!({
        "groups": passes.len(),
        "widened_and_narrowed": r.both,
        "compared": r.checked,
        "unresolved": r.unresolved.len(),
        "violation_count": r.violations.len(),
        "violations": r.violations.iter().take(10).collect::<Vec<_>>(),
    }))
}

fn pushes_since(sim: &Sim, t: Instant) -> usize {
    sim.proxies().iter().map(|p| p.pushes_since(t).len()).sum()
}

/// What one scale shares between its sources.
struct ScaleCtx<'a> {
    c: &'a Cluster,
    s: Scenario,
    istiod: Istiod,
    sim: Sim,
    kubelet: Arc<StandInKubelet>,
    cluster_ips: BTreeMap<usize, String>,
    sleep_pods: BTreeMap<usize, String>,
    /// Edges in scope: the scenario's, then each source's new ones.
    known: Vec<(usize, usize)>,
    /// httpbins already used by a new edge at this scale.
    used: BTreeSet<(usize, usize)>,
    proxies: usize,
    setup_s: f64,
    initial_apply_s: f64,
    node: String,
}

/// Deploys the scenario on the stand-in node, starts istiod, connects the
/// sidecars and scopes them with a one-off apply from the access logs.
fn setup_scale<'a>(
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
fn pick_new(
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
fn pick_retired(
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
fn ack_of_push(p: &Proxy, since: Instant, seen: Instant) -> Option<Instant> {
    p.pushes_since(since)
        .iter()
        .rfind(|x| x.ty == "cds" && x.at <= seen)
        .map(|x| x.acked_at.unwrap_or(x.at))
}

fn run_source(
    x: &mut ScaleCtx<'_>,
    source: &str,
    o: &Opts,
    rng: &mut Rng,
    work: &Path,
) -> Result<Value> {
    let k = x.proxies;
    let (sink, args, _prom) = match source {
        "pod-logs" => (
            Sink::PodLogs(x.kubelet.clone()),
            vec!["--from-pod-logs".to_string()],
            None,
        ),
        "prometheus" => {
            let counters = Arc::new(Counters::default());
            let addr = counters.serve()?;
            // Known edges have counted before Prometheus first scrapes.
            let prom = Prometheus::scraping(&addr.to_string(), SCRAPE)?;
            let url = prom.url.clone();
            (
                Sink::Counters(counters),
                vec!["--prometheus".to_string(), url],
                Some(prom),
            )
        }
        other => bail!("unknown source {other:?} (pod-logs, prometheus)"),
    };
    let traffic = Arc::new(Traffic::new(
        x.s.clone(),
        sink,
        x.cluster_ips.clone(),
        x.sleep_pods.clone(),
    ));
    let load = Arc::new(Mutex::new(Load {
        known: x.known.clone(),
        new: Vec::new(),
        retired: Vec::new(),
    }));
    let proxies: BTreeMap<usize, Proxy> = x
        .sim
        .proxies()
        .iter()
        .filter_map(|p| {
            let i = p
                .spec()
                .labels
                .get("app")?
                .strip_prefix("sleep-")?
                .parse()
                .ok()?;
            Some((i, p.clone()))
        })
        .collect();
    let stop_gen = Arc::new(AtomicBool::new(false));
    let gen = {
        let (t, l, p, s) = (
            traffic.clone(),
            load.clone(),
            proxies.clone(),
            stop_gen.clone(),
        );
        std::thread::spawn(move || generate(t, l, p, s))
    };
    // A pass's worth of known traffic first.
    std::thread::sleep(Duration::from_secs(KNOWN_PERIOD_S * 2));
    eprintln!(
        "[watch-bench] {k} proxies, {source}: starting apply --watch --interval {}s",
        o.interval_s
    );
    let watch_start = Instant::now();
    let mut w = Watcher::start(x.c, &x.istiod, &args, o.interval_s, o.prune_after_s, work)?;
    let result = measure(x, source, o, rng, &mut w, &load, &proxies);
    let usage = w.usage();
    let passes = w.metric("meshscope_watch_passes_total").unwrap_or(0.0);
    let latency_sum = w.metric("meshscope_watch_scope_latency_seconds_sum");
    let latency_count = w.metric("meshscope_watch_scope_latency_seconds_count");
    let events = w.events.clone();
    let exited_ok = w.stop()?;
    let watch_end = Instant::now();
    stop_gen.store(true, Ordering::SeqCst);
    let _ = gen.join();
    let mut r = result?;
    let by_cause = dangling_by_cause(&x.sim, watch_start, watch_end);
    r["dangling_write_caused"] =
        json!(by_cause[Cause::NamedBeforeCluster.as_str()] + by_cause[Cause::Persistent.as_str()]);
    r["dangling_cds_before_lds_rds"] = json!(by_cause[Cause::CdsBeforeListenerOrRoute.as_str()]);
    let events = events.lock().unwrap_or_else(|e| e.into_inner()).clone();
    // Counted again now: the monitor sees a cluster go before the watcher,
    // waiting for istiod's confirmation, reports the narrowing.
    r["narrowed"] = json!(events
        .iter()
        .filter(|(_, e)| e["event"] == "narrowed")
        .count());
    r["write_order"] = write_order(x, &events, watch_start)?;
    r["watcher"]["cpu_s_total"] = json!((usage.cpu_s * 100.0).round() / 100.0);
    r["watcher"]["rss_mb"] = json!(usage.rss_kb / 1024);
    r["watcher"]["peak_rss_mb"] = json!(usage.hwm_kb / 1024);
    r["watcher"]["passes"] = json!(passes);
    r["watcher"]["sigterm_exit_0"] = json!(exited_ok);
    r["watcher"]["own_scope_latency_mean_s"] = match (latency_sum, latency_count) {
        (Some(s), Some(n)) if n > 0.0 => json!((s / n * 1000.0).round() / 1000.0),
        _ => Value::Null,
    };
    let new: Vec<(usize, usize)> = load
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .new
        .iter()
        .map(|e| (e.sleep, e.httpbin))
        .collect();
    let retired: Vec<(usize, usize)> = load
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retired
        .iter()
        .map(|e| (e.sleep, e.httpbin))
        .collect();
    x.known.retain(|e| !retired.contains(e));
    x.known.extend(new);
    Ok(r)
}

/// Steps 2–4 for one source, with the watcher running.
fn measure(
    x: &mut ScaleCtx<'_>,
    source: &str,
    o: &Opts,
    rng: &mut Rng,
    w: &mut Watcher,
    load: &Arc<Mutex<Load>>,
    proxies: &BTreeMap<usize, Proxy>,
) -> Result<Value> {
    let t_start = Instant::now();
    w.wait_passes(2.0, Duration::from_secs(600))?;
    let first_passes_s = t_start.elapsed().as_secs_f64();
    let spread = Duration::from_secs(o.spread_s);
    let t_new = Instant::now();
    let new = pick_new(x, rng, o.new_edges, t_new + Duration::from_secs(1), spread);
    let retired = pick_retired(x, rng, o.new_edges, t_new, spread);
    eprintln!(
        "[watch-bench] {} proxies, {source}: {} new edges and {} known ones stopping over {}s (first passes took {first_passes_s:.1}s)",
        x.proxies,
        new.len(),
        retired.len(),
        o.spread_s
    );
    {
        let mut l = load.lock().unwrap_or_else(|e| e.into_inner());
        l.new = new;
        l.retired = retired;
    }
    // The monitor: the caller's sidecar has the cluster -> the ACK of
    // the push that brought it; a stopped edge's caller has dropped it.
    let limit = spread + Duration::from_secs(o.prune_after_s + 4 * o.interval_s + 120);
    let deadline = t_new + limit;
    loop {
        let now = Instant::now();
        let mut l = load.lock().unwrap_or_else(|e| e.into_inner());
        let mut pending = 0;
        for e in l.new.iter_mut().filter(|e| e.acked.is_none()) {
            pending += 1;
            let Some(first) = e.first else { continue };
            let p = &proxies[&e.sleep];
            if p.cluster_names().contains(&cluster_name(&x.s, e.httpbin)) {
                e.acked = Some(ack_of_push(p, first, now).unwrap_or(now));
            }
        }
        for r in l.retired.iter_mut().filter(|r| r.dropped.is_none()) {
            pending += 1;
            if r.stopped.is_none() {
                continue;
            }
            let p = &proxies[&r.sleep];
            if !p.cluster_names().contains(&cluster_name(&x.s, r.httpbin)) {
                r.dropped = Some(now);
            }
        }
        drop(l);
        if pending == 0 || now > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (edges, retired) = {
        let l = load.lock().unwrap_or_else(|e| e.into_inner());
        (l.new.clone(), l.retired.clone())
    };
    let mut narrowing = Vec::new();
    let mut never_narrowed = Vec::new();
    for r in &retired {
        match (r.stopped, r.dropped) {
            (Some(s), Some(d)) => narrowing.push(d.saturating_duration_since(s).as_secs_f64()),
            _ => never_narrowed.push(format!("sleep-{} -> httpbin-{}", r.sleep, r.httpbin)),
        }
    }
    let narrowed = w.events_of(&["narrowed"]).len();
    let mut latencies = Vec::new();
    let mut missed = Vec::new();
    for e in &edges {
        match (e.first, e.acked) {
            (Some(f), Some(a)) => latencies.push(a.saturating_duration_since(f).as_secs_f64()),
            _ => missed.push(format!("sleep-{} -> httpbin-{}", e.sleep, e.httpbin)),
        }
    }
    let passthrough: Vec<f64> = edges.iter().map(|e| e.passthrough as f64).collect();
    let widened = w.events_of(&["widened"]);
    let confirmed: Vec<f64> = widened
        .iter()
        .filter_map(|(_, e)| e["confirmed_in"].as_f64())
        .collect();
    let writes_during_new = w.events_of(&["created", "widened", "narrowed"]).len();
    eprintln!(
        "[watch-bench] {} proxies, {source}: latency {} ; passthrough requests per edge {}; missed {}",
        x.proxies,
        dist(&latencies),
        dist(&passthrough),
        missed.len()
    );

    // A steady mesh: the new edges are in scope now, and nothing changes.
    x.sim
        .wait_stable(Duration::from_secs(12), Duration::from_secs(300))?;
    let (rv0, ev0, u0, p0) = (
        sidecar_versions(x.c)?,
        w.events_of(&[
            "created",
            "widened",
            "narrowed",
            "failed",
            "skipped",
            "pass-error",
        ])
        .len(),
        w.usage(),
        w.metric("meshscope_watch_passes_total").unwrap_or(0.0),
    );
    let t_steady = Instant::now();
    eprintln!(
        "[watch-bench] {} proxies, {source}: steady mesh for {}s",
        x.proxies, o.steady_s
    );
    std::thread::sleep(Duration::from_secs(o.steady_s));
    let steady_s = t_steady.elapsed().as_secs_f64();
    let pushes = pushes_since(&x.sim, t_steady);
    let rv1 = sidecar_versions(x.c)?;
    let u1 = w.usage();
    let p1 = w.metric("meshscope_watch_passes_total").unwrap_or(0.0);
    let ev1 = w
        .events_of(&[
            "created",
            "widened",
            "narrowed",
            "failed",
            "skipped",
            "pass-error",
        ])
        .len();
    let written = rv1.iter().filter(|(n, v)| rv0.get(*n) != Some(*v)).count()
        + rv0.keys().filter(|n| !rv1.contains_key(*n)).count();
    let per_hour = |n: usize| (n as f64 * 3600.0 / steady_s * 10.0).round() / 10.0;
    Ok(json!({
        "proxies": x.proxies,
        "source": source,
        "interval_s": o.interval_s,
        "new_edges": edges.len(),
        "first_two_passes_s": (first_passes_s * 10.0).round() / 10.0,
        "latency_s": dist(&latencies),
        "latency_target_s": o.interval_s + 5,
        "never_widened": missed,
        "passthrough_requests_per_edge": dist(&passthrough),
        "passthrough_requests_total": passthrough.iter().sum::<f64>(),
        "watcher_confirmed_in_s": dist(&confirmed),
        "prune_after_s": o.prune_after_s,
        "stopped_edges": retired.len(),
        "narrowed": narrowed,
        "stopped_edges_never_narrowed": never_narrowed,
        "stop_to_drop_s": dist(&narrowing),
        "writes_events_new_phase": writes_during_new,
        "steady": {
            "seconds": (steady_s * 10.0).round() / 10.0,
            "sidecar_writes": written,
            "sidecar_writes_per_hour_extrapolated": per_hour(written),
            "pushes_received": pushes,
            "pushes_per_hour_extrapolated": per_hour(pushes),
            "watcher_events": ev1 - ev0,
            "passes": p1 - p0,
            "watcher_cpu_s": ((u1.cpu_s - u0.cpu_s) * 100.0).round() / 100.0,
            "watcher_cpu_pct_of_a_core": ((u1.cpu_s - u0.cpu_s) / steady_s * 1000.0).round() / 10.0,
        },
        "watcher": {},
        // Filled in once the watcher has stopped.
        "dangling_write_caused": Value::Null,
        "dangling_cds_before_lds_rds": Value::Null,
        "write_order": Value::Null,
    }))
}

fn parse_opts() -> Result<Opts> {
    let mut o = Opts {
        scales: Vec::new(),
        interval_s: 10,
        prune_after_s: 30,
        new_edges: 20,
        spread_s: 40,
        steady_s: 60,
        sources: Vec::new(),
        seed: 18,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |what: &str| args.next().with_context(|| format!("{a} needs {what}"));
        match a.as_str() {
            "--scale" => o.scales.push(val("a factor (1 = 420 proxies)")?.parse()?),
            "--interval" => o.interval_s = val("seconds")?.parse()?,
            "--prune-after" => o.prune_after_s = val("seconds")?.parse()?,
            "--new-edges" => o.new_edges = val("a count")?.parse()?,
            "--spread" => o.spread_s = val("seconds")?.parse()?,
            "--steady" => o.steady_s = val("seconds")?.parse()?,
            "--source" => o.sources.push(val("pod-logs or prometheus")?),
            "--seed" => o.seed = val("a number")?.parse()?,
            "-h" | "--help" => {
                println!("usage: meshscope-bench-watch [--scale K]... [--source pod-logs|prometheus]... [--interval S] [--prune-after S] [--new-edges N] [--spread S] [--steady S] [--seed N]\n(defaults: --scale 1, both sources, --interval {}, --prune-after {} (the watcher's; as many known edges as new ones stop being called over the spread, so it narrows while it widens), --new-edges {}, --spread {}, --steady {}, --seed {})\nNeeds the test control plane (tests/cluster/up), istiod (tests/istiod/build) and Prometheus (tests/prometheus/install).", o.interval_s, o.prune_after_s, o.new_edges, o.spread_s, o.steady_s, o.seed);
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if o.scales.is_empty() {
        o.scales.push(1.0);
    }
    if o.sources.is_empty() {
        o.sources = vec!["pod-logs".into(), "prometheus".into()];
    }
    if o.interval_s == 0 || o.new_edges == 0 || o.prune_after_s == 0 {
        bail!("--interval, --prune-after and --new-edges must be at least 1");
    }
    Ok(o)
}

/// Whether `r` meets every target; the misses, named.
fn misses(r: &Value) -> Vec<String> {
    let mut m = Vec::new();
    let tag = format!(
        "{} proxies, {}",
        r["proxies"],
        r["source"].as_str().unwrap_or("")
    );
    let target = r["latency_target_s"].as_f64().unwrap_or(0.0);
    match r["latency_s"]["p95"].as_f64() {
        Some(p95) if p95 <= target => {}
        Some(p95) => m.push(format!("{tag}: latency p95 {p95} s > {target} s")),
        None => m.push(format!("{tag}: no latency measured")),
    }
    let never = r["never_widened"].as_array().map_or(0, Vec::len);
    if never > 0 {
        m.push(format!(
            "{tag}: {never} new edges never reached the caller's sidecar"
        ));
    }
    // Narrowing while widening: without a narrowing, 0 dangling
    // references would say nothing (widening alone cannot open a window).
    match r["narrowed"].as_u64() {
        Some(0) => m.push(format!(
            "{tag}: no narrowing, so the dangling-reference count says nothing"
        )),
        Some(_) => {}
        None => m.push(format!("{tag}: narrowings not counted")),
    }
    match r["dangling_write_caused"].as_u64() {
        Some(0) => {}
        Some(n) => m.push(format!(
            "{tag}: {n} listeners or routes named a cluster the proxy did not get in the same push cycle, or kept naming it (named-before-cluster, persistent)"
        )),
        None => m.push(format!("{tag}: dangling references not counted")),
    }
    match r["write_order"]["violation_count"].as_u64() {
        Some(0) => {}
        Some(n) => m.push(format!(
            "{tag}: {n} narrowings reached a proxy before the widenings reported before them were ACKed"
        )),
        None => m.push(format!("{tag}: write order not checked")),
    }
    for (k, what) in [
        ("sidecar_writes", "Sidecar writes"),
        ("pushes_received", "pushes"),
    ] {
        match r["steady"][k].as_u64() {
            Some(0) => {}
            Some(n) => m.push(format!("{tag}: {n} {what} at a steady mesh")),
            None => m.push(format!("{tag}: {what} at a steady mesh not counted")),
        }
    }
    m
}

fn print_tables(results: &[Value]) {
    let d = |v: &Value| {
        if v["n"].as_u64().unwrap_or(0) == 0 {
            "-".to_string()
        } else {
            format!("{} / {} / {}", v["p50"], v["p95"], v["worst"])
        }
    };
    println!("| proxies | source | new edges | first request → caller's ACK, s (p50 / p95 / worst) | target p95 | never widened | requests via passthrough per edge (p50 / p95 / worst) | watcher's confirmed_in, s (p50 / p95 / worst) |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in results {
        println!(
            "| {} | {} | {} | {} | ≤ {} s | {} | {} | {} |",
            r["proxies"],
            r["source"].as_str().unwrap_or(""),
            r["new_edges"],
            d(&r["latency_s"]),
            r["latency_target_s"],
            r["never_widened"].as_array().map_or(0, Vec::len),
            d(&r["passthrough_requests_per_edge"]),
            d(&r["watcher_confirmed_in_s"]),
        );
    }
    println!();
    println!("| proxies | source | steady window | Sidecar writes (per hour, extrapolated) | pushes received (per hour, extrapolated) | watcher events | passes | watcher CPU in the window | watcher CPU, whole run | watcher RSS / peak |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in results {
        let st = &r["steady"];
        println!(
            "| {} | {} | {} s | {} ({}) | {} ({}) | {} | {} | {} s ({}% of a core) | {} s over {} passes | {} MB / {} MB |",
            r["proxies"],
            r["source"].as_str().unwrap_or(""),
            st["seconds"],
            st["sidecar_writes"],
            st["sidecar_writes_per_hour_extrapolated"],
            st["pushes_received"],
            st["pushes_per_hour_extrapolated"],
            st["watcher_events"],
            st["passes"],
            st["watcher_cpu_s"],
            st["watcher_cpu_pct_of_a_core"],
            r["watcher"]["cpu_s_total"],
            r["watcher"]["passes"],
            r["watcher"]["rss_mb"],
            r["watcher"]["peak_rss_mb"],
        );
    }
    println!();
    println!("| proxies | source | --prune-after | known edges stopped | narrowings | stopped edges never narrowed | stop → caller's drop, s (p50 / p95 / worst) | dangling: write-caused (target 0) | dangling: istiod's cds-before-lds-rds | write order: groups widening and narrowing (compared) | write-order violations |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in results {
        let o = &r["write_order"];
        println!(
            "| {} | {} | {} s | {} | {} | {} | {} | {} | {} | {} ({}) | {} |",
            r["proxies"],
            r["source"].as_str().unwrap_or(""),
            r["prune_after_s"],
            r["stopped_edges"],
            r["narrowed"],
            r["stopped_edges_never_narrowed"]
                .as_array()
                .map_or(0, Vec::len),
            d(&r["stop_to_drop_s"]),
            r["dangling_write_caused"],
            r["dangling_cds_before_lds_rds"],
            o["widened_and_narrowed"],
            o["compared"],
            o["violation_count"],
        );
    }
}

fn main() -> std::process::ExitCode {
    meshscope_e2e::tool_exit(try_main())
}

fn try_main() -> Result<()> {
    let o = parse_opts()?;
    let c = Cluster::shared();
    let work = tempfile::tempdir()?;
    let mut rng = Rng::new(o.seed);
    let mut results = Vec::new();
    let mut scales = Vec::new();
    for &k in &o.scales {
        let stop = Arc::new(AtomicBool::new(false));
        let mut x = setup_scale(c, k, work.path(), &stop)?;
        for source in &o.sources {
            let r = run_source(&mut x, source, &o, &mut rng, work.path())?;
            eprintln!("[watch-bench] {r}");
            results.push(r);
        }
        scales.push(json!({"scale": k, "proxies": x.proxies, "setup_s": (x.setup_s * 10.0).round() / 10.0, "initial_apply_s": (x.initial_apply_s * 10.0).round() / 10.0}));
        stop.store(true, Ordering::SeqCst);
        x.sim.close();
        drop(x.istiod);
        cleanup(c);
        let _ = c.kubectl(&["delete", "node", &x.node, "--ignore-not-found"], None);
    }
    print_tables(&results);
    let missed: Vec<String> = results.iter().flat_map(misses).collect();
    println!();
    if missed.is_empty() {
        println!("Targets met.");
    } else {
        println!("Targets missed:");
        for m in &missed {
            println!("- {m}");
        }
    }
    println!();
    println!(
        "{}",
        json!({
            "seed": o.seed,
            "interval_s": o.interval_s,
            "scrape_interval": SCRAPE,
            "known_edge_period_s": KNOWN_PERIOD_S,
            "steady_s": o.steady_s,
            "scales": scales,
            "results": results,
            "targets_met": missed.is_empty(),
            "missed": missed,
        })
    );
    if !missed.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report that meets every target.
    fn met() -> Value {
        json!({
            "proxies": 420,
            "source": "pod-logs",
            "latency_s": {"n": 20, "p50": 5.0, "p95": 9.0, "worst": 10.0},
            "latency_target_s": 15,
            "never_widened": [],
            "narrowed": 12,
            "dangling_write_caused": 0,
            "dangling_cds_before_lds_rds": 7,
            "write_order": {"widened_and_narrowed": 3, "compared": 3, "violation_count": 0},
            "steady": {"sidecar_writes": 0, "pushes_received": 0},
        })
    }

    /// `misses` of `met()` changed by `f`: exactly one, naming `what`.
    fn missed(f: impl FnOnce(&mut Value), what: &str) {
        let mut r = met();
        f(&mut r);
        let m = misses(&r);
        assert_eq!(m.len(), 1, "{m:?}");
        assert!(m[0].contains(what), "{m:?} does not say {what:?}");
    }

    #[test]
    fn a_report_meeting_every_target_misses_none() {
        assert_eq!(misses(&met()), Vec::<String>::new());
    }

    #[test]
    fn each_target_can_be_missed() {
        missed(
            |r| r["latency_s"]["p95"] = json!(15.5),
            "latency p95 15.5 s > 15 s",
        );
        missed(|r| r["latency_s"] = json!({"n": 0}), "no latency measured");
        missed(
            |r| r["never_widened"] = json!(["sleep-1 -> httpbin-9"]),
            "1 new edges never reached",
        );
        missed(|r| r["narrowed"] = json!(0), "no narrowing");
        missed(|r| r["narrowed"] = Value::Null, "narrowings not counted");
        missed(
            |r| r["dangling_write_caused"] = json!(2),
            "2 listeners or routes",
        );
        missed(
            |r| r["dangling_write_caused"] = Value::Null,
            "dangling references not counted",
        );
        missed(
            |r| r["write_order"]["violation_count"] = json!(1),
            "1 narrowings reached a proxy before",
        );
        missed(
            |r| r["write_order"] = Value::Null,
            "write order not checked",
        );
        missed(
            |r| r["steady"]["sidecar_writes"] = json!(3),
            "3 Sidecar writes at a steady mesh",
        );
        missed(
            |r| r["steady"]["pushes_received"] = json!(40),
            "40 pushes at a steady mesh",
        );
        missed(
            |r| r["steady"] = json!({"pushes_received": 0}),
            "Sidecar writes at a steady mesh not counted",
        );
        missed(
            |r| r["steady"] = json!({"sidecar_writes": 0}),
            "pushes at a steady mesh not counted",
        );
    }

    /// istiod's own CDS-before-LDS/RDS windows are reported, not a target.
    #[test]
    fn istiods_push_order_windows_are_not_a_miss() {
        let mut r = met();
        r["dangling_cds_before_lds_rds"] = json!(500);
        assert!(misses(&r).is_empty());
    }

    #[test]
    fn narrowings_go_with_the_widenings_reported_before_them() {
        let t = Instant::now();
        let ev = |e: &str| json!({"event": e, "namespace": "n", "sidecar": "s", "hosts": ["n/h"]});
        let events: Vec<(Instant, Value)> = [
            "widened",
            "created",
            "narrowed",
            "narrowed",
            "narrowed",
            "widened",
            "not-confirmed",
            "narrowed",
        ]
        .iter()
        .enumerate()
        .map(|(i, e)| (t + Duration::from_millis(i as u64), ev(e)))
        .collect();
        let kinds: Vec<Vec<WriteKind>> = reported_passes(&events)
            .iter()
            .map(|p| p.writes.iter().map(|w| w.kind).collect())
            .collect();
        use WriteKind::*;
        assert_eq!(
            kinds,
            [
                vec![Widen, Create, Narrow, Narrow, Narrow],
                vec![Widen],
                vec![Narrow]
            ]
        );
    }
}
