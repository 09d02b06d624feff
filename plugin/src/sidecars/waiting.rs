//! `apply --wait`: waiting for istiod to push a written Sidecar and its
//! proxies to ACK it.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::Result;
use meshscope_shared::istio::Sidecar;
use meshscope_shared::snapshot::{MeshSnapshot, PodId};
use meshscope_shared::verify as verify_shared;

use crate::istiod::checks::{connect_istiods, sync_status};
use crate::istiod::Istiod;
use crate::request::ApplyRequest;
use crate::world::LiveCtx;

/// `--wait` needs istiod: found before anything is written.
pub fn connect_for_wait(ctx: &LiveCtx, a: &ApplyRequest) -> Result<Vec<Istiod>> {
    ctx.rt
        .block_on(connect_istiods(&ctx.live, &a.istiod, a.timeout_secs))
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot --wait, so nothing was applied: {e:#}\n{}",
                wait_advice(a)
            )
        })
}

/// What to do when istiod cannot confirm: `apply` can do without it,
/// `apply --watch` cannot (it confirms every widening before narrowing).
pub fn wait_advice(a: &ApplyRequest) -> &'static str {
    if a.watch.is_some() {
        "(apply --watch confirms each write on istiod: give --istiod-url, or let it port-forward to istiod's pods as verify does)"
    } else {
        "(drop --wait to apply without waiting)"
    }
}

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

/// The proxies to wait for: those of each written Sidecar that changed
/// (`pods[i]`: the pods planned Sidecar `i` scopes).
pub fn targets(pods: &[&[PodId]], written: &[(usize, Sidecar)], changed: &[bool]) -> Vec<Target> {
    written
        .iter()
        .filter(|(i, _)| changed[*i])
        .flat_map(|(i, sc)| {
            pods[*i].iter().map(|p| Target {
                pod: *p,
                sidecar: sc.clone(),
            })
        })
        .collect()
}

/// What istiod holds for `pods` before a write, within `limit` (the
/// `--wait` given: a hung istiod fails it, before anything is written).
pub async fn snapshot(
    snap: &MeshSnapshot,
    istiods: &mut [Istiod],
    pods: &[PodId],
    limit: Duration,
    err: &mut dyn Write,
) -> Result<Before> {
    match tokio::time::timeout(limit, read_before(snap, istiods, pods, err)).await {
        Ok(before) => before,
        Err(_) => anyhow::bail!(
            "istiod did not answer within --wait ({})",
            crate::duration::show_duration(limit)
        ),
    }
}

