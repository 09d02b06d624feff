//! `MeshSnapshot`: the mesh as the scope engine sees it, with the indexes
//! every question (which Sidecar, which services, which proxies) needs.

use std::collections::BTreeMap;

use crate::HashMap;
use std::fmt;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::error::Error;
use crate::host::{resolve_short_name, Export, HostEntry};
use crate::inject::{self, Injection};
use crate::inputs::Inputs;
use crate::istio::{ServiceEntry, Sidecar, VirtualService};
use crate::mesh::{MeshConfig, Options};
use crate::meta::{created, labels, name_of, ns_of};
use crate::telemetry::{CustomAuthz, TelemetryInfo};
use crate::visibility::{self, Resolved};

pub use crate::labels::{selector_matches, Labels};
pub use crate::meta::{Created, NamespaceInfo};

pub type WorkloadId = usize;
pub type PodId = usize;
pub type SvcId = usize;
pub type SidecarId = usize;
pub type VsId = usize;
pub type DrId = usize;
pub type SeId = usize;

/// The label that marks a Sidecar as generated (and so owned) by meshscope.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "kubectl-meshscope";

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
    ReplicaSet,
    Job,
    CronJob,
    Pod,
    /// A controller meshscope does not know (an Argo Rollout, say).
    Other(String),
}

impl WorkloadKind {
    pub fn as_str(&self) -> &str {
        match self {
            WorkloadKind::Deployment => "Deployment",
            WorkloadKind::StatefulSet => "StatefulSet",
            WorkloadKind::DaemonSet => "DaemonSet",
            WorkloadKind::ReplicaSet => "ReplicaSet",
            WorkloadKind::Job => "Job",
            WorkloadKind::CronJob => "CronJob",
            WorkloadKind::Pod => "Pod",
            WorkloadKind::Other(k) => k,
        }
    }

    /// Parses kubectl-style kind names (`deploy`, `deployment`, `sts`, ...).
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s.to_ascii_lowercase().as_str() {
            "deploy" | "deployment" | "deployments" => Self::Deployment,
            "sts" | "statefulset" | "statefulsets" => Self::StatefulSet,
            "ds" | "daemonset" | "daemonsets" => Self::DaemonSet,
            "rs" | "replicaset" | "replicasets" => Self::ReplicaSet,
            "job" | "jobs" => Self::Job,
            "cj" | "cronjob" | "cronjobs" => Self::CronJob,
            "po" | "pod" | "pods" => Self::Pod,
            _ => return None,
        })
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub name: String,
    pub namespace: String,
    /// Pod-template labels (for a bare pod, its own labels).
    pub labels: Labels,
    /// The controller's `spec.selector.matchLabels` (immutable in apps/v1),
    /// for Deployments, StatefulSets, DaemonSets and ReplicaSets; `None` for
    /// Jobs (whose generated selector is per run), CronJobs, bare pods and
    /// controllers meshscope does not read.
    pub selector: Option<Labels>,
    pub annotations: Labels,
    pub pods: Vec<PodId>,
    pub replicas: u32,
    pub host_network: bool,
    pub template_has_proxy: bool,
    /// The inbound ports istiod gives this workload's proxies: the distinct
    /// targetPorts of the Kubernetes Services that select it.
    pub inbound: Inbound,
    pub created: Created,
    pub injection: Injection,
}

/// A proxy's inbound ports, by protocol (each gets an inbound cluster and
/// a filter chain on virtualInbound).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inbound {
    pub http: u32,
    pub tcp: u32,
}

impl Inbound {
    pub fn ports(self) -> u32 {
        self.http + self.tcp
    }
}

impl Workload {
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.kind, self.namespace, self.name)
    }

    /// How many proxies this workload runs: its pods, or before any pod
    /// exists, the replicas its template asks for.
    pub fn proxies(&self) -> usize {
        if self.pods.is_empty() {
            self.replicas as usize
        } else {
            self.pods.len()
        }
    }
}

