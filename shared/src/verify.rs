//! Checking the engine's prediction for a proxy against what istiod says it
//! applied and sends: the Sidecar its SidecarScope came from
//! (`/debug/sidecarz`), the clusters it generates (`/debug/config_dump`),
//! and whether the proxy ACKed the last push (`/debug/syncz`).
//!
//! This module only reads istiod's JSON and compares; fetching it is the
//! plugin's job.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::explain::Explanation;
use crate::istio::{EgressListener, Sidecar};
use crate::observe::WorkloadTraffic;
use crate::recommend::EGRESS_ANNOTATION;
use crate::snapshot::{sidecar_listeners, PodId, SidecarId};
use crate::{Error, MeshSnapshot};

/// istiod's id for a sidecar proxy: `<pod>.<namespace>`.
pub fn proxy_id(pod: &str, namespace: &str) -> String {
    format!("{pod}.{namespace}")
}

fn invalid(what: &str, reason: impl std::fmt::Display) -> Error {
    Error::Object {
        kind: "istiod response".into(),
        name: what.into(),
        reason: reason.to_string(),
    }
}

/// One proxy's line in `/debug/syncz`: per xDS type, the last nonce sent
/// and the last one the proxy ACKed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SyncStatus {
    pub proxy: String,
    pub istio_version: String,
    /// Short type (`cds`, `lds`, ...) → (sent, acked).
    pub nonces: BTreeMap<String, (String, String)>,
    /// Short type → the proxy's last NACK message.
    pub errors: BTreeMap<String, String>,
}

impl SyncStatus {
    /// Types whose last push the proxy has not ACKed yet.
    pub fn pending(&self) -> Vec<String> {
        self.nonces
            .iter()
            .filter(|(_, (sent, acked))| !sent.is_empty() && sent != acked)
            .map(|(t, _)| t.clone())
            .collect()
    }

    pub fn in_sync(&self) -> bool {
        self.pending().is_empty() && self.errors.is_empty()
    }

    /// The nonce of the last CDS push: it changes with every full push.
    pub fn cds_sent(&self) -> &str {
        self.nonces.get("cds").map_or("", |(s, _)| s.as_str())
    }
}

/// `cds` for `type.googleapis.com/envoy.config.cluster.v3.Cluster`.
pub fn short_type(type_url: &str) -> String {
    let t = type_url.rsplit('/').next().unwrap_or(type_url);
    match t {
        "envoy.config.cluster.v3.Cluster" => "cds".into(),
        "envoy.config.listener.v3.Listener" => "lds".into(),
        "envoy.config.route.v3.RouteConfiguration" => "rds".into(),
        "envoy.config.endpoint.v3.ClusterLoadAssignment" => "eds".into(),
        "envoy.extensions.transport_sockets.tls.v3.Secret" => "sds".into(),
        "envoy.config.core.v3.TypedExtensionConfig" => "ecds".into(),
        "istio.workload.Address" => "wds".into(),
        other => other.to_string(),
    }
}

#[derive(Deserialize)]
struct RawSync {
    #[serde(default)]
    proxy: String,
    #[serde(default)]
    istio_version: String,
    #[serde(default)]
    resources: BTreeMap<String, RawResource>,
    #[serde(flatten)]
    fields: BTreeMap<String, Value>,
}

#[derive(Deserialize)]
struct RawResource {
    #[serde(default)]
    sent: String,
    #[serde(default)]
    acked: String,
    #[serde(default, rename = "lastError")]
    last_error: String,
}

/// Parses `/debug/syncz`. Per-type nonces come from `resources` (istiod
/// 1.22+), else from the `cluster_sent`/`cluster_acked`... fields.
pub fn parse_syncz(body: &[u8]) -> Result<Vec<SyncStatus>, Error> {
    let raw: Vec<RawSync> = serde_json::from_slice(body).map_err(|e| invalid("/debug/syncz", e))?;
    Ok(raw
        .into_iter()
        .map(|r| {
            let mut s = SyncStatus {
                proxy: r.proxy,
                istio_version: r.istio_version,
                ..SyncStatus::default()
            };
            if r.resources.is_empty() {
                for (field, short) in [
                    ("cluster", "cds"),
                    ("listener", "lds"),
                    ("route", "rds"),
                    ("endpoint", "eds"),
                    ("extensionconfig", "ecds"),
                ] {
                    let get = |k: &str| {
                        r.fields
                            .get(&format!("{field}_{k}"))
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string()
                    };
                    let (sent, acked) = (get("sent"), get("acked"));
                    if !sent.is_empty() || !acked.is_empty() {
                        s.nonces.insert(short.into(), (sent, acked));
                    }
                }
            }
            for (url, res) in r.resources {
                let t = short_type(&url);
                if !res.last_error.is_empty() {
                    s.errors.insert(t.clone(), res.last_error);
                }
                s.nonces.insert(t, (res.sent, res.acked));
            }
            s
        })
        .collect())
}

