//! Sidecar recommendations from observed traffic.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::host::{hosts_overlap, HostEntry};
use crate::istio::{EgressListener, Sidecar, SidecarSpec, WorkloadSelector};
use crate::labels::{self as stable, label_value};
use crate::observe::{Observations, WorkloadTraffic};
use crate::required::{self, Required, REQUIRED_BY_ANNOTATION};
use crate::scope::{ConfigEstimate, Evaluator};
use crate::snapshot::{
    selector_matches, Labels, Listener, MeshSnapshot, SidecarId, SvcId, WorkloadId, WorkloadKind,
    MANAGED_BY_LABEL, MANAGED_BY_VALUE,
};

pub const WORKLOAD_KIND_LABEL: &str = "meshscope.io/workload-kind";
/// The workload a Sidecar was generated for, as a label value (at most 63
/// characters: longer names are cut and end in a hash, see
/// [`crate::labels::label_value`]).
pub const WORKLOAD_NAME_LABEL: &str = "meshscope.io/workload-name";
/// The full workload name, when [`WORKLOAD_NAME_LABEL`] had to be cut.
pub const WORKLOAD_NAME_FULL_ANNOTATION: &str = "meshscope.io/workload-name-full";
pub const SOURCES_ANNOTATION: &str = "meshscope.io/sources";
pub const WINDOW_ANNOTATION: &str = "meshscope.io/window";
pub const REQUESTS_ANNOTATION: &str = "meshscope.io/requests";
/// The egress meshscope wrote, as JSON: `verify` compares it with the live
/// spec to tell an edit made outside meshscope.
pub const EGRESS_ANNOTATION: &str = "meshscope.io/egress";
/// The egress entry that imports nothing (valid on every Istio version).
pub const CLOSED: &str = "~/*";

#[derive(Clone, Debug, Default)]
pub struct RecommendOptions {
    /// Extra `ns/host` entries for every recommendation.
    pub include: Vec<String>,
    pub allow_idle: bool,
    pub prune: bool,
    pub per_namespace: bool,
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
    pub fn sidecar(&self) -> Option<&Sidecar> {
        match &self.outcome {
            Outcome::Sidecar { object, .. } => Some(object),
            _ => None,
        }
    }
}

/// How every "no stable selector" skip reason starts.
pub const NO_STABLE_SELECTOR: &str = "no stable selector";

/// The label sets of a workload's pods, or its template's before any pod
/// exists.
fn pod_label_sets(snap: &MeshSnapshot, w: WorkloadId) -> Vec<&Labels> {
    let wl = &snap.workloads[w];
    if wl.pods.is_empty() {
        vec![&wl.labels]
    } else {
        wl.pods.iter().map(|p| &snap.pods[*p].labels).collect()
    }
}

/// The labels that name an application, in the order tried.
const IDENTITY: &[&str] = &["app", "app.kubernetes.io/name"];

/// Label keys tried first when a selector needs more than the workload's
/// own `matchLabels`.
const PREFERRED: &[&str] = &[
    "app",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
];

