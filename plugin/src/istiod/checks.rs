//! Asking istiod what it applied and generated for each proxy: the
//! checks `verify`, `apply --wait` and `apply --exports --wait` make. The
//! connection itself is [`super::Istiod`]; what a check concludes is
//! `shared`'s ([`meshscope_shared::verify`]).

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Result};
use meshscope_shared::explain;
use meshscope_shared::observe::{Observations, WorkloadTraffic};
use meshscope_shared::snapshot::{MeshSnapshot, PodId};
use meshscope_shared::verify::{self, ProxyCheck, Reported, SyncStatus};

use super::{Discovery, Istiod};
use crate::live::Live;
use crate::request::IstiodRequest;

/// Says once when the proxies run another Istio minor version than the
/// one whose semantics the predictions use.
pub fn warn_version_skew(
    snap: &MeshSnapshot,
    checks: &[ProxyCheck],
    err: &mut dyn Write,
) -> Result<()> {
    let used = snap.options.istio;
    let mut seen: Vec<String> = checks
        .iter()
        .filter_map(|c| c.proxy_version.as_deref())
        .filter_map(|v| v.parse::<meshscope_shared::IstioVersion>().ok())
        .filter(|v| *v != used)
        .map(|v| v.to_string())
        .collect();
    seen.sort();
    seen.dedup();
    if let Some(w) = meshscope_shared::notes::version_skew(&seen, used) {
        writeln!(err, "warning: {w}")?;
    }
    Ok(())
}

/// Finds istiod (or takes `--istiod-url`).
pub async fn connect_istiods(
    live: &Live,
    flags: &IstiodRequest,
    timeout_secs: u64,
) -> Result<Vec<Istiod>> {
    let d = Discovery {
        urls: &flags.urls,
        namespace: &flags.namespace,
        revision: flags.revision.as_deref(),
        timeout: Duration::from_secs(timeout_secs.max(1)),
    };
    // The permissions this needs were checked with the others, in one
    // pass, when the world was read (`Purpose::Verify` / `Purpose::Apply`).
    d.find(live).await
}

/// The observed traffic of each workload, by `kind/ns/name`, so that a
/// snapshot read later can find it.
pub fn traffic_by_workload(
    snap: &MeshSnapshot,
    obs: Option<&Observations>,
) -> HashMap<String, WorkloadTraffic> {
    let Some(obs) = obs else {
        return HashMap::new();
    };
    obs.traffic
        .iter()
        .map(|(w, t)| (snap.workloads[*w].key(), t.clone()))
        .collect()
}

/// Every istiod's `/debug/syncz`: which replica each proxy is connected
/// to, and its nonces. An istiod that cannot be read is named on stderr;
/// its proxies then show as not connected.
pub async fn sync_status(
    istiods: &mut [Istiod],
    err: &mut dyn Write,
) -> Result<HashMap<String, (usize, SyncStatus)>> {
    let mut by_proxy = HashMap::new();
    let mut failures = Vec::new();
    for (i, istiod) in istiods.iter_mut().enumerate() {
        match istiod.get_ok("/debug/syncz").await {
            Ok(body) => {
                for s in verify::parse_syncz(&body)? {
                    by_proxy.entry(s.proxy.clone()).or_insert((i, s));
                }
            }
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    if failures.len() == istiods.len() {
        bail!("{}", failures.join("; "));
    }
    for f in failures {
        writeln!(err, "warning: {f}; its proxies show as NOT CONNECTED")?;
    }
    Ok(by_proxy)
}

/// A per-proxy debug endpoint: `None` when istiod answers 404 (the proxy
/// is not connected to it, or not anymore).
async fn per_proxy(istiod: &mut Istiod, path: &str) -> Result<Option<Vec<u8>>> {
    let (status, body) = istiod.get(path).await?;
    match status {
        200 => Ok(Some(body)),
        404 => Ok(None),
        _ => bail!(
            "istiod {} answered {status} for {}: {}",
            istiod.name,
            path.split('?').next().unwrap_or(path),
            String::from_utf8_lossy(&body).trim()
        ),
    }
}

/// What the istiod a proxy is connected to reports for it, or `None` when
/// it is not connected (anymore).
pub async fn reported(istiod: &mut Istiod, sync: &SyncStatus) -> Result<Option<Reported>> {
    let id = sync.proxy.as_str();
    let Some(body) = per_proxy(istiod, &format!("/debug/sidecarz?proxyID={id}")).await? else {
        return Ok(None);
    };
    let applied = verify::parse_sidecarz(&body)?;
    let path = format!("/debug/config_dump?proxyID={id}&types=cds,lds,rds");
    let Some(body) = per_proxy(istiod, &path).await? else {
        return Ok(None);
    };
    let generated = verify::parse_config_dump(&body)?;
    Ok(Some(Reported {
        istiod: istiod.name.clone(),
        sync: sync.clone(),
        applied,
        generated,
    }))
}

/// Checks `pods` of `snap` (whose predictions are compared) against
/// istiod. `traffic` is keyed by workload key.
pub async fn check_pods(
    snap: &MeshSnapshot,
    traffic: &HashMap<String, WorkloadTraffic>,
    pods: &[PodId],
    istiods: &mut [Istiod],
    err: &mut dyn Write,
) -> Result<Vec<ProxyCheck>> {
    let by_proxy = sync_status(istiods, err).await?;
    let mut checks = Vec::with_capacity(pods.len());
    for &p in pods {
        let pod = &snap.pods[p];
        let e = explain::explain(snap, pod.workload, Some(p), None);
        let id = verify::proxy_id(&pod.name, &pod.namespace);
        let rep = match by_proxy.get(&id) {
            Some((i, sync)) => reported(&mut istiods[*i], sync).await?,
            None => None,
        };
        let t = traffic.get(&snap.workloads[pod.workload].key());
        checks.push(verify::check_proxy(snap, p, &e, rep.as_ref(), t));
    }
    Ok(checks)
}
