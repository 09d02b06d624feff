//! One traffic source at one scale: the traffic generator and the
//! watcher started, new edges and stopped ones timed as they reach the
//! sidecars, then a steady mesh.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use meshscope_e2e::bench::Rng;
use meshscope_e2e::cluster::Prometheus;
use meshscope_e2e::traffic::{Counters, Sink, Traffic};
use meshscope_e2e::xds::refs::Cause;
use meshscope_e2e::xds::Proxy;
use serde_json::{json, Value};

use crate::figures::{dangling_by_cause, dist, pushes_since, sidecar_versions, write_order};
use crate::load::{cluster_name, generate, Load};
use crate::opts::{Opts, KNOWN_PERIOD_S, SCRAPE};
use crate::scale::{ack_of_push, pick_new, pick_retired, ScaleCtx};
use crate::watcher::Watcher;

pub fn run_source(
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
    monitor(x, load, proxies, t_new + limit);
    let c = Changes::of(load, w);
    eprintln!(
        "[watch-bench] {} proxies, {source}: latency {} ; passthrough requests per edge {}; missed {}",
        x.proxies,
        dist(&c.latencies),
        dist(&c.passthrough),
        c.missed.len()
    );
    let steady = steady(x, o, w, source)?;
    Ok(json!({
        "proxies": x.proxies,
        "source": source,
        "interval_s": o.interval_s,
        "new_edges": c.new_edges,
        "first_two_passes_s": (first_passes_s * 10.0).round() / 10.0,
        "latency_s": dist(&c.latencies),
        "latency_target_s": o.interval_s + 5,
        "never_widened": c.missed,
        "passthrough_requests_per_edge": dist(&c.passthrough),
        "passthrough_requests_total": c.passthrough.iter().sum::<f64>(),
        "watcher_confirmed_in_s": dist(&c.confirmed),
        "prune_after_s": o.prune_after_s,
        "stopped_edges": c.stopped_edges,
        "narrowed": c.narrowed,
        "stopped_edges_never_narrowed": c.never_narrowed,
        "stop_to_drop_s": dist(&c.narrowing),
        "writes_events_new_phase": c.writes_during_new,
        "steady": steady,
        "watcher": {},
        // Filled in once the watcher has stopped.
        "dangling_write_caused": Value::Null,
        "dangling_cds_before_lds_rds": Value::Null,
        "write_order": Value::Null,
    }))
}

/// The monitor, until every new edge has reached its caller's sidecar
/// (the ACK noted) and every stopped one has left it, or `deadline`.
fn monitor(
    x: &ScaleCtx<'_>,
    load: &Arc<Mutex<Load>>,
    proxies: &BTreeMap<usize, Proxy>,
    deadline: Instant,
) {
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
}

/// What the new and the stopped edges came to, and the watcher's events
/// meanwhile.
struct Changes {
    new_edges: usize,
    /// First request → the caller's ACK, per new edge that got there.
    latencies: Vec<f64>,
    /// New edges that never did.
    missed: Vec<String>,
    passthrough: Vec<f64>,
    confirmed: Vec<f64>,
    stopped_edges: usize,
    narrowed: usize,
    /// Stop → the caller's drop, per stopped edge that got there.
    narrowing: Vec<f64>,
    never_narrowed: Vec<String>,
    writes_during_new: usize,
}

impl Changes {
    fn of(load: &Arc<Mutex<Load>>, w: &Watcher) -> Changes {
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
        Changes {
            new_edges: edges.len(),
            latencies,
            missed,
            passthrough,
            confirmed,
            stopped_edges: retired.len(),
            narrowed,
            narrowing,
            never_narrowed,
            writes_during_new,
        }
    }
}

/// Step 4, a steady mesh: the new edges are in scope now, and nothing
/// changes; the Sidecar writes, pushes, events, passes and CPU over
/// `--steady` seconds.
fn steady(x: &ScaleCtx<'_>, o: &Opts, w: &Watcher, source: &str) -> Result<Value> {
    let events = |w: &Watcher| {
        w.events_of(&[
            "created",
            "widened",
            "narrowed",
            "failed",
            "skipped",
            "pass-error",
        ])
        .len()
    };
    x.sim
        .wait_stable(Duration::from_secs(12), Duration::from_secs(300))?;
    let (rv0, ev0, u0, p0) = (
        sidecar_versions(x.c)?,
        events(w),
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
    let ev1 = events(w);
    let written = rv1.iter().filter(|(n, v)| rv0.get(*n) != Some(*v)).count()
        + rv0.keys().filter(|n| !rv1.contains_key(*n)).count();
    let per_hour = |n: usize| (n as f64 * 3600.0 / steady_s * 10.0).round() / 10.0;
    Ok(json!({
        "seconds": (steady_s * 10.0).round() / 10.0,
        "sidecar_writes": written,
        "sidecar_writes_per_hour_extrapolated": per_hour(written),
        "pushes_received": pushes,
        "pushes_per_hour_extrapolated": per_hour(pushes),
        "watcher_events": ev1 - ev0,
        "passes": p1 - p0,
        "watcher_cpu_s": ((u1.cpu_s - u0.cpu_s) * 100.0).round() / 100.0,
        "watcher_cpu_pct_of_a_core": ((u1.cpu_s - u0.cpu_s) / steady_s * 1000.0).round() / 10.0,
    }))
}