#[derive(Clone, Debug)]
pub struct PodInfo {
    pub name: String,
    pub namespace: String,
    pub labels: Labels,
    pub annotations: Labels,
    pub ips: Vec<IpAddr>,
    pub workload: WorkloadId,
    pub has_proxy: bool,
    pub host_network: bool,
    pub injection: Injection,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SvcKind {
    /// A Kubernetes Service.
    Kube,
    /// A ServiceEntry host.
    Entry,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP, HTTP2, gRPC: a `0.0.0.0_<port>` listener and a route per port.
    Http,
    Tcp,
    Udp,
    /// Unknown (no recognised name prefix or appProtocol): istiod sniffs
    /// it, on a listener at the service's address as for TCP.
    Auto,
}

impl Protocol {
    /// Istio protocol selection: `appProtocol`, then the port-name prefix.
    pub fn detect(explicit: Option<&str>, name: Option<&str>) -> Self {
        let pick = |p: &str| -> Option<Protocol> {
            let p = p.to_ascii_lowercase();
            let head = p.split(['-', '_']).next().unwrap_or("");
            Some(match head {
                "http" | "http2" | "grpc" | "grpc-web" | "h2c" => Protocol::Http,
                "udp" => Protocol::Udp,
                "tcp" | "tls" | "https" | "mongo" | "mysql" | "redis" | "thrift" => Protocol::Tcp,
                _ => return None,
            })
        };
        explicit
            .and_then(pick)
            .or_else(|| name.and_then(pick))
            .unwrap_or(Protocol::Auto)
    }
}

#[derive(Clone, Debug)]
pub struct PortInfo {
    pub number: u32,
    pub protocol: Protocol,
    /// A Kubernetes Service port's numeric targetPort (the port itself
    /// when it is unset or named); 0 for ServiceEntries.
    pub target_port: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// Kubernetes ClusterIP or SE STATIC: EDS.
    Eds,
    Dns,
    DnsRoundRobin,
    /// Headless or SE NONE: ORIGINAL_DST.
    Passthrough,
}

/// One imported unit: a Kubernetes Service or one host of a ServiceEntry.
#[derive(Clone, Debug)]
pub struct ServiceInfo {
    pub kind: SvcKind,
    /// The object name (Service or ServiceEntry).
    pub name: String,
    pub namespace: String,
    pub hostname: String,
    pub ports: Vec<PortInfo>,
    pub export: Export,
    pub created: Created,
    pub addresses: Vec<IpAddr>,
    pub resolution: Resolution,
    pub endpoints: u32,
    /// The hostname is a name only the mesh defines: a ServiceEntry whose
    /// endpoints are listed or selected apart from the host (`STATIC`, or
    /// `DNS` with endpoints, or a workloadSelector). Cluster DNS does not
    /// know it; with DNS capture only the proxy's name table answers it.
    pub mesh_defined_name: bool,
    /// A Kubernetes Service's pod selector (`None` for ServiceEntries and
    /// selector-less Services).
    pub selector: Option<Labels>,
    /// Rank among services: oldest first, namespace-specific exports first.
    pub order: usize,
}

#[derive(Clone, Debug)]
pub struct Listener {
    pub port: Option<u32>,
    /// The protocol a port-specific listener declares: istiod builds the
    /// listener for its services with it instead of the services' own.
    pub protocol: Option<Protocol>,
    pub hosts: Vec<HostEntry>,
}

impl Listener {
    pub fn everything() -> Self {
        Self {
            port: None,
            protocol: None,
            hosts: vec![HostEntry {
                ns: crate::host::NsSel::Any,
                host: "*".into(),
                exclude: false,
            }],
        }
    }
}

#[derive(Clone, Debug)]
pub struct SidecarInfo {
    pub name: String,
    pub namespace: String,
    pub created: Created,
    pub selector: Option<Labels>,
    /// Parsed listeners; empty when the Sidecar has no egress.
    pub listeners: Vec<Listener>,
    pub invalid_hosts: Vec<Error>,
    pub managed: bool,
    pub object: Sidecar,
}

impl SidecarInfo {
    pub fn has_egress(&self) -> bool {
        !self.object.spec.egress.is_empty()
    }
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
    pub fn egress_hosts(&self) -> impl Iterator<Item = &str> {
        self.object
            .spec
            .egress
            .iter()
            .flat_map(|l| l.hosts.iter().map(String::as_str))
    }
}

#[derive(Clone, Debug)]
pub struct VsDest {
    pub host: String,
    pub port: Option<u32>,
    /// `match.sourceNamespace` values of the route; empty means any.
    pub source_namespaces: Vec<String>,
}

#[derive(Clone, Debug)]
pub struct VsInfo {
    pub name: String,
    pub namespace: String,
    pub hosts: Vec<String>,
    pub mesh_bound: bool,
    pub export: Export,
    pub dests: Vec<VsDest>,
    /// The VirtualServices its HTTP routes delegate to, as (namespace, name).
    pub delegates: Vec<(String, String)>,
    pub created: Created,
}

#[derive(Clone, Debug)]
pub struct DrInfo {
    pub name: String,
    pub namespace: String,
    pub host: String,
    /// Subset names, in the DestinationRule's order.
    pub subsets: Vec<String>,
    pub export: Export,
    pub has_selector: bool,
    pub created: Created,
}

#[derive(Clone, Debug)]
pub struct SeInfo {
    pub name: String,
    pub namespace: String,
    pub resolution: String,
    pub export_to: Option<Vec<String>>,
    pub hosts: Vec<String>,
    pub annotations: Labels,
}

/// The whole mesh, indexed.
#[derive(Clone, Debug)]
pub struct MeshSnapshot {
    pub options: Options,
    pub mesh: MeshConfig,
    pub namespaces: BTreeMap<String, NamespaceInfo>,
    pub workloads: Vec<Workload>,
    pub pods: Vec<PodInfo>,
    pub services: Vec<ServiceInfo>,
    pub sidecars: Vec<SidecarInfo>,
    pub virtual_services: Vec<VsInfo>,
    pub destination_rules: Vec<DrInfo>,
    pub service_entries: Vec<SeInfo>,
    /// Telemetries, oldest first ([`crate::telemetry`]).
    pub telemetries: Vec<TelemetryInfo>,
    /// AuthorizationPolicies with `action: CUSTOM`, oldest first.
    pub custom_authz: Vec<CustomAuthz>,
    /// Per namespace: selector Sidecars first, then selector-less ones, each
    /// half oldest first (ties by name), as istiod orders them.
    pub(crate) sidecars_by_ns: HashMap<String, Vec<SidecarId>>,
    pub(crate) root_default: Option<SidecarId>,
    pub(crate) services_by_host: HashMap<String, Vec<SvcId>>,
    pub(crate) services_by_ns: HashMap<String, Vec<SvcId>>,
    pub(crate) services_by_addr: HashMap<IpAddr, Vec<SvcId>>,
    pub(crate) pods_by_ip: HashMap<IpAddr, Vec<PodId>>,
    /// Endpoint addresses of headless Services, from EndpointSlices: the
    /// pods behind them that were not read themselves.
    pub(crate) headless_by_ip: HashMap<IpAddr, Vec<SvcId>>,
    pub(crate) pods_by_name: HashMap<String, Vec<PodId>>,
    pub(crate) workloads_by_ns: HashMap<String, Vec<WorkloadId>>,
    pub(crate) vss_by_ns: HashMap<String, Vec<VsId>>,
    pub(crate) drs_by_ns: HashMap<String, Vec<DrId>>,
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

fn has_proxy(spec: Option<&PodSpec>) -> bool {
    let Some(spec) = spec else { return false };
    let named = |c: &Container| c.name == crate::inject::PROXY_CONTAINER;
    spec.containers.iter().any(named) || spec.init_containers.iter().flatten().any(named)
}

/// What a workload's pods look like: from a pod template, or from a pod.
#[derive(Clone, Copy)]
struct Template<'a> {
    meta: Option<&'a ObjectMeta>,
    has_proxy: bool,
    host_network: bool,
}

impl<'a> From<&'a PodTemplateSpec> for Template<'a> {
    fn from(t: &'a PodTemplateSpec) -> Self {
        let spec = t.spec.as_ref();
        Template {
            meta: t.metadata.as_ref(),
            has_proxy: has_proxy(spec),
            host_network: spec.and_then(|s| s.host_network).unwrap_or(false),
        }
    }
}

