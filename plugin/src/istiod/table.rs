//! The verify table: what `verify`, `apply --wait` and `apply --exports
//! --wait` print of their checks against istiod, and the exit code it
//! implies.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Result;
use meshscope_shared::verify::{self, ProxyCheck, Status};

use crate::args::ReportOutput;
use crate::outcome::Outcome;
use crate::output::{self, bytes, plural, Printer, Table};

/// Prints the checks and picks the exit code: 0 when every proxy is OK.
pub fn report(checks: &[ProxyCheck], output: ReportOutput, p: &mut Printer<'_>) -> Result<Outcome> {
    let summary = verify::summarize(checks);
    let out = &mut *p.out;
    match output {
        ReportOutput::Json => output::json(
            out,
            &serde_json::json!({"proxies": checks, "summary": summary}),
        )?,
        ReportOutput::Yaml => output::yaml(
            out,
            &serde_json::json!({"proxies": checks, "summary": summary}),
        )?,
        ReportOutput::Name => output::names(out, checks.iter().map(|c| ("Pod", c.pod.as_str())))?,
        ReportOutput::Table | ReportOutput::Wide => {
            let wide = output == ReportOutput::Wide;
            let mut head = vec![
                "NAMESPACE",
                "POD",
                "STATUS",
                "SIDECAR",
                "CLUSTERS (ISTIOD/PREDICTED)",
                "LISTENERS",
                "PREDICTED XDS (PROTOBUF)",
                "ISTIOD",
            ];
            if wide {
                head.extend(["ROUTES", "PROXY VERSION"]);
            }
            let mut t = Table::new(head);
            for c in checks {
                let counts = |f: fn(&verify::Counts) -> u64| match &c.istiod_counts {
                    Some(i) => format!("{}/{}", f(i), f(&c.predicted)),
                    None => format!("-/{}", f(&c.predicted)),
                };
                let sidecar = if !c.connected {
                    "-".to_string()
                } else {
                    c.applied_sidecar.clone().unwrap_or_else(|| "(none)".into())
                };
                let mut row = vec![
                    c.namespace.clone(),
                    c.pod.clone(),
                    c.label(),
                    sidecar,
                    counts(|x| x.clusters),
                    counts(|x| x.listeners),
                    bytes(c.predicted_bytes),
                    c.istiod.clone().unwrap_or_else(|| "-".into()),
                ];
                if wide {
                    row.push(counts(|x| x.routes));
                    row.push(c.proxy_version.clone().unwrap_or_else(|| "-".into()));
                }
                t.row(row);
            }
            t.write(out, !p.no_headers)?;
            details(checks, out)?;
        }
    }
    p.summary(format_args!(
        "{}: {} OK, {} differ, {} with missing edges ({}), {} stale, {} not connected",
        plural(summary.proxies, "proxy", "proxies"),
        summary.ok,
        summary.differs,
        summary.missing,
        plural(summary.missing_edges, "edge", "edges"),
        summary.stale,
        summary.not_connected
    ))?;
    if summary.clusters_istiod > 0 {
        p.summary(format_args!(
            "istiod sends the connected proxies {} clusters in all (the engine predicts {})",
            summary.clusters_istiod, summary.clusters_predicted
        ))?;
    }
    Ok(if summary.ok == summary.proxies {
        Outcome::Ok
    } else {
        Outcome::Findings
    })
}

/// What differs, per proxy that is not OK.
fn details(checks: &[ProxyCheck], out: &mut dyn Write) -> Result<()> {
    let mut first = true;
    for c in checks.iter().filter(|c| c.status != Status::Ok) {
        if first {
            writeln!(out)?;
            first = false;
        }
        writeln!(out, "{}/{}: {}", c.namespace, c.pod, c.label())?;
        if !c.connected {
            writeln!(
                out,
                "  no istiod lists the proxy in /debug/syncz: it is not connected (starting, or its istio-proxy is down)"
            )?;
            continue;
        }
        if !c.sidecar_matches {
            writeln!(
                out,
                "  Sidecar: istiod applied {}, meshscope predicts {}",
                c.applied_sidecar
                    .as_deref()
                    .unwrap_or("none (istiod's default scope)"),
                c.predicted_sidecar
                    .as_deref()
                    .unwrap_or("none (istiod's default scope)")
            )?;
        }
        for cl in &c.only_istiod {
            writeln!(out, "  + {cl} (istiod sends it; not predicted)")?;
        }
        for cl in &c.only_predicted {
            writeln!(out, "  - {cl} (predicted; istiod does not send it)")?;
        }
        if let Some(d) = &c.drift {
            writeln!(
                out,
                "  Sidecar {} was edited outside meshscope: meshscope wrote hosts {}, it now has {}",
                d.sidecar,
                d.written_hosts.join(", "),
                d.live_hosts.join(", ")
            )?;
            for cl in &d.only_istiod {
                writeln!(
                    out,
                    "  + {cl} (istiod sends it; meshscope did not write it)"
                )?;
            }
            for cl in &d.only_written {
                writeln!(
                    out,
                    "  - {cl} (meshscope wrote it; istiod does not send it)"
                )?;
            }
        }
        for d in &c.route_diffs {
            writeln!(out, "  {}", d.describe())?;
        }
        for m in &c.missing_routes {
            writeln!(
                out,
                "  missing: the route for {} ({}): istiod sends this proxy no virtual host routing it, so its requests skip the route",
                m.dialled,
                m.routes.join(", ")
            )?;
        }
        for m in &c.missing_edges {
            writeln!(
                out,
                "  missing: {}:{} ({} requests observed): istiod sends no {} to this proxy",
                m.host, m.port, m.requests, m.cluster
            )?;
        }
        if !c.pending.is_empty() {
            writeln!(out, "  not yet ACKed: {}", c.pending.join(", "))?;
        }
        let nacks: BTreeMap<_, _> = c.nacks.iter().collect();
        for (t, msg) in nacks {
            writeln!(out, "  NACK on {t}: {msg}")?;
        }
    }
    Ok(())
}
