//! `recommend --exports`: the exportTo each Service, ServiceEntry,
//! VirtualService and DestinationRule needs, from observed traffic and the
//! uses traffic does not show (`docs/istio-semantics.md` §3, §4).
//!
//! ```text
//!  Observations ─┐
//!  Gateways, Sidecars, mesh config ─► needs ─► ExportRec per object ─► plugin (SSA of exportTo only)
//!                                                  └─► MS0019 (exportTo hides it from a caller)
//!  Gateway API routes, exportTo ─► MS0023 (a route's service hidden where it applies)
//! ```
//!
//! An object whose owner set exportTo is left alone unless forced. The
//! object's own namespace is always kept.

use std::collections::BTreeSet;

use crate::exempt::Exemption;
use crate::host::Export;
use crate::observe::Observations;
use crate::snapshot::{MeshSnapshot, SvcKind};

pub mod findings;
mod list;
mod model;
mod needs;
pub mod routes;

pub use list::export_list;
pub use model::{ExportAction, ExportKind, ExportOptions, ExportRec, Need, Reason, ALL};
use needs::Obj;

/// One recommendation per Service, ServiceEntry, VirtualService and
/// DestinationRule (DestinationRules with a workloadSelector, which istiod
/// keeps to their namespace, are left out), sorted by kind, namespace
/// and name.
pub fn recommend_exports(
    snap: &MeshSnapshot,
    obs: &Observations,
    opts: ExportOptions,
) -> Vec<ExportRec> {
    let mut n = needs::needs(snap, obs);
    let mut out = Vec::new();
    for (s, svc) in snap.services.iter().enumerate() {
        if svc.kind == SvcKind::Kube {
            let subject = Subject {
                kind: ExportKind::Service,
                ns: &svc.namespace,
                name: &svc.name,
                declared: svc.declared.clone(),
                ours: svc.declared_ours,
                current: svc.export.clone(),
            };
            out.push(subject.rec(n.take(Obj::Svc(s))));
        }
    }
    out.extend(service_entries(snap, &mut n));
    for (v, vs) in snap.virtual_services.iter().enumerate() {
        if vs.route.is_some() {
            // A Gateway API route has no exportTo to write: what it needs
            // is kept exported (its parent and backends), nothing more.
            n.take(Obj::Vs(v));
            continue;
        }
        let subject = Subject {
            kind: ExportKind::VirtualService,
            ns: &vs.namespace,
            name: &vs.name,
            declared: vs.declared.clone(),
            ours: vs.declared_ours,
            current: vs.export.clone(),
        };
        out.push(subject.rec(n.take(Obj::Vs(v))));
    }
    for (d, dr) in snap.destination_rules.iter().enumerate() {
        if dr.selector.is_none() {
            let subject = Subject {
                kind: ExportKind::DestinationRule,
                ns: &dr.namespace,
                name: &dr.name,
                declared: dr.declared.clone(),
                ours: dr.declared_ours,
                current: dr.export.clone(),
            };
            out.push(subject.rec(n.take(Obj::Dr(d))));
        }
    }
    for r in &mut out {
        decide(r, snap, opts);
    }
    out.sort_by(|a, b| (a.kind, &a.namespace, &a.name).cmp(&(b.kind, &b.namespace, &b.name)));
    out
}

/// One record per ServiceEntry: the needs of all its hosts, and who its
/// hosts are visible to today (after serviceEntryVisibility).
fn service_entries(snap: &MeshSnapshot, n: &mut needs::Needs) -> Vec<ExportRec> {
    let defaults = snap.mesh.export_defaults_for(snap.options.istio);
    let mut entries = Vec::new();
    for se in &snap.service_entries {
        let mut need = Need::new();
        let mut current = None;
        for (s, svc) in snap.services.iter().enumerate() {
            if svc.kind == SvcKind::Entry && svc.namespace == se.namespace && svc.name == se.name {
                merge(&mut need, n.take(Obj::Svc(s)));
                current.get_or_insert_with(|| svc.export.clone());
            }
        }
        let subject = Subject {
            kind: ExportKind::ServiceEntry,
            ns: &se.namespace,
            name: &se.name,
            declared: se.export_to.clone().filter(|l| !l.is_empty()),
            ours: se.declared_ours,
            current: current.unwrap_or_else(|| {
                let d = &defaults.default_service_export_to;
                Export::for_service(se.export_to.as_deref(), d, &se.namespace)
            }),
        };
        let mut r = subject.rec(need);
        if Exemption::of(&se.annotations).reason().is_some() {
            r.action = ExportAction::Exempt;
        }
        entries.push((r, se.hosts.clone()));
    }
    same_host_entries_agree(&mut entries);
    entries.into_iter().map(|(r, _)| r).collect()
}

