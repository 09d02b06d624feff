//! Whether istiod's `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG` is safe for a
//! gateway: MS0025 names each cluster the flag would take from a gateway
//! that still needs it, MS0026 says what turning it on saves when nothing
//! would break. The flag is one istiod setting for the whole mesh, so
//! every gateway with an MS0025 blocks it.
//!
//! A gateway needs a cluster the flag drops ([`crate::gateway_clusters`])
//! when an EnvoyFilter applying to it names the cluster in its patches
//! (a Lua `httpCall`, a `cluster` field) without listing the Service in
//! its `envoyfilter.istio.io/referenced-services` annotation, or when its
//! observed traffic went to that Service. meshscope cannot see what
//! lives outside the cluster's API: a Wasm module's compiled-in cluster
//! names, or istiod's own flags.

use std::collections::BTreeMap;

use crate::codes::Code;
use crate::finding::{finding, Finding};
use crate::gateway_clusters::{self, FILTER_FLAG, REFERENCED_SERVICES_ANNOTATION};
use crate::observe::Observations;
use crate::scope::Evaluator;
use crate::snapshot::{MeshSnapshot, WorkloadId};

/// Why a gateway still needs a cluster the flag drops.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Need {
    /// EnvoyFilter `ns/name` names it in its patches.
    EnvoyFilter(String),
    /// The gateway's observed traffic went to it (requests).
    Traffic(u64),
}

/// The clusters (by name) a router workload needs that the flag drops,
/// each with why; `None` when `w` is not a gateway's router workload.
pub fn dropped_needs(
    snap: &MeshSnapshot,
    obs: Option<&Observations>,
    w: WorkloadId,
    eval: &mut Evaluator<'_>,
) -> Option<BTreeMap<String, Vec<Need>>> {
    let wl = &snap.workloads[w];
    if wl.injection.gateway != Some(crate::inject::Gateway::Router) {
        return None;
    }
    let labels = snap.workload_labels(w);
    let vis = eval.gateway_visible(&wl.namespace);
    let off: std::collections::BTreeSet<String> = snap
        .outbound_clusters(&vis, Some(labels))
        .into_iter()
        .collect();
    let wanted = gateway_clusters::wanted(snap, &wl.namespace, labels);
    let on = gateway_clusters::filter(snap, &vis, &wanted);
    let on: std::collections::BTreeSet<String> = snap
        .outbound_clusters(&on, Some(labels))
        .into_iter()
        .collect();
    let dropped = |c: &String| off.contains(c) && !on.contains(c);
    let mut out: BTreeMap<String, Vec<Need>> = BTreeMap::new();
    for f in snap.envoy_filters_for(&wl.namespace, labels) {
        for c in f.named_clusters.iter().filter(|c| dropped(c)) {
            out.entry(c.clone())
                .or_default()
                .push(Need::EnvoyFilter(format!("{}/{}", f.namespace, f.name)));
        }
    }
    // An east-west gateway's SNI-DNAT clusters stay with the flag on:
    // traffic they carry needs no other cluster.
    let sni: std::collections::BTreeSet<String> =
        gateway_clusters::sni_dnat_clusters(snap, &vis, labels)
            .into_iter()
            .collect();
    let traffic = obs.and_then(|o| o.of(w)).map(|t| &t.outbound);
    for ((host, port), e) in traffic.into_iter().flatten() {
        if sni.contains(&format!("outbound_.{port}_._.{host}")) {
            continue;
        }
        for c in off.iter().filter(|c| dropped(c)) {
            // The edge's cluster: its host's, on its port (0: any).
            let hit = parse_cluster(c).is_some_and(|(p, subset, h)| {
                h == host && subset.is_empty() && (*port == 0 || p == *port)
            });
            if hit {
                out.entry(c.clone())
                    .or_default()
                    .push(Need::Traffic(e.requests));
            }
        }
    }
    Some(out)
}

/// MS0025 or MS0026 for router workload `w`: its readiness for the flag.
pub fn readiness(
    snap: &MeshSnapshot,
    obs: Option<&Observations>,
    w: WorkloadId,
    eval: &mut Evaluator<'_>,
) -> Option<Finding> {
    let needs = dropped_needs(snap, obs, w, eval)?;
    let wl = &snap.workloads[w];
    let (kind, ns, name) = (wl.kind.as_str(), &wl.namespace, &wl.name);
    if !needs.is_empty() {
        let list: Vec<String> = needs
            .iter()
            .map(|(c, why)| format!("{c} ({})", describe(why)))
            .collect();
        return Some(finding(
            Code::GatewayFilterDropsNeededCluster,
            kind,
            ns,
            name,
            format!(
                "with {FILTER_FLAG}=true istiod would no longer send this gateway {}: {}; list each Service as namespace/host in the EnvoyFilter's {REFERENCED_SERVICES_ANNOTATION} annotation, or route it through a VirtualService or route bound to the gateway, before turning the flag on (the flag is mesh-wide: this gateway blocks it)",
                match needs.len() {
                    1 => "a cluster it needs".to_string(),
                    n => format!("{n} clusters it needs"),
                },
                list.join(", ")
            ),
        ));
    }
    let labels = snap.workload_labels(w);
    let vis = eval.gateway_visible(ns);
    let own_ip = wl
        .pods
        .first()
        .and_then(|p| snap.pods[*p].ips.first().copied());
    let now = snap.estimate_for_proxy(&vis, labels, own_ip, wl.inbound);
    let f = gateway_clusters::filtered(snap, &vis, None, labels, own_ip, wl.inbound);
    let judged = match obs.and_then(|o| o.of(w)) {
        Some(_) => "its routes, EnvoyFilters, providers and observed traffic",
        None => "its routes, EnvoyFilters and providers (no traffic of it was observed)",
    };
    Some(finding(
        Code::GatewayFilterSafe,
        kind,
        ns,
        name,
        format!(
            "safe to turn on {FILTER_FLAG} for this gateway, judged from {judged}: {} outbound cluster{} instead of {}, an estimated {} instead of {} of xDS per replica",
            f.outbound_clusters.len(),
            if f.outbound_clusters.len() == 1 { "" } else { "s" },
            snap.outbound_clusters(&vis, Some(labels)).len(),
            crate::units::bytes(f.estimate.bytes),
            crate::units::bytes(now.bytes)
        ),
    ))
}

/// `outbound|PORT|SUBSET|HOST` as (port, subset, host).
fn parse_cluster(c: &str) -> Option<(u32, &str, &str)> {
    let mut parts = c.split('|');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("outbound"), Some(p), Some(subset), Some(h)) => Some((p.parse().ok()?, subset, h)),
        _ => None,
    }
}

fn describe(why: &[Need]) -> String {
    let parts: Vec<String> = why
        .iter()
        .map(|n| match n {
            Need::EnvoyFilter(f) => {
                format!("named in EnvoyFilter {f}'s patches, not in its annotation")
            }
            Need::Traffic(r) => format!("{r} requests observed"),
        })
        .collect();
    parts.join("; ")
}