/// The SidecarScope istiod computed for a proxy (`/debug/sidecarz`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AppliedScope {
    /// `ns/name` of the Sidecar it came from; `None` for istiod's implicit
    /// default (no Sidecar at all). A root-namespace default is shown
    /// under the proxy's namespace, as istiod evaluates it there.
    pub sidecar: Option<String>,
    /// The egress hosts of that Sidecar, flattened and sorted.
    pub hosts: Vec<String>,
    /// istiod's push version the scope was computed for.
    pub version: String,
}

pub fn parse_sidecarz(body: &[u8]) -> Result<AppliedScope, Error> {
    let v: Value = serde_json::from_slice(body).map_err(|e| invalid("/debug/sidecarz", e))?;
    if !v.is_object() {
        return Err(invalid("/debug/sidecarz", "expected a JSON object"));
    }
    let version = v["version"].as_str().unwrap_or("").to_string();
    if v["sidecar"].is_null() {
        return Ok(AppliedScope {
            sidecar: None,
            hosts: Vec::new(),
            version,
        });
    }
    let name = v["name"].as_str().unwrap_or("");
    let ns = v["namespace"].as_str().unwrap_or("");
    let mut hosts: Vec<String> = v["sidecar"]["egress"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| l["hosts"].as_array().into_iter().flatten())
        .filter_map(|h| h.as_str().map(String::from))
        .collect();
    hosts.sort();
    hosts.dedup();
    Ok(AppliedScope {
        sidecar: Some(format!("{ns}/{name}")),
        hosts,
        version,
    })
}

/// What istiod generates for a proxy (`/debug/config_dump?types=cds,lds,rds`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Generated {
    pub clusters: BTreeSet<String>,
    pub listeners: usize,
    pub routes: usize,
}

impl Generated {
    pub fn outbound_clusters(&self) -> impl Iterator<Item = &String> {
        self.clusters.iter().filter(|c| c.starts_with("outbound|"))
    }
}

pub fn parse_config_dump(body: &[u8]) -> Result<Generated, Error> {
    let v: Value = serde_json::from_slice(body).map_err(|e| invalid("/debug/config_dump", e))?;
    let configs = v
        .get("configs")
        .map(|c| {
            c.as_array()
                .ok_or_else(|| invalid("/debug/config_dump", "configs is not a list"))
        })
        .transpose()?
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut g = Generated::default();
    for c in configs {
        match short_type(c["@type"].as_str().unwrap_or("")).as_str() {
            "cds" => {
                if let Some(n) = c["name"].as_str() {
                    g.clusters.insert(n.to_string());
                }
            }
            "lds" => g.listeners += 1,
            "rds" => g.routes += 1,
            _ => {}
        }
    }
    Ok(g)
}

/// The Sidecar `/debug/sidecarz` names when the engine's prediction is
/// right: a root-namespace default shows under the proxy's namespace.
pub fn expected_sidecar(e: &Explanation) -> Option<String> {
    let s = e.sidecar.as_deref()?;
    Some(match e.scope_source {
        "root" => format!("{}/{}", e.namespace, s.split_once('/').map_or(s, |x| x.1)),
        _ => s.to_string(),
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Ok,
    Differs,
    Stale,
    Missing,
    NotConnected,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Differs => "DIFFERS",
            Status::Stale => "STALE",
            Status::Missing => "MISSING",
            Status::NotConnected => "NOT CONNECTED",
        }
    }
}

/// An observed edge whose cluster istiod does not send the proxy: the
/// call fails (or leaves through passthrough) when traffic resumes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MissingEdge {
    pub host: String,
    pub port: u32,
    pub cluster: String,
    pub requests: u64,
}

/// What istiod reported for one proxy.
#[derive(Clone, Debug, Default)]
pub struct Reported {
    pub istiod: String,
    pub sync: SyncStatus,
    pub applied: AppliedScope,
    pub generated: Generated,
}

