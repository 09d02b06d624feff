//! Findings with stable codes (MS0001…), shared by `audit` and the webhook.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::edges;
use crate::exempt::{no_reason_warning, Exemption, EXEMPT_ANNOTATION};
use crate::host::{host_subset_of, hosts_overlap, NsSel};
use crate::inject::Injection;
use crate::observe::Observations;
use crate::recommend::{generated_for, observed_outside, required_outside};
use crate::scope::{Evaluator, ScopeSource};
use crate::snapshot::{
    selector_matches, Labels, MeshSnapshot, PodInfo, SidecarId, WorkloadId, WorkloadKind,
};

pub use crate::codes::{code_doc, Code, CodeDoc, Severity, CODES};
pub(crate) use crate::finding::finding;
pub use crate::finding::Finding;

/// Which namespaces (and workloads) an audit covers.
pub struct AuditScope<'a> {
    pub namespaces: Option<&'a BTreeSet<String>>,
    pub workloads: Option<&'a BTreeSet<WorkloadId>>,
}

impl AuditScope<'_> {
    fn ns(&self, ns: &str) -> bool {
        self.namespaces.is_none_or(|s| s.contains(ns))
    }
    fn workload(&self, w: WorkloadId) -> bool {
        self.workloads.is_none_or(|s| s.contains(&w))
    }
}

// === per-object rules (also used by the webhook) ===

/// The MS0001 message: the one text both `audit` and the webhook show.
pub fn unscoped_message(kind: &str, ns: &str, name: &str) -> String {
    format!(
        "{kind} {ns}/{name} has no Sidecar scope; run: kubectl meshscope apply -n {ns} --workload {lower}/{name} --from-pod-logs (not running yet: kubectl meshscope apply -n {ns} --workload {lower}/{name} --from-manifest-hints --allow-idle)",
        lower = kind.to_ascii_lowercase()
    )
}

/// For each namespace with more than one MS0001 finding (exempt ones
/// aside), the one command that scopes its unscoped workloads at once,
/// beside the per-workload fix each finding carries.
pub fn namespace_fixes(findings: &[Finding]) -> Vec<String> {
    let mut per_ns: std::collections::BTreeMap<&str, usize> = Default::default();
    for f in findings
        .iter()
        .filter(|f| f.code == Code::UnscopedWorkload && f.exempt.is_none())
    {
        *per_ns.entry(f.namespace.as_str()).or_default() += 1;
    }
    per_ns
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(ns, n)| {
            format!("{n} unscoped workloads in namespace {ns}: scope them at once with kubectl meshscope apply -n {ns} --from-pod-logs")
        })
        .collect()
}

/// The MS0001 message for a workload being created (the webhook's denial
/// of a CREATE): it is not in the cluster yet, so its fix plans from the
/// manifest being applied (`-f`), which `apply` lays over the cluster.
pub fn unscoped_on_creation_message(kind: &str, ns: &str, name: &str) -> String {
    format!(
        "{kind} {ns}/{name} has no Sidecar scope; create its Sidecar first from the manifest you are applying, then apply that again: kubectl meshscope apply -n {ns} --workload {lower}/{name} --from-manifest-hints --allow-idle -f FILE (FILE: the manifest that holds this {kind})",
        lower = kind.to_ascii_lowercase()
    )
}

/// MS0001 for a workload described by its kind, pod-template labels and
/// injection verdict, or `None` when it is scoped or has no sidecar. The
/// audit calls it for the workloads in a snapshot, the webhook for the
/// object being admitted.
pub fn unscoped(
    snap: &MeshSnapshot,
    kind: &str,
    ns: &str,
    name: &str,
    injection: &Injection,
    labels: &Labels,
) -> Option<Finding> {
    if !injection.sidecar {
        return None;
    }
    if snap.select_sidecar(ns, labels).source != ScopeSource::Implicit {
        return None;
    }
    Some(finding(
        Code::UnscopedWorkload,
        kind,
        ns,
        name,
        unscoped_message(kind, ns, name),
    ))
}

/// MS0001 for one workload, or `None` when it is scoped or has no sidecar.
pub fn unscoped_workload(snap: &MeshSnapshot, w: WorkloadId) -> Option<Finding> {
    let wl = &snap.workloads[w];
    unscoped(
        snap,
        wl.kind.as_str(),
        &wl.namespace,
        &wl.name,
        &wl.injection,
        snap.workload_labels(w),
    )
}