impl<'a> From<&'a crate::inputs::Pod> for Template<'a> {
    fn from(p: &'a crate::inputs::Pod) -> Self {
        let spec = p.spec.as_ref();
        Template {
            meta: Some(&p.metadata),
            has_proxy: spec.is_some_and(|s| {
                (s.containers.iter())
                    .chain(&s.init_containers)
                    .any(|c| c.name == crate::inject::PROXY_CONTAINER)
            }),
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
            inbound: Inbound::default(),
            created: created(meta),
            injection: Injection::default(),
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

impl MeshSnapshot {
    pub fn build(inputs: &Inputs, options: Options) -> Result<Self, Error> {
        let mesh = match inputs.mesh_config_text() {
            Some(text) => MeshConfig::from_yaml(text)?,
            None => MeshConfig::default(),
        };
        Ok(Self::build_with_mesh(inputs, options, mesh))
    }

    pub fn build_with_mesh(inputs: &Inputs, options: Options, mesh: MeshConfig) -> Self {
        let mut namespaces: BTreeMap<String, NamespaceInfo> = inputs
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
            .collect();

        // === workloads ===
        let mut wb = WorkloadBuilder {
            workloads: Vec::new(),
            by_key: HashMap::default(),
        };
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
        // ReplicaSets and Jobs map to their controller when it is known.
        let mut rs_owner: HashMap<(String, String), WorkloadId> = HashMap::default();
        for rs in &inputs.replicasets {
            let ns = ns_of(&rs.metadata);
            let tpl = rs.spec.as_ref().and_then(|s| s.template.as_ref());
            let tplv = tpl.map(Template::from).unwrap_or(Template {
                meta: None,
                has_proxy: false,
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

        // === pods ===
        let mut pods = Vec::with_capacity(inputs.pods.len());
        for p in &inputs.pods {
            let ns = ns_of(&p.metadata);
            let name = name_of(&p.metadata);
            let plabels = labels(&p.metadata.labels);
            let tpl = Template::from(p);
            let owner_meta = |n: &str| ObjectMeta {
                name: Some(n.to_string()),
                namespace: Some(ns.clone()),
                ..Default::default()
            };
            let wid = match controller_of(&p.metadata) {
                Some(o) => match o.kind.as_str() {
                    "ReplicaSet" => match rs_owner.get(&(ns.clone(), o.name.clone())) {
                        Some(id) => *id,
                        None => {
                            // No ReplicaSet in the input: a Deployment's
                            // ReplicaSet is `<deployment>-<pod-template-hash>`.
                            let hash = plabels.get("pod-template-hash");
                            match hash.and_then(|h| o.name.strip_suffix(&format!("-{h}"))) {
                                Some(dep) => wb
                                    .find(WorkloadKind::Deployment, &ns, dep)
                                    .unwrap_or_else(|| {
                                        wb.add(
                                            WorkloadKind::Deployment,
                                            &owner_meta(dep),
                                            tpl,
                                            None,
                                            1,
                                        )
                                    }),
                                None => wb.add(
                                    WorkloadKind::ReplicaSet,
                                    &owner_meta(&o.name),
                                    tpl,
                                    None,
                                    1,
                                ),
                            }
                        }
                    },
                    "Job" => match job_owner.get(&(ns.clone(), o.name.clone())) {
                        Some(id) => *id,
                        None => wb.add(WorkloadKind::Job, &owner_meta(&o.name), tpl, None, 1),
                    },
                    kind => {
                        let k = WorkloadKind::parse(kind)
                            .unwrap_or_else(|| WorkloadKind::Other(kind.to_string()));
                        match wb.find(k.clone(), &ns, &o.name) {
                            Some(id) => id,
                            None => wb.add(k, &owner_meta(&o.name), tpl, None, 1),
                        }
                    }
                },
                None => wb.add(WorkloadKind::Pod, &p.metadata, tpl, None, 1),
            };
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
            let id = pods.len();
            wb.workloads[wid].pods.push(id);
            pods.push(PodInfo {
                name,
                namespace: ns,
                labels: plabels,
                annotations: labels(&p.metadata.annotations),
                ips,
                workload: wid,
                has_proxy: tpl.has_proxy,
                host_network: tpl.host_network,
                injection: Injection::default(),
            });
        }
        let mut workloads = wb.workloads;

        // Namespaces that only appear on objects still exist for scoping.
        for w in &workloads {
            namespaces.entry(w.namespace.clone()).or_default();
        }
        let empty_ns = NamespaceInfo::default();
        for p in pods.iter_mut() {
            let nsinfo = namespaces.get(&p.namespace).unwrap_or(&empty_ns);
            p.injection = inject::evaluate(
                &inject::PodFacts {
                    namespace: &p.namespace,
                    labels: &p.labels,
                    annotations: &p.annotations,
                    has_proxy: p.has_proxy,
                    host_network: p.host_network,
                },
                nsinfo,
                &options,
            );
        }
        for w in workloads.iter_mut() {
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
                        host_network: w.host_network,
                    },
                    namespaces.get(&w.namespace).unwrap_or(&empty_ns),
                    &options,
                ),
            };
        }

        let mut pods_by_ip: HashMap<IpAddr, Vec<PodId>> = HashMap::default();
        let mut pods_by_name: HashMap<String, Vec<PodId>> = HashMap::default();
        let mut pods_by_ns: HashMap<&str, Vec<PodId>> = HashMap::default();
        for (id, p) in pods.iter().enumerate() {
            if !p.host_network {
                for ip in &p.ips {
                    pods_by_ip.entry(*ip).or_default().push(id);
                }
            }
            pods_by_name.entry(p.name.clone()).or_default().push(id);
            pods_by_ns.entry(p.namespace.as_str()).or_default().push(id);
        }
        let mut workloads_by_ns: HashMap<String, Vec<WorkloadId>> = HashMap::default();
        for (id, w) in workloads.iter().enumerate() {
            workloads_by_ns
                .entry(w.namespace.clone())
                .or_default()
                .push(id);
        }

        // === services ===
        let domain = options.cluster_domain.clone();
        let mut services: Vec<ServiceInfo> = Vec::new();
        for s in &inputs.services {
            services.push(kube_service(s, &mesh, &domain, &pods, &pods_by_ns));
        }
        let mut service_entries = Vec::new();
        for se in &inputs.service_entries {
            service_entries.push(SeInfo {
                name: name_of(&se.metadata),
                namespace: ns_of(&se.metadata),
                resolution: se.spec.resolution.clone().unwrap_or_else(|| "NONE".into()),
                export_to: se.spec.export_to.clone(),
                hosts: se.spec.hosts.clone(),
                annotations: labels(&se.metadata.annotations),
            });
            let first = services.len();
            services.extend(entry_services(se, &mesh, &pods, &pods_by_ns));
            // meshConfig.serviceEntryVisibility caps what sidecars see.
            let ns = ns_of(&se.metadata);
            let ns_labels = namespaces.get(&ns).map(|n| &n.labels);
            let cap = visibility::resolve(
                mesh.service_entry_visibility.as_ref(),
                options.istio,
                ns_labels.unwrap_or(&Labels::new()),
            )
            .map(|r| r.for_sidecars());
            if let Some(cap) = cap {
                for s in &mut services[first..] {
                    s.export = cap.cap(std::mem::replace(&mut s.export, Export::Hidden), &ns);
                }
            }
        }
        // Oldest first, namespace-specific exports ahead of public ones.
        let mut order: Vec<usize> = (0..services.len()).collect();
        order.sort_by(|a, b| {
            let (a, b) = (&services[*a], &services[*b]);
            (
                a.export.is_public(),
                a.created,
                &a.namespace,
                &a.name,
                &a.hostname,
            )
                .cmp(&(
                    b.export.is_public(),
                    b.created,
                    &b.namespace,
                    &b.name,
                    &b.hostname,
                ))
        });
        for (rank, idx) in order.into_iter().enumerate() {
            services[idx].order = rank;
        }
        let mut services_by_host: HashMap<String, Vec<SvcId>> = HashMap::default();
        let mut services_by_addr: HashMap<IpAddr, Vec<SvcId>> = HashMap::default();
        let mut services_by_ns: HashMap<String, Vec<SvcId>> = HashMap::default();
        for (id, s) in services.iter().enumerate() {
            services_by_host
                .entry(s.hostname.clone())
                .or_default()
                .push(id);
            services_by_ns
                .entry(s.namespace.clone())
                .or_default()
                .push(id);
            for a in &s.addresses {
                services_by_addr.entry(*a).or_default().push(id);
            }
        }
        let mut headless_by_ip: HashMap<IpAddr, Vec<SvcId>> = HashMap::default();
        for slice in &inputs.endpoint_slices {
            let ns = ns_of(&slice.metadata);
            let Some(svc_name) = slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::inputs::SERVICE_NAME_LABEL))
            else {
                continue;
            };
            let Some(&svc) = services_by_ns.get(&ns).and_then(|ids| {
                ids.iter().find(|id| {
                    let s = &services[**id];
                    s.kind == SvcKind::Kube
                        && s.resolution == Resolution::Passthrough
                        && s.name == *svc_name
                })
            }) else {
                continue;
            };
            for ip in slice
                .endpoints
                .iter()
                .flat_map(|e| &e.addresses)
                .filter_map(|a| a.parse::<IpAddr>().ok())
            {
                let at = headless_by_ip.entry(ip).or_default();
                if !at.contains(&svc) {
                    at.push(svc);
                }
            }
        }
        // Inbound ports: the distinct targetPorts of the Kubernetes
        // Services in the workload's namespace that select its pods.
        for w in workloads.iter_mut() {
            let wl_labels = match w.pods.first() {
                Some(p) => &pods[*p].labels,
                None => &w.labels,
            };
            let mut seen: BTreeMap<u32, Protocol> = BTreeMap::new();
            for &id in services_by_ns
                .get(&w.namespace)
                .map_or(&[][..], |v| v.as_slice())
            {
                let svc = &services[id];
                let Some(sel) = &svc.selector else { continue };
                if !selector_matches(sel, wl_labels) {
                    continue;
                }
                // UDP ports get an inbound cluster too.
                for p in &svc.ports {
                    seen.entry(p.target_port).or_insert(p.protocol);
                }
            }
            w.inbound = Inbound {
                // Sniffed ports get the HTTP inbound chains.
                http: seen
                    .values()
                    .filter(|p| matches!(p, Protocol::Http | Protocol::Auto))
                    .count() as u32,
                tcp: seen
                    .values()
                    .filter(|p| matches!(p, Protocol::Tcp | Protocol::Udp))
                    .count() as u32,
            };
        }
        for ids in services_by_host.values_mut() {
            ids.sort_by_key(|i| services[*i].order);
        }

        // === sidecars ===
        let mut sidecars: Vec<SidecarInfo> = inputs
            .sidecars
            .iter()
            .map(|sc| sidecar_info(sc, &options))
            .collect();
        sidecars.sort_by(|a, b| {
            (a.created, &a.name, &a.namespace).cmp(&(b.created, &b.name, &b.namespace))
        });
        let mut sidecars_by_ns: HashMap<String, Vec<SidecarId>> = HashMap::default();
        for (id, sc) in sidecars.iter().enumerate() {
            sidecars_by_ns
                .entry(sc.namespace.clone())
                .or_default()
                .push(id);
        }
        for ids in sidecars_by_ns.values_mut() {
            // Stable: keeps the time order within each half.
            ids.sort_by_key(|i| sidecars[*i].selector.is_none());
        }
        let root_default = sidecars_by_ns
            .get(&mesh.root_namespace)
            .and_then(|ids| ids.iter().find(|i| sidecars[**i].selector.is_none()))
            .copied();

        // === virtual services and destination rules ===
        let virtual_services: Vec<VsInfo> = inputs
            .virtual_services
            .iter()
            .map(|vs| vs_info(vs, &mesh, &domain))
            .collect();
        let mut vss_by_ns: HashMap<String, Vec<VsId>> = HashMap::default();
        for (id, v) in virtual_services.iter().enumerate() {
            vss_by_ns.entry(v.namespace.clone()).or_default().push(id);
        }
        let destination_rules: Vec<DrInfo> = inputs
            .destination_rules
            .iter()
            .map(|dr| {
                let ns = ns_of(&dr.metadata);
                DrInfo {
                    name: name_of(&dr.metadata),
                    host: resolve_short_name(&dr.spec.host, &ns, &domain),
                    subsets: dr
                        .spec
                        .subsets
                        .iter()
                        .filter_map(|v| v.get("name").and_then(|n| n.as_str()))
                        .map(String::from)
                        .collect(),
                    export: Export::for_destination_rule(
                        dr.spec.export_to.as_deref(),
                        &mesh.default_destination_rule_export_to,
                        &ns,
                    ),
                    has_selector: dr.spec.workload_selector.is_some(),
                    created: created(&dr.metadata),
                    namespace: ns,
                }
            })
            .collect();
        let mut drs_by_ns: HashMap<String, Vec<DrId>> = HashMap::default();
        for (id, d) in destination_rules.iter().enumerate() {
            drs_by_ns.entry(d.namespace.clone()).or_default().push(id);
        }
        for ids in drs_by_ns.values_mut() {
            ids.sort_by(|a, b| {
                let (a, b) = (&destination_rules[*a], &destination_rules[*b]);
                (a.created, &a.name).cmp(&(b.created, &b.name))
            });
        }

        MeshSnapshot {
            options,
            mesh,
            namespaces,
            workloads,
            pods,
            services,
            sidecars,
            virtual_services,
            destination_rules,
            service_entries,
            telemetries: crate::telemetry::telemetries(&inputs.telemetries),
            custom_authz: crate::telemetry::custom_authz(&inputs.authorization_policies),
            sidecars_by_ns,
            root_default,
            services_by_host,
            services_by_ns,
            services_by_addr,
            pods_by_ip,
            headless_by_ip,
            pods_by_name,
            workloads_by_ns,
            vss_by_ns,
            drs_by_ns,
        }
    }

    // === lookups ===

    pub fn namespace(&self, ns: &str) -> Option<&NamespaceInfo> {
        self.namespaces.get(ns)
    }

    pub fn workloads_in(&self, ns: &str) -> &[WorkloadId] {
        self.workloads_by_ns.get(ns).map_or(&[], Vec::as_slice)
    }

    pub fn sidecars_in(&self, ns: &str) -> &[SidecarId] {
        self.sidecars_by_ns.get(ns).map_or(&[], Vec::as_slice)
    }

    pub fn root_default(&self) -> Option<SidecarId> {
        self.root_default
    }

    /// What `meshConfig.serviceEntryVisibility` says of the ServiceEntries
    /// in `ns` (Istio 1.31+, when the mesh config has it).
    pub fn service_entry_visibility(&self, ns: &str) -> Option<Resolved> {
        let empty = Labels::new();
        let labels = self.namespaces.get(ns).map_or(&empty, |n| &n.labels);
        visibility::resolve(
            self.mesh.service_entry_visibility.as_ref(),
            self.options.istio,
            labels,
        )
    }

    pub fn services_named(&self, hostname: &str) -> &[SvcId] {
        self.services_by_host
            .get(hostname)
            .map_or(&[], Vec::as_slice)
    }

    pub fn services_in(&self, ns: &str) -> &[SvcId] {
        self.services_by_ns.get(ns).map_or(&[], Vec::as_slice)
    }

    pub fn services_at(&self, ip: &IpAddr) -> &[SvcId] {
        self.services_by_addr.get(ip).map_or(&[], Vec::as_slice)
    }

    /// Headless Services whose EndpointSlices list `ip`.
    pub fn headless_services_at(&self, ip: &IpAddr) -> &[SvcId] {
        self.headless_by_ip.get(ip).map_or(&[], Vec::as_slice)
    }

    pub fn pods_at(&self, ip: &IpAddr) -> &[PodId] {
        self.pods_by_ip.get(ip).map_or(&[], Vec::as_slice)
    }

    pub fn pods_named(&self, name: &str) -> &[PodId] {
        self.pods_by_name.get(name).map_or(&[], Vec::as_slice)
    }

    pub fn vss_in(&self, ns: &str) -> &[VsId] {
        self.vss_by_ns.get(ns).map_or(&[], Vec::as_slice)
    }

    pub fn drs_in(&self, ns: &str) -> &[DrId] {
        self.drs_by_ns.get(ns).map_or(&[], Vec::as_slice)
    }

    pub fn find_pod(&self, ns: &str, name: &str) -> Option<PodId> {
        self.pods_named(name)
            .iter()
            .copied()
            .find(|p| self.pods[*p].namespace == ns)
    }

    pub fn find_workload(&self, kind: &WorkloadKind, ns: &str, name: &str) -> Option<WorkloadId> {
        self.workloads_in(ns).iter().copied().find(|w| {
            let w = &self.workloads[*w];
            &w.kind == kind && w.name == name
        })
    }

    /// The labels a workload's proxies present to Sidecar selection.
    pub fn workload_labels(&self, w: WorkloadId) -> &Labels {
        let wl = &self.workloads[w];
        match wl.pods.first() {
            Some(p) => &self.pods[*p].labels,
            None => &wl.labels,
        }
    }

    /// Workloads that run an Envoy sidecar and so need a Sidecar scope.
    pub fn sidecar_workloads(&self) -> impl Iterator<Item = WorkloadId> + '_ {
        (0..self.workloads.len()).filter(|w| self.workloads[*w].injection.sidecar)
    }
}

