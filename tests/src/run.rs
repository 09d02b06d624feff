//! Running `kubectl meshscope` for the end-to-end tests: in-process, as
//! `main` would (the outcome, or the error as `main` prints it, and what
//! went to stdout and stderr), or as the built binary a user runs
//! ([`binary`]: its environment, stdin and exit code).

use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

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

/// The built plugin binary, run as a child process with `args`.
pub fn binary<I, S>(args: I) -> Binary
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(crate::cluster::plugin_binary());
    cmd.args(args);
    Binary { cmd, stdin: None }
}

/// A run of the plugin binary being set up: see [`binary`].
pub struct Binary {
    cmd: Command,
    stdin: Option<String>,
}

impl Binary {
    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    pub fn env_remove(mut self, key: &str) -> Self {
        self.cmd.env_remove(key);
        self
    }

    /// Pipes `text` to its stdin (without this, stdin reads as closed).
    pub fn stdin(mut self, text: &str) -> Self {
        self.stdin = Some(text.to_string());
        self
    }

    /// Runs it to the end.
    pub fn output(mut self) -> Output {
        let Some(text) = self.stdin else {
            return self.cmd.output().expect("the plugin runs");
        };
        let mut child = self
            .cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the plugin starts");
        // A command that refuses its arguments exits without reading stdin;
        // the pipe is then closed under the write, which is not a failure.
        let written = child.stdin.take().unwrap().write_all(text.as_bytes());
        if let Err(e) = written {
            assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
        }
        child.wait_with_output().expect("the plugin runs")
    }

    /// Runs it to the end: (exit code, stdout, stderr).
    pub fn run(self) -> (i32, String, String) {
        let out = self.output();
        (
            out.status.code().expect("exited"),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    }
}
