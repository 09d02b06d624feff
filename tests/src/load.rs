//! Loads a mesh as `kubectl get -o yaml` shows it (such as
//! `examples/bookinfo/manifests.yaml`) onto the test control plane, with
//! its pods running, ready and proxied: what `tests/cluster/load-example`
//! runs (through `meshscope-load`).
//!
//! The file's pods cannot go in as they are: their owner references name
//! ReplicaSet uids this API server never issued (the garbage collector
//! deletes such pods), there is no kubelet to report them running, and no
//! EndpointSlice controller fills slices for pods bound to no Node. So:
//!
//! 1. namespaces, then every other object but the workloads, as they are
//!    (objects in `istio-system` are left out: the test control plane's
//!    mesh config stays as `tests/cluster/up` wrote it);
//! 2. the pods without owner references or status, then the status a
//!    kubelet would write (Running, Ready, every container ready, the
//!    pod's IP from the file);
//! 3. one EndpointSlice per Service with a selector, listing the pods it
//!    selects (`endpointslice.kubernetes.io/managed-by: meshscope-test`,
//!    as `crate::world` writes them);
//! 4. the ReplicaSet each pod's owner reference names, when the file has
//!    only its Deployment: the Deployment's template and selector plus the
//!    pod's `pod-template-hash`, as many replicas as pods. The ReplicaSet
//!    controller adopts the pods (they match and have no owner), and then
//!    the Deployment adopts the ReplicaSet (its template equals the
//!    Deployment's but for the hash, so it is the Deployment's current one
//!    and no other is made);
//! 5. the Deployments; then it waits until each reports its replicas ready
//!    and every pod has its owner.
//!
//! Pods owned by anything else are loaded bare (a note says so). Pods stay
//! bound to no Node, so `kubectl logs` has no kubelet to ask.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

use crate::cluster::Cluster;
use crate::world::{self, server_side_apply, SvcPort, World};

/// The field manager of everything loaded.
const MANAGER: &str = "meshscope-load";

/// A loaded pod.
#[derive(Clone, Debug)]
pub struct LoadedPod {
    pub namespace: String,
    pub name: String,
    pub ip: String,
    /// `Kind/name` of the workload that owns it, or `Pod` when bare.
    pub owner: String,
}

#[derive(Debug, Default)]
pub struct Loaded {
    pub pods: Vec<LoadedPod>,
    /// What was left out or changed, one line each.
    pub notes: Vec<String>,
}

/// The file's objects, sorted by what happens to them.
#[derive(Default)]
struct Parsed {
    namespaces: Vec<Value>,
    config: Vec<Value>,
    pods: Vec<Value>,
    replica_sets: Vec<Value>,
    deployments: Vec<Value>,
}

fn meta<'a>(v: &'a Value, field: &str) -> &'a str {
    v["metadata"][field].as_str().unwrap_or("")
}

fn key(v: &Value) -> (String, String) {
    (
        meta(v, "namespace").to_string(),
        meta(v, "name").to_string(),
    )
}

/// Drops what the API server sets (and, with `owners`, the owner
/// references).
fn clean(mut v: Value, owners: bool) -> Value {
    if let Some(m) = v["metadata"].as_object_mut() {
        for f in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "selfLink",
        ] {
            m.remove(f);
        }
        if owners {
            m.remove("ownerReferences");
        }
    }
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
    }
    v
}

fn parse(manifests: &str, notes: &mut Vec<String>) -> Result<Parsed> {
    let mut p = Parsed::default();
    for doc in serde_yaml::Deserializer::from_str(manifests) {
        let v: Value = serde::Deserialize::deserialize(doc).context("the manifests are YAML")?;
        if v.is_null() {
            continue;
        }
        let kind = v["kind"].as_str().unwrap_or("").to_string();
        if kind == "List" {
            bail!("a List: give the objects as separate YAML documents");
        }
        let (ns, name) = key(&v);
        if ns == "istio-system" || (kind == "Namespace" && name == "istio-system") {
            notes.push(format!(
                "left out {kind} {}{name}: the test control plane keeps its own istio-system",
                if ns.is_empty() {
                    String::new()
                } else {
                    format!("{ns}/")
                }
            ));
            continue;
        }
        match kind.as_str() {
            "Namespace" => p.namespaces.push(clean(v, false)),
            "Pod" => p.pods.push(v),
            "ReplicaSet" => p.replica_sets.push(v),
            "Deployment" => p.deployments.push(v),
            _ => p.config.push(clean(v, false)),
        }
    }
    Ok(p)
}

