//! `kubectl meshscope diff`: what `apply` would change, as a unified diff of
//! each recommended Sidecar against the live object, with `kubectl diff`'s
//! exit codes (0 no differences, 1 differences, 2 error). Like `kubectl
//! diff`, the new side is the API server's answer to a server-side dry-run
//! apply, so defaults and other managers' fields show as they would be.

use anyhow::{anyhow, bail, Result};
use kube::api::PatchParams;
use meshscope_shared::recommend::Outcome as RecOutcome;
use meshscope_shared::recommend::Recommendation;
use meshscope_shared::snapshot::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use serde_json::Value;

use crate::live::{ApiFailure, Patched};
use crate::outcome::Outcome;
use crate::output::Printer;
use crate::request::DiffRequest;
use crate::sidecars::compare::{diffable, unified};
use crate::sidecars::prune::orphans;
use crate::sidecars::{managed, Cluster, FIELD_MANAGER};
use crate::world::World;

/// What the diff found, for the summary and the exit code.
#[derive(Default)]
struct Tally {
    create: usize,
    change: usize,
    unchanged: usize,
    prune: usize,
    user_owned: usize,
    conflicts: usize,
}

/// One object's part of the diff, in the order the objects were diffed.
enum Entry {
    /// A unified diff of `ns/name` (`new` is empty for a prune).
    Changed {
        label: String,
        old: String,
        new: String,
    },
    /// An object apply would skip, and why (to stderr).
    Skipped { label: String, reason: String },
}

/// The whole diff: what [`print()`] renders.
#[derive(Default)]
struct Diff {
    entries: Vec<Entry>,
    tally: Tally,
}

pub fn run(a: &DiffRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    let (world, recs) = World::load_recommended(&a.spec, p)?;
    world.summarize_recommendations(&recs, p)?;
    if let (Some(spec), None) = (&a.spec.workload, recs.iter().find_map(|r| r.sidecar())) {
        bail!(
            "nothing to diff for {spec}: {}",
            meshscope_shared::notes::why_nothing(&world.snap, &recs)
        );
    }
    let cluster = Cluster::of(&world)?;
    let mut diff = diff_recommended(&cluster, &recs, a)?;
    if a.prune {
        for (label, live_obj) in prunable(&cluster)? {
            diff.entries.push(Entry::Changed {
                label,
                old: diffable(Some(&live_obj)),
                new: String::new(),
            });
            diff.tally.prune += 1;
        }
    }
    print(&diff, a.prune, p)
}

/// Diffs each recommended Sidecar against the live object.
fn diff_recommended(c: &Cluster<'_>, recs: &[Recommendation], a: &DiffRequest) -> Result<Diff> {
    let ctx = c.ctx;
    let live = &ctx.live;
    let failure = |f: ApiFailure| anyhow!(f.to_string());
    // Workloads a user-owned Sidecar scopes get no recommended object;
    // the note above names them, and they count as skipped.
    let mut diff = Diff::default();
    diff.tally.user_owned = recs
        .iter()
        .filter(|r| matches!(r.outcome, RecOutcome::UserOwned { .. }))
        .count();
    for r in recs {
        let Some(sc) = r.sidecar() else { continue };
        let name = sc.metadata.name.clone().unwrap_or_default();
        let ns = r.namespace.as_str();
        let label = format!("{ns}/{name}");
        let desired = serde_json::to_value(sc)?;
        let existing = ctx
            .rt
            .block_on(live.sidecar(ns, &name))
            .map_err(failure)?
            .map(serde_json::to_value)
            .transpose()?;
        if let Some(ex) = existing.as_ref().filter(|ex| !managed(ex)) {
            // Shown so the owner sees what meshscope would write, but apply
            // leaves the object alone.
            diff.entries.push(Entry::Changed {
                label: label.clone(),
                old: diffable(Some(ex)),
                new: diffable(Some(&user_owned_view(ex, &desired))),
            });
            diff.entries.push(Entry::Skipped {
                label,
                reason: format!("a Sidecar with this name exists and is not labelled {MANAGED_BY_LABEL}={MANAGED_BY_VALUE}; apply leaves it to its owner"),
            });
            diff.tally.user_owned += 1;
            continue;
        }
        // The same scope, only newer evidence: apply leaves it as it is.
        if existing.is_some() && r.unchanged() {
            diff.tally.unchanged += 1;
            continue;
        }
        let mut pp = PatchParams::apply(FIELD_MANAGER).dry_run();
        if a.force_conflicts {
            pp = pp.force();
        }
        let after = match ctx
            .rt
            .block_on(live.apply_sidecar(ns, &name, &desired, &pp))
        {
            Ok(Patched::Object(o)) => serde_json::to_value(o)?,
            Ok(Patched::Conflict(message)) => {
                diff.entries.push(Entry::Skipped {
                    label,
                    reason: format!("conflict: {message}; apply skips it too (--force-conflicts takes those fields over)"),
                });
                diff.tally.conflicts += 1;
                continue;
            }
            Err(f) => return Err(failure(f)),
        };
        let (old, new) = (diffable(existing.as_ref()), diffable(Some(&after)));
        if old == new {
            diff.tally.unchanged += 1;
            continue;
        }
        if existing.is_none() {
            diff.tally.create += 1;
        } else {
            diff.tally.change += 1;
        }
        diff.entries.push(Entry::Changed { label, old, new });
    }
    Ok(diff)
}

