//! The command line, and the benchmark's fixed rates.

use anyhow::{bail, Context, Result};

/// Known edges get one request every this many seconds.
pub const KNOWN_PERIOD_S: u64 = 5;
/// The Prometheus scrape interval the issue names.
pub const SCRAPE: &str = "5s";

#[derive(Clone, Debug)]
pub struct Opts {
    pub scales: Vec<f64>,
    pub interval_s: u64,
    pub prune_after_s: u64,
    pub new_edges: usize,
    pub spread_s: u64,
    pub steady_s: u64,
    pub sources: Vec<String>,
    pub seed: u64,
}

pub fn parse_opts() -> Result<Opts> {
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
