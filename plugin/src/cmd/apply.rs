//! `kubectl meshscope apply`: server-side apply of the recommended Sidecars,
//! field manager `kubectl-meshscope`. It never takes over a Sidecar it does
//! not own, reports per object, and a failure in one object does not stop
//! the others.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use futures::StreamExt;
use kube::api::PatchParams;
use meshscope_shared::istio::Sidecar;
use meshscope_shared::recommend::Recommendation;
use meshscope_shared::scope::ScopeSource;
use meshscope_shared::snapshot::{PodId, MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use meshscope_shared::verify as verify_shared;
use serde_json::Value;

use crate::args::{DryRun, ReportOutput};
use crate::cmd::recommend::{self, summarize_recommendations};
use crate::cmd::verify;
use crate::interrupt::Interrupt;
use crate::istiod::Istiod;
use crate::live::{systemic_cause, Patched, Purpose};
use crate::outcome::Outcome;
use crate::output::{plural, Printer};
use crate::request::{ApplyRequest, PodLogScope};
use crate::world::{LiveCtx, World};

mod compare;
/// Deleting managed Sidecars whose workload is gone (`--prune`).
mod prune;
/// What became of each Sidecar written.
mod result;
/// Waiting for istiod to push a written Sidecar and its proxies to ACK.
mod waiting;

use compare::comparable;
pub(crate) use compare::{diffable, unified};
pub(crate) use prune::{orphans, prune};
pub use result::ApplyResult;
pub(crate) use result::Row;

pub const FIELD_MANAGER: &str = "kubectl-meshscope";

/// Whether a live Sidecar carries meshscope's managed-by label: without
/// it, the Sidecar belongs to its owner and apply never writes it.
pub(crate) fn managed(v: &Value) -> bool {
    v.pointer("/metadata/labels")
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .and_then(Value::as_str)
        == Some(MANAGED_BY_VALUE)
}

/// How the reason of a write skipped on a field-manager conflict starts.
const CONFLICT: &str = "conflict: ";
/// How a conflict's message ends: what takes the fields over.
pub(crate) const FORCE_HINT: &str = "; rerun with --force-conflicts to take those fields over";

/// The summary line of a write (`apply: 2 created, 1 unchanged`), or
/// `<what>: <nothing>` when there was nothing to write.
pub(crate) fn summarize(
    p: &mut Printer<'_>,
    what: &str,
    counts: &BTreeMap<ApplyResult, usize>,
    nothing: &str,
) -> Result<()> {
    let counted: Vec<String> = counts
        .iter()
        .map(|(r, n)| format!("{n} {}", r.word()))
        .collect();
    let line = if counted.is_empty() {
        nothing.to_string()
    } else {
        counted.join(", ")
    };
    p.summary(format_args!("{what}: {line}"))?;
    Ok(())
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

/// Sidecars read or written at once: enough to hide the round trips, few
/// enough that the API server's in-flight limits (400 reads, 200 writes by
/// default) never see us as a flood.
const IN_FLIGHT: usize = 16;

/// A write's outcome: the object as the server now has it, or the row to
/// report.
type Written = Result<Value, (ApplyResult, String)>;

/// Server-side applies `body` as `name` (or only compares, for a client
/// dry run).
async fn write(ctx: &LiveCtx, a: &ApplyRequest, ns: &str, name: &str, body: &Value) -> Written {
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
            format!("{CONFLICT}{message}{FORCE_HINT}"),
        )),
        Err(f) => Err((ApplyResult::Failed, f.to_string())),
    }
}

