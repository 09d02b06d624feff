//! The traffic: known edges called every few seconds, new dependencies
//! from when they are due, and known edges that stop being called.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meshscope_e2e::traffic::Traffic;
use meshscope_e2e::xds::Proxy;
use meshscope_e2e::Scenario;

use crate::opts::KNOWN_PERIOD_S;

/// One new dependency, as the generator and the monitor share it.
#[derive(Clone, Debug)]
pub struct NewEdge {
    pub sleep: usize,
    pub httpbin: usize,
    /// When its first request is due.
    pub due: Instant,
    /// When its first request was written.
    pub first: Option<Instant>,
    pub next: Instant,
    /// The ACK of the push that gave the caller the cluster.
    pub acked: Option<Instant>,
    pub passthrough: u64,
    pub through_cluster: u64,
}

/// A known edge that stops being called (so the watcher narrows it away).
#[derive(Clone, Debug)]
pub struct Retired {
    pub sleep: usize,
    pub httpbin: usize,
    /// When its calls stop.
    pub due: Instant,
    pub stopped: Option<Instant>,
    /// When its caller's sidecar was first seen without the cluster.
    pub dropped: Option<Instant>,
}

/// What the generator thread sends: known edges, the new ones, and the
/// known ones to stop.
pub struct Load {
    pub known: Vec<(usize, usize)>,
    pub new: Vec<NewEdge>,
    pub retired: Vec<Retired>,
}

pub fn cluster_name(s: &Scenario, j: usize) -> String {
    format!("outbound|8000||{}", s.httpbin_host(j))
}

/// Runs until `stop`: known edges every KNOWN_PERIOD_S (spread over the
/// period), new edges every second from when they are due.
pub fn generate(
    traffic: Arc<Traffic>,
    load: Arc<Mutex<Load>>,
    proxies: BTreeMap<usize, Proxy>,
    stop: Arc<AtomicBool>,
) {
    let start = Instant::now();
    let tick = Duration::from_millis(100);
    let ticks_per_period = KNOWN_PERIOD_S * 10;
    let mut k: u64 = 0;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        let mut l = load.lock().unwrap_or_else(|e| e.into_inner());
        let mut stop_now = Vec::new();
        for r in l.retired.iter_mut() {
            if r.stopped.is_none() && now >= r.due {
                r.stopped = Some(now);
                stop_now.push((r.sleep, r.httpbin));
            }
        }
        if !stop_now.is_empty() {
            l.known.retain(|e| !stop_now.contains(e));
        }
        let slot = k % ticks_per_period;
        for (n, (i, j)) in l.known.iter().enumerate() {
            if n as u64 % ticks_per_period == slot {
                traffic.request(*i, *j, false);
            }
        }
        for e in l.new.iter_mut() {
            if now < e.due || now < e.next {
                continue;
            }
            let has = proxies.get(&e.sleep).is_some_and(|p| {
                p.cluster_names()
                    .contains(&cluster_name(&traffic.scenario, e.httpbin))
            });
            let t = Instant::now();
            traffic.request(e.sleep, e.httpbin, !has);
            if e.first.is_none() {
                e.first = Some(t);
            }
            if has {
                e.through_cluster += 1;
            } else {
                e.passthrough += 1;
            }
            e.next = t + Duration::from_secs(1);
        }
        drop(l);
        k += 1;
        let next = start + tick * k as u32;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}
