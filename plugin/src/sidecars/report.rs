//! Reporting a write: a line per Sidecar on stdout, the reason of each
//! skip or failure on stderr, the summary, and the exit code it implies.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{bail, Result};

use super::result::{ApplyResult, SidecarRow, CONFLICT};
use crate::args::DryRun;
use crate::live::systemic_cause;
use crate::outcome::Outcome;
use crate::output::{plural, Printer};

/// The summary line of a write (`apply: 2 created, 1 unchanged`), or
/// `<what>: <nothing>` when there was nothing to write.
pub fn summarize(
    p: &mut Printer<'_>,
    what: &str,
    counts: &BTreeMap<ApplyResult, usize>,
    nothing: &str,
) -> Result<()> {
    let counted: Vec<String> = counts
        .iter()
        .map(|(r, n)| format!("{n} {}", r.word()))
        .collect();
    let line = if counted.is_empty() {
        nothing.to_string()
    } else {
        counted.join(", ")
    };
    p.summary(format_args!("{what}: {line}"))?;
    Ok(())
}

/// Whether every row failed for the same cause (RBAC, no server): then
/// the cause is said once, as an error.
fn all_failed_alike(results: &[SidecarRow]) -> bool {
    let cause = |r: &SidecarRow| {
        systemic_cause(&r.reason).unwrap_or_else(|| {
            r.reason
                .replace(&format!("\"{}\"", r.sidecar.name), "\"NAME\"")
                .replace(&format!("\"{}\"", r.sidecar.namespace), "\"NAMESPACE\"")
        })
    };
    match results.first() {
        Some(first) if first.result == ApplyResult::Failed => {
            let first = cause(first);
            results
                .iter()
                .all(|r| r.result == ApplyResult::Failed && cause(r) == first)
        }
        _ => false,
    }
}

/// Prints a line per object and the summary; every object failing for the
/// same cause (RBAC, no server) is an error, said once (exit 2), some
/// objects failing a finding (exit 1).
pub fn report_rows(
    results: &[SidecarRow],
    dry_run: DryRun,
    p: &mut Printer<'_>,
) -> Result<Outcome> {
    let suffix = match dry_run {
        DryRun::None => "",
        DryRun::Server => " (server dry run)",
        DryRun::Client => " (dry run)",
    };
    let alike = all_failed_alike(results);
    let mut counts: BTreeMap<ApplyResult, usize> = BTreeMap::new();
    for r in results {
        *counts.entry(r.result).or_default() += 1;
        let (ns, name) = (&r.sidecar.namespace, &r.sidecar.name);
        writeln!(
            p.out,
            "sidecar.networking.istio.io/{name} {}{suffix} (namespace {ns})",
            r.result.word()
        )?;
        if matches!(r.result, ApplyResult::Skipped | ApplyResult::Failed) && !alike {
            writeln!(p.err, "{}: {}: {}", r.result.word(), r.sidecar, r.reason)?;
        }
    }
    if alike {
        let n = results.len();
        bail!(
            "apply{suffix}: {n} of {} failed: {}",
            plural(n, "object", "objects"),
            results[0].reason
        );
    }
    summarize(p, &format!("apply{suffix}"), &counts, "nothing to apply")?;
    // A conflict leaves the scope different from the recommendation.
    let conflicts = results
        .iter()
        .filter(|r| r.result == ApplyResult::Skipped && r.reason.starts_with(CONFLICT))
        .count();
    if conflicts > 0 {
        writeln!(
            p.err,
            "{} left different from the recommendation: another field manager owns fields apply would set (rerun with --force-conflicts to take them over)",
            plural(conflicts, "Sidecar", "Sidecars")
        )?;
    }
    Ok(
        if counts.contains_key(&ApplyResult::Failed) || conflicts > 0 {
            Outcome::Findings
        } else {
            Outcome::Ok
        },
    )
}

/// Names the proxies a `--wait` did not confirm: those not connected to
/// istiod (not waited for) and those still waiting at the timeout `given`.
/// Whether any timed out (a finding).
pub fn unconfirmed(
    not_connected: &[String],
    timed_out: &[String],
    given: &str,
    err: &mut dyn Write,
) -> Result<bool> {
    if !not_connected.is_empty() {
        writeln!(
            err,
            "not waited for (not connected to istiod): {}",
            not_connected.join(", ")
        )?;
    }
    if !timed_out.is_empty() {
        writeln!(
            err,
            "timed out after {given} waiting for: {}",
            timed_out.join(", ")
        )?;
    }
    Ok(!timed_out.is_empty())
}