/// Writes each `(index, body)` of `plan`, [`IN_FLIGHT`] at a time, and
/// returns the outcomes by index. Once `stop` is requested no write
/// starts: those are `None`. Each write is one server-side apply, all or
/// nothing, so an interrupted run never leaves a Sidecar half-written.
fn write_all(
    ctx: &LiveCtx,
    a: &ApplyRequest,
    plan: &[Planned],
    jobs: Vec<(usize, Value)>,
    stop: &Interrupt,
) -> Vec<(usize, Option<Written>)> {
    let _writing = stop.writing();
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
    ctx: &LiveCtx,
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
/// workload-selecting Sidecar scopes. Only the workloads' own pods are
/// looked at, not every pod for each recommendation.
fn affected_pods(world: &World, r: &Recommendation, sc: &Sidecar) -> Vec<PodId> {
    let snap = &world.snap;
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

pub fn run(a: &ApplyRequest, p: &mut Printer<'_>) -> Result<Outcome> {
    let (world, recs) = recommend::load(&a.spec, p)?;
    summarize_recommendations(&world, &recs, p)?;
    if let (Some(spec), None) = (&a.spec.workload, recs.iter().find_map(|r| r.sidecar())) {
        bail!(
            "nothing to apply for {spec}: {}",
            meshscope_shared::notes::why_nothing(&world.snap, &recs)
        );
    }
    let mut istiods = match a.wait {
        Some(_) => Some(connect_for_wait(&world, a)?),
        None => None,
    };
    // From here on, Ctrl-C finishes the writes in flight and starts no more.
    let stop = Interrupt::install();
    let Pass {
        mut results,
        progress,
        not_narrowed,
        planned,
    } = write_pass(&world, &recs, a, istiods.as_deref_mut(), true, &stop, p)?;
    if a.prune && !stop.requested() {
        prune(&world, a, &mut results)?;
    }
    let mut outcome = report_rows(&results, a.dry_run, p)?;
    if stop.requested() {
        bail!(
            "interrupted: {} of {} not written{}; each write is one server-side apply, so what was written is whole. Run the same command again to finish",
            progress.not_written.len(),
            plural(planned, "Sidecar", "Sidecars"),
            if not_narrowed == 0 {
                String::new()
            } else {
                format!(", {not_narrowed} not narrowed yet")
            }
        );
    }
    if let Some(istiods) = istiods.as_mut() {
        if report_waits(&world, a, istiods, &progress.waits, p)? == Outcome::Findings {
            outcome = Outcome::Findings;
        }
    }
    Ok(outcome)
}

/// `--wait` needs istiod: found before anything is written.
pub(crate) fn connect_for_wait(world: &World, a: &ApplyRequest) -> Result<Vec<Istiod>> {
    let ctx = world.live.as_ref().expect("live mode has a connection");
    ctx.rt
        .block_on(verify::connect_istiods(world, &a.istiod, a.timeout_secs))
        .map_err(|e| {
            anyhow!(
                "cannot --wait, so nothing was applied: {e:#}\n{}",
                wait_advice(a)
            )
        })
}

/// How long `--wait` waits in all (istiod is only asked with `--wait`).
fn wait_limit(a: &ApplyRequest) -> Duration {
    a.wait.as_ref().map_or(Duration::MAX, |w| w.limit)
}

/// What to do when istiod cannot confirm: `apply` can do without it,
/// `apply --watch` cannot (it confirms every widening before narrowing).
pub(crate) fn wait_advice(a: &ApplyRequest) -> &'static str {
    if a.watch.is_some() {
        "(apply --watch confirms each write on istiod: give --istiod-url, or let it port-forward to istiod's pods as verify does)"
    } else {
        "(drop --wait to apply without waiting)"
    }
}

/// One round of writes and what came of them.
pub(crate) struct Pass {
    /// A row per Sidecar: written, unchanged, skipped or failed.
    pub results: Vec<Row>,
    pub progress: Progress,
    /// Sidecars left with their old hosts as well as the new ones.
    pub not_narrowed: usize,
    /// Sidecars there were to write.
    pub planned: usize,
}

/// Writes the Sidecars of `recs` (a Sidecar that drops hosts in two steps
/// when `two_step` and `--wait`: the old and new hosts first), waiting for
/// istiod after each step when `istiods` are given.
pub(crate) fn write_pass(
    world: &World,
    recs: &[Recommendation],
    a: &ApplyRequest,
    mut istiods: Option<&mut [Istiod]>,
    two_step: bool,
    stop: &Interrupt,
    p: &mut Printer<'_>,
) -> Result<Pass> {
    let ctx = world.live.as_ref().expect("live mode has a connection");
    let mut results: Vec<Row> = Vec::new();
    let waiting = a.wait.is_some() && two_step;
    let plan = read_plan(world, ctx, recs, waiting, &mut results)?;
    let mut progress = Progress::new(plan.len());
    if let Some(istiods) = istiods.as_deref_mut() {
        let pods: Vec<PodId> = plan.iter().flat_map(|p| p.pods.iter().copied()).collect();
        progress.waits.before = ctx
            .rt
            .block_on(waiting::snapshot(
                world,
                istiods,
                &pods,
                wait_limit(a),
                p.err,
            ))
            .map_err(|e| {
                anyhow!(
                    "cannot --wait, so nothing was applied: {e:#}\n{}",
                    wait_advice(a)
                )
            })?;
    }
    let steps = Steps {
        world,
        ctx,
        a,
        plan: &plan,
        stop,
    };
    steps.widen(istiods.as_deref_mut(), &mut progress, &mut results, p.err)?;
    if progress.waits.timed_out.is_empty() && !stop.requested() {
        steps.narrow(istiods, &mut progress, &mut results, p.err)?;
    }
    let not_narrowed = steps.rows(&progress, &mut results, p)?;
    Ok(Pass {
        results,
        progress,
        not_narrowed,
        planned: plan.len(),
    })
}

/// What each recommended name holds now, read [`IN_FLIGHT`] at a time:
/// the Sidecars to write, and rows for those that cannot be.
fn read_plan(
    world: &World,
    ctx: &LiveCtx,
    recs: &[Recommendation],
    waiting: bool,
    results: &mut Vec<Row>,
) -> Result<Vec<Planned>> {
    let live = &ctx.live;
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
            if !managed(ex) {
                results.push((
                    ApplyResult::Skipped,
                    ns,
                    name,
                    format!("a Sidecar with this name exists and is not labelled {MANAGED_BY_LABEL}={MANAGED_BY_VALUE}; it belongs to its owner"),
                ));
                continue;
            }
            // The same scope, only newer evidence: writing it would push
            // to every proxy it selects for nothing.
            if r.unchanged() {
                results.push((ApplyResult::Unchanged, ns, name, String::new()));
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
            pods: affected_pods(world, r, sc),
            ns,
            name,
            desired,
            desired_sc: sc.clone(),
            existing,
            widened,
        });
    }
    Ok(plan)
}

