//! Sidecar recommendations from observed traffic.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::host::{hosts_overlap, HostEntry};
use crate::istio::{EgressListener, Sidecar, SidecarSpec, WorkloadSelector};
use crate::observe::{Observations, WorkloadTraffic};
use crate::scope::{ConfigEstimate, Evaluator};
use crate::snapshot::{
    Labels, Listener, MeshSnapshot, SidecarId, SvcId, WorkloadId, WorkloadKind, MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
};

pub const WORKLOAD_KIND_LABEL: &str = "meshscope.io/workload-kind";
pub const WORKLOAD_NAME_LABEL: &str = "meshscope.io/workload-name";
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
    pub before: ConfigEstimate,
    pub after: Option<ConfigEstimate>,
    pub requests: u64,
}

impl Recommendation {
    pub fn sidecar(&self) -> Option<&Sidecar> {
        match &self.outcome {
            Outcome::Sidecar { object, .. } => Some(object),
            _ => None,
        }
    }
}

/// The smallest subset of a workload's template labels that selects all of
/// its pods and no pod (or template) of another workload in the namespace.
pub fn minimal_selector(snap: &MeshSnapshot, w: WorkloadId) -> Option<Labels> {
    let wl = &snap.workloads[w];
    let own: Vec<&Labels> = if wl.pods.is_empty() {
        vec![&wl.labels]
    } else {
        wl.pods.iter().map(|p| &snap.pods[*p].labels).collect()
    };
    // Candidate keys: template labels every pod carries with the same value.
    let mut keys: Vec<(&String, &String)> = wl
        .labels
        .iter()
        .filter(|(k, v)| own.iter().all(|l| l.get(*k) == Some(*v)))
        .collect();
    const PREFERRED: &[&str] = &[
        "app",
        "app.kubernetes.io/name",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/component",
        "version",
        "app.kubernetes.io/version",
    ];
    let rank = |k: &str| {
        PREFERRED
            .iter()
            .position(|p| *p == k)
            .unwrap_or(PREFERRED.len())
    };
    keys.sort_by(|a, b| rank(a.0).cmp(&rank(b.0)).then(a.0.cmp(b.0)));
    keys.truncate(16);
    let others: Vec<&Labels> = snap
        .workloads_in(&wl.namespace)
        .iter()
        .filter(|o| **o != w)
        .flat_map(|o| {
            let ow = &snap.workloads[*o];
            if ow.pods.is_empty() {
                vec![&ow.labels]
            } else {
                ow.pods.iter().map(|p| &snap.pods[*p].labels).collect()
            }
        })
        .collect();
    let n = keys.len();
    for size in 1..=n {
        // Subsets of `size` keys in rank order (lexicographic combinations).
        let mut idx: Vec<usize> = (0..size).collect();
        loop {
            let sel = |l: &Labels| idx.iter().all(|i| l.get(keys[*i].0) == Some(keys[*i].1));
            if !others.iter().any(|l| sel(l)) {
                return Some(
                    idx.iter()
                        .map(|i| (keys[*i].0.clone(), keys[*i].1.clone()))
                        .collect(),
                );
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
    None
}

/// Deterministic Sidecar name for a workload.
pub fn sidecar_name(kind: &WorkloadKind, name: &str) -> String {
    let kind = kind.as_str().to_ascii_lowercase();
    let full = format!("{name}-{kind}-meshscope");
    if full.len() <= 253 {
        full
    } else {
        full[..253].trim_end_matches(['-', '.']).to_string()
    }
}

pub const NAMESPACE_SIDECAR_NAME: &str = "meshscope-namespace-default";

/// The egress entries that cover what a workload was seen to call.
struct Needed {
    hosts: BTreeSet<String>,
    not_visible: BTreeSet<String>,
}

fn needed_hosts(snap: &MeshSnapshot, ns: &str, t: &WorkloadTraffic) -> Needed {
    let mut out = Needed {
        hosts: BTreeSet::new(),
        not_visible: BTreeSet::new(),
    };
    let mut names: BTreeSet<String> = BTreeSet::new();
    for (host, _port) in t.outbound.keys() {
        names.insert(host.clone());
        match snap.destination_service(host, ns) {
            Some(svc) => {
                out.hosts.insert(entry_for(snap, svc));
            }
            None if !snap.services_named(host).is_empty() => {
                out.not_visible.insert(host.clone());
            }
            // istiod knew the host though our input does not: import it
            // from wherever it is defined.
            None => {
                out.hosts.insert(format!("*/{host}"));
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
    // namespace, together with their destinations.
    for vs_ns in snap.vss_by_ns.keys() {
        for &id in snap.vss_in(vs_ns) {
            let vs = &snap.virtual_services[id];
            if !vs.mesh_bound || !vs.export.visible_to(ns) {
                continue;
            }
            for name in &names {
                if vs.hosts.iter().any(|h| hosts_overlap(h, name)) {
                    out.hosts.insert(format!("{}/{}", vs.namespace, name));
                    for d in &vs.dests {
                        if let Some(svc) = snap.destination_service(&d.host, ns) {
                            out.hosts.insert(entry_for(snap, svc));
                        }
                    }
                }
            }
        }
    }
    out
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
    out
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

/// Is a managed Sidecar (with these labels, in `ns`) left without its
/// workload, so that `--prune` deletes it? Per-namespace Sidecars name no
/// workload and are never orphaned.
pub fn orphaned(snap: &MeshSnapshot, ns: &str, labels: &BTreeMap<String, String>) -> bool {
    let (Some(kind), Some(name)) = (
        labels.get(WORKLOAD_KIND_LABEL),
        labels.get(WORKLOAD_NAME_LABEL),
    ) else {
        return false;
    };
    let kind = WorkloadKind::parse(kind).unwrap_or_else(|| WorkloadKind::Other(kind.clone()));
    snap.find_workload(&kind, ns, name).is_none()
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
        before,
        after: None,
        requests: 0,
    };
    let empty = WorkloadTraffic::default();
    let traffic = obs.of(w);
    let t = traffic.unwrap_or(&empty);
    let needed = needed_hosts(snap, ns, t);
    rec.dependencies = needed.hosts.iter().cloned().collect();
    rec.not_visible = needed.not_visible.iter().cloned().collect();
    if traffic.is_none() && !opts.allow_idle {
        rec.outcome = Outcome::Skipped(
            format!("{NO_EVIDENCE}: no traffic from or to this workload was observed (use --allow-idle to close its scope anyway)"),
        );
        return rec;
    }
    let (annotations, requests) = evidence_meta(obs, &[t]);
    rec.requests = requests;

    // A user-owned Sidecar that selects the workload is never replaced.
    if let Some(&first) = selection.matching_selectors.first() {
        let sc = &snap.sidecars[first];
        if !sc.managed {
            let vis = eval.visible_for(selection.source, ns);
            let missing = observed_outside(snap, ns, t, &vis);
            rec.outcome = Outcome::UserOwned {
                sidecar: first,
                missing,
            };
            return rec;
        }
    }
    let managed = selection
        .matching_selectors
        .first()
        .map(|s| &snap.sidecars[*s])
        .filter(|s| s.managed);
    let Some(selector) = managed
        .and_then(|m| m.selector.clone())
        .or_else(|| minimal_selector(snap, w))
    else {
        rec.outcome = Outcome::Skipped(
            "no subset of the pod-template labels selects this workload's pods without selecting another workload's pods".into(),
        );
        return rec;
    };
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
    labels.insert(
        WORKLOAD_KIND_LABEL.to_string(),
        wl.kind.as_str().to_string(),
    );
    labels.insert(WORKLOAD_NAME_LABEL.to_string(), wl.name.clone());
    let action = match (&existing, managed) {
        (None, _) => Action::Create,
        (Some(old), Some(m)) => {
            let old_sorted: BTreeSet<&String> = old.iter().collect();
            let new_sorted: BTreeSet<&String> = hosts.iter().collect();
            if old_sorted == new_sorted
                && m.object.spec.egress.len() == 1
                && keeps(&m.object, &labels, &annotations, &hosts)
            {
                Action::Unchanged
            } else {
                Action::Update
            }
        }
        (Some(_), None) => Action::Update,
    };
    let after_vis = snap.visible(ns, &parse_listeners(snap, &hosts));
    rec.after = Some(snap.estimate(&after_vis, wl.inbound));
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
        before,
        after: None,
        requests: 0,
    };
    let traffic: Vec<&WorkloadTraffic> = ws.iter().filter_map(|w| obs.of(*w)).collect();
    let mut hosts = BTreeSet::new();
    let mut not_visible = BTreeSet::new();
    for t in &traffic {
        let n = needed_hosts(snap, ns, t);
        hosts.extend(n.hosts);
        not_visible.extend(n.not_visible);
    }
    rec.dependencies = hosts.iter().cloned().collect();
    rec.not_visible = not_visible.into_iter().collect();
    if traffic.is_empty() && !opts.allow_idle {
        rec.outcome = Outcome::Skipped(format!(
            "{NO_EVIDENCE}: no traffic was observed in namespace {ns} (use --allow-idle to close it anyway)"
        ));
        return rec;
    }
    if let Some(&first) = defaults.first() {
        let sc = &snap.sidecars[first];
        if !sc.managed {
            let vis = eval.visible_for(crate::scope::ScopeSource::Namespace(first), ns);
            let mut missing = BTreeSet::new();
            for t in &traffic {
                missing.extend(observed_outside(snap, ns, t, &vis));
            }
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
    let (annotations, requests) = evidence_meta(obs, &traffic);
    rec.requests = requests;
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