fn service_export(meta: &ObjectMeta, mesh: &MeshConfig, ns: &str) -> Export {
    let ann: Option<Vec<String>> = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get("networking.istio.io/exportTo"))
        .map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    Export::for_service(ann.as_deref(), &mesh.default_service_export_to, ns)
}

fn count_selected(
    selector: &BTreeMap<String, String>,
    ns: &str,
    pods: &[PodInfo],
    pods_by_ns: &HashMap<&str, Vec<PodId>>,
) -> u32 {
    if selector.is_empty() {
        return 0;
    }
    pods_by_ns
        .get(ns)
        .map(|ids| {
            ids.iter()
                .filter(|p| selector_matches(selector, &pods[**p].labels))
                .count() as u32
        })
        .unwrap_or(0)
}

fn kube_service(
    s: &Service,
    mesh: &MeshConfig,
    domain: &str,
    pods: &[PodInfo],
    pods_by_ns: &HashMap<&str, Vec<PodId>>,
) -> ServiceInfo {
    let ns = ns_of(&s.metadata);
    let name = name_of(&s.metadata);
    let spec = s.spec.clone().unwrap_or_default();
    let headless = spec.cluster_ip.as_deref() == Some("None");
    let external = spec.type_.as_deref() == Some("ExternalName");
    let mut addresses: Vec<IpAddr> = spec
        .cluster_ips
        .iter()
        .flatten()
        .filter_map(|a| a.parse().ok())
        .collect();
    if let Some(a) = spec.cluster_ip.as_deref().and_then(|a| a.parse().ok()) {
        if !addresses.contains(&a) {
            addresses.push(a);
        }
    }
    let ports = spec
        .ports
        .iter()
        .flatten()
        .map(|p| PortInfo {
            number: p.port as u32,
            protocol: if p.protocol.as_deref() == Some("UDP") {
                Protocol::Udp
            } else {
                Protocol::detect(p.app_protocol.as_deref(), p.name.as_deref())
            },
            target_port: match &p.target_port {
                Some(IntOrString::Int(n)) if *n > 0 => *n as u32,
                _ => p.port as u32,
            },
        })
        .collect();
    let endpoints = spec
        .selector
        .as_ref()
        .map(|sel| count_selected(sel, &ns, pods, pods_by_ns))
        .unwrap_or(0);
    ServiceInfo {
        kind: SvcKind::Kube,
        hostname: format!("{name}.{ns}.svc.{domain}"),
        export: service_export(&s.metadata, mesh, &ns),
        created: created(&s.metadata),
        addresses,
        resolution: if external {
            Resolution::Dns
        } else if headless {
            Resolution::Passthrough
        } else {
            Resolution::Eds
        },
        endpoints,
        mesh_defined_name: false,
        ports,
        selector: spec
            .selector
            .filter(|s| !s.is_empty())
            .map(|s| s.into_iter().collect()),
        name,
        namespace: ns,
        order: 0,
    }
}

