//! `kubectl meshscope apply`: server-side apply of the recommended Sidecars,
//! field manager `kubectl-meshscope`. It never takes over a Sidecar it does
//! not own, reports per object, and a failure in one object does not stop
//! the others.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{bail, Result};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use meshscope_shared::recommend::{WORKLOAD_KIND_LABEL, WORKLOAD_NAME_LABEL};
use meshscope_shared::snapshot::{WorkloadKind, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use serde_json::Value;

use crate::args::{ApplyArgs, DryRun};
use crate::live::{istio, ApiFailure};
use crate::{recommend_world, summarize_recommendations, Outcome};

pub const FIELD_MANAGER: &str = "kubectl-meshscope";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ApplyResult {
    Created,
    Configured,
    Unchanged,
    Skipped,
    Pruned,
    Failed,
}

impl ApplyResult {
    fn word(self) -> &'static str {
        match self {
            ApplyResult::Created => "created",
            ApplyResult::Configured => "configured",
            ApplyResult::Unchanged => "unchanged",
            ApplyResult::Skipped => "skipped",
            ApplyResult::Pruned => "pruned",
            ApplyResult::Failed => "failed",
        }
    }
}

/// The parts of a Sidecar that apply decides: spec, and our labels and
/// annotations. Used to tell "unchanged" from "configured".
fn comparable(v: &Value, keys_from: &Value) -> Value {
    let pick = |field: &str| -> Value {
        let wanted = keys_from
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object);
        let have = v
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object);
        let mut out = serde_json::Map::new();
        if let Some(w) = wanted {
            for k in w.keys() {
                if let Some(val) = have.and_then(|h| h.get(k)) {
                    out.insert(k.clone(), val.clone());
                }
            }
        }
        Value::Object(out)
    };
    serde_json::json!({
        "labels": pick("labels"),
        "annotations": pick("annotations"),
        "spec": v.get("spec").cloned().unwrap_or(Value::Null),
    })
}

/// A readable view of a Sidecar for diffs: no managed fields or status.
fn diffable(v: Option<&Value>) -> String {
    let Some(v) = v else { return String::new() };
    let mut v = v.clone();
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "managedFields",
            "resourceVersion",
            "uid",
            "generation",
            "creationTimestamp",
        ] {
            meta.remove(k);
        }
    }
    if let Some(m) = v.as_object_mut() {
        m.remove("status");
    }
    serde_yaml::to_string(&v).unwrap_or_default()
}

fn unified(old: &str, new: &str, name: &str, out: &mut dyn Write) -> std::io::Result<()> {
    let diff = similar::TextDiff::from_lines(old, new);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("live/{name}"), &format!("meshscope/{name}"))
        .to_string();
    out.write_all(text.as_bytes())
}

pub fn cmd_apply(a: ApplyArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<Outcome> {
    if !a.common.manifests.is_empty() {
        bail!("apply changes a cluster: drop --manifests (use `recommend --manifests ... | kubectl apply -f -` for files)");
    }
    let (world, recs) = recommend_world(&a.common, &a.rec, a.prune_hosts, err)?;
    summarize_recommendations(&world, &recs, err)?;
    let ctx = world.live.as_ref().expect("live mode has a connection");
    let live = &ctx.live;
    let ar = istio("Sidecar", "sidecars");
    let mut results: Vec<(ApplyResult, String, String, String)> = Vec::new();
    let dry = |pp: PatchParams| match a.dry_run {
        DryRun::Server => pp.dry_run(),
        _ => pp,
    };
    for r in &recs {
        let Some(sc) = r.sidecar() else { continue };
        let name = sc.metadata.name.clone().unwrap_or_default();
        let ns = r.namespace.clone();
        let desired = serde_json::to_value(sc)?;
        let api: Api<DynamicObject> = Api::namespaced_with(live.client.clone(), &ns, &ar);
        let existing = match ctx.rt.block_on(api.get_opt(&name)) {
            Ok(o) => o.map(|o| serde_json::to_value(o).unwrap_or_default()),
            Err(e) => {
                let f = ApiFailure::from_kube(
                    e,
                    "get",
                    "sidecars.networking.istio.io",
                    Some(&ns),
                    &live.server,
                );
                results.push((ApplyResult::Failed, ns, name, f.to_string()));
                continue;
            }
        };
        if let Some(ex) = &existing {
            let managed = ex
                .pointer("/metadata/labels")
                .and_then(|l| l.get(MANAGED_BY_LABEL))
                .and_then(Value::as_str)
                == Some(MANAGED_BY_VALUE);
            if !managed {
                results.push((
                    ApplyResult::Skipped,
                    ns,
                    name,
                    format!("a Sidecar with this name exists and is not labelled {MANAGED_BY_LABEL}={MANAGED_BY_VALUE}; it belongs to its owner"),
                ));
                continue;
            }
        }
        let applied: Value = if a.dry_run == DryRun::Client {
            // Client dry run: what the server would get, merged naively.
            desired.clone()
        } else {
            let mut pp = dry(PatchParams::apply(FIELD_MANAGER));
            if a.force_conflicts {
                pp = pp.force();
            }
            match ctx
                .rt
                .block_on(api.patch(&name, &pp, &Patch::Apply(&desired)))
            {
                Ok(o) => serde_json::to_value(o).unwrap_or_default(),
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    results.push((
                        ApplyResult::Skipped,
                        ns,
                        name,
                        format!(
                            "conflict: {}; rerun with --force-conflicts to take those fields over",
                            s.message
                        ),
                    ));
                    continue;
                }
                Err(e) => {
                    let f = ApiFailure::from_kube(
                        e,
                        "patch",
                        "sidecars.networking.istio.io",
                        Some(&ns),
                        &live.server,
                    );
                    results.push((ApplyResult::Failed, ns, name, f.to_string()));
                    continue;
                }
            }
        };
        if a.diff {
            unified(
                &diffable(existing.as_ref()),
                &diffable(Some(&applied)),
                &format!("{ns}/{name}"),
                out,
            )?;
        }
        let outcome = match &existing {
            None => ApplyResult::Created,
            Some(ex) if comparable(ex, &desired) == comparable(&applied, &desired) => {
                ApplyResult::Unchanged
            }
            Some(_) => ApplyResult::Configured,
        };
        results.push((outcome, ns, name, String::new()));
    }
    if a.prune {
        prune(&world, &a, &mut results)?;
    }
    let suffix = match a.dry_run {
        DryRun::None => "",
        DryRun::Server => " (server dry run)",
        DryRun::Client => " (dry run)",
    };
    let mut counts: BTreeMap<ApplyResult, usize> = BTreeMap::new();
    for (res, ns, name, why) in &results {
        *counts.entry(*res).or_default() += 1;
        let line = format!(
            "sidecar.networking.istio.io/{name} {}{suffix} (namespace {ns})",
            res.word()
        );
        match res {
            ApplyResult::Skipped | ApplyResult::Failed => {
                writeln!(out, "{line}")?;
                writeln!(err, "{}: {ns}/{name}: {why}", res.word())?;
            }
            _ => writeln!(out, "{line}")?,
        }
    }
    let summary: Vec<String> = counts
        .iter()
        .map(|(r, n)| format!("{n} {}", r.word()))
        .collect();
    writeln!(
        err,
        "apply{suffix}: {}",
        if summary.is_empty() {
            "nothing to apply".to_string()
        } else {
            summary.join(", ")
        }
    )?;
    Ok(if counts.contains_key(&ApplyResult::Failed) {
        Outcome::Findings
    } else {
        Outcome::Ok
    })
}

