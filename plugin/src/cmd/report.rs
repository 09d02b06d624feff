//! `kubectl meshscope report`: what `recommend` (with its defaults) and
//! `audit` say about the namespaces asked for, as one self-contained HTML
//! page ([`scope::report`]) on stdout.

use anyhow::Result;
use meshscope_shared as scope;

use crate::outcome::Outcome;
use crate::output::{plural, Printer};
use crate::request::ReportRequest;
use crate::world::World;

pub fn run(r: &ReportRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    let (world, recs) = World::load_recommended(&r.spec, p)?;
    world.warn_missing_kinds("report", None, p.err)?;
    let findings: Vec<scope::finding::Finding> = world
        .findings(p)?
        .into_iter()
        .filter(|f| f.exempt.is_none())
        .collect();
    let source = source(&r.spec.mesh, &world);
    write!(
        p.out,
        "{}",
        scope::report::html(&world.snap, &recs, &findings, &source)
    )?;
    p.summary(format_args!(
        "report: {}, {}",
        plural(recs.len(), "workload", "workloads"),
        plural(findings.len(), "finding", "findings")
    ))?;
    Ok(Outcome::Ok)
}

/// What the page was made from, in a line.
fn source(m: &crate::request::MeshRequest, world: &World) -> String {
    let mesh = match &world.live {
        Some(ctx) => format!("the cluster at {}", ctx.live.server),
        None => format!(
            "manifests {}",
            m.manifests
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let traffic = match &world.obs {
        Some(obs) if !obs.sources.is_empty() => {
            let s: Vec<&str> = obs.sources.iter().map(String::as_str).collect();
            format!("traffic from {}", s.join(", "))
        }
        _ => "no traffic source".to_string(),
    };
    let ns = match &world.namespaces {
        None => "every namespace".to_string(),
        Some(n) => format!(
            "namespaces {}",
            n.iter().cloned().collect::<Vec<_>>().join(", ")
        ),
    };
    format!(
        "Made by kubectl meshscope {} from {mesh}, {traffic}; {ns}.",
        env!("CARGO_PKG_VERSION")
    )
}
