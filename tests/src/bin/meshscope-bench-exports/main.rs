//! `meshscope-bench-exports`: the effect of `kubectl meshscope apply
//! --exports`, and of the discoverySelectors `audit` recommends, measured on
//! a real istiod with simulated sidecars (run by `tests/bench/run exports`).
//!
//! The mesh (seeded, `--scale` k): no Sidecar anywhere; a hub namespace
//! serving auth and config (each with a DestinationRule of two subsets and a
//! VirtualService sending all traffic to one) and six DNS ServiceEntries
//! (three called); 13 app namespaces, each with a client calling the hubs
//! (most of them), an external host or two, and a Zipf-drawn long tail of
//! other app namespaces' services (3·k each, one pod apiece, calling
//! nothing); two injected namespaces that nobody calls and that call
//! nothing; and two namespaces with no injection and no traffic holding
//! 600·k plain Services and pods (no proxy) each.
//!
//! It measures, before and after `apply --exports` from the access log of
//! those calls: each proxy's xDS (p50, p95, max by role), which proxies a
//! change to auth's VirtualService is pushed to and the bytes pushed, and
//! that every observed edge keeps its cluster and, through a
//! VirtualService, its route. Then istiod's RSS and CPU on a fresh start
//! without and with the discoverySelectors `audit` prints (MS0020). Prints
//! markdown tables and, last, one JSON line; exits 1 when a target is
//! missed.

mod measure;
mod mesh;
mod phases;
mod report;
mod results;
#[cfg(test)]
mod tests;

use anyhow::{bail, Context, Result};
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::fidelity::DEFAULT_MESH;

use crate::mesh::{access_log, build_mesh, Mesh, DARK_NS, DARK_PER_NS};
use crate::phases::{exports_phase, selectors_phase, set_mesh};
use crate::report::{json, print_istiod, print_sizes, print_targets, targets};
use crate::results::Results;

fn args() -> Result<(usize, u64)> {
    let (mut scale, mut seed) = (1, 20);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--scale" => scale = args.next().context("--scale N")?.parse()?,
            "--seed" => seed = args.next().context("--seed N")?.parse()?,
            "-h" | "--help" => {
                println!("usage: meshscope-bench-exports [--scale N] [--seed N]   (default: --scale 1 --seed 20)\nNeeds the test control plane (tests/cluster/up) and istiod (tests/istiod/build).");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    Ok((scale, seed))
}

fn run(c: &Cluster, m: &Mesh, r: &mut Results) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("access.log");
    std::fs::write(&log, access_log(m))?;
    set_mesh(c, DEFAULT_MESH);
    eprintln!(
        "[exports-bench] applying {} namespaces, {} Services, {} pods",
        m.sc.world.namespaces.len(),
        m.sc.world.services.len(),
        m.sc.world.pods.len()
    );
    m.sc.world.apply(c)?;
    exports_phase(c, m, &log, r)?;
    selectors_phase(c, m, &log, r)
}

fn main() -> std::process::ExitCode {
    meshscope_e2e::tool_exit(try_main())
}

fn try_main() -> Result<()> {
    let (scale, seed) = args()?;
    let tag = u64::from(std::process::id()) % 1000;
    let m = build_mesh(scale, seed, tag);
    let mut r = Results {
        scale,
        seed,
        proxies: m.roles.len(),
        dark_services: DARK_PER_NS * scale * DARK_NS,
        dark_ns: m.dark_ns.clone(),
        edges: m.edges.len(),
        routed_edges: m.edges.iter().filter(|e| e.routed.is_some()).count(),
        ..Results::default()
    };
    r.mesh_services = m.sc.world.services.len() - r.dark_services;
    let c = Cluster::shared();
    let outcome = run(c, &m, &mut r);
    eprintln!("[exports-bench] cleaning up");
    set_mesh(c, DEFAULT_MESH);
    if let Err(e) = m.sc.world.delete(c) {
        eprintln!("[exports-bench] cleanup: {e:#}");
    }
    outcome?;
    for l in r
        .lost_before
        .iter()
        .chain(&r.lost_after)
        .chain(&r.lost_with_selectors)
    {
        eprintln!("[exports-bench] SAFETY: {l}");
    }
    let rows = targets(&r);
    let met = rows.iter().all(|row| row[4] != "no");
    print_sizes(&r);
    println!();
    print_targets(&rows);
    println!();
    print_istiod(&r);
    println!("{}", json(&r, met));
    if !met {
        std::process::exit(1);
    }
    Ok(())
}
