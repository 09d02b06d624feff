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

mod figures;
mod load;
mod opts;
mod report;
mod scale;
mod source;
#[cfg(test)]
mod tests;
mod watcher;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Result;
use meshscope_e2e::bench::Rng;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::livescale::cleanup;
use serde_json::json;

use crate::opts::{parse_opts, KNOWN_PERIOD_S, SCRAPE};
use crate::report::{misses, print_tables};
use crate::scale::setup_scale;
use crate::source::run_source;

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
