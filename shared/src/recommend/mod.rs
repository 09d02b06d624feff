//! Sidecar recommendations from observed traffic.

use std::collections::{BTreeMap, BTreeSet};

use crate::codes::Code;
use crate::istio::Sidecar;
use crate::labels as stable;
use crate::observe::{Observations, WorkloadTraffic};
use crate::required::{self, Required, REQUIRED_BY_ANNOTATION};
use crate::scope::{ConfigEstimate, Evaluator};
use crate::snapshot::{
    selector_matches, Labels, MeshSnapshot, SidecarId, WorkloadId, MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
};

mod hinted;
mod hosts;
mod objects;
pub mod savings;
mod selector;

pub use hinted::HINTED_ANNOTATION;
use hosts::{add_required, entry_for, needed_hosts, parse_listeners};
use objects::{
    build_sidecar, cumulative, evidence_meta, keeps, name_taken, own_sidecar, workload_meta,
};
pub use objects::{
    generated_for, orphaned, sidecar_name, with_hosts, EGRESS_ANNOTATION, NAMESPACE_SIDECAR_NAME,
    REQUESTS_ANNOTATION, SOURCES_ANNOTATION, WINDOW_ANNOTATION, WORKLOAD_KIND_LABEL,
    WORKLOAD_NAME_FULL_ANNOTATION, WORKLOAD_NAME_LABEL,
};
use selector::{fixed_for_life, fmt_labels, pod_label_sets};
pub use selector::{stable_selector, NO_STABLE_SELECTOR};

/// The egress entry that imports nothing (valid on every Istio version).
pub const CLOSED: &str = "~/*";

#[derive(Clone, Debug, Default)]
pub struct RecommendOptions {
    /// Extra `ns/host` entries for every recommendation.
    pub include: Vec<String>,
    pub allow_idle: bool,
    pub prune: bool,
    pub per_namespace: bool,
    /// `--from-manifest-hints`: every workload also needs the hosts its
    /// manifests name, and one with hints but no traffic gets a Sidecar.
    pub manifest_hints: Option<crate::hints::ManifestHints>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Create,
    /// A managed Sidecar exists and gains hosts (or loses them with prune).
    Update,
    Unchanged,
}

#[derive(Clone, Debug)]
pub enum Outcome {
    Sidecar {
        object: Box<Sidecar>,
        action: Action,
        /// Hosts added over the existing managed Sidecar.
        added: Vec<String>,
        /// Hosts of the existing managed Sidecar it drops (`--prune`).
        removed: Vec<String>,
    },
    /// A user-owned Sidecar already selects the workload; it is never
    /// replaced. `missing` lists observed hosts it does not import.
    UserOwned {
        sidecar: SidecarId,
        missing: Vec<String>,
    },
    Skipped(String),
}

/// How every "no traffic observed" skip reason starts.
pub const NO_EVIDENCE: &str = "no evidence";

impl Outcome {
    /// Skipped for want of observed traffic (as opposed to a selector or
    /// ownership problem).
    pub fn is_no_evidence(&self) -> bool {
        matches!(self, Outcome::Skipped(why) if why.starts_with(NO_EVIDENCE))
    }
}

