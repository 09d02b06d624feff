//! `kubectl meshscope audit`: findings with stable codes, and the exit code for CI gates.

use anyhow::Result;
use meshscope_shared as scope;
use scope::audit::{self, Code, Finding};

use crate::args::ReportOutput;
use crate::outcome::Outcome;
use crate::output::{self, plural, Printer, Table};
use crate::request::AuditRequest;
use crate::world::World;

/// What the audit found: the findings to report, those of objects that
/// `meshscope.io/exempt` exempts (shown with the reason, never a failure),
/// and those suppressed.
pub struct Audited {
    pub findings: Vec<Finding>,
    pub exempt: Vec<Finding>,
    pub suppressed: Vec<Finding>,
}

pub fn run(r: &AuditRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    let audited = audit_world(r, p)?;
    print(r, &audited, p)
}

/// Loads the world and audits it, `--code` and `--suppress` applied.
fn audit_world(r: &AuditRequest, p: &mut Printer<'_>) -> Result<Audited> {
    let world = World::load(&r.mesh, p.err)?;
    world.report_ingest(p)?;
    let found = world.findings(p)?;
    let (kept, suppressed): (Vec<Finding>, Vec<Finding>) = found
        .into_iter()
        .filter(|f| r.codes.is_empty() || r.codes.contains(&f.code))
        .partition(|f| !r.suppressions.iter().any(|s| s.matches(f)));
    world.warn_missing_kinds("audit", Some(&kept), p.err)?;
    discovery_selectors(&world, &kept, p)?;
    let (exempt, findings) = kept.into_iter().partition(|f| f.exempt.is_some());
    Ok(Audited {
        findings,
        exempt,
        suppressed,
    })
}

/// With MS0020 findings: the mesh config that drops those namespaces
/// from istiod's view, as a block to paste (stderr; a summary).
fn discovery_selectors(world: &World, kept: &[Finding], p: &mut Printer<'_>) -> Result<()> {
    let Some(obs) = world.obs.as_ref() else {
        return Ok(());
    };
    if !kept
        .iter()
        .any(|f| f.code == Code::NamespaceNotNeeded && f.exempt.is_none())
    {
        return Ok(());
    }
    let advice = scope::discovery::advice(&world.snap, obs);
    p.summary(format_args!(
        "meshConfig that stops istiod watching {} (MS0020):\n{}",
        advice.drop.join(", "),
        advice.yaml().trim_end()
    ))?;
    Ok(())
}

/// Prints the findings and picks the exit code from `--fail-on`.
fn print(r: &AuditRequest, a: &Audited, p: &mut Printer<'_>) -> Result<Outcome> {
    let (findings, exempt, suppressed) = (&a.findings, &a.exempt, &a.suppressed);
    let mut summary = audit::summarize(findings);
    summary.exempt = exempt.len();
    let fixes = audit::namespace_fixes(findings);
    let document = || serde_json::json!({"findings": findings, "exempt": exempt, "summary": summary, "suppressed": suppressed.len(), "namespace_fixes": fixes});
    match r.output {
        ReportOutput::Json => output::json(p.out, &document())?,
        ReportOutput::Yaml => output::yaml(p.out, &document())?,
        ReportOutput::Name => output::names(
            p.out,
            findings.iter().map(|f| (f.kind.as_str(), f.name.as_str())),
        )?,
        ReportOutput::Table | ReportOutput::Wide => {
            let wide = r.output == ReportOutput::Wide;
            if !findings.is_empty() {
                let mut t =
                    Table::new(["SEVERITY", "CODE", "KIND", "NAMESPACE", "NAME", "MESSAGE"]);
                for f in findings {
                    t.row([
                        f.severity.as_str(),
                        f.code.as_str(),
                        f.kind.as_str(),
                        f.namespace.as_str(),
                        f.name.as_str(),
                        if wide {
                            f.message.as_str()
                        } else {
                            without_subject(f)
                        },
                    ]);
                }
                p.table(&t)?;
            }
            if !exempt.is_empty() {
                if !findings.is_empty() {
                    writeln!(p.out)?;
                }
                p.table(&exempt_table(exempt, wide))?;
            }
        }
    }
    let mut notes = Vec::new();
    if !exempt.is_empty() {
        notes.push(format!("{} exempt", exempt.len()));
    }
    if !suppressed.is_empty() {
        notes.push(format!("{} suppressed", suppressed.len()));
    }
    let suppressed_note = if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join(", "))
    };
    if findings.is_empty() {
        p.summary(format_args!("no findings{suppressed_note}"))?;
    } else {
        p.summary(format_args!(
            "{}: {}, {}, {} info{suppressed_note}",
            plural(findings.len(), "finding", "findings"),
            plural(summary.errors, "error", "errors"),
            plural(summary.warnings, "warning", "warnings"),
            summary.infos,
        ))?;
    }
    for fix in &fixes {
        p.summary(format_args!("{fix}"))?;
    }
    Ok(match r.fail_on {
        Some(t) if findings.iter().any(|f| f.severity >= t) => Outcome::Findings,
        _ => Outcome::Ok,
    })
}

/// The findings of exempt objects: the severity they would have, and the
/// reason their `meshscope.io/exempt` gives (with `-o wide`, the message).
fn exempt_table(exempt: &[Finding], wide: bool) -> Table {
    let mut headers = vec!["EXEMPT", "CODE", "KIND", "NAMESPACE", "NAME", "REASON"];
    if wide {
        headers.push("MESSAGE");
    }
    let mut t = Table::new(headers);
    for f in exempt {
        let mut row = vec![
            f.severity.as_str(),
            f.code.as_str(),
            f.kind.as_str(),
            f.namespace.as_str(),
            f.name.as_str(),
            f.exempt.as_deref().unwrap_or_default(),
        ];
        if wide {
            row.push(f.message.as_str());
        }
        t.row(row);
    }
    t
}

/// The message without its opening "Kind ns/name", which the table's
/// columns already show.
fn without_subject(f: &Finding) -> &str {
    let subject = format!("{} {}/{}", f.kind, f.namespace, f.name);
    match f.message.strip_prefix(&subject) {
        Some(rest) if rest.starts_with([' ', ':']) => rest.trim_start_matches(':').trim_start(),
        _ => &f.message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::suppress::tests::finding;

    #[test]
    fn the_table_message_drops_the_repeated_subject() {
        let f = finding(
            Code::UnscopedWorkload,
            "Deployment",
            "shop",
            "worker",
            "Deployment shop/worker has no Sidecar scope; run: x",
        );
        assert_eq!(without_subject(&f), "has no Sidecar scope; run: x");
        let f = finding(
            Code::EgressHostMatchesNothing,
            "Sidecar",
            "shop",
            "s",
            "Sidecar shop/s: bad host; istiod skips it",
        );
        assert_eq!(without_subject(&f), "bad host; istiod skips it");
        let f = finding(
            Code::SeveralNamespaceSidecars,
            "Sidecar",
            "shop",
            "s",
            "namespace shop has 2 Sidecars",
        );
        assert_eq!(without_subject(&f), "namespace shop has 2 Sidecars");
        let f = finding(
            Code::UnscopedWorkload,
            "Deployment",
            "shop",
            "web",
            "Deployment shop/web2 x",
        );
        assert_eq!(without_subject(&f), "Deployment shop/web2 x");
    }
}
