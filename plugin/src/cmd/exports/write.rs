//! `apply --exports` and `diff --exports`: each recommended exportTo is
//! written as a server-side apply of that one field (field manager
//! `kubectl-meshscope`), after reading the object: an object that is gone
//! is never created, one whose owner set exportTo meanwhile is left alone
//! without `--force-exports` (one meshscope wrote is updated), and one exempt by `meshscope.io/exempt` is
//! skipped. No label is added: these objects are their owners'.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{anyhow, Result};
use k8s_openapi::api::core::v1::Service;
use kube::api::{ApiResource, PatchParams};
use meshscope_shared as scope;
use scope::exempt::{Exemption, EXEMPT_ANNOTATION};
use scope::exports::{ExportAction, ExportKind, ExportRec};
use scope::snapshot::EXPORT_TO_ANNOTATION;
use serde_json::Value;

use super::{body, confirm, load};
use crate::args::{DryRun, ReportOutput};
use crate::istiod::checks::{traffic_by_workload, warn_version_skew};
use crate::istiod::table::report;
use crate::istiod::Istiod;
use crate::live::{istio, resource_of, Patched};
use crate::outcome::Outcome;
use crate::output::{plural, Printer};
use crate::request::{ApplyRequest, DiffRequest, ExportsSpec, Wait};
use crate::sidecars::compare::{diffable, unified};
use crate::sidecars::report::{summarize, unconfirmed};
use crate::sidecars::waiting::{connect_for_wait, wait_advice};
use crate::sidecars::{ApplyResult, FIELD_MANAGER};
use crate::world::{LiveCtx, World};

/// The API resource of a kind whose exportTo is written.
fn resource(kind: ExportKind) -> ApiResource {
    match kind {
        ExportKind::Service => resource_of::<Service>(),
        ExportKind::ServiceEntry => istio("ServiceEntry", "serviceentries"),
        ExportKind::VirtualService => istio("VirtualService", "virtualservices"),
        ExportKind::DestinationRule => istio("DestinationRule", "destinationrules"),
    }
}

/// Routes before what they route to: a narrowed route never outlives the
/// cluster it needs (`docs/istio-semantics.md` §10).
fn order(kind: ExportKind) -> u8 {
    match kind {
        ExportKind::DestinationRule => 0,
        ExportKind::VirtualService => 1,
        ExportKind::Service => 2,
        ExportKind::ServiceEntry => 3,
    }
}

/// The recommendations to write, in write order.
fn writes(recs: &[ExportRec]) -> Vec<&ExportRec> {
    let mut w: Vec<&ExportRec> = recs
        .iter()
        .filter(|x| x.action == ExportAction::Write)
        .collect();
    w.sort_by_key(|x| (order(x.kind), x.namespace.clone(), x.name.clone()));
    w
}

/// The exportTo the live object carries, as written (`None`: unset).
fn live_declared(v: &Value, kind: ExportKind) -> Option<Vec<String>> {
    let list: Option<Vec<String>> = match kind {
        ExportKind::Service => v
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(EXPORT_TO_ANNOTATION))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(|s| s.split(',').map(|i| i.trim().to_string()).collect()),
        _ => v
            .pointer("/spec/exportTo")
            .and_then(|l| serde_json::from_value(l.clone()).ok()),
    };
    list.filter(|l| !l.is_empty())
}

/// A list as a set of namespaces (`.` is the own namespace).
fn as_set(list: &[String], ns: &str) -> BTreeSet<String> {
    list.iter()
        .map(|i| if i == "." { ns.to_string() } else { i.clone() })
        .collect()
}

/// Why the live object must not be written, if it must not.
fn refuse(v: &Value, x: &ExportRec, force: bool) -> Option<(ApplyResult, String)> {
    let exempt = v
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(EXEMPT_ANNOTATION))
        .and_then(Value::as_str);
    if let Some(reason) = Exemption::of_value(exempt).reason() {
        return Some((
            ApplyResult::Skipped,
            format!("exempt ({EXEMPT_ANNOTATION}: {reason})"),
        ));
    }
    let ours = serde_json::from_value(v["metadata"].clone())
        .is_ok_and(|m| scope::meta::export_to_is_ours(&m));
    match live_declared(v, x.kind) {
        Some(d) if as_set(&d, &x.namespace) == as_set(&x.recommended, &x.namespace) => {
            Some((ApplyResult::Unchanged, String::new()))
        }
        Some(d) if !force && !ours => Some((
            ApplyResult::Skipped,
            format!(
                "its owner set exportTo [{}]; --force-exports writes over it",
                d.join(", ")
            ),
        )),
        _ => None,
    }
}

