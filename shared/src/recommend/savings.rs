//! What a set of recommendations saves, in one line: the config istiod
//! sends the proxies of the workloads they scope, summed over those
//! proxies, now and with the recommended Sidecars (the engine's estimate,
//! which `verify` measures on istiod).

use serde::Serialize;

use super::{Outcome, Recommendation};
use crate::MeshSnapshot;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Savings {
    /// The proxies of the workloads a recommended Sidecar selects.
    pub proxies: u64,
    pub clusters_now: u64,
    pub clusters_after: u64,
    pub bytes_now: u64,
    pub bytes_after: u64,
}

/// The savings of `recs`: each recommendation's per-proxy estimates times
/// its workloads' proxies (pods with a sidecar). Recommendations without a
/// Sidecar (skipped, user-owned) count for nothing.
pub fn savings(snap: &MeshSnapshot, recs: &[Recommendation]) -> Savings {
    let mut s = Savings::default();
    for r in recs {
        let (Outcome::Sidecar { .. }, Some(after)) = (&r.outcome, &r.after) else {
            continue;
        };
        let proxies: u64 = r
            .workloads
            .iter()
            .map(|w| &snap.workloads[*w])
            .filter(|wl| wl.injection.sidecar)
            .map(|wl| wl.pods.len() as u64)
            .sum();
        s.proxies += proxies;
        s.clusters_now += proxies * r.before.clusters;
        s.clusters_after += proxies * after.clusters;
        s.bytes_now += proxies * r.before.bytes;
        s.bytes_after += proxies * after.bytes;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recommend::{recommend, RecommendOptions};
    use crate::snapshot::WorkloadKind;

    /// Each recommendation counts once per proxy of its workload.
    #[test]
    fn each_workloads_estimate_counts_once_per_proxy() {
        let mut inputs = crate::Inputs::default();
        let text = include_str!("../../../examples/bookinfo/manifests.yaml");
        for doc in serde_yaml::Deserializer::from_str(text) {
            let v = <serde_json::Value as serde::Deserialize>::deserialize(doc).unwrap();
            if v.get("kind").is_some() {
                inputs.add(v).unwrap();
            }
        }
        let snap = MeshSnapshot::build(&inputs, crate::Options::default()).unwrap();
        let w = snap
            .find_workload(&WorkloadKind::Deployment, "bookinfo", "ratings-v1")
            .unwrap();
        let opts = RecommendOptions {
            allow_idle: true,
            ..Default::default()
        };
        let recs = recommend(&snap, &Default::default(), &[w], &opts);
        let one = savings(&snap, &recs);
        let r = &recs[0];
        let pods = snap.workloads[w].pods.len() as u64;
        assert!(pods >= 1);
        assert_eq!(one.proxies, pods);
        assert_eq!(one.clusters_now, pods * r.before.clusters);
        assert_eq!(one.bytes_after, pods * r.after.as_ref().unwrap().bytes);
        assert!(one.bytes_after < one.bytes_now, "{one:?}");
        // Twice the recommendations, twice the proxies.
        let two = savings(&snap, &[recs[0].clone(), recs[0].clone()]);
        assert_eq!(two.clusters_now, 2 * one.clusters_now);
    }
}
