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

mod args;
mod mesh;
mod point;
mod report;
#[cfg(test)]
mod tests;

use std::time::Instant;

use anyhow::Result;
use meshscope_e2e::cluster::Cluster;

use crate::args::args;
use crate::mesh::{apply_sidecars, mesh, unscoped, unscoped_from};
use crate::point::Mode;
use crate::report::{fits, print, targets, Report, AKS_QUOTE};

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