#[derive(Clone, Debug)]
pub struct Recommendation {
    /// The workload, or for `--per-namespace` the first workload of it.
    pub workloads: Vec<WorkloadId>,
    pub namespace: String,
    pub outcome: Outcome,
    /// Observed dependencies as `ns/host` entries.
    pub dependencies: Vec<String>,
    /// The entries manifest hints add (`--from-manifest-hints`), whether or
    /// not traffic shows them too; hinted hosts that are not exported here
    /// are in `not_visible` instead.
    pub hinted: Vec<String>,
    /// Observed destinations that are registered but not exported here.
    pub not_visible: Vec<String>,
    /// Hosts added that no traffic shows: extension-provider services the
    /// mesh config makes Envoy call, and destinations the imported
    /// VirtualServices route to (an egress gateway). Those with a problem
    /// are reported and not written.
    pub required: Vec<Required>,
    /// Observed destinations that no Service or ServiceEntry defines,
    /// with why (`host:port: reason`). Never written into a Sidecar: a
    /// `*/host` would import nothing, or whatever defines it later.
    pub unknown: Vec<String>,
    /// What each observed edge meets under the recommended Sidecar (the
    /// mesh's outbound policy: meshscope writes none), or under the
    /// user-owned Sidecar that stays.
    pub edges: Vec<crate::edges::EdgeOutcome>,
    pub before: ConfigEstimate,
    pub after: Option<ConfigEstimate>,
    pub requests: u64,
    /// What the user should know about the recommendation: a selector that
    /// replaced the existing one, another workload's Sidecar that still
    /// selects this workload.
    pub notes: Vec<String>,
}

impl Recommendation {
    /// A recommendation for `workloads` in `ns` before anything is
    /// decided: skipped with no reason yet, no hosts, the current estimate.
    fn undecided(workloads: Vec<WorkloadId>, ns: &str, before: ConfigEstimate) -> Recommendation {
        Recommendation {
            workloads,
            namespace: ns.to_string(),
            outcome: Outcome::Skipped(String::new()),
            dependencies: Vec::new(),
            hinted: Vec::new(),
            not_visible: Vec::new(),
            required: Vec::new(),
            unknown: Vec::new(),
            edges: Vec::new(),
            before,
            after: None,
            requests: 0,
            notes: Vec::new(),
        }
    }

    pub fn sidecar(&self) -> Option<&Sidecar> {
        match &self.outcome {
            Outcome::Sidecar { object, .. } => Some(object),
            _ => None,
        }
    }

    /// The managed Sidecar already has this scope (only its evidence
    /// would differ): nothing to write.
    pub fn unchanged(&self) -> bool {
        matches!(
            self.outcome,
            Outcome::Sidecar {
                action: Action::Unchanged,
                ..
            }
        )
    }
}

/// Builds recommendations for `workloads` (injected, non-ambient ones).
pub fn recommend(
    snap: &MeshSnapshot,
    obs: &Observations,
    workloads: &[WorkloadId],
    opts: &RecommendOptions,
) -> Vec<Recommendation> {
    let mut eval = Evaluator::new(snap);
    let mut out = Vec::new();
    if opts.per_namespace {
        let mut by_ns: BTreeMap<&str, Vec<WorkloadId>> = BTreeMap::new();
        for &w in workloads {
            by_ns
                .entry(&snap.workloads[w].namespace)
                .or_default()
                .push(w);
        }
        for (ns, ws) in by_ns {
            out.push(recommend_namespace(snap, obs, ns, &ws, opts, &mut eval));
        }
        return out;
    }
    for &w in workloads {
        out.push(recommend_workload(snap, obs, w, opts, &mut eval));
    }
    resolve_overlaps(snap, &mut out);
    out
}

