//! The workload selector of a recommended Sidecar: labels that stay true
//! for the workload's whole life and select no other workload.

use crate::labels as stable;
use crate::snapshot::{selector_matches, Labels, MeshSnapshot, WorkloadId, WorkloadKind};

/// How every "no stable selector" skip reason starts.
pub const NO_STABLE_SELECTOR: &str = "no stable selector";

/// The label sets of a workload's pods, or its template's before any pod
/// exists.
pub(super) fn pod_label_sets(snap: &MeshSnapshot, w: WorkloadId) -> Vec<&Labels> {
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
pub(super) fn fixed_for_life(wl: &crate::snapshot::Workload, key: &str) -> bool {
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

pub(super) fn fmt_labels(l: &Labels) -> String {
    l.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}
