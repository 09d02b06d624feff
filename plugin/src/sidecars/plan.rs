//! Before a write: what each recommended Sidecar's name holds now, and
//! which of them can be written (not another owner's, not unchanged).

use futures::StreamExt;
use meshscope_shared::istio::Sidecar;
use meshscope_shared::recommend::Recommendation;
use meshscope_shared::scope::ScopeSource;
use meshscope_shared::snapshot::{MeshSnapshot, PodId, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use meshscope_shared::verify as verify_shared;
use serde_json::Value;

use super::cluster::Cluster;
use super::result::{managed, ApplyResult, SidecarRow};
use meshscope_shared::meta::SidecarRef;

/// One Sidecar to write, and what is known about it before writing.
pub struct Planned {
    pub sidecar: SidecarRef,
    pub desired: Value,
    pub desired_sc: Sidecar,
    pub existing: Option<Value>,
    /// Written first when `desired` drops hosts and `--wait` confirms each
    /// step: the old hosts and the new ones.
    pub widened: Option<Sidecar>,
    /// Injected pods whose scope this Sidecar decides.
    pub pods: Vec<PodId>,
}

/// Sidecars read or written at once: enough to hide the round trips, few
/// enough that the API server's in-flight limits (400 reads, 200 writes by
/// default) never see us as a flood.
pub const IN_FLIGHT: usize = 16;

/// The injected pods whose scope a recommendation's Sidecar decides: its
/// workloads' pods, except (for a namespace-wide Sidecar) those that a
/// workload-selecting Sidecar scopes. Only the workloads' own pods are
/// looked at, not every pod for each recommendation.
fn affected_pods(snap: &MeshSnapshot, r: &Recommendation, sc: &Sidecar) -> Vec<PodId> {
    let mut pods: Vec<PodId> = r
        .workloads
        .iter()
        .flat_map(|w| snap.workloads[*w].pods.iter().copied())
        .filter(|p| {
            let pod = &snap.pods[*p];
            pod.injection.sidecar
                && pod.namespace == r.namespace
                && (sc.spec.workload_selector.is_some()
                    || match snap.select_sidecar(&pod.namespace, &pod.labels).source {
                        ScopeSource::Workload(id) => {
                            Some(snap.sidecars[id].name.as_str()) == sc.metadata.name.as_deref()
                        }
                        _ => true,
                    })
        })
        .collect();
    pods.sort_unstable();
    pods.dedup();
    pods
}

/// What each recommended name holds now, read [`IN_FLIGHT`] at a time:
/// the Sidecars to write, and rows for those that cannot be. With
/// `waiting`, a Sidecar that drops hosts is widened first.
pub fn read_plan(
    c: &Cluster<'_>,
    recs: &[Recommendation],
    waiting: bool,
    results: &mut Vec<SidecarRow>,
) -> anyhow::Result<Vec<Planned>> {
    let live = &c.ctx.live;
    let mut plan: Vec<Planned> = Vec::new();
    let gets = c.ctx.rt.block_on(
        futures::stream::iter(recs.iter().filter_map(|r| r.sidecar().map(|sc| (r, sc))))
            .map(|(r, sc)| async move {
                let name = sc.metadata.name.clone().unwrap_or_default();
                let got = live.sidecar(&r.namespace, &name).await;
                (r, sc, SidecarRef::new(&r.namespace, name), got)
            })
            .buffered(IN_FLIGHT)
            .collect::<Vec<_>>(),
    );
    for (r, sc, sidecar, got) in gets {
        let desired = serde_json::to_value(sc)?;
        let existing = match got {
            Ok(o) => o.map(|o| serde_json::to_value(o).unwrap_or_default()),
            Err(f) => {
                results.push(SidecarRow::new(ApplyResult::Failed, sidecar, f.to_string()));
                continue;
            }
        };
        if let Some(ex) = &existing {
            if !managed(ex) {
                results.push(SidecarRow::new(
                    ApplyResult::Skipped,
                    sidecar,
                    format!("a Sidecar with this name exists and is not labelled {MANAGED_BY_LABEL}={MANAGED_BY_VALUE}; it belongs to its owner"),
                ));
                continue;
            }
            // The same scope, only newer evidence: writing it would push
            // to every proxy it selects for nothing.
            if r.unchanged() {
                results.push(SidecarRow::new(ApplyResult::Unchanged, sidecar, ""));
                continue;
            }
        }
        let widened = match (&existing, waiting) {
            (Some(ex), true) => serde_json::from_value::<Sidecar>(ex.clone())
                .ok()
                .and_then(|old| verify_shared::widened(&old, sc)),
            _ => None,
        };
        plan.push(Planned {
            pods: affected_pods(c.snap, r, sc),
            sidecar,
            desired,
            desired_sc: sc.clone(),
            existing,
            widened,
        });
    }
    Ok(plan)
}
