//! The command line.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use meshscope_e2e::meshgen;

pub struct Args {
    pub scenario: String,
    pub scales: Vec<usize>,
    pub seed: u64,
    pub out_dir: Option<PathBuf>,
    pub print_yaml: bool,
    pub print_log: bool,
}

pub fn args() -> Result<Args> {
    let mut a = Args {
        scenario: "reference".into(),
        scales: Vec::new(),
        seed: 22,
        out_dir: None,
        print_yaml: false,
        print_log: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--scale" => a.scales.push(it.next().context("--scale N")?.parse()?),
            "--scenario" => a.scenario = it.next().context("--scenario NAME")?,
            "--seed" => a.seed = it.next().context("--seed N")?.parse()?,
            "--out-dir" => a.out_dir = Some(it.next().context("--out-dir DIR")?.into()),
            "--print-yaml" => a.print_yaml = true,
            "--print-log" => a.print_log = true,
            "-h" | "--help" => {
                println!("usage: meshscope-bench-istiod [--scenario reference|realistic|social-network] [--scale N]... [--seed N] [--out-dir DIR]\n       meshscope-bench-istiod --scenario realistic|social-network [--scale N] [--seed N] --print-yaml|--print-log\n(default: --scenario reference --scale 1 --seed 22). --out-dir writes the JSON line, pretty, to DIR/istiod-<scenario>-<commit>.json.\n--print-yaml prints the scenario's manifests, --print-log its access log, and exit.\nNeeds the test control plane (tests/cluster/up) and istiod (tests/istiod/build).");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if a.scales.is_empty() {
        a.scales.push(1);
    }
    if a.scenario != "reference" && meshgen::by_name(&a.scenario, 1, a.seed).is_none() {
        bail!(
            "unknown scenario {:?} (reference, realistic, social-network)",
            a.scenario
        );
    }
    Ok(a)
}
