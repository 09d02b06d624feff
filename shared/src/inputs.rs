//! The raw Kubernetes objects a snapshot is built from.
//!
//! Objects arrive as JSON values (from manifests, `kubectl get -o yaml` dumps
//! or the API server) and are sorted by kind here; nothing else in the crate
//! deals with untyped input.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Deserialize;
use serde_json::Value;

use crate::error::Error;
use crate::gateway_api::{RouteKind, GATEWAY_API_GROUP};
use crate::istio::{
    AuthorizationPolicy, DestinationRule, EnvoyFilter, Gateway, ServiceEntry, Sidecar, Telemetry,
    VirtualService, NETWORKING_GROUP, SECURITY_GROUP, TELEMETRY_GROUP,
};

/// A Pod as the scope engine reads it: its metadata, its containers' names
/// and port counts, hostNetwork, its IPs and its containers' restart
/// counts. Everything else in a Pod is skipped while decoding: a typed
/// `PodSpec` with its containers takes kilobytes per pod even when almost
/// empty, which at 30k pods was most of the memory of an audit.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Pod {
    /// Without `managedFields` (see [`PodMeta`]).
    #[serde(default, deserialize_with = "pod_meta")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<PodSpec>,
    #[serde(default)]
    pub status: Option<PodStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub containers: Vec<Container>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub init_containers: Vec<Container>,
    #[serde(default)]
    pub host_network: Option<bool>,
    /// The ConfigMaps the pod mounts (`volumes[].configMap` and projected
    /// ones), for manifest hints; the volumes are not kept otherwise.
    #[serde(default, rename = "volumes", deserialize_with = "config_map_volumes")]
    pub config_map_volumes: Vec<String>,
}

/// A ConfigMap a container reads: all of it (`envFrom`), or one key
/// (`env[].valueFrom.configMapKeyRef`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigMapRef {
    pub name: String,
    pub key: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(from = "RawContainer")]
pub struct Container {
    /// Missing in some hand-written manifests (Istio's analyzer fixtures
    /// among them); read as empty, as the typed API objects do.
    pub name: String,
    /// How many ports the container declares (each becomes an inbound
    /// cluster); their contents are not read.
    pub ports: u32,
    /// The image, for the Istio version of `istio-proxy` and `discovery`.
    pub image: String,
    /// The value after `--domain` in the container's args, if any: the
    /// injected `istio-proxy` gets `$(POD_NAMESPACE).svc.<cluster domain>`,
    /// istiod's `discovery` the cluster domain itself.
    pub domain: Option<String>,
    /// The strings of `command`, `args` and `env[].value` that could name
    /// a host (see [`may_name_host`]), for manifest hints. The proxy's own
    /// container keeps none.
    pub hint_values: Vec<String>,
    /// The ConfigMaps its environment reads (`envFrom`, `valueFrom`).
    pub config_maps: Vec<ConfigMapRef>,
    /// `restartPolicy: Always`: an init container that is a native
    /// sidecar (see [`crate::inject::is_proxy`]).
    pub restart_always: bool,
    /// For `istio-proxy`, the gateway type its arguments name
    /// ([`crate::inject::Gateway::of_args`]).
    pub gateway: Option<crate::inject::Gateway>,
}

impl Container {
    /// Whether it is the injected proxy, as a container (`init` false) or
    /// an init container of a pod.
    pub fn is_proxy(&self, init: bool) -> bool {
        let policy = self.restart_always.then_some("Always");
        crate::inject::is_proxy(&self.name, init, policy)
    }
}

impl PodSpec {
    /// Whether the pod runs the injected proxy.
    pub fn has_proxy(&self) -> bool {
        self.containers.iter().any(|c| c.is_proxy(false))
            || self.init_containers.iter().any(|c| c.is_proxy(true))
    }

