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

mod args;
mod measure;
mod probe;
mod reference;
mod report;
mod summary;
#[cfg(test)]
mod tests;
mod topology;

use anyhow::{Context, Result};
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::meshgen;

use crate::args::args;
use crate::reference::{print_reference, reference_summary, run_scale};
use crate::report::{print_tables, summary_json, targets};
use crate::topology::run_topology;

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