fn entry_services<'a>(
    se: &'a ServiceEntry,
    mesh: &'a MeshConfig,
    pods: &'a [PodInfo],
    pods_by_ns: &'a HashMap<&str, Vec<PodId>>,
) -> impl Iterator<Item = ServiceInfo> + 'a {
    let ns = ns_of(&se.metadata);
    let name = name_of(&se.metadata);
    let export = Export::for_service(
        se.spec.export_to.as_deref(),
        &mesh.default_service_export_to,
        &ns,
    );
    let resolution = match se.spec.resolution.as_deref() {
        Some("DNS") => Resolution::Dns,
        Some("DNS_ROUND_ROBIN") => Resolution::DnsRoundRobin,
        Some("STATIC") => Resolution::Eds,
        _ => Resolution::Passthrough,
    };
    let addresses: Vec<IpAddr> = se
        .spec
        .addresses
        .iter()
        .filter_map(|a| a.split('/').next().and_then(|a| a.parse().ok()))
        .collect();
    let ports: Vec<PortInfo> = se
        .spec
        .ports
        .iter()
        .map(|p| PortInfo {
            number: p.number,
            protocol: if p.protocol.as_deref() == Some("UDP") {
                Protocol::Udp
            } else {
                Protocol::detect(p.protocol.as_deref(), p.name.as_deref())
            },
            target_port: 0,
        })
        .collect();
    let endpoints = match &se.spec.workload_selector {
        Some(sel) => count_selected(&sel.labels, &ns, pods, pods_by_ns),
        None => se.spec.endpoints.len().max(1) as u32,
    };
    let mesh_defined_name = se.spec.workload_selector.is_some()
        || resolution == Resolution::Eds
        || (resolution != Resolution::Passthrough && !se.spec.endpoints.is_empty());
    let created = created(&se.metadata);
    se.spec.hosts.iter().map(move |h| ServiceInfo {
        kind: SvcKind::Entry,
        name: name.clone(),
        namespace: ns.clone(),
        hostname: h.clone(),
        ports: ports.clone(),
        export: export.clone(),
        created,
        addresses: addresses.clone(),
        resolution,
        endpoints,
        mesh_defined_name,
        selector: None,
        order: 0,
    })
}