    /// The proxy container, if the pod runs one.
    pub fn proxy(&self) -> Option<&Container> {
        (self.containers.iter().find(|c| c.is_proxy(false)))
            .or_else(|| self.init_containers.iter().find(|c| c.is_proxy(true)))
    }

    /// The gateway type its proxy container's arguments name, if any.
    pub fn proxy_gateway(&self) -> Option<crate::inject::Gateway> {
        self.proxy().and_then(|c| c.gateway)
    }
}

/// Could this string of a pod template name a host? It has a letter (a
/// Service name starts with one) and is no longer than a config file
/// worth scanning. Only these are kept of a pod's environment, so that
/// 30k pods do not keep every flag and number they were started with.
pub fn may_name_host(s: &str) -> bool {
    s.len() <= 8192 && s.bytes().any(|b| b.is_ascii_alphabetic())
}

/// A container as written, before [`Container`] keeps what it reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawContainer {
    #[serde(default)]
    name: String,
    #[serde(default, deserialize_with = "port_count")]
    ports: u32,
    #[serde(default)]
    image: String,
    #[serde(default, deserialize_with = "null_as_empty")]
    args: Vec<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    command: Vec<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    env: Vec<RawEnv>,
    #[serde(default, deserialize_with = "null_as_empty")]
    env_from: Vec<RawEnvFrom>,
    #[serde(default)]
    restart_policy: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEnv {
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    value_from: Option<RawEnvSource>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEnvSource {
    #[serde(default)]
    config_map_key_ref: Option<RawKeyRef>,
}

#[derive(Deserialize)]
struct RawKeyRef {
    #[serde(default)]
    name: String,
    #[serde(default)]
    key: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEnvFrom {
    #[serde(default)]
    config_map_ref: Option<RawName>,
}

#[derive(Deserialize)]
struct RawName {
    #[serde(default)]
    name: String,
}

impl From<RawContainer> for Container {
    fn from(c: RawContainer) -> Self {
        let domain = domain_arg(&c.args);
        let mut hint_values = Vec::new();
        let mut config_maps = Vec::new();
        let mut gateway = None;
        if c.name == crate::inject::PROXY_CONTAINER {
            gateway = crate::inject::Gateway::of_args(&c.args);
        } else {
            let env = c.env.iter().filter_map(|e| e.value.clone());
            hint_values = (c.command.into_iter().chain(c.args).chain(env))
                .filter(|v| may_name_host(v))
                .collect();
            for e in c.env {
                if let Some(r) = e.value_from.and_then(|f| f.config_map_key_ref) {
                    config_maps.push(ConfigMapRef {
                        name: r.name,
                        key: Some(r.key),
                    });
                }
            }
            let from = c.env_from.into_iter().filter_map(|f| f.config_map_ref);
            config_maps.extend(from.map(|r| ConfigMapRef {
                name: r.name,
                key: None,
            }));
        }
        Container {
            restart_always: c.restart_policy.as_deref() == Some("Always"),
            name: c.name,
            ports: c.ports,
            image: c.image,
            domain,
            hint_values,
            config_maps,
            gateway,
        }
    }
}

fn domain_arg(args: &[String]) -> Option<String> {
    args.iter().enumerate().find_map(|(i, a)| {
        if let Some(v) = a.strip_prefix("--domain=") {
            return Some(v.to_string());
        }
        (a == "--domain")
            .then(|| args.get(i + 1).cloned())
            .flatten()
    })
}

/// The names of the ConfigMaps a pod's volumes mount, directly or through
/// a projected volume.
fn config_map_volumes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Volume {
        #[serde(default)]
        config_map: Option<RawName>,
        #[serde(default)]
        projected: Option<Projected>,
    }
    #[derive(Deserialize)]
    struct Projected {
        #[serde(default, deserialize_with = "null_as_empty")]
        sources: Vec<Source>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Source {
        #[serde(default)]
        config_map: Option<RawName>,
    }
    let volumes: Vec<Volume> = null_as_empty(d)?;
    let mut out = Vec::new();
    for v in volumes {
        out.extend(v.config_map.map(|n| n.name));
        let projected = v.projected.into_iter().flat_map(|p| p.sources);
        out.extend(projected.filter_map(|s| s.config_map).map(|n| n.name));
    }
    Ok(out)
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default, rename = "podIP")]
    pub pod_ip: Option<String>,
    #[serde(default, rename = "podIPs", deserialize_with = "null_as_empty")]
    pub pod_ips: Vec<PodIp>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub container_statuses: Vec<ContainerStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct PodIp {
    pub ip: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    pub name: String,
    #[serde(default)]
    pub restart_count: i32,
}

/// A Pod's metadata as it is read: all of it but `managedFields`, which
/// nothing reads for a pod and which is skipped while decoding. The API
/// server returns them with every pod, a tree of every field each manager
/// set (the whole spec, for a pod a controller created or one applied
/// server-side); decoded, that tree took more memory than the rest of the
/// pod, most of a live audit's peak at 20k pods.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct PodMeta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

fn pod_meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = Option::<PodMeta>::deserialize(d)?.unwrap_or_default();
    Ok(ObjectMeta {
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        generate_name: m.generate_name,
        generation: m.generation,
        labels: m.labels,
        managed_fields: None,
        name: m.name,
        namespace: m.namespace,
        owner_references: m.owner_references,
        resource_version: m.resource_version,
        self_link: m.self_link,
        uid: m.uid,
    })
}