/// Where the writes stand.
pub(crate) struct Progress {
    pub waits: Waits,
    /// The object as the server has it, once its final form is written.
    applied: Vec<Option<Value>>,
    /// Written in step 1: the index and the Sidecar as written.
    step1: Vec<(usize, Sidecar)>,
    /// Not written, because of an interrupt.
    not_written: Vec<usize>,
}

impl Progress {
    fn new(n: usize) -> Self {
        Progress {
            waits: Waits::default(),
            applied: vec![None; n],
            step1: Vec::new(),
            not_written: Vec::new(),
        }
    }

    /// Whether `i` was written in step 1.
    fn in_step1(&self, i: usize) -> bool {
        self.step1.iter().any(|(j, _)| *j == i)
    }
}

/// The two steps of a write: widen (every Sidecar as it ends up, except
/// those that drop hosts under --wait: they get the old hosts and the new
/// ones), then narrow (those, once step 1 is confirmed).
struct Steps<'a> {
    world: &'a World,
    ctx: &'a LiveCtx,
    a: &'a ApplyRequest,
    plan: &'a [Planned],
    stop: &'a Interrupt,
}

impl Steps<'_> {
    /// Step 1, and the wait for it.
    fn widen(
        &self,
        istiods: Option<&mut [Istiod]>,
        progress: &mut Progress,
        results: &mut Vec<Row>,
        err: &mut dyn Write,
    ) -> Result<()> {
        let plan = self.plan;
        let mut jobs = Vec::with_capacity(plan.len());
        for (i, p) in plan.iter().enumerate() {
            jobs.push(match &p.widened {
                Some(w) => (i, serde_json::to_value(w)?),
                None => (i, p.desired.clone()),
            });
        }
        for (i, done) in write_all(self.ctx, self.a, plan, jobs, self.stop) {
            let p = &plan[i];
            match done {
                None => progress.not_written.push(i),
                Some(Ok(v)) => {
                    if p.widened.is_none() {
                        progress.applied[i] = Some(v);
                    }
                    let sc = p.widened.clone().unwrap_or_else(|| p.desired_sc.clone());
                    progress.step1.push((i, sc));
                }
                Some(Err((res, why))) => results.push((res, p.ns.clone(), p.name.clone(), why)),
            }
        }
        if let (Some(istiods), Some(wait), false) = (istiods, &self.a.wait, self.stop.requested()) {
            let changed = applied_changed(plan, &progress.applied);
            let targets = waiting::targets(&plan_refs(plan), &progress.step1, &changed);
            let w = waiting::wait(
                self.world,
                istiods,
                &targets,
                &progress.waits.before,
                wait.limit,
                err,
            );
            if let Some(w) = wait_or_stop(self.ctx, self.stop, w)? {
                progress.waits.add(w);
            }
        }
        Ok(())
    }

    /// Step 2, and the wait for it.
    fn narrow(
        &self,
        mut istiods: Option<&mut [Istiod]>,
        progress: &mut Progress,
        results: &mut Vec<Row>,
        err: &mut dyn Write,
    ) -> Result<()> {
        let plan = self.plan;
        if let Some(istiods) = istiods.as_deref_mut() {
            let pods: Vec<PodId> = plan
                .iter()
                .filter(|p| p.widened.is_some())
                .flat_map(|p| p.pods.iter().copied())
                .collect();
            if !pods.is_empty() {
                progress.waits.before = self.ctx.rt.block_on(waiting::snapshot(
                    self.world,
                    istiods,
                    &pods,
                    wait_limit(self.a).saturating_sub(progress.waits.elapsed),
                    err,
                ))?;
            }
        }
        let jobs: Vec<(usize, Value)> = plan
            .iter()
            .enumerate()
            .filter(|(i, p)| p.widened.is_some() && progress.in_step1(*i))
            .map(|(i, p)| (i, p.desired.clone()))
            .collect();
        let mut step2: Vec<(usize, Sidecar)> = Vec::new();
        for (i, done) in write_all(self.ctx, self.a, plan, jobs, self.stop) {
            let p = &plan[i];
            match done {
                None => {}
                Some(Ok(v)) => {
                    progress.applied[i] = Some(v);
                    step2.push((i, p.desired_sc.clone()));
                }
                Some(Err((res, why))) => results.push((res, p.ns.clone(), p.name.clone(), why)),
            }
        }
        if let (Some(istiods), Some(wait), false) = (istiods, &self.a.wait, self.stop.requested()) {
            if !step2.is_empty() {
                let changed = vec![true; plan.len()];
                let targets = waiting::targets(&plan_refs(plan), &step2, &changed);
                let w = waiting::wait(
                    self.world,
                    istiods,
                    &targets,
                    &progress.waits.before,
                    wait.limit.saturating_sub(progress.waits.elapsed),
                    err,
                );
                if let Some(w) = wait_or_stop(self.ctx, self.stop, w)? {
                    progress.waits.add(w);
                }
            }
        }
        Ok(())
    }

    /// Says what was not narrowed, prints `--diff`, and adds a row per
    /// written Sidecar. Returns how many were not narrowed.
    fn rows(
        &self,
        progress: &Progress,
        results: &mut Vec<Row>,
        p: &mut Printer<'_>,
    ) -> Result<usize> {
        let plan = self.plan;
        let not_narrowed: Vec<&Planned> = plan
            .iter()
            .enumerate()
            .filter(|(i, p)| {
                p.widened.is_some() && progress.applied[*i].is_none() && progress.in_step1(*i)
            })
            .map(|(_, p)| p)
            .collect();
        for n in &not_narrowed {
            writeln!(
                p.err,
                "not narrowed: {}/{} keeps its old hosts as well as the new ones, since {}",
                n.ns,
                n.name,
                if self.stop.requested() {
                    "apply was interrupted"
                } else {
                    "istiod did not confirm the first step"
                }
            )?;
        }
        for (i, planned) in plan.iter().enumerate() {
            let Some(v) = &progress.applied[i] else {
                if planned.widened.is_some() && progress.in_step1(i) {
                    results.push((
                        ApplyResult::Configured,
                        planned.ns.clone(),
                        planned.name.clone(),
                        String::new(),
                    ));
                }
                continue;
            };
            if self.a.diff {
                unified(
                    &diffable(planned.existing.as_ref()),
                    &diffable(Some(v)),
                    &format!("{}/{}", planned.ns, planned.name),
                    p.out,
                )?;
            }
            results.push((
                result_of(planned, v),
                planned.ns.clone(),
                planned.name.clone(),
                String::new(),
            ));
        }
        Ok(not_narrowed.len())
    }
}

