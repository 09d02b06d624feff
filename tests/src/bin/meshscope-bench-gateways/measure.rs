//! What is measured of the router proxies: CDS bytes, cluster count and
//! total xDS per proxy, p50, p95 and max for ingress and egress gateways;
//! which gateways a change reached; and which observed gateway edges lost
//! their cluster.

use std::collections::{BTreeMap, BTreeSet};

use meshscope_e2e::dist::pct;
use meshscope_e2e::world::Pod;
use meshscope_e2e::xds::Sim;
use meshscope_e2e::xdsbench::PushResult;
use serde::Serialize;

use crate::layout::{Flow, Layout};

/// p50, p95 and max of one measure over a group of proxies.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Q {
    pub p50: u64,
    pub p95: u64,
    pub max: u64,
}

impl Q {
    fn of(mut v: Vec<u64>) -> Q {
        v.sort_unstable();
        Q {
            p50: pct(&v, 0.5),
            p95: pct(&v, 0.95),
            max: v.last().copied().unwrap_or(0),
        }
    }
}

/// One group of gateway proxies (ingress or egress).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Group {
    pub proxies: usize,
    pub cds_bytes: Q,
    pub clusters: Q,
    pub total_bytes: Q,
    /// The proxy with the most CDS bytes.
    pub largest: String,
}

/// The router proxies: (gateway workload, pod).
pub type Routers = Vec<(usize, Pod)>;

pub fn key(p: &Pod) -> String {
    format!("{}/{}", p.namespace, p.name)
}

/// The ingress (`true`) or egress gateways' proxies of `sim`.
pub fn group(sim: &Sim, routers: &Routers, l: &Layout, ingress: bool) -> Group {
    let mut rows = Vec::new();
    for (w, pod) in routers {
        if l.gateway_of(*w).is_none_or(|g| g.ingress != ingress) {
            continue;
        }
        let Some(p) = sim.get(&key(pod)) else {
            continue;
        };
        let s = p.snapshot();
        let cds = s.total("cds");
        rows.push((key(pod), cds.bytes, cds.count as u64, s.total_bytes));
    }
    let largest = rows
        .iter()
        .max_by_key(|r| (r.1, std::cmp::Reverse(r.0.clone())))
        .map(|r| r.0.clone())
        .unwrap_or_default();
    Group {
        proxies: rows.len(),
        cds_bytes: Q::of(rows.iter().map(|r| r.1).collect()),
        clusters: Q::of(rows.iter().map(|r| r.2).collect()),
        total_bytes: Q::of(rows.iter().map(|r| r.3).collect()),
        largest,
    }
}

/// The gateway workloads (`Deployment/ns/name`) a push reached, each with
/// how many of its proxies.
pub fn reached(push: &PushResult, routers: &Routers, l: &Layout) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for (w, pod) in routers {
        if push.names.contains(&key(pod)) {
            let g = l.gateway_of(*w).expect("a gateway's pod");
            *out.entry(g.key.clone()).or_default() += 1;
        }
    }
    out
}

/// `flows` whose cluster is missing from a proxy of their gateway
/// (`pod: cluster`), and how many (flow, proxy) pairs were checked.
pub fn lost(sim: &Sim, routers: &Routers, flows: &[Flow]) -> (usize, Vec<String>) {
    let mut checked = 0;
    let mut lost = Vec::new();
    for f in flows {
        for (_, pod) in routers.iter().filter(|(w, _)| *w == f.gateway) {
            checked += 1;
            let has = sim
                .get(&key(pod))
                .is_some_and(|p| p.cluster_names().contains(&f.cluster));
            if !has {
                lost.push(format!("{} lost {}", key(pod), f.cluster));
            }
        }
    }
    (checked, lost)
}

/// The `outbound|` clusters of every proxy of gateway workload `w`.
pub fn outbound_clusters(sim: &Sim, routers: &Routers, w: usize) -> Vec<BTreeSet<String>> {
    routers
        .iter()
        .filter(|(x, _)| *x == w)
        .map(|(_, pod)| {
            sim.get(&key(pod))
                .map(|p| {
                    p.cluster_names()
                        .into_iter()
                        .filter(|c| c.starts_with("outbound|"))
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// An istiod with the flag `on` or off, the router proxies connected.
pub fn connect(
    c: &meshscope_e2e::cluster::Cluster,
    t: &meshscope_e2e::meshgen::Topology,
    routers: &Routers,
    on: bool,
) -> anyhow::Result<(meshscope_e2e::istiod::Istiod, Sim)> {
    // Both with the Gateway API on, so that the flag is the only difference.
    let istiod = if on {
        meshscope_e2e::istiod::Istiod::start_filtering_gateways(c)?
    } else {
        meshscope_e2e::istiod::Istiod::start_with_gateway_api(c)?
    };
    istiod.wait_for(
        &t.registry_hosts(),
        &t.configs(),
        std::time::Duration::from_secs(300),
    )?;
    let options = meshscope_e2e::xds::SimOptions {
        concurrency: 16,
        ..meshscope_e2e::xds::SimOptions::default()
    };
    let specs = routers.iter().map(|(_, p)| p.proxy_spec()).collect();
    let sim = Sim::connect_with(&istiod.grpc_url(), specs, options)?;
    sim.wait_stable(
        std::time::Duration::from_secs(3),
        std::time::Duration::from_secs(300),
    )?;
    if let Some(p) = sim.proxies().iter().find(|p| !p.ready()) {
        anyhow::bail!("{} got no config: {:?}", p.key(), p.errors());
    }
    Ok((istiod, sim))
}