#[derive(Clone, Debug, Serialize)]
pub struct Counts {
    pub clusters: u64,
    pub listeners: u64,
    pub routes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProxyCheck {
    pub pod: String,
    pub namespace: String,
    pub workload: String,
    pub status: Status,
    /// The istiod replica the proxy is connected to.
    pub istiod: Option<String>,
    pub predicted_sidecar: Option<String>,
    /// `None` both for "not connected" and for istiod's implicit default;
    /// `connected` tells them apart.
    pub applied_sidecar: Option<String>,
    pub connected: bool,
    pub sidecar_matches: bool,
    /// Outbound clusters istiod sends that the engine does not predict.
    pub only_istiod: Vec<String>,
    /// Outbound clusters the engine predicts that istiod does not send.
    pub only_predicted: Vec<String>,
    pub missing_edges: Vec<MissingEdge>,
    /// xDS types pushed and not yet ACKed.
    pub pending: Vec<String>,
    /// NACKs, by type.
    pub nacks: BTreeMap<String, String>,
    pub predicted: Counts,
    pub istiod_counts: Option<Counts>,
    /// The engine's estimate of the protobuf bytes istiod sends.
    pub predicted_bytes: u64,
    pub proxy_version: Option<String>,
    /// The managed Sidecar was edited outside meshscope.
    pub drift: Option<Drift>,
}

impl ProxyCheck {
    /// The one-word summary: `MISSING 2`, `DIFFERS`, ...
    pub fn label(&self) -> String {
        match self.status {
            Status::Missing => format!("MISSING {}", self.missing_edges.len()),
            s => s.as_str().to_string(),
        }
    }
}

/// Does istiod send a cluster for traffic to `host:port` (any subset)?
fn has_cluster(clusters: &BTreeSet<String>, host: &str, port: u32) -> bool {
    let plain = format!("outbound|{port}||{host}");
    if clusters.contains(&plain) {
        return true;
    }
    let prefix = format!("outbound|{port}|");
    let suffix = format!("|{host}");
    clusters
        .range(prefix.clone()..)
        .take_while(|c| c.starts_with(&prefix))
        .any(|c| c.ends_with(&suffix))
}

/// A managed Sidecar whose live egress is not what meshscope wrote (its
/// `meshscope.io/egress` annotation): someone edited it outside meshscope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Drift {
    pub sidecar: String,
    pub written_hosts: Vec<String>,
    pub live_hosts: Vec<String>,
    /// Outbound clusters istiod sends that the written egress would not.
    pub only_istiod: Vec<String>,
    /// Outbound clusters the written egress would give that istiod does not send.
    pub only_written: Vec<String>,
}

/// The egress meshscope wrote into the managed Sidecar that scopes a pod,
/// when the live spec differs from it.
fn written_scope(snap: &MeshSnapshot, pod: PodId) -> Option<(SidecarId, Sidecar)> {
    let p = &snap.pods[pod];
    let id = snap
        .select_sidecar(&p.namespace, &p.labels)
        .source
        .sidecar()?;
    let sc = &snap.sidecars[id];
    if !sc.managed {
        return None;
    }
    let text = sc
        .object
        .metadata
        .annotations
        .as_ref()?
        .get(EGRESS_ANNOTATION)?;
    let egress: Vec<EgressListener> = serde_json::from_str(text).ok()?;
    if egress == sc.object.spec.egress {
        return None;
    }
    let mut written = sc.object.clone();
    written.spec.egress = egress;
    Some((id, written))
}

fn hosts_of(sc: &Sidecar) -> Vec<String> {
    let mut h: Vec<String> = sc
        .spec
        .egress
        .iter()
        .flat_map(|l| l.hosts.iter().cloned())
        .collect();
    h.sort();
    h.dedup();
    h
}