/// The recommendations as one set of objects: never two Sidecars of one
/// name (a later one is skipped, naming the first), and a note on each
/// workload that a managed Sidecar generated for another workload still
/// selects (MS0012), unless that Sidecar's own recommendation here stops
/// selecting it.
fn resolve_overlaps(snap: &MeshSnapshot, recs: &mut [Recommendation]) {
    let mut seen: BTreeMap<(String, String), WorkloadId> = BTreeMap::new();
    for r in recs.iter_mut() {
        let Some(name) = r.sidecar().and_then(|o| o.metadata.name.clone()) else {
            continue;
        };
        let key = (r.namespace.clone(), name);
        match seen.get(&key) {
            Some(first) => {
                r.outcome = Outcome::Skipped(format!(
                    "its Sidecar {}/{} is already recommended for {}; one object per name",
                    key.0,
                    key.1,
                    snap.workloads[*first].key()
                ));
                r.after = None;
                r.notes.clear();
            }
            None => {
                seen.insert(key, r.workloads[0]);
            }
        }
    }
    // What each recommended Sidecar will select once applied.
    let planned: BTreeMap<(String, String), Option<Labels>> = recs
        .iter()
        .filter_map(|r| {
            let o = r.sidecar()?;
            Some((
                (r.namespace.clone(), o.metadata.name.clone()?),
                o.spec.workload_selector.as_ref().map(|s| s.labels.clone()),
            ))
        })
        .collect();
    for r in recs.iter_mut() {
        let [w] = r.workloads[..] else { continue };
        let Some(ours) = r.sidecar().and_then(|o| o.metadata.name.clone()) else {
            continue;
        };
        let wl = &snap.workloads[w];
        let pods = pod_label_sets(snap, w);
        let matching = snap
            .select_sidecar(&wl.namespace, snap.workload_labels(w))
            .matching_selectors;
        for &s in &matching {
            let sc = &snap.sidecars[s];
            if !sc.managed || sc.name == ours {
                continue;
            }
            let Some((kind, name)) = generated_for(&sc.object.metadata) else {
                continue;
            };
            if kind == wl.kind && name == wl.name {
                continue;
            }
            let other = format!("{kind} {name}");
            match planned.get(&(sc.namespace.clone(), sc.name.clone())) {
                Some(Some(sel)) if !pods.iter().any(|l| selector_matches(sel, l)) => {
                    r.notes.push(format!(
                        "Sidecar {}, generated for {other}, selects it today; its recommended selector no longer does",
                        sc.key()
                    ))
                }
                _ => {
                    let until = if snap.find_workload(&kind, &sc.namespace, &name).is_some() {
                        format!(
                            "re-apply it: kubectl meshscope apply -n {} --workload {}/{name}",
                            sc.namespace,
                            kind.as_str().to_ascii_lowercase()
                        )
                    } else {
                        format!(
                            "{other} is gone: kubectl meshscope apply -n {} --prune deletes it",
                            sc.namespace
                        )
                    };
                    r.notes.push(format!(
                        "{}: Sidecar {}, generated for {other}, also selects it{}; {until}",
                        Code::ScopedByOtherSidecar,
                        sc.key(),
                        if matching.first() == Some(&s) {
                            " and is the one istiod applies"
                        } else {
                            ""
                        }
                    ))
                }
            }
        }
    }
}

/// The hosts to write, and those added to and removed from `existing`.
fn finalize_hosts(
    mut hosts: BTreeSet<String>,
    existing: Option<&[String]>,
    opts: &RecommendOptions,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    for h in &opts.include {
        hosts.insert(h.clone());
    }
    let mut added = Vec::new();
    if let Some(existing) = existing {
        let old: BTreeSet<String> = existing.iter().cloned().collect();
        added = hosts.difference(&old).cloned().collect();
        if !opts.prune {
            hosts.extend(old);
        }
    }
    // A closed scope only when nothing else is imported.
    if hosts.len() > 1 {
        hosts.remove(CLOSED);
    }
    if hosts.is_empty() {
        hosts.insert(CLOSED.to_string());
    }
    let removed = existing
        .into_iter()
        .flatten()
        .filter(|h| !hosts.contains(*h))
        .cloned()
        .collect();
    (hosts.into_iter().collect(), added, removed)
}

