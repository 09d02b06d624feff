//! `kubectl meshscope verify`: asks the istiod each proxy is connected to
//! for the SidecarScope it applied and the clusters it sends, and compares
//! them with what `explain` predicts; with a traffic source, checks every
//! observed edge against istiod's clusters.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use meshscope_shared::explain;
use meshscope_shared::observe::WorkloadTraffic;
use meshscope_shared::snapshot::PodId;
use meshscope_shared::verify::{self, ProxyCheck, Reported, Status, SyncStatus};

use crate::args::ReportOutput;
use crate::istiod::{Discovery, Istiod};
use crate::outcome::Outcome;
use crate::output::{self, bytes, plural, Printer, Table};
use crate::request::{IstiodRequest, VerifyRequest};
use crate::world::World;

pub fn run(r: &VerifyRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    // Predictions need every namespace's pods and services, as explain
    // does: the request reads them all.
    let world = World::load(&r.mesh, p.err)?;
    world.report_ingest(p)?;
    let ctx = world.live.as_ref().expect("live mode has a connection");
    let ns = if r.all_namespaces {
        None
    } else {
        Some(
            r.namespace
                .clone()
                .unwrap_or_else(|| ctx.live.default_namespace.clone()),
        )
    };
    if let Some(n) = ns
        .as_deref()
        .filter(|n| !world.snap.namespaces.contains_key(*n))
    {
        bail!(
            "namespace {n:?} not found in the cluster at {}",
            ctx.live.server
        );
    }
    let pods = select_pods(&world, r.target.as_deref(), ns.as_deref())?;
    if pods.is_empty() {
        writeln!(
            p.err,
            "no injected or gateway pods to verify{}",
            ns.as_deref()
                .map(|n| format!(" in namespace {n}"))
                .unwrap_or_default()
        )?;
        return Ok(Outcome::Ok);
    }
    let mut istiods = ctx
        .rt
        .block_on(connect_istiods(&world, &r.istiod, r.timeout_secs))?;
    let traffic = traffic_by_workload(&world);
    let checks = ctx
        .rt
        .block_on(check_pods(&world, &traffic, &pods, &mut istiods, p.err))?;
    warn_version_skew(&world, &checks, p.err)?;
    report(&checks, r.output, p)
}

/// Says once when the proxies run another Istio minor version than the
/// one whose semantics the predictions use.
pub fn warn_version_skew(world: &World, checks: &[ProxyCheck], err: &mut dyn Write) -> Result<()> {
    let used = world.snap.options.istio;
    let mut seen: Vec<String> = checks
        .iter()
        .filter_map(|c| c.proxy_version.as_deref())
        .filter_map(|v| v.parse::<meshscope_shared::IstioVersion>().ok())
        .filter(|v| *v != used)
        .map(|v| v.to_string())
        .collect();
    seen.sort();
    seen.dedup();
    if let Some(w) = meshscope_shared::notes::version_skew(&seen, used) {
        writeln!(err, "warning: {w}")?;
    }
    Ok(())
}

/// Whether verify can check pod `p`: a sidecar, a gateway's router proxy
/// (istiod gives it its namespace's default scope, and its outbound
/// clusters are compared as a sidecar's are), or a waypoint (its
/// `inbound-vip` and outbound clusters: [`meshscope_shared::waypoint`]).
fn checkable(world: &World, p: PodId) -> bool {
    let inj = &world.snap.pods[p].injection;
    inj.sidecar || inj.gateway.is_some()
}

/// Pods to check: injected (or gateways), in `ns` (all when `None`),
/// matching `-l`, and the target's when one is given.
fn select_pods(world: &World, target: Option<&str>, ns: Option<&str>) -> Result<Vec<PodId>> {
    let snap = &world.snap;
    let in_ns = |p: PodId| ns.is_none_or(|n| snap.pods[p].namespace == n);
    let pods: Vec<PodId> = match target {
        None => (0..snap.pods.len())
            .filter(|p| in_ns(*p) && world.in_scope(snap.pods[*p].workload))
            .filter(|p| checkable(world, *p))
            .collect(),
        Some(t) => {
            let (kind, name) = t.split_once('/').ok_or_else(|| {
                anyhow!("expected pod/NAME or KIND/NAME (e.g. deployment/reviews-v1), got {t:?}")
            })?;
            let hits: Vec<PodId> =
                if matches!(kind.to_ascii_lowercase().as_str(), "pod" | "pods" | "po") {
                    let hits: Vec<PodId> = snap
                        .pods_named(name)
                        .iter()
                        .copied()
                        .filter(|p| in_ns(*p))
                        .collect();
                    if hits.is_empty() {
                        bail!(
                            "pod {name:?} not found{}",
                            ns.map(|n| format!(" in namespace {n}")).unwrap_or_default()
                        );
                    }
                    hits
                } else {
                    let w = world.find_workload(t, ns)?;
                    (0..snap.pods.len())
                        .filter(|p| snap.pods[*p].workload == w)
                        .collect()
                };
            if let Some(p) = hits.iter().find(|p| !checkable(world, **p)) {
                let pod = &snap.pods[*p];
                bail!(
                    "pod {}/{} has no Envoy sidecar ({}), so istiod has no scope for it",
                    pod.namespace,
                    pod.name,
                    pod.injection.reason
                );
            }
            hits
        }
    };
    Ok(pods)
}

