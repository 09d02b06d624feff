//! `kubectl meshscope`: the command implementations. Every decision is made
//! by `meshscope_shared`; this crate reads inputs, calls it, and prints.
//!
//! The layers, each importing only those below it: [`args`] (the clap
//! structs) → [`request`] (the flags parsed and checked once) → [`world`]
//! (the `shared` inputs from files or a cluster, through [`input`] and
//! [`live`], and what is recommended and found in them) → [`istiod`]
//! (istiod's debug endpoints and the checks against them) and
//! [`sidecars`] (the Sidecar write layer) → [`cmd`] (one module per
//! subcommand, none importing another) → [`output`] (the
//! [`output::Printer`] every command prints through).

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod args;
pub mod cmd;
pub mod complete;
pub mod detect;
pub mod duration;
pub mod format;
pub mod hoist;
pub mod input;
pub mod install;
pub mod interrupt;
pub mod istiod;
pub mod jsonpath;
pub mod live;
pub mod outcome;
pub mod output;
pub mod prometheus;
pub mod request;
pub mod selector;
pub mod sidecars;
pub mod traffic;
pub mod world;

use std::io::Write;

use anyhow::Result;

pub use cmd::version::{COMMIT, VERSION};
pub use outcome::Outcome;

/// Parses the command line into a request, checking every flag, and runs
/// it, printing to `out` and `err`.
pub fn run(cli: args::Cli, out: &mut dyn Write, err: &mut dyn Write) -> Result<Outcome> {
    let (req, style) = request::Request::parse(cli.command)?;
    let Some(template) = &style.jsonpath else {
        let mut p = output::Printer {
            out,
            err,
            no_headers: style.no_headers,
            quiet: style.quiet,
        };
        return cmd::run(req, &mut p);
    };
    // `-o jsonpath=`: the command prints json, which the template renders.
    let mut json = Vec::new();
    let mut p = output::Printer {
        out: &mut json,
        err,
        no_headers: style.no_headers,
        quiet: style.quiet,
    };
    let outcome = cmd::run(req, &mut p)?;
    if !json.is_empty() {
        let v: serde_json::Value = serde_json::from_slice(&json)?;
        out.write_all(template.render(&v)?.as_bytes())?;
    }
    Ok(outcome)
}
