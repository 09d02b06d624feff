//! `meshscope-scenario`: writes the reference scenario (manifests and
//! access logs in every supported form) into a directory.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use meshscope_e2e::{fidelity, LogForm, Scenario};

fn main() -> std::process::ExitCode {
    meshscope_e2e::tool_exit(try_main())
}

fn try_main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut out: Option<PathBuf> = None;
    let mut s = Scenario::reference();
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match a.as_str() {
            "--out" => out = Some(PathBuf::from(val("--out")?)),
            "--httpbins" => s.httpbins = val("--httpbins")?.parse()?,
            "--sleeps" => s.sleeps = val("--sleeps")?.parse()?,
            "--fanout" => s.fanout = val("--fanout")?.parse()?,
            "--requests-per-edge" => s.requests_per_edge = val("--requests-per-edge")?.parse()?,
            "--namespace" => s.namespace = val("--namespace")?,
            "--fidelity" => {
                // A fidelity scenario (tests/src/fidelity.rs): `fixed-N` or a
                // random seed, as YAML on stdout, with its mesh config.
                let which = val("--fidelity")?;
                let sc = match which.strip_prefix("fixed-") {
                    Some(i) => fidelity::fixed(1)
                        .into_iter()
                        .nth(i.parse::<usize>()?)
                        .context("no such fixed scenario")?,
                    None => fidelity::random(which.parse()?, 0),
                };
                println!(
                    "# {}\n# mesh config:\n#   {}",
                    sc.name,
                    sc.mesh.trim_end().replace('\n', "\n#   ")
                );
                print!("{}", sc.world.spec_yaml());
                return Ok(());
            }
            "-h" | "--help" => {
                println!("usage: meshscope-scenario --out DIR [--httpbins N] [--sleeps N] [--fanout N] [--requests-per-edge N] [--namespace NS]\n       meshscope-scenario --fidelity fixed-N|SEED   (a fidelity-test scenario as YAML on stdout)");
                return Ok(());
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    let out = out.context("--out DIR is required")?;
    std::fs::create_dir_all(out.join("logs"))?;
    s.write_manifests(&mut BufWriter::new(File::create(
        out.join("manifests.yaml"),
    )?))?;
    for form in LogForm::ALL {
        s.write_logs(
            form,
            &mut BufWriter::new(File::create(out.join("logs").join(form.file_name()))?),
        )?;
    }
    eprintln!("wrote {}", out.display());
    Ok(())
}