/// `null` (a YAML key with no value) reads as an empty list, as it does for
/// the API server.
fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

fn port_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let ports: Option<Vec<serde::de::IgnoredAny>> = Option::deserialize(d)?;
    Ok(ports.map_or(0, |p| p.len() as u32))
}

impl Pod {
    /// Drops what only manifest hints read.
    pub fn drop_hints(&mut self) {
        if let Some(spec) = &mut self.spec {
            spec.config_map_volumes = Vec::new();
            for c in spec.containers.iter_mut().chain(&mut spec.init_containers) {
                c.hint_values = Vec::new();
                c.config_maps = Vec::new();
            }
        }
    }
}

/// The Kubernetes API's name for [`Pod`], so a client can list pods straight
/// into it.
impl k8s_openapi::Resource for Pod {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Pod";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for Pod {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A `discovery.k8s.io/v1` EndpointSlice, as far as scoping reads it: the
/// Service it belongs to (label `kubernetes.io/service-name`) and its
/// endpoints' addresses. It maps a pod IP of a headless Service back to the
/// Service when the pod itself was not read (another namespace, under
/// `-n`).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct EndpointSlice {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub endpoints: Vec<SliceEndpoint>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct SliceEndpoint {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub addresses: Vec<String>,
}

/// The label naming an EndpointSlice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The label the EndpointSlice controller puts on a headless Service's
/// slices.
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";

pub const DISCOVERY_GROUP: &str = "discovery.k8s.io";

