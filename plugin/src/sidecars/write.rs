//! A write pass: the planned Sidecars written by server-side apply, field
//! manager [`FIELD_MANAGER`], in two steps (widen, then narrow) when
//! `--wait` confirms each, with a row per Sidecar. Each write is one
//! server-side apply, all or nothing, so an interrupted pass never leaves
//! a Sidecar half-written.

use std::io::Write;
use std::time::Duration;

use anyhow::{anyhow, Result};
use futures::StreamExt;
use kube::api::PatchParams;
use meshscope_shared::istio::Sidecar;
use meshscope_shared::recommend::Recommendation;
use meshscope_shared::snapshot::PodId;
use serde_json::Value;

use super::cluster::Cluster;
use super::compare::{comparable, diffable, unified};
use super::plan::{read_plan, Planned, IN_FLIGHT};
use super::result::{ApplyResult, SidecarRow, CONFLICT, FORCE_HINT};
use super::waiting::{self, wait_advice};
use crate::args::DryRun;
use crate::interrupt::Interrupt;
use crate::istiod::Istiod;
use crate::live::Patched;
use crate::output::Printer;
use crate::request::ApplyRequest;
use crate::world::LiveCtx;
use meshscope_shared::meta::FIELD_MANAGER;

/// How a pass writes: the flags of `apply` that shape it.
#[derive(Clone, Debug)]
pub struct WriteSettings {
    pub dry_run: DryRun,
    pub force_conflicts: bool,
    /// How long `--wait` waits in all; `None` without `--wait`.
    pub wait: Option<Duration>,
    /// Print a unified diff of each Sidecar written (`--diff`).
    pub diff: bool,
    /// What to do when istiod cannot confirm (said with the error).
    pub wait_advice: &'static str,
}

impl WriteSettings {
    pub fn of(a: &ApplyRequest) -> Self {
        WriteSettings {
            dry_run: a.dry_run,
            force_conflicts: a.force_conflicts,
            wait: a.wait.as_ref().map(|w| w.limit),
            diff: a.diff,
            wait_advice: wait_advice(a),
        }
    }

    /// How long `--wait` waits in all (istiod is only asked with `--wait`).
    fn wait_limit(&self) -> Duration {
        self.wait.unwrap_or(Duration::MAX)
    }
}

/// A write's outcome: the object as the server now has it, or the result
/// and reason to report.
type Written = Result<Value, (ApplyResult, String)>;