async fn read_before(
    snap: &MeshSnapshot,
    istiods: &mut [Istiod],
    pods: &[PodId],
    err: &mut dyn Write,
) -> Result<Before> {
    let by_proxy = sync_status(istiods, err).await?;
    let mut out = Before::new();
    for p in pods {
        let pod = &snap.pods[*p];
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
///
/// `limit` bounds the whole wait, every call to istiod included: a call
/// that does not answer in what is left of it, or fails, ends the wait
/// with the proxies still pending as not confirmed, the reason given. The
/// Sidecars are written by then, so a hung or failing istiod is never an
/// error here, only an unconfirmed write (which `apply --watch` reads
/// again and reports as written).
pub async fn wait(
    snap: &MeshSnapshot,
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
    // Why each proxy still waited at the last poll that istiod answered.
    let mut last_why: HashMap<PodId, String> = HashMap::new();
    loop {
        let left = limit.saturating_sub(started.elapsed());
        let (still, why_waiting) =
            match poll(snap, istiods, pending.clone(), before, left, &mut done, err).await {
                Ok(polled) => polled,
                // istiod failed, or the wait ran out during a poll: a proxy
                // keeps the reason istiod last gave for it, if it gave one.
                Err(why) => {
                    let whys = pending
                        .iter()
                        .map(|t| {
                            (
                                t.pod,
                                last_why.remove(&t.pod).unwrap_or_else(|| why.clone()),
                            )
                        })
                        .collect();
                    done.timed_out = give_up(snap, &pending, &whys);
                    done.elapsed = started.elapsed();
                    break;
                }
            };
        pending = still;
        done.elapsed = started.elapsed();
        if pending.is_empty() {
            break;
        }
        if done.elapsed >= limit {
            done.timed_out = give_up(snap, &pending, &why_waiting);
            break;
        }
        last_why = why_waiting;
        if tty && done.elapsed > Duration::from_secs(2) {
            let _ = write!(
                err,
                "\rwaiting for istiod: {} of {} proxies confirmed",
                done.confirmed.len(),
                done.confirmed.len() + pending.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(200).min(limit.saturating_sub(done.elapsed)))
            .await;
    }
    if tty && done.elapsed > Duration::from_secs(2) {
        let _ = writeln!(err);
    }
    Ok(done)
}

/// The pending targets as timed out, each `ns/pod (why)`.
fn give_up(
    snap: &MeshSnapshot,
    pending: &[&Target],
    why: &HashMap<PodId, String>,
) -> Vec<(PodId, String)> {
    pending
        .iter()
        .map(|t| {
            let pod = &snap.pods[t.pod];
            let why = why.get(&t.pod).cloned().unwrap_or_default();
            (t.pod, format!("{}/{} ({why})", pod.namespace, pod.name))
        })
        .collect()
}

/// `f`, given up after `left`: what istiod did not answer, or answered
/// with an error, as the reason a wait ends unconfirmed.
async fn bounded<T>(
    left: Duration,
    f: impl std::future::Future<Output = Result<T>>,
) -> Result<T, String> {
    match tokio::time::timeout(left, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("istiod: {e:#}")),
        Err(_) => Err("istiod did not answer within --wait".to_string()),
    }
}

/// One look at every pending target, within `left`: the targets still
/// pending and why each waits; confirmed and unconnected ones are moved to
/// `done`. An istiod that does not answer in time, or fails, is the error.
async fn poll<'t>(
    snap: &MeshSnapshot,
    istiods: &mut [Istiod],
    pending: Vec<&'t Target>,
    before: &Before,
    left: Duration,
    done: &mut Waited,
    err: &mut dyn Write,
) -> Result<(Vec<&'t Target>, HashMap<PodId, String>), String> {
    let deadline = Instant::now() + left;
    let by_proxy = bounded(left, sync_status(istiods, err)).await?;
    let mut still = Vec::new();
    let mut why_waiting: HashMap<PodId, String> = HashMap::new();
    for t in pending {
        let pod = &snap.pods[t.pod];
        let id = verify_shared::proxy_id(&pod.name, &pod.namespace);
        let Some((i, sync)) = by_proxy.get(&id) else {
            done.not_connected
                .push(format!("{}/{}", pod.namespace, pod.name));
            continue;
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let (status, body) = bounded(
            left,
            istiods[*i].get(&format!("/debug/sidecarz?proxyID={id}")),
        )
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
    Ok((still, why_waiting))
}

#[cfg(test)]
mod tests {
    use super::*;
    use meshscope_test_support::fixtures::snap;

    /// A mesh of one injected pod, web-0 in shop.
    fn world() -> MeshSnapshot {
        snap("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-0\n  namespace: shop\n  labels: {app: web}\nspec:\n  containers: [{name: c, image: x}, {name: istio-proxy, image: proxyv2}]\nstatus:\n  podIP: 10.0.0.1\n")
    }

    /// An istiod that accepts connections and never answers.
    fn hung_istiod() -> (Istiod, std::net::TcpListener) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        // Its request timeout is far above the wait: the wait bounds it.
        (
            Istiod::direct(&url, Duration::from_secs(60)).unwrap(),
            listener,
        )
    }

    #[test]
    fn a_hung_istiod_ends_the_wait_at_its_limit_as_not_confirmed_never_as_an_error() {
        let world = world();
        let (istiod, _listener) = hung_istiod();
        let mut istiods = [istiod];
        let targets = [Target {
            pod: 0,
            sidecar: Sidecar::default(),
        }];
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut err = Vec::new();
        let started = Instant::now();
        let waited = rt
            .block_on(wait(
                &world,
                &mut istiods,
                &targets,
                &Before::new(),
                Duration::from_secs(1),
                &mut err,
            ))
            .expect("a hung istiod is an unconfirmed write, not an error");
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(3),
            "waited {took:?} for a 1 s --wait"
        );
        assert!(waited.confirmed.is_empty());
        assert_eq!(waited.timed_out.len(), 1);
        assert_eq!(
            waited.timed_out[0].1,
            "shop/web-0 (istiod did not answer within --wait)"
        );
        // The snapshot before a write is bounded too, and fails: nothing
        // is written then.
        let started = Instant::now();
        let e = rt
            .block_on(snapshot(
                &world,
                &mut istiods,
                &[0],
                Duration::from_secs(1),
                &mut err,
            ))
            .expect_err("no snapshot from a hung istiod");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(e.to_string(), "istiod did not answer within --wait (1s)");
    }
}