impl k8s_openapi::Resource for EndpointSlice {
    const API_VERSION: &'static str = "discovery.k8s.io/v1";
    const GROUP: &'static str = "discovery.k8s.io";
    const KIND: &'static str = "EndpointSlice";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "endpointslices";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for EndpointSlice {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Every object kind the scope engine reads.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    pub namespaces: Vec<Namespace>,
    pub pods: Vec<Pod>,
    pub deployments: Vec<Deployment>,
    pub statefulsets: Vec<StatefulSet>,
    pub daemonsets: Vec<DaemonSet>,
    pub replicasets: Vec<ReplicaSet>,
    pub jobs: Vec<Job>,
    pub cronjobs: Vec<CronJob>,
    pub services: Vec<Service>,
    pub service_entries: Vec<ServiceEntry>,
    pub sidecars: Vec<Sidecar>,
    pub virtual_services: Vec<VirtualService>,
    pub destination_rules: Vec<DestinationRule>,
    /// `networking.istio.io` Gateways (which namespaces' gateway pods a
    /// VirtualService's `gateways` reach).
    pub gateways: Vec<Gateway>,
    /// `networking.istio.io` EnvoyFilters (the Services a gateway keeps
    /// for them with `PILOT_FILTER_GATEWAY_CLUSTER_CONFIG`).
    pub envoy_filters: Vec<EnvoyFilter>,
    /// `telemetry.istio.io` Telemetries (which extension providers apply).
    pub telemetries: Vec<Telemetry>,
    /// `security.istio.io` AuthorizationPolicies (CUSTOM ones name an
    /// ext_authz provider).
    pub authorization_policies: Vec<AuthorizationPolicy>,
    /// Gateway API routes (HTTPRoute, GRPCRoute, TCPRoute, TLSRoute).
    pub routes: Vec<crate::gateway_api::Route>,
    /// Gateway API ReferenceGrants: which routes bound to a Gateway may
    /// send requests to another namespace's Services.
    pub reference_grants: Vec<crate::gateway_api::ReferenceGrant>,
    /// Gateway API Gateways (istio's `gateways` are [`Self::gateways`]).
    pub kube_gateways: Vec<crate::gateway_api::Gateway>,
    /// Gateway API GatewayClasses: which controller each class's Gateways
    /// belong to.
    pub gateway_classes: Vec<crate::gateway_api::GatewayClass>,
    /// ConfigMaps named `istio` (the mesh config candidates).
    pub mesh_config_maps: Vec<ConfigMap>,
    /// EndpointSlices (only those of headless Services are used).
    pub endpoint_slices: Vec<EndpointSlice>,
    /// Whether what manifest hints read is kept (set before adding
    /// objects): ConfigMaps other than `istio`, and the strings of pods'
    /// containers that could name a host. Off, both are dropped as they
    /// are read, so that pods keep no more than before (a pod with a few
    /// host-like env values keeps some 600 bytes of them).
    pub manifest_hints: bool,
    /// Those ConfigMaps, without their `binaryData`, when
    /// [`Inputs::manifest_hints`] is set.
    pub config_maps: Vec<ConfigMap>,
    /// Objects of kinds scoping does not read, by how they were named
    /// (`Secret`, a typo such as `Deploymnet`, or a read kind under
    /// another API group), with counts.
    pub skipped: BTreeMap<String, usize>,
    /// How many of those look like mistakes: a typo of a kind read, or a
    /// kind read under another API group.
    pub skipped_mistakes: usize,
}

/// Which of the kinds the findings depend on an input held: what an
/// offline command can tell of a `kubectl get` that left some out
/// ([`crate::notes::missing_kinds`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InputKinds {
    /// Pods or controllers of any kind.
    pub workloads: bool,
    pub namespaces: bool,
    pub services: bool,
    pub service_entries: bool,
    pub sidecars: bool,
    pub virtual_services: bool,
    /// Telemetries or AuthorizationPolicies.
    pub telemetry_or_authz: bool,
    /// A mesh config: ConfigMap `istio` with key `mesh`, or `--mesh-config`.
    pub mesh_config: bool,
}

/// The kinds the findings read, as `kubectl get` names them, in one list
/// to dump them with (docs/usage.md, section "From files", shows the command).
pub const DUMP_KINDS: &str = "namespaces,pods,deployments,replicasets,statefulsets,daemonsets,jobs,cronjobs,services,endpointslices,serviceentries,sidecars,virtualservices,destinationrules,gateways.networking.istio.io,envoyfilters,telemetries,authorizationpolicies,configmaps";

