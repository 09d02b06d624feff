//! What is measured of the proxies: the xDS they hold, by type and by
//! role, and how well `explain` predicted it (the calibration).

use std::collections::BTreeMap;

use anyhow::Result;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::dist::Dist;
use meshscope_e2e::istiod::ENGINE_VERSION;
use meshscope_e2e::livescale::kubectl_json;
use meshscope_e2e::xds::{ProxyConfig, Sim};
use meshscope_shared::inputs::DUMP_KINDS;
use meshscope_shared::mesh::{IstioVersion, Options};
use meshscope_shared::{Inputs, MeshSnapshot};
use serde::Serialize;

const TYPES: [&str; 4] = ["cds", "lds", "rds", "eds"];

#[derive(Clone, Debug, Default, Serialize)]
pub struct Sizes {
    pub proxies: usize,
    pub bytes_mean: f64,
    pub bytes_max: u64,
    /// type -> (mean bytes, mean resources)
    pub by_type: BTreeMap<String, (f64, f64)>,
}

pub fn sizes(snaps: &[ProxyConfig]) -> Sizes {
    let n = snaps.len().max(1) as f64;
    let mut s = Sizes {
        proxies: snaps.len(),
        ..Default::default()
    };
    for p in snaps {
        s.bytes_mean += p.total_bytes as f64 / n;
        s.bytes_max = s.bytes_max.max(p.total_bytes);
        for t in TYPES {
            let tt = p.total(t);
            let e = s.by_type.entry(t.to_string()).or_default();
            e.0 += tt.bytes as f64 / n;
            e.1 += tt.count as f64 / n;
        }
    }
    s
}

/// The engine's view of the live cluster, built from the same kinds the
/// plugin reads, for per-proxy predictions.
pub fn engine_snapshot(c: &Cluster) -> Result<MeshSnapshot> {
    let mut inputs = Inputs::default();
    let v = kubectl_json(c, &["get", "-A", DUMP_KINDS])?;
    for item in v["items"].as_array().cloned().unwrap_or_default() {
        // Objects of kinds the engine does not read are skipped.
        let _ = inputs.add(item);
    }
    let options = Options {
        istio: ENGINE_VERSION.parse::<IstioVersion>()?,
        ..Options::default()
    };
    Ok(MeshSnapshot::build(&inputs, options)?)
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Calibration {
    pub proxies: usize,
    pub clusters_equal: usize,
    pub listeners_equal: usize,
    pub routes_equal: usize,
    /// type -> (sum predicted, sum actual) bytes
    pub bytes: BTreeMap<String, (u64, u64)>,
    pub total_predicted: u64,
    pub total_actual: u64,
    pub worst_bytes_error: f64,
    /// The proxy with the worst bytes error.
    pub worst_proxy: String,
    /// Proxies whose predicted bytes are off by more than ±15%.
    pub beyond_15: usize,
    pub mismatches: Vec<String>,
}

impl Calibration {
    pub fn total_ratio(&self) -> f64 {
        self.total_predicted as f64 / self.total_actual.max(1) as f64
    }
}

pub fn calibrate(snap: &MeshSnapshot, sim: &Sim) -> Calibration {
    let mut cal = Calibration::default();
    for p in sim.proxies() {
        let spec = p.spec();
        let Some(pid) = snap
            .pods_named(&spec.pod_name)
            .iter()
            .copied()
            .find(|i| snap.pods[*i].namespace == spec.namespace)
        else {
            cal.mismatches
                .push(format!("{}: not in the snapshot", p.key()));
            continue;
        };
        let w = snap.pods[pid].workload;
        let e = meshscope_shared::explain::explain(snap, w, Some(pid), None);
        let got = p.snapshot();
        cal.proxies += 1;
        let (c, l, r) = (
            got.total("cds").count as u64,
            got.total("lds").count as u64,
            got.total("rds").count as u64,
        );
        for (what, got, predicted, equal) in [
            ("clusters", c, e.estimate.clusters, &mut cal.clusters_equal),
            (
                "listeners",
                l,
                e.estimate.listeners,
                &mut cal.listeners_equal,
            ),
        ] {
            if got == predicted {
                *equal += 1;
            } else if cal.mismatches.len() < 10 {
                cal.mismatches.push(format!(
                    "{}: {what} predicted {predicted} actual {got}",
                    p.key()
                ));
            }
        }
        if r == e.estimate.routes {
            cal.routes_equal += 1;
        }
        for (t, predicted) in [
            ("cds", e.estimate.bytes_cds),
            ("lds", e.estimate.bytes_lds),
            ("rds", e.estimate.bytes_rds),
            ("eds", e.estimate.bytes_eds),
        ] {
            let b = cal.bytes.entry(t.to_string()).or_default();
            b.0 += predicted;
            b.1 += got.total(t).bytes;
        }
        cal.total_predicted += e.estimate.bytes;
        cal.total_actual += got.total_bytes;
        let err =
            (e.estimate.bytes as f64 - got.total_bytes as f64) / got.total_bytes.max(1) as f64;
        if err.abs() > 0.15 {
            cal.beyond_15 += 1;
        }
        if err.abs() > cal.worst_bytes_error.abs() || cal.worst_proxy.is_empty() {
            cal.worst_bytes_error = err;
            cal.worst_proxy = p.key().to_string();
        }
    }
    cal
}

/// Each proxy's config, distributed by `role_of` its key.
pub fn roles_of(sim: &Sim, role_of: impl Fn(&str) -> &'static str) -> BTreeMap<String, Dist> {
    let snaps: Vec<(String, ProxyConfig)> = sim
        .proxies()
        .iter()
        .map(|p| (p.key().to_string(), p.snapshot()))
        .collect();
    Dist::by_role(&snaps, role_of)
}