/// The diffs on stdout, what apply would skip on stderr, in the order the
/// objects were diffed; then the summary, and the exit code as kubectl
/// diff's.
fn print(diff: &Diff, pruning: bool, p: &mut Printer<'_>) -> Result<Outcome> {
    for e in &diff.entries {
        match e {
            Entry::Changed { label, old, new } => unified(old, new, label, p.out)?,
            Entry::Skipped { label, reason } => writeln!(p.err, "skipped: {label}: {reason}")?,
        }
    }
    summarize(&diff.tally, pruning, p)
}

/// The summary line, and the exit code as kubectl diff's.
fn summarize(tally: &Tally, pruning: bool, p: &mut Printer<'_>) -> Result<Outcome> {
    let &Tally {
        create,
        change,
        unchanged,
        prune,
        user_owned,
        conflicts,
    } = tally;
    let mut parts = vec![
        format!("{create} to create"),
        format!("{change} to change"),
        format!("{unchanged} unchanged"),
    ];
    if pruning {
        parts.push(format!("{prune} to prune"));
    }
    if user_owned > 0 {
        parts.push(format!("{user_owned} user-owned (apply skips them)"));
    }
    if conflicts > 0 {
        parts.push(format!("{conflicts} with conflicts (skipped)"));
    }
    p.summary(format_args!("diff: {}", parts.join(", ")))?;
    if conflicts > 0 {
        // Apply would leave these as they are, different from the
        // recommendation: that is a difference too.
        writeln!(
            p.err,
            "{} would stay different from the recommendation: another field manager owns fields apply would set (--force-conflicts takes them over)",
            crate::output::plural(conflicts, "Sidecar", "Sidecars")
        )?;
    }
    Ok(if create + change + prune + conflicts > 0 {
        Outcome::Findings
    } else {
        Outcome::Ok
    })
}

/// A user-owned Sidecar as it would be with meshscope's spec, labels and
/// annotations: what the recommendation would change, were it applied.
fn user_owned_view(live: &Value, desired: &Value) -> Value {
    let mut v = live.clone();
    for field in ["labels", "annotations"] {
        let Some(want) = desired
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
        else {
            continue;
        };
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            let have = meta
                .entry(field)
                .or_insert_with(|| Value::Object(Default::default()));
            if let Some(have) = have.as_object_mut() {
                for (k, val) in want {
                    have.insert(k.clone(), val.clone());
                }
            }
        }
    }
    if let (Some(obj), Some(spec)) = (v.as_object_mut(), desired.get("spec")) {
        obj.insert("spec".into(), spec.clone());
    }
    v
}

/// Managed Sidecars whose workload no longer exists (what `apply --prune`
/// deletes): `ns/name` and the live object.
fn prunable(c: &Cluster<'_>) -> Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    for (_, list) in orphans(c) {
        for sc in list.map_err(|f| anyhow!(f.to_string()))? {
            let sns = sc.metadata.namespace.clone().unwrap_or_default();
            let label = format!("{sns}/{}", sc.metadata.name.clone().unwrap_or_default());
            out.push((label, serde_json::to_value(sc)?));
        }
    }
    Ok(out)
}