fn yaml_stream(docs: &[Value]) -> Result<String> {
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(d)?);
    }
    Ok(out)
}

fn apply(c: &Cluster, args: &[&str], docs: &[Value]) -> Result<()> {
    if docs.is_empty() {
        return Ok(());
    }
    server_side_apply(c, MANAGER, args, &yaml_stream(docs)?)
}

/// The pod's IP in the file (`status.podIP`, else the first of `podIPs`).
fn pod_ip(pod: &Value) -> Option<String> {
    let st = &pod["status"];
    st["podIP"]
        .as_str()
        .or_else(|| st["podIPs"][0]["ip"].as_str())
        .filter(|ip| !ip.is_empty())
        .map(String::from)
}

/// What a kubelet reports for a running pod whose containers are all
/// ready.
fn running_status(pod: &Value, ip: &str, now: &str) -> Value {
    let containers: Vec<Value> = (pod["spec"]["containers"].as_array().into_iter().flatten())
        .map(|c| {
            json!({
                "name": c["name"], "image": c["image"], "imageID": "",
                "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            })
        })
        .collect();
    let condition = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": meta(pod, "name"), "namespace": meta(pod, "namespace")},
        "status": {
            "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "startTime": now,
            "conditions": [condition("Initialized"), condition("ContainersReady"), condition("Ready")],
            "containerStatuses": containers,
        },
    })
}

fn labels_of(v: &Value) -> world::Labels {
    (v.as_object().into_iter().flatten())
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
        .collect()
}

/// The EndpointSlices an EndpointSlice controller would write for the
/// file's Services and the pods they select.
fn endpoint_slices(p: &Parsed, ips: &BTreeMap<(String, String), String>) -> String {
    let mut w = World::default();
    for s in p.config.iter().filter(|v| v["kind"] == "Service") {
        let spec = &s["spec"];
        let ports = (spec["ports"].as_array().into_iter().flatten())
            .map(|port| {
                let number = port["port"].as_u64().unwrap_or(0) as u32;
                let mut sp = SvcPort::new(port["name"].as_str().unwrap_or(""), number);
                sp.target_port = port["targetPort"].as_u64().map_or(number, |t| t as u32);
                sp.protocol = if port["protocol"] == "UDP" {
                    "UDP"
                } else {
                    "TCP"
                };
                sp.app_protocol = port["appProtocol"].as_str().map(String::from);
                sp
            })
            .collect();
        w.services.push(world::Service {
            namespace: meta(s, "namespace").to_string(),
            name: meta(s, "name").to_string(),
            selector: labels_of(&spec["selector"]),
            ports,
            headless: spec["clusterIP"] == "None",
            annotations: world::Labels::new(),
            labels: crate::world::Labels::new(),
            external_name: None,
        });
    }
    for pod in &p.pods {
        let Some(ip) = ips.get(&key(pod)) else {
            continue;
        };
        w.pods.push(world::Pod {
            namespace: meta(pod, "namespace").to_string(),
            name: meta(pod, "name").to_string(),
            labels: labels_of(&pod["metadata"]["labels"]),
            ip: ip.clone(),
            service_account: String::new(),
            ready: true,
            terminating: false,
            proxied: true,
            gateway: None,
        });
    }
    w.endpoint_slices_yaml()
}

/// The controller a pod's owner reference names: (kind, name).
fn controller_of(pod: &Value) -> Option<(String, String)> {
    (pod["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten())
    .find(|o| o["controller"] == true)
    .map(|o| {
        let s = |f: &str| o[f].as_str().unwrap_or("").to_string();
        (s("kind"), s("name"))
    })
}

/// The ReplicaSet `rs` of Deployment `d` that runs `pods` pods with
/// `pod-template-hash: hash`.
fn replica_set(d: &Value, rs: &str, hash: &str, pods: usize) -> Value {
    let mut template = d["spec"]["template"].clone();
    template["metadata"]["labels"]["pod-template-hash"] = hash.into();
    let mut selector = d["spec"]["selector"].clone();
    selector["matchLabels"]["pod-template-hash"] = hash.into();
    json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {
            "name": rs, "namespace": meta(d, "namespace"),
            "labels": template["metadata"]["labels"].clone(),
        },
        "spec": {"replicas": pods, "selector": selector, "template": template},
    })
}

