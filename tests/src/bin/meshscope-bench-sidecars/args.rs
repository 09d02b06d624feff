//! The command line and its defaults.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

pub struct Args {
    pub services: usize,
    pub sidecars: usize,
    pub unscoped: Vec<usize>,
    pub scoped: Vec<usize>,
    pub seed: u64,
    pub out_dir: Option<PathBuf>,
    pub reuse_mesh: bool,
    pub unscoped_from: Option<PathBuf>,
}

/// The points run when none are given: unscoped while they fit, scoped
/// up to the full size.
pub const UNSCOPED: [usize; 8] = [500, 1_000, 1_500, 2_000, 2_500, 3_000, 3_500, 4_000];
pub const SCOPED: [usize; 4] = [2_500, 5_000, 10_000, 20_000];
pub const SERVICES: usize = 1_000;
pub const SIDECARS: usize = 20_000;
pub const SEED: u64 = 22;

pub fn args() -> Result<Args> {
    let mut a = Args {
        services: SERVICES,
        sidecars: SIDECARS,
        unscoped: UNSCOPED.to_vec(),
        scoped: SCOPED.to_vec(),
        seed: SEED,
        out_dir: None,
        reuse_mesh: false,
        unscoped_from: None,
    };
    let list = |v: Option<String>| -> Result<Vec<usize>> {
        let v = v.context("a list of proxy counts")?;
        if v.trim() == "none" {
            return Ok(Vec::new());
        }
        v.split([',', ' '])
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().map_err(Into::into))
            .collect()
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--services" => a.services = it.next().context("--services N")?.parse()?,
            "--sidecars" => a.sidecars = it.next().context("--sidecars N")?.parse()?,
            "--unscoped" => a.unscoped = list(it.next())?,
            "--scoped" => a.scoped = list(it.next())?,
            "--seed" => a.seed = it.next().context("--seed N")?.parse()?,
            "--out-dir" => a.out_dir = Some(it.next().context("--out-dir DIR")?.into()),
            "--reuse-mesh" => a.reuse_mesh = true,
            "--unscoped-from" => {
                a.unscoped_from = Some(it.next().context("--unscoped-from FILE")?.into());
                a.unscoped = Vec::new();
            }
            "-h" | "--help" => {
                let join = |v: &[usize]| {
                    v.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                };
                println!("usage: meshscope-bench-sidecars [--services N] [--sidecars N] [--unscoped N,N,..] [--scoped N,N,..] [--seed N] [--out-dir DIR] [--reuse-mesh] [--unscoped-from RUN.json]\n(defaults: {SERVICES} services, {SIDECARS} sidecars, unscoped {} (while they fit), scoped {}, seed {SEED}; `none` runs no point of that mode).\n--reuse-mesh: the control plane holds this mesh from an earlier run with the same --services, --sidecars and --seed; keep it (its managed Sidecars are deleted) instead of deleting and deploying it again.\n--unscoped-from RUN.json: take the unscoped points from that raw run of the same mesh (same --services, --sidecars and --seed) instead of measuring them again; the tables say so.\nNeeds the test control plane (tests/cluster/up) and istiod (tests/istiod/build).", join(&UNSCOPED), join(&SCOPED));
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    for v in [&mut a.unscoped, &mut a.scoped] {
        v.retain(|n| *n > 0);
        v.sort_unstable();
        v.dedup();
        for n in v.iter_mut() {
            *n = (*n).min(a.sidecars);
        }
    }
    Ok(a)
}