/// MS0012 for a workload described by its kind, name, pod-template labels
/// and injection verdict: the managed Sidecars that select it but were
/// generated for another workload. The audit calls it for the workloads in
/// a snapshot, the webhook for the workload being admitted.
pub fn scoped_by_another(
    snap: &MeshSnapshot,
    kind: &str,
    ns: &str,
    name: &str,
    injection: &Injection,
    labels: &Labels,
) -> Option<Finding> {
    if !injection.sidecar {
        return None;
    }
    let sel = snap.select_sidecar(ns, labels);
    let mut owners: Vec<String> = Vec::new();
    let mut sidecars: Vec<String> = Vec::new();
    for &s in &sel.matching_selectors {
        let sc = &snap.sidecars[s];
        if !sc.managed {
            continue;
        }
        let Some((k, n)) = generated_for(&sc.object.metadata) else {
            continue;
        };
        if k.as_str().eq_ignore_ascii_case(kind) && n == name {
            continue;
        }
        owners.push(format!("{k} {n}"));
        sidecars.push(sc.key());
    }
    if sidecars.is_empty() {
        return None;
    }
    let many = sidecars.len() > 1;
    Some(finding(
        Code::ScopedByOtherSidecar,
        kind,
        ns,
        name,
        format!(
            "{kind} {ns}/{name} is scoped by the {} generated for {}; {} {} {} its pods, so it runs with another workload's scope; re-apply the namespace's Sidecars: kubectl meshscope apply -n {ns} --from-pod-logs",
            if many { "Sidecars" } else { "Sidecar" },
            owners.join(", "),
            if many { "Sidecars" } else { "Sidecar" },
            sidecars.join(", "),
            if many { "select" } else { "selects" },
        ),
    ))
}

/// MS0012 for one workload of a snapshot.
pub fn scoped_by_another_workload(snap: &MeshSnapshot, w: WorkloadId) -> Option<Finding> {
    let wl = &snap.workloads[w];
    scoped_by_another(
        snap,
        wl.kind.as_str(),
        &wl.namespace,
        &wl.name,
        &wl.injection,
        snap.workload_labels(w),
    )
}

/// MS0002 for one ServiceEntry. A DNS ServiceEntry without exportTo is
/// not reported when the mesh's `serviceEntryVisibility` (Istio 1.31+,
/// with `applyToSidecars`) already keeps it to its namespace or hides it;
/// the message of one that is reported offers that setting besides
/// `exportTo`.
///
/// `creating`: the webhook's decision on a CREATE. The object is not in
/// the cluster yet, so no command can read it: the fix is an exportTo in
/// the manifest being applied.
pub fn dns_service_entry(
    snap: &MeshSnapshot,
    ns: &str,
    name: &str,
    resolution: &str,
    export_to: Option<&[String]>,
    creating: bool,
) -> Option<Finding> {
    use crate::visibility::{Visibility, SINCE_MINOR};
    let dns = resolution == "DNS" || resolution == "DNS_ROUND_ROBIN";
    let unset = export_to.is_none_or(|e| e.is_empty());
    let default_public = snap.mesh.default_service_export_to.iter().any(|e| e == "*");
    if !(dns && unset && default_public) {
        return None;
    }
    let vis = snap.service_entry_visibility(ns);
    if vis.is_some_and(|v| v.for_sidecars() != Visibility::Public) {
        return None;
    }
    let mesh_fix = match vis {
        // The mesh caps it, but not for sidecars.
        Some(v) if v.visibility != Visibility::Public => format!(
            ", or set meshConfig.serviceEntryVisibility.applyToSidecars: true (it makes ServiceEntries in {ns} visible {}, which sidecars ignore until then)",
            v.visibility.as_str()
        ),
        Some(_) => format!(
            ", or have meshConfig.serviceEntryVisibility give namespace {ns} visibility NAMESPACE (a policy or defaultVisibility) with applyToSidecars: true"
        ),
        None if snap.options.istio.at_least(SINCE_MINOR) => format!(
            ", or cap ServiceEntries in the mesh config: meshConfig.serviceEntryVisibility with visibility NAMESPACE for namespace {ns} (a policy or defaultVisibility) and applyToSidecars: true"
        ),
        None => String::new(),
    };
    Some(finding(
        Code::DnsServiceEntryMeshWide,
        "ServiceEntry",
        ns,
        name,
        if creating {
            format!(
                "ServiceEntry {ns}/{name} has resolution {resolution} and no exportTo, so every proxy in the mesh would resolve its hosts; add exportTo to its manifest before applying it: spec.exportTo: [\".\"] keeps it to namespace {ns}, or list the namespaces that call its hosts (kubectl meshscope recommend --exports -f FILE -n {ns} --from-pod-logs plans it from their traffic){mesh_fix}"
            )
        } else {
            format!(
                "ServiceEntry {ns}/{name} has resolution {resolution} and no exportTo, so every proxy in the mesh resolves its hosts; set spec.exportTo to the namespaces that call them: {}{mesh_fix}",
                crate::exports::exports_command(ns)
            )
        },
    ))
}