/// The listeners istiod builds from a Sidecar's egress (invalid hosts
/// dropped).
pub fn sidecar_listeners(sc: &Sidecar, options: &Options) -> Vec<Listener> {
    sidecar_info(sc, options).listeners
}

fn sidecar_info(sc: &Sidecar, options: &Options) -> SidecarInfo {
    let mut invalid_hosts = Vec::new();
    let listeners = sc
        .spec
        .egress
        .iter()
        .map(|l| Listener {
            port: l
                .port
                .as_ref()
                .and_then(|p| p.number)
                .filter(|n| *n != 0)
                .filter(|_| {
                    l.port.as_ref().and_then(|p| p.protocol.as_deref()) != Some("HTTP_PROXY")
                }),
            protocol: l
                .port
                .as_ref()
                .and_then(|p| p.protocol.as_deref())
                .filter(|p| !p.is_empty() && *p != "HTTP_PROXY")
                .map(|p| Protocol::detect(Some(p), None)),
            hosts: l
                .hosts
                .iter()
                .filter_map(|h| match HostEntry::parse(h, options.istio) {
                    Ok(e) => Some(e),
                    Err(e) => {
                        invalid_hosts.push(e);
                        None
                    }
                })
                .collect(),
        })
        .collect();
    SidecarInfo {
        name: name_of(&sc.metadata),
        namespace: ns_of(&sc.metadata),
        created: created(&sc.metadata),
        selector: sc.spec.workload_selector.as_ref().map(|s| s.labels.clone()),
        listeners,
        invalid_hosts,
        managed: sc
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(MANAGED_BY_LABEL))
            .map(String::as_str)
            == Some(MANAGED_BY_VALUE),
        object: sc.clone(),
    }
}

