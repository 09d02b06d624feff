//! `kubectl meshscope audit`: findings with stable codes, and the exit code for CI gates.

use std::collections::BTreeSet;
use std::io::Write;

use anyhow::{anyhow, bail, Result};
use meshscope_shared as scope;
use scope::audit::{self, AuditScope, Finding, Severity};
use scope::snapshot::{WorkloadId, WorkloadKind};

use crate::args::{self, FailOn, ReportOutput};
use crate::output::{self, Table};
use crate::{Outcome, World};

pub fn cmd_audit(a: args::AuditArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<Outcome> {
    let only: BTreeSet<&'static str> = a
        .codes
        .iter()
        .map(|c| known_code(c, "--code"))
        .collect::<Result<_>>()?;
    let suppressions: Vec<Suppression> = a
        .suppress
        .iter()
        .map(|s| Suppression::parse(s))
        .collect::<Result<_>>()?;
    let world = World::load(&a.common, err)?;
    world.report_ingest(err)?;
    let workloads: Option<BTreeSet<WorkloadId>> = world.selector.as_ref().map(|_| {
        (0..world.snap.workloads.len())
            .filter(|w| world.in_scope(*w))
            .collect()
    });
    let (findings, suppressed): (Vec<Finding>, Vec<Finding>) = audit::audit(
        &world.snap,
        world.obs.as_ref(),
        &AuditScope {
            namespaces: world.namespaces.as_ref(),
            workloads: workloads.as_ref(),
        },
    )
    .into_iter()
    .filter(|f| only.is_empty() || only.contains(f.code))
    .partition(|f| !suppressions.iter().any(|s| s.matches(f)));
    let summary = audit::summarize(&findings);
    let document = || serde_json::json!({"findings": findings, "summary": summary, "suppressed": suppressed.len()});
    match a.output {
        ReportOutput::Json => output::json(out, &document())?,
        ReportOutput::Yaml => output::yaml(out, &document())?,
        ReportOutput::Name => output::names(
            out,
            findings.iter().map(|f| (f.kind.as_str(), f.name.as_str())),
        )?,
        ReportOutput::Table | ReportOutput::Wide => {
            if findings.is_empty() {
                output::summary(err, format_args!("no findings"))?;
            } else {
                let wide = a.output == ReportOutput::Wide;
                let mut t =
                    Table::new(["SEVERITY", "CODE", "KIND", "NAMESPACE", "NAME", "MESSAGE"]);
                for f in &findings {
                    t.row([
                        f.severity.as_str(),
                        f.code,
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
                t.write(out)?;
            }
        }
    }
    output::summary(
        err,
        format_args!(
            "{} findings: {} errors, {} warnings, {} info{}",
            findings.len(),
            summary.errors,
            summary.warnings,
            summary.infos,
            if suppressed.is_empty() {
                String::new()
            } else {
                format!(" ({} suppressed)", suppressed.len())
            }
        ),
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

/// The message without its opening "Kind ns/name", which the table's
/// columns already show.
fn without_subject(f: &Finding) -> &str {
    let subject = format!("{} {}/{}", f.kind, f.namespace, f.name);
    match f.message.strip_prefix(&subject) {
        Some(rest) if rest.starts_with([' ', ':']) => rest.trim_start_matches(':').trim_start(),
        _ => &f.message,
    }
}

fn known_code(code: &str, flag: &str) -> Result<&'static str> {
    audit::code_doc(code.trim()).map(|d| d.code).ok_or_else(|| {
        anyhow!("{flag}: unknown code {code:?}; `kubectl meshscope codes` lists them")
    })
}

// === --suppress ===

/// `CODE` or `CODE=KIND/NS/NAME`, with `*` globbing the object (as
/// `istioctl analyze --suppress "IST0102=Namespace frod"`).
#[derive(Debug, PartialEq, Eq)]
struct Suppression {
    code: &'static str,
    /// `kind/ns/name`, the kind lower-case and singular.
    object: Option<String>,
}

impl Suppression {
    fn parse(s: &str) -> Result<Self> {
        let (code, object) = match s.split_once('=') {
            Some((c, o)) => (c, Some(o.trim())),
            None => (s, None),
        };
        let code = known_code(code, "--suppress")?;
        let object = match object {
            None | Some("*") => None,
            Some(o) => {
                let parts: Vec<&str> = o.split('/').collect();
                let [kind, ns, name] = parts[..] else {
                    bail!("--suppress {s:?}: expected CODE=KIND/NAMESPACE/NAME (e.g. {code}=Deployment/shop/worker, * globs)");
                };
                if kind.is_empty() || ns.is_empty() || name.is_empty() {
                    bail!("--suppress {s:?}: KIND, NAMESPACE and NAME must not be empty (use * for any)");
                }
                Some(format!("{}/{ns}/{name}", kind_key(kind)))
            }
        };
        Ok(Self { code, object })
    }

    fn matches(&self, f: &Finding) -> bool {
        self.code == f.code
            && self.object.as_deref().is_none_or(|pattern| {
                glob(
                    pattern,
                    &format!("{}/{}/{}", kind_key(&f.kind), f.namespace, f.name),
                )
            })
    }
}

/// A kind as `--suppress` compares it: lower-case, singular, no group
/// (`deploy`, `Deployment` and `deployment.apps` are the same).
fn kind_key(kind: &str) -> String {
    if kind.contains('*') {
        return kind.to_ascii_lowercase();
    }
    let bare = kind.split('.').next().unwrap_or(kind);
    if let Some(k) = WorkloadKind::parse(bare).filter(|k| !matches!(k, WorkloadKind::Other(_))) {
        return k.as_str().to_ascii_lowercase();
    }
    match bare.to_ascii_lowercase().as_str() {
        "se" | "serviceentry" | "serviceentries" => "serviceentry".into(),
        "sidecar" | "sidecars" => "sidecar".into(),
        other => other.to_string(),
    }
}

/// `*` matches any run of characters (slashes too), as istioctl's glob.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || !text.ends_with(last) || text.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(code: &'static str, kind: &str, ns: &str, name: &str, message: &str) -> Finding {
        Finding {
            code,
            severity: Severity::Warning,
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
            message: message.into(),
        }
    }

    #[test]
    fn suppressions_match_code_and_globbed_object() {
        let worker = finding("MS0001", "Deployment", "shop", "worker", "");
        let se = finding("MS0002", "ServiceEntry", "shop", "payments", "");
        let all = Suppression::parse("ms0001").unwrap();
        assert!(all.matches(&worker) && !all.matches(&se));
        for s in [
            "MS0001=Deployment/shop/worker",
            "MS0001=deploy/shop/work*",
            "MS0001=deployment.apps/*/worker",
            "MS0001=*/shop/*",
            "MS0001=*",
        ] {
            assert!(Suppression::parse(s).unwrap().matches(&worker), "{s}");
        }
        for s in [
            "MS0001=Deployment/shop/web",
            "MS0001=StatefulSet/shop/worker",
            "MS0001=Deployment/other/*",
            "MS0002=Deployment/shop/worker",
        ] {
            assert!(!Suppression::parse(s).unwrap().matches(&worker), "{s}");
        }
        assert!(Suppression::parse("MS0002=se/shop/pay*")
            .unwrap()
            .matches(&se));
    }

    #[test]
    fn suppressions_reject_unknown_codes_and_malformed_objects() {
        let e = Suppression::parse("MS9999=Deployment/shop/x")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "--suppress: unknown code \"MS9999\"; `kubectl meshscope codes` lists them"
        );
        let e = Suppression::parse("MS0001=Deployment/worker")
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected CODE=KIND/NAMESPACE/NAME"), "{e}");
    }

    #[test]
    fn globs_match_like_istioctl() {
        assert!(glob("a*c", "abc") && glob("a*c", "ac") && glob("*", ""));
        assert!(glob("a*b*c", "a/x/b/y/c") && !glob("a*b*c", "a/x/c"));
        assert!(!glob("ab*ba", "aba"), "prefix and suffix must not overlap");
    }

    #[test]
    fn the_table_message_drops_the_repeated_subject() {
        let f = finding(
            "MS0001",
            "Deployment",
            "shop",
            "worker",
            "Deployment shop/worker has no Sidecar scope; run: x",
        );
        assert_eq!(without_subject(&f), "has no Sidecar scope; run: x");
        let f = finding(
            "MS0007",
            "Sidecar",
            "shop",
            "s",
            "Sidecar shop/s: bad host; istiod skips it",
        );
        assert_eq!(without_subject(&f), "bad host; istiod skips it");
        let f = finding(
            "MS0005",
            "Sidecar",
            "shop",
            "s",
            "namespace shop has 2 Sidecars",
        );
        assert_eq!(without_subject(&f), "namespace shop has 2 Sidecars");
        let f = finding(
            "MS0001",
            "Deployment",
            "shop",
            "web",
            "Deployment shop/web2 x",
        );
        assert_eq!(without_subject(&f), "Deployment shop/web2 x");
    }
}