/// Prints a line per object and the summary; every object failing for the
/// same cause (RBAC, no server) is an error, said once (exit 2), some
/// objects failing a finding (exit 1).
fn report_rows(results: &[Row], dry_run: DryRun, p: &mut Printer<'_>) -> Result<Outcome> {
    let suffix = match dry_run {
        DryRun::None => "",
        DryRun::Server => " (server dry run)",
        DryRun::Client => " (dry run)",
    };
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
    for (res, ns, name, why) in results {
        *counts.entry(*res).or_default() += 1;
        let line = format!(
            "sidecar.networking.istio.io/{name} {}{suffix} (namespace {ns})",
            res.word()
        );
        match res {
            ApplyResult::Skipped | ApplyResult::Failed => {
                writeln!(p.out, "{line}")?;
                if !all_failed_alike {
                    writeln!(p.err, "{}: {ns}/{name}: {why}", res.word())?;
                }
            }
            _ => writeln!(p.out, "{line}")?,
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
    summarize(p, &format!("apply{suffix}"), &counts, "nothing to apply")?;
    // A conflict leaves the scope different from the recommendation.
    let conflicts = results
        .iter()
        .filter(|(res, _, _, why)| *res == ApplyResult::Skipped && why.starts_with(CONFLICT))
        .count();
    if conflicts > 0 {
        writeln!(
            p.err,
            "{} left different from the recommendation: another field manager owns fields apply would set (rerun with --force-conflicts to take them over)",
            plural(conflicts, "Sidecar", "Sidecars")
        )?;
    }
    Ok(
        if counts.contains_key(&ApplyResult::Failed) || conflicts > 0 {
            Outcome::Findings
        } else {
            Outcome::Ok
        },
    )
}

/// Says what `--wait` waited for, and verifies the proxies it confirmed
/// against a fresh read of the cluster.
fn report_waits(
    world: &World,
    a: &ApplyRequest,
    istiods: &mut [Istiod],
    waits: &Waits,
    p: &mut Printer<'_>,
) -> Result<Outcome> {
    let mut outcome = Outcome::Ok;
    let waited: Vec<PodId> = waits.pods.iter().copied().collect();
    writeln!(
        p.err,
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
    let given = a
        .wait
        .as_ref()
        .map(|w| w.given.as_str())
        .unwrap_or_default();
    if unconfirmed(&waits.not_connected, &waits.timed_out, given, p.err)? {
        outcome = Outcome::Findings;
    }
    if waited.is_empty() {
        return Ok(outcome);
    }
    // Verify against a fresh read: the snapshot above predates the writes.
    let traffic = verify::traffic_by_workload(world);
    let fresh = read_again(a, p.err)?;
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
    writeln!(p.out)?;
    let ctx = world.live.as_ref().expect("live mode has a connection");
    let checks = ctx
        .rt
        .block_on(verify::check_pods(&fresh, &traffic, &pods, istiods, p.err))?;
    verify::warn_version_skew(&fresh, &checks, p.err)?;
    if verify::report(&checks, ReportOutput::Table, p)? == Outcome::Findings {
        outcome = Outcome::Findings;
    }
    Ok(outcome)
}

/// Names the proxies a `--wait` did not confirm: those not connected to
/// istiod (not waited for) and those still waiting at the timeout `given`.
/// Whether any timed out (a finding).
pub(crate) fn unconfirmed(
    not_connected: &[String],
    timed_out: &[String],
    given: &str,
    err: &mut dyn Write,
) -> Result<bool> {
    if !not_connected.is_empty() {
        writeln!(
            err,
            "not waited for (not connected to istiod): {}",
            not_connected.join(", ")
        )?;
    }
    if !timed_out.is_empty() {
        writeln!(
            err,
            "timed out after {given} waiting for: {}",
            timed_out.join(", ")
        )?;
    }
    Ok(!timed_out.is_empty())
}

/// The mesh after the writes, as the flags give it, every namespace, no
/// traffic: a read only (the writes' permissions were checked before them).
pub(crate) fn read_again(a: &ApplyRequest, err: &mut dyn Write) -> Result<World> {
    let mut again = a.spec.mesh.clone();
    again.purpose = Purpose::Read;
    again.pod_logs = PodLogScope::Listed;
    again.all_namespaces = true;
    again.access_logs.clear();
    again.from_pod_logs = false;
    again.prometheus = None;
    World::load(&again, err)
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
pub(crate) struct Waits {
    before: waiting::Before,
    pub elapsed: Duration,
    steps: usize,
    sidecars: usize,
    pub confirmed: usize,
    pub pods: std::collections::BTreeSet<PodId>,
    pub not_connected: Vec<String>,
    pub timed_out: Vec<String>,
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
