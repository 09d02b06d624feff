//! `kubectl meshscope audit`: findings with stable codes, and the exit code for CI gates.

use std::collections::BTreeSet;
use std::io::Write;

use anyhow::Result;
use meshscope_shared as scope;
use scope::audit::{self, AuditScope, Severity};
use scope::snapshot::WorkloadId;

use crate::args::{self, FailOn, ReportOutput};
use crate::output::{self, Table};
use crate::{Outcome, World};

pub fn cmd_audit(a: args::AuditArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<Outcome> {
    let world = World::load(&a.common, err)?;
    world.report_ingest(err)?;
    let workloads: Option<BTreeSet<WorkloadId>> = world.selector.as_ref().map(|_| {
        (0..world.snap.workloads.len())
            .filter(|w| world.in_scope(*w))
            .collect()
    });
    let findings = audit::audit(
        &world.snap,
        world.obs.as_ref(),
        &AuditScope {
            namespaces: world.namespaces.as_ref(),
            workloads: workloads.as_ref(),
        },
    );
    let summary = audit::summarize(&findings);
    match a.output {
        ReportOutput::Json => output::json(
            out,
            &serde_json::json!({"findings": findings, "summary": summary}),
        )?,
        ReportOutput::Yaml => output::yaml(
            out,
            &serde_json::json!({"findings": findings, "summary": summary}),
        )?,
        ReportOutput::Table | ReportOutput::Wide => {
            if findings.is_empty() {
                writeln!(err, "no findings")?;
            } else {
                let mut t =
                    Table::new(["SEVERITY", "CODE", "KIND", "NAMESPACE", "NAME", "MESSAGE"]);
                for f in &findings {
                    t.row([
                        f.severity.as_str().to_string(),
                        f.code.to_string(),
                        f.kind.clone(),
                        f.namespace.clone(),
                        f.name.clone(),
                        f.message.clone(),
                    ]);
                }
                t.write(out)?;
            }
        }
    }
    writeln!(
        err,
        "{} findings: {} errors, {} warnings, {} info",
        findings.len(),
        summary.errors,
        summary.warnings,
        summary.infos
    )?;
    let threshold = match a.fail_on {
        FailOn::Error => Some(Severity::Error),
        FailOn::Warning => Some(Severity::Warning),
        FailOn::Info => Some(Severity::Info),
        FailOn::None => None,
    };
    Ok(match threshold {
        Some(t) if findings.iter().any(|f| f.severity >= t) => Outcome::Findings,
        _ => Outcome::Ok,
    })
}
