//! Manifest hints in a recommendation (`--from-manifest-hints`): the hosts
//! a workload's manifests name, resolved and imported as its traffic
//! would be, and marked so that they can be told from observed ones.

use std::collections::{BTreeMap, BTreeSet};

use super::hosts::{needed_hosts, Needed};
use super::objects::SOURCES_ANNOTATION;
use crate::hints::{Hint, HINTS_SOURCE};
use crate::observe::{Edge, WorkloadTraffic};
use crate::required;
use crate::snapshot::MeshSnapshot;

/// The egress entries meshscope wrote from manifest hints, comma-separated
/// (those the workload's traffic also showed included): what a later
/// narrowing can tell from observed hosts.
pub const HINTED_ANNOTATION: &str = "meshscope.io/hinted-hosts";

/// The hints as traffic that names their hosts and carries no requests:
/// what [`needed_hosts`] resolves for observed calls.
pub(super) fn as_traffic<'a>(hints: impl IntoIterator<Item = &'a Hint>) -> WorkloadTraffic {
    let mut t = WorkloadTraffic::default();
    for h in hints {
        t.outbound
            .insert((h.hostname.clone(), h.port), Edge::default());
    }
    t.sources.insert(HINTS_SOURCE.to_string());
    t
}

/// The hosts the hints make a workload in `ns` need, merged into `needed`;
/// returns the entries they add (`ns/host`, observed or not).
pub(super) fn merge(
    snap: &MeshSnapshot,
    ns: &str,
    hints: &WorkloadTraffic,
    current: Option<&crate::scope::Visible>,
    needed: &mut Needed,
) -> Vec<String> {
    let n = needed_hosts(snap, ns, hints, current);
    needed.hosts.extend(n.hosts.iter().cloned());
    needed.not_visible.extend(n.not_visible);
    needed.unknown.extend(n.unknown);
    for r in n.routed {
        required::merge(&mut needed.routed, r);
    }
    needed
        .routed
        .sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
    n.hosts.into_iter().collect()
}

/// Names the hints among the Sidecar's sources, and the hosts they gave.
pub(super) fn annotate(annotations: &mut BTreeMap<String, String>, hinted: &[String]) {
    if hinted.is_empty() {
        return;
    }
    let mut sources: BTreeSet<&str> = annotations
        .get(SOURCES_ANNOTATION)
        .map(|s| s.split(',').collect())
        .unwrap_or_default();
    sources.insert(HINTS_SOURCE);
    let sources = sources.into_iter().collect::<Vec<_>>().join(",");
    annotations.insert(SOURCES_ANNOTATION.to_string(), sources);
    annotations.insert(HINTED_ANNOTATION.to_string(), hinted.join(","));
}
