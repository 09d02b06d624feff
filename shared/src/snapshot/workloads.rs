//! Building a snapshot, first steps: the workloads (every controller, and
//! every pod under the workload that runs it) and whether each runs a
//! sidecar.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};

use super::model::{Inbound, PodId, PodInfo, Workload, WorkloadId, WorkloadKind};
use crate::exempt::Exemption;
use crate::hash::HashMap;
use crate::inject::{self, Injection};
use crate::inputs::{Inputs, Pod};
use crate::labels::Labels;
use crate::mesh::Options;
use crate::meta::{created, labels, name_of, ns_of, NamespaceInfo};

/// The namespaces read, with their labels.
pub(super) fn namespaces(inputs: &Inputs) -> BTreeMap<String, NamespaceInfo> {
    inputs
        .namespaces
        .iter()
        .map(|n| {
            (
                name_of(&n.metadata),
                NamespaceInfo {
                    labels: labels(&n.metadata.labels),
                },
            )
        })
        .collect()
}

/// The workloads and their pods: the controllers read, then each pod under
/// the workload that runs it (made up from the pod's owner reference when
/// that controller was not read).
pub(super) fn workloads_and_pods(inputs: &Inputs) -> (Vec<Workload>, Vec<PodInfo>) {
    let mut wb = WorkloadBuilder {
        workloads: Vec::new(),
        by_key: HashMap::default(),
    };
    add_controllers(&mut wb, inputs);
    let owners = Owners {
        replica_sets: add_replica_sets(&mut wb, inputs),
        jobs: add_jobs(&mut wb, inputs),
    };
    let mut pods = Vec::with_capacity(inputs.pods.len());
    for p in &inputs.pods {
        let tpl = Template::from(p);
        let wid = pod_workload(&mut wb, &owners, p, tpl);
        let id = pods.len();
        wb.workloads[wid].pods.push(id);
        pods.push(PodInfo {
            name: name_of(&p.metadata),
            namespace: ns_of(&p.metadata),
            labels: labels(&p.metadata.labels),
            annotations: labels(&p.metadata.annotations),
            ips: pod_ips(p),
            workload: wid,
            has_proxy: tpl.has_proxy,
            proxy_gateway: tpl.proxy_gateway,
            host_network: tpl.host_network,
            admitted: admitted(p),
            injection: Injection::default(),
        });
    }
    (wb.workloads, pods)
}

/// Deployments, StatefulSets, DaemonSets and CronJobs.
fn add_controllers(wb: &mut WorkloadBuilder, inputs: &Inputs) {
    for d in &inputs.deployments {
        if let Some(s) = &d.spec {
            wb.add(
                WorkloadKind::Deployment,
                &d.metadata,
                (&s.template).into(),
                match_labels(&s.selector),
                s.replicas.unwrap_or(1).max(0) as u32,
            );
        }
    }
    for d in &inputs.statefulsets {
        if let Some(s) = &d.spec {
            wb.add(
                WorkloadKind::StatefulSet,
                &d.metadata,
                (&s.template).into(),
                match_labels(&s.selector),
                s.replicas.unwrap_or(1).max(0) as u32,
            );
        }
    }
    for d in &inputs.daemonsets {
        if let Some(s) = &d.spec {
            wb.add(
                WorkloadKind::DaemonSet,
                &d.metadata,
                (&s.template).into(),
                match_labels(&s.selector),
                1,
            );
        }
    }
    // A CronJob's Jobs get generated per-run selectors: only its pod
    // template's labels describe all of its runs.
    for c in &inputs.cronjobs {
        if let Some(t) = c.spec.as_ref().and_then(|s| s.job_template.spec.as_ref()) {
            wb.add(
                WorkloadKind::CronJob,
                &c.metadata,
                (&t.template).into(),
                None,
                1,
            );
        }
    }
}

/// The workload of each ReplicaSet and Job read, by (namespace, name): a
/// pod owned by one belongs to that workload.
struct Owners {
    replica_sets: HashMap<(String, String), WorkloadId>,
    jobs: HashMap<(String, String), WorkloadId>,
}