fn recommend_workload(
    snap: &MeshSnapshot,
    obs: &Observations,
    w: WorkloadId,
    opts: &RecommendOptions,
    eval: &mut Evaluator<'_>,
) -> Recommendation {
    let wl = &snap.workloads[w];
    let ns = wl.namespace.as_str();
    let labels = snap.workload_labels(w);
    let selection = snap.select_sidecar(ns, labels);
    let before = eval.estimate_for(selection.source, ns, wl.inbound);
    let mut rec = Recommendation::undecided(vec![w], ns, before);
    let empty = WorkloadTraffic::default();
    let traffic = obs.of(w);
    let t = traffic.unwrap_or(&empty);
    let current = match selection.source {
        // The implicit scope imports */*: the wildcard choice.
        crate::scope::ScopeSource::Implicit => None,
        source => Some(eval.visible_for(source, ns)),
    };
    let mut needed = needed_hosts(snap, ns, t, current.as_deref());
    rec.dependencies = needed.hosts.iter().cloned().collect();
    let hints = opts.manifest_hints.as_ref().map(|h| h.of(w));
    let hint_traffic = hints.filter(|h| !h.is_empty()).map(hinted::as_traffic);
    if let Some(ht) = &hint_traffic {
        rec.hinted = hinted::merge(snap, ns, ht, current.as_deref(), &mut needed);
    }
    let mut req = std::mem::take(&mut needed.routed);
    add_required(snap, ns, &[Some(labels)], &mut req, &mut needed.hosts);
    rec.required = req;
    rec.not_visible = needed.not_visible.iter().cloned().collect();
    rec.unknown = needed.unknown.iter().cloned().collect();
    if traffic.is_none() && rec.hinted.is_empty() && !opts.allow_idle {
        rec.outcome = Outcome::Skipped(match called_by(snap, obs, w) {
            // Called, but its own proxy's log is missing: what it calls is
            // unknown, and closing its scope would cut those calls.
            Some((requests, callers)) => format!(
                "{NO_EVIDENCE}: {requests} requests to it were seen in the logs of its callers ({callers}), but none from its own proxy, so what it calls is unknown; read its own istio-proxy log too (--from-pod-logs, or add its file to --access-log){}",
                no_hints_why(opts, hints)
            ),
            None => format!("{NO_EVIDENCE}: no traffic from or to this workload was observed{} (use --allow-idle to close its scope anyway)", no_hints_why(opts, hints)),
        });
        return rec;
    }
    let (mut annotations, requests) = evidence_meta(obs, &[t]);
    rec.requests = requests;
    if let Some(v) = required::annotation(&rec.required) {
        annotations.insert(REQUIRED_BY_ANNOTATION.to_string(), v);
    }
    hinted::annotate(&mut annotations, &rec.hinted);

    // A user-owned Sidecar that selects the workload is never replaced.
    if let Some(&first) = selection.matching_selectors.first() {
        let sc = &snap.sidecars[first];
        if !sc.managed {
            let vis = eval.visible_for(selection.source, ns);
            let policy = crate::edges::policy_for(snap, selection.source);
            rec.edges = crate::edges::workloads_edge_outcomes(snap, obs, &[w], &vis, &policy);
            let mut missing = observed_outside(snap, ns, t, &vis);
            if let Some(ht) = &hint_traffic {
                missing.extend(observed_outside(snap, ns, ht, &vis));
            }
            missing.extend(required_outside(snap, &rec.required, &vis));
            missing.sort();
            missing.dedup();
            rec.outcome = Outcome::UserOwned {
                sidecar: first,
                missing,
            };
            return rec;
        }
    }
    let managed = own_sidecar(snap, w).map(|s| &snap.sidecars[s]);
    if let Some(m) = managed {
        cumulative(&m.object, &mut annotations);
    }
    let selector = match stable_selector(snap, w) {
        Ok(sel) => sel,
        Err(why) => {
            rec.outcome = Outcome::Skipped(match managed.and_then(|m| m.selector.as_ref()) {
                Some(old) => format!(
                    "{why}; its Sidecar {} is left as it is (selector {})",
                    managed.map(|m| m.key()).unwrap_or_default(),
                    fmt_labels(old)
                ),
                None => why,
            });
            return rec;
        }
    };
    if let Some(old) = managed.and_then(|m| m.selector.as_ref()) {
        if *old != selector {
            rec.notes.push(selector_change(snap, w, old, &selector));
        }
    }
    let existing: Option<Vec<String>> =
        managed.map(|m| m.egress_hosts().map(String::from).collect());
    let (hosts, added, removed) = finalize_hosts(needed.hosts, existing.as_deref(), opts);
    let name = managed
        .map(|m| m.name.clone())
        .unwrap_or_else(|| sidecar_name(&wl.kind, &wl.name));
    if let Some(why) = name_taken(snap, ns, &name) {
        rec.outcome = Outcome::Skipped(why);
        return rec;
    }
    let mut labels = BTreeMap::new();
    labels.insert(MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string());
    let annotations = workload_meta(wl, &mut labels, annotations);
    let action = match managed {
        None => Action::Create,
        Some(m) => {
            let old_sorted: BTreeSet<&String> = existing.iter().flatten().collect();
            let new_sorted: BTreeSet<&String> = hosts.iter().collect();
            if old_sorted == new_sorted
                && m.object.spec.egress.len() == 1
                && m.selector.as_ref() == Some(&selector)
                && keeps(&m.object, &labels, &annotations, &hosts)
            {
                Action::Unchanged
            } else {
                Action::Update
            }
        }
    };
    let after_vis = snap.visible(ns, &parse_listeners(snap, &hosts));
    rec.after = Some(snap.estimate(&after_vis, wl.inbound));
    rec.edges = crate::edges::workloads_edge_outcomes(
        snap,
        obs,
        &[w],
        &after_vis,
        &crate::edges::mesh_policy(snap),
    );
    rec.outcome = Outcome::Sidecar {
        object: Box::new(build_sidecar(
            name,
            ns,
            Some(selector),
            hosts,
            labels,
            annotations,
        )),
        action,
        added,
        removed,
    };
    rec
}

