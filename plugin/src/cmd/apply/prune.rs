//! `--prune`: the managed Sidecars whose workload no longer exists (the
//! one listing `apply`, `apply --watch` and `diff` share), and deleting
//! them. Whether a workload is gone is `shared`'s decision
//! ([`meshscope_shared::recommend::orphaned`]).

use anyhow::Result;
use kube::api::{DeleteParams, DynamicObject};
use meshscope_shared::recommend::orphaned;
use meshscope_shared::snapshot::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

use super::result::{ApplyResult, Row};
use crate::args::DryRun;
use crate::live::ApiFailure;
use crate::request::ApplyRequest;
use crate::world::World;

/// The managed Sidecars whose workload no longer exists, per namespace
/// read (`None`: all of them); a namespace whose list failed carries the
/// failure.
pub(crate) type Orphans = Vec<(Option<String>, Result<Vec<DynamicObject>, ApiFailure>)>;

pub(crate) fn orphans(world: &World) -> Orphans {
    let ctx = world.live.as_ref().expect("live mode has a connection");
    let selector = format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}");
    let namespaces: Vec<Option<String>> = match &world.namespaces {
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
                            orphaned(&world.snap, sns, &sc.metadata)
                        })
                        .collect()
                });
            (ns, list)
        })
        .collect()
}

/// Deletes managed Sidecars whose workload no longer exists, and only those.
pub(crate) fn prune(world: &World, a: &ApplyRequest, results: &mut Vec<Row>) -> Result<()> {
    let ctx = world.live.as_ref().expect("live mode has a connection");
    let dp = DeleteParams {
        dry_run: a.dry_run == DryRun::Server,
        ..DeleteParams::default()
    };
    for (ns, list) in orphans(world) {
        let list = match list {
            Ok(l) => l,
            Err(f) => {
                results.push((
                    ApplyResult::Failed,
                    ns.unwrap_or_default(),
                    "(prune)".into(),
                    f.to_string(),
                ));
                continue;
            }
        };
        for sc in list {
            let sns = sc.metadata.namespace.clone().unwrap_or_default();
            let name = sc.metadata.name.clone().unwrap_or_default();
            if a.dry_run == DryRun::Client {
                results.push((ApplyResult::Pruned, sns, name, String::new()));
                continue;
            }
            match ctx.rt.block_on(ctx.live.delete_sidecar(&sns, &name, &dp)) {
                Ok(()) => results.push((ApplyResult::Pruned, sns, name, String::new())),
                Err(f) => results.push((ApplyResult::Failed, sns, name, f.to_string())),
            }
        }
    }
    Ok(())
}