/// ReplicaSets map to their Deployment when it is known.
fn add_replica_sets(
    wb: &mut WorkloadBuilder,
    inputs: &Inputs,
) -> HashMap<(String, String), WorkloadId> {
    let mut rs_owner: HashMap<(String, String), WorkloadId> = HashMap::default();
    for rs in &inputs.replicasets {
        let ns = ns_of(&rs.metadata);
        let tpl = rs.spec.as_ref().and_then(|s| s.template.as_ref());
        let tplv = tpl.map(Template::from).unwrap_or(Template {
            meta: None,
            has_proxy: false,
            proxy_gateway: None,
            host_network: false,
        });
        let rs_selector = rs.spec.as_ref().and_then(|s| match_labels(&s.selector));
        let id = match controller_of(&rs.metadata) {
            Some(o) if o.kind == "Deployment" => {
                match wb.find(WorkloadKind::Deployment, &ns, &o.name) {
                    Some(id) => id,
                    None => {
                        let meta = ObjectMeta {
                            name: Some(o.name.clone()),
                            namespace: Some(ns.clone()),
                            ..Default::default()
                        };
                        // Its ReplicaSet's selector is the Deployment's
                        // plus pod-template-hash, which is never used.
                        wb.add(WorkloadKind::Deployment, &meta, tplv, rs_selector, 1)
                    }
                }
            }
            _ => wb.add(
                WorkloadKind::ReplicaSet,
                &rs.metadata,
                tplv,
                rs_selector,
                rs.spec
                    .as_ref()
                    .and_then(|s| s.replicas)
                    .unwrap_or(1)
                    .max(0) as u32,
            ),
        };
        rs_owner.insert((ns, name_of(&rs.metadata)), id);
    }
    rs_owner
}

/// Jobs map to their CronJob when it is known.
fn add_jobs(wb: &mut WorkloadBuilder, inputs: &Inputs) -> HashMap<(String, String), WorkloadId> {
    let mut job_owner: HashMap<(String, String), WorkloadId> = HashMap::default();
    for j in &inputs.jobs {
        let ns = ns_of(&j.metadata);
        let Some(spec) = &j.spec else { continue };
        let id = match controller_of(&j.metadata) {
            Some(o) if o.kind == "CronJob" => wb
                .find(WorkloadKind::CronJob, &ns, &o.name)
                .unwrap_or_else(|| {
                    let meta = ObjectMeta {
                        name: Some(o.name.clone()),
                        namespace: Some(ns.clone()),
                        ..Default::default()
                    };
                    wb.add(
                        WorkloadKind::CronJob,
                        &meta,
                        (&spec.template).into(),
                        None,
                        1,
                    )
                }),
            // A Job's selector (controller-uid) is generated per run.
            _ => wb.add(
                WorkloadKind::Job,
                &j.metadata,
                (&spec.template).into(),
                None,
                1,
            ),
        };
        job_owner.insert((ns, name_of(&j.metadata)), id);
    }
    job_owner
}

/// The workload that runs a pod: its controller's, else one made up from
/// its owner reference, else the bare pod itself.
fn pod_workload(
    wb: &mut WorkloadBuilder,
    owners: &Owners,
    p: &Pod,
    tpl: Template<'_>,
) -> WorkloadId {
    let ns = ns_of(&p.metadata);
    let owner_meta = |n: &str| ObjectMeta {
        name: Some(n.to_string()),
        namespace: Some(ns.clone()),
        ..Default::default()
    };
    let Some(o) = controller_of(&p.metadata) else {
        return wb.add(WorkloadKind::Pod, &p.metadata, tpl, None, 1);
    };
    match o.kind.as_str() {
        "ReplicaSet" => match owners.replica_sets.get(&(ns.clone(), o.name.clone())) {
            Some(id) => *id,
            None => {
                // No ReplicaSet in the input: a Deployment's
                // ReplicaSet is `<deployment>-<pod-template-hash>`.
                let hash = (p.metadata.labels.as_ref()).and_then(|l| l.get("pod-template-hash"));
                match hash.and_then(|h| o.name.strip_suffix(&format!("-{h}"))) {
                    Some(dep) => wb
                        .find(WorkloadKind::Deployment, &ns, dep)
                        .unwrap_or_else(|| {
                            wb.add(WorkloadKind::Deployment, &owner_meta(dep), tpl, None, 1)
                        }),
                    None => wb.add(WorkloadKind::ReplicaSet, &owner_meta(&o.name), tpl, None, 1),
                }
            }
        },
        "Job" => match owners.jobs.get(&(ns.clone(), o.name.clone())) {
            Some(id) => *id,
            None => wb.add(WorkloadKind::Job, &owner_meta(&o.name), tpl, None, 1),
        },
        kind => {
            let k =
                WorkloadKind::parse(kind).unwrap_or_else(|| WorkloadKind::Other(kind.to_string()));
            match wb.find(k.clone(), &ns, &o.name) {
                Some(id) => id,
                None => wb.add(k, &owner_meta(&o.name), tpl, None, 1),
            }
        }
    }
}

