//! Watch mode (`kubectl meshscope apply --watch`): what one pass writes.
//!
//! Each pass the caller reads only the traffic since its last pass and
//! runs [`crate::recommend::recommend`] over it without pruning, which
//! keeps every host a managed Sidecar already has and adds what was
//! observed. This module turns those recommendations into the pass's
//! writes:
//!
//! - **widen**: a managed Sidecar whose workload called a host outside its
//!   scope (the edge met passthrough, an egress proxy, the black hole, a
//!   DNS failure or the dynamic forward proxy: [`crate::edges::Meets`]),
//!   and a Sidecar for a workload that has none. A recommendation that
//!   changes only the evidence annotations (request counts, the window) is
//!   not written: a write is an istiod push to every proxy it selects.
//! - **narrow** (only with `--prune-after`): hosts of a managed Sidecar
//!   that no traffic reached for that long, never a host the mesh requires
//!   (an extension provider, a VirtualService's destination such as an
//!   egress gateway: [`crate::required`]) nor an `--include`d one. A pass
//!   narrows only after its widenings are confirmed (the caller's order),
//!   so a scope never loses a host while it lacks one it needs.
//! - **report**: a user-owned Sidecar's missing hosts, once per change.
//!
//! Silence is not evidence: a workload with no traffic at all in a pass
//! has no recommendation to act on and keeps its scope as it is. The
//! [`Ledger`] of when each host was last seen lives in the watcher's
//! memory; a host it learns of (at start, or when a restarted or newly
//! elected watcher first sees a Sidecar) counts as seen then, so a restart
//! only ever delays narrowing. Times are whole seconds on the caller's
//! clock.
//!
//! Push ordering (docs/istio-semantics.md §10): istiod pushes a proxy CDS,
//! EDS, LDS, RDS in that order. A widening's clusters therefore arrive
//! before the listeners and routes that name them, and a narrowing's
//! clusters go a moment (milliseconds) before the listeners and routes
//! that name them, within one push cycle of the proxy (istio/istio#39837).
//! No Sidecar write can reorder that. What the order of writes here
//! guarantees is that nothing worse happens: a pass narrows only after its
//! widenings are confirmed, so a scope is never both growing and shrinking
//! in one push; each narrowing is one write, so one push cycle per proxy;
//! and a VirtualService's destinations count as seen whenever its host is
//! (a recommendation lists them among its dependencies), so they go with
//! that host, never before it. `tests/tests/verify/dangling.rs` checks it on a real istiod
//! after every push of 1,000 random transitions.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::edges::{self, EdgeOutcome, Meets};
use crate::istio::Sidecar;
use crate::observe::{Applied, Observations};
use crate::recommend::{with_hosts, Outcome, Recommendation, CLOSED, WINDOW_ANNOTATION};
use crate::scope::{Evaluator, ScopeSource};
use crate::snapshot::{MeshSnapshot, WorkloadId};

pub use crate::meta::SidecarRef;

/// A user-owned Sidecar's workload, as `(namespace, workload key)`: what
/// a conflict is remembered by.
type WorkloadKey = (String, String);

/// When each host of each Sidecar the watcher knows was last seen, and
/// what it last reported about user-owned Sidecars.
#[derive(Clone, Debug, Default)]
pub struct Ledger {
    seen: BTreeMap<SidecarRef, BTreeMap<String, u64>>,
    reported: BTreeMap<SidecarRef, Vec<String>>,
    /// Per workload (its namespace, `kind/namespace/name`), the
    /// conflicting Sidecars last reported.
    conflicts: BTreeMap<WorkloadKey, Vec<String>>,
}

impl Ledger {
    /// When `host` of Sidecar `key` was last seen (or first known).
    pub fn last_seen(&self, key: &SidecarRef, host: &str) -> Option<u64> {
        self.seen.get(key).and_then(|h| h.get(host)).copied()
    }

