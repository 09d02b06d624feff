//! Recommending in a loaded world: what `recommend`, `apply`, `diff`,
//! `impact`, `report` and `apply --watch` compute from it, and the
//! summary they print of it. What is recommended is `shared`'s
//! ([`meshscope_shared::recommend`]).

use std::collections::BTreeSet;

use anyhow::{bail, Result};
use meshscope_shared as scope;
use scope::observe::Observations;
use scope::recommend::{self, Action, Outcome as RecOutcome, RecommendOptions, Recommendation};
use scope::snapshot::WorkloadId;

use super::World;
use crate::output::{self, bytes, Printer};
use crate::request::RecommendSpec;

impl World {
    /// Loads the world and computes the recommendations `recommend`, `apply`
    /// and `diff` share.
    pub fn load_recommended(
        spec: &RecommendSpec,
        p: &mut Printer<'_>,
    ) -> Result<(World, Vec<Recommendation>)> {
        let world = World::load(&spec.mesh, p.err)?;
        world.report_ingest(p)?;
        world.refuse_logs_without_access_lines(spec)?;
        world.warn_context_namespace_saw_nothing(spec, p)?;
        if world.obs.is_none() && world.hints.is_none() {
            writeln!(
                p.err,
                "warning: {}",
                scope::notes::no_traffic_source(spec.allow_idle)
            )?;
        }
        let recs = world.recommend(spec)?;
        Ok((world, recs))
    }

    /// Access logs that held lines, none of them an access-log line (an
    /// nginx log, an application's own output), are an error, not "0
    /// Sidecars": a pipeline that applies what `recommend` prints would
    /// otherwise pass on nothing. An empty log is only warned about (a quiet
    /// mesh), as the files themselves were.
    fn refuse_logs_without_access_lines(&self, spec: &RecommendSpec) -> Result<()> {
        let Some(obs) = &self.obs else {
            return Ok(());
        };
        if spec.mesh.access_logs().is_empty() || obs.stats.lines == 0 || obs.stats.access_lines > 0
        {
            return Ok(());
        }
        bail!(
            "the access logs given held {} and not one access-log line (see the warnings above), so nothing can be recommended from them: give istio-proxy's access log (kubectl logs POD -c istio-proxy), or read the cluster with --from-pod-logs or --prometheus",
            output::plural(obs.stats.lines as usize, "line", "lines")
        )
    }

    /// Against a cluster with neither `-n` nor `-A`, the context's namespace
    /// is read; when not one line's source is a pod of it, the traffic was
    /// most likely another namespace's: say which namespace was read and how
    /// to read the right one, rather than only "0 Sidecars".
    fn warn_context_namespace_saw_nothing(
        &self,
        spec: &RecommendSpec,
        p: &mut Printer<'_>,
    ) -> Result<()> {
        let (Some(obs), Some(ns)) = (&self.obs, self.default_namespace()) else {
            return Ok(());
        };
        if spec.mesh.namespace.is_some() || spec.mesh.all_namespaces {
            return Ok(());
        }
        let lines = obs.stats.access_lines;
        if lines == 0 || obs.stats.unattributed < lines {
            return Ok(());
        }
        writeln!(
            p.err,
            "warning: no -n or -A, so namespace {ns} (the context's) was read, and none of the {} came from a pod in it: give the namespace of the workloads that sent them with -n NAMESPACE, or read every namespace with -A",
            output::plural(lines as usize, "observed call (access-log line or Prometheus sample)", "observed calls (access-log lines or Prometheus samples)")
        )?;
        Ok(())
    }

    /// The recommendations `spec` asks for, in a loaded world.
    pub fn recommend(&self, spec: &RecommendSpec) -> Result<Vec<Recommendation>> {
        let world = self;
        let snap = &world.snap;
        let mut targets: Vec<WorkloadId> = Vec::new();
        if let Some(workload) = &spec.workload {
            let ns = spec
                .mesh
                .namespace
                .clone()
                .or_else(|| world.default_namespace());
            let w = world.find_workload(workload, ns.as_deref())?;
            let wl = &snap.workloads[w];
            if !wl.injection.sidecar {
                bail!(
                    "{} has no Envoy sidecar ({}), so a Sidecar would not apply to it",
                    wl.key(),
                    wl.injection.reason
                );
            }
            targets.push(w);
        } else {
            targets.extend(snap.sidecar_workloads().filter(|w| world.in_scope(*w)));
        }
        let opts = RecommendOptions {
            include: spec.include.clone(),
            allow_idle: spec.allow_idle,
            prune: spec.prune_hosts,
            per_namespace: spec.per_namespace,
            manifest_hints: world.hints.clone(),
        };
        Ok(world.recommendations(&targets, &opts))
    }

    /// The recommendations for `workloads` of this world.
    pub fn recommendations(
        &self,
        workloads: &[WorkloadId],
        opts: &RecommendOptions,
    ) -> Vec<Recommendation> {
        let empty = Observations::default();
        let obs = self.obs.as_ref().unwrap_or(&empty);
        recommend::recommend(&self.snap, obs, workloads, opts)
    }

