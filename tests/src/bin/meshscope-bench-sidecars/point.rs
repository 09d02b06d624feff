//! What one point measures: its mode, istiod's and the simulator's cost,
//! the xDS per proxy, and the hub and leaf changes' probes; and a point
//! left out.

use std::collections::{BTreeMap, BTreeSet};

use meshscope_e2e::dist::Dist;
use meshscope_e2e::xdsbench::PushResult;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Unscoped,
    Scoped,
}

/// A VirtualService change on one Service at one point.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Probe {
    pub host: String,
    /// Connected proxies of the workloads that call it.
    pub callers: usize,
    pub push: PushResult,
    /// Pushed although not a caller.
    pub outside: usize,
    /// Callers it did not reach (absent from runs before it was counted).
    #[serde(default)]
    pub missed: usize,
    /// The first of those pushed outside and of those missed, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outside_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missed_names: Vec<String>,
}

/// Names kept in a probe's JSON of those pushed outside or missed.
pub const NAMED: usize = 10;

impl Probe {
    /// `push` held to `callers` (keys of connected proxies): who it
    /// reached outside them, and which of them it missed.
    pub fn new(host: String, callers: &BTreeSet<String>, mut push: PushResult) -> Probe {
        let pushed: BTreeSet<&String> = push.names.iter().collect();
        let outside: Vec<&String> = pushed
            .iter()
            .copied()
            .filter(|n| !callers.contains(*n))
            .collect();
        let missed: Vec<&String> = callers.iter().filter(|n| !pushed.contains(n)).collect();
        let first = |v: &[&String]| v.iter().take(NAMED).map(|n| (*n).clone()).collect();
        let p = Probe {
            host,
            callers: callers.len(),
            outside: outside.len(),
            missed: missed.len(),
            outside_names: first(&outside),
            missed_names: first(&missed),
            push: PushResult::default(),
        };
        // The names are thousands at this size; the JSON keeps the counts.
        push.names.clear();
        Probe { push, ..p }
    }

    /// The target at a scoped point: the change reaches exactly its
    /// callers' proxies, every one and no other.
    pub fn row(&self, which: &str, n: usize) -> [String; 4] {
        let names = |count: usize, v: &[String]| match count {
            0 => "none".to_string(),
            c if c == v.len() => v.join(", "),
            c => format!("{c}: {}, ...", v.join(", ")),
        };
        [
            format!("scoped {n}: {which} change ({}) pushed to", self.host),
            format!(
                "{} proxies; callers missed: {}; pushed outside: {}",
                self.push.fanout,
                names(self.missed, &self.missed_names),
                names(self.outside, &self.outside_names)
            ),
            format!(
                "= its callers' {} proxies (each reached, no other)",
                self.callers
            ),
            if self.missed == 0 && self.outside == 0 {
                "yes"
            } else {
                "no"
            }
            .to_string(),
        ]
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    pub mode: Mode,
    pub proxies: usize,
    /// Proxies that never held a full config.
    pub not_ready: usize,
    pub connect_s: f64,
    pub istiod_cpu_connect_s: f64,
    pub istiod_rss_mb: f64,
    pub istiod_hwm_mb: f64,
    /// The growth of this process's RSS over the connect (the simulator
    /// runs in it); after a larger earlier point it may reuse pages that
    /// point freed, so see `sim_heap_mb` too.
    pub sim_rss_mb: f64,
    /// The growth of the heap in use over the connect: the simulator's
    /// streams and state (absent from runs before it was measured).
    #[serde(default)]
    pub sim_heap_mb: f64,
    /// The raw run this point was read back from (`--unscoped-from`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    pub xds: BTreeMap<String, Dist>,
    pub hub: Probe,
    pub leaf: Probe,
    pub safety_edges: usize,
    pub lost: Vec<String>,
}

/// A point left out, and why.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Skipped {
    pub mode: Mode,
    pub proxies: usize,
    pub why: String,
}
