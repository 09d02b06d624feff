//! One module per subcommand. Each takes its request (checked flags, from
//! [`crate::request`]), loads its world through [`crate::world`] and
//! prints through the [`Printer`] it is given. A command never imports
//! another (`tests/support/tests/shape.rs` holds it): what two share lives
//! below, in [`crate::world`] (recommending, auditing),
//! [`crate::sidecars`] (writing Sidecars) or [`crate::istiod`] (checks
//! against istiod).

pub mod apply;
pub mod audit;
pub mod codes;
pub mod diff;
pub mod explain;
pub mod exports;
pub mod impact;
pub mod recommend;
pub mod report;
pub mod verify;
pub mod version;
pub mod watch;
pub mod webhook;

use anyhow::Result;
use clap::CommandFactory;

use crate::outcome::Outcome;
use crate::output::Printer;
use crate::request::Request;

/// Runs one request.
pub fn run(req: Request, p: &mut Printer<'_>) -> Result<Outcome> {
    match req {
        Request::Recommend(r) => match &r.spec.exports {
            Some(e) => exports::recommend(&r, e, p),
            None => recommend::run(&r, p),
        },
        Request::Apply(r) if r.spec.exports.is_some() => exports::write::apply(&r, p),
        Request::Apply(r) if r.watch.is_some() => watch::run(&r, p),
        Request::Apply(r) => apply::run(&r, p),
        Request::Diff(r) if r.spec.exports.is_some() => exports::write::diff(&r, p),
        Request::Diff(r) => diff::run(&r, p),
        Request::Verify(r) => verify::run(&r, p),
        Request::Audit(r) => audit::run(&r, p),
        Request::Explain(r) => explain::run(&r, p),
        Request::Impact(r) => impact::run(&r, p),
        Request::Report(r) => report::run(&r, p),
        Request::Codes(r) => codes::run(&r, p),
        Request::Version(r) => version::run(&r, p),
        Request::Webhook(r) => webhook::run(&r, p),
        Request::Completion(shell) => {
            let mut cmd = crate::args::Cli::command();
            clap_complete::generate(shell, &mut cmd, "kubectl-meshscope", p.out);
            Ok(Outcome::Ok)
        }
    }
}
