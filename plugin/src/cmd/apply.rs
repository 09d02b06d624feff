//! `kubectl meshscope apply`: server-side apply of the recommended Sidecars,
//! field manager `kubectl-meshscope`. It never takes over a Sidecar it does
//! not own, reports per object, and a failure in one object does not stop
//! the others.

use std::collections::BTreeMap;
use std::io::Write;

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use futures::StreamExt;
use kube::api::{DeleteParams, PatchParams};
use meshscope_shared::istio::Sidecar;
use meshscope_shared::recommend::Recommendation;
use meshscope_shared::scope::ScopeSource;
use meshscope_shared::snapshot::{PodId, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use meshscope_shared::verify as verify_shared;
use serde_json::Value;

use crate::args::{ApplyArgs, DryRun, ReportOutput};
use crate::cmd::recommend::summarize_recommendations;
use crate::cmd::verify;
use crate::interrupt::Interrupt;
use crate::istiod::Istiod;
use crate::live::{parse_duration, systemic_cause, Patched, Purpose};
use crate::output::plural;
use crate::{recommend_world, Outcome};

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
pub(crate) fn diffable(v: Option<&Value>) -> String {
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

pub(crate) fn unified(
    old: &str,
    new: &str,
    name: &str,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let diff = similar::TextDiff::from_lines(old, new);
    let text = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("live/{name}"), &format!("meshscope/{name}"))
        .to_string();
    out.write_all(text.as_bytes())
}

/// One Sidecar to write, and what is known about it before writing.
struct Planned {
    ns: String,
    name: String,
    desired: Value,
    desired_sc: Sidecar,
    existing: Option<Value>,
    /// Written first when `desired` drops hosts and `--wait` confirms each
    /// step: the old hosts and the new ones.
    widened: Option<Sidecar>,
    /// Injected pods whose scope this Sidecar decides.
    pods: Vec<PodId>,
}

type Row = (ApplyResult, String, String, String);

/// Sidecars read or written at once: enough to hide the round trips, few
/// enough that the API server's in-flight limits (400 reads, 200 writes by
/// default) never see us as a flood.
const IN_FLIGHT: usize = 16;

/// A write's outcome: the object as the server now has it, or the row to
/// report.
type Written = Result<Value, (ApplyResult, String)>;

/// Server-side applies `body` as `name` (or only compares, for a client
/// dry run).
async fn write(ctx: &crate::LiveCtx, a: &ApplyArgs, ns: &str, name: &str, body: &Value) -> Written {
    if a.dry_run == DryRun::Client {
        // Client dry run: what the server would get, merged naively.
        return Ok(body.clone());
    }
    let mut pp = PatchParams::apply(FIELD_MANAGER);
    if a.dry_run == DryRun::Server {
        pp = pp.dry_run();
    }
    if a.force_conflicts {
        pp = pp.force();
    }
    match ctx.live.apply_sidecar(ns, name, body, &pp).await {
        Ok(Patched::Object(o)) => Ok(serde_json::to_value(o).unwrap_or_default()),
        Ok(Patched::Conflict(message)) => Err((
            ApplyResult::Skipped,
            format!(
                "conflict: {}; rerun with --force-conflicts to take those fields over",
                message
            ),
        )),
        Err(f) => Err((ApplyResult::Failed, f.to_string())),
    }
}

/// Writes each `(index, body)` of `plan`, [`IN_FLIGHT`] at a time, and
/// returns the outcomes by index. Once `stop` is requested no write
/// starts: those are `None`. Each write is one server-side apply, all or
/// nothing, so an interrupted run never leaves a Sidecar half-written.
fn write_all(
    ctx: &crate::LiveCtx,
    a: &ApplyArgs,
    plan: &[Planned],
    jobs: Vec<(usize, Value)>,
    stop: &Interrupt,
) -> Vec<(usize, Option<Written>)> {
    let mut done: Vec<(usize, Option<Written>)> = ctx.rt.block_on(
        futures::stream::iter(jobs)
            .map(|(i, body)| async move {
                if stop.requested() {
                    return (i, None);
                }
                let p = &plan[i];
                (i, Some(write(ctx, a, &p.ns, &p.name, &body).await))
            })
            .buffer_unordered(IN_FLIGHT)
            .collect(),
    );
    done.sort_by_key(|(i, _)| *i);
    done
}

/// Waits as `waiting::wait` does, or until `stop`: `None` when interrupted.
fn wait_or_stop(
    ctx: &crate::LiveCtx,
    stop: &Interrupt,
    wait: impl std::future::Future<Output = Result<waiting::Waited>>,
) -> Result<Option<waiting::Waited>> {
    ctx.rt.block_on(async {
        tokio::select! {
            w = wait => w.map(Some),
            () = stop.wait() => Ok(None),
        }
    })
}

/// The injected pods whose scope a recommendation's Sidecar decides: its
/// workloads' pods, except (for a namespace-wide Sidecar) those that a
/// workload-selecting Sidecar scopes.
fn affected_pods(world: &crate::World, r: &Recommendation, sc: &Sidecar) -> Vec<PodId> {
    let snap = &world.snap;
    (0..snap.pods.len())
        .filter(|p| {
            let pod = &snap.pods[*p];
            pod.injection.sidecar
                && pod.namespace == r.namespace
                && r.workloads.contains(&pod.workload)
                && (sc.spec.workload_selector.is_some()
                    || match snap.select_sidecar(&pod.namespace, &pod.labels).source {
                        ScopeSource::Workload(id) => {
                            Some(snap.sidecars[id].name.as_str()) == sc.metadata.name.as_deref()
                        }
                        _ => true,
                    })
        })
        .collect()
}

pub fn cmd_apply(a: ApplyArgs, out: &mut dyn Write, err: &mut dyn Write) -> Result<Outcome> {
    if !a.common.manifests.is_empty() {
        bail!("apply changes a cluster: drop --manifests (use `recommend --manifests ... | kubectl apply -f -` for files)");
    }
    let wait_for = match &a.wait {
        Some(_) if a.dry_run != DryRun::None => {
            bail!("--wait waits for istiod to push what was written; a dry run writes nothing")
        }
        Some(t) => Some(parse_duration(t).map_err(|e| anyhow!("--wait: {e}"))?),
        None => None,
    };
    // Every permission apply needs is checked with the reads, in one pass.
    let mut common = a.common.clone();
    if a.dry_run != DryRun::Client {
        common.purpose = Purpose::Apply {
            prune: a.prune,
            istiod: (wait_for.is_some() && a.istiod.istiod_urls.is_empty())
                .then(|| a.istiod.istio_namespace.clone()),
        };
    }
    let (world, recs) = recommend_world(&common, &a.rec, a.prune_hosts, err)?;
    summarize_recommendations(&world, &recs, err)?;
    if let (Some(spec), None) = (&a.rec.workload, recs.iter().find_map(|r| r.sidecar())) {
        bail!(
            "nothing to apply for {spec}: {}",
            crate::why_nothing(&world, &recs)
        );
    }
    let ctx = world.live.as_ref().expect("live mode has a connection");
    let live = &ctx.live;
    // --wait needs istiod: find it before writing anything.
    let mut istiods = match wait_for {
        Some(_) => Some(
            ctx.rt
                .block_on(verify::connect_istiods(
                    &world,
                    &a.istiod,
                    a.common.request_timeout.secs(),
                ))
                .map_err(|e| {
                    anyhow!("cannot --wait, so nothing was applied: {e:#}\n(drop --wait to apply without waiting)")
                })?,
        ),
        None => None,
    };
    let mut results: Vec<Row> = Vec::new();
    let mut plan: Vec<Planned> = Vec::new();
    // What each recommended name holds now, read IN_FLIGHT at a time.
    let gets = ctx.rt.block_on(
        futures::stream::iter(recs.iter().filter_map(|r| r.sidecar().map(|sc| (r, sc))))
            .map(|(r, sc)| async move {
                let name = sc.metadata.name.clone().unwrap_or_default();
                let got = live.sidecar(&r.namespace, &name).await;
                (r, sc, name, got)
            })
            .buffered(IN_FLIGHT)
            .collect::<Vec<_>>(),
    );
    for (r, sc, name, got) in gets {
        let ns = r.namespace.clone();
        let desired = serde_json::to_value(sc)?;
        let existing = match got {
            Ok(o) => o.map(|o| serde_json::to_value(o).unwrap_or_default()),
            Err(f) => {
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
        let widened = match (&existing, wait_for) {
            (Some(ex), Some(_)) => serde_json::from_value::<Sidecar>(ex.clone())
                .ok()
                .and_then(|old| verify_shared::widened(&old, sc)),
            _ => None,
        };
        plan.push(Planned {
            pods: affected_pods(&world, r, sc),
            ns,
            name,
            desired,
            desired_sc: sc.clone(),
            existing,
            widened,
        });
    }

    // Step 1: every Sidecar as it ends up, except those that drop hosts
    // under --wait: they get the old hosts and the new ones.
    let mut waits = Waits::default();
    let mut applied: Vec<Option<Value>> = vec![None; plan.len()];
    let mut step1: Vec<(usize, Sidecar)> = Vec::new();
    if let Some(istiods) = istiods.as_mut() {
        let pods: Vec<PodId> = plan.iter().flat_map(|p| p.pods.iter().copied()).collect();
        waits.before = ctx
            .rt
            .block_on(waiting::snapshot(&world, istiods, &pods, err))
            .map_err(|e| {
                anyhow!("cannot --wait, so nothing was applied: {e:#}\n(drop --wait to apply without waiting)")
            })?;
    }
    // From here on, Ctrl-C finishes the writes in flight and starts no more.
    let stop = Interrupt::install();
    let mut not_written: Vec<usize> = Vec::new();
    let mut jobs = Vec::with_capacity(plan.len());
    for (i, p) in plan.iter().enumerate() {
        jobs.push(match &p.widened {
            Some(w) => (i, serde_json::to_value(w)?),
            None => (i, p.desired.clone()),
        });
    }
    for (i, done) in write_all(ctx, &a, &plan, jobs, &stop) {
        let p = &plan[i];
        match done {
            None => not_written.push(i),
            Some(Ok(v)) => {
                if p.widened.is_none() {
                    applied[i] = Some(v);
                }
                let sc = p.widened.clone().unwrap_or_else(|| p.desired_sc.clone());
                step1.push((i, sc));
            }
            Some(Err((res, why))) => results.push((res, p.ns.clone(), p.name.clone(), why)),
        }
    }
    let mut outcome = Outcome::Ok;
    if let (Some(istiods), Some(limit), false) = (istiods.as_mut(), wait_for, stop.requested()) {
        let targets =
            waiting::targets(&plan_refs(&plan), &step1, &applied_changed(&plan, &applied));
        let w = waiting::wait(&world, istiods, &targets, &waits.before, limit, err);
        if let Some(w) = wait_or_stop(ctx, &stop, w)? {
            waits.add(w);
        }
    }
    // Step 2: the narrowing ones, once step 1 is confirmed.
    let mut step2: Vec<(usize, Sidecar)> = Vec::new();
    if waits.timed_out.is_empty() && !stop.requested() {
        if let Some(istiods) = istiods.as_mut() {
            let pods: Vec<PodId> = plan
                .iter()
                .filter(|p| p.widened.is_some())
                .flat_map(|p| p.pods.iter().copied())
                .collect();
            if !pods.is_empty() {
                waits.before = ctx
                    .rt
                    .block_on(waiting::snapshot(&world, istiods, &pods, err))?;
            }
        }
        let jobs: Vec<(usize, Value)> = plan
            .iter()
            .enumerate()
            .filter(|(i, p)| p.widened.is_some() && step1.iter().any(|(j, _)| j == i))
            .map(|(i, p)| (i, p.desired.clone()))
            .collect();
        for (i, done) in write_all(ctx, &a, &plan, jobs, &stop) {
            let p = &plan[i];
            match done {
                None => {}
                Some(Ok(v)) => {
                    applied[i] = Some(v);
                    step2.push((i, p.desired_sc.clone()));
                }
                Some(Err((res, why))) => results.push((res, p.ns.clone(), p.name.clone(), why)),
            }
        }
        if let (Some(istiods), Some(limit), false) = (istiods.as_mut(), wait_for, stop.requested())
        {
            if !step2.is_empty() {
                let changed = vec![true; plan.len()];
                let targets = waiting::targets(&plan_refs(&plan), &step2, &changed);
                let w = waiting::wait(
                    &world,
                    istiods,
                    &targets,
                    &waits.before,
                    limit.saturating_sub(waits.elapsed),
                    err,
                );
                if let Some(w) = wait_or_stop(ctx, &stop, w)? {
                    waits.add(w);
                }
            }
        }
    }
    let not_narrowed: Vec<&Planned> = plan
        .iter()
        .enumerate()
        .filter(|(i, p)| {
            p.widened.is_some() && applied[*i].is_none() && step1.iter().any(|(j, _)| j == i)
        })
        .map(|(_, p)| p)
        .collect();
    for p in &not_narrowed {
        writeln!(
            err,
            "not narrowed: {}/{} keeps its old hosts as well as the new ones, since {}",
            p.ns,
            p.name,
            if stop.requested() {
                "apply was interrupted"
            } else {
                "istiod did not confirm the first step"
            }
        )?;
    }
    for (i, p) in plan.iter().enumerate() {
        let Some(v) = &applied[i] else {
            if p.widened.is_some() && step1.iter().any(|(j, _)| *j == i) {
                results.push((
                    ApplyResult::Configured,
                    p.ns.clone(),
                    p.name.clone(),
                    String::new(),
                ));
            }
            continue;
        };
        if a.diff {
            unified(
                &diffable(p.existing.as_ref()),
                &diffable(Some(v)),
                &format!("{}/{}", p.ns, p.name),
                out,
            )?;
        }
        results.push((result_of(p, v), p.ns.clone(), p.name.clone(), String::new()));
    }
    if a.prune && !stop.requested() {
        prune(&world, &a, &mut results)?;
    }
    let suffix = match a.dry_run {
        DryRun::None => "",
        DryRun::Server => " (server dry run)",
        DryRun::Client => " (dry run)",
    };
    // Every object failing for the same cause (RBAC, no server) is an
    // error, said once (exit 2); some objects failing is a finding (exit 1).
    let cause = |ns: &str, name: &str, why: &str| {
        systemic_cause(why).unwrap_or_else(|| {
            why.replace(&format!("\"{name}\""), "\"NAME\"")
                .replace(&format!("\"{ns}\""), "\"NAMESPACE\"")
        })
    };
    let all_failed_alike = match results.first() {
        Some((ApplyResult::Failed, ns, name, first)) => {
            let first = cause(ns, name, first);
            results.iter().all(|(res, ns, name, why)| {
                *res == ApplyResult::Failed && cause(ns, name, why) == first
            })
        }
        _ => false,
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
                if !all_failed_alike {
                    writeln!(err, "{}: {ns}/{name}: {why}", res.word())?;
                }
            }
            _ => writeln!(out, "{line}")?,
        }
    }
    if all_failed_alike {
        let n = results.len();
        bail!(
            "apply{suffix}: {n} of {} failed: {}",
            plural(n, "object", "objects"),
            results[0].3
        );
    }
    let summary: Vec<String> = counts
        .iter()
        .map(|(r, n)| format!("{n} {}", r.word()))
        .collect();
    crate::output::summary(
        err,
        format_args!(
            "apply{suffix}: {}",
            if summary.is_empty() {
                "nothing to apply".to_string()
            } else {
                summary.join(", ")
            }
        ),
    )?;
    if counts.contains_key(&ApplyResult::Failed) {
        outcome = Outcome::Findings;
    }
    if stop.requested() {
        bail!(
            "interrupted: {} of {} not written{}; each write is one server-side apply, so what was written is whole. Run the same command again to finish",
            not_written.len(),
            plural(plan.len(), "Sidecar", "Sidecars"),
            if not_narrowed.is_empty() {
                String::new()
            } else {
                format!(", {} not narrowed yet", not_narrowed.len())
            }
        );
    }
    if let Some(istiods) = istiods.as_mut() {
        let waited: Vec<PodId> = waits.pods.iter().copied().collect();
        writeln!(
            err,
            "waited {:.2} s for istiod to push {} and for {} to ACK{}",
            waits.elapsed.as_secs_f64(),
            plural(waits.sidecars, "Sidecar", "Sidecars"),
            plural(waits.confirmed, "proxy", "proxies"),
            if waits.steps > 1 {
                format!(" ({} steps: hosts added first, then removed)", waits.steps)
            } else {
                String::new()
            }
        )?;
        if !waits.not_connected.is_empty() {
            writeln!(
                err,
                "not waited for (not connected to istiod): {}",
                waits.not_connected.join(", ")
            )?;
        }
        if !waits.timed_out.is_empty() {
            writeln!(
                err,
                "timed out after {} waiting for: {}",
                a.wait.as_deref().unwrap_or_default(),
                waits.timed_out.join(", ")
            )?;
            outcome = Outcome::Findings;
        }
        if !waited.is_empty() {
            // Verify against a fresh read: the snapshot above predates the
            // writes.
            let traffic = verify::traffic_by_workload(&world);
            let mut again = a.common.clone();
            again.all_namespaces = true;
            again.access_logs.clear();
            again.from_pod_logs = false;
            again.prometheus = None;
            let fresh = crate::World::load(&again, err)?;
            let keys: Vec<(String, String)> = waited
                .iter()
                .map(|p| {
                    (
                        world.snap.pods[*p].namespace.clone(),
                        world.snap.pods[*p].name.clone(),
                    )
                })
                .collect();
            let pods: Vec<PodId> = keys
                .iter()
                .filter_map(|(ns, name)| fresh.snap.find_pod(ns, name))
                .collect();
            writeln!(out)?;
            let checks = ctx
                .rt
                .block_on(verify::check_pods(&fresh, &traffic, &pods, istiods, err))?;
            verify::warn_version_skew(&fresh, &checks, err)?;
            if verify::report(&checks, ReportOutput::Table, out, err)? == Outcome::Findings {
                outcome = Outcome::Findings;
            }
        }
    }
    Ok(outcome)
}

fn result_of(p: &Planned, applied: &Value) -> ApplyResult {
    match &p.existing {
        None => ApplyResult::Created,
        Some(ex) if comparable(ex, &p.desired) == comparable(applied, &p.desired) => {
            ApplyResult::Unchanged
        }
        Some(_) => ApplyResult::Configured,
    }
}

fn plan_refs(plan: &[Planned]) -> Vec<(&str, &str, &[PodId])> {
    plan.iter()
        .map(|p| (p.ns.as_str(), p.name.as_str(), p.pods.as_slice()))
        .collect()
}

/// Whether step 1 changed each planned Sidecar (an unchanged one is not
/// pushed, so nothing is waited for).
fn applied_changed(plan: &[Planned], applied: &[Option<Value>]) -> Vec<bool> {
    plan.iter()
        .zip(applied)
        .map(|(p, v)| match v {
            Some(v) => result_of(p, v) != ApplyResult::Unchanged,
            None => p.widened.is_some(),
        })
        .collect()
}

/// What the waits add up to.
#[derive(Default)]
struct Waits {
    before: waiting::Before,
    elapsed: Duration,
    steps: usize,
    sidecars: usize,
    confirmed: usize,
    pods: std::collections::BTreeSet<PodId>,
    not_connected: Vec<String>,
    timed_out: Vec<String>,
}

impl Waits {
    fn add(&mut self, w: waiting::Waited) {
        if w.sidecars == 0 {
            return;
        }
        self.elapsed += w.elapsed;
        self.steps += 1;
        self.sidecars = self.sidecars.max(w.sidecars);
        self.confirmed = self.confirmed.max(w.confirmed.len());
        self.pods.extend(w.confirmed.iter().copied());
        self.pods.extend(w.timed_out.iter().map(|(p, _)| *p));
        for n in w.not_connected {
            if !self.not_connected.contains(&n) {
                self.not_connected.push(n);
            }
        }
        self.timed_out
            .extend(w.timed_out.into_iter().map(|(_, why)| why));
    }
}

/// Waiting for istiod to push a written Sidecar and its proxies to ACK.
mod waiting {
    use super::*;

    /// Per proxy id, before a write: the last CDS nonce sent, and the
    /// scope istiod applied.
    pub type Before = HashMap<String, (String, verify_shared::AppliedScope)>;

    pub struct Target {
        pub pod: PodId,
        pub sidecar: Sidecar,
    }

    pub struct Waited {
        pub elapsed: Duration,
        pub sidecars: usize,
        pub confirmed: Vec<PodId>,
        pub not_connected: Vec<String>,
        pub timed_out: Vec<(PodId, String)>,
    }

    /// The proxies to wait for: those of each written Sidecar that changed.
    pub fn targets(
        plan: &[(&str, &str, &[PodId])],
        written: &[(usize, Sidecar)],
        changed: &[bool],
    ) -> Vec<Target> {
        written
            .iter()
            .filter(|(i, _)| changed[*i])
            .flat_map(|(i, sc)| {
                plan[*i].2.iter().map(|p| Target {
                    pod: *p,
                    sidecar: sc.clone(),
                })
            })
            .collect()
    }

    pub async fn snapshot(
        world: &crate::World,
        istiods: &mut [Istiod],
        pods: &[PodId],
        err: &mut dyn Write,
    ) -> Result<Before> {
        let by_proxy = verify::sync_status(istiods, err).await?;
        let mut out = Before::new();
        for p in pods {
            let pod = &world.snap.pods[*p];
            let id = verify_shared::proxy_id(&pod.name, &pod.namespace);
            let Some((i, sync)) = by_proxy.get(&id) else {
                continue;
            };
            let (status, body) = istiods[*i]
                .get(&format!("/debug/sidecarz?proxyID={id}"))
                .await?;
            let applied = if status == 200 {
                verify_shared::parse_sidecarz(&body).unwrap_or_default()
            } else {
                Default::default()
            };
            out.insert(id, (sync.cds_sent().to_string(), applied));
        }
        Ok(out)
    }

    /// Polls istiod until every target proxy has the target Sidecar's
    /// scope and has ACKed a push made after the write, or `limit` passes.
    pub async fn wait(
        world: &crate::World,
        istiods: &mut [Istiod],
        targets: &[Target],
        before: &Before,
        limit: Duration,
        err: &mut dyn Write,
    ) -> Result<Waited> {
        let started = Instant::now();
        let mut sidecars: Vec<String> = targets
            .iter()
            .map(|t| {
                format!(
                    "{:?}/{:?}",
                    t.sidecar.metadata.namespace, t.sidecar.metadata.name
                )
            })
            .collect();
        sidecars.sort();
        sidecars.dedup();
        let mut pending: Vec<&Target> = targets.iter().collect();
        let mut done = Waited {
            elapsed: Duration::ZERO,
            sidecars: sidecars.len(),
            confirmed: Vec::new(),
            not_connected: Vec::new(),
            timed_out: Vec::new(),
        };
        let tty = std::io::stderr().is_terminal();
        loop {
            let by_proxy = verify::sync_status(istiods, err).await?;
            let mut still = Vec::new();
            let mut why_waiting: HashMap<PodId, String> = HashMap::new();
            for t in pending {
                let pod = &world.snap.pods[t.pod];
                let id = verify_shared::proxy_id(&pod.name, &pod.namespace);
                let Some((i, sync)) = by_proxy.get(&id) else {
                    done.not_connected
                        .push(format!("{}/{}", pod.namespace, pod.name));
                    continue;
                };
                let (status, body) = istiods[*i]
                    .get(&format!("/debug/sidecarz?proxyID={id}"))
                    .await?;
                let applied = if status == 200 {
                    verify_shared::parse_sidecarz(&body).ok()
                } else {
                    None
                };
                let has_scope = applied
                    .as_ref()
                    .is_some_and(|a| verify_shared::scope_applied(a, &t.sidecar));
                let (nonce_before, had_scope) = match before.get(&id) {
                    Some((n, a)) => (n.as_str(), verify_shared::scope_applied(a, &t.sidecar)),
                    None => ("", false),
                };
                let pushed = had_scope || sync.cds_sent() != nonce_before;
                if has_scope && pushed && sync.in_sync() {
                    done.confirmed.push(t.pod);
                } else {
                    why_waiting.insert(
                        t.pod,
                        if !has_scope {
                            "istiod has not applied the new Sidecar".to_string()
                        } else if !pushed {
                            "istiod has not pushed yet".to_string()
                        } else {
                            format!("not yet ACKed: {}", sync.pending().join(", "))
                        },
                    );
                    still.push(t);
                }
            }
            pending = still;
            done.elapsed = started.elapsed();
            if pending.is_empty() {
                break;
            }
            if done.elapsed >= limit {
                done.timed_out = pending
                    .iter()
                    .map(|t| {
                        let pod = &world.snap.pods[t.pod];
                        (
                            t.pod,
                            format!(
                                "{}/{} ({})",
                                pod.namespace,
                                pod.name,
                                why_waiting.get(&t.pod).cloned().unwrap_or_default()
                            ),
                        )
                    })
                    .collect();
                break;
            }
            if tty && done.elapsed > Duration::from_secs(2) {
                let _ = write!(
                    err,
                    "\rwaiting for istiod: {} of {} proxies confirmed",
                    done.confirmed.len(),
                    done.confirmed.len() + pending.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if tty && done.elapsed > Duration::from_secs(2) {
            let _ = writeln!(err);
        }
        Ok(done)
    }
}

/// Deletes managed Sidecars whose workload no longer exists, and only those.
fn prune(
    world: &crate::World,
    a: &ApplyArgs,
    results: &mut Vec<(ApplyResult, String, String, String)>,
) -> Result<()> {
    let ctx = world.live.as_ref().expect("live mode has a connection");
    let live = &ctx.live;
    let selector = format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}");
    let namespaces: Vec<Option<String>> = match &world.namespaces {
        None => vec![None],
        Some(set) => set.iter().cloned().map(Some).collect(),
    };
    for ns in namespaces {
        let list = match ctx.rt.block_on(live.sidecars(ns.as_deref(), &selector)) {
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
            if !meshscope_shared::recommend::orphaned(&world.snap, &sns, &sc.metadata) {
                continue;
            }
            let name = sc.metadata.name.clone().unwrap_or_default();
            let dp = DeleteParams {
                dry_run: a.dry_run == DryRun::Server,
                ..DeleteParams::default()
            };
            if a.dry_run == DryRun::Client {
                results.push((ApplyResult::Pruned, sns, name, String::new()));
                continue;
            }
            match ctx.rt.block_on(live.delete_sidecar(&sns, &name, &dp)) {
                Ok(()) => results.push((ApplyResult::Pruned, sns, name, String::new())),
                Err(f) => {
                    results.push((ApplyResult::Failed, sns, name, f.to_string()));
                }
            }
        }
    }
    Ok(())
}