/// The note for a managed Sidecar whose selector is replaced, with why the
/// old one did not stay true.
fn selector_change(snap: &MeshSnapshot, w: WorkloadId, old: &Labels, new: &Labels) -> String {
    let wl = &snap.workloads[w];
    let mut why: Vec<String> = old
        .keys()
        .filter(|k| !stable::usable(k, fixed_for_life(wl, k)))
        .map(|k| match stable::unstable(k) {
            Some(c) => format!("{k} changes {}", c.as_str()),
            None => format!("{k} is not in the workload's spec.selector"),
        })
        .collect();
    let others: Vec<String> = snap
        .workloads_in(&wl.namespace)
        .iter()
        .filter(|o| **o != w)
        .filter(|o| {
            pod_label_sets(snap, **o)
                .iter()
                .any(|l| selector_matches(old, l))
        })
        .map(|o| format!("{} {}", snap.workloads[*o].kind, snap.workloads[*o].name))
        .collect();
    if !others.is_empty() {
        why.push(format!("it also selected {}", others.join(", ")));
    }
    if why.is_empty() {
        why.push(if wl.selector.as_ref().is_some_and(|s| s == new) {
            "the workload's own spec.selector stays true".to_string()
        } else {
            "a narrower stable selector stays true".to_string()
        });
    }
    format!(
        "selector {} replaced by {} ({})",
        fmt_labels(old),
        fmt_labels(new),
        why.join("; ")
    )
}