/// The kinds [`Inputs::add`] reads, and the Istio API group of each
/// Istio kind (`None`: a Kubernetes kind).
const READ_KINDS: &[(&str, Option<&str>)] = &[
    ("Namespace", None),
    ("Pod", None),
    ("Deployment", None),
    ("StatefulSet", None),
    ("DaemonSet", None),
    ("ReplicaSet", None),
    ("Job", None),
    ("CronJob", None),
    ("Service", None),
    ("ConfigMap", None),
    ("ServiceEntry", Some(NETWORKING_GROUP)),
    ("Sidecar", Some(NETWORKING_GROUP)),
    ("VirtualService", Some(NETWORKING_GROUP)),
    ("DestinationRule", Some(NETWORKING_GROUP)),
    ("Gateway", Some(NETWORKING_GROUP)),
    ("EnvoyFilter", Some(NETWORKING_GROUP)),
    ("Telemetry", Some(TELEMETRY_GROUP)),
    ("AuthorizationPolicy", Some(SECURITY_GROUP)),
    ("EndpointSlice", Some(DISCOVERY_GROUP)),
];

/// Edit distance, for naming the kind a typo meant.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = if ca == *cb {
                prev
            } else {
                1 + prev.min(cur).min(row[j])
            };
            prev = cur;
        }
    }
    row[b.len()]
}

/// How a skipped object is named on stderr: its kind, and what it
/// probably meant when that is one of the kinds read; and whether it
/// looks like a mistake.
fn skipped_key(kind: &str, api: &str) -> (String, bool) {
    if api.starts_with(GATEWAY_API_GROUP) {
        // The Gateway API's Gateway is no misspelt Istio Gateway.
        return (format!("{kind} ({api})"), false);
    }
    if let Some((_, group)) = READ_KINDS.iter().find(|(k, _)| *k == kind) {
        let wanted = group.unwrap_or("the core or apps/batch groups");
        return (
            format!("{kind} in apiVersion {api:?} (read from {wanted})"),
            true,
        );
    }
    let lower = kind.to_ascii_lowercase();
    match READ_KINDS
        .iter()
        .map(|(k, _)| (distance(&lower, &k.to_ascii_lowercase()), *k))
        .filter(|(d, k)| *d <= 2 && *d < k.len() / 2 + 1)
        .min()
    {
        Some((_, meant)) => (format!("{kind} (did you mean {meant}?)"), true),
        None => (kind.to_string(), false),
    }
}

/// What `Inputs::add` did with one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Added {
    Object,
    /// A kind scoping does not read (Secrets, Ingresses, ...).
    Ignored,
}

fn decode<T: serde::de::DeserializeOwned>(kind: &str, v: Value) -> Result<T, Error> {
    let name = v
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>")
        .to_string();
    serde_json::from_value(v).map_err(|e| Error::Object {
        kind: kind.to_string(),
        name,
        reason: e.to_string(),
    })
}

impl Inputs {
    /// Adds one object, or each item of a `List`. Returns how many objects
    /// were kept.
    pub fn add(&mut self, v: Value) -> Result<usize, Error> {
        let kind = v.get("kind").and_then(Value::as_str).ok_or(Error::NoKind)?;
        if kind == "List" || kind.ends_with("List") && v.get("items").is_some() {
            let items = match v {
                Value::Object(mut m) => m.remove("items"),
                _ => None,
            };
            let mut n = 0;
            if let Some(Value::Array(items)) = items {
                for item in items {
                    n += self.add(item)?;
                }
            }
            return Ok(n);
        }
        Ok(match self.add_one(v)? {
            Added::Object => 1,
            Added::Ignored => 0,
        })
    }

