//! Measurements the istiod benchmarks share: a change's push (to whom,
//! how many bytes, how long until the last ACK), the VirtualService that
//! makes one, and the safety check (every observed edge keeps its cluster).

use std::time::{Duration, Instant};

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::meshgen::Topology;
use crate::world::Pod;
use crate::xds::Sim;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PushResult {
    pub fanout: usize,
    pub names: Vec<String>,
    pub bytes: u64,
    pub seconds: f64,
}

/// Applies `yaml`, waits for the pushes to settle, and reports which
/// proxies received anything after the apply started.
pub fn measured_push(c: &Cluster, sim: &Sim, yaml: &str) -> Result<PushResult> {
    let t0 = Instant::now();
    c.apply(yaml);
    settle_after(sim, t0, Duration::from_secs(3))?;
    let mut r = PushResult::default();
    let mut last = t0;
    for p in sim.proxies() {
        let pushes = p.pushes_since(t0);
        if pushes.is_empty() {
            continue;
        }
        r.fanout += 1;
        r.names.push(p.key().to_string());
        for x in &pushes {
            r.bytes += x.bytes;
            if let Some(a) = x.acked_at {
                last = last.max(a);
            }
        }
    }
    r.names.sort();
    r.seconds = last.duration_since(t0).as_secs_f64();
    Ok(r)
}

/// Waits for the first push after `t0` (30 s at most: a change may reach
/// no proxy at all), then until nothing has moved for `quiet`.
pub fn settle_after(sim: &Sim, t0: Instant, quiet: Duration) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while sim.last_received().is_none_or(|t| t < t0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    sim.wait_stable(quiet, Duration::from_secs(600))?;
    Ok(())
}

/// A VirtualService on `host` (its `port`) with a route timeout.
pub fn probe_vs(ns: &str, name: &str, host: &str, port: u32, timeout_s: u32) -> String {
    format!(
        "apiVersion: networking.istio.io/v1\nkind: VirtualService\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  hosts:\n  - {host}\n  http:\n  - timeout: {timeout_s}s\n    route:\n    - destination:\n        host: {host}\n        port:\n          number: {port}\n"
    )
}

/// The edges whose callers lost their cluster (or, through the egress
/// gateway, the route to it), and every proxy that lost the extension
/// provider's cluster; and how many edges were checked.
pub fn lost_edges(t: &Topology, sim: &Sim, pods: &[(usize, Pod)]) -> (usize, Vec<String>) {
    let mut lost = Vec::new();
    let mut checked = 0;
    for e in &t.edges {
        checked += 1;
        let want = t.edge_cluster(e);
        for (_, pod) in pods.iter().filter(|(w, _)| *w == e.from) {
            let key = format!("{}/{}", pod.namespace, pod.name);
            let Some(p) = sim.get(&key) else {
                lost.push(format!("{key}: no proxy"));
                continue;
            };
            if !p.cluster_names().contains(&want) {
                lost.push(format!("{key} lost {want}"));
            } else if t.edge_routed(e)
                && !p
                    .referenced_clusters()
                    .values()
                    .any(|cs| cs.contains(&want))
            {
                lost.push(format!("{key} lost its route to {want}"));
            }
        }
    }
    if let Some((w, port)) = t.provider {
        checked += 1;
        let want = format!("outbound|{port}||{}", t.host(w));
        for p in sim.proxies() {
            if !p.cluster_names().contains(&want) {
                lost.push(format!("{} lost the extension provider's {want}", p.key()));
            }
        }
    }
    (checked, lost)
}
