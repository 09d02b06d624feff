//! What a snapshot holds: one record per workload, pod, service (a
//! Kubernetes Service or one ServiceEntry host), Sidecar, VirtualService,
//! DestinationRule and ServiceEntry, and the ids that index them.

use std::fmt;
use std::net::IpAddr;

use crate::error::Error;
use crate::exempt::Exemption;
use crate::host::{Export, HostEntry, NsSel};
use crate::inject::Injection;
use crate::istio::Sidecar;
use crate::labels::Labels;
use crate::meta::Created;

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

/// Whether an object's labels mark it as meshscope's: the managed-by
/// label with meshscope's value. Anything else belongs to its owner, and
/// `apply` never writes it.
pub fn managed_by_meshscope(labels: Option<&Labels>) -> bool {
    labels
        .and_then(|l| l.get(MANAGED_BY_LABEL))
        .map(String::as_str)
        == Some(MANAGED_BY_VALUE)
}

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
    /// The gateway type its template's proxy arguments name.
    pub template_proxy_gateway: Option<crate::inject::Gateway>,
    /// The inbound ports istiod gives this workload's proxies: the distinct
    /// targetPorts of the Kubernetes Services that select it.
    pub inbound: Inbound,
    pub created: Created,
    pub injection: Injection,
    /// How many of its pods run the proxy (a sidecar, or a gateway's).
    pub proxy_pods: usize,
    /// `meshscope.io/exempt` on the workload object itself (not its pod
    /// template): the webhook admits it unchecked, and `audit` reports its
    /// findings as exempt.
    pub exemption: Exemption,
}

/// A proxy's inbound ports, by protocol (each gets an inbound cluster and
/// a filter chain on virtualInbound).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inbound {
    pub http: u32,
    pub tcp: u32,
    /// Ports whose protocol istiod sniffs (an HTTP and a TCP chain each).
    pub sniffed: u32,
}

impl Inbound {
    pub fn ports(self) -> u32 {
        self.http + self.tcp + self.sniffed
    }
}

impl Workload {
    pub fn key(&self) -> String {
        format!("{}/{}/{}", self.kind, self.namespace, self.name)
    }