fn recommend_namespace(
    snap: &MeshSnapshot,
    obs: &Observations,
    ns: &str,
    ws: &[WorkloadId],
    opts: &RecommendOptions,
    eval: &mut Evaluator<'_>,
) -> Recommendation {
    let defaults: Vec<SidecarId> = snap
        .sidecars_in(ns)
        .iter()
        .copied()
        .filter(|s| snap.sidecars[*s].selector.is_none())
        .collect();
    let before = eval.estimate_for(crate::scope::ScopeSource::Implicit, ns, Default::default());
    let mut rec = Recommendation::undecided(ws.to_vec(), ns, before);
    let traffic: Vec<&WorkloadTraffic> = ws.iter().filter_map(|w| obs.of(*w)).collect();
    let mut current = Vec::new();
    for &w in ws {
        let Some(t) = obs.of(w) else { continue };
        let source = snap.select_sidecar(ns, snap.workload_labels(w)).source;
        let vis = match source {
            crate::scope::ScopeSource::Implicit => None,
            source => Some(eval.visible_for(source, ns)),
        };
        current.push((t, vis));
    }
    let mut hosts = BTreeSet::new();
    let mut not_visible = BTreeSet::new();
    let mut unknown = BTreeSet::new();
    let mut req: Vec<Required> = Vec::new();
    for (t, vis) in &current {
        let n = needed_hosts(snap, ns, t, vis.as_deref());
        hosts.extend(n.hosts);
        not_visible.extend(n.not_visible);
        for r in n.routed {
            required::merge(&mut req, r);
        }
        unknown.extend(n.unknown);
    }
    rec.dependencies = hosts.iter().cloned().collect();
    let hint_traffic = namespace_hints(snap, opts, ns, ws);
    if let Some(ht) = &hint_traffic {
        let mut n = hosts::Needed {
            hosts,
            not_visible,
            routed: req,
            unknown,
        };
        rec.hinted = hinted::merge(snap, ns, ht, None, &mut n);
        (hosts, not_visible, req, unknown) = (n.hosts, n.not_visible, n.routed, n.unknown);
    }
    rec.not_visible = not_visible.into_iter().collect();
    let mut label_sets: Vec<Option<&Labels>> = vec![None];
    label_sets.extend(ws.iter().map(|w| Some(snap.workload_labels(*w))));
    add_required(snap, ns, &label_sets, &mut req, &mut hosts);
    rec.required = req;
    rec.unknown = unknown.into_iter().collect();
    if traffic.is_empty() && rec.hinted.is_empty() && !opts.allow_idle {
        rec.outcome = Outcome::Skipped(format!(
            "{NO_EVIDENCE}: no traffic was observed in namespace {ns} (use --allow-idle to close it anyway)"
        ));
        return rec;
    }
    if let Some(&first) = defaults.first() {
        let sc = &snap.sidecars[first];
        if !sc.managed {
            let source = crate::scope::ScopeSource::Namespace(first);
            let vis = eval.visible_for(source, ns);
            let policy = crate::edges::policy_for(snap, source);
            rec.edges = crate::edges::workloads_edge_outcomes(snap, obs, ws, &vis, &policy);
            let mut missing = BTreeSet::new();
            for t in traffic.iter().copied().chain(hint_traffic.as_ref()) {
                missing.extend(observed_outside(snap, ns, t, &vis));
            }
            missing.extend(required_outside(snap, &rec.required, &vis));
            rec.outcome = Outcome::UserOwned {
                sidecar: first,
                missing: missing.into_iter().collect(),
            };
            return rec;
        }
    }
    let managed = defaults.first().map(|s| &snap.sidecars[*s]);
    let existing: Option<Vec<String>> =
        managed.map(|m| m.egress_hosts().map(String::from).collect());
    let (mut annotations, requests) = evidence_meta(obs, &traffic);
    if let Some(m) = managed {
        cumulative(&m.object, &mut annotations);
    }
    rec.requests = requests;
    if let Some(v) = required::annotation(&rec.required) {
        annotations.insert(REQUIRED_BY_ANNOTATION.to_string(), v);
    }
    hinted::annotate(&mut annotations, &rec.hinted);
    let (hosts, added, removed) = finalize_hosts(hosts, existing.as_deref(), opts);
    let mut labels = BTreeMap::new();
    labels.insert(MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string());
    let action = match (&existing, managed) {
        (None, _) | (_, None) => Action::Create,
        (Some(old), Some(m)) => {
            let a: BTreeSet<&String> = old.iter().collect();
            let b: BTreeSet<&String> = hosts.iter().collect();
            if a == b && keeps(&m.object, &labels, &annotations, &hosts) {
                Action::Unchanged
            } else {
                Action::Update
            }
        }
    };
    let after_vis = snap.visible(ns, &parse_listeners(snap, &hosts));
    rec.after = Some(snap.estimate(&after_vis, Default::default()));
    rec.edges = crate::edges::workloads_edge_outcomes(
        snap,
        obs,
        ws,
        &after_vis,
        &crate::edges::mesh_policy(snap),
    );
    let name = managed
        .map(|m| m.name.clone())
        .unwrap_or_else(|| NAMESPACE_SIDECAR_NAME.to_string());
    if let Some(why) = name_taken(snap, ns, &name) {
        rec.outcome = Outcome::Skipped(why);
        return rec;
    }
    rec.outcome = Outcome::Sidecar {
        object: Box::new(build_sidecar(name, ns, None, hosts, labels, annotations)),
        action,
        added,
        removed,
    };
    rec
}

