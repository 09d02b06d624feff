//! Running `kubectl meshscope` in-process, as `main` would, for the
//! end-to-end tests: the outcome (or the error as `main` prints it), and
//! what went to stdout and stderr.

use std::path::Path;

use clap::Parser;
use kubectl_meshscope::{args::Cli, run, Outcome};

pub struct Run {
    pub outcome: anyhow::Result<Outcome>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The outcome of a run that must not fail.
    pub fn ok(&self) -> Outcome {
        match &self.outcome {
            Ok(o) => *o,
            Err(e) => panic!("{e:#}\n{}", self.stderr),
        }
    }

    /// The error as `main` prints it, of a run that must fail.
    pub fn error(&self) -> String {
        match &self.outcome {
            Err(e) => format!("{e:#}"),
            Ok(o) => panic!("expected an error, got {o:?}; stderr: {}", self.stderr),
        }
    }
}

/// `kubectl meshscope ARGS`.
pub fn meshscope(args: &[&str]) -> Run {
    let mut argv = vec!["kubectl-meshscope"];
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(argv).expect("arguments parse");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let outcome = run(cli, &mut out, &mut err);
    Run {
        outcome,
        stdout: String::from_utf8(out).unwrap(),
        stderr: String::from_utf8(err).unwrap(),
    }
}

/// `kubectl meshscope ARGS --kubeconfig KUBECONFIG`.
pub fn meshscope_at(kubeconfig: &Path, args: &[&str]) -> Run {
    let kc = kubeconfig.to_str().expect("a UTF-8 path");
    let mut all = args.to_vec();
    all.extend(["--kubeconfig", kc]);
    meshscope(&all)
}
