//! Which DestinationRule a proxy uses for a service, as istiod 1.31
//! indexes and looks them up (`pilot/pkg/model/push_context.go`
//! `setDestinationRules` and `destinationRule`,
//! `pilot/pkg/model/destination_rule.go` `mergeDestinationRule`,
//! `pilot/pkg/model/sidecar.go` `SidecarScope.DestinationRule`).
//!
//! Rules are sorted (those with a `workloadSelector` first, then oldest,
//! then by name and namespace) and filed, per namespace and host, into up
//! to three pools: the namespace's *local* pool (exportTo empty, or naming
//! `*`, `.` or the namespace itself; selector rules always, as `.`), its
//! *exported* pool (every rule that is not private: private is exportTo
//! exactly `.` or the own namespace, or empty under a mesh default with
//! `.`), and the root namespace's private pool. Within a pool, a rule of a
//! host that already has entries merges its subsets into an entry whose
//! exportTo (as written) equals its own, or that its own contains, and is
//! kept as an entry of its own otherwise; a merged rule whose exportTo is
//! wider than the entry's is not kept on its own (the entry's exportTo
//! stands), so it reaches no namespace only it named.
//!
//! The lookup for a proxy in namespace C takes the most specific host in C's
//! local pool (the root's private pool when C is the root), else the
//! service namespace's exported pool, else the root's exported pool; in an
//! exported pool the most specific host is chosen *before* exportTo is
//! checked, so a nearer rule not exported to C hides a wider one that is.
//! The proxy then uses the first selector rule of its own namespace whose
//! labels it has, else the last selector-less entry: rules of one host are
//! never merged across namespaces.

use std::collections::BTreeSet;

use super::model::{DrId, DrInfo};
use crate::hash::HashMap;
use crate::labels::{selector_matches, Labels};

/// Rules istiod consolidated into one: the first's exportTo and selector
/// stand, and later rules add the subsets the entry lacks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consolidated {
    /// The rules merged, the first the one whose settings stand.
    pub rules: Vec<DrId>,
    pub namespace: String,
    /// exportTo as written (`.` stays `.`), of the first rule; `{.}` for
    /// a rule with a selector.
    pub export: BTreeSet<String>,
    pub selector: Option<Labels>,
    /// The subsets, the first of each name kept.
    pub subsets: Vec<String>,
    /// Their labels, in the same order.
    pub subset_labels: Vec<Labels>,
}

/// An index into [`DrIndex::entries`].
pub type EntryId = usize;

#[derive(Clone, Debug, Default)]
struct Pool {
    /// Entries by exact host, and by wildcard host.
    specific: HashMap<String, Vec<EntryId>>,
    wildcard: HashMap<String, Vec<EntryId>>,
}

/// Every consolidated DestinationRule, filed in istiod's pools.
#[derive(Clone, Debug, Default)]
pub struct DrIndex {
    pub entries: Vec<Consolidated>,
    local: HashMap<String, Pool>,
    exported: HashMap<String, Pool>,
    root_local: Pool,
    root: String,
}