/// Compares one proxy. `reported` is `None` when no istiod lists the proxy
/// as connected; `traffic` is the workload's observed traffic, when a
/// source was given.
pub fn check_proxy(
    snap: &MeshSnapshot,
    pod: PodId,
    e: &Explanation,
    reported: Option<&Reported>,
    traffic: Option<&WorkloadTraffic>,
) -> ProxyCheck {
    let predicted_sidecar = expected_sidecar(e);
    let mut c = ProxyCheck {
        pod: e.pod.clone().unwrap_or_default(),
        namespace: e.namespace.clone(),
        workload: e.workload.clone(),
        status: Status::NotConnected,
        istiod: None,
        predicted_sidecar: predicted_sidecar.clone(),
        applied_sidecar: None,
        connected: false,
        sidecar_matches: false,
        only_istiod: Vec::new(),
        only_predicted: Vec::new(),
        missing_edges: Vec::new(),
        pending: Vec::new(),
        nacks: BTreeMap::new(),
        predicted: Counts {
            clusters: e.estimate.clusters,
            listeners: e.estimate.listeners,
            routes: e.estimate.routes,
        },
        istiod_counts: None,
        predicted_bytes: e.estimate.bytes,
        proxy_version: None,
        drift: None,
    };
    let Some(r) = reported else { return c };
    c.connected = true;
    c.istiod = Some(r.istiod.clone());
    c.applied_sidecar = r.applied.sidecar.clone();
    c.sidecar_matches = r.applied.sidecar == predicted_sidecar;
    c.proxy_version = (!r.sync.istio_version.is_empty()).then(|| r.sync.istio_version.clone());
    let predicted: BTreeSet<&String> = e.outbound_clusters.iter().collect();
    let actual: BTreeSet<&String> = r.generated.outbound_clusters().collect();
    c.only_istiod = actual
        .difference(&predicted)
        .map(|s| s.to_string())
        .collect();
    c.only_predicted = predicted
        .difference(&actual)
        .map(|s| s.to_string())
        .collect();
    c.pending = r.sync.pending();
    c.nacks = r.sync.errors.clone();
    c.istiod_counts = Some(Counts {
        clusters: r.generated.clusters.len() as u64,
        listeners: r.generated.listeners as u64,
        routes: r.generated.routes as u64,
    });
    if let Some(t) = traffic {
        for ((host, port), edge) in &t.outbound {
            if !has_cluster(&r.generated.clusters, host, *port) {
                c.missing_edges.push(MissingEdge {
                    host: host.clone(),
                    port: *port,
                    cluster: format!("outbound|{port}||{host}"),
                    requests: edge.requests,
                });
            }
        }
    }
    if let Some((id, written)) = written_scope(snap, pod) {
        let ns = &snap.pods[pod].namespace;
        let vis = snap.visible(ns, &sidecar_listeners(&written, &snap.options));
        let labels = &snap.pods[pod].labels;
        let want: BTreeSet<String> = snap
            .outbound_clusters(&vis, Some(labels))
            .into_iter()
            .collect();
        let actual: BTreeSet<String> = r.generated.outbound_clusters().cloned().collect();
        c.drift = Some(Drift {
            sidecar: snap.sidecars[id].key(),
            written_hosts: hosts_of(&written),
            live_hosts: hosts_of(&snap.sidecars[id].object),
            only_istiod: actual.difference(&want).cloned().collect(),
            only_written: want.difference(&actual).cloned().collect(),
        });
    }
    c.status = if !c.missing_edges.is_empty() {
        Status::Missing
    } else if !c.pending.is_empty() || !c.nacks.is_empty() {
        Status::Stale
    } else if !c.sidecar_matches
        || !c.only_istiod.is_empty()
        || !c.only_predicted.is_empty()
        || c.drift.is_some()
    {
        Status::Differs
    } else {
        Status::Ok
    };
    c
}

/// Totals over a run, for the summary line and `-o json`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    pub proxies: usize,
    pub ok: usize,
    pub differs: usize,
    pub missing: usize,
    pub stale: usize,
    pub not_connected: usize,
    pub missing_edges: usize,
    /// The outbound, inbound and fixed clusters istiod sends the connected
    /// proxies, in all: the measured total of what scoping saves.
    pub clusters_istiod: u64,
    /// What the engine predicts for those same proxies.
    pub clusters_predicted: u64,
}

/// What a proxy's check still waits for after an exportTo write (`apply
/// --exports --wait`), or `None` when it confirms the write. A proxy whose
/// predicted clusters the write `changed` must get exactly what the engine
/// predicts; a caller whose clusters it did not change, every cluster its
/// observed edges need (a difference the write did not make is verify's
/// to report, not a reason to wait). Either must have ACKed all it was sent.
pub fn unconfirmed(c: &ProxyCheck, changed: bool) -> Option<String> {
    if !c.nacks.is_empty() {
        let types: Vec<&str> = c.nacks.keys().map(String::as_str).collect();
        return Some(format!("NACKed {}", types.join(", ")));
    }
    if !c.pending.is_empty() {
        return Some(format!("not yet ACKed: {}", c.pending.join(", ")));
    }
    if !c.missing_edges.is_empty() {
        let edges: Vec<String> = c
            .missing_edges
            .iter()
            .map(|m| format!("{}:{}", m.host, m.port))
            .collect();
        return Some(format!("istiod sends no cluster for {}", edges.join(", ")));
    }
    if !changed || c.status == Status::Ok {
        return None;
    }
    let mut d: Vec<String> = c.only_istiod.iter().map(|x| format!("+{x}")).collect();
    d.extend(c.only_predicted.iter().map(|x| format!("-{x}")));
    Some(if d.is_empty() {
        format!("istiod's scope is {}, not the predicted one", c.label())
    } else {
        format!(
            "istiod's clusters differ from the prediction: {}",
            d.join(" ")
        )
    })
}

