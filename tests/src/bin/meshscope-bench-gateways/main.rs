//! `meshscope-bench-gateways`: what `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG`
//! does to a real istiod's gateways, and whether meshscope's readiness
//! findings call it right (run by `tests/bench/run gateways`).
//!
//! The realistic mesh (`meshscope_e2e::meshgen::realistic`) at each
//! `--scale`, with gateways added (`layout`): an ingress gateway in
//! `istio-ingress` (2 pods) whose VirtualServices route three hosts to
//! five front and hub Services (a mirror among them), one ingress gateway
//! of one pod per four team namespaces routing to one or two of their
//! Services, and the egress gateway's 2 pods. Gateway pods run `proxy
//! router`. Deployed once per scale; then, for an istiod with the flag off
//! and one with it on, the router proxies are connected (sidecars are
//! not: nothing measured depends on them) and measured:
//! - per gateway proxy: CDS bytes and clusters, total xDS bytes; p50, p95
//!   and max for ingress and egress gateways;
//! - a port added to a Service no gateway routes to and to a routed one:
//!   which gateway proxies istiod pushed to, against what `kubectl
//!   meshscope impact` predicts (`now.gateways`, `gateways_if_filtered`);
//! - with the flag on: every observed gateway edge's cluster is in its
//!   proxies' CDS, and `explain`'s clusters equal istiod's.
//!
//! `audit -A --access-log` of the mesh's and the gateways' traffic must
//! find every gateway safe (MS0026). At the first scale, the would-break
//! corpus (`wouldbreak`): an EnvoyFilter on the ingress gateway whose Lua
//! code calls three unrouted Services, and traffic to a fourth; `audit`
//! must name all four clusters in an MS0025, and istiod with the flag on
//! must leave them out (with it off, send them).
//!
//! Prints markdown tables, the targets with a `met` column, and as its
//! last line a JSON summary, also written to `--out-dir` as
//! `gateways-<commit>.json`; exits 1 when a target is missed.

mod layout;
mod measure;
mod plugin;
mod report;
mod scale;
mod wouldbreak;

use anyhow::{bail, Context, Result};
use meshscope_e2e::cluster::Cluster;

struct Args {
    scales: Vec<usize>,
    seed: u64,
    out_dir: Option<std::path::PathBuf>,
}

fn args() -> Result<Args> {
    let mut a = Args {
        scales: Vec::new(),
        seed: 22,
        out_dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--scale" => a.scales.push(it.next().context("--scale N")?.parse()?),
            "--seed" => a.seed = it.next().context("--seed N")?.parse()?,
            "--out-dir" => a.out_dir = Some(it.next().context("--out-dir DIR")?.into()),
            "-h" | "--help" => {
                println!("usage: meshscope-bench-gateways [--scale N]... [--seed N] [--out-dir DIR]\n(default: --scale 1 --seed 22). --out-dir writes the JSON summary to DIR/gateways-<commit>.json.\nNeeds the test control plane (tests/cluster/up) and istiod (tests/istiod/build).");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if a.scales.is_empty() {
        a.scales.push(1);
    }
    Ok(a)
}

fn main() -> std::process::ExitCode {
    meshscope_e2e::tool_exit(try_main())
}

fn try_main() -> Result<()> {
    let a = args()?;
    // The tree the run starts from (a commit made during the run is not it).
    let commit = meshscope_e2e::bench::commit();
    let c = Cluster::shared();
    let work = tempfile::tempdir()?;
    // The would-break corpus at scale 1 (or the first scale asked for).
    let corpus_at = if a.scales.contains(&1) {
        1
    } else {
        a.scales[0]
    };
    let mut sums = Vec::new();
    for &k in &a.scales {
        let s = scale::run(c, k, a.seed, work.path(), k == corpus_at)?;
        eprintln!("[gateways-bench] {k}x done: {}", serde_json::to_string(&s)?);
        sums.push(s);
    }
    let rows: Vec<[String; 5]> = sums.iter().flat_map(report::targets).collect();
    let met = rows.iter().all(|r| r[4] != "no");
    report::print_tables(&sums, &rows);
    let json = serde_json::json!({
        "benchmark": "gateways",
        "scenario": "realistic",
        "seed": a.seed,
        "commit": commit,
        "connected": "router proxies only",
        "met": met,
        "missed": rows.iter().filter(|r| r[4] == "no").map(|r| format!("{} {}", r[0], r[1])).collect::<Vec<_>>(),
        "scales": sums,
    });
    if let Some(dir) = &a.out_dir {
        std::fs::create_dir_all(dir)?;
        let f = dir.join(format!("gateways-{commit}.json"));
        std::fs::write(&f, serde_json::to_string_pretty(&json)? + "\n")?;
        eprintln!("[gateways-bench] wrote {}", f.display());
    }
    println!("{json}");
    if !met {
        std::process::exit(1);
    }
    Ok(())
}