/// The ReplicaSets the pods' owner references name that the file lacks,
/// and each pod's owner as `Kind/name`. Deployments are changed to run as
/// many replicas as the file has pods for them.
fn owners(
    p: &mut Parsed,
    notes: &mut Vec<String>,
) -> (Vec<Value>, BTreeMap<(String, String), String>) {
    let mut by_rs: BTreeMap<(String, String), (String, usize)> = BTreeMap::new();
    let mut owner_of = BTreeMap::new();
    for pod in &p.pods {
        let (ns, name) = key(pod);
        let owner = match controller_of(pod) {
            Some((kind, rs)) if kind == "ReplicaSet" => {
                let hash = pod["metadata"]["labels"]["pod-template-hash"]
                    .as_str()
                    .unwrap_or("");
                let known = p
                    .replica_sets
                    .iter()
                    .any(|r| key(r) == (ns.clone(), rs.clone()));
                let dep = rs
                    .strip_suffix(&format!("-{hash}"))
                    .filter(|_| !hash.is_empty());
                let has_dep = dep.is_some_and(|d| {
                    p.deployments
                        .iter()
                        .any(|v| key(v) == (ns.clone(), d.to_string()))
                });
                match dep {
                    _ if known => format!("ReplicaSet/{rs}"),
                    Some(d) if has_dep => {
                        by_rs
                            .entry((ns.clone(), rs.clone()))
                            .or_insert((hash.to_string(), 0))
                            .1 += 1;
                        format!("Deployment/{d}")
                    }
                    _ => {
                        notes.push(format!("pod {ns}/{name}: ReplicaSet {rs} and its Deployment are not in the file: loaded bare"));
                        "Pod".to_string()
                    }
                }
            }
            Some((kind, o)) => {
                notes.push(format!(
                    "pod {ns}/{name}: owned by {kind} {o}, which is not loaded: loaded bare"
                ));
                "Pod".to_string()
            }
            None => "Pod".to_string(),
        };
        owner_of.insert((ns, name), owner);
    }
    let mut made = Vec::new();
    let mut replicas: BTreeMap<(String, String), usize> = BTreeMap::new();
    for ((ns, rs), (hash, n)) in &by_rs {
        let dep = rs.strip_suffix(&format!("-{hash}")).unwrap_or(rs);
        let d = p
            .deployments
            .iter()
            .find(|v| key(v) == (ns.clone(), dep.to_string()))
            .expect("checked");
        made.push(replica_set(d, rs, hash, *n));
        *replicas.entry((ns.clone(), dep.to_string())).or_default() += n;
    }
    for d in &mut p.deployments {
        if let Some(n) = replicas.get(&key(d)) {
            if d["spec"]["replicas"].as_u64().unwrap_or(1) != *n as u64 {
                notes.push(format!(
                    "deployment {}/{}: {n} replicas, the pods the file has",
                    meta(d, "namespace"),
                    meta(d, "name")
                ));
                d["spec"]["replicas"] = (*n).into();
            }
        }
    }
    (made, owner_of)
}