pub fn summarize(checks: &[ProxyCheck]) -> Summary {
    let mut s = Summary {
        proxies: checks.len(),
        ..Summary::default()
    };
    for c in checks {
        match c.status {
            Status::Ok => s.ok += 1,
            Status::Differs => s.differs += 1,
            Status::Missing => s.missing += 1,
            Status::Stale => s.stale += 1,
            Status::NotConnected => s.not_connected += 1,
        }
        s.missing_edges += c.missing_edges.len();
        if let Some(i) = &c.istiod_counts {
            s.clusters_istiod += i.clusters;
            s.clusters_predicted += c.predicted.clusters;
        }
    }
    s
}

/// Has istiod taken up `desired` for this proxy? Its SidecarScope comes
/// from the Sidecar of that name with the same egress hosts.
pub fn scope_applied(applied: &AppliedScope, desired: &Sidecar) -> bool {
    let name = format!(
        "{}/{}",
        desired.metadata.namespace.as_deref().unwrap_or(""),
        desired.metadata.name.as_deref().unwrap_or("")
    );
    let mut hosts: Vec<String> = desired
        .spec
        .egress
        .iter()
        .flat_map(|l| l.hosts.iter().cloned())
        .collect();
    hosts.sort();
    hosts.dedup();
    applied.sidecar.as_deref() == Some(name.as_str()) && applied.hosts == hosts
}