    /// Marks `hosts` of `key` seen at `now`.
    pub fn saw<'a>(
        &mut self,
        key: &SidecarRef,
        hosts: impl IntoIterator<Item = &'a str>,
        now: u64,
    ) {
        let entry = self.seen.entry(key.clone()).or_default();
        for h in hosts {
            entry.insert(h.to_string(), now);
        }
    }

    /// Restarts the prune clock of every host held: each counts as seen at
    /// `now` (or later, if it was). A pass whose traffic sources failed
    /// read nothing, and nothing read is no evidence of silence (the source
    /// that failed may have held the calls), so no host is narrowed until a
    /// whole `--prune-after` has passed since the last failure.
    pub fn restart_clock(&mut self, now: u64) {
        for t in self.seen.values_mut().flat_map(|h| h.values_mut()) {
            *t = (*t).max(now);
        }
    }

    /// Records `hosts` of `key` as first known at `now`, keeping any time
    /// already held.
    fn know<'a>(&mut self, key: &SidecarRef, hosts: impl IntoIterator<Item = &'a str>, now: u64) {
        let entry = self.seen.entry(key.clone()).or_default();
        for h in hosts {
            entry.entry(h.to_string()).or_insert(now);
        }
    }

    /// Forgets hosts of `key` that it no longer has.
    fn keep_only(&mut self, key: &SidecarRef, hosts: &BTreeSet<&str>) {
        if let Some(entry) = self.seen.get_mut(key) {
            entry.retain(|h, _| hosts.contains(h.as_str()));
        }
    }
}

/// What a write changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "change", rename_all = "kebab-case")]
pub enum Change {
    /// A new Sidecar for a workload that had none.
    Create { hosts: Vec<String> },
    /// Hosts added (or, with none added, the selector or the listener
    /// layout brought back to what meshscope writes).
    Widen { added: Vec<String> },
    /// Hosts no traffic reached for `--prune-after`.
    Narrow { removed: Vec<String> },
}

/// One Sidecar to write.
#[derive(Clone, Debug)]
pub struct Write {
    /// The recommendation it comes from (an index into the pass's).
    pub rec: usize,
    pub key: SidecarRef,
    pub sidecar: Sidecar,
    pub change: Change,
    /// The observed edges of its workloads that the current scope does not
    /// hold, and what they meet now (empty for a narrowing).
    pub outside: Vec<EdgeOutcome>,
}

/// A user-owned Sidecar's workload calls hosts it does not import.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Missing {
    pub namespace: String,
    pub sidecar: String,
    pub workload: String,
    pub missing: Vec<String>,
}

/// The pass's writes and reports.
#[derive(Clone, Debug, Default)]
pub struct PassPlan {
    /// Written first, and confirmed on istiod.
    pub widen: Vec<Write>,
    /// Written once the widenings are confirmed.
    pub narrow: Vec<Write>,
    /// User-owned Sidecars whose missing hosts changed since last said.
    pub user_owned: Vec<Missing>,
    /// Workloads that a managed Sidecar and a user's Sidecar both select
    /// (audit's MS0004), new or changed since last said.
    pub conflicts: Vec<Conflict>,
    /// Every observed edge the current scopes do not hold, by workload.
    pub outside: Vec<(WorkloadId, EdgeOutcome)>,
}

/// Several Sidecars select one workload, and meshscope owns one of them:
/// istiod applies only the oldest, so either the user's Sidecar decides
/// the scope meshscope keeps writing, or meshscope's decides it and the
/// user's is ignored. Either way the owners must settle it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Conflict {
    pub namespace: String,
    /// The workload, `kind/namespace/name`.
    pub workload: String,
    /// The Sidecars that select it, the one istiod applies first.
    pub sidecars: Vec<String>,
    /// Which of them meshscope owns.
    pub managed: Vec<String>,
}

/// What a pass needs besides the recommendations.
#[derive(Clone, Debug, Default)]
pub struct PassSettings {
    /// Now, in seconds.
    pub now: u64,
    /// `--prune-after`, in seconds.
    pub prune_after: Option<u64>,
    /// `--include`: never narrowed away.
    pub include: Vec<String>,
}