fn merge(into: &mut Need, from: Need) {
    for (ns, why) in from {
        into.entry(ns).or_default().extend(why);
    }
}

/// An object whose exportTo is recommended; `current` is who sees it today.
struct Subject<'a> {
    kind: ExportKind,
    ns: &'a str,
    name: &'a str,
    declared: Option<Vec<String>>,
    ours: bool,
    current: Export,
}

impl Subject<'_> {
    /// Its record before the action is decided.
    fn rec(self, mut needs: Need) -> ExportRec {
        needs
            .entry(self.ns.to_string())
            .or_default()
            .insert(Reason::Own);
        let current = &self.current;
        let hidden_from = needs
            .iter()
            .filter(|(n, why)| {
                *n != ALL && why.iter().any(Reason::is_call) && !current.visible_to(n)
            })
            .map(|(n, _)| n.clone())
            .collect();
        ExportRec {
            kind: self.kind,
            namespace: self.ns.to_string(),
            name: self.name.to_string(),
            declared: self.declared,
            ours: self.ours,
            needs,
            recommended: Vec::new(),
            action: if self.current == Export::Hidden {
                ExportAction::Hidden
            } else {
                ExportAction::Unchanged
            },
            hidden_from,
        }
    }
}

/// ServiceEntries of one namespace that share a host merge in istiod only
/// when their exportTo are equal (`canMergeServices`, sidecar.go, 1.31):
/// give them the union of their needs.
fn same_host_entries_agree(entries: &mut [(ExportRec, Vec<String>)]) {
    for i in 0..entries.len() {
        for j in 0..entries.len() {
            let share = i != j
                && entries[i].0.namespace == entries[j].0.namespace
                && entries[i].1.iter().any(|h| entries[j].1.contains(h));
            if share {
                let other = entries[j].0.needs.clone();
                merge(&mut entries[i].0.needs, other);
            }
        }
    }
}

/// Sets the list to write and the action.
fn decide(r: &mut ExportRec, snap: &MeshSnapshot, opts: ExportOptions) {
    if matches!(r.action, ExportAction::Hidden | ExportAction::Exempt) {
        return;
    }
    if r.needs.contains_key(ALL) {
        r.action = ExportAction::Everyone;
        return;
    }
    let needed: BTreeSet<String> = r.needs.keys().cloned().collect();
    r.recommended = export_list(&r.namespace, &needed);
    let now = effective(snap, r.kind, r.declared.as_deref(), &r.namespace);
    let after = effective(snap, r.kind, Some(&r.recommended), &r.namespace);
    r.action = if now == after {
        ExportAction::Unchanged
    } else if r.declared.is_some() && !r.ours && !opts.force {
        ExportAction::OwnerSet
    } else {
        ExportAction::Write
    };
}

/// Who an exportTo (before any serviceEntryVisibility cap) lets see an
/// object of `kind`, with the mesh defaults.
fn effective(snap: &MeshSnapshot, kind: ExportKind, list: Option<&[String]>, ns: &str) -> Export {
    let d = snap.mesh.export_defaults_for(snap.options.istio);
    match kind {
        ExportKind::Service | ExportKind::ServiceEntry => {
            Export::for_service(list, &d.default_service_export_to, ns)
        }
        ExportKind::VirtualService => {
            Export::for_virtual_service(list, &d.default_virtual_service_export_to, ns)
        }
        ExportKind::DestinationRule => {
            Export::for_destination_rule(list, &snap.mesh.default_destination_rule_export_to, ns)
        }
    }
}

/// The command that computes (and with `apply`, writes) the exportTo of
/// the objects of `ns` from observed traffic: what MS0002's fix and the
/// webhook, which has no traffic evidence, point to.
pub fn exports_command(ns: &str) -> String {
    format!("kubectl meshscope recommend --exports -n {ns} --from-pod-logs -o table lists it; kubectl meshscope apply --exports -n {ns} --from-pod-logs writes it")
}

/// The namespaces holding an object that another namespace needs (calls,
/// routes to, imports by name, or the mesh config makes it call).
pub fn needed_from_elsewhere(snap: &MeshSnapshot, obs: &Observations) -> BTreeSet<String> {
    let n = needs::needs(snap, obs);
    let mut out = BTreeSet::new();
    for (o, need) in &n.of {
        let home = match *o {
            Obj::Svc(s) => &snap.services[s].namespace,
            Obj::Vs(v) => &snap.virtual_services[v].namespace,
            Obj::Dr(d) => &snap.destination_rules[d].namespace,
        };
        if need.keys().any(|ns| ns != home) {
            out.insert(home.clone());
        }
    }
    out
}