/// Server-side applies `body` as `p`'s Sidecar (or only compares, for a
/// client dry run).
async fn write(ctx: &LiveCtx, s: &WriteSettings, p: &Planned, body: &Value) -> Written {
    if s.dry_run == DryRun::Client {
        // Client dry run: what the server would get, merged naively.
        return Ok(body.clone());
    }
    let mut pp = PatchParams::apply(FIELD_MANAGER);
    if s.dry_run == DryRun::Server {
        pp = pp.dry_run();
    }
    if s.force_conflicts {
        pp = pp.force();
    }
    let (ns, name) = (&p.sidecar.namespace, &p.sidecar.name);
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
/// starts: those are `None`.
fn write_all(
    ctx: &LiveCtx,
    s: &WriteSettings,
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
                (i, Some(write(ctx, s, &plan[i], &body).await))
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

/// One round of writes and what came of them.
pub struct Pass {
    /// A row per Sidecar: written, unchanged, skipped or failed.
    pub results: Vec<SidecarRow>,
    pub progress: Progress,
    /// Sidecars left with their old hosts as well as the new ones.
    pub not_narrowed: usize,
    /// Sidecars there were to write.
    pub planned: usize,
}

/// Writes the Sidecars of `recs` (a Sidecar that drops hosts in two steps
/// when `two_step` and `--wait`: the old and new hosts first), waiting for
/// istiod after each step when `istiods` are given.
pub fn write_pass(
    c: &Cluster<'_>,
    recs: &[Recommendation],
    s: &WriteSettings,
    mut istiods: Option<&mut [Istiod]>,
    two_step: bool,
    stop: &Interrupt,
    p: &mut Printer<'_>,
) -> Result<Pass> {
    let mut results: Vec<SidecarRow> = Vec::new();
    let waiting = s.wait.is_some() && two_step;
    let plan = read_plan(c, recs, waiting, &mut results)?;
    let mut progress = Progress::new(plan.len());
    if let Some(istiods) = istiods.as_deref_mut() {
        let pods: Vec<PodId> = plan.iter().flat_map(|p| p.pods.iter().copied()).collect();
        progress.waits.before = c
            .ctx
            .rt
            .block_on(waiting::snapshot(
                c.snap,
                istiods,
                &pods,
                s.wait_limit(),
                p.err,
            ))
            .map_err(|e| {
                anyhow!(
                    "cannot --wait, so nothing was applied: {e:#}\n{}",
                    s.wait_advice
                )
            })?;
    }
    let steps = Steps {
        c,
        s,
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

/// Where the writes stand.
pub struct Progress {
    pub waits: Waits,
    /// The object as the server has it, once its final form is written.
    applied: Vec<Option<Value>>,
    /// Written in step 1: the index and the Sidecar as written.
    step1: Vec<(usize, Sidecar)>,
    /// Not written, because of an interrupt.
    pub not_written: Vec<usize>,
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
    c: &'a Cluster<'a>,
    s: &'a WriteSettings,
    plan: &'a [Planned],
    stop: &'a Interrupt,
}

impl Steps<'_> {
    /// Step 1, and the wait for it.
    fn widen(
        &self,
        istiods: Option<&mut [Istiod]>,
        progress: &mut Progress,
        results: &mut Vec<SidecarRow>,
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
        for (i, done) in write_all(self.c.ctx, self.s, plan, jobs, self.stop) {
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
                Some(Err((res, why))) => results.push(SidecarRow::new(res, p.sidecar.clone(), why)),
            }
        }
        if let (Some(istiods), Some(limit), false) = (istiods, self.s.wait, self.stop.requested()) {
            let changed = applied_changed(plan, &progress.applied);
            let targets = waiting::targets(&plan_pods(plan), &progress.step1, &changed);
            let w = waiting::wait(
                self.c.snap,
                istiods,
                &targets,
                &progress.waits.before,
                limit,
                err,
            );
            if let Some(w) = wait_or_stop(self.c.ctx, self.stop, w)? {
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
        results: &mut Vec<SidecarRow>,
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
                progress.waits.before = self.c.ctx.rt.block_on(waiting::snapshot(
                    self.c.snap,
                    istiods,
                    &pods,
                    self.s.wait_limit().saturating_sub(progress.waits.elapsed),
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
        for (i, done) in write_all(self.c.ctx, self.s, plan, jobs, self.stop) {
            let p = &plan[i];
            match done {
                None => {}
                Some(Ok(v)) => {
                    progress.applied[i] = Some(v);
                    step2.push((i, p.desired_sc.clone()));
                }
                Some(Err((res, why))) => results.push(SidecarRow::new(res, p.sidecar.clone(), why)),
            }
        }
        if let (Some(istiods), Some(limit), false) = (istiods, self.s.wait, self.stop.requested()) {
            if !step2.is_empty() {
                let changed = vec![true; plan.len()];
                let targets = waiting::targets(&plan_pods(plan), &step2, &changed);
                let w = waiting::wait(
                    self.c.snap,
                    istiods,
                    &targets,
                    &progress.waits.before,
                    limit.saturating_sub(progress.waits.elapsed),
                    err,
                );
                if let Some(w) = wait_or_stop(self.c.ctx, self.stop, w)? {
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
        results: &mut Vec<SidecarRow>,
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
                "not narrowed: {} keeps its old hosts as well as the new ones, since {}",
                n.sidecar,
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
                    let sidecar = planned.sidecar.clone();
                    results.push(SidecarRow::new(ApplyResult::Configured, sidecar, ""));
                }
                continue;
            };
            if self.s.diff {
                unified(
                    &diffable(planned.existing.as_ref()),
                    &diffable(Some(v)),
                    &planned.sidecar.to_string(),
                    p.out,
                )?;
            }
            let result = result_of(planned, v);
            results.push(SidecarRow::new(result, planned.sidecar.clone(), ""));
        }
        Ok(not_narrowed.len())
    }
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

fn plan_pods(plan: &[Planned]) -> Vec<&[PodId]> {
    plan.iter().map(|p| p.pods.as_slice()).collect()
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
pub struct Waits {
    before: waiting::Before,
    pub elapsed: Duration,
    pub steps: usize,
    pub sidecars: usize,
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