/// A selector for a workload's pods that stays true for the workload's
/// life: it selects all of its pods and no pod (or template) of another
/// workload in the namespace, and holds no label that changes per release,
/// per run or per pod ([`crate::labels::UNSTABLE_LABELS`]).
///
/// It starts from the controller's own `spec.selector.matchLabels`
/// (immutable in apps/v1), used whole when it selects only this workload's
/// pods; otherwise the fewest stable pod-template labels that make it
/// unique are added. Jobs and CronJobs (whose generated selectors are per
/// run) and bare pods start from nothing and use their template's or their
/// own labels. The error says why no such selector exists.
pub fn stable_selector(snap: &MeshSnapshot, w: WorkloadId) -> Result<Labels, String> {
    let wl = &snap.workloads[w];
    let own = pod_label_sets(snap, w);
    let on_every_pod = |k: &String, v: &String| own.iter().all(|l| l.get(k) == Some(v));
    let others: Vec<(WorkloadId, &Labels)> = snap
        .workloads_in(&wl.namespace)
        .iter()
        .filter(|o| **o != w)
        .flat_map(|o| pod_label_sets(snap, *o).into_iter().map(move |l| (*o, l)))
        .collect();
    let selects_other = |sel: &Labels| {
        others
            .iter()
            .find(|(_, l)| selector_matches(sel, l))
            .map(|(o, _)| *o)
    };
    let mut base = Labels::new();
    for (k, v) in wl.selector.iter().flatten() {
        if stable::usable(k, true) && on_every_pod(k, v) {
            base.insert(k.clone(), v.clone());
        }
    }
    // Without a selector of its own, a workload starts from its name label
    // (`app`, else `app.kubernetes.io/name`), so that `version: v1` alone
    // is never a bare pod's or Job's selector.
    if base.is_empty() {
        if let Some((k, v)) = IDENTITY
            .iter()
            .find_map(|k| wl.labels.get_key_value(*k))
            .filter(|(k, v)| stable::usable(k, true) && on_every_pod(k, v))
        {
            base.insert(k.clone(), v.clone());
        }
    }
    if !base.is_empty() && selects_other(&base).is_none() {
        return Ok(base);
    }
    // Candidate keys: stable template labels every pod carries with the
    // same value.
    let mut keys: Vec<(&String, &String)> = wl
        .labels
        .iter()
        .filter(|(k, v)| {
            !base.contains_key(*k) && stable::usable(k, fixed_for_life(wl, k)) && on_every_pod(k, v)
        })
        .collect();
    let rank = |k: &str| {
        PREFERRED
            .iter()
            .position(|p| *p == k)
            .unwrap_or(PREFERRED.len())
    };
    keys.sort_by(|a, b| rank(a.0).cmp(&rank(b.0)).then(a.0.cmp(b.0)));
    keys.truncate(16);
    let n = keys.len();
    for size in 1..=n {
        // Subsets of `size` keys in rank order (lexicographic combinations).
        let mut idx: Vec<usize> = (0..size).collect();
        loop {
            let mut sel = base.clone();
            sel.extend(idx.iter().map(|i| (keys[*i].0.clone(), keys[*i].1.clone())));
            if selects_other(&sel).is_none() {
                return Ok(sel);
            }
            // next combination
            let mut i = size;
            while i > 0 && idx[i - 1] == n - size + i - 1 {
                i -= 1;
            }
            if i == 0 {
                break;
            }
            idx[i - 1] += 1;
            for j in i..size {
                idx[j] = idx[j - 1] + 1;
            }
        }
    }
    Err(no_stable_selector(snap, w, &base, &keys, selects_other))
}

/// Does a label keep its value for the workload's whole life? Its
/// controller's `matchLabels` do (immutable), and so do all the labels of a
/// bare pod and of a Job (whose template is immutable: a new release is a
/// new Job). A Deployment's, StatefulSet's, DaemonSet's or CronJob's
/// template changes with each release.
fn fixed_for_life(wl: &crate::snapshot::Workload, key: &str) -> bool {
    matches!(wl.kind, WorkloadKind::Pod | WorkloadKind::Job)
        || wl.selector.as_ref().is_some_and(|s| s.contains_key(key))
}

/// Why [`stable_selector`] found nothing: which workload every stable
/// selector also selects, and the unstable labels that alone tell them
/// apart.
fn no_stable_selector(
    snap: &MeshSnapshot,
    w: WorkloadId,
    base: &Labels,
    keys: &[(&String, &String)],
    selects_other: impl Fn(&Labels) -> Option<WorkloadId>,
) -> String {
    let wl = &snap.workloads[w];
    let mut widest = base.clone();
    widest.extend(keys.iter().map(|(k, v)| ((*k).clone(), (*v).clone())));
    if widest.is_empty() {
        return format!(
            "{NO_STABLE_SELECTOR}: none of its pod labels stays the same across releases, runs and pods (see kubectl meshscope codes MS0012)"
        );
    }
    let Some(other) = selects_other(&widest) else {
        // Only reachable past the 16 candidate keys tried.
        return format!("{NO_STABLE_SELECTOR}: too many labels to choose from");
    };
    let o = &snap.workloads[other];
    let theirs = pod_label_sets(snap, other);
    let apart: Vec<String> = wl
        .labels
        .iter()
        .filter(|(k, v)| {
            !stable::usable(k, fixed_for_life(wl, k))
                && theirs.iter().any(|l| l.get(*k) != Some(*v))
        })
        .map(|(k, _)| match stable::unstable(k) {
            Some(c) => format!("{k} changes {}", c.as_str()),
            None => format!("{k} may change per release (not in spec.selector)"),
        })
        .collect();
    let why = if apart.is_empty() {
        String::new()
    } else {
        format!(
            "; only labels that do not stay true tell them apart ({})",
            apart.join(", ")
        )
    };
    format!(
        "{NO_STABLE_SELECTOR}: its stable labels ({}) also select the pods of {} {}{why}",
        fmt_labels(&widest),
        o.kind,
        o.name
    )
}

