//! `kubectl meshscope verify`: asks the istiod each proxy is connected to
//! for the SidecarScope it applied and the clusters it sends, and compares
//! them with what `explain` predicts; with a traffic source, checks every
//! observed edge against istiod's clusters.

use anyhow::{anyhow, bail, Result};
use meshscope_shared::snapshot::PodId;

use crate::istiod::checks::{check_pods, connect_istiods, traffic_by_workload, warn_version_skew};
use crate::istiod::table::report;
use crate::outcome::Outcome;
use crate::output::Printer;
use crate::request::VerifyRequest;
use crate::world::World;

pub fn run(r: &VerifyRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    // Predictions need every namespace's pods and services, as explain
    // does: the request reads them all.
    let world = World::load(&r.mesh, p.err)?;
    world.report_ingest(p)?;
    let ctx = world.live_ctx()?;
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
        .block_on(connect_istiods(&ctx.live, &r.istiod, r.timeout_secs))?;
    let traffic = traffic_by_workload(&world.snap, world.obs.as_ref());
    let checks = ctx.rt.block_on(check_pods(
        &world.snap,
        &traffic,
        &pods,
        &mut istiods,
        p.err,
    ))?;
    warn_version_skew(&world.snap, &checks, p.err)?;
    report(&checks, r.output, p)
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