/// Deletes managed Sidecars whose workload no longer exists, and only those.
fn prune(
    world: &crate::World,
    a: &ApplyArgs,
    results: &mut Vec<(ApplyResult, String, String, String)>,
) -> Result<()> {
    let ctx = world.live.as_ref().expect("live mode has a connection");
    let live = &ctx.live;
    let ar = istio("Sidecar", "sidecars");
    let selector = format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}");
    let namespaces: Vec<Option<String>> = match &world.namespaces {
        None => vec![None],
        Some(set) => set.iter().cloned().map(Some).collect(),
    };
    for ns in namespaces {
        let api: Api<DynamicObject> = match &ns {
            Some(n) => Api::namespaced_with(live.client.clone(), n, &ar),
            None => Api::all_with(live.client.clone(), &ar),
        };
        let list = match ctx
            .rt
            .block_on(api.list(&ListParams::default().labels(&selector)))
        {
            Ok(l) => l,
            Err(e) => {
                let f = ApiFailure::from_kube(
                    e,
                    "list",
                    "sidecars.networking.istio.io",
                    ns.as_deref(),
                    &live.server,
                );
                results.push((
                    ApplyResult::Failed,
                    ns.unwrap_or_default(),
                    "(prune)".into(),
                    f.to_string(),
                ));
                continue;
            }
        };
        for sc in list.items {
            let labels = sc.metadata.labels.clone().unwrap_or_default();
            let (Some(kind), Some(wname)) = (
                labels.get(WORKLOAD_KIND_LABEL),
                labels.get(WORKLOAD_NAME_LABEL),
            ) else {
                // Per-namespace Sidecars have no workload; never pruned.
                continue;
            };
            let sns = sc.metadata.namespace.clone().unwrap_or_default();
            let kind =
                WorkloadKind::parse(kind).unwrap_or_else(|| WorkloadKind::Other(kind.clone()));
            if world.snap.find_workload(&kind, &sns, wname).is_some() {
                continue;
            }
            let name = sc.metadata.name.clone().unwrap_or_default();
            let nsapi: Api<DynamicObject> = Api::namespaced_with(live.client.clone(), &sns, &ar);
            let dp = DeleteParams {
                dry_run: a.dry_run == DryRun::Server,
                ..DeleteParams::default()
            };
            if a.dry_run == DryRun::Client {
                results.push((ApplyResult::Pruned, sns, name, String::new()));
                continue;
            }
            match ctx.rt.block_on(nsapi.delete(&name, &dp)) {
                Ok(_) => results.push((ApplyResult::Pruned, sns, name, String::new())),
                Err(e) => {
                    let f = ApiFailure::from_kube(
                        e,
                        "delete",
                        "sidecars.networking.istio.io",
                        Some(&sns),
                        &live.server,
                    );
                    results.push((ApplyResult::Failed, sns, name, f.to_string()));
                }
            }
        }
    }
    Ok(())
}