/// Why a workload without traffic has no hints either, for its "no
/// evidence" reason (nothing without `--from-manifest-hints`).
/// The requests other workloads were seen making to a Service of `w`,
/// and those workloads (the first few, by name), when there were any.
fn called_by(snap: &MeshSnapshot, obs: &Observations, w: WorkloadId) -> Option<(u64, String)> {
    let mut requests = 0;
    let mut callers = BTreeSet::new();
    for (c, t) in &obs.traffic {
        for ((host, _), e) in &t.outbound {
            let serves = snap.services_named(host).iter().any(|s| snap.serves(w, *s));
            if serves && *c != w {
                requests += e.requests;
                callers.insert(snap.workloads[*c].name.as_str());
            }
        }
    }
    if requests == 0 {
        return None;
    }
    let shown: Vec<&str> = callers.iter().take(3).copied().collect();
    let more = callers.len().saturating_sub(shown.len());
    let mut named = shown.join(", ");
    if more > 0 {
        named += &format!(" and {more} more");
    }
    Some((requests, named))
}

fn no_hints_why(opts: &RecommendOptions, hints: Option<&[crate::hints::Hint]>) -> &'static str {
    match (
        opts.manifest_hints.is_some(),
        hints.is_some_and(|h| !h.is_empty()),
    ) {
        (false, _) => "",
        (true, false) => " and its manifests name no registered host",
        (true, true) => " and no host its manifests name is exported to its namespace",
    }
}

/// The hints of a namespace's workloads, as one traffic, when there are
/// any.
fn namespace_hints(
    snap: &MeshSnapshot,
    opts: &RecommendOptions,
    ns: &str,
    ws: &[WorkloadId],
) -> Option<WorkloadTraffic> {
    let h = opts.manifest_hints.as_ref()?;
    let all: Vec<&crate::hints::Hint> = ws
        .iter()
        .filter(|w| snap.workloads[**w].namespace == ns)
        .flat_map(|w| h.of(*w))
        .collect();
    (!all.is_empty()).then(|| hinted::as_traffic(all))
}

/// Required hosts (as written, without a problem) that a scope does not
/// import.
pub fn required_outside(
    snap: &MeshSnapshot,
    required: &[Required],
    vis: &crate::scope::Visible,
) -> Vec<String> {
    required
        .iter()
        .filter(|r| r.problem.is_none())
        .filter(|r| {
            let (ns, host) = r.host.split_once('/').unwrap_or(("*", &r.host));
            !snap.services_named(host).iter().any(|s| {
                (ns == "*" || snap.services[*s].namespace == ns) && vis.imports_service(*s)
            })
        })
        .map(|r| r.host.clone())
        .collect()
}

/// Observed destinations (as `ns/host`) that a scope does not import.
pub fn observed_outside(
    snap: &MeshSnapshot,
    ns: &str,
    t: &WorkloadTraffic,
    vis: &crate::scope::Visible,
) -> Vec<String> {
    let mut out = BTreeSet::new();
    for (host, _) in t.outbound.keys() {
        let imported = snap
            .services_named(host)
            .iter()
            .any(|s| vis.imports_service(*s));
        if !imported {
            match snap.destination_service(host, ns) {
                Some(svc) => out.insert(entry_for(snap, svc)),
                None => out.insert(format!("*/{host}")),
            };
        }
    }
    out.into_iter().collect()
}
