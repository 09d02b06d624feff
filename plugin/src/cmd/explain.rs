//! `kubectl meshscope explain`: which Sidecar scope a pod has, why, and what it costs.

use std::io::Write;

use anyhow::{bail, Result};
use meshscope_shared as scope;
use scope::explain::{self, Explanation};
use scope::snapshot::{PodId, WorkloadId};

use crate::args::ReportOutput;
use crate::outcome::Outcome;
use crate::output::{self, bytes, plural, Printer};
use crate::request::{ExplainRequest, Explained};
use crate::world::World;

pub fn run(r: &ExplainRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    // One proxy's scope depends on pods everywhere (endpoints, headless
    // Services' per-pod listeners): the request reads them all; the
    // target is looked up in its namespace.
    let world = World::load(&r.mesh, p.err)?;
    world.warn_missing_kinds("explain", None, p.err)?;
    let (w, pod) = resolve(&world, r)?;
    let e = explain::explain(&world.snap, w, pod, world.obs.as_ref());
    let out = &mut *p.out;
    match r.output {
        ReportOutput::Json => output::json(out, &e)?,
        ReportOutput::Yaml => output::yaml(out, &e)?,
        ReportOutput::Name => {
            // The object explained: the pod, or the workload.
            let wl = &world.snap.workloads[w];
            let line = match &e.pod {
                Some(p) => output::object_name("Pod", p),
                None => output::object_name(wl.kind.as_str(), &wl.name),
            };
            writeln!(out, "{line}")?;
        }
        ReportOutput::Table | ReportOutput::Wide => {
            let wide = r.output == ReportOutput::Wide;
            if identity(&e, out)? {
                scope_part(&e, wide, out)?;
                cost(&e, wide, out)?;
                gateway_filter(&e, wide, out)?;
                rest(&e, out)?;
            }
        }
    }
    Ok(Outcome::Ok)
}