    /// The recommendation summary, on stderr.
    /// The readiness of the gateways in scope for istiod's cluster
    /// filtering (MS0025, MS0026), judged with the traffic read, on
    /// stderr: a gateway gets no Sidecar, but its traffic says what it
    /// needs. Nothing when the Gateways could not be read.
    pub fn gateway_readiness(&self, p: &mut Printer<'_>) -> Result<()> {
        if self.gateways_unknown {
            return Ok(());
        }
        let snap = &self.snap;
        let mut eval = meshscope_shared::scope::Evaluator::new(snap);
        for w in 0..snap.workloads.len() {
            let wl = &snap.workloads[w];
            if self
                .namespaces
                .as_ref()
                .is_some_and(|n| !n.contains(&wl.namespace))
            {
                continue;
            }
            let found = meshscope_shared::gateway_readiness::readiness(
                snap,
                self.obs.as_ref(),
                w,
                &mut eval,
            );
            if let Some(f) = found {
                writeln!(p.err, "note: {}: {}: {}", wl.key(), f.code, f.message)?;
            }
        }
        Ok(())
    }

    pub fn summarize_recommendations(
        &self,
        recs: &[Recommendation],
        p: &mut Printer<'_>,
    ) -> Result<()> {
        let world = self;
        let snap = &world.snap;
        let mut created = 0;
        let mut updated = 0;
        let mut unchanged = 0;
        let mut user_owned = 0;
        let mut no_evidence = 0;
        let mut other_skips = Vec::new();
        let (mut hosts_added, mut hosts_removed) = (0, 0);
        // Objects, not recommendations: one namespace-wide Sidecar serves many.
        let mut seen = BTreeSet::new();
        for r in recs {
            for n in &r.notes {
                writeln!(p.err, "note: {}: {n}", snap.workloads[r.workloads[0]].key())?;
            }
            for u in &r.unknown {
                writeln!(
                    p.err,
                    "warning: {}: called {u}; left out of its Sidecar (a `*/` host would import nothing)",
                    snap.workloads[r.workloads[0]].key()
                )?;
            }
            match &r.outcome {
                RecOutcome::Sidecar {
                    action,
                    object,
                    added,
                    removed,
                } => {
                    if !seen.insert((r.namespace.clone(), object.metadata.name.clone())) {
                        continue;
                    }
                    hosts_added += added.len();
                    hosts_removed += removed.len();
                    match action {
                        Action::Create => created += 1,
                        Action::Update => updated += 1,
                        Action::Unchanged => unchanged += 1,
                    }
                }
                RecOutcome::UserOwned { sidecar, missing } => {
                    user_owned += 1;
                    writeln!(
                        p.err,
                        "note: {} is scoped by user-owned Sidecar {}, which is kept{}",
                        snap.workloads[r.workloads[0]].key(),
                        snap.sidecars[*sidecar].key(),
                        if missing.is_empty() {
                            String::new()
                        } else {
                            format!("; observed hosts it lacks: {}", missing.join(", "))
                        }
                    )?;
                }
                o @ RecOutcome::Skipped(_) if o.is_no_evidence() => no_evidence += 1,
                RecOutcome::Skipped(why) => {
                    other_skips.push(format!("{}: {why}", snap.workloads[r.workloads[0]].key()))
                }
            }
        }
        for s in &other_skips {
            writeln!(p.err, "skipped {s}")?;
        }
        // Only the selected workloads' traffic: `-l`, `-n` and `--workload`
        // leave the others' destinations out of the recommendations, and so
        // out of the warnings.
        let selected: BTreeSet<WorkloadId> = recs
            .iter()
            .flat_map(|r| r.workloads.iter().copied())
            .collect();
        if let Some(obs) = &world.obs {
            for u in obs.unregistered_from(&selected).take(20) {
                writeln!(
                    p.err,
                    "unregistered destination: {} from {} ({}{}{})",
                    u.address,
                    snap.workloads[u.workload].key(),
                    output::plural(u.requests as usize, "request", "requests"),
                    u.authority
                        .as_deref()
                        .map(|a| format!(", authority {a}"))
                        .unwrap_or_default(),
                    if u.blocked { ", blocked" } else { "" }
                )?;
            }
        }
        let hosts = match (hosts_added, hosts_removed) {
            (0, 0) => String::new(),
            (a, 0) => format!(" (+{})", output::plural(a, "host", "hosts")),
            (a, r) => format!(" (+{a} -{})", output::plural(r, "host", "hosts")),
        };
        let skipped = no_evidence + user_owned + other_skips.len();
        p.summary(
            format_args!(
                "{}: {created} to create, {updated} to update{hosts}, {unchanged} unchanged; {} skipped (no evidence: {no_evidence}, user-owned: {user_owned}, other: {})",
                output::plural(created + updated + unchanged, "Sidecar", "Sidecars"),
                output::plural(skipped, "workload", "workloads"),
                other_skips.len()
            ),
        )?;
        let saved = recommend::savings::savings(snap, recs);
        if saved.proxies > 0 {
            p.summary(format_args!(
                "xDS for the {} of these workloads: {} → {} clusters, {} → {} of config (estimated; verify measures it on istiod)",
                output::plural(saved.proxies as usize, "proxy", "proxies"),
                saved.clusters_now,
                saved.clusters_after,
                bytes(saved.bytes_now),
                bytes(saved.bytes_after)
            ))?;
        }
        Ok(())
    }
}
