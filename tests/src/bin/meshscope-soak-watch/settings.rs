//! The soak's shape: how many clients and destinations, how often they
//! call, the watcher's timings and how long a call is remembered.

use std::time::Duration;

use meshscope_e2e::bench::Rng;

pub const CLIENTS: usize = 6;
pub const DESTS: usize = 10;
pub const CALL_EVERY: Duration = Duration::from_secs(3);
pub const INTERVAL: &str = "2s";
pub const PRUNE_AFTER: Duration = Duration::from_secs(40);
pub const WAIT: &str = "10s";
/// How long the soak runs without faults before its final check.
pub const SETTLE: Duration = Duration::from_secs(90);
/// How long before a poll a call may have come too late for the pass
/// whose narrowing the poll saw: the pass read the log, waited up to
/// `--wait` (10 s) for its widenings, then narrowed, and the poll came up
/// to 2 s later; 2 s more for the read itself.
pub const UNSEEN: Duration = Duration::from_secs(10 + 2 + 2);
/// How long an edge's calls are remembered: enough to find the last one
/// before [`UNSEEN`] that is less than `--prune-after` old.
pub const REMEMBERED: Duration = Duration::from_secs(40 + 14 + 6);

/// A random duration of `lo..=hi` whole seconds.
pub fn secs(rng: &mut Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_secs(lo + rng.below((hi - lo + 1) as usize) as u64)
}

pub fn host(ns: &str, d: usize) -> String {
    format!("dst-{d}.{ns}.svc.cluster.local")
}
