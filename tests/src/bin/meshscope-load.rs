//! meshscope-load: load a mesh as `kubectl get -o yaml` shows it onto the
//! test control plane with its pods running, ready and proxied
//! (`meshscope_e2e::load`). `tests/cluster/load-example` runs it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::load::load;

const USAGE: &str = "\
meshscope-load: load a mesh as `kubectl get -o yaml` shows it (namespaces,
Services, Istio objects, Deployments and their pods with IPs, such as
examples/bookinfo/manifests.yaml) onto the test control plane, with its
pods running, ready and owned by their ReplicaSets and Deployments, and
EndpointSlices for its Services. Objects in istio-system are left out.
Running it again updates what it loaded.

stdout: one line per pod: NAMESPACE/NAME IP OWNER. Notes go to stderr.

USAGE:
  meshscope-load [--kubeconfig PATH] FILE

OPTIONS:
  --kubeconfig PATH   the test control plane [default: $KUBECONFIG]
  -h, --help          print this help

Errors go to stderr as one line, with exit code 2.
";

enum Parsed {
    Run { kubeconfig: PathBuf, file: PathBuf },
    Help,
}

fn parse_args(argv: Vec<String>) -> Result<Parsed> {
    let mut kubeconfig = std::env::var("KUBECONFIG").ok().filter(|s| !s.is_empty());
    let mut file = None;
    let mut it = argv.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "--kubeconfig" => kubeconfig = Some(it.next().context("--kubeconfig needs a value")?),
            a if a.starts_with("--kubeconfig=") => kubeconfig = Some(a[13..].to_string()),
            a if a.starts_with('-') => bail!("unknown argument {a:?} (see --help)"),
            _ if file.is_some() => bail!("give one FILE (see --help)"),
            _ => file = Some(PathBuf::from(arg)),
        }
    }
    let file = file.context("no FILE: give the manifests to load (see --help)")?;
    let kubeconfig = kubeconfig.context(
        "no kubeconfig: set KUBECONFIG or pass --kubeconfig (tests/cluster/up prints its path)",
    )?;
    // kubectl takes the first file of a KUBECONFIG list.
    let first = kubeconfig.split(':').next().unwrap_or("").to_string();
    Ok(Parsed::Run {
        kubeconfig: PathBuf::from(first),
        file,
    })
}

fn run(kubeconfig: PathBuf, file: PathBuf) -> Result<()> {
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    let c = Cluster { kubeconfig };
    let loaded = load(&c, &text)?;
    for n in &loaded.notes {
        eprintln!("meshscope-load: note: {n}");
    }
    for p in &loaded.pods {
        println!("{}/{} {} {}", p.namespace, p.name, p.ip, p.owner);
    }
    eprintln!(
        "meshscope-load: {} pods running and ready",
        loaded.pods.len()
    );
    Ok(())
}

fn main() -> ExitCode {
    let result = parse_args(std::env::args().skip(1).collect()).and_then(|p| match p {
        Parsed::Help => {
            print!("{USAGE}");
            Ok(())
        }
        Parsed::Run { kubeconfig, file } => run(kubeconfig, file),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
    }
}