/// The workload (and pod) the request names.
fn resolve(world: &World, r: &ExplainRequest) -> Result<(WorkloadId, Option<PodId>)> {
    let snap = &world.snap;
    let live_ns = world.default_namespace();
    let ns = match r.all_namespaces {
        true => None,
        false => r.namespace.as_deref().or(live_ns.as_deref()),
    };
    // A typo in -n is the namespace's fault, not the pod's.
    if let Some(n) = ns.filter(|n| !snap.namespaces.contains_key(*n)) {
        bail!("namespace {n:?} not found{}", world.source());
    }
    Ok(match &r.target {
        Explained::Pod(name) => {
            let hits: Vec<usize> = snap
                .pods_named(name)
                .iter()
                .copied()
                .filter(|p| ns.is_none_or(|n| snap.pods[*p].namespace == n))
                .collect();
            match hits.as_slice() {
                [p] => (snap.pods[*p].workload, Some(*p)),
                [] => bail!(
                    "pod {:?} not found{}",
                    name,
                    ns.map(|n| format!(" in namespace {n}")).unwrap_or_default()
                ),
                many => bail!(
                    "pod {:?} exists in several namespaces ({}); pass -n",
                    name,
                    many.iter()
                        .map(|p| snap.pods[*p].namespace.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
        Explained::Workload(spec) => (world.find_workload(spec, ns)?, None),
        Explained::Gateway(name) => {
            let p = gateway_pod(world, name, ns)?;
            (snap.pods[p].workload, Some(p))
        }
    })
}

/// The first pod (by namespace and name) serving the Gateway `name` in
/// `ns` (any namespace when `None`): its pods share its config.
fn gateway_pod(world: &World, name: &str, ns: Option<&str>) -> Result<PodId> {
    let snap = &world.snap;
    let hits: Vec<&scope::snapshot::GatewayInfo> = snap
        .gateways
        .iter()
        .filter(|g| g.name == name && ns.is_none_or(|n| g.namespace == n))
        .collect();
    let g = match hits.as_slice() {
        [g] => *g,
        [] => bail!(
            "gateway {name:?} not found{} (Istio Gateways are read only where RBAC allows listing gateways.networking.istio.io)",
            ns.map(|n| format!(" in namespace {n}")).unwrap_or_default()
        ),
        many => bail!(
            "{} gateways are named {name:?} ({}); pass -n",
            many.len(),
            many.iter()
                .map(|g| format!("{} {}", if g.kube { "Gateway API" } else { "Istio" }, g.key()))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    if let Some(c) = &g.foreign {
        bail!(
            "gateway {} belongs to controller {c}, not istiod: no proxy of the mesh serves it",
            g.key()
        );
    }
    match scope::gateway_clusters::pods_serving(snap, g).first() {
        Some(p) => Ok(*p),
        None => bail!(
            "gateway {} has no pod running a router proxy (an istio-proxy container running `proxy router`) that serves it{}",
            g.key(),
            if g.kube { ", labelled gateway.networking.k8s.io/gateway-name with its name in its namespace" } else { ", matching its selector" }
        ),
    }
}

/// Pod, workload and injection; `false` when there is no proxy, so
/// nothing more to say.
fn identity(e: &Explanation, out: &mut dyn Write) -> Result<bool> {
    if let Some(p) = &e.pod {
        writeln!(out, "Pod:              {}/{}", e.namespace, p)?;
    }
    writeln!(
        out,
        "Workload:         {} (namespace {})",
        e.workload, e.namespace
    )?;
    let gateway = e
        .gateway
        .map(|g| format!("{} proxy, not a sidecar", g.as_str()));
    writeln!(
        out,
        "Injection:        {} ({})",
        if e.injected {
            "sidecar"
        } else if let Some(g) = &gateway {
            g
        } else if e.ambient {
            "ambient (no sidecar; Sidecar resources do not apply)"
        } else if e.proxy_missing {
            "none (no sidecar, though injection applies: MS0015)"
        } else {
            "none (no sidecar)"
        },
        e.injection_reason
    )?;
    if !e.injected && gateway.is_none() {
        // No Envoy: no scope, no xDS, no pushes to explain.
        writeln!(
            out,
            "Proxy:            none, so no Sidecar scope, xDS size or pushes apply"
        )?;
        return Ok(false);
    }
    Ok(true)
}

/// The scope, the Sidecars considered, and the hosts.
fn scope_part(e: &Explanation, wide: bool, out: &mut dyn Write) -> Result<()> {
    writeln!(out, "Scope:            {}", e.scope_reason)?;
    if let Some(shared) = &e.outbound_clusters_if_shared {
        writeln!(
            out,
            "                  (istiod may give it its namespace's sidecar default scope instead, by the order of a push: {} outbound clusters then, not {})",
            shared.len(),
            e.outbound_clusters.len()
        )?;
    }
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
    if !e.routes.is_empty() {
        // A gateway's pod gets its Istio Gateways' VirtualServices too.
        let header = match e
            .routes
            .iter()
            .any(|r| r.route.starts_with("VirtualService "))
        {
            true => "Gateway routes:",
            false => "Gateway API routes:",
        };
        writeln!(out, "{header}")?;
        for r in &e.routes {
            match &r.reason {
                None if !r.listeners.is_empty() => writeln!(
                    out,
                    "  {} {} (on {}) -> {}",
                    r.route,
                    r.host,
                    r.listeners.join(", "),
                    r.clusters.join(", ")
                )?,
                None => writeln!(out, "  {} {} -> {}", r.route, r.host, r.clusters.join(", "))?,
                Some(why) => writeln!(out, "  {} {}: not applied, {why}", r.route, r.host)?,
            }
        }
    }
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
    Ok(())
}

/// The estimated xDS and what pushes to the proxy.
/// A gateway's clusters with istiod's `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG`
/// on, and the Services that stay (each, with why, under `-o wide`).
fn gateway_filter(e: &Explanation, wide: bool, out: &mut dyn Write) -> Result<()> {
    let Some(f) = &e.gateway_filter else {
        return Ok(());
    };
    writeln!(
        out,
        "With {}=true: {}, {} (now {}); {} kept, {} dropped",
        scope::gateway_clusters::FILTER_FLAG,
        plural(f.estimate.clusters as usize, "cluster", "clusters"),
        bytes(f.estimate.bytes),
        bytes(e.estimate.bytes),
        plural(f.kept.len(), "service", "services"),
        f.dropped_services
    )?;
    writeln!(
        out,
        "  serves:         {}",
        match f.gateways.is_empty() {
            true => "no Gateway (istiod routes nothing through it)".to_string(),
            false => f.gateways.join(", "),
        }
    )?;
    if !e.sni_dnat_clusters.is_empty() {
        writeln!(
            out,
            "  SNI-DNAT:       {} (an east-west gateway passes TLS through to every Service it sees, the flag on or off: only exportTo narrows them)",
            plural(e.sni_dnat_clusters.len(), "cluster", "clusters")
        )?;
    }
    if wide {
        for k in &f.kept {
            let why: Vec<String> = k
                .kept_by
                .iter()
                .map(|w| format!("{} {}", w.kind, w.by))
                .collect();
            writeln!(out, "  keeps {}: {}", k.service, why.join("; "))?;
        }
    }
    Ok(())
}

fn cost(e: &Explanation, wide: bool, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "Estimated xDS:    {}, {}, {}, {} (unscoped: {}, {}); protobuf bytes as istiod sends them",
        plural(e.estimate.clusters as usize, "cluster", "clusters"),
        plural(e.estimate.listeners as usize, "listener", "listeners"),
        plural(e.estimate.routes as usize, "route", "routes"),
        bytes(e.estimate.bytes),
        plural(e.unscoped_estimate.clusters as usize, "cluster", "clusters"),
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
        "Pushed on changes to: {}{}{}{}{}",
        plural(
            e.pushed_by.services,
            "imported service",
            "imported services"
        ),
        if e.pushed_by.serving.is_empty() {
            String::new()
        } else {
            format!(
                ", the services it serves ({})",
                e.pushed_by.serving.join(", ")
            )
        },
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
    Ok(())
}

/// Duplicated hosts, what lies outside the scope, and the observed edges.
fn rest(e: &Explanation, out: &mut dyn Write) -> Result<()> {
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
        "Outside the scope: outbound policy {}, catch-all cluster {}, DNS capture {}",
        e.fallthrough.policy.describe(),
        e.fallthrough.catch_all_cluster,
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
                "  {:<22} {} ({})",
                o.meets.as_str(),
                o.destination,
                plural(o.requests as usize, "request", "requests")
            )?;
        }
        for m in meshscope_shared::edges::outside_outcomes(obs.iter().map(|o| o.meets)) {
            writeln!(out, "  {}: {}", m.as_str(), m.consequence())?;
        }
    }
    Ok(())
}
