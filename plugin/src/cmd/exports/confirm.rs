//! `apply --exports --wait`: istiod confirms the exportTo written. An
//! exportTo change is pushed as a Sidecar change is (a proxy in a
//! namespace the object leaves loses its clusters), and a wrong one
//! blackholes the callers left out, so the wait re-reads the mesh after
//! the writes and asks istiod until every proxy whose predicted clusters
//! changed has had a CDS push since the writes and ACKed it, and every
//! such proxy and every observed caller gets what the engine predicts
//! (verify's check, observed edges included), or `--wait` runs out.

use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Result;
use meshscope_shared::explain::{self, Explanation};
use meshscope_shared::labels::Labels;
use meshscope_shared::observe::WorkloadTraffic;
use meshscope_shared::snapshot::PodId;
use meshscope_shared::verify::{self as verify_shared, ProxyCheck};

use crate::istiod::checks::{reported, sync_status};
use crate::istiod::Istiod;
use crate::world::World;

/// Per proxy id, before the writes: the last CDS nonce istiod sent it.
pub type Before = HashMap<String, String>;

/// A proxy to confirm, in the mesh read after the writes.
pub struct Target {
    pub pod: PodId,
    /// The writes changed the clusters the engine predicts for it, so
    /// istiod must push to it.
    pub changed: bool,
    explanation: Explanation,
}

pub struct Confirmed {
    pub elapsed: Duration,
    /// The last check of every target istiod answered for.
    pub checks: Vec<ProxyCheck>,
    pub confirmed: usize,
    pub not_connected: Vec<String>,
    /// `ns/pod (why)`.
    pub timed_out: Vec<String>,
}

/// The CDS nonce istiod last sent each proxy, within `limit` (a hung
/// istiod fails it, before anything is written).
pub async fn snapshot(
    istiods: &mut [Istiod],
    limit: Duration,
    err: &mut dyn Write,
) -> Result<Before> {
    match tokio::time::timeout(limit, sync_status(istiods, err)).await {
        Ok(by_proxy) => Ok(by_proxy?
            .into_iter()
            .map(|(id, (_, s))| (id, s.cds_sent().to_string()))
            .collect()),
        Err(_) => anyhow::bail!(
            "istiod did not answer within --wait ({})",
            crate::duration::show_duration(limit)
        ),
    }
}

/// The proxies to confirm: each injected pod of `fresh` (the mesh after
/// the writes) whose predicted outbound clusters differ from those `old`
/// predicted, and each that `traffic` shows calling something. Pods of
/// one workload with the same labels share a prediction, computed once.
pub fn targets(
    old: &World,
    fresh: &World,
    traffic: &HashMap<String, WorkloadTraffic>,
) -> Vec<Target> {
    let snap = &fresh.snap;
    let mut now: HashMap<(usize, &Labels), Explanation> = HashMap::new();
    let mut before: HashMap<(usize, &Labels), Vec<String>> = HashMap::new();
    let mut out = Vec::new();
    for p in (0..snap.pods.len()).filter(|p| snap.pods[*p].injection.sidecar) {
        let pod = &snap.pods[p];
        let e = now
            .entry((pod.workload, &pod.labels))
            .or_insert_with(|| explain::explain(snap, pod.workload, Some(p), None));
        let changed = old
            .snap
            .find_pod(&pod.namespace, &pod.name)
            .is_some_and(|o| {
                let op = &old.snap.pods[o];
                let was = before.entry((op.workload, &op.labels)).or_insert_with(|| {
                    explain::explain(&old.snap, op.workload, Some(o), None).outbound_clusters
                });
                *was != e.outbound_clusters
            });
        let calls = traffic
            .get(&snap.workloads[pod.workload].key())
            .is_some_and(|t| !t.outbound.is_empty());
        if changed || calls {
            out.push(Target {
                pod: p,
                changed,
                explanation: e.clone(),
            });
        }
    }
    out
}

/// Asks istiod until every target is confirmed, or `limit` passes (every
/// call to istiod included). The exportTo is written by then, so a hung
/// or failing istiod is an unconfirmed write, never an error.
pub async fn wait(
    fresh: &World,
    traffic: &HashMap<String, WorkloadTraffic>,
    istiods: &mut [Istiod],
    targets: &[Target],
    before: &Before,
    limit: Duration,
    err: &mut dyn Write,
) -> Confirmed {
    let started = Instant::now();
    let mut pending: Vec<&Target> = targets.iter().collect();
    let mut done = Confirmed {
        elapsed: Duration::ZERO,
        checks: Vec::new(),
        confirmed: 0,
        not_connected: Vec::new(),
        timed_out: Vec::new(),
    };
    let mut why: HashMap<PodId, String> = HashMap::new();
    loop {
        let left = limit.saturating_sub(started.elapsed());
        let polled = tokio::time::timeout(
            left,
            poll(fresh, traffic, istiods, &pending, before, &mut done, err),
        )
        .await;
        let failed = match polled {
            Ok(Ok((still, whys))) => {
                pending = still;
                why = whys;
                None
            }
            Ok(Err(e)) => Some(format!("istiod: {e:#}")),
            Err(_) => Some("istiod did not answer within --wait".to_string()),
        };
        done.elapsed = started.elapsed();
        if pending.is_empty() {
            break;
        }
        if failed.is_some() || done.elapsed >= limit {
            done.timed_out = pending
                .iter()
                .map(|t| {
                    let pod = &fresh.snap.pods[t.pod];
                    let w = why.get(&t.pod).or(failed.as_ref()).cloned();
                    format!("{}/{} ({})", pod.namespace, pod.name, w.unwrap_or_default())
                })
                .collect();
            break;
        }
        tokio::time::sleep(Duration::from_millis(200).min(limit.saturating_sub(done.elapsed)))
            .await;
    }
    done
}

/// One look at every pending target: those still pending and why; the
/// confirmed and unconnected ones are counted in `done`, and each
/// target's latest check replaces its earlier one.
async fn poll<'t>(
    fresh: &World,
    traffic: &HashMap<String, WorkloadTraffic>,
    istiods: &mut [Istiod],
    pending: &[&'t Target],
    before: &Before,
    done: &mut Confirmed,
    err: &mut dyn Write,
) -> Result<(Vec<&'t Target>, HashMap<PodId, String>)> {
    let snap = &fresh.snap;
    let by_proxy = sync_status(istiods, err).await?;
    let mut still = Vec::new();
    let mut why = HashMap::new();
    for &t in pending {
        let pod = &snap.pods[t.pod];
        let id = verify_shared::proxy_id(&pod.name, &pod.namespace);
        let rep = match by_proxy.get(&id) {
            Some((i, sync)) => reported(&mut istiods[*i], sync).await?,
            None => None,
        };
        let Some(rep) = rep else {
            done.not_connected
                .push(format!("{}/{}", pod.namespace, pod.name));
            continue;
        };
        let t_traffic = traffic.get(&snap.workloads[pod.workload].key());
        let check = verify_shared::check_proxy(snap, t.pod, &t.explanation, Some(&rep), t_traffic);
        let pushed = !t.changed || before.get(&id).is_none_or(|n| *n != rep.sync.cds_sent());
        let waits_for = if !pushed {
            Some("istiod has not pushed yet".to_string())
        } else {
            verify_shared::unconfirmed(&check, t.changed)
        };
        done.checks
            .retain(|c| !(c.namespace == check.namespace && c.pod == check.pod));
        done.checks.push(check);
        match waits_for {
            None => done.confirmed += 1,
            Some(w) => {
                why.insert(t.pod, w);
                still.push(t);
            }
        }
    }
    Ok((still, why))
}