/// When `desired` drops hosts that `existing` imports, the Sidecar to apply
/// first: `desired` with every host of `existing` added back to the
/// listener on the same port (or the portless one), so that no proxy goes
/// through a moment with neither the old nor the new host. `None` when
/// `desired` only adds.
pub fn widened(existing: &Sidecar, desired: &Sidecar) -> Option<Sidecar> {
    let port_of = |l: &crate::istio::EgressListener| l.port.as_ref().map(|p| p.number);
    let mut out = desired.clone();
    let mut changed = false;
    for old in &existing.spec.egress {
        let target = match out
            .spec
            .egress
            .iter()
            .position(|l| port_of(l) == port_of(old))
        {
            Some(i) => i,
            None => {
                out.spec.egress.push(old.clone());
                changed = true;
                continue;
            }
        };
        for h in &old.hosts {
            if !out.spec.egress[target].hosts.contains(h) {
                out.spec.egress[target].hosts.push(h.clone());
                changed = true;
            }
        }
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYNCZ: &str = r#"[
      {"cluster_id":"Kubernetes","proxy":"sleep-0.apps","proxy_type":"sidecar","istio_version":"1.31.0",
       "cluster_sent":"a1","cluster_acked":"a1","listener_sent":"b1","listener_acked":"b0",
       "resources":{
         "type.googleapis.com/envoy.config.cluster.v3.Cluster":{"sent":"a1","acked":"a1","sentTime":"2026-12-01T10:00:00Z"},
         "type.googleapis.com/envoy.config.listener.v3.Listener":{"sent":"b1","acked":"b0"},
         "type.googleapis.com/envoy.config.route.v3.RouteConfiguration":{"sent":"c1","acked":"c1","lastError":"route rejected"}
       }},
      {"proxy":"old.apps","cluster_sent":"x","cluster_acked":"x","endpoint_sent":"y","endpoint_acked":""}
    ]"#;

    #[test]
    fn syncz_gives_per_type_nonces_pending_types_and_nacks() {
        let s = parse_syncz(SYNCZ.as_bytes()).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].proxy, "sleep-0.apps");
        assert_eq!(s[0].istio_version, "1.31.0");
        assert_eq!(s[0].pending(), vec!["lds"]);
        assert_eq!(s[0].errors["rds"], "route rejected");
        assert_eq!(s[0].cds_sent(), "a1");
        assert!(!s[0].in_sync());
        // Without `resources` (older istiod), the flat fields.
        assert_eq!(s[1].pending(), vec!["eds"]);
        assert_eq!(s[1].nonces["cds"], ("x".to_string(), "x".to_string()));
        assert!(parse_syncz(b"{\"not\": \"a list\"}").is_err());
        assert!(parse_syncz(b"<html>").is_err());
    }

    #[test]
    fn sidecarz_names_the_sidecar_and_its_hosts() {
        let z = parse_sidecarz(
            br#"{"version":"2026-12-01T10:00:00Z/7","name":"sleep","namespace":"apps",
                 "sidecar":{"egress":[{"hosts":["./*","istio-system/*"]},{"port":{"number":9080},"hosts":["./*"]}]}}"#,
        )
        .unwrap();
        assert_eq!(z.sidecar.as_deref(), Some("apps/sleep"));
        assert_eq!(z.hosts, vec!["./*", "istio-system/*"]);
        let d = parse_sidecarz(br#"{"name":"default-sidecar","namespace":"apps","sidecar":null}"#)
            .unwrap();
        assert_eq!(d.sidecar, None);
        assert!(parse_sidecarz(b"[]").is_err());
        assert!(parse_sidecarz(b"Proxy not connected").is_err());
    }

    #[test]
    fn config_dump_counts_resources_by_type() {
        let g = parse_config_dump(
            br#"{"configs":[
              {"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"outbound|80||a.apps.svc.cluster.local"},
              {"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"outbound|80|v1|b.apps.svc.cluster.local"},
              {"@type":"type.googleapis.com/envoy.config.cluster.v3.Cluster","name":"BlackHoleCluster"},
              {"@type":"type.googleapis.com/envoy.config.listener.v3.Listener","name":"virtualOutbound"},
              {"@type":"type.googleapis.com/envoy.config.route.v3.RouteConfiguration","name":"80"}
            ]}"#,
        )
        .unwrap();
        assert_eq!(g.clusters.len(), 3);
        assert_eq!(g.outbound_clusters().count(), 2);
        assert_eq!((g.listeners, g.routes), (1, 1));
        assert!(has_cluster(&g.clusters, "b.apps.svc.cluster.local", 80));
        assert!(has_cluster(&g.clusters, "a.apps.svc.cluster.local", 80));
        assert!(!has_cluster(&g.clusters, "a.apps.svc.cluster.local", 81));
        assert!(!has_cluster(&g.clusters, "c.apps.svc.cluster.local", 80));
        assert_eq!(parse_config_dump(b"{}").unwrap(), Generated::default());
        assert!(parse_config_dump(br#"{"configs": 3}"#).is_err());
    }

    const MESH: &str = "
apiVersion: v1
kind: Namespace
metadata: {name: apps, labels: {istio-injection: enabled}}
---
apiVersion: v1
kind: Service
metadata: {name: a, namespace: apps}
spec: {selector: {app: a}, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: b, namespace: apps}
spec: {selector: {app: b}, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Pod
metadata: {name: sleep-1, namespace: apps, labels: {app: sleep}}
spec: {containers: [{name: app, image: sleep}]}
---
apiVersion: networking.istio.io/v1
kind: Sidecar
metadata: {name: sleep, namespace: apps}
spec:
  workloadSelector: {labels: {app: sleep}}
  egress: [{hosts: [./a.apps.svc.cluster.local]}]
";

    fn explanation() -> (crate::MeshSnapshot, PodId, Explanation) {
        explanation_of(MESH)
    }

    fn explanation_of(mesh: &str) -> (crate::MeshSnapshot, PodId, Explanation) {
        let mut inputs = crate::Inputs::default();
        for doc in serde_yaml::Deserializer::from_str(mesh) {
            let v: Value = Deserialize::deserialize(doc).unwrap();
            inputs.add(v).unwrap();
        }
        let snap = crate::MeshSnapshot::build(&inputs, crate::Options::default()).unwrap();
        let p = snap.pods_named("sleep-1")[0];
        let e = crate::explain::explain(&snap, snap.pods[p].workload, Some(p), None);
        (snap, p, e)
    }

    fn reported(clusters: &[&str], sidecar: Option<&str>, cds: (&str, &str)) -> Reported {
        let mut sync = SyncStatus {
            proxy: "sleep-1.apps".into(),
            ..SyncStatus::default()
        };
        sync.nonces
            .insert("cds".into(), (cds.0.to_string(), cds.1.to_string()));
        Reported {
            istiod: "istiod-1".into(),
            sync,
            applied: AppliedScope {
                sidecar: sidecar.map(String::from),
                ..AppliedScope::default()
            },
            generated: Generated {
                clusters: clusters.iter().map(|c| c.to_string()).collect(),
                listeners: 3,
                routes: 1,
            },
        }
    }

    #[test]
    fn a_proxy_is_ok_differs_missing_stale_or_not_connected() {
        let (snap, p, e) = explanation();
        let check_proxy = |e: &Explanation, r: Option<&Reported>, t: Option<&WorkloadTraffic>| {
            check_proxy(&snap, p, e, r, t)
        };
        assert_eq!(
            e.outbound_clusters,
            vec!["outbound|80||a.apps.svc.cluster.local"]
        );
        let a = "outbound|80||a.apps.svc.cluster.local";
        let b = "outbound|80||b.apps.svc.cluster.local";
        let ok = check_proxy(
            &e,
            Some(&reported(
                &[a, "BlackHoleCluster"],
                Some("apps/sleep"),
                ("n1", "n1"),
            )),
            None,
        );
        assert_eq!(ok.status, Status::Ok, "{ok:?}");
        assert_eq!(ok.istiod_counts.as_ref().unwrap().clusters, 2);
        // Someone widened the Sidecar behind meshscope's back.
        let d = check_proxy(
            &e,
            Some(&reported(&[a, b], Some("apps/sleep"), ("n1", "n1"))),
            None,
        );
        assert_eq!(
            (d.status, d.only_istiod.clone()),
            (Status::Differs, vec![b.to_string()])
        );
        let d = check_proxy(&e, Some(&reported(&[a], None, ("n1", "n1"))), None);
        assert_eq!(d.status, Status::Differs);
        assert!(!d.sidecar_matches);
        // An observed call to b: istiod does not send its cluster.
        let mut t = WorkloadTraffic::default();
        t.outbound
            .insert(("a.apps.svc.cluster.local".into(), 80), Default::default());
        t.outbound.insert(
            ("b.apps.svc.cluster.local".into(), 80),
            crate::observe::Edge {
                requests: 7,
                ..Default::default()
            },
        );
        let m = check_proxy(
            &e,
            Some(&reported(&[a], Some("apps/sleep"), ("n2", "n1"))),
            Some(&t),
        );
        assert_eq!(m.status, Status::Missing);
        assert_eq!(m.label(), "MISSING 1");
        assert_eq!(m.missing_edges[0].cluster, b);
        assert_eq!(m.missing_edges[0].requests, 7);
        assert_eq!(m.pending, vec!["cds"]);
        let s = check_proxy(
            &e,
            Some(&reported(&[a], Some("apps/sleep"), ("n2", "n1"))),
            None,
        );
        assert_eq!(s.status, Status::Stale);
        let n = check_proxy(&e, None, Some(&t));
        assert_eq!((n.status, n.connected), (Status::NotConnected, false));
        let sum = summarize(&[ok, d, m, s, n]);
        assert_eq!(
            (
                sum.ok,
                sum.differs,
                sum.missing,
                sum.stale,
                sum.not_connected
            ),
            (1, 1, 1, 1, 1)
        );
    }

    #[test]
    fn a_managed_sidecar_edited_outside_meshscope_differs() {
        let edited = MESH.replace(
            "metadata: {name: sleep, namespace: apps}\nspec:\n  workloadSelector: {labels: {app: sleep}}\n  egress: [{hosts: [./a.apps.svc.cluster.local]}]",
            "metadata:\n  name: sleep\n  namespace: apps\n  labels: {app.kubernetes.io/managed-by: kubectl-meshscope}\n  annotations: {meshscope.io/egress: '[{\"hosts\":[\"./a.apps.svc.cluster.local\"]}]'}\nspec:\n  workloadSelector: {labels: {app: sleep}}\n  egress: [{hosts: [./a.apps.svc.cluster.local, ./b.apps.svc.cluster.local]}]",
        );
        assert_ne!(edited, MESH);
        let (snap, p, e) = explanation_of(&edited);
        let a = "outbound|80||a.apps.svc.cluster.local";
        let b = "outbound|80||b.apps.svc.cluster.local";
        // istiod agrees with the engine on the live spec, yet the proxy
        // gets b, which meshscope did not write.
        let c = check_proxy(
            &snap,
            p,
            &e,
            Some(&reported(&[a, b], Some("apps/sleep"), ("n", "n"))),
            None,
        );
        assert!(
            c.only_istiod.is_empty() && c.only_predicted.is_empty(),
            "{c:?}"
        );
        assert_eq!(c.status, Status::Differs);
        let d = c.drift.unwrap();
        assert_eq!(d.sidecar, "apps/sleep");
        assert_eq!(d.only_istiod, vec![b.to_string()]);
        assert_eq!(d.written_hosts, vec!["./a.apps.svc.cluster.local"]);
        // The untouched original: no drift.
        let (snap, p, e) = explanation();
        assert!(check_proxy(
            &snap,
            p,
            &e,
            Some(&reported(&[a], Some("apps/sleep"), ("n", "n"))),
            None
        )
        .drift
        .is_none());
    }

    fn sidecar(yaml: &str) -> Sidecar {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn widening_adds_back_removed_hosts_per_port() {
        let old = sidecar(
            "metadata: {name: s, namespace: a}\nspec:\n  egress:\n  - hosts: [./x.a.svc.cluster.local, istio-system/*]\n  - port: {number: 9080, protocol: HTTP, name: http}\n    hosts: [./y]\n",
        );
        let new = sidecar(
            "metadata: {name: s, namespace: a}\nspec:\n  egress:\n  - hosts: [./z.a.svc.cluster.local, istio-system/*]\n",
        );
        let w = widened(&old, &new).expect("new drops hosts");
        assert_eq!(
            w.spec.egress[0].hosts,
            vec![
                "./z.a.svc.cluster.local",
                "istio-system/*",
                "./x.a.svc.cluster.local"
            ]
        );
        assert_eq!(w.spec.egress[1].hosts, vec!["./y"]);
        // Only additions: nothing to do first.
        let grown = sidecar(
            "metadata: {name: s, namespace: a}\nspec:\n  egress:\n  - hosts: [./x.a.svc.cluster.local, istio-system/*, ./q]\n  - port: {number: 9080, protocol: HTTP, name: http}\n    hosts: [./y]\n",
        );
        assert!(widened(&old, &grown).is_none());
        // istiod has the scope when name and hosts match.
        let applied = AppliedScope {
            sidecar: Some("a/s".into()),
            hosts: vec!["./z.a.svc.cluster.local".into(), "istio-system/*".into()],
            version: String::new(),
        };
        assert!(scope_applied(&applied, &new));
        assert!(!scope_applied(&applied, &old));
    }

    fn check(status: Status) -> ProxyCheck {
        ProxyCheck {
            pod: "web-0".into(),
            namespace: "shop".into(),
            workload: "deployment/shop/web".into(),
            status,
            istiod: Some("istiod-0".into()),
            predicted_sidecar: None,
            applied_sidecar: None,
            connected: true,
            sidecar_matches: true,
            only_istiod: Vec::new(),
            only_predicted: Vec::new(),
            missing_edges: Vec::new(),
            pending: Vec::new(),
            nacks: BTreeMap::new(),
            predicted: Counts {
                clusters: 0,
                listeners: 0,
                routes: 0,
            },
            istiod_counts: None,
            predicted_bytes: 0,
            proxy_version: None,
            drift: None,
        }
    }

    #[test]
    fn an_export_write_is_confirmed_by_exact_clusters_where_it_changed_them_and_by_edges_elsewhere()
    {
        assert_eq!(unconfirmed(&check(Status::Ok), true), None);
        // Still sending the host a namespace left: the write is not in yet.
        let mut c = check(Status::Differs);
        c.only_istiod = vec!["outbound|80||api.b.svc.cluster.local".into()];
        assert_eq!(
            unconfirmed(&c, true).as_deref(),
            Some("istiod's clusters differ from the prediction: +outbound|80||api.b.svc.cluster.local")
        );
        // A caller the write did not change: a difference it did not make
        // is verify's to report.
        assert_eq!(unconfirmed(&c, false), None);
        c.sidecar_matches = false;
        c.only_istiod.clear();
        assert_eq!(
            unconfirmed(&c, true).as_deref(),
            Some("istiod's scope is DIFFERS, not the predicted one")
        );
        // A caller blackholed, changed or not: never confirmed.
        let mut c = check(Status::Missing);
        c.missing_edges.push(MissingEdge {
            host: "api.b.svc.cluster.local".into(),
            port: 80,
            cluster: "outbound|80||api.b.svc.cluster.local".into(),
            requests: 3,
        });
        for changed in [false, true] {
            assert_eq!(
                unconfirmed(&c, changed).as_deref(),
                Some("istiod sends no cluster for api.b.svc.cluster.local:80")
            );
        }
        // Sent and not ACKed, or NACKed: not applied yet.
        let mut c = check(Status::Stale);
        c.pending = vec!["cds".into()];
        assert_eq!(
            unconfirmed(&c, false).as_deref(),
            Some("not yet ACKed: cds")
        );
        c.nacks.insert("lds".into(), "bad listener".into());
        assert_eq!(unconfirmed(&c, true).as_deref(), Some("NACKed lds"));
    }
}