/// Which pool a rule is filed in.
#[derive(Clone, Copy)]
enum PoolKey<'a> {
    Local(&'a str),
    Exported(&'a str),
    RootLocal,
}

impl DrIndex {
    /// `default_export` is the mesh's `defaultDestinationRuleExportTo`:
    /// only whether it names `.` matters.
    pub fn build(rules: &[DrInfo], default_export: &[String], root: &str) -> Self {
        let mut order: Vec<DrId> = (0..rules.len()).collect();
        order.sort_by(|a, b| {
            let (x, y) = (&rules[*a], &rules[*b]);
            (x.selector.is_none(), x.created, &x.name, &x.namespace).cmp(&(
                y.selector.is_none(),
                y.created,
                &y.name,
                &y.namespace,
            ))
        });
        let mut index = DrIndex {
            root: root.to_string(),
            ..DrIndex::default()
        };
        let private_default = default_export.iter().any(|e| e == ".");
        for id in order {
            let d = &rules[id];
            let export: BTreeSet<String> = if d.selector.is_some() {
                BTreeSet::from([".".to_string()])
            } else {
                d.export_to.iter().cloned().collect()
            };
            let own = d.namespace.as_str();
            if export.is_empty()
                || export.contains("*")
                || export.contains(".")
                || export.contains(own)
            {
                index.file(PoolKey::Local(own), rules, id, &export);
            }
            let private = (export.is_empty() && private_default)
                || (export.len() == 1 && (export.contains(".") || export.contains(own)));
            if !private {
                index.file(PoolKey::Exported(own), rules, id, &export);
            } else if own == root {
                index.file(PoolKey::RootLocal, rules, id, &export);
            }
        }
        index
    }

    fn pool_mut(&mut self, key: PoolKey<'_>) -> &mut Pool {
        match key {
            PoolKey::Local(ns) => self.local.entry(ns.to_string()).or_default(),
            PoolKey::Exported(ns) => self.exported.entry(ns.to_string()).or_default(),
            PoolKey::RootLocal => &mut self.root_local,
        }
    }

    /// Files rule `id` in a pool: merged into the entries of its host that
    /// take it, and kept as an entry of its own unless the last entry it
    /// was compared with took it.
    fn file(&mut self, key: PoolKey<'_>, rules: &[DrInfo], id: DrId, export: &BTreeSet<String>) {
        let d = &rules[id];
        let wild = d.host.starts_with('*');
        let existing: Vec<EntryId> = {
            let pool = self.pool_mut(key);
            let map = if wild { &pool.wildcard } else { &pool.specific };
            map.get(&d.host).cloned().unwrap_or_default()
        };
        let mut separate = true;
        for e in existing {
            let entry = &self.entries[e];
            if *export == entry.export {
                separate = false;
            } else if entry.export.is_empty() || !export.is_superset(&entry.export) {
                separate = true;
                continue;
            } else {
                separate = true;
            }
            match (&entry.selector, &d.selector) {
                (Some(a), Some(b)) if a != b => {
                    separate = true;
                    continue;
                }
                (None, None) | (Some(_), Some(_)) => separate = false,
                _ => {}
            }
            let entry = &mut self.entries[e];
            entry.rules.push(id);
            for (s, l) in d.subsets.iter().zip(&d.subset_labels) {
                if !entry.subsets.contains(s) {
                    entry.subsets.push(s.clone());
                    entry.subset_labels.push(l.clone());
                }
            }
        }
        if separate {
            let e = self.entries.len();
            self.entries.push(Consolidated {
                rules: vec![id],
                namespace: d.namespace.clone(),
                export: export.clone(),
                selector: d.selector.clone(),
                subsets: d.subsets.clone(),
                subset_labels: d.subset_labels.clone(),
            });
            let pool = self.pool_mut(key);
            let map = if wild {
                &mut pool.wildcard
            } else {
                &mut pool.specific
            };
            map.entry(d.host.clone()).or_default().push(e);
        }
    }

    /// The entries istiod returns for a proxy in `client_ns` and a service
    /// `hostname` of namespace `svc_ns` (empty when none applies).
    pub fn lookup(&self, client_ns: &str, hostname: &str, svc_ns: &str) -> Vec<EntryId> {
        let first = if client_ns == self.root {
            Some(&self.root_local)
        } else {
            self.local.get(client_ns)
        };
        if let Some(found) = first.and_then(|p| most_specific(p, hostname)) {
            return found.to_vec();
        }
        for ns in [svc_ns, self.root.as_str()] {
            let Some(found) = self
                .exported
                .get(ns)
                .and_then(|p| most_specific(p, hostname))
            else {
                continue;
            };
            let out: Vec<EntryId> = found
                .iter()
                .copied()
                .filter(|e| {
                    let x = &self.entries[*e].export;
                    x.is_empty() || x.contains("*") || x.contains(client_ns)
                })
                .collect();
            if !out.is_empty() {
                return out;
            }
        }
        Vec::new()
    }

    /// The entry a proxy in `proxy_ns` uses among `found`: the first rule
    /// with a selector in its own namespace whose labels it has, else the
    /// last without one. `labels: None` (a scope, not a proxy) never
    /// matches a selector.
    pub fn for_proxy(
        &self,
        found: &[EntryId],
        proxy_ns: &str,
        labels: Option<&Labels>,
    ) -> Option<EntryId> {
        let mut catch_all = None;
        for &e in found {
            let entry = &self.entries[e];
            match &entry.selector {
                None => catch_all = Some(e),
                Some(sel) if entry.namespace == proxy_ns => {
                    if labels.is_some_and(|l| selector_matches(sel, l)) {
                        return Some(e);
                    }
                }
                Some(_) => {}
            }
        }
        catch_all
    }
}

/// The entries of the most specific host of `pool` that covers
/// `hostname`: the same host, else the longest wildcard.
fn most_specific<'a>(pool: &'a Pool, hostname: &str) -> Option<&'a [EntryId]> {
    if hostname.starts_with('*') {
        if let Some(v) = pool.wildcard.get(hostname) {
            return Some(v);
        }
    } else if let Some(v) = pool.specific.get(hostname) {
        return Some(v);
    }
    let needle = hostname.strip_prefix('*').unwrap_or(hostname);
    pool.wildcard
        .iter()
        .filter(|(h, _)| needle.ends_with(&h[1..]))
        .max_by(|(a, _), (b, _)| a.len().cmp(&b.len()).then_with(|| b.cmp(a)))
        .map(|(_, v)| v.as_slice())
}