/// Whether a pod exists (and is not a manifest yet to be applied): the API
/// server gave it a uid or a creation time, or it has a status; and it has
/// a spec, which says whether it runs the proxy.
fn admitted(p: &Pod) -> bool {
    let m = &p.metadata;
    p.spec.is_some() && (m.uid.is_some() || m.creation_timestamp.is_some() || p.status.is_some())
}

/// A pod's IPs: `status.podIPs`, then `status.podIP` if it is not among them.
fn pod_ips(p: &Pod) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = Vec::new();
    if let Some(st) = &p.status {
        for ip in &st.pod_ips {
            if let Ok(a) = ip.ip.parse() {
                ips.push(a);
            }
        }
        if let Some(a) = st.pod_ip.as_deref().and_then(|s| s.parse().ok()) {
            if !ips.contains(&a) {
                ips.push(a);
            }
        }
    }
    ips
}

/// Whether each pod, and each workload, runs a sidecar (or is ambient).
pub(super) fn decide_injection(
    workloads: &mut [Workload],
    pods: &mut [PodInfo],
    namespaces: &BTreeMap<String, NamespaceInfo>,
    options: &Options,
) {
    let empty_ns = NamespaceInfo::default();
    for p in pods.iter_mut() {
        let nsinfo = namespaces.get(&p.namespace).unwrap_or(&empty_ns);
        p.injection = inject::evaluate(
            &inject::PodFacts {
                namespace: &p.namespace,
                labels: &p.labels,
                annotations: &p.annotations,
                has_proxy: p.has_proxy,
                proxy_gateway: p.proxy_gateway,
                host_network: p.host_network,
                admitted: p.admitted,
            },
            nsinfo,
            options,
        );
    }
    for w in workloads.iter_mut() {
        w.proxy_pods = w
            .pods
            .iter()
            .filter(|p| pods[**p].injection.runs_proxy())
            .count();
        // The pods decide when there are any: they are what runs.
        w.injection = match w
            .pods
            .iter()
            .map(|p| &pods[*p].injection)
            .find(|i| i.sidecar)
        {
            Some(i) => i.clone(),
            None if !w.pods.is_empty() => pods[w.pods[0]].injection.clone(),
            None => inject::evaluate(
                &inject::PodFacts {
                    namespace: &w.namespace,
                    labels: &w.labels,
                    annotations: &w.annotations,
                    has_proxy: w.template_has_proxy,
                    proxy_gateway: w.template_proxy_gateway,
                    host_network: w.host_network,
                    admitted: false,
                },
                namespaces.get(&w.namespace).unwrap_or(&empty_ns),
                options,
            ),
        };
    }
}

/// Pods by IP (pods on the host network have no IP of their own) and by name.
pub(super) fn pod_indexes(
    pods: &[PodInfo],
) -> (HashMap<IpAddr, Vec<PodId>>, HashMap<String, Vec<PodId>>) {
    let mut pods_by_ip: HashMap<IpAddr, Vec<PodId>> = HashMap::default();
    let mut pods_by_name: HashMap<String, Vec<PodId>> = HashMap::default();
    for (id, p) in pods.iter().enumerate() {
        if !p.host_network {
            for ip in &p.ips {
                pods_by_ip.entry(*ip).or_default().push(id);
            }
        }
        pods_by_name.entry(p.name.clone()).or_default().push(id);
    }
    (pods_by_ip, pods_by_name)
}