/// Loads `manifests` onto `c`.
pub fn load(c: &Cluster, manifests: &str) -> Result<Loaded> {
    let mut out = Loaded::default();
    let mut p = parse(manifests, &mut out.notes)?;
    let (made, owner_of) = owners(&mut p, &mut out.notes);
    let mut ips = BTreeMap::new();
    for pod in &p.pods {
        match pod_ip(pod) {
            Some(ip) => {
                ips.insert(key(pod), ip);
            }
            None => bail!(
                "pod {}/{} has no status.podIP in the file: give it one",
                meta(pod, "namespace"),
                meta(pod, "name")
            ),
        }
    }
    apply(c, &[], &p.namespaces)?;
    // What an earlier load (or anything else) left in these namespaces is
    // not this file's to wait for.
    let before = existing_pods(c, &p)?;
    apply(c, &[], &p.config)?;
    let pods: Vec<Value> = p.pods.iter().map(|v| clean(v.clone(), true)).collect();
    apply(c, &[], &pods)?;
    let now = k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let status: Vec<Value> = p
        .pods
        .iter()
        .map(|v| running_status(v, &ips[&key(v)], &now))
        .collect();
    apply(c, &["--subresource=status"], &status)?;
    let slices = endpoint_slices(&p, &ips);
    if !slices.is_empty() {
        server_side_apply(c, MANAGER, &[], &slices)?;
    }
    let rss: Vec<Value> = p
        .replica_sets
        .iter()
        .map(|v| clean(v.clone(), true))
        .collect();
    apply(c, &[], &rss)?;
    apply(c, &[], &made)?;
    let deps: Vec<Value> = p
        .deployments
        .iter()
        .map(|v| clean(v.clone(), false))
        .collect();
    apply(c, &[], &deps)?;
    wait_adopted(c, &p, &owner_of, &before, Duration::from_secs(90))?;
    for pod in &p.pods {
        let k = key(pod);
        out.pods.push(LoadedPod {
            ip: ips[&k].clone(),
            owner: owner_of[&k].clone(),
            namespace: k.0,
            name: k.1,
        });
    }
    Ok(out)
}

/// The pods already in the file's namespaces, as `(namespace, name)`.
fn existing_pods(c: &Cluster, p: &Parsed) -> Result<BTreeSet<(String, String)>> {
    let mut out = BTreeSet::new();
    for ns in namespaces_of(p) {
        let pods = get_json(c, &["get", "pods", "-n", ns, "-o", "json"])?;
        for pod in pods["items"].as_array().into_iter().flatten() {
            out.insert(key(pod));
        }
    }
    Ok(out)
}

fn namespaces_of(p: &Parsed) -> Vec<&str> {
    let mut namespaces: Vec<&str> = p.pods.iter().map(|v| meta(v, "namespace")).collect();
    namespaces.sort();
    namespaces.dedup();
    namespaces
}

fn get_json(c: &Cluster, args: &[&str]) -> Result<Value> {
    let o = c.kubectl(args, None);
    if !o.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    serde_json::from_slice(&o.stdout).context("kubectl printed JSON")
}

/// What still keeps the load from being done, or `None`: a Deployment of
/// the file without all its replicas ready, a pod of the file without its
/// owner, a pod the controllers made (pods in `before` were there already).
fn pending(
    c: &Cluster,
    p: &Parsed,
    owner_of: &BTreeMap<(String, String), String>,
    before: &BTreeSet<(String, String)>,
) -> Result<Option<String>> {
    let ours: BTreeSet<(String, String)> = p.deployments.iter().map(key).collect();
    for ns in namespaces_of(p) {
        for d in get_json(c, &["get", "deployments", "-n", ns, "-o", "json"])?["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| ours.contains(&key(d)))
        {
            let want = d["spec"]["replicas"].as_u64().unwrap_or(1);
            if d["status"]["readyReplicas"].as_u64().unwrap_or(0) != want
                || d["status"]["observedGeneration"].as_u64() < d["metadata"]["generation"].as_u64()
            {
                return Ok(Some(format!(
                    "deployment {ns}/{} is not ready",
                    meta(d, "name")
                )));
            }
        }
        for pod in get_json(c, &["get", "pods", "-n", ns, "-o", "json"])?["items"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let k = key(pod);
            if before.contains(&k) {
                continue;
            }
            match owner_of.get(&k) {
                None => return Ok(Some(format!("pod {ns}/{} is not from the file", k.1))),
                Some(o) if o != "Pod" && controller_of(pod).is_none() => {
                    return Ok(Some(format!("pod {ns}/{} has no owner yet", k.1)))
                }
                _ => {}
            }
        }
    }
    Ok(None)
}

fn wait_adopted(
    c: &Cluster,
    p: &Parsed,
    owner_of: &BTreeMap<(String, String), String>,
    before: &BTreeSet<(String, String)>,
    timeout: Duration,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match pending(c, p, owner_of, before)? {
            None => return Ok(()),
            Some(why) if Instant::now() > deadline => {
                bail!("{why} after {timeout:?} (is kube-controller-manager running? tests/cluster/up)")
            }
            Some(_) => std::thread::sleep(Duration::from_millis(300)),
        }
    }
}