/// Finds istiod (or takes `--istiod-url`).
pub async fn connect_istiods(
    world: &World,
    flags: &IstiodRequest,
    timeout_secs: u64,
) -> Result<Vec<Istiod>> {
    let ctx = world.live.as_ref().expect("live mode has a connection");
    let live = &ctx.live;
    let d = Discovery {
        urls: &flags.urls,
        namespace: &flags.namespace,
        revision: flags.revision.as_deref(),
        timeout: Duration::from_secs(timeout_secs.max(1)),
    };
    // The permissions this needs were checked with the others, in one
    // pass, when the world was read (`Purpose::Verify` / `Purpose::Apply`).
    d.find(live).await
}

/// The observed traffic of each workload, by `kind/ns/name`, so that a
/// snapshot read later can find it.
pub fn traffic_by_workload(world: &World) -> HashMap<String, WorkloadTraffic> {
    let Some(obs) = &world.obs else {
        return HashMap::new();
    };
    obs.traffic
        .iter()
        .map(|(w, t)| (world.snap.workloads[*w].key(), t.clone()))
        .collect()
}

/// Every istiod's `/debug/syncz`: which replica each proxy is connected
/// to, and its nonces. An istiod that cannot be read is named on stderr;
/// its proxies then show as not connected.
pub async fn sync_status(
    istiods: &mut [Istiod],
    err: &mut dyn Write,
) -> Result<HashMap<String, (usize, SyncStatus)>> {
    let mut by_proxy = HashMap::new();
    let mut failures = Vec::new();
    for (i, istiod) in istiods.iter_mut().enumerate() {
        match istiod.get_ok("/debug/syncz").await {
            Ok(body) => {
                for s in verify::parse_syncz(&body)? {
                    by_proxy.entry(s.proxy.clone()).or_insert((i, s));
                }
            }
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    if failures.len() == istiods.len() {
        bail!("{}", failures.join("; "));
    }
    for f in failures {
        writeln!(err, "warning: {f}; its proxies show as NOT CONNECTED")?;
    }
    Ok(by_proxy)
}

/// A per-proxy debug endpoint: `None` when istiod answers 404 (the proxy
/// is not connected to it, or not anymore).
async fn per_proxy(istiod: &mut Istiod, path: &str) -> Result<Option<Vec<u8>>> {
    let (status, body) = istiod.get(path).await?;
    match status {
        200 => Ok(Some(body)),
        404 => Ok(None),
        _ => bail!(
            "istiod {} answered {status} for {}: {}",
            istiod.name,
            path.split('?').next().unwrap_or(path),
            String::from_utf8_lossy(&body).trim()
        ),
    }
}

/// What the istiod a proxy is connected to reports for it, or `None` when
/// it is not connected (anymore).
pub async fn reported(istiod: &mut Istiod, sync: &SyncStatus) -> Result<Option<Reported>> {
    let id = sync.proxy.as_str();
    let Some(body) = per_proxy(istiod, &format!("/debug/sidecarz?proxyID={id}")).await? else {
        return Ok(None);
    };
    let applied = verify::parse_sidecarz(&body)?;
    let path = format!("/debug/config_dump?proxyID={id}&types=cds,lds,rds");
    let Some(body) = per_proxy(istiod, &path).await? else {
        return Ok(None);
    };
    let generated = verify::parse_config_dump(&body)?;
    Ok(Some(Reported {
        istiod: istiod.name.clone(),
        sync: sync.clone(),
        applied,
        generated,
    }))
}

/// Checks `pods` of `world` (whose predictions are compared) against
/// istiod. `traffic` is keyed by workload key.
pub async fn check_pods(
    world: &World,
    traffic: &HashMap<String, WorkloadTraffic>,
    pods: &[PodId],
    istiods: &mut [Istiod],
    err: &mut dyn Write,
) -> Result<Vec<ProxyCheck>> {
    let snap = &world.snap;
    let by_proxy = sync_status(istiods, err).await?;
    let mut checks = Vec::with_capacity(pods.len());
    for &p in pods {
        let pod = &snap.pods[p];
        let e = explain::explain(snap, pod.workload, Some(p), None);
        let id = verify::proxy_id(&pod.name, &pod.namespace);
        let rep = match by_proxy.get(&id) {
            Some((i, sync)) => reported(&mut istiods[*i], sync).await?,
            None => None,
        };
        let t = traffic.get(&snap.workloads[pod.workload].key());
        checks.push(verify::check_proxy(snap, p, &e, rep.as_ref(), t));
    }
    Ok(checks)
}

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