/// MS0014 for each hostname defined in several namespaces with different
/// ports or protocols.
pub fn duplicated_hostnames(snap: &MeshSnapshot, scope: &AuditScope<'_>) -> Vec<Finding> {
    let mut out = Vec::new();
    for c in crate::duplicates::conflicts(snap) {
        let defining: Vec<&str> = c
            .definitions
            .iter()
            .map(|d| snap.services[*d].namespace.as_str())
            .collect();
        let concerned =
            defining.iter().any(|n| scope.ns(n)) || c.gets.values().flatten().any(|n| scope.ns(n));
        if !concerned {
            continue;
        }
        let defs: Vec<String> = c
            .definitions
            .iter()
            .map(|d| {
                let s = &snap.services[*d];
                let kind = match s.kind {
                    crate::snapshot::SvcKind::Kube => "Service",
                    crate::snapshot::SvcKind::Entry => "ServiceEntry",
                };
                format!(
                    "{} ({kind} {}: {})",
                    s.namespace,
                    s.name,
                    crate::duplicates::ports_text(snap, *d)
                )
            })
            .collect();
        let mut gets: Vec<String> = c
            .gets
            .iter()
            .map(|(d, nss)| {
                format!(
                    "proxies in {} get {}'s",
                    nss.join(", "),
                    snap.services[*d].namespace
                )
            })
            .collect();
        if !c.none.is_empty() {
            gets.push(format!(
                "proxies in {} get none (not exported to them)",
                c.none.join(", ")
            ));
        }
        let gets = if gets.is_empty() {
            String::new()
        } else {
            format!("; {}", gets.join("; "))
        };
        out.push(finding(
            Code::HostPortsDiffer,
            "Hostname",
            defining[0],
            &c.hostname,
            format!(
                "{} is defined in {} namespaces with different ports or protocols: {}{gets}; an egress host <namespace>/{} imports only that namespace's copy",
                c.hostname,
                defs.len(),
                defs.join(", "),
                c.hostname
            ),
        ));
    }
    out
}