/// Decides the pass's writes from its recommendations (made from the
/// traffic since the last pass, without pruning).
pub fn plan(
    snap: &MeshSnapshot,
    obs: &Observations,
    recs: &[Recommendation],
    ledger: &mut Ledger,
    s: &PassSettings,
) -> PassPlan {
    let mut out = PassPlan::default();
    let mut eval = Evaluator::new(snap);
    for r in recs {
        conflicts(snap, r, ledger, &mut out.conflicts);
    }
    for (i, r) in recs.iter().enumerate() {
        let outside = outside_now(snap, obs, &r.workloads, &mut eval);
        out.outside
            .extend(outside.iter().map(|(w, e)| (*w, e.clone())));
        match &r.outcome {
            Outcome::Sidecar { object, added, .. } => {
                let edges = outside.into_iter().map(|(_, e)| e).collect();
                plan_managed(snap, i, r, object, added, edges, ledger, s, &mut out);
            }
            Outcome::UserOwned { sidecar, missing } => {
                let sc = &snap.sidecars[*sidecar];
                let key = SidecarRef::new(&sc.namespace, &sc.name);
                if ledger.reported.get(&key) == Some(missing) {
                    continue;
                }
                if missing.is_empty() {
                    ledger.reported.remove(&key);
                    continue;
                }
                ledger.reported.insert(key, missing.clone());
                out.user_owned.push(Missing {
                    namespace: sc.namespace.clone(),
                    sidecar: sc.name.clone(),
                    workload: snap.workloads[r.workloads[0]].key(),
                    missing: missing.clone(),
                });
            }
            Outcome::Skipped(_) => {}
        }
    }
    out
}

/// What the Sidecars in force say is already applied: per workload whose
/// scope is a managed Sidecar, the end of that Sidecar's evidence window
/// (`meshscope.io/window`, the last traffic the write that made it
/// read). A watcher that starts, or leads after another, skips its logs'
/// lines up to there, so that it starts from the Sidecars' own evidence
/// rather than from the beginning of the logs.
pub fn applied(snap: &MeshSnapshot) -> Applied {
    let mut out = BTreeMap::new();
    for (w, wl) in snap.workloads.iter().enumerate() {
        let sel = snap.select_sidecar(&wl.namespace, snap.workload_labels(w));
        let (ScopeSource::Workload(id) | ScopeSource::Namespace(id)) = sel.source else {
            continue;
        };
        let sc = &snap.sidecars[id];
        if !sc.managed {
            continue;
        }
        let end = sc
            .object
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(WINDOW_ANNOTATION))
            .and_then(|window| window.rsplit_once('/'))
            .and_then(|(_, end)| end.parse().ok());
        if let Some(end) = end {
            out.insert(w, end);
        }
    }
    Applied(out)
}

/// The conflicts of `r`'s workloads (a managed Sidecar among several that
/// select one), each said once per change; a conflict that ended is
/// forgotten, so that it is said again if it comes back.
fn conflicts(
    snap: &MeshSnapshot,
    r: &Recommendation,
    ledger: &mut Ledger,
    out: &mut Vec<Conflict>,
) {
    for &w in &r.workloads {
        let wl = &snap.workloads[w];
        let key = (wl.namespace.clone(), wl.key());
        let sel = snap.select_sidecar(&wl.namespace, snap.workload_labels(w));
        let matching = sel.matching_selectors.iter().map(|id| &snap.sidecars[*id]);
        let all: Vec<String> = matching.clone().map(|sc| sc.name.clone()).collect();
        let managed: Vec<String> = matching
            .filter(|sc| sc.managed)
            .map(|sc| sc.name.clone())
            .collect();
        if all.len() < 2 || managed.is_empty() || managed.len() == all.len() {
            ledger.conflicts.remove(&key);
            continue;
        }
        if ledger.conflicts.get(&key) == Some(&all) {
            continue;
        }
        ledger.conflicts.insert(key, all.clone());
        out.push(Conflict {
            namespace: wl.namespace.clone(),
            workload: wl.key(),
            sidecars: all,
            managed,
        });
    }
}