pub(super) fn workloads_by_ns(workloads: &[Workload]) -> HashMap<String, Vec<WorkloadId>> {
    let mut workloads_by_ns: HashMap<String, Vec<WorkloadId>> = HashMap::default();
    for (id, w) in workloads.iter().enumerate() {
        workloads_by_ns
            .entry(w.namespace.clone())
            .or_default()
            .push(id);
    }
    workloads_by_ns
}

/// A controller's `spec.selector.matchLabels`, when it has any.
fn match_labels(sel: &LabelSelector) -> Option<Labels> {
    sel.match_labels
        .as_ref()
        .filter(|m| !m.is_empty())
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
}

/// A pod template's proxy container, if it runs one ([`inject::is_proxy`]).
fn proxy_of(spec: Option<&PodSpec>) -> Option<&Container> {
    let spec = spec?;
    let proxy = |init: bool| {
        move |c: &&Container| inject::is_proxy(&c.name, init, c.restart_policy.as_deref())
    };
    (spec.containers.iter().find(proxy(false)))
        .or_else(|| spec.init_containers.iter().flatten().find(proxy(true)))
}

/// What a workload's pods look like: from a pod template, or from a pod.
#[derive(Clone, Copy)]
struct Template<'a> {
    meta: Option<&'a ObjectMeta>,
    has_proxy: bool,
    proxy_gateway: Option<inject::Gateway>,
    host_network: bool,
}

impl<'a> From<&'a PodTemplateSpec> for Template<'a> {
    fn from(t: &'a PodTemplateSpec) -> Self {
        let spec = t.spec.as_ref();
        let proxy = proxy_of(spec);
        Template {
            meta: t.metadata.as_ref(),
            has_proxy: proxy.is_some(),
            proxy_gateway: proxy.and_then(|c| inject::Gateway::of_args(c.args.as_deref()?)),
            host_network: spec.and_then(|s| s.host_network).unwrap_or(false),
        }
    }
}

impl<'a> From<&'a crate::inputs::Pod> for Template<'a> {
    fn from(p: &'a crate::inputs::Pod) -> Self {
        let spec = p.spec.as_ref();
        Template {
            meta: Some(&p.metadata),
            has_proxy: spec.is_some_and(crate::inputs::PodSpec::has_proxy),
            proxy_gateway: spec.and_then(crate::inputs::PodSpec::proxy_gateway),
            host_network: spec.and_then(|s| s.host_network).unwrap_or(false),
        }
    }
}

struct WorkloadBuilder {
    workloads: Vec<Workload>,
    by_key: HashMap<(WorkloadKind, String, String), WorkloadId>,
}

impl WorkloadBuilder {
    fn add(
        &mut self,
        kind: WorkloadKind,
        meta: &ObjectMeta,
        tpl: Template<'_>,
        selector: Option<Labels>,
        replicas: u32,
    ) -> WorkloadId {
        let key = (kind.clone(), ns_of(meta), name_of(meta));
        if let Some(id) = self.by_key.get(&key) {
            return *id;
        }
        let id = self.workloads.len();
        self.workloads.push(Workload {
            kind,
            name: key.2.clone(),
            namespace: key.1.clone(),
            labels: tpl.meta.map(|m| labels(&m.labels)).unwrap_or_default(),
            annotations: tpl.meta.map(|m| labels(&m.annotations)).unwrap_or_default(),
            selector,
            pods: Vec::new(),
            replicas,
            host_network: tpl.host_network,
            template_has_proxy: tpl.has_proxy,
            template_proxy_gateway: tpl.proxy_gateway,
            inbound: Inbound::default(),
            created: created(meta),
            injection: Injection::default(),
            proxy_pods: 0,
            exemption: Exemption::of(&labels(&meta.annotations)),
        });
        self.by_key.insert(key, id);
        id
    }

    fn find(&self, kind: WorkloadKind, ns: &str, name: &str) -> Option<WorkloadId> {
        self.by_key
            .get(&(kind, ns.to_string(), name.to_string()))
            .copied()
    }
}