/// Reads the object, then writes its exportTo with `pp` (or, for a client
/// dry run, only says it would): the outcome and the object before and
/// after.
async fn write_one(
    ctx: &LiveCtx,
    x: &ExportRec,
    force: bool,
    pp: Option<&PatchParams>,
) -> (ApplyResult, String, Option<(Value, Value)>) {
    let ar = resource(x.kind);
    let live = &ctx.live;
    let got = match live.get_object(&ar, &x.namespace, &x.name).await {
        Ok(Some(o)) => serde_json::to_value(o).unwrap_or_default(),
        Ok(None) => {
            return (
                ApplyResult::Skipped,
                "not found: --exports never creates objects".into(),
                None,
            )
        }
        Err(f) => return (ApplyResult::Failed, f.to_string(), None),
    };
    if let Some((res, why)) = refuse(&got, x, force) {
        return (res, why, None);
    }
    let rv = got
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str);
    let desired = body(x, rv);
    let Some(pp) = pp else {
        return (
            ApplyResult::Configured,
            exports_text(x),
            Some((got, desired)),
        );
    };
    match live
        .apply_object(&ar, &x.namespace, &x.name, &desired, pp)
        .await
    {
        Ok(Patched::Object(o)) => {
            let after = serde_json::to_value(o).unwrap_or_default();
            (ApplyResult::Configured, exports_text(x), Some((got, after)))
        }
        Ok(Patched::Conflict(m)) => (
            ApplyResult::Skipped,
            format!("conflict: {m}; rerun with --force-conflicts to take exportTo over"),
            None,
        ),
        Err(f) => (ApplyResult::Failed, f.to_string(), None),
    }
}

fn exports_text(x: &ExportRec) -> String {
    format!("exportTo [{}]", x.recommended.join(", "))
}

fn label(x: &ExportRec) -> String {
    let ar = resource(x.kind);
    let group = if ar.group.is_empty() {
        String::new()
    } else {
        format!(".{}", ar.group)
    };
    format!("{}{group}/{}", x.kind.as_str().to_ascii_lowercase(), x.name)
}

fn spec_of(r: &crate::request::RecommendSpec) -> Result<&ExportsSpec> {
    r.exports
        .as_deref()
        .ok_or_else(|| anyhow!("--exports was not given"))
}

pub fn apply(a: &ApplyRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    let e = spec_of(&a.spec)?;
    let (world, recs) = load(&a.spec, e, p)?;
    let ctx = world.live_ctx()?;
    let mut pp = PatchParams::apply(FIELD_MANAGER);
    if a.dry_run == DryRun::Server {
        pp = pp.dry_run();
    }
    if a.force_conflicts {
        pp = pp.force();
    }
    let pp = (a.dry_run != DryRun::Client).then_some(pp);
    // --wait needs istiod, and what it sent each proxy before the writes.
    let mut waiting = match &a.wait {
        Some(w) => {
            let mut istiods = connect_for_wait(ctx, a)?;
            let before = ctx
                .rt
                .block_on(confirm::snapshot(&mut istiods, w.limit, p.err))
                .map_err(|e| {
                    anyhow!(
                        "cannot --wait, so nothing was applied: {e:#}\n{}",
                        wait_advice(a)
                    )
                })?;
            Some((istiods, before))
        }
        None => None,
    };
    let suffix = match a.dry_run {
        DryRun::None => "",
        DryRun::Server => " (server dry run)",
        DryRun::Client => " (dry run)",
    };
    let mut counts: BTreeMap<ApplyResult, usize> = BTreeMap::new();
    for x in writes(&recs) {
        let (res, why, _) = ctx.rt.block_on(write_one(ctx, x, e.force, pp.as_ref()));
        *counts.entry(res).or_default() += 1;
        let why = if why.is_empty() {
            String::new()
        } else {
            format!(": {why}")
        };
        writeln!(
            p.out,
            "{} {}{suffix} (namespace {}){why}",
            label(x),
            res.word(),
            x.namespace
        )?;
    }
    summarize(
        p,
        &format!("apply --exports{suffix}"),
        &counts,
        "nothing to narrow",
    )?;
    report_owner_set(&recs, p)?;
    let mut outcome = if counts.contains_key(&ApplyResult::Failed) {
        Outcome::Findings
    } else {
        Outcome::Ok
    };
    if let (Some((istiods, before)), Some(w)) = (waiting.as_mut(), &a.wait) {
        let written = counts.get(&ApplyResult::Configured).copied().unwrap_or(0);
        if wait_for_istiod(&world, a, istiods, before, written, w, p)? == Outcome::Findings {
            outcome = Outcome::Findings;
        }
    }
    Ok(outcome)
}

