//! One scale of one scenario, in the form every table and target reads.

use std::collections::BTreeMap;

use meshscope_e2e::dist::Dist;
use meshscope_e2e::istiod::ProcessUsage;
use serde::Serialize;

use crate::measure::Calibration;
use crate::probe::Probe;

/// One scale of one scenario, in the form every table and target reads.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub scale: usize,
    pub proxies: usize,
    pub services: usize,
    pub edges: usize,
    pub before: BTreeMap<String, Dist>,
    pub after: BTreeMap<String, Dist>,
    pub probes: Vec<Probe>,
    /// Observed edges checked (per caller workload), and those lost.
    pub safety_edges: usize,
    pub lost: Vec<String>,
    pub calibration_before: Calibration,
    pub calibration_after: Calibration,
    pub istiod_before: ProcessUsage,
    pub istiod_after: ProcessUsage,
    pub istiod_cpu_connect_s: f64,
    pub istiod_cpu_apply_s: f64,
    /// From the start of `apply` until nothing moved for 12 s.
    pub apply_converged_s: f64,
    pub apply_wait_s: f64,
    pub apply_waited_proxies: usize,
    pub sidecars_written: usize,
    /// The reference scenario's own figures (verify, the old JSON keys).
    pub extra: serde_json::Value,
}