fn vs_info(vs: &VirtualService, mesh: &MeshConfig, domain: &str) -> VsInfo {
    let ns = ns_of(&vs.metadata);
    let mut dests = Vec::new();
    let mut push = |d: &crate::istio::Destination, src: &[String]| {
        if d.host.is_empty() {
            return;
        }
        dests.push(VsDest {
            host: resolve_short_name(&d.host, &ns, domain),
            port: d.port.as_ref().and_then(|p| p.number),
            source_namespaces: src.to_vec(),
        });
    };
    let delegates = vs
        .spec
        .http
        .iter()
        .filter_map(|r| r.delegate.as_ref())
        .filter(|d| !d.name.is_empty())
        .map(|d| {
            let dns = d.namespace.clone().filter(|n| !n.is_empty());
            (dns.unwrap_or_else(|| ns.clone()), d.name.clone())
        })
        .collect();
    for r in &vs.spec.http {
        // A route applies to a source namespace only if one of its matches
        // allows it; a match without sourceNamespace allows every one.
        let src: Vec<String> = if r.matches.iter().any(|m| m.source_namespace.is_none()) {
            Vec::new()
        } else {
            r.matches
                .iter()
                .filter_map(|m| m.source_namespace.clone())
                .collect()
        };
        for d in r.route.iter().filter_map(|d| d.destination.as_ref()) {
            push(d, &src);
        }
        if let Some(m) = &r.mirror {
            push(m, &src);
        }
        for d in r.mirrors.iter().filter_map(|d| d.destination.as_ref()) {
            push(d, &src);
        }
    }
    for r in vs.spec.tcp.iter().chain(vs.spec.tls.iter()) {
        for d in r.route.iter().filter_map(|d| d.destination.as_ref()) {
            push(d, &[]);
        }
    }
    VsInfo {
        name: name_of(&vs.metadata),
        hosts: vs
            .spec
            .hosts
            .iter()
            .map(|h| resolve_short_name(h, &ns, domain))
            .collect(),
        mesh_bound: vs.spec.gateways.is_empty() || vs.spec.gateways.iter().any(|g| g == "mesh"),
        export: Export::for_virtual_service(
            vs.spec.export_to.as_deref(),
            &mesh.default_virtual_service_export_to,
            &ns,
        ),
        dests,
        delegates,
        created: created(&vs.metadata),
        namespace: ns,
    }
}
