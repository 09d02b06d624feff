//! Checking the engine's prediction for a proxy against what istiod says it
//! applied and sends: the Sidecar its SidecarScope came from
//! (`/debug/sidecarz`), the clusters it generates (`/debug/config_dump`),
//! and whether the proxy ACKed the last push (`/debug/syncz`).
//!
//! This module only reads istiod's JSON and compares; fetching it is the
//! plugin's job.

mod istiod;
mod routes;

pub use istiod::{
    parse_config_dump, parse_sidecarz, parse_syncz, proxy_id, short_type, AppliedScope, Generated,
    SyncStatus, TcpChain,
};
pub use routes::{missing_routes, route_diffs, MissingRoute, RouteDiff};

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::explain::Explanation;
use crate::istio::{EgressListener, Sidecar};
use crate::observe::WorkloadTraffic;
use crate::recommend::EGRESS_ANNOTATION;
use crate::snapshot::{sidecar_listeners, PodId, SidecarId};
use crate::MeshSnapshot;
use istiod::has_cluster;

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
    /// Hosts whose Gateway API mesh routes istiod sends otherwise than
    /// predicted (a route lost, or one applied that was not predicted).
    pub route_diffs: Vec<RouteDiff>,
    /// Called names whose Gateway API routes istiod does not send the
    /// proxy: their requests skip the route.
    pub missing_routes: Vec<MissingRoute>,
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
            Status::Missing => format!(
                "MISSING {}",
                self.missing_edges.len() + self.missing_routes.len()
            ),
            s => s.as_str().to_string(),
        }
    }
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
        route_diffs: Vec::new(),
        missing_routes: Vec::new(),
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
    let actual: BTreeSet<&String> = r.generated.outbound_clusters().collect();
    let mut predicted: BTreeSet<&String> = e.outbound_clusters.iter().collect();
    // A gateway's pod may get its namespace's sidecar default scope
    // instead, by the order of istiod's push: either is istiod's answer.
    if let Some(shared) = &e.outbound_clusters_if_shared {
        let shared: BTreeSet<&String> = shared.iter().collect();
        if shared == actual {
            predicted = shared;
        }
    }
    c.only_istiod = actual
        .difference(&predicted)
        .map(|s| s.to_string())
        .collect();
    c.only_predicted = predicted
        .difference(&actual)
        .map(|s| s.to_string())
        .collect();
    c.route_diffs = route_diffs(&e.routes, &r.generated);
    c.pending = r.sync.pending();
    c.nacks = r.sync.errors.clone();
    c.istiod_counts = Some(Counts {
        clusters: r.generated.clusters.len() as u64,
        listeners: r.generated.listeners as u64,
        routes: r.generated.routes as u64,
    });
    if let Some(t) = traffic {
        let ns = &snap.pods[pod].namespace;
        c.missing_routes = missing_routes(snap, ns, &t.dialled, &r.generated.virtual_hosts);
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
    c.status = if !c.missing_edges.is_empty() || !c.missing_routes.is_empty() {
        Status::Missing
    } else if !c.pending.is_empty() || !c.nacks.is_empty() {
        Status::Stale
    } else if !c.sidecar_matches
        || !c.only_istiod.is_empty()
        || !c.only_predicted.is_empty()
        || !c.route_diffs.is_empty()
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
    if let Some(m) = c.missing_routes.first() {
        return Some(format!(
            "istiod sends no route for {} ({})",
            m.dialled,
            m.routes.join(", ")
        ));
    }
    if !changed || c.status == Status::Ok {
        return None;
    }
    let mut d: Vec<String> = c.only_istiod.iter().map(|x| format!("+{x}")).collect();
    d.extend(c.only_predicted.iter().map(|x| format!("-{x}")));
    if let Some(r) = c.route_diffs.first() {
        return Some(r.describe());
    }
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
    use serde::Deserialize;
    use serde_json::Value;

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
                ..Generated::default()
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
            route_diffs: Vec::new(),
            missing_routes: Vec::new(),
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
