//! What the engine says, through `kubectl meshscope` against the cluster:
//! `audit`'s readiness findings, `impact`'s gateways, `explain`'s clusters
//! with the flag on.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result};
use meshscope_e2e::bench::run_plugin as meshscope;
use meshscope_e2e::cluster::Cluster;
use meshscope_e2e::istiod::ENGINE_VERSION;
use serde_json::Value;

/// One readiness finding (MS0025 or MS0026) of a gateway workload.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Readiness {
    pub code: String,
    pub message: String,
}

/// `audit -A --access-log LOG -o json`: the MS0025 and MS0026 findings by
/// workload (`Kind/ns/name`).
pub fn audit(c: &Cluster, log: &Path) -> Result<BTreeMap<String, Readiness>> {
    let log = log.to_str().context("log path")?;
    let args = [
        "audit",
        "-A",
        "--access-log",
        log,
        "-o",
        "json",
        "--fail-on",
        "none",
        "--istio-version",
        ENGINE_VERSION,
    ];
    let (out, _) = meshscope(c, &args)?;
    let v: Value = serde_json::from_str(&out).context("audit -o json")?;
    let mut by = BTreeMap::new();
    for f in v["findings"].as_array().into_iter().flatten() {
        let code = f["code"].as_str().unwrap_or_default();
        if code != "MS0025" && code != "MS0026" {
            continue;
        }
        let s = |k: &str| f[k].as_str().unwrap_or_default().to_string();
        by.insert(
            format!("{}/{}/{}", s("kind"), s("namespace"), s("name")),
            Readiness {
                code: code.into(),
                message: s("message"),
            },
        );
    }
    Ok(by)
}

/// What `impact service/NAME -n NS` says a change reaches: the gateways
/// now (flag off) and with the flag on, by workload key, with proxies.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct ImpactGateways {
    pub off: BTreeMap<String, usize>,
    pub on: BTreeMap<String, usize>,
}

pub fn impact(c: &Cluster, ns: &str, name: &str) -> Result<ImpactGateways> {
    let target = format!("service/{name}");
    let args = [
        "impact",
        &target,
        "-n",
        ns,
        "-o",
        "json",
        "--istio-version",
        ENGINE_VERSION,
    ];
    let (out, _) = meshscope(c, &args)?;
    let v: Value = serde_json::from_str(&out).context("impact -o json")?;
    let map = |x: &Value| -> BTreeMap<String, usize> {
        x.as_object()
            .into_iter()
            .flatten()
            .map(|(k, n)| (k.clone(), n.as_u64().unwrap_or(0) as usize))
            .collect()
    };
    Ok(ImpactGateways {
        off: map(&v["now"]["gateways"]),
        on: map(&v["gateways_if_filtered"]),
    })
}

/// `explain pod NAME -n NS -o json`: its outbound clusters with the flag
/// on (`gateway_filter.outbound_clusters`).
pub fn filtered_clusters(c: &Cluster, ns: &str, pod: &str) -> Result<BTreeSet<String>> {
    let args = [
        "explain",
        "pod",
        pod,
        "-n",
        ns,
        "-o",
        "json",
        "--istio-version",
        ENGINE_VERSION,
    ];
    let (out, _) = meshscope(c, &args)?;
    let v: Value = serde_json::from_str(&out).context("explain -o json")?;
    let list = v["gateway_filter"]["outbound_clusters"]
        .as_array()
        .with_context(|| format!("explain pod {ns}/{pod}: no gateway_filter.outbound_clusters"))?;
    Ok(list
        .iter()
        .filter_map(|c| c.as_str().map(String::from))
        .collect())
}