/// The widening and narrowing of one managed (or new) Sidecar.
#[allow(clippy::too_many_arguments)]
fn plan_managed(
    snap: &MeshSnapshot,
    i: usize,
    r: &Recommendation,
    object: &Sidecar,
    added: &[String],
    outside: Vec<EdgeOutcome>,
    ledger: &mut Ledger,
    s: &PassSettings,
    out: &mut PassPlan,
) {
    let name = object.metadata.name.clone().unwrap_or_default();
    let key = SidecarRef::new(&r.namespace, name);
    let live = snap
        .sidecars_in(&r.namespace)
        .iter()
        .map(|id| &snap.sidecars[*id])
        .find(|sc| sc.managed && sc.name == key.name);
    if let Some(live) = live {
        ledger.know(&key, live.egress_hosts(), s.now);
    }
    // Manifest hints give a new workload its first scope; once it has one,
    // only traffic widens it (a hinted host narrowed away stays away).
    let hinted_only: BTreeSet<&str> = match live {
        Some(l) => {
            let have: BTreeSet<&str> = l.egress_hosts().collect();
            r.hinted
                .iter()
                .map(String::as_str)
                .filter(|h| !have.contains(h) && !r.dependencies.iter().any(|d| d == h))
                .collect()
        }
        None => BTreeSet::new(),
    };
    let added: Vec<String> = added
        .iter()
        .filter(|h| !hinted_only.contains(h.as_str()))
        .cloned()
        .collect();
    let object = &if hinted_only.is_empty() {
        object.clone()
    } else {
        let kept = object.spec.egress.iter().flat_map(|l| l.hosts.iter());
        with_hosts(
            object,
            kept.filter(|h| !hinted_only.contains(h.as_str()))
                .cloned()
                .collect(),
        )
    };
    ledger.saw(&key, r.dependencies.iter().map(String::as_str), s.now);
    ledger.saw(&key, added.iter().map(String::as_str), s.now);
    let hosts: Vec<String> = object
        .spec
        .egress
        .iter()
        .flat_map(|l| l.hosts.iter().cloned())
        .collect();
    ledger.know(&key, hosts.iter().map(String::as_str), s.now);
    let change = match live {
        None => Some(Change::Create {
            hosts: hosts.clone(),
        }),
        Some(l) if !same_scope(&l.object, object) => Some(Change::Widen {
            added: added.clone(),
        }),
        Some(_) => None,
    };
    if let Some(change) = change {
        out.widen.push(Write {
            rec: i,
            key: key.clone(),
            sidecar: object.clone(),
            change,
            outside,
        });
    }
    let Some(after) = s.prune_after else {
        ledger.keep_only(&key, &hosts.iter().map(String::as_str).collect());
        return;
    };
    let kept_anyway: BTreeSet<&str> = r
        .required
        .iter()
        .map(|q| q.host.as_str())
        .chain(s.include.iter().map(String::as_str))
        .chain([CLOSED])
        .collect();
    let stale = |h: &String| {
        !kept_anyway.contains(h.as_str())
            && ledger
                .last_seen(&key, h)
                .is_some_and(|t| t.saturating_add(after) <= s.now)
    };
    let removed: Vec<String> = hosts.iter().filter(|h| stale(h)).cloned().collect();
    if removed.is_empty() {
        ledger.keep_only(&key, &hosts.iter().map(String::as_str).collect());
        return;
    }
    let mut left: Vec<String> = hosts.iter().filter(|h| !stale(h)).cloned().collect();
    if left.is_empty() {
        left.push(CLOSED.to_string());
    }
    let narrowed = with_hosts(object, left.clone());
    ledger.keep_only(&key, &left.iter().map(String::as_str).collect());
    out.narrow.push(Write {
        rec: i,
        key,
        sidecar: narrowed,
        change: Change::Narrow { removed },
        outside: Vec::new(),
    });
}

/// Whether two Sidecars scope alike as far as meshscope writes them: the
/// same selector and egress, whatever their annotations (and whatever
/// fields other managers own, which meshscope's apply leaves alone).
fn same_scope(live: &Sidecar, want: &Sidecar) -> bool {
    let sorted = |sc: &Sidecar| {
        sc.spec
            .egress
            .iter()
            .map(|l| {
                let mut l = l.clone();
                l.hosts.sort();
                l
            })
            .collect::<Vec<_>>()
    };
    live.spec.workload_selector == want.spec.workload_selector && sorted(live) == sorted(want)
}

/// The observed edges of `ws` that their current scope does not hold.
fn outside_now(
    snap: &MeshSnapshot,
    obs: &Observations,
    ws: &[WorkloadId],
    eval: &mut Evaluator<'_>,
) -> Vec<(WorkloadId, EdgeOutcome)> {
    let mut out = Vec::new();
    for &w in ws {
        let Some(t) = obs.of(w) else { continue };
        let wl = &snap.workloads[w];
        let sel = snap.select_sidecar(&wl.namespace, snap.workload_labels(w));
        if sel.source == ScopeSource::Implicit {
            continue;
        }
        let vis = eval.visible_for(sel.source, &wl.namespace);
        let policy = edges::policy_for(snap, sel.source);
        let dns = edges::dns_capture(snap, w);
        out.extend(
            edges::edge_outcomes(snap, t, &vis, &policy, dns)
                .into_iter()
                .filter(|e| e.meets != Meets::InScope)
                .map(|e| (w, e)),
        );
    }
    out
}