fn fmt_labels(l: &Labels) -> String {
    l.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Deterministic Sidecar name for a workload: `<name>-<kind>-meshscope`,
/// a valid DNS-1123 subdomain. A name that would be too long or invalid is
/// cut and gets a hash of the workload's name, so that two workloads never
/// share a Sidecar name.
pub fn sidecar_name(kind: &WorkloadKind, name: &str) -> String {
    let kind = stable::subdomain_prefix(kind.as_str(), 63);
    let full = format!("{name}-{kind}-meshscope");
    if stable::is_dns_subdomain(&full) {
        return full;
    }
    let tail = format!("-{}-{kind}-meshscope", stable::name_hash(name));
    let head = stable::subdomain_prefix(name, stable::MAX_NAME - tail.len());
    format!("{head}{tail}").trim_start_matches('-').to_string()
}

pub const NAMESPACE_SIDECAR_NAME: &str = "meshscope-namespace-default";

/// The egress entries that cover what a workload was seen to call.
struct Needed {
    hosts: BTreeSet<String>,
    not_visible: BTreeSet<String>,
    /// Destinations of the imported VirtualServices that were not observed.
    routed: Vec<Required>,
    unknown: BTreeSet<String>,
}

/// Why an observed `outbound|port||host` matches no registered service.
fn unknown_why(snap: &MeshSnapshot, host: &str, port: u32) -> String {
    let domain = &snap.options.cluster_domain;
    let why = match crate::detect::domain_of(host) {
        Some(d) if d != domain => format!(
            "no Service or ServiceEntry defines it: its cluster domain is {d}, not {domain} (--cluster-domain)"
        ),
        _ => "no Service or ServiceEntry in the input defines it".to_string(),
    };
    if port == 0 {
        format!("{host}: {why}")
    } else {
        format!("{host}:{port}: {why}")
    }
}

/// `current`: the import set of the workload's Sidecar, when one applies
/// (an observed host is written from the namespace whose copy it imports).
fn needed_hosts(
    snap: &MeshSnapshot,
    ns: &str,
    t: &WorkloadTraffic,
    current: Option<&crate::scope::Visible>,
) -> Needed {
    let mut out = Needed {
        hosts: BTreeSet::new(),
        not_visible: BTreeSet::new(),
        routed: Vec::new(),
        unknown: BTreeSet::new(),
    };
    let mut names: BTreeSet<String> = BTreeSet::new();
    for (host, port) in t.outbound.keys() {
        names.insert(host.clone());
        match crate::duplicates::used_service(snap, host, ns, current) {
            Some(svc) => {
                out.hosts.insert(entry_for(snap, svc));
            }
            None if !snap.services_named(host).is_empty() => {
                out.not_visible.insert(host.clone());
            }
            None => {
                out.unknown.insert(unknown_why(snap, host, *port));
            }
        }
    }
    for d in &t.dialled {
        names.insert(d.clone());
        if !d.contains('.') {
            names.insert(format!("{d}.{ns}.svc.{}", snap.options.cluster_domain));
        }
    }
    // VirtualServices for called names: import them from their own
    // namespace, together with their destinations and those of the
    // VirtualServices they delegate to (an egress gateway, say).
    let observed: BTreeSet<&str> = t.outbound.keys().map(|(h, _)| h.as_str()).collect();
    for vs_ns in snap.vss_by_ns.keys() {
        for &id in snap.vss_in(vs_ns) {
            let vs = &snap.virtual_services[id];
            if !vs.mesh_bound || !vs.export.visible_to(ns) {
                continue;
            }
            for name in &names {
                if vs.hosts.iter().any(|h| hosts_overlap(h, name)) {
                    out.hosts.insert(format!("{}/{}", vs.namespace, name));
                    for (via, dests) in route_targets(snap, id) {
                        for d in dests {
                            let why = format!("required by routing: {via} routes {name} to it");
                            route_to(snap, ns, &d.host, d.port, why, &observed, &mut out);
                        }
                    }
                }
            }
        }
    }
    out.routed
        .sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
    out
}

/// The destinations a VirtualService routes to: its own, then those of
/// each VirtualService it delegates to that is exported to its namespace
/// (as istiod merges them), each with how it is named.
fn route_targets(snap: &MeshSnapshot, id: usize) -> Vec<(String, &[crate::snapshot::VsDest])> {
    let vs = &snap.virtual_services[id];
    let mut out = vec![(
        format!("VirtualService {}/{}", vs.namespace, vs.name),
        vs.dests.as_slice(),
    )];
    for (dns, dname) in &vs.delegates {
        let found = snap
            .vss_in(dns)
            .iter()
            .map(|d| &snap.virtual_services[*d])
            .find(|d| d.name == *dname && d.hosts.is_empty() && d.export.visible_to(&vs.namespace));
        if let Some(d) = found {
            out.push((
                format!(
                    "VirtualService {dns}/{dname} (delegate of {}/{})",
                    vs.namespace, vs.name
                ),
                d.dests.as_slice(),
            ));
        }
    }
    out
}

/// Imports a route destination seen from namespace `ns`, and records why
/// when its traffic was not observed.
fn route_to(
    snap: &MeshSnapshot,
    ns: &str,
    host: &str,
    port: Option<u32>,
    why: String,
    observed: &BTreeSet<&str>,
    out: &mut Needed,
) {
    let (entry, service, problem) = match snap.destination_service(host, ns) {
        Some(svc) => {
            let e = entry_for(snap, svc);
            out.hosts.insert(e.clone());
            (e, snap.services[svc].hostname.clone(), None)
        }
        None if !snap.services_named(host).is_empty() => (
            format!("*/{host}"),
            host.to_string(),
            Some(format!("{host} is not exported to namespace {ns}")),
        ),
        None => (
            format!("*/{host}"),
            host.to_string(),
            Some(format!(
                "no Service or ServiceEntry in the input defines {host}"
            )),
        ),
    };
    if observed.contains(service.as_str()) {
        return;
    }
    required::merge(
        &mut out.routed,
        Required {
            host: entry,
            service,
            port,
            why: vec![why],
            problem,
        },
    );
}

/// The mesh-config requirements of workloads with these label sets in
/// `ns` (`None`: namespace-wide policies only) merged into `into`; the
/// hosts to write (those without a problem) are added to `hosts`.
fn add_required(
    snap: &MeshSnapshot,
    ns: &str,
    label_sets: &[Option<&Labels>],
    into: &mut Vec<Required>,
    hosts: &mut BTreeSet<String>,
) {
    for labels in label_sets {
        for r in required::required_for(snap, ns, *labels) {
            required::merge(into, r);
        }
    }
    into.sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
    hosts.extend(
        into.iter()
            .filter(|r| r.problem.is_none())
            .map(|r| r.host.clone()),
    );
}

fn entry_for(snap: &MeshSnapshot, svc: SvcId) -> String {
    let s = &snap.services[svc];
    format!("{}/{}", s.namespace, s.hostname)
}

fn parse_listeners(snap: &MeshSnapshot, hosts: &[String]) -> Vec<Listener> {
    vec![Listener {
        port: None,
        protocol: None,
        hosts: hosts
            .iter()
            .filter_map(|h| HostEntry::parse(h, snap.options.istio).ok())
            .collect(),
    }]
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
                        "MS0012: Sidecar {}, generated for {other}, also selects it{}; {until}",
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

fn evidence_meta(
    obs: &Observations,
    traffic: &[&WorkloadTraffic],
) -> (BTreeMap<String, String>, u64) {
    let mut sources: BTreeSet<&str> = BTreeSet::new();
    let mut requests = 0;
    for t in traffic {
        sources.extend(t.sources.iter().map(String::as_str));
        requests += t.requests();
    }
    let mut ann = BTreeMap::new();
    if !sources.is_empty() {
        ann.insert(
            SOURCES_ANNOTATION.to_string(),
            sources.into_iter().collect::<Vec<_>>().join(","),
        );
    }
    if let Some((a, b)) = &obs.window {
        ann.insert(WINDOW_ANNOTATION.to_string(), format!("{a}/{b}"));
    }
    ann.insert(REQUESTS_ANNOTATION.to_string(), requests.to_string());
    (ann, requests)
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

/// The workload a managed Sidecar was generated for, from its labels (the
/// full name from [`WORKLOAD_NAME_FULL_ANNOTATION`] when the label was
/// cut), or `None` when it names none (a per-namespace Sidecar).
pub fn generated_for(meta: &ObjectMeta) -> Option<(WorkloadKind, String)> {
    let labels = meta.labels.as_ref()?;
    let kind = labels.get(WORKLOAD_KIND_LABEL)?;
    let label = labels.get(WORKLOAD_NAME_LABEL)?;
    let name = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(WORKLOAD_NAME_FULL_ANNOTATION))
        .filter(|full| label_value(full) == *label)
        .unwrap_or(label);
    let kind = WorkloadKind::parse(kind).unwrap_or_else(|| WorkloadKind::Other(kind.clone()));
    Some((kind, name.clone()))
}

/// Is a managed Sidecar (with this metadata, in `ns`) left without its
/// workload, so that `--prune` deletes it? Per-namespace Sidecars name no
/// workload and are never orphaned.
pub fn orphaned(snap: &MeshSnapshot, ns: &str, meta: &ObjectMeta) -> bool {
    let Some((kind, name)) = generated_for(meta) else {
        return false;
    };
    snap.find_workload(&kind, ns, &name).is_none()
}

/// The managed Sidecar generated for a workload: the one with its default
/// name, else one whose labels name it (and that is not another workload's
/// by name), else a managed one that selects it and names no workload
/// (written by hand with meshscope's label, or before the labels existed),
/// which it adopts when it is the first workload that Sidecar selects.
fn own_sidecar(snap: &MeshSnapshot, w: WorkloadId) -> Option<SidecarId> {
    let wl = &snap.workloads[w];
    let ns = wl.namespace.as_str();
    let default = sidecar_name(&wl.kind, &wl.name);
    let managed = || {
        snap.sidecars_in(ns)
            .iter()
            .copied()
            .filter(|s| snap.sidecars[*s].managed && snap.sidecars[*s].selector.is_some())
    };
    let anothers = |name: &str| {
        snap.workloads_in(ns).iter().any(|o| {
            let o = &snap.workloads[*o];
            (o.kind != wl.kind || o.name != wl.name) && sidecar_name(&o.kind, &o.name) == name
        })
    };
    managed()
        .find(|s| snap.sidecars[*s].name == default)
        .or_else(|| {
            managed().find(|s| {
                let sc = &snap.sidecars[*s];
                generated_for(&sc.object.metadata)
                    .is_some_and(|(k, n)| k == wl.kind && n == wl.name)
                    && !anothers(&sc.name)
            })
        })
        .or_else(|| {
            managed().find(|s| {
                let sc = &snap.sidecars[*s];
                // When it selects several workloads, the first adopts it
                // and the others get Sidecars of their own.
                let first = sc.selector.as_ref().and_then(|sel| {
                    snap.workloads_in(ns)
                        .iter()
                        .copied()
                        .find(|o| selector_matches(sel, snap.workload_labels(*o)))
                });
                generated_for(&sc.object.metadata).is_none()
                    && !anothers(&sc.name)
                    && first == Some(w)
            })
        })
}

/// The labels and annotations that say which workload a Sidecar is for.
fn workload_meta(
    wl: &crate::snapshot::Workload,
    labels: &mut BTreeMap<String, String>,
    mut annotations: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    labels.insert(
        WORKLOAD_KIND_LABEL.to_string(),
        label_value(wl.kind.as_str()),
    );
    let value = label_value(&wl.name);
    if value != wl.name {
        annotations.insert(WORKLOAD_NAME_FULL_ANNOTATION.to_string(), wl.name.clone());
    }
    labels.insert(WORKLOAD_NAME_LABEL.to_string(), value);
    annotations
}

/// Does the live Sidecar already carry the labels and annotations apply
/// would write? If not, apply changes it, so it is not "unchanged".
fn keeps(
    live: &Sidecar,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
    hosts: &[String],
) -> bool {
    let has = |have: &Option<BTreeMap<String, String>>, want: &BTreeMap<String, String>| {
        want.iter()
            .all(|(k, v)| have.as_ref().and_then(|h| h.get(k)) == Some(v))
    };
    let mut annotations = annotations.clone();
    annotations.insert(
        EGRESS_ANNOTATION.to_string(),
        serde_json::to_string(&[EgressListener {
            hosts: hosts.to_vec(),
            ..Default::default()
        }])
        .unwrap_or_default(),
    );
    has(&live.metadata.labels, labels) && has(&live.metadata.annotations, &annotations)
}

/// A Sidecar of that name that meshscope does not manage: writing ours
/// would overwrite it, so the recommendation is skipped instead.
fn name_taken(snap: &MeshSnapshot, ns: &str, name: &str) -> Option<String> {
    snap.sidecars_in(ns)
        .iter()
        .map(|id| &snap.sidecars[*id])
        .find(|sc| sc.name == name && !sc.managed)
        .map(|sc| {
            format!(
                "a Sidecar named {} exists and is not labelled {MANAGED_BY_LABEL}={MANAGED_BY_VALUE}; it belongs to its owner",
                sc.key()
            )
        })
}

fn build_sidecar(
    name: String,
    ns: &str,
    selector: Option<Labels>,
    hosts: Vec<String>,
    labels: BTreeMap<String, String>,
    mut annotations: BTreeMap<String, String>,
) -> Sidecar {
    let egress = vec![EgressListener {
        hosts,
        ..Default::default()
    }];
    annotations.insert(
        EGRESS_ANNOTATION.to_string(),
        serde_json::to_string(&egress).unwrap_or_default(),
    );
    Sidecar {
        api_version: "networking.istio.io/v1".into(),
        kind: "Sidecar".into(),
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(ns.to_string()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: SidecarSpec {
            workload_selector: selector.map(|labels| WorkloadSelector { labels }),
            egress,
            extra: BTreeMap::new(),
        },
    }
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
    let mut rec = Recommendation {
        workloads: vec![w],
        namespace: ns.to_string(),
        outcome: Outcome::Skipped(String::new()),
        dependencies: Vec::new(),
        not_visible: Vec::new(),
        required: Vec::new(),
        unknown: Vec::new(),
        edges: Vec::new(),
        before,
        after: None,
        requests: 0,
        notes: Vec::new(),
    };
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
    let mut req = std::mem::take(&mut needed.routed);
    add_required(snap, ns, &[Some(labels)], &mut req, &mut needed.hosts);
    rec.required = req;
    rec.not_visible = needed.not_visible.iter().cloned().collect();
    rec.unknown = needed.unknown.iter().cloned().collect();
    if traffic.is_none() && !opts.allow_idle {
        rec.outcome = Outcome::Skipped(
            format!("{NO_EVIDENCE}: no traffic from or to this workload was observed (use --allow-idle to close its scope anyway)"),
        );
        return rec;
    }
    let (mut annotations, requests) = evidence_meta(obs, &[t]);
    rec.requests = requests;
    if let Some(v) = required::annotation(&rec.required) {
        annotations.insert(REQUIRED_BY_ANNOTATION.to_string(), v);
    }

    // A user-owned Sidecar that selects the workload is never replaced.
    if let Some(&first) = selection.matching_selectors.first() {
        let sc = &snap.sidecars[first];
        if !sc.managed {
            let vis = eval.visible_for(selection.source, ns);
            let policy = crate::edges::policy_for(snap, selection.source);
            rec.edges = crate::edges::workloads_edge_outcomes(snap, obs, &[w], &vis, &policy);
            let mut missing = observed_outside(snap, ns, t, &vis);
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
    let mut rec = Recommendation {
        workloads: ws.to_vec(),
        namespace: ns.to_string(),
        outcome: Outcome::Skipped(String::new()),
        dependencies: Vec::new(),
        not_visible: Vec::new(),
        required: Vec::new(),
        unknown: Vec::new(),
        edges: Vec::new(),
        before,
        after: None,
        requests: 0,
        notes: Vec::new(),
    };
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
    rec.not_visible = not_visible.into_iter().collect();
    let mut label_sets: Vec<Option<&Labels>> = vec![None];
    label_sets.extend(ws.iter().map(|w| Some(snap.workload_labels(*w))));
    add_required(snap, ns, &label_sets, &mut req, &mut hosts);
    rec.required = req;
    rec.unknown = unknown.into_iter().collect();
    if traffic.is_empty() && !opts.allow_idle {
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
            for t in &traffic {
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
    rec.requests = requests;
    if let Some(v) = required::annotation(&rec.required) {
        annotations.insert(REQUIRED_BY_ANNOTATION.to_string(), v);
    }
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
