//! `--prune`: the managed Sidecars whose workload no longer exists (the
//! one listing `apply`, `apply --watch` and `diff` share), and deleting
//! them. Whether a workload is gone is `shared`'s decision
//! ([`meshscope_shared::recommend::orphaned`]).

use kube::api::{DeleteParams, DynamicObject};
use meshscope_shared::meta::SidecarRef;
use meshscope_shared::recommend::orphaned;
use meshscope_shared::snapshot::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

use super::cluster::Cluster;
use super::result::{ApplyResult, SidecarRow};
use crate::args::DryRun;
use crate::live::ApiFailure;

/// The managed Sidecars whose workload no longer exists, per namespace
/// read (`None`: all of them); a namespace whose list failed carries the
/// failure.
pub type Orphans = Vec<(Option<String>, Result<Vec<DynamicObject>, ApiFailure>)>;

pub fn orphans(c: &Cluster<'_>) -> Orphans {
    let ctx = c.ctx;
    let selector = format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}");
    let namespaces: Vec<Option<String>> = match c.namespaces {
        None => vec![None],
        Some(set) => set.iter().cloned().map(Some).collect(),
    };
    namespaces
        .into_iter()
        .map(|ns| {
            let list = ctx
                .rt
                .block_on(ctx.live.sidecars(ns.as_deref(), &selector))
                .map(|list| {
                    list.into_iter()
                        .filter(|sc| {
                            let sns = sc.metadata.namespace.as_deref().unwrap_or_default();
                            orphaned(c.snap, sns, &sc.metadata)
                        })
                        .collect()
                });
            (ns, list)
        })
        .collect()
}

/// Deletes managed Sidecars whose workload no longer exists, and only
/// those: a row per Sidecar deleted (or, in a client dry run, that would
/// be) and per failure.
pub fn prune(c: &Cluster<'_>, dry_run: DryRun, results: &mut Vec<SidecarRow>) {
    let ctx = c.ctx;
    let dp = DeleteParams {
        dry_run: dry_run == DryRun::Server,
        ..DeleteParams::default()
    };
    for (ns, list) in orphans(c) {
        let list = match list {
            Ok(l) => l,
            Err(f) => {
                let sidecar = SidecarRef::new(ns.unwrap_or_default(), "(prune)");
                results.push(SidecarRow::new(ApplyResult::Failed, sidecar, f.to_string()));
                continue;
            }
        };
        for sc in list {
            let sidecar = SidecarRef::new(
                sc.metadata.namespace.clone().unwrap_or_default(),
                sc.metadata.name.clone().unwrap_or_default(),
            );
            if dry_run == DryRun::Client {
                results.push(SidecarRow::new(ApplyResult::Pruned, sidecar, ""));
                continue;
            }
            let deleted = ctx.rt.block_on(ctx.live.delete_sidecar(
                &sidecar.namespace,
                &sidecar.name,
                &dp,
            ));
            results.push(match deleted {
                Ok(()) => SidecarRow::new(ApplyResult::Pruned, sidecar, ""),
                Err(f) => SidecarRow::new(ApplyResult::Failed, sidecar, f.to_string()),
            });
        }
    }
}
