//! `apply --wait`: waiting for istiod to push a written Sidecar and its
//! proxies to ACK it.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::Result;
use meshscope_shared::istio::Sidecar;
use meshscope_shared::snapshot::PodId;
use meshscope_shared::verify as verify_shared;

use crate::cmd::verify;
use crate::istiod::Istiod;
use crate::world::World;

/// Per proxy id, before a write: the last CDS nonce sent, and the
/// scope istiod applied.
pub type Before = HashMap<String, (String, verify_shared::AppliedScope)>;

pub struct Target {
    pub pod: PodId,
    pub sidecar: Sidecar,
}

pub struct Waited {
    pub elapsed: Duration,
    pub sidecars: usize,
    pub confirmed: Vec<PodId>,
    pub not_connected: Vec<String>,
    pub timed_out: Vec<(PodId, String)>,
}

/// The proxies to wait for: those of each written Sidecar that changed.
pub fn targets(
    plan: &[(&str, &str, &[PodId])],
    written: &[(usize, Sidecar)],
    changed: &[bool],
) -> Vec<Target> {
    written
        .iter()
        .filter(|(i, _)| changed[*i])
        .flat_map(|(i, sc)| {
            plan[*i].2.iter().map(|p| Target {
                pod: *p,
                sidecar: sc.clone(),
            })
        })
        .collect()
}

pub async fn snapshot(
    world: &World,
    istiods: &mut [Istiod],
    pods: &[PodId],
    err: &mut dyn Write,
) -> Result<Before> {
    let by_proxy = verify::sync_status(istiods, err).await?;
    let mut out = Before::new();
    for p in pods {
        let pod = &world.snap.pods[*p];
        let id = verify_shared::proxy_id(&pod.name, &pod.namespace);
        let Some((i, sync)) = by_proxy.get(&id) else {
            continue;
        };
        let (status, body) = istiods[*i]
            .get(&format!("/debug/sidecarz?proxyID={id}"))
            .await?;
        let applied = if status == 200 {
            verify_shared::parse_sidecarz(&body).unwrap_or_default()
        } else {
            Default::default()
        };
        out.insert(id, (sync.cds_sent().to_string(), applied));
    }
    Ok(out)
}

/// Polls istiod until every target proxy has the target Sidecar's
/// scope and has ACKed a push made after the write, or `limit` passes.
pub async fn wait(
    world: &World,
    istiods: &mut [Istiod],
    targets: &[Target],
    before: &Before,
    limit: Duration,
    err: &mut dyn Write,
) -> Result<Waited> {
    let started = Instant::now();
    let mut sidecars: Vec<String> = targets
        .iter()
        .map(|t| {
            format!(
                "{:?}/{:?}",
                t.sidecar.metadata.namespace, t.sidecar.metadata.name
            )
        })
        .collect();
    sidecars.sort();
    sidecars.dedup();
    let mut pending: Vec<&Target> = targets.iter().collect();
    let mut done = Waited {
        elapsed: Duration::ZERO,
        sidecars: sidecars.len(),
        confirmed: Vec::new(),
        not_connected: Vec::new(),
        timed_out: Vec::new(),
    };
    let tty = std::io::stderr().is_terminal();
    loop {
        let by_proxy = verify::sync_status(istiods, err).await?;
        let mut still = Vec::new();
        let mut why_waiting: HashMap<PodId, String> = HashMap::new();
        for t in pending {
            let pod = &world.snap.pods[t.pod];
            let id = verify_shared::proxy_id(&pod.name, &pod.namespace);
            let Some((i, sync)) = by_proxy.get(&id) else {
                done.not_connected
                    .push(format!("{}/{}", pod.namespace, pod.name));
                continue;
            };
            let (status, body) = istiods[*i]
                .get(&format!("/debug/sidecarz?proxyID={id}"))
                .await?;
            let applied = if status == 200 {
                verify_shared::parse_sidecarz(&body).ok()
            } else {
                None
            };
            let has_scope = applied
                .as_ref()
                .is_some_and(|a| verify_shared::scope_applied(a, &t.sidecar));
            let (nonce_before, had_scope) = match before.get(&id) {
                Some((n, a)) => (n.as_str(), verify_shared::scope_applied(a, &t.sidecar)),
                None => ("", false),
            };
            let pushed = had_scope || sync.cds_sent() != nonce_before;
            if has_scope && pushed && sync.in_sync() {
                done.confirmed.push(t.pod);
            } else {
                why_waiting.insert(
                    t.pod,
                    if !has_scope {
                        "istiod has not applied the new Sidecar".to_string()
                    } else if !pushed {
                        "istiod has not pushed yet".to_string()
                    } else {
                        format!("not yet ACKed: {}", sync.pending().join(", "))
                    },
                );
                still.push(t);
            }
        }
        pending = still;
        done.elapsed = started.elapsed();
        if pending.is_empty() {
            break;
        }
        if done.elapsed >= limit {
            done.timed_out = pending
                .iter()
                .map(|t| {
                    let pod = &world.snap.pods[t.pod];
                    (
                        t.pod,
                        format!(
                            "{}/{} ({})",
                            pod.namespace,
                            pod.name,
                            why_waiting.get(&t.pod).cloned().unwrap_or_default()
                        ),
                    )
                })
                .collect();
            break;
        }
        if tty && done.elapsed > Duration::from_secs(2) {
            let _ = write!(
                err,
                "\rwaiting for istiod: {} of {} proxies confirmed",
                done.confirmed.len(),
                done.confirmed.len() + pending.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    if tty && done.elapsed > Duration::from_secs(2) {
        let _ = writeln!(err);
    }
    Ok(done)
}
