//! `kubectl meshscope`: the command implementations. Every decision is made
//! by `meshscope_shared`; this crate reads inputs, calls it, and prints.
//!
//! The layers, each importing only those below it: [`args`] (the clap
//! structs) → [`request`] (the flags parsed and checked once) → [`world`]
//! (the `shared` inputs from files or a cluster, through [`input`] and
//! [`live`]) → [`cmd`] (one module per subcommand) → [`output`] (the
//! [`output::Printer`] every command prints through).

#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

pub mod args;
pub mod cmd;
pub mod complete;
pub mod detect;
pub mod duration;
pub mod input;
pub mod install;
pub mod interrupt;
pub mod istiod;
pub mod live;
pub mod outcome;
pub mod output;
pub mod prometheus;
pub mod request;
pub mod selector;
pub mod world;

use std::io::Write;

use anyhow::Result;

pub use cmd::version::VERSION;
pub use outcome::Outcome;

/// Parses the command line into a request, checking every flag, and runs
/// it, printing to `out` and `err`.
pub fn run(cli: args::Cli, out: &mut dyn Write, err: &mut dyn Write) -> Result<Outcome> {
    let (req, style) = request::Request::parse(cli.command)?;
    let mut p = output::Printer {
        out,
        err,
        no_headers: style.no_headers,
        quiet: style.quiet,
    };
    cmd::run(req, &mut p)
}