/// Findings about one Sidecar object by itself and against its namespace:
/// MS0003, MS0005, MS0006, MS0007, MS0008, MS0009, MS0010.
pub fn sidecar_findings(snap: &MeshSnapshot, s: SidecarId) -> Vec<Finding> {
    let sc = &snap.sidecars[s];
    let mut out = Vec::new();
    let f = |code, msg| finding(code, "Sidecar", &sc.namespace, &sc.name, msg);
    let root = &snap.mesh.root_namespace;
    if let Some(sel) = &sc.selector {
        let selected: Vec<WorkloadId> = snap
            .workloads_in(&sc.namespace)
            .iter()
            .copied()
            .filter(|w| selector_matches(sel, snap.workload_labels(*w)))
            .collect();
        if selected.is_empty() {
            out.push(f(
                Code::SidecarSelectsNothing,
                format!(
                    "Sidecar {} selects no pod or workload in namespace {} (selector {}); fix the labels or delete it",
                    sc.key(),
                    sc.namespace,
                    fmt_labels(sel)
                ),
            ));
        }
        let ambient: Vec<&str> = selected
            .iter()
            .filter(|w| snap.workloads[**w].injection.ambient)
            .map(|w| snap.workloads[*w].name.as_str())
            .collect();
        if !ambient.is_empty() {
            out.push(f(
                Code::SidecarSelectsAmbient,
                format!(
                    "Sidecar {} selects ambient workloads ({}) that have no sidecar proxy; it has no effect on them",
                    sc.key(),
                    ambient.join(", ")
                ),
            ));
        }
        if &sc.namespace == root {
            out.push(f(
                Code::RootSidecarWithSelector,
                format!(
                    "Sidecar {} is in root namespace {} but has a workloadSelector, so it is not a mesh default and applies only to pods in {}",
                    sc.key(),
                    root,
                    root
                ),
            ));
        }
    } else {
        let ws = snap.workloads_in(&sc.namespace);
        if &sc.namespace != root
            && !ws.is_empty()
            && ws.iter().all(|w| snap.workloads[*w].injection.ambient)
        {
            out.push(f(
                Code::SidecarSelectsAmbient,
                format!(
                    "Sidecar {} applies to namespace {}, whose workloads are all ambient and have no sidecar proxy; it has no effect",
                    sc.key(),
                    sc.namespace
                ),
            ));
        }
        let defaults: Vec<SidecarId> = snap
            .sidecars_in(&sc.namespace)
            .iter()
            .copied()
            .filter(|i| snap.sidecars[*i].selector.is_none())
            .collect();
        if defaults.len() > 1 && defaults.contains(&s) {
            let winner = &snap.sidecars[defaults[0]];
            out.push(f(
                Code::SeveralNamespaceSidecars,
                format!(
                    "namespace {} has {} Sidecars without a workloadSelector; istiod uses {} (the oldest) and ignores the others",
                    sc.namespace,
                    defaults.len(),
                    winner.name
                ),
            ));
        }
    }
    if !sc.has_egress() {
        out.push(f(
            Code::SidecarWithoutEgress,
            format!(
                "Sidecar {} has no egress, so its workloads import the whole mesh (*/*); it does not inherit the namespace or mesh default",
                sc.key()
            ),
        ));
    }
    for l in &sc.listeners {
        for e in &l.hosts {
            if e.is_everything() {
                out.push(f(
                    Code::SidecarImportsEverything,
                    format!(
                        "Sidecar {} imports */* (every visible service); list the hosts its workloads call instead",
                        sc.key()
                    ),
                ));
            } else if !e.exclude && !e.is_closed() && !entry_matches_anything(snap, s, e) {
                out.push(f(
                    Code::EgressHostMatchesNothing,
                    format!(
                        "egress host {e} of Sidecar {} matches no service or VirtualService visible to namespace {} (no short-name expansion: use <ns>/<fqdn>)",
                        sc.key(),
                        sc.namespace
                    ),
                ));
            }
        }
    }
    for err in &sc.invalid_hosts {
        out.push(f(
            Code::EgressHostMatchesNothing,
            format!("Sidecar {}: {err}; istiod skips it", sc.key()),
        ));
    }
    let editors = crate::meta::hand_editors(&sc.object.metadata);
    if sc.managed && !editors.is_empty() {
        out.push(f(
            Code::ManagedSidecarEdited,
            format!(
                "Sidecar {} is managed by meshscope but {} changed fields meshscope writes: apply and apply --watch skip it while the edit stands; take them back with kubectl meshscope apply -n {} --force-conflicts, or remove its label app.kubernetes.io/managed-by to keep the edit as your own",
                sc.key(),
                editors.join(", "),
                sc.namespace
            ),
        ));
    }
    out
}

fn entry_matches_anything(snap: &MeshSnapshot, s: SidecarId, e: &crate::host::HostEntry) -> bool {
    let sc = &snap.sidecars[s];
    // The root default is evaluated in each proxy's namespace: `.` can mean any.
    let is_root_default = snap.root_default() == Some(s);
    let ns_ok = |obj_ns: &str| match &e.ns {
        NsSel::Current if is_root_default => true,
        other => other.matches(&sc.namespace, obj_ns),
    };
    let visible = |export: &crate::host::Export, obj_ns: &str| {
        is_root_default || export.visible_to(&sc.namespace) || obj_ns == sc.namespace
    };
    let exact = !e.host.contains('*');
    let svc_hit = if exact {
        snap.services_named(&e.host).iter().any(|i| {
            let svc = &snap.services[*i];
            ns_ok(&svc.namespace) && visible(&svc.export, &svc.namespace)
        })
    } else {
        snap.services.iter().any(|svc| {
            ns_ok(&svc.namespace)
                && visible(&svc.export, &svc.namespace)
                && host_subset_of(&svc.hostname, &e.host)
        })
    };
    svc_hit
        || snap.virtual_services.iter().any(|vs| {
            ns_ok(&vs.namespace)
                && visible(&vs.export, &vs.namespace)
                && vs.hosts.iter().any(|h| hosts_overlap(h, &e.host))
        })
}