/// `--wait`: confirms the `written` exportTo changes on istiod (see
/// [`confirm`]), says what it waited for, and prints the check of each
/// proxy it waited for.
fn wait_for_istiod(
    world: &World,
    a: &ApplyRequest,
    istiods: &mut [Istiod],
    before: &confirm::Before,
    written: usize,
    w: &Wait,
    p: &mut Printer<'_>,
) -> Result<Outcome> {
    if written == 0 {
        writeln!(p.err, "nothing written, so nothing to wait for")?;
        return Ok(Outcome::Ok);
    }
    let ctx = world.live_ctx()?;
    let traffic = traffic_by_workload(&world.snap, world.obs.as_ref());
    let fresh = World::read_again(&a.spec.mesh, p.err)?;
    let targets = confirm::targets(world, &fresh, &traffic);
    let pushed = targets.iter().filter(|t| t.changed).count();
    let done = ctx.rt.block_on(confirm::wait(
        &fresh, &traffic, istiods, &targets, before, w.limit, p.err,
    ));
    writeln!(
        p.err,
        "waited {:.2} s for istiod to push {} ({} whose clusters change) and for {} to ACK and match the prediction, every observed edge included",
        done.elapsed.as_secs_f64(),
        plural(written, "exportTo change", "exportTo changes"),
        plural(pushed, "proxy", "proxies"),
        plural(done.confirmed, "proxy", "proxies"),
    )?;
    let mut outcome = Outcome::Ok;
    if unconfirmed(&done.not_connected, &done.timed_out, &w.given, p.err)? {
        outcome = Outcome::Findings;
    }
    if done.checks.is_empty() {
        return Ok(outcome);
    }
    writeln!(p.out)?;
    warn_version_skew(&fresh.snap, &done.checks, p.err)?;
    if report(&done.checks, ReportOutput::Table, p)? == Outcome::Findings {
        outcome = Outcome::Findings;
    }
    Ok(outcome)
}

pub fn diff(d: &DiffRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    let e = spec_of(&d.spec)?;
    let (world, recs) = load(&d.spec, e, p)?;
    let ctx = world.live_ctx()?;
    let mut pp = PatchParams::apply(FIELD_MANAGER).dry_run();
    if d.force_conflicts {
        pp = pp.force();
    }
    let mut changed = 0;
    for x in writes(&recs) {
        let (res, why, objects) = ctx.rt.block_on(write_one(ctx, x, e.force, Some(&pp)));
        match objects {
            Some((old, new)) => {
                changed += 1;
                let name = format!("{}/{}", x.namespace, label(x));
                unified(&diffable(Some(&old)), &diffable(Some(&new)), &name, p.out)?;
            }
            None if res != ApplyResult::Unchanged => {
                writeln!(p.err, "{} {}: {why}", label(x), res.word())?;
            }
            None => {}
        }
    }
    report_owner_set(&recs, p)?;
    Ok(if changed > 0 {
        Outcome::Findings
    } else {
        Outcome::Ok
    })
}

/// Objects left to their owners, to stderr.
fn report_owner_set(recs: &[ExportRec], p: &mut Printer<'_>) -> Result<()> {
    let owned: Vec<String> = recs
        .iter()
        .filter(|x| x.action == ExportAction::OwnerSet)
        .map(|x| format!("{} {}", x.kind.as_str(), x.key()))
        .collect();
    if !owned.is_empty() {
        p.summary(format_args!(
            "left alone (their owners set exportTo; --force-exports writes over it): {}",
            owned.join(", ")
        ))?;
    }
    Ok(())
}