    fn add_one(&mut self, v: Value) -> Result<Added, Error> {
        let kind = v
            .get("kind")
            .and_then(Value::as_str)
            .ok_or(Error::NoKind)?
            .to_string();
        let api = v
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let group = api.split_once('/').map(|(g, _)| g).unwrap_or("");
        let istio = group == NETWORKING_GROUP;
        match (kind.as_str(), istio) {
            ("Telemetry", _) if group == TELEMETRY_GROUP => {
                self.telemetries.push(decode(&kind, v)?)
            }
            ("AuthorizationPolicy", _) if group == SECURITY_GROUP => {
                self.authorization_policies.push(decode(&kind, v)?)
            }
            ("EndpointSlice", _) if group == DISCOVERY_GROUP => {
                self.endpoint_slices.push(decode(&kind, v)?)
            }
            (k, _) if group == GATEWAY_API_GROUP && RouteKind::of(k).is_some() => {
                let mut r: crate::gateway_api::Route = decode(&kind, v)?;
                r.kind = RouteKind::of(&kind).expect("matched above");
                self.routes.push(r)
            }
            ("Gateway", _) if group == GATEWAY_API_GROUP => {
                self.kube_gateways.push(decode(&kind, v)?)
            }
            ("GatewayClass", _) if group == GATEWAY_API_GROUP => {
                self.gateway_classes.push(decode(&kind, v)?)
            }
            ("ReferenceGrant", _) if group == GATEWAY_API_GROUP => {
                self.reference_grants.push(decode(&kind, v)?)
            }
            ("Namespace", false) => self.namespaces.push(decode(&kind, v)?),
            ("Pod", false) => {
                let pod = decode(&kind, v)?;
                self.add_pods(vec![pod])
            }
            ("Deployment", false) => self.deployments.push(decode(&kind, v)?),
            ("StatefulSet", false) => self.statefulsets.push(decode(&kind, v)?),
            ("DaemonSet", false) => self.daemonsets.push(decode(&kind, v)?),
            ("ReplicaSet", false) => self.replicasets.push(decode(&kind, v)?),
            ("Job", false) => self.jobs.push(decode(&kind, v)?),
            ("CronJob", false) => self.cronjobs.push(decode(&kind, v)?),
            ("Service", false) => self.services.push(decode(&kind, v)?),
            ("ConfigMap", false)
                if v.pointer("/metadata/name").and_then(Value::as_str) == Some("istio") =>
            {
                self.mesh_config_maps.push(decode(&kind, v)?)
            }
            ("ServiceEntry", true) => self.service_entries.push(decode(&kind, v)?),
            ("Sidecar", true) => self.sidecars.push(decode(&kind, v)?),
            ("VirtualService", true) => self.virtual_services.push(decode(&kind, v)?),
            ("DestinationRule", true) => self.destination_rules.push(decode(&kind, v)?),
            ("Gateway", true) => self.gateways.push(decode(&kind, v)?),
            ("EnvoyFilter", true) => self.envoy_filters.push(decode(&kind, v)?),
            ("ConfigMap", false) if self.manifest_hints => {
                let mut cm: ConfigMap = decode(&kind, v)?;
                cm.binary_data = None;
                self.config_maps.push(cm)
            }
            ("ConfigMap", false) => return Ok(Added::Ignored),
            _ => {
                let (key, mistake) = skipped_key(&kind, api);
                *self.skipped.entry(key).or_default() += 1;
                self.skipped_mistakes += usize::from(mistake);
                return Ok(Added::Ignored);
            }
        }
        Ok(Added::Object)
    }

    /// Adds pods decoded elsewhere (listed from the API server), keeping
    /// their hint strings only with [`Inputs::manifest_hints`].
    pub fn add_pods(&mut self, pods: Vec<Pod>) {
        let keep = self.manifest_hints;
        self.pods.extend(pods.into_iter().map(|mut p| {
            if !keep {
                p.drop_hints();
            }
            p
        }));
    }

    /// One line naming the objects skipped for their kind, if any.
    pub fn skipped_note(&self) -> Option<String> {
        if self.skipped.is_empty() {
            return None;
        }
        let n: usize = self.skipped.values().sum();
        let kinds: Vec<String> = self
            .skipped
            .iter()
            .map(|(k, c)| format!("{k}: {c}"))
            .collect();
        Some(format!(
            "{n} {} of kinds meshscope does not read skipped: {}",
            if n == 1 { "object" } else { "objects" },
            kinds.join(", ")
        ))
    }