fn fmt_labels(l: &crate::snapshot::Labels) -> String {
    l.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// MS0013 for one workload: provider services it needs that its Sidecar
/// does not import.
pub fn missing_required(
    snap: &MeshSnapshot,
    w: WorkloadId,
    eval: &mut Evaluator<'_>,
) -> Option<Finding> {
    let wl = &snap.workloads[w];
    if !wl.injection.sidecar {
        return None;
    }
    let labels = snap.workload_labels(w);
    let sel = snap.select_sidecar(&wl.namespace, labels);
    if sel.source == ScopeSource::Implicit {
        return None;
    }
    let required = crate::required::required_for(snap, &wl.namespace, Some(labels));
    if required.is_empty() {
        return None;
    }
    let vis = eval.visible_for(sel.source, &wl.namespace);
    let outside = required_outside(snap, &required, &vis);
    if outside.is_empty() {
        return None;
    }
    let needs: Vec<String> = required
        .iter()
        .filter(|r| outside.contains(&r.host))
        .map(|r| {
            let port = r.port.map(|p| format!(":{p}")).unwrap_or_default();
            format!("{}{port} ({})", r.service, r.why.join("; "))
        })
        .collect();
    let sidecar = match sel.source {
        ScopeSource::Workload(s) | ScopeSource::Namespace(s) | ScopeSource::Root(s) => {
            snap.sidecars[s].key()
        }
        ScopeSource::Implicit => return None,
    };
    Some(finding(
        Code::SidecarLacksProvider,
        wl.kind.as_str(),
        &wl.namespace,
        &wl.name,
        format!(
            "{} {}/{} needs {}, which Sidecar {sidecar} does not import; add {} to its egress",
            wl.kind,
            wl.namespace,
            wl.name,
            needs.join(", "),
            outside.join(", ")
        ),
    ))
}

/// MS0004 for one workload.
pub fn conflicting_selectors(snap: &MeshSnapshot, w: WorkloadId) -> Option<Finding> {
    let wl = &snap.workloads[w];
    let sel = snap.select_sidecar(&wl.namespace, snap.workload_labels(w));
    if sel.matching_selectors.len() < 2 {
        return None;
    }
    let names: Vec<&str> = sel
        .matching_selectors
        .iter()
        .map(|s| snap.sidecars[*s].name.as_str())
        .collect();
    Some(finding(
        Code::SeveralWorkloadSidecars,
        wl.kind.as_str(),
        &wl.namespace,
        &wl.name,
        format!(
            "{} Sidecars select {} {}/{} ({}); istiod uses {} (the oldest) and ignores the others",
            names.len(),
            wl.kind,
            wl.namespace,
            wl.name,
            names.join(", "),
            names[0]
        ),
    ))
}

/// MS0011's message: what each edge outside the scope meets, and the fix.
fn outside_message(
    snap: &MeshSnapshot,
    w: WorkloadId,
    source: ScopeSource,
    policy: &edges::Policy,
    dns: bool,
    edges: &[edges::EdgeOutcome],
    outside: &[String],
) -> String {
    let wl = &snap.workloads[w];
    let what: Vec<String> = edges::outside_outcomes(edges.iter().map(|e| e.meets))
        .iter()
        .map(|m| format!("{}: {}", m.as_str(), m.consequence()))
        .collect();
    format!(
        "{} {}/{} was seen calling destinations outside its scope ({}): {}. Under outbound policy {}{}, {}. Add {} to its egress",
        wl.kind,
        wl.namespace,
        wl.name,
        source.describe(snap),
        edges::summarize_outside(edges),
        policy.describe(),
        if dns { " with DNS capture on" } else { "" },
        what.join("; "),
        outside.join(", "),
    )
}

/// MS0015 for one workload: its pods that the injector's rules inject but
/// that run without the proxy (created before those rules applied).
pub fn missing_proxy(snap: &MeshSnapshot, w: WorkloadId) -> Option<Finding> {
    let wl = &snap.workloads[w];
    let missing: Vec<&PodInfo> = (wl.pods.iter().map(|p| &snap.pods[*p]))
        .filter(|p| p.injection.missing.is_some())
        .collect();
    let why = missing.first()?.injection.missing.as_deref()?;
    let (ns, name) = (&wl.namespace, &wl.name);
    let restart = match wl.kind {
        WorkloadKind::Deployment | WorkloadKind::StatefulSet | WorkloadKind::DaemonSet => format!(
            "kubectl rollout restart -n {ns} {}/{name}",
            wl.kind.as_str().to_ascii_lowercase()
        ),
        WorkloadKind::Pod => "re-create the pod".to_string(),
        _ => {
            let names: Vec<&str> = missing.iter().map(|p| p.name.as_str()).collect();
            format!("kubectl delete pod -n {ns} {}", names.join(" "))
        }
    };
    Some(finding(
        Code::UninjectedPods,
        wl.kind.as_str(),
        ns,
        name,
        format!(
            "{} {ns}/{name} runs {} of {} without an istio-proxy container although {why}: {} created before injection applied, so {} outside the mesh until re-created; restart: {restart}",
            wl.kind,
            missing.len(),
            plural(wl.pods.len(), "pod", "pods"),
            if missing.len() == 1 { "it was" } else { "they were" },
            if missing.len() == 1 { "it is" } else { "they are" },
        ),
    ))
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// MS0011 for one workload: observed traffic outside its scope.
fn outside_scope(
    snap: &MeshSnapshot,
    obs: Option<&Observations>,
    w: WorkloadId,
    eval: &mut Evaluator<'_>,
) -> Option<Finding> {
    let wl = &snap.workloads[w];
    let t = obs.filter(|_| wl.injection.sidecar)?.of(w)?;
    let sel = snap.select_sidecar(&wl.namespace, snap.workload_labels(w));
    if sel.source == ScopeSource::Implicit {
        return None;
    }
    let vis = eval.visible_for(sel.source, &wl.namespace);
    let outside = observed_outside(snap, &wl.namespace, t, &vis);
    if outside.is_empty() {
        return None;
    }
    let policy = edges::policy_for(snap, sel.source);
    let dns = edges::dns_capture(snap, w);
    let edges = edges::edge_outcomes(snap, t, &vis, &policy, dns);
    Some(finding(
        Code::TrafficOutsideScope,
        wl.kind.as_str(),
        &wl.namespace,
        &wl.name,
        outside_message(snap, w, sel.source, &policy, dns, &edges, &outside),
    ))
}

/// The findings of one workload.
fn workload_findings(
    snap: &MeshSnapshot,
    obs: Option<&Observations>,
    w: WorkloadId,
    eval: &mut Evaluator<'_>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(unscoped_workload(snap, w));
    out.extend(conflicting_selectors(snap, w));
    out.extend(scoped_by_another_workload(snap, w));
    out.extend(missing_required(snap, w, eval));
    out.extend(missing_proxy(snap, w));
    out.extend(outside_scope(snap, obs, w, eval));
    out
}

/// `findings` of an object, marked exempt when its `meshscope.io/exempt`
/// says so.
fn marked(mut findings: Vec<Finding>, exemption: &Exemption) -> Vec<Finding> {
    if let Some(reason) = exemption.reason() {
        for f in &mut findings {
            f.exempt = Some(reason.to_string());
        }
    }
    findings
}

/// A Sidecar's `meshscope.io/exempt`.
fn sidecar_exemption(snap: &MeshSnapshot, s: SidecarId) -> Exemption {
    let annotations = snap.sidecars[s].object.metadata.annotations.as_ref();
    Exemption::of_value(
        annotations
            .and_then(|a| a.get(EXEMPT_ANNOTATION))
            .map(String::as_str),
    )
}

/// The whole audit. Findings of an object that `meshscope.io/exempt`
/// exempts (a workload, ServiceEntry or Sidecar, as the webhook reads it)
/// are in it, with [`Finding::exempt`] set.
pub fn audit(
    snap: &MeshSnapshot,
    obs: Option<&Observations>,
    scope: &AuditScope<'_>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut eval = Evaluator::new(snap);
    for w in 0..snap.workloads.len() {
        let wl = &snap.workloads[w];
        if scope.ns(&wl.namespace) && scope.workload(w) {
            let mut found = workload_findings(snap, obs, w, &mut eval);
            found.extend(crate::gateway_readiness::readiness(snap, obs, w, &mut eval));
            out.extend(marked(found, &wl.exemption));
        }
    }
    if scope.workloads.is_none() {
        for se in &snap.service_entries {
            if !scope.ns(&se.namespace) {
                continue;
            }
            let found = dns_service_entry(
                snap,
                &se.namespace,
                &se.name,
                &se.resolution,
                se.export_to.as_deref(),
                false,
            );
            out.extend(marked(
                found.into_iter().collect(),
                &Exemption::of(&se.annotations),
            ));
        }
        out.extend(duplicated_hostnames(snap, scope));
        out.extend(export_findings(snap, obs, scope));
        for s in 0..snap.sidecars.len() {
            if scope.ns(&snap.sidecars[s].namespace) {
                out.extend(marked(
                    sidecar_findings(snap, s),
                    &sidecar_exemption(snap, s),
                ));
            }
        }
    }
    out.sort_by(|a, b| {
        b.severity.cmp(&a.severity).then_with(|| {
            (a.code, &a.namespace, &a.kind, &a.name).cmp(&(b.code, &b.namespace, &b.kind, &b.name))
        })
    });
    out
}

/// MS0016–MS0020, MS0023 and MS0024: ServiceEntries with a catch-all address or a wildcard
/// host seen mesh-wide, wildcard DestinationRules that shadow other
/// namespaces' rules, Gateway API routes whose services are hidden where
/// they apply or that send requests to another namespace without a
/// ReferenceGrant, and (with observed traffic) exportTo that hides an
/// object from its callers and namespaces istiod need not watch.
fn export_findings(
    snap: &MeshSnapshot,
    obs: Option<&Observations>,
    scope: &AuditScope<'_>,
) -> Vec<Finding> {
    use crate::exports::{findings, recommend_exports, ExportOptions};
    let mut out = Vec::new();
    for se in snap
        .service_entries
        .iter()
        .filter(|se| scope.ns(&se.namespace))
    {
        let found = findings::EntryFacts::of(se).findings(snap);
        out.extend(marked(found, &Exemption::of(&se.annotations)));
    }
    for d in 0..snap.destination_rules.len() {
        if scope.ns(&snap.destination_rules[d].namespace) {
            out.extend(findings::wildcard_destination_rule(snap, d));
        }
    }
    out.extend(crate::exports::routes::hidden_route_services(snap, |ns| {
        scope.ns(ns)
    }));
    out.extend(crate::gateway_routes::refused_backends(snap, |ns| {
        scope.ns(ns)
    }));
    let Some(obs) = obs.filter(|o| !o.traffic.is_empty()) else {
        return out;
    };
    for r in recommend_exports(snap, obs, ExportOptions::default()) {
        if scope.ns(&r.namespace) {
            out.extend(findings::hidden_from_callers(&r));
        }
    }
    out.extend(crate::discovery::findings(snap, obs, |ns| scope.ns(ns)));
    out
}

/// The `meshscope.io/exempt` annotations in the audit's scope that exempt
/// nothing (no reason), as the webhook warns of them.
pub fn ignored_exemptions(snap: &MeshSnapshot, scope: &AuditScope<'_>) -> Vec<String> {
    let mut out = Vec::new();
    for (w, wl) in snap.workloads.iter().enumerate() {
        if scope.ns(&wl.namespace) && scope.workload(w) && wl.exemption == Exemption::NoReason {
            out.push(no_reason_warning(wl.kind.as_str(), &wl.namespace, &wl.name));
        }
    }
    if scope.workloads.is_none() {
        for se in snap
            .service_entries
            .iter()
            .filter(|se| scope.ns(&se.namespace))
        {
            if Exemption::of(&se.annotations) == Exemption::NoReason {
                out.push(no_reason_warning("ServiceEntry", &se.namespace, &se.name));
            }
        }
        for (s, sc) in snap.sidecars.iter().enumerate() {
            if scope.ns(&sc.namespace) && sidecar_exemption(snap, s) == Exemption::NoReason {
                out.push(no_reason_warning("Sidecar", &sc.namespace, &sc.name));
            }
        }
    }
    out
}

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    pub errors: usize,
    pub warnings: usize,
    pub infos: usize,
    /// Findings of exempt objects, counted apart: none of the others.
    pub exempt: usize,
    pub by_code: std::collections::BTreeMap<Code, usize>,
}

pub fn summarize(findings: &[Finding]) -> Summary {
    let mut s = Summary::default();
    for f in findings {
        if f.exempt.is_some() {
            s.exempt += 1;
            continue;
        }
        match f.severity {
            Severity::Error => s.errors += 1,
            Severity::Warning => s.warnings += 1,
            Severity::Info => s.infos += 1,
        }
        *s.by_code.entry(f.code).or_default() += 1;
    }
    s
}