    /// How many proxies this workload runs: its pods that run one, or
    /// before any pod exists, the replicas its template asks for.
    pub fn proxies(&self) -> usize {
        if self.pods.is_empty() {
            self.replicas as usize
        } else {
            self.proxy_pods
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
    /// The gateway type its proxy's arguments name.
    pub proxy_gateway: Option<crate::inject::Gateway>,
    pub host_network: bool,
    /// It exists ([`crate::inject::PodFacts::admitted`]).
    pub admitted: bool,
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
    /// Whether a port's protocol name (as [`Protocol::parse`] and
    /// [`Protocol::of_service_port`] read it) is TLS or HTTPS.
    pub fn tls_name(name: &str) -> bool {
        name.eq_ignore_ascii_case("tls") || name.eq_ignore_ascii_case("https")
    }

    /// A protocol name as istiod parses it: the whole name, any case
    /// (`protocol.Parse`, `pkg/config/protocol/instance.go`, 1.31). A
    /// ServiceEntry port's and a Sidecar listener's protocol.
    pub fn parse(name: &str) -> Self {
        match name.to_ascii_lowercase().as_str() {
            "http" | "http2" | "grpc" | "grpc-web" | "http_proxy" => Protocol::Http,
            "udp" => Protocol::Udp,
            "tcp" | "tls" | "https" | "mongo" | "redis" | "mysql" => Protocol::Tcp,
            _ => Protocol::Auto,
        }
    }

    /// A Kubernetes Service port's protocol as istiod reads it
    /// (`ConvertProtocol`, `pkg/config/kube/conversion.go`, 1.31): its
    /// appProtocol when set, else its name, up to the first `-`
    /// (`grpc-web` whole); a name of no protocol on the well-known ports
    /// 25, 53, 3306 and 27017 is TCP, elsewhere sniffed.
    pub fn of_service_port(port: u32, name: Option<&str>, app_protocol: Option<&str>) -> Self {
        let name = service_port_name(name, app_protocol);
        match name {
            "kubernetes.io/h2c" | "kubernetes.io/ws" => return Protocol::Http,
            "kubernetes.io/wss" => return Protocol::Tcp,
            _ => {}
        }
        let p = if name
            .get(..8)
            .is_some_and(|h| h.eq_ignore_ascii_case("grpc-web"))
        {
            Protocol::Http
        } else {
            Protocol::parse(name_prefix(name))
        };
        match p {
            Protocol::Auto if matches!(port, 25 | 53 | 3306 | 27017) => Protocol::Tcp,
            p => p,
        }
    }

    /// Whether a Kubernetes Service port is TLS or HTTPS, read from the
    /// same name as [`Protocol::of_service_port`].
    pub fn service_port_is_tls(name: Option<&str>, app_protocol: Option<&str>) -> bool {
        Protocol::tls_name(name_prefix(service_port_name(name, app_protocol)))
    }
}

/// The name istiod reads a Service port's protocol from: its appProtocol
/// when set, else its name.
fn service_port_name<'a>(name: Option<&'a str>, app_protocol: Option<&'a str>) -> &'a str {
    app_protocol.or(name).unwrap_or("")
}

/// A port name up to its first `-`.
fn name_prefix(name: &str) -> &str {
    name.split('-').next().unwrap_or("")
}

#[derive(Clone, Debug)]
pub struct PortInfo {
    pub number: u32,
    pub protocol: Protocol,
    /// A TLS or HTTPS port (istiod's `Protocol.IsTLS`): its outbound
    /// listener gets TLS filter chains (SNI, TLS routes), never TCP routes
    /// (`buildSidecarOutboundTCPListenerOpts`,
    /// `pilot/pkg/networking/core/tls.go`, istio 1.31).
    pub tls: bool,
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
    /// An `ExternalName` Service from 1.21: an alias of the hostname it
    /// names, with no cluster, listener or route of its own
    /// ([`crate::version::IstioVersion::external_name_alias`]).
    Alias,
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
    /// Who istiod's `IsServiceVisible` lets see it: `export` without the
    /// hiding of a `~` listed next to namespaces (`~,app` is visible to
    /// `app` here). istiod 1.31 checks this on its exact-host path and
    /// for VirtualService destinations (`pilot/pkg/model/push_context.go`,
    /// release-1.31).
    pub listed: Export,
    /// A ServiceEntry's own labels (`metadata.labels`) and its `exportTo`
    /// as written, which must agree for istiod to merge two entries of one
    /// hostname (`["."]` and the own namespace's name do not).
    pub labels: Labels,
    pub export_list: Vec<String>,
    /// The exportTo its owner wrote (a Service's `networking.istio.io/exportTo`
    /// annotation split on commas, a ServiceEntry's `spec.exportTo`), `None`
    /// when unset or empty: what `recommend --exports` leaves alone.
    pub declared: Option<Vec<String>>,
    /// meshscope wrote that exportTo ([`crate::meta::export_to_is_ours`]).
    pub declared_ours: bool,
    /// Its own `istio.io/use-waypoint` ([`crate::meta::use_waypoint`]);
    /// `Some(None)` too for a waypoint's or east-west gateway's own
    /// Service (labelled `gateway.istio.io/managed`), which istiod never
    /// binds to a waypoint (`fetchWaypointForService`,
    /// `pilot/pkg/serviceregistry/ambient/waypoints.go`, 1.31).
    pub use_waypoint: Option<Option<crate::meta::WaypointRef>>,
    /// A ServiceEntry host of location `MESH_EXTERNAL` (the default).
    pub mesh_external: bool,
    pub created: Created,
    pub addresses: Vec<IpAddr>,
    pub resolution: Resolution,
    pub endpoints: u32,
    /// For a passthrough service with no address of its own (a headless
    /// Service, a `resolution: NONE` ServiceEntry without addresses): its
    /// endpoints' addresses, `None` for one that is not an IP. istiod gives
    /// each an outbound listener on the TCP and sniffed ports
    /// ([`crate::listeners`]). Empty for every other service.
    pub passthrough_endpoints: Vec<Option<IpAddr>>,
    /// The hostname is a name only the mesh defines: a ServiceEntry whose
    /// endpoints are listed or selected apart from the host (`STATIC`, or
    /// `DNS` with endpoints, or a workloadSelector). Cluster DNS does not
    /// know it; with DNS capture only the proxy's name table answers it.
    pub mesh_defined_name: bool,
    /// A Kubernetes Service's pod selector (`None` for ServiceEntries and
    /// selector-less Services).
    pub selector: Option<Labels>,
    /// A ServiceEntry's `workloadSelector` (`None` for Kubernetes Services
    /// and entries without one): the pods of its namespace that serve it.
    pub workload_selector: Option<Labels>,
    /// For a `DNS` or `DNS_ROUND_ROBIN` ServiceEntry, the labels of each
    /// endpoint its clusters are built from: the listed endpoints', else
    /// the selected pods', else one unlabelled endpoint per host. istiod
    /// drops such a cluster when no endpoint is left, so a subset whose
    /// labels no endpoint has gets no cluster (`buildCluster` and
    /// `buildSubsetCluster`, `pilot/pkg/networking/core/cluster_builder.go`,
    /// 1.31). `None` for every other service.
    pub dns_endpoint_labels: Option<Vec<Labels>>,
    /// For a wildcard-host `DYNAMIC_DNS` ServiceEntry, the ports istiod
    /// builds a dynamic forward proxy cluster on (HTTP, HTTP2, gRPC and TLS
    /// ones), with no subset clusters (`buildOutboundClusters`,
    /// `pilot/pkg/networking/core/cluster.go`, 1.31). `None` otherwise.
    pub dfp_ports: Option<Vec<u32>>,
    /// Rank among services: oldest first, namespace-specific exports first.
    pub order: usize,
}

#[derive(Clone, Debug)]
pub struct Listener {
    pub port: Option<u32>,
    /// The protocol a port-specific listener declares: istiod builds the
    /// listener for its services with it instead of the services' own.
    pub protocol: Option<Protocol>,
    /// It declares TLS or HTTPS ([`PortInfo::tls`]).
    pub tls: bool,
    pub hosts: Vec<HostEntry>,
}

impl Listener {
    pub fn everything() -> Self {
        Self {
            port: None,
            protocol: None,
            tls: false,
            hosts: vec![HostEntry {
                ns: NsSel::Any,
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
    /// The gateways it binds to other than `mesh`, as `namespace/name` (a
    /// short name is the VirtualService's namespace).
    pub gateways: Vec<String>,
    pub export: Export,
    /// `spec.exportTo` as written, `None` when unset or empty.
    pub declared: Option<Vec<String>>,
    /// meshscope wrote that exportTo ([`crate::meta::export_to_is_ours`]).
    pub declared_ours: bool,
    pub dests: Vec<VsDest>,
    /// The ports its `tcp` and `tls` routes match (`None`: a route
    /// matching any port); empty when it has none.
    pub stream_ports: Vec<Option<u32>>,
    /// The VirtualServices its HTTP routes delegate to, as (namespace, name).
    pub delegates: Vec<(String, String)>,
    pub created: Created,
    /// The Gateway API route istiod made this VirtualService of, when it is
    /// one: it then has gateway semantics (`UseGatewaySemantics`,
    /// `pilot/pkg/model/virtualservice.go`, istio 1.31) and no exportTo of
    /// its own to write.
    pub route: Option<RouteOrigin>,
}

/// A Gateway API route behind a [`VsInfo`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteOrigin {
    pub kind: crate::gateway_api::RouteKind,
    /// The route's own name (the VirtualService's is istiod's
    /// `<name>~<n>~gateway`).
    pub name: String,
    /// The parent's `port`, when the route attaches to one port of it: its
    /// rules then match that port only.
    pub port: Option<u32>,
    /// For a route bound to a Gateway: the ports of the Gateway's
    /// listeners that admit it ([`crate::gateway_listeners::Admitted`]).
    pub listener_ports: Vec<u32>,
    /// The backends istiod refuses this route, as `namespace/name`: a
    /// route bound to a Gateway may send requests to another namespace
    /// only where a ReferenceGrant permits it
    /// ([`crate::gateway_api::backend_allowed`]); they are not among its
    /// destinations.
    pub refused: Vec<String>,
    /// Per rule, in order: whether it matches every request, and the
    /// clusters its backends name.
    pub rules: Vec<RuleClusters>,
}

/// One rule of a route: [`crate::gateway_api::RouteRule::catch_all`], and
/// the clusters its (permitted, weighted) backends name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleClusters {
    pub catch_all: bool,
    pub clusters: Vec<String>,
}

impl VsInfo {
    /// Whether istiod gives it gateway semantics: a route of the Gateway
    /// API.
    pub fn gateway_semantics(&self) -> bool {
        self.route.is_some()
    }

    /// Whether it comes from a Gateway API HTTP or gRPC route, whose rules
    /// istiod sends as HTTP routes (RDS); TCP and TLS routes sit in the
    /// listeners' filter chains.
    pub fn http_route(&self) -> bool {
        self.route.as_ref().is_some_and(|r| {
            matches!(
                r.kind,
                crate::gateway_api::RouteKind::Http | crate::gateway_api::RouteKind::Grpc
            )
        })
    }

    /// How messages name it: `VirtualService ns/name`, or the route it
    /// comes from (`HTTPRoute ns/name`).
    pub fn label(&self) -> String {
        match &self.route {
            Some(r) => format!("{} {}/{}", r.kind.as_str(), self.namespace, r.name),
            None => format!("VirtualService {}/{}", self.namespace, self.name),
        }
    }
}

#[derive(Clone, Debug)]
pub struct DrInfo {
    pub name: String,
    pub namespace: String,
    pub host: String,
    /// Subset names, in the DestinationRule's order.
    pub subsets: Vec<String>,
    /// Each subset's `labels`, in the same order.
    pub subset_labels: Vec<Labels>,
    pub export: Export,
    /// `exportTo` as written (trimmed of nothing: istiod keeps `.` as
    /// `.`); `snapshot/destination_rules.rs` files the rule by it.
    pub export_to: Vec<String>,
    /// `workloadSelector.labels`.
    pub selector: Option<Labels>,
    /// `spec.exportTo` as written, `None` when unset or empty.
    pub declared: Option<Vec<String>>,
    /// meshscope wrote that exportTo ([`crate::meta::export_to_is_ours`]).
    pub declared_ours: bool,
    pub created: Created,
}

#[derive(Clone, Debug)]
pub struct SeInfo {
    pub name: String,
    pub namespace: String,
    pub resolution: String,
    pub export_to: Option<Vec<String>>,
    pub hosts: Vec<String>,
    /// meshscope wrote its exportTo ([`crate::meta::export_to_is_ours`]).
    pub declared_ours: bool,
    /// `spec.addresses` as written (CIDRs keep their prefix length).
    pub addresses: Vec<String>,
    /// The ports a CIDR address makes a listener-wide catch-all on: those
    /// with a TCP-like or unset protocol (not HTTP, not TLS/HTTPS, which
    /// match by Host or SNI).
    pub catch_all_ports: Vec<u32>,
    pub annotations: Labels,
}

/// A networking.istio.io Gateway and the namespaces of the pods it binds
/// (its `selector` over every namespace: istiod's default,
/// `PILOT_SCOPE_GATEWAY_TO_NAMESPACE=false`).
#[derive(Clone, Debug)]
pub struct GatewayInfo {
    pub name: String,
    pub namespace: String,
    pub selector: Labels,
    pub pod_namespaces: std::collections::BTreeSet<String>,
    /// Its servers (an Istio Gateway's) or listeners (a Gateway API one's),
    /// as istiod turns them into listeners ([`crate::gateway_servers`]).
    pub servers: Vec<ServerInfo>,
    /// An Istio Gateway with a server in `tls.mode: AUTO_PASSTHROUGH`: its
    /// pods get an SNI-DNAT cluster per port of every Service they see.
    pub auto_passthrough: bool,
    /// A Gateway API Gateway (`gateway.networking.k8s.io`), not istio's.
    pub kube: bool,
    /// The controller of a Gateway API Gateway's class when it is not one
    /// istiod configures ([`crate::gateway_api::foreign_controller`]): no
    /// route binds to it and no proxy of the mesh serves it.
    pub foreign: Option<String>,
}

/// A Gateway API Gateway istiod can use as a waypoint: one whose status
/// has addresses (or that has no status in the input)
/// (`gatewayToWaypointTransform`,
/// `pilot/pkg/serviceregistry/ambient/waypoints.go`, istio 1.31).
#[derive(Clone, Debug)]
pub struct WaypointInfo {
    pub name: String,
    pub namespace: String,
    /// The traffic it takes (`istio.io/waypoint-for` on the Gateway, else
    /// on its GatewayClass, else `service`): only `service` and `all`
    /// bind services.
    pub traffic: String,
    /// The listener whose `allowedRoutes` says which namespaces' objects
    /// may use it: the HBONE one on 15008 (`makeAllowedRoutes`); `None`
    /// without one (its own namespace only).
    pub hbone: Option<crate::gateway_api::Listener>,
}

/// One server of a Gateway (a Gateway API listener becomes one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    pub port: u32,
    pub name: String,
    /// As written (`HTTP`, `HTTPS`, `TLS`, `TCP`, `GRPC`, `HTTP2`).
    pub protocol: String,
    /// `tls.mode` as written (`SIMPLE`, `PASSTHROUGH`, `AUTO_PASSTHROUGH`;
    /// a Gateway API listener's `Terminate` or `Passthrough`).
    pub tls_mode: Option<String>,
    /// An Istio Gateway server's hosts, as written (`[namespace/]host`);
    /// empty for a Gateway API listener.
    pub hosts: Vec<String>,
}

impl ServerInfo {
    /// Whether istiod builds HTTP routes for it: plain HTTP (HTTP, HTTP2,
    /// gRPC), or HTTPS it terminates (`gatewayRDSRouteName`,
    /// `pilot/pkg/model/gateway.go`, istio 1.31).
    pub fn routes_http(&self) -> bool {
        self.plain_http() || self.terminated_https()
    }

    pub fn plain_http(&self) -> bool {
        matches!(
            self.protocol.to_ascii_uppercase().as_str(),
            "HTTP" | "HTTP2" | "GRPC" | "GRPC-WEB"
        )
    }

    /// HTTPS not passed through.
    pub fn terminated_https(&self) -> bool {
        let passthrough = matches!(
            self.tls_mode.as_deref(),
            Some("PASSTHROUGH" | "AUTO_PASSTHROUGH" | "Passthrough")
        );
        self.protocol.eq_ignore_ascii_case("HTTPS") && !passthrough
    }
}

/// An EnvoyFilter, as a gateway's clusters depend on it.
#[derive(Clone, Debug)]
pub struct EnvoyFilterInfo {
    pub name: String,
    pub namespace: String,
    /// `workloadSelector.labels`; `None` applies to every proxy of its
    /// namespace (of the mesh, in the root namespace).
    pub selector: Option<Labels>,
    /// The annotation's entries, `host` or `namespace/host`
    /// ([`crate::istio::REFERENCED_SERVICES_ANNOTATION`]).
    pub referenced_services: Vec<String>,
    /// The cluster names (`outbound|PORT|SUBSET|HOST`) its patches
    /// spell out anywhere, in Lua code too, sorted.
    pub named_clusters: Vec<String>,
}

impl GatewayInfo {
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}
