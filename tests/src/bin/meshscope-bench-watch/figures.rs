//! Figures read from the cluster and the simulated sidecars: the
//! distributions, the managed Sidecars' versions, dangling references by
//! cause, and the write order on the sidecars' pushes.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::Result;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::livescale::{kubectl_json, NS};
use meshscope_e2e::watcher::{check_order, selected_changes, Pass, WriteEvent, WriteKind};
use meshscope_e2e::xds::refs::Cause;
use meshscope_e2e::xds::Sim;
use serde_json::{json, Value};

use crate::scale::ScaleCtx;

/// p50, p95 and worst of `v` (nearest rank); None when empty.
pub fn dist(v: &[f64]) -> Value {
    if v.is_empty() {
        return json!({"n": 0});
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = |q: f64| s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    json!({"n": s.len(), "p50": r3(rank(0.5)), "p95": r3(rank(0.95)), "worst": r3(s[s.len() - 1])})
}

/// The managed Sidecars' resourceVersions, by name.
pub fn sidecar_versions(c: &Cluster) -> Result<BTreeMap<String, String>> {
    let v = kubectl_json(
        c,
        &[
            "get",
            "sidecars.networking.istio.io",
            "-n",
            NS,
            "-l",
            "app.kubernetes.io/managed-by=kubectl-meshscope",
        ],
    )?;
    Ok(v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            (
                i["metadata"]["name"].as_str().unwrap_or("").to_string(),
                i["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect())
}

/// Item 3 of issue #18, by cause: the dangling-reference episodes over
/// all proxies (`tests/src/xds/refs.rs`) that opened between `from` (the
/// watcher's start: the initial `apply` narrows every proxy from the whole
/// mesh, where istiod 1.31's CDS-first push order opens such windows
/// itself, BENCHMARKS.md, "Dangling references") and `to` (its stop).
pub fn dangling_by_cause(sim: &Sim, from: Instant, to: Instant) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for c in [
        Cause::CdsBeforeListenerOrRoute,
        Cause::NamedBeforeCluster,
        Cause::Persistent,
    ] {
        out.insert(c.as_str(), 0);
    }
    for p in sim.proxies() {
        for e in p.dangling_episodes() {
            if e.opened_at >= from && e.opened_at <= to {
                *out.entry(e.cause().as_str()).or_default() += 1;
            }
        }
    }
    out
}

/// The watcher's writes grouped for [`check_order`]: the narrowings
/// reported right after widenings go with them (they are of the same pass,
/// or of a later one: either way, written after those widenings were
/// confirmed); a `not-confirmed` or `pass-error` event ends a group (the
/// next pass may narrow without those widenings).
pub fn reported_passes(events: &[(Instant, Value)]) -> Vec<Pass> {
    let mut out: Vec<Pass> = Vec::new();
    let mut last_widened: Option<bool> = None;
    for (at, e) in events {
        if matches!(e["event"].as_str(), Some("not-confirmed" | "pass-error")) {
            last_widened = None;
            continue;
        }
        let Some(w) = WriteEvent::from_event(*at, e) else {
            continue;
        };
        let widens = w.kind != WriteKind::Narrow;
        if last_widened.is_none_or(|prev| widens && !prev) {
            out.push(Pass {
                began: *at,
                writes: Vec::new(),
            });
        }
        last_widened = Some(widens);
        if let Some(p) = out.last_mut() {
            p.writes.push(w);
        }
    }
    out
}

/// Item 7: the write order on the sidecars' pushes.
pub fn write_order(x: &ScaleCtx<'_>, events: &[(Instant, Value)], t0: Instant) -> Result<Value> {
    let list = kubectl_json(x.c, &["get", "sidecars.networking.istio.io", "-n", NS])?;
    let selectors: BTreeMap<String, serde_json::Map<String, Value>> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            (
                i["metadata"]["name"].as_str().unwrap_or("").to_string(),
                i["spec"]["workloadSelector"]["labels"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            )
        })
        .collect();
    let passes = reported_passes(events);
    let r = check_order(
        &passes,
        |ns, name| {
            selectors
                .get(name)
                .map(|sel| selected_changes(x.sim.proxies(), ns, sel))
                .unwrap_or_default()
        },
        t0,
    );
    Ok(json!({
        "groups": passes.len(),
        "widened_and_narrowed": r.both,
        "compared": r.checked,
        "unresolved": r.unresolved.len(),
        "violation_count": r.violations.len(),
        "violations": r.violations.iter().take(10).collect::<Vec<_>>(),
    }))
}

pub fn pushes_since(sim: &Sim, t: Instant) -> usize {
    sim.proxies().iter().map(|p| p.pushes_since(t).len()).sum()
}
