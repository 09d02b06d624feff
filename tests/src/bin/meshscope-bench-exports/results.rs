//! The figures of a run, as the phases fill them in.

use std::collections::BTreeMap;

use meshscope_e2e::istiod::ProcessUsage;
use serde::Serialize;

use crate::measure::{Dist, PushResult};

#[derive(Debug, Default, Serialize)]
pub struct Results {
    pub scale: usize,
    pub seed: u64,
    pub proxies: usize,
    pub mesh_services: usize,
    pub dark_services: usize,
    pub dark_ns: Vec<String>,
    pub edges: usize,
    pub routed_edges: usize,
    pub before: BTreeMap<String, Dist>,
    pub after: BTreeMap<String, Dist>,
    pub push_before: PushResult,
    pub push_after: PushResult,
    /// auth's VirtualService after apply --exports, and the proxies there.
    pub vs_exported_to: Vec<String>,
    pub vs_exported_proxies: usize,
    pub lost_before: Vec<String>,
    pub lost_after: Vec<String>,
    pub lost_with_selectors: Vec<String>,
    pub exports_narrowed: usize,
    pub exports_apply_s: f64,
    pub ms0020: usize,
    pub dropped: Vec<String>,
    pub istiod_without: ProcessUsage,
    pub istiod_with: ProcessUsage,
    pub heap_mb_without: f64,
    pub heap_mb_with: f64,
    /// Services in istiod's registry: (all, of the dark namespaces).
    pub registry_without: (usize, usize),
    pub registry_with: (usize, usize),
    pub p50_with_selectors: u64,
}
