//! What is measured on the simulated sidecars: the xDS each holds, the
//! edges that lost their cluster or route, and the push of a change to
//! auth's VirtualService.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::dist::{pct, TYPES};
use meshscope_e2e::xds::Sim;
use serde::Serialize;

use crate::mesh::{host, Edge, HUB_PORT};

/// A distribution of per-proxy bytes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Dist {
    pub proxies: usize,
    pub p50: u64,
    pub p95: u64,
    pub max: u64,
    pub worst: String,
    /// type -> p50 bytes
    pub p50_by_type: BTreeMap<String, u64>,
}

pub fn dist(sims: &[(String, meshscope_e2e::xds::ProxyConfig)]) -> Dist {
    let mut totals: Vec<u64> = sims.iter().map(|(_, p)| p.total_bytes).collect();
    totals.sort_unstable();
    let worst = sims.iter().max_by_key(|(_, p)| p.total_bytes);
    let mut d = Dist {
        proxies: sims.len(),
        p50: pct(&totals, 0.5),
        p95: pct(&totals, 0.95),
        max: totals.last().copied().unwrap_or(0),
        worst: worst.map(|(k, _)| k.clone()).unwrap_or_default(),
        ..Dist::default()
    };
    for t in TYPES {
        let mut v: Vec<u64> = sims.iter().map(|(_, p)| p.total(t).bytes).collect();
        v.sort_unstable();
        d.p50_by_type.insert(t.into(), pct(&v, 0.5));
    }
    d
}

/// Per role, and `all`.
pub fn by_role(sim: &Sim, roles: &BTreeMap<String, &'static str>) -> BTreeMap<String, Dist> {
    let snaps: Vec<(String, &'static str, _)> = sim
        .proxies()
        .iter()
        .map(|p| {
            let role = roles.get(p.key()).copied().unwrap_or("other");
            (p.key().to_string(), role, p.snapshot())
        })
        .collect();
    let mut out = BTreeMap::new();
    for role in ["all", "caller", "hub", "leaf", "idle"] {
        let of: Vec<_> = snaps
            .iter()
            .filter(|(_, r, _)| role == "all" || *r == role)
            .map(|(k, _, p)| (k.clone(), p.clone()))
            .collect();
        out.insert(role.to_string(), dist(&of));
    }
    out
}

/// The edges whose caller lacks the callee's cluster or, through a
/// VirtualService, a route naming its subset cluster.
pub fn lost_edges(sim: &Sim, edges: &[Edge]) -> Vec<String> {
    let mut lost = Vec::new();
    for e in edges {
        let Some(p) = sim.get(&e.caller) else {
            lost.push(format!("{}: no proxy", e.caller));
            continue;
        };
        let want = format!("outbound|{}||{}", e.port, e.host);
        if !p.cluster_names().contains(&want) {
            lost.push(format!("{} lost {want}", e.caller));
        }
        if let Some(sub) = &e.routed {
            if !p.referenced_clusters().values().any(|cs| cs.contains(sub)) {
                lost.push(format!("{} lost its route to {sub}", e.caller));
            }
        }
    }
    lost
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct PushResult {
    pub fanout: usize,
    pub bytes: u64,
}

/// Patches auth's VirtualService (a new timeout), waits for the pushes to
/// settle, and counts the proxies that received anything since.
pub fn vs_push(c: &Cluster, sim: &Sim, hub: &str, timeout_s: u32) -> Result<PushResult> {
    let h = host("auth", hub);
    let patch = serde_json::json!({"spec": {"http": [{"timeout": format!("{timeout_s}s"),
        "route": [{"destination": {"host": h, "port": {"number": HUB_PORT}, "subset": "v1"}}]}]}});
    let p = patch.to_string();
    let args = [
        "patch",
        "virtualservice",
        "auth",
        "-n",
        hub,
        "--type=merge",
        "-p",
        &p,
    ];
    let t0 = Instant::now();
    c.kubectl_ok(&args, None);
    sim.wait_push_after(t0, Duration::from_secs(3), Duration::from_secs(300))?;
    let mut r = PushResult::default();
    for p in sim.proxies() {
        let pushes = p.pushes_since(t0);
        if !pushes.is_empty() {
            r.fanout += 1;
            r.bytes += pushes.iter().map(|x| x.bytes).sum::<u64>();
        }
    }
    Ok(r)
}

/// The proxies of the namespaces auth's VirtualService is exported to
/// (every proxy without exportTo), and that list.
pub fn exported_to(c: &Cluster, sim: &Sim, hub: &str) -> (usize, Vec<String>) {
    let out = c.kubectl_ok(
        &["get", "virtualservice", "auth", "-n", hub, "-o", "json"],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let list: Vec<String> = v["spec"]["exportTo"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_str())
        .map(|x| if x == "." { hub.to_string() } else { x.into() })
        .collect();
    let n = sim
        .proxies()
        .iter()
        .filter(|p| {
            list.is_empty() || list.contains(&p.spec().namespace) || list.iter().any(|x| x == "*")
        })
        .count();
    (n, list)
}