    /// The mesh config text: the `mesh` key of ConfigMap `istio` in the root
    /// namespace. The root namespace is itself set in that text, so take the
    /// ConfigMap in `istio-system` first, then any other one.
    pub fn mesh_config_text(&self) -> Option<&str> {
        fn mesh(cm: &ConfigMap) -> Option<&str> {
            cm.data.as_ref()?.get("mesh").map(String::as_str)
        }
        self.mesh_config_maps
            .iter()
            .find(|cm| cm.metadata.namespace.as_deref() == Some("istio-system"))
            .and_then(mesh)
            .or_else(|| self.mesh_config_maps.iter().find_map(mesh))
    }

    pub fn len(&self) -> usize {
        self.namespaces.len()
            + self.pods.len()
            + self.deployments.len()
            + self.statefulsets.len()
            + self.daemonsets.len()
            + self.replicasets.len()
            + self.jobs.len()
            + self.cronjobs.len()
            + self.services.len()
            + self.service_entries.len()
            + self.sidecars.len()
            + self.virtual_services.len()
            + self.destination_rules.len()
            + self.gateways.len()
            + self.envoy_filters.len()
            + self.telemetries.len()
            + self.authorization_policies.len()
            + self.mesh_config_maps.len()
            + self.config_maps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Which kinds it holds; `mesh_config_given` is `--mesh-config`.
    pub fn kinds(&self, mesh_config_given: bool) -> InputKinds {
        InputKinds {
            workloads: !(self.pods.is_empty()
                && self.deployments.is_empty()
                && self.statefulsets.is_empty()
                && self.daemonsets.is_empty()
                && self.replicasets.is_empty()
                && self.jobs.is_empty()
                && self.cronjobs.is_empty()),
            namespaces: !self.namespaces.is_empty(),
            services: !self.services.is_empty(),
            service_entries: !self.service_entries.is_empty(),
            sidecars: !self.sidecars.is_empty(),
            virtual_services: !self.virtual_services.is_empty(),
            telemetry_or_authz: !(self.telemetries.is_empty()
                && self.authorization_policies.is_empty()),
            mesh_config: mesh_config_given || self.mesh_config_text().is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pods_managed_fields_are_not_kept_and_the_rest_of_its_metadata_is() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "w0", "namespace": "n", "uid": "u-1", "generateName": "w-",
                "creationTimestamp": "2026-01-02T03:04:05Z", "resourceVersion": "7",
                "labels": {"app": "w0"}, "annotations": {"a": "b"}, "finalizers": ["f"],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "w-1", "uid": "u-2", "controller": true}],
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}}}}}}]
            },
            "spec": {"containers": [{"name": "app"}]}
        }))
        .unwrap();
        let m = &pod.metadata;
        assert!(m.managed_fields.is_none());
        assert_eq!(
            (m.name.as_deref(), m.namespace.as_deref()),
            (Some("w0"), Some("n"))
        );
        assert_eq!(
            (m.uid.as_deref(), m.generate_name.as_deref()),
            (Some("u-1"), Some("w-"))
        );
        assert_eq!(m.resource_version.as_deref(), Some("7"));
        assert!(m.creation_timestamp.is_some());
        assert_eq!(m.labels.as_ref().unwrap()["app"], "w0");
        assert_eq!(m.annotations.as_ref().unwrap()["a"], "b");
        assert_eq!(m.finalizers.as_deref(), Some(&["f".to_string()][..]));
        assert_eq!(m.owner_references.as_ref().unwrap()[0].name, "w-1");
        let bare: Pod = serde_json::from_value(serde_json::json!({"metadata": null})).unwrap();
        assert!(bare.metadata.name.is_none());
    }

    #[test]
    fn objects_of_kinds_not_read_are_counted_and_named_with_what_a_typo_meant() {
        let mut inputs = Inputs::default();
        let obj = |api: &str, kind: &str| serde_json::json!({"apiVersion": api, "kind": kind, "metadata": {"name": "x", "namespace": "n"}});
        for (api, kind) in [
            ("apps/v1", "Deploymnet"),
            ("apps/v1", "Deploymnet"),
            ("v1", "Secret"),
            ("v1", "Sidecar"),
            ("networking.istio.io/v1", "SideCar"),
            ("v1", "ConfigMap"),
        ] {
            assert_eq!(inputs.add(obj(api, kind)).unwrap(), 0, "{kind}");
        }
        assert_eq!(
            inputs.skipped_note().unwrap(),
            "5 objects of kinds meshscope does not read skipped: Deploymnet (did you mean Deployment?): 2, Secret: 1, SideCar (did you mean Sidecar?): 1, Sidecar in apiVersion \"v1\" (read from networking.istio.io): 1"
        );
        // A ConfigMap other than the mesh config's is read and not needed:
        // not a kind skipped.
        assert!(!inputs.skipped.keys().any(|k| k.contains("ConfigMap")));
        assert_eq!(Inputs::default().skipped_note(), None);
        // Telemetry and AuthorizationPolicy are read from their own groups.
        let mut inputs = Inputs::default();
        assert_eq!(
            inputs
                .add(obj("telemetry.istio.io/v1", "Telemetry"))
                .unwrap(),
            1
        );
        assert_eq!(
            inputs
                .add(obj("security.istio.io/v1", "AuthorizationPolicy"))
                .unwrap(),
            1
        );
        assert_eq!(
            inputs
                .add(obj("networking.istio.io/v1", "Telemetry"))
                .unwrap(),
            0
        );
        assert_eq!(
            (
                inputs.telemetries.len(),
                inputs.authorization_policies.len()
            ),
            (1, 1)
        );
        assert_eq!(
            inputs.skipped_note().unwrap(),
            "1 object of kinds meshscope does not read skipped: Telemetry in apiVersion \"networking.istio.io/v1\" (read from telemetry.istio.io): 1"
        );
        // Short kinds are not "typos" of each other.
        assert_eq!(skipped_key("Pdb", "v1"), ("Pdb".to_string(), false));
    }

    #[test]
    fn pods_keep_what_the_engine_reads_and_skip_the_rest() {
        let v = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "a"}},
            "spec": {
                "hostNetwork": true,
                "initContainers": null,
                "containers": [
                    {"name": "app", "image": "x", "env": [{"name": "A", "value": "1"}],
                     "ports": [{"containerPort": 80}, {"containerPort": 81}],
                     "resources": {"limits": {"cpu": "1"}}},
                    {"name": "istio-proxy", "ports": null}
                ],
                "volumes": [{"name": "v", "emptyDir": {}}]
            },
            "status": {"phase": "Running", "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}],
                       "containerStatuses": [{"name": "istio-proxy", "restartCount": 2, "ready": true}]}
        });
        let mut inputs = Inputs::default();
        assert_eq!(inputs.add(v).unwrap(), 1);
        let p = &inputs.pods[0];
        assert_eq!(p.metadata.name.as_deref(), Some("p"));
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.host_network, Some(true));
        assert!(spec.init_containers.is_empty());
        let ports: Vec<(&str, u32)> = spec
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.ports))
            .collect();
        assert_eq!(ports, [("app", 2), ("istio-proxy", 0)]);
        let st = p.status.as_ref().unwrap();
        assert_eq!(st.pod_ip.as_deref(), Some("10.0.0.1"));
        assert_eq!(st.pod_ips[0].ip, "10.0.0.1");
        assert_eq!(st.container_statuses[0].restart_count, 2);
        // A field of the wrong type is still an error naming the pod.
        let bad = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"},
                                     "spec": {"containers": "app"}});
        let err = inputs.add(bad).unwrap_err().to_string();
        assert!(
            err.contains("Pod q") && err.contains("invalid type"),
            "{err}"
        );
    }
}
