//! `kubectl meshscope explain`: which Sidecar scope a pod has, why, and what it costs.

use std::io::Write;

use anyhow::{bail, Result};
use meshscope_shared as scope;
use scope::explain;

use crate::args::{self, ReportOutput};
use crate::output::{self, bytes};
use crate::{find_workload, Outcome, World};

pub fn cmd_explain(
    a: args::ExplainArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Outcome> {
    // One proxy's scope depends on pods everywhere (endpoints, headless
    // Services' per-pod listeners): read them all, then look the target
    // up in its namespace.
    let mut everywhere = a.common.clone();
    everywhere.all_namespaces = true;
    // Traffic only for the answer's namespace: its pods' logs.
    if !a.common.all_namespaces {
        everywhere.pod_logs = crate::args::PodLogScope::Namespace;
    }
    let world = World::load(&everywhere, err)?;
    let snap = &world.snap;
    let live_ns = world
        .live
        .as_ref()
        .map(|l| l.live.default_namespace.clone());
    let ns = a.common.namespace.as_deref().or(live_ns.as_deref());
    let (w, pod) = match a.what.to_ascii_lowercase().as_str() {
        "pod" | "pods" | "po" => {
            let hits: Vec<usize> = snap
                .pods_named(&a.name)
                .iter()
                .copied()
                .filter(|p| ns.is_none_or(|n| snap.pods[*p].namespace == n))
                .collect();
            match hits.as_slice() {
                [p] => (snap.pods[*p].workload, Some(*p)),
                [] => bail!(
                    "pod {:?} not found{}",
                    a.name,
                    ns.map(|n| format!(" in namespace {n}")).unwrap_or_default()
                ),
                _ => bail!("pod {:?} exists in several namespaces; pass -n", a.name),
            }
        }
        "workload" => (find_workload(snap, &a.name, ns)?, None),
        other => {
            // `explain deployment/x` works too.
            let spec = format!("{other}/{}", a.name);
            (find_workload(snap, &spec, ns)?, None)
        }
    };
    let e = explain::explain(snap, w, pod, world.obs.as_ref());
    match a.output {
        ReportOutput::Json => output::json(out, &e)?,
        ReportOutput::Yaml => output::yaml(out, &e)?,
        ReportOutput::Name => {
            // The object explained: the pod, or the workload.
            let wl = &snap.workloads[w];
            let line = match &e.pod {
                Some(p) => output::object_name("Pod", p),
                None => output::object_name(wl.kind.as_str(), &wl.name),
            };
            writeln!(out, "{line}")?;
        }
        ReportOutput::Table | ReportOutput::Wide => {
            let wide = a.output == ReportOutput::Wide;
            if let Some(p) = &e.pod {
                writeln!(out, "Pod:              {}/{}", e.namespace, p)?;
            }
            writeln!(
                out,
                "Workload:         {} (namespace {})",
                e.workload, e.namespace
            )?;
            writeln!(
                out,
                "Injection:        {} ({})",
                if e.injected {
                    "sidecar"
                } else if e.ambient {
                    "ambient (no sidecar; Sidecar resources do not apply)"
                } else {
                    "none (no sidecar)"
                },
                e.injection_reason
            )?;
            if !e.injected {
                // No Envoy: no scope, no xDS, no pushes to explain.
                writeln!(
                    out,
                    "Proxy:            none, so no Sidecar scope, xDS size or pushes apply"
                )?;
                return Ok(Outcome::Ok);
            }
            writeln!(out, "Scope:            {}", e.scope_reason)?;
            if !e.sidecars.is_empty() {
                writeln!(out, "Sidecars considered:")?;
                let mut hidden = 0;
                for n in &e.sidecars {
                    if !wide && !n.used && !n.selects {
                        hidden += 1;
                        continue;
                    }
                    writeln!(
                        out,
                        "  {} {}: {}",
                        if n.used { "*" } else { "-" },
                        n.sidecar,
                        n.reason
                    )?;
                }
                if hidden > 0 {
                    writeln!(
                        out,
                        "  ({hidden} other Sidecars in the namespace do not select the pod; -o wide lists them)"
                    )?;
                }
            }
            writeln!(out, "Egress hosts:     {}", e.egress_hosts.join(", "))?;
            if !e.required.is_empty() {
                writeln!(
                    out,
                    "Required by mesh config (Envoy calls them itself; no traffic shows them):"
                )?;
                for r in &e.required {
                    let port = r.port.map(|p| format!(":{p}")).unwrap_or_default();
                    writeln!(
                        out,
                        "  {:<14} {}{port} as {} ({}){}",
                        r.status,
                        r.service,
                        r.host,
                        r.why.join("; "),
                        r.problem
                            .as_deref()
                            .map(|p| format!(": {p}"))
                            .unwrap_or_default()
                    )?;
                }
            }
            writeln!(
                out,
                "Visible services: {}{}",
                e.visible_service_count,
                if wide { "" } else { " (-o wide lists them)" }
            )?;
            if wide {
                for s in &e.visible_services {
                    writeln!(out, "  {s}")?;
                }
            }
            writeln!(
                out,
                "Estimated xDS:    {} clusters, {} listeners, {} routes, {} (unscoped: {} clusters, {}); protobuf bytes as istiod sends them",
                e.estimate.clusters,
                e.estimate.listeners,
                e.estimate.routes,
                bytes(e.estimate.bytes),
                e.unscoped_estimate.clusters,
                bytes(e.unscoped_estimate.bytes)
            )?;
            if wide {
                writeln!(
                    out,
                    "  by type: CDS {}, EDS {}, LDS {}, RDS {}",
                    bytes(e.estimate.bytes_cds),
                    bytes(e.estimate.bytes_eds),
                    bytes(e.estimate.bytes_lds),
                    bytes(e.estimate.bytes_rds)
                )?;
            }
            writeln!(
                out,
                "Pushed on changes to: {} imported services{}{}{}",
                e.pushed_by.services,
                e.pushed_by
                    .sidecar
                    .as_deref()
                    .map(|s| format!(", Sidecar {s}"))
                    .unwrap_or_default(),
                if e.pushed_by.virtual_services.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", VirtualServices {}",
                        e.pushed_by.virtual_services.join(", ")
                    )
                },
                if e.pushed_by.destination_rules.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", DestinationRules {}",
                        e.pushed_by.destination_rules.join(", ")
                    )
                }
            )?;
            if !e.duplicated_hosts.is_empty() {
                writeln!(
                    out,
                    "Defined in several namespaces (a proxy gets one copy of a hostname):"
                )?;
                for d in &e.duplicated_hosts {
                    writeln!(
                        out,
                        "  {}: gets {}'s ({}); also in {}",
                        d.hostname,
                        d.gets,
                        d.gets_ports,
                        d.others.join(", ")
                    )?;
                }
            }
            writeln!(
                out,
                "Outside the scope: outbound policy {}, DNS capture {}",
                e.fallthrough.policy.describe(),
                if e.fallthrough.dns_capture {
                    "on"
                } else {
                    "off"
                }
            )?;
            if let Some(obs) = &e.observed {
                writeln!(out, "Observed destinations (what each meets):")?;
                if obs.is_empty() {
                    writeln!(out, "  (none)")?;
                }
                for o in obs {
                    writeln!(
                        out,
                        "  {:<22} {} ({} requests)",
                        o.meets.as_str(),
                        o.destination,
                        o.requests
                    )?;
                }
                for m in meshscope_shared::edges::outside_outcomes(obs.iter().map(|o| o.meets)) {
                    writeln!(out, "  {}: {}", m.as_str(), m.consequence())?;
                }
            }
        }
    }
    Ok(Outcome::Ok)
}
